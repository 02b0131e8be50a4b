#!/usr/bin/env python3
"""Seed 001 Fig. 10: per-client latency of chained and standalone operators at high concurrency.

Two nodes on loopback (A = device 0, B = device 1, each in the other's device table; blocking
I/O so that 24 clients and two nodes can share 2 cores). 24 closed-loop clients send 1 KiB of
hashed ids to A as:

- `mapid`, `sparsetransform`          one operator, standalone;
- `mapid -> sparsetransform`          the two chained inside A (one request);
- `mapid@A -> sparsetransform@B`      the chain across the two nodes.

For every client: its P5, P50 and P95 round trip. The table gives the median over clients of
each, the cross-client jitter Δ = P95 - P5 (median over clients) and the spread of the
per-client medians (P95 - P5 of the client P50s). `--quick` shortens the runs (smoke test).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from _bench import finish, log, machine, md_table, median, node_pair
from _bench import load as run_load

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
CLIENTS = 24
SIZE = 1024
DUR, WARM = (0.5, 0.2) if QUICK else (4.0, 1.0)
CASES: dict[str, tuple[str, str]] = {
    "mapid": ("mapid", ""),
    "sparsetransform": ("sparsetransform", ""),
    "mapid -> sparsetransform": ("mapid", "mapid,sparsetransform"),
    "mapid@A -> sparsetransform@B": ("mapid", "mapid,sparsetransform@1"),
}
FIELDS = ["case", "client", "ok", "req_per_s", "p5_us", "p50_us", "p95_us", "p99_us"]


def main() -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        a, b = node_pair(Path(d), "blocking", ["mapid", "sparsetransform"])
        with a, b:
            run_load(
                a.addr, clients=1, mix="mapid:64", duration=0.2, warmup=0.5, chain="mapid,sparsetransform@1"
            )
            for case, (function, chain) in CASES.items():
                r = run_load(
                    a.addr,
                    clients=CLIENTS,
                    mix=f"{function}:{SIZE}",
                    duration=DUR,
                    warmup=WARM,
                    chain=chain,
                )
                for c in r["per_client"]:
                    rows.append({"case": case} | {k: c[k] for k in FIELDS if k in c})
                log(f"{case}: {r['total']['req_per_s']:.0f} req/s, errors {r['total']['errors']}")
    finish(HERE, rows, FIELDS, plot, summarize)


def per_case(rows: list[dict[str, Any]], case: str) -> list[dict[str, Any]]:
    return [r for r in rows if r["case"] == case and r["ok"] > 0]


def plot(rows: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(10, 4.2))
    for k, case in enumerate(CASES):
        pts = per_case(rows, case)
        xs = [k + (i - len(pts) / 2) * 0.04 for i in range(len(pts))]
        p50 = [r["p50_us"] for r in pts]
        lo = [r["p50_us"] - r["p5_us"] for r in pts]
        hi = [r["p95_us"] - r["p50_us"] for r in pts]
        ax.errorbar(xs, p50, yerr=[lo, hi], fmt="o", ms=3, capsize=2, label=case)
    ax.set_xticks(range(len(CASES)), list(CASES))
    ax.set_ylabel("round trip (µs): P5 / P50 / P95 per client")
    ax.set_title(f"{CLIENTS} clients, {SIZE} B of hashed ids")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=120)


def summarize(rows: list[dict[str, Any]]) -> str:
    table = []
    for case in CASES:
        pts = per_case(rows, case)
        p50s = sorted(r["p50_us"] for r in pts)
        spread = p50s[int(0.95 * (len(p50s) - 1))] - p50s[int(0.05 * (len(p50s) - 1))] if p50s else 0.0
        table.append(
            [
                case,
                f"{sum(r['req_per_s'] for r in pts) / 1e3:.1f}",
                f"{median([r['p5_us'] for r in pts]):.0f}",
                f"{median([r['p50_us'] for r in pts]):.0f}",
                f"{median([r['p95_us'] for r in pts]):.0f}",
                f"{median([r['p95_us'] - r['p5_us'] for r in pts]):.0f}",
                f"{spread:.0f}",
            ]
        )
    return "\n".join(
        [
            "# Seed 001 Fig. 10: per-client latency, chained and standalone operators",
            "",
            f"Machine: {machine()}. {CLIENTS} closed-loop clients, {DUR} s each;",
            "`python3 experiments/fig10_chain_jitter/run.py`. Medians over clients.",
            "",
            md_table(
                [
                    "case",
                    "k req/s",
                    "P5 µs",
                    "P50 µs",
                    "P95 µs",
                    "Δ = P95 - P5 µs",
                    "spread of client P50s µs",
                ],
                table,
            ),
            "",
            f"{CLIENTS} clients and two nodes share 2 cores, so every figure includes waiting for a CPU; "
            "the paper's FPGA keeps Δ near constant whether operators are chained or not.",
            "",
        ]
    )


if __name__ == "__main__":
    main()
