#!/usr/bin/env python3
"""Fig. 13: node echo against the raw TCP echo floor, 4 KiB requests, 1 -> 28 closed-loop clients.

Writes results.csv (the sweep), ratio.csv (repeated one-client runs), plot.png and summary.md here.
`--quick` shortens every run (a smoke test, not a measurement); `--from-csv` re-plots and
re-summarizes the CSVs of an earlier run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from _bench import REPO, log, machine, md_table, median, node, raw_echo, read_csv, write_csv
from _bench import load as run_load

HERE = Path(__file__).resolve().parent
#: Columns of the CSVs that hold text, not numbers.
TEXT = ("io", "server", "busy_poll")
CONFIGS = REPO / "experiments" / "configs"
MIX = "echo:4096"
CLIENTS = [1, 2, 4, 8, 16, 28]
REPS = 5
SATURATED = [8, 16, 28]
QUICK = "--quick" in sys.argv
DUR, WARM = (0.3, 0.1) if QUICK else (1.5, 0.3)
RATIO_DUR, RATIO_WARM = (0.3, 0.1) if QUICK else (2.0, 0.5)
FIELDS = [
    "io",
    "server",
    "clients",
    "req_per_s",
    "gbit_per_s",
    "p25_us",
    "p50_us",
    "p75_us",
    "p99_us",
    "network_us",
    "exec_us",
    "errors",
]


def flat(report: dict[str, Any], **extra: Any) -> dict[str, Any]:
    row = dict(report["total"])
    row.update(extra)
    return row


def one_client_ratios() -> list[dict[str, Any]]:
    """Alternate node and raw, REPS times, per I/O mode (poll: busy-polling client)."""
    out: list[dict[str, Any]] = []
    for io, busy in (("poll", True), ("blocking", False)):
        with node(CONFIGS / f"echo-{io}.toml") as n, raw_echo(io) as r:
            for rep in range(REPS):
                pair = [("node", n.addr), ("raw", r.addr)]
                if rep % 2:
                    pair.reverse()
                for name, addr in pair:
                    rep_ = run_load(
                        addr, clients=1, mix=MIX, duration=RATIO_DUR, warmup=RATIO_WARM, busy_poll=busy
                    )
                    out.append(flat(rep_, io=io, server=name, clients=1, rep=rep, busy_poll=busy))
                    log(f"ratio {io} rep {rep} {name}: p50 {rep_['total']['p50_us']:.2f} us")
    return out


def sweep() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for io in ("poll", "blocking"):
        with node(CONFIGS / f"echo-{io}.toml") as n, raw_echo(io) as r:
            for c in CLIENTS:
                for name, addr in (("node", n.addr), ("raw", r.addr)):
                    rep = run_load(addr, clients=c, mix=MIX, duration=DUR, warmup=WARM)
                    t = rep["total"]
                    log(f"{io} {name} {c} clients: {t['gbit_per_s']:.2f} Gbit/s p50 {t['p50_us']:.1f} us")
                    out.append(flat(rep, io=io, server=name, clients=c))
    return out


def plot(rows: list[dict[str, Any]]) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=False)
    for ax, io in zip(axes, ("poll", "blocking"), strict=True):
        for name, style in (("raw", "o--"), ("node", "s-")):
            pts = [r for r in rows if r["io"] == io and r["server"] == name]
            x = [r["gbit_per_s"] for r in pts]
            y = [r["p50_us"] for r in pts]
            lo = [r["p50_us"] - r["p25_us"] for r in pts]
            hi = [r["p75_us"] - r["p50_us"] for r in pts]
            label = "raw TCP echo (floor)" if name == "raw" else "offrac node, echo slot"
            ax.errorbar(x, y, yerr=[lo, hi], fmt=style, capsize=3, label=label)
            for r in pts:
                ax.annotate(str(r["clients"]), (r["gbit_per_s"], r["p50_us"]), fontsize=7)
        ax.set_title(f"I/O mode: {io} (labels: clients)")
        ax.set_xlabel("payload goodput (Gbit/s, request direction)")
        ax.set_ylabel("latency p50 (us), bars p25-p75")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("Fig. 13 on loopback: 4 KiB echo, closed loop, 1-28 clients (2 shared cores)")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=110)


def summarize(sweep_rows: list[dict[str, Any]], ratio_rows: list[dict[str, Any]]) -> str:
    parts = [
        "# Fig. 13: node echo vs raw TCP echo (4 KiB, loopback)",
        "",
        f"Machine: {machine()}. Load generator and server share the same 2 cores.",
        "Command: `python3 experiments/fig13_overhead/run.py` (binary: OFFRAC_BIN or target/release).",
        "",
        "## One client, repeated (median of the per-run p50s)",
        "",
    ]
    lines = []
    for io in ("poll", "blocking"):
        node_p50 = [r["p50_us"] for r in ratio_rows if r["io"] == io and r["server"] == "node"]
        raw_p50 = [r["p50_us"] for r in ratio_rows if r["io"] == io and r["server"] == "raw"]
        if not node_p50 or not raw_p50:
            continue
        mn, mr = median(node_p50), median(raw_p50)
        client = "busy-poll" if io == "poll" else "blocking"
        lines.append(
            [
                io,
                client,
                f"{mn:.2f}",
                f"{mr:.2f}",
                f"{mn - mr:+.2f}",
                f"{mn / mr:.3f}",
                ", ".join(f"{x:.1f}" for x in node_p50),
                ", ".join(f"{x:.1f}" for x in raw_p50),
            ]
        )
    parts.append(
        md_table(
            [
                "I/O mode",
                "client",
                "node p50 µs",
                "raw p50 µs",
                "node - raw",
                "node / raw",
                "node runs",
                "raw runs",
            ],
            lines,
        )
    )
    parts += ["", "## Sweep (p50 with p25-p75; goodput = request payload)", ""]
    table = []
    for io in ("poll", "blocking"):
        for c in CLIENTS:
            pair = {r["server"]: r for r in sweep_rows if r["io"] == io and r["clients"] == c}
            if "node" not in pair or "raw" not in pair:
                continue
            nd, rw = pair["node"], pair["raw"]
            table.append(
                [
                    io,
                    c,
                    f"{nd['p50_us']:.1f} ({nd['p25_us']:.1f}-{nd['p75_us']:.1f})",
                    f"{rw['p50_us']:.1f} ({rw['p25_us']:.1f}-{rw['p75_us']:.1f})",
                    f"{nd['gbit_per_s']:.2f}",
                    f"{rw['gbit_per_s']:.2f}",
                    f"{nd['gbit_per_s'] / rw['gbit_per_s']:.2f}" if rw["gbit_per_s"] else "-",
                ]
            )
    parts.append(
        md_table(
            ["I/O", "clients", "node p50 µs", "raw p50 µs", "node Gbit/s", "raw Gbit/s", "node/raw goodput"],
            table,
        )
    )
    parts += ["", "## Goodput at saturation (best point of the sweep)", ""]
    sat = []
    for io in ("poll", "blocking"):
        best = {}
        for name in ("node", "raw"):
            pts = [r for r in sweep_rows if r["io"] == io and r["server"] == name]
            if pts:
                best[name] = max(pts, key=lambda r: r["gbit_per_s"])
        if len(best) == 2:
            nd, rw = best["node"], best["raw"]
            sat.append(
                [
                    io,
                    f"{nd['gbit_per_s']:.2f} ({nd['clients']} clients)",
                    f"{rw['gbit_per_s']:.2f} ({rw['clients']} clients)",
                    f"{nd['gbit_per_s'] / rw['gbit_per_s']:.3f}",
                ]
            )
    parts.append(md_table(["I/O", "node Gbit/s", "raw Gbit/s", "node / raw"], sat))
    parts += [
        "",
        "The best point of a noisy sweep favours whichever server had a lucky run; the median over the",
        f"saturated points ({', '.join(str(c) for c in SATURATED)} clients) is the steadier figure:",
        "",
    ]
    sat_med = []
    for io in ("poll", "blocking"):
        got = {
            name: median(
                [
                    r["gbit_per_s"]
                    for r in sweep_rows
                    if r["io"] == io and r["server"] == name and r["clients"] in SATURATED
                ]
            )
            for name in ("node", "raw")
        }
        sat_med.append([io, f"{got['node']:.2f}", f"{got['raw']:.2f}", f"{got['node'] / got['raw']:.3f}"])
    parts.append(md_table(["I/O", "node Gbit/s (median)", "raw Gbit/s (median)", "node / raw"], sat_med))
    parts.append("")
    return "\n".join(parts)


def main() -> None:
    if "--from-csv" in sys.argv:
        # Re-plot and re-summarize the committed results without measuring.
        ratio_rows, sweep_rows = read_csv(HERE / "ratio.csv", TEXT), read_csv(HERE / "results.csv", TEXT)
    else:
        ratio_rows = one_client_ratios()
        sweep_rows = sweep()
        write_csv(HERE / "results.csv", sweep_rows, FIELDS)
        write_csv(HERE / "ratio.csv", ratio_rows, ["io", "server", "rep", "busy_poll", *FIELDS[3:]])
    plot(sweep_rows)
    text = summarize(sweep_rows, ratio_rows)
    (HERE / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
