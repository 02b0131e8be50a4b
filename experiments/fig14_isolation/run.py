#!/usr/bin/env python3
"""Fig. 14: isolation. Top-k, logit and min-max at 1 KiB and the CNN (OffRAC's A4, a 24 KiB
image sent as six 4 KiB fragments), each alone (one client), then all four together, each
function on its own client and slot; as a control, the three short ones together without the
CNN. Three repetitions; medians. Writes results.csv, plot.png, summary.md here.
"""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from _bench import REPO, finish, log, machine, md_table, median, node
from _bench import load as run_load

HERE = Path(__file__).resolve().parent
CONFIG = REPO / "experiments" / "configs" / "isolation.toml"
ITEMS = {"topk": "topk:1024:16", "logit": "logit:1024", "minmax": "minmax:1024", "cnn": "cnn:24576"}
LONG = "cnn"
#: The paper sends each CNN image as six 4 KB fragments; the short requests go whole.
CNN_FRAGMENTS = 6
REPS = 3
QUICK = "--quick" in sys.argv
DUR, WARM = (0.3, 0.1) if QUICK else (2.0, 0.5)
FIELDS = [
    "phase",
    "rep",
    "function",
    "ok",
    "req_per_s",
    "p25_us",
    "p50_us",
    "p75_us",
    "p99_us",
    "exec_us",
    "queue_us",
]


def _load(addr: str, functions: list[str]) -> list[dict[str, Any]]:
    """One run of `functions`, one client each, all at once: the short ones from one load
    generator, the CNN (fragmented) from a second one started beside it."""
    short = [f for f in functions if f != LONG]
    jobs: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        if short:
            jobs["short"] = pool.submit(
                run_load,
                addr,
                clients=len(short),
                mix=",".join(ITEMS[f] for f in short),
                duration=DUR,
                warmup=WARM,
                item_per_client=True,
            )
        if LONG in functions:
            jobs["long"] = pool.submit(
                run_load,
                addr,
                clients=1,
                mix=ITEMS[LONG],
                duration=DUR,
                warmup=WARM,
                fragments=CNN_FRAGMENTS,
            )
        out = {k: j.result() for k, j in jobs.items()}
    rows = [dict(r, function=f) for f, r in zip(short, out["short"]["rows"], strict=True)] if short else []
    if "long" in out:
        rows.append(dict(out["long"]["rows"][0], function=LONG))
    return rows


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with node(CONFIG) as n:
        for rep in range(REPS):
            for f in ITEMS:
                for row in _load(n.addr, [f]):
                    rows.append(dict(row, phase="alone", rep=rep))
                    log(f"alone {f}: p50 {row['p50_us']:.1f} us")
            # Control: the three short functions together, without the long one.
            for row in _load(n.addr, [f for f in ITEMS if f != LONG]):
                rows.append(dict(row, phase="short-only", rep=rep))
                log(f"short-only {row['function']}: p50 {row['p50_us']:.1f} us")
            for row in _load(n.addr, list(ITEMS)):
                rows.append(dict(row, phase="mixed", rep=rep))
                log(f"mixed {row['function']}: p50 {row['p50_us']:.1f} us")
    return rows


def med(rows: list[dict[str, Any]], phase: str, f: str, key: str) -> float:
    return median([r[key] for r in rows if r["phase"] == phase and r["function"] == f])


def plot(rows: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(ITEMS)
    xs = range(len(names))
    for off, phase in ((-0.27, "alone"), (0.0, "short-only"), (0.27, "mixed")):
        p50 = [med(rows, phase, f, "p50_us") for f in names]
        lo = [p - med(rows, phase, f, "p25_us") for p, f in zip(p50, names, strict=True)]
        hi = [med(rows, phase, f, "p75_us") - p for p, f in zip(p50, names, strict=True)]
        label = {"short-only": "3 short together", "mixed": "mixed (+ CNN)"}.get(phase, phase)
        ax.bar([x + off for x in xs], p50, width=0.27, yerr=[lo, hi], capsize=3, label=label)
    ax.set_xticks(list(xs), [f"{n}\n{ITEMS[n].split(':')[1]} B" for n in names])
    ax.set_ylabel("latency p50 (us), bars p25-p75")
    ax.set_title("Fig. 14 on loopback: alone vs mixed with a long function (2 shared cores)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=110)


def summarize(rows: list[dict[str, Any]]) -> str:
    table = []
    for f in ITEMS:
        a, m = med(rows, "alone", f, "p50_us"), med(rows, "mixed", f, "p50_us")
        short = [r["p50_us"] for r in rows if r["phase"] == "short-only" and r["function"] == f]
        table.append(
            [
                f,
                ITEMS[f].split(":")[1],
                f"{a:.1f}",
                f"{median(short):.1f}" if short else "-",
                f"{m:.1f}",
                f"{m / a:.2f}",
                f"{med(rows, 'mixed', f, 'p99_us'):.1f}",
                f"{med(rows, 'mixed', f, 'exec_us'):.2f}",
                f"{med(rows, 'mixed', f, 'req_per_s') / 1000:.1f}",
            ]
        )
    return "\n".join(
        [
            "# Fig. 14: isolation with a long-running function in its own slot",
            "",
            f"Machine: {machine()}. Load generator and node share the same 2 cores.",
            "Command: `python3 experiments/fig14_isolation/run.py`. Median of 3 runs per cell.",
            "The CNN (24,576-byte image) is sent as six 4 KiB fragments by a second load generator",
            "running beside the first; the short functions' requests go whole.",
            "",
            md_table(
                [
                    "function",
                    "bytes",
                    "alone p50 µs",
                    "3 short together p50 µs",
                    "mixed (+ CNN) p50 µs",
                    "mixed / alone",
                    "mixed p99 µs",
                    "exec µs",
                    "mixed kreq/s",
                ],
                table,
            ),
            "",
        ]
    )


def main() -> None:
    finish(HERE, run(), FIELDS, plot, summarize)


if __name__ == "__main__":
    main()
