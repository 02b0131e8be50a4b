#!/usr/bin/env python3
"""Seed 001 Fig. 6: chaining MapId and SparseTransform in one node and across two nodes.

Two nodes on loopback (A = device 0, B = device 1, each in the other's device table, blocking
I/O). Closed-loop clients send 1 KiB of hashed ids (90 % in MapId's built-in dictionary) to A:

- `mapid`, `sparsetransform`              one operator alone on A;
- `mapid -> sparsetransform`              both in A, one request (in-node chain);
- `mapid@A -> sparsetransform@B`          the chain across the two nodes.

Clients swept 1..16; for each point the throughput, median and P95 latency (the paper's
shaded P95 band), each the median of 3 rounds that interleave the cases (one client against a
sleeping node varies with wake-up luck). `--quick` shortens the runs (smoke test).
"""

from __future__ import annotations

import itertools
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
SIZE = 1024
CLIENTS = [1, 4] if QUICK else [1, 2, 4, 8, 16]
DUR, WARM = (0.4, 0.1) if QUICK else (1.5, 0.3)
ROUNDS = 1 if QUICK else 3
CASES: dict[str, tuple[str, str]] = {
    "mapid": ("mapid", ""),
    "sparsetransform": ("sparsetransform", ""),
    "mapid -> sparsetransform (one node)": ("mapid", "mapid,sparsetransform"),
    "mapid@A -> sparsetransform@B": ("mapid", "mapid,sparsetransform@1"),
}
FIELDS = ["round", "case", "clients", "req_per_s", "gbit_per_s", "p50_us", "p95_us", "errors"]


def main() -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        a, b = node_pair(Path(d), "blocking", ["mapid", "sparsetransform"])
        with a, b:
            run_load(
                a.addr, clients=1, mix="mapid:64", duration=0.2, warmup=0.5, chain="mapid,sparsetransform@1"
            )
            for rnd, k, case in itertools.product(range(ROUNDS), CLIENTS, CASES):
                function, chain = CASES[case]
                r = run_load(
                    a.addr, clients=k, mix=f"{function}:{SIZE}", duration=DUR, warmup=WARM, chain=chain
                )
                t = r["total"]
                rows.append(
                    {
                        "round": rnd,
                        "case": case,
                        "clients": k,
                        "req_per_s": t["req_per_s"],
                        "gbit_per_s": t["gbit_per_s"],
                        "p50_us": t["p50_us"],
                        "p95_us": t["p95_us"],
                        "errors": t["errors"],
                    }
                )
                log(f"{case} x{k}: {t['req_per_s']:.0f} req/s, p50 {t['p50_us']:.1f} us")
    finish(HERE, rows, FIELDS, plot, summarize)


def at(rows: list[dict[str, Any]], case: str, k: int) -> dict[str, float]:
    """Medians over rounds of one point."""
    pts = [r for r in rows if r["case"] == case and r["clients"] == k]
    return {key: median([p[key] for p in pts]) for key in ("req_per_s", "p50_us", "p95_us")}


def plot(rows: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for case in CASES:
        pts = [at(rows, case, k) for k in CLIENTS]
        x = [r["req_per_s"] / 1e3 for r in pts]
        line = ax.plot(x, [r["p50_us"] for r in pts], marker="o", ms=3, label=case)[0]
        ax.fill_between(
            x, [r["p50_us"] for r in pts], [r["p95_us"] for r in pts], color=line.get_color(), alpha=0.15
        )
    ax.set_xlabel("throughput (k req/s, 1 KiB)")
    ax.set_ylabel("latency (µs): median, band to P95")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.set_title("MapId and SparseTransform: alone, chained in a node, chained across nodes")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=120)


def summarize(rows: list[dict[str, Any]]) -> str:
    body = [
        [
            case,
            k,
            f"{at(rows, case, k)['req_per_s'] / 1e3:.1f}",
            f"{at(rows, case, k)['p50_us']:.1f}",
            f"{at(rows, case, k)['p95_us']:.1f}",
        ]
        for case in CASES
        for k in CLIENTS
    ]
    peak = {c: max(at(rows, c, k)["req_per_s"] for k in CLIENTS) for c in CASES}
    one = {c: at(rows, c, 1)["p50_us"] for c in CASES}
    cases = list(CASES)
    return (
        "# Seed 001 Fig. 6: MapId -> SparseTransform in one node and across two\n\n"
        f"Machine: {machine()}. Command: `python3 experiments/fig6_dlrm_chain/run.py`. "
        f"Two blocking nodes and the load generator share the 2 cores; {DUR} s per point.\n\n"
        + md_table(["case", "clients", "k req/s", "p50 µs", "p95 µs"], body)
        + "\nOne client: the in-node chain adds "
        f"{one[cases[2]] - one[cases[0]]:+.1f} µs over MapId alone, the cross-node chain "
        f"{one[cases[3]] - one[cases[2]]:+.1f} µs over the in-node chain. Peak throughput: "
        + ", ".join(f"{c} {peak[c] / 1e3:.1f} k req/s" for c in CASES)
        + ".\n"
    )


if __name__ == "__main__":
    main()
