#!/usr/bin/env python3
"""The gRPC comparison: every built-in at 1 KiB and 4 KiB, offrac node vs a tonic gRPC server
exposing the same functions (unary calls, same payloads).

Latency: one closed-loop client (blocking sockets on both; the node also with a busy-polling
client). Throughput: 8 closed-loop clients. Three repetitions; medians of each figure.
Writes results.csv, plot.png and summary.md here.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from _bench import REPO, finish, grpc_server, log, machine, md_table, median, node
from _bench import load as run_load

HERE = Path(__file__).resolve().parent
CONFIG = REPO / "experiments" / "configs" / "builtins.toml"
FUNCS = {"echo": "", "topk": ":16", "logit": "", "minmax": ""}
SIZES = [1024, 4096]
TPUT_CLIENTS = 8
REPS = 3
QUICK = "--quick" in sys.argv
DUR, WARM = (0.3, 0.1) if QUICK else (1.0, 0.3)
# (case name, server, protocol, busy-poll client, clients)
CASES = [
    ("node", "node", "wire", False, 1),
    ("node-busypoll", "node", "wire", True, 1),
    ("grpc", "grpc", "grpc", False, 1),
    ("node-tput", "node", "wire", False, TPUT_CLIENTS),
    ("grpc-tput", "grpc", "grpc", False, TPUT_CLIENTS),
]
FIELDS = ["case", "function", "bytes", "rep", "clients", "req_per_s", "p25_us", "p50_us", "p75_us", "p99_us"]


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with node(CONFIG) as n, grpc_server() as g:
        addrs = {"node": n.addr, "grpc": g.addr}
        for rep in range(REPS):
            for f, param in FUNCS.items():
                for size in SIZES:
                    for case, srv, proto, busy, clients in CASES:
                        r = run_load(
                            addrs[srv],
                            clients=clients,
                            mix=f"{f}:{size}{param}",
                            duration=DUR,
                            warmup=WARM,
                            busy_poll=busy,
                            protocol=proto,
                        )
                        t = dict(r["total"])
                        t.update(case=case, function=f, bytes=size, rep=rep, clients=clients)
                        rows.append(t)
                        log(f"{case} {f}/{size}: p50 {t['p50_us']:.1f} us, {t['req_per_s']:.0f} req/s")
    return rows


def med(rows: list[dict[str, Any]], case: str, f: str, size: int, key: str) -> float:
    return median([r[key] for r in rows if r["case"] == case and r["function"] == f and r["bytes"] == size])


def plot(rows: list[dict[str, Any]]) -> None:
    fig, (la, ta) = plt.subplots(1, 2, figsize=(12, 4.2))
    labels = [f"{f}\n{s} B" for f in FUNCS for s in SIZES]
    xs = range(len(labels))
    for off, case in ((-0.27, "node-busypoll"), (0.0, "node"), (0.27, "grpc")):
        ys = [med(rows, case, f, s, "p50_us") for f in FUNCS for s in SIZES]
        la.bar([x + off for x in xs], ys, width=0.27, label=case)
    for off, case in ((-0.2, "node-tput"), (0.2, "grpc-tput")):
        ys = [med(rows, case, f, s, "req_per_s") / 1000 for f in FUNCS for s in SIZES]
        ta.bar([x + off for x in xs], ys, width=0.4, label=case)
    la.set_ylabel("p50 latency, 1 client (us)")
    ta.set_ylabel(f"kreq/s, {TPUT_CLIENTS} clients")
    for a in (la, ta):
        a.set_xticks(list(xs), labels, fontsize=7)
        a.grid(axis="y", alpha=0.3)
        a.legend(fontsize=8)
    fig.suptitle("offrac node vs tonic gRPC, same functions and payloads (loopback, 2 shared cores)")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=110)


def summarize(rows: list[dict[str, Any]]) -> str:
    table = []
    for f in FUNCS:
        for s in SIZES:
            n1, nb, g1 = (med(rows, c, f, s, "p50_us") for c in ("node", "node-busypoll", "grpc"))
            nt, gt = (med(rows, c, f, s, "req_per_s") for c in ("node-tput", "grpc-tput"))
            table.append(
                [
                    f,
                    s,
                    f"{nb:.1f}",
                    f"{n1:.1f}",
                    f"{g1:.1f}",
                    f"{g1 / n1:.1f}x",
                    f"{g1 / nb:.1f}x",
                    f"{nt / 1000:.1f}",
                    f"{gt / 1000:.1f}",
                    f"{nt / gt:.1f}x",
                ]
            )
    return "\n".join(
        [
            "# offrac node vs gRPC (tonic), same functions and payloads",
            "",
            f"Machine: {machine()}. Load generator and servers share the same 2 cores;"
            " the gRPC server has 2 tokio worker threads.",
            "Command: `python3 experiments/grpc_compare/run.py`. Median of 3 runs per cell.",
            "",
            md_table(
                [
                    "function",
                    "bytes",
                    "node p50 µs (busy-poll client)",
                    "node p50 µs",
                    "gRPC p50 µs",
                    "gRPC/node p50",
                    "gRPC/node (busy-poll)",
                    f"node kreq/s ({TPUT_CLIENTS} cl.)",
                    "gRPC kreq/s",
                    "node/gRPC throughput",
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
