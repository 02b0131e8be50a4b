#!/usr/bin/env python3
"""Fig. 16: top-k on 1, 2, 4 node slots against the CPU baseline with 1, 2, 4 workers.

1 KiB and 4 KiB requests, 1 -> 28 closed-loop clients; median with p25/p75 and the cross-client
spread (P95 - P5 of per-client medians, seed 001 Fig. 10). Node slots run with inline execution off
(every request handed to its slot's thread), with and without the slot workers busy-polling 50 us
after a job; also the node's default (top-k run inline on its I/O thread).
Writes results.csv, plot.png and summary.md here; `--quick` for a smoke test; `--plot-only` redraws
plot.png from results.csv.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import _plots as plots
import matplotlib.pyplot as plt
from _bench import REPO, Server, cpu_server, finish, log, machine, md_table, node, read_csv
from _bench import load as run_load

HERE = Path(__file__).resolve().parent
CONFIGS = REPO / "experiments" / "configs"
CLIENTS = [1, 2, 4, 8, 16, 28]
SIZES = [1024, 4096]
K = [1, 2, 4]
QUICK = "--quick" in sys.argv
DUR, WARM = (0.3, 0.1) if QUICK else (1.0, 0.3)
FIELDS = [
    "server",
    "k",
    "bytes",
    "clients",
    "req_per_s",
    "p25_us",
    "p50_us",
    "p75_us",
    "p99_us",
    "spread_us",
    "queue_us",
    "exec_us",
    "errors",
]


def servers() -> list[tuple[str, int, Any]]:
    """(name, k, factory) for every server of the figure."""
    out: list[tuple[str, int, Any]] = []
    for k in K:
        out.append(("node-slots", k, lambda k=k: node(CONFIGS / f"topk-slots{k}.toml")))
        out.append(("node-slots-spin", k, lambda k=k: node(CONFIGS / f"topk-slots{k}-spin.toml")))
        out.append(("cpu", k, lambda k=k: cpu_server(k, "poll")))
    out.append(("node-inline", 1, lambda: node(CONFIGS / "topk-inline.toml")))
    return out


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name, k, start in servers():
        srv: Server
        with start() as srv:
            for size in SIZES:
                for c in CLIENTS:
                    rep = run_load(srv.addr, clients=c, mix=f"topk:{size}:16", duration=DUR, warmup=WARM)
                    t = dict(rep["total"])
                    t.update(server=name, k=k, bytes=size, clients=c, spread_us=rep["client_p50_spread_us"])
                    log(
                        f"{name} k={k} {size} B {c} clients:"
                        f" p50 {t['p50_us']:.1f} spread {t['spread_us']:.1f}"
                    )
                    rows.append(t)
    return rows


def label_of(name: str, k: int) -> str:
    return {
        "node-slots": f"node, {k} slot(s)",
        "node-slots-spin": f"node, {k} slot(s), worker spin 50 µs",
        "cpu": f"CPU, {k} worker(s)",
    }.get(name, "node, inline (default)")


def plot(rows: list[dict[str, Any]]) -> None:
    """plot.png from the rows (of a run, or of results.csv with `--plot-only`)."""
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for col, size in enumerate(SIZES):
        ax, sx = axes[0][col], axes[1][col]
        p50: dict[str, list[float]] = {}
        spread: dict[str, list[float]] = {}
        for i, (name, k, _) in enumerate(servers()):
            pts = [r for r in rows if r["server"] == name and r["k"] == k and r["bytes"] == size]
            if not pts:
                continue
            label = label_of(name, k)
            x = [r["clients"] for r in pts]
            y = [r["p50_us"] for r in pts]
            p50[label], spread[label] = y, [r["spread_us"] for r in pts]
            err = [[r["p50_us"] - r["p25_us"] for r in pts], [r["p75_us"] - r["p50_us"] for r in pts]]
            st = plots.style(i)
            ax.errorbar(x, y, yerr=err, capsize=2, elinewidth=0.8, alpha=0.9, label=label, **st)
            sx.plot(x, spread[label], alpha=0.9, label=label, **st)
        ax.set_title(f"top-k {size} B: latency p50 (bars p25-p75)")
        sx.set_title(f"top-k {size} B: cross-client spread (P95-P5 of client medians; 0 for 1 client)")
        plots.note_coinciding(ax, plots.coinciding(p50))
        plots.note_coinciding(sx, plots.coinciding(spread))
        ax.set_yscale("log")
        # A spread of 0 (one client) has no logarithm: linear below 1 µs.
        sx.set_yscale("symlog", linthresh=1.0)
        for a in (ax, sx):
            a.set_xlabel("closed-loop clients (log scale)")
            a.set_ylabel("µs")
            a.set_xscale("log", base=2)
            plots.integer_ticks(a, CLIENTS)
            a.grid(alpha=0.3)
    plots.legend_outside(fig, axes[0][0])
    fig.suptitle("Fig. 16 on loopback: node slots vs CPU baseline workers (2 shared cores)")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=110, bbox_inches="tight")


def read_rows() -> list[dict[str, Any]]:
    """results.csv as plot() wants it (numbers as numbers)."""
    return read_csv(HERE / "results.csv", ("server",))


def summarize(rows: list[dict[str, Any]]) -> str:
    parts = [
        "# Fig. 16: scalability, node top-k slots vs the CPU baseline",
        "",
        f"Machine: {machine()}. Load generator and servers share the same 2 cores.",
        "Command: `python3 experiments/fig16_scalability/run.py`.",
        "",
        "p50 µs (p25-p75) / spread µs (P95-P5 of per-client medians) / kreq/s",
        "",
    ]
    for size in SIZES:
        parts += [f"## top-k, {size} B", ""]
        names = [(n, k) for n, k, _ in servers()]
        header = ["clients", *[f"{n} k={k}" for n, k in names]]
        table = []
        for c in CLIENTS:
            line: list[object] = [c]
            for n, k in names:
                r = next(
                    (
                        x
                        for x in rows
                        if x["server"] == n and x["k"] == k and x["bytes"] == size and x["clients"] == c
                    ),
                    None,
                )
                line.append(
                    "-"
                    if r is None
                    else f"{r['p50_us']:.0f} ({r['p25_us']:.0f}-{r['p75_us']:.0f}) / {r['spread_us']:.0f}"
                    f" / {r['req_per_s'] / 1000:.0f}"
                )
            table.append(line)
        parts += [md_table(header, table), ""]
    return "\n".join(parts)


def main() -> None:
    if "--plot-only" in sys.argv:  # redraw plot.png from results.csv, without running anything
        plot(read_rows())
        return
    finish(HERE, run(), FIELDS, plot, summarize)


if __name__ == "__main__":
    main()
