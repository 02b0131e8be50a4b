#!/usr/bin/env python3
"""Fig. 15: reassembly. Requests of 1, 2 and 4 fragments of 1 KiB each (separate writes, 20 us
apart so they arrive as separate segments), top-k, logit and min-max, one busy-polling client;
latency measured from when the last fragment was sent. Three repetitions; medians.
Writes results.csv, plot.png, summary.md here.
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
FUNCS = {"topk": ":16", "logit": "", "minmax": ""}
FRAGS = [1, 2, 4]
GAP_US = 20.0
REPS = 3
QUICK = "--quick" in sys.argv
DUR, WARM = (0.3, 0.1) if QUICK else (1.5, 0.3)
FIELDS = [
    "function",
    "fragments",
    "bytes",
    "rep",
    "last_frag_p50_us",
    "last_frag_p99_us",
    "p50_us",
    "reassembly_us",
    "exec_us",
]


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with node(CONFIG) as n:
        for rep in range(REPS):
            for f, param in FUNCS.items():
                for k in FRAGS:
                    size = 1024 * k
                    r = run_load(
                        n.addr,
                        clients=1,
                        mix=f"{f}:{size}{param}",
                        duration=DUR,
                        warmup=WARM,
                        fragments=k,
                        gap_us=GAP_US if k > 1 else 0.0,
                        busy_poll=True,
                    )
                    row = dict(r["rows"][0])
                    row.update(function=f, fragments=k, rep=rep)
                    rows.append(row)
                    log(f"{f} {k} fragments: from last {row['last_frag_p50_us']:.1f} us")
    return rows


def med(rows: list[dict[str, Any]], f: str, k: int, key: str) -> float:
    return median([r[key] for r in rows if r["function"] == f and r["fragments"] == k])


def plot(rows: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    width = 0.25
    for i, k in enumerate(FRAGS):
        ys = [med(rows, f, k, "last_frag_p50_us") for f in FUNCS]
        ax.bar([x + (i - 1) * width for x in range(len(FUNCS))], ys, width=width, label=f"{k} x 1 KiB")
    ax.set_xticks(range(len(FUNCS)), list(FUNCS))
    ax.set_ylabel("p50 from last fragment sent (us)")
    ax.set_title("Fig. 15 on loopback: request size in 1 KiB fragments")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=110)


def summarize(rows: list[dict[str, Any]]) -> str:
    table = []
    for f in FUNCS:
        base = med(rows, f, 1, "last_frag_p50_us")
        for k in FRAGS:
            v = med(rows, f, k, "last_frag_p50_us")
            table.append(
                [
                    f,
                    k,
                    1024 * k,
                    f"{v:.1f}",
                    f"{v / base:.2f}",
                    f"{k:.0f}",
                    f"{med(rows, f, k, 'reassembly_us'):.1f}",
                    f"{med(rows, f, k, 'exec_us'):.2f}",
                ]
            )
    return "\n".join(
        [
            "# Fig. 15: reassembly, 1/2/4 fragments of 1 KiB",
            "",
            f"Machine: {machine()}. Load generator and node share the same 2 cores.",
            f"Command: `python3 experiments/fig15_reassembly/run.py`. Fragments {GAP_US:.0f} µs apart;"
            " median of 3 runs.",
            "",
            md_table(
                [
                    "function",
                    "fragments",
                    "bytes",
                    "p50 from last fragment µs",
                    "vs 1 fragment",
                    "linear would be",
                    "node reassembly µs",
                    "exec µs",
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
