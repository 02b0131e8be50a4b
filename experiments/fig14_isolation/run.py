#!/usr/bin/env python3
"""Fig. 14: isolation. Top-k, logit and min-max at 1 KiB, each alone (one client), then together
with a long-running 64x64 f32 matmul (OffRAC Table 5 A5) in its own slot: four clients, each
sending one function; as a control, the three short ones together without matmul.
Three repetitions; medians. Writes results.csv, plot.png, summary.md here.
"""

from __future__ import annotations

import sys
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
ITEMS = {"topk": "topk:1024:16", "logit": "logit:1024", "minmax": "minmax:1024", "matmul": "matmul:32768:64"}
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


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with node(CONFIG) as n:
        for rep in range(REPS):
            for f, item in ITEMS.items():
                r = run_load(n.addr, clients=1, mix=item, duration=DUR, warmup=WARM)
                row = dict(r["rows"][0])
                row.update(phase="alone", rep=rep, function=f)
                rows.append(row)
                log(f"alone {f}: p50 {row['p50_us']:.1f} us")
            # Control: the three short functions together, without the long one.
            short = [f for f in ITEMS if f != "matmul"]
            r = run_load(
                n.addr,
                clients=len(short),
                mix=",".join(ITEMS[f] for f in short),
                duration=DUR,
                warmup=WARM,
                item_per_client=True,
            )
            for f, row in zip(short, r["rows"], strict=True):
                row = dict(row)
                row.update(phase="short-only", rep=rep, function=f)
                rows.append(row)
                log(f"short-only {f}: p50 {row['p50_us']:.1f} us")
            r = run_load(
                n.addr,
                clients=len(ITEMS),
                mix=",".join(ITEMS.values()),
                duration=DUR,
                warmup=WARM,
                item_per_client=True,
            )
            for f, row in zip(ITEMS, r["rows"], strict=True):
                row = dict(row)
                row.update(phase="mixed", rep=rep, function=f)
                rows.append(row)
                log(f"mixed {f}: p50 {row['p50_us']:.1f} us")
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
        label = {"short-only": "3 short together", "mixed": "mixed (+ matmul)"}.get(phase, phase)
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
            "",
            md_table(
                [
                    "function",
                    "bytes",
                    "alone p50 µs",
                    "3 short together p50 µs",
                    "mixed (+ matmul) p50 µs",
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
