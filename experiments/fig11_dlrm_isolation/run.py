#!/usr/bin/env python3
"""Seed 001 Fig. 11: performance isolation under mixed request sizes.

One slot each of MapId, SparseTransform, Logit and Normalization (minmax). Three short flows
(MapId, SparseTransform and Logit at 1 KiB) run beside one long flow (Normalization at 4 KiB)
whose closed-loop clients go from 0 (the short flows alone) to 4. The short flows' median
latency should not move as the long flow's load rises. Two phases:

- `closed`: as in the paper, one closed-loop client per short flow, all in one load run;
- `open`: the short flows open-loop at a fixed 3,000 req/s each (Poisson, three
  connections), the long flow's closed-loop clients in a second load process at the same time:
  this separates interference from the node simply running out of CPU.

Node: blocking I/O, pinned to CPU 1; load generator on CPU 0 (a 2-core machine). Median of
3 repetitions per point. `--quick` shortens the runs (smoke test).
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from _bench import finish, log, machine, md_table, median, node
from _bench import load as run_load

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
SHORT = {"mapid": "mapid:1024", "sparsetransform": "sparsetransform:1024", "logit": "logit:1024"}
LONG = "minmax:4096"
LONG_CLIENTS = [0, 1, 2] if QUICK else [0, 1, 2, 3, 4]
REPS = 1 if QUICK else 3
DUR, WARM = (0.4, 0.1) if QUICK else (2.0, 0.5)
SHORT_RATE = 9000.0
CONFIG = '[io]\nmode = "blocking"\n[metrics]\nlisten = ""\n' + "".join(
    f'[[slots]]\nfunction = "{f}"\n' for f in ("mapid", "sparsetransform", "logit", "minmax")
)


def main() -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as t:
        cfg = Path(t) / "node.toml"
        cfg.write_text(CONFIG)
        with node(cfg, cpus="1") as n:
            for rep in range(REPS):
                for k in LONG_CLIENTS:
                    mix = ",".join([*SHORT.values(), *[LONG] * k])
                    r = run_load(
                        n.addr,
                        clients=len(SHORT) + k,
                        mix=mix,
                        duration=DUR,
                        warmup=WARM,
                        item_per_client=True,
                        cpus="0",
                    )
                    for row in r["rows"]:
                        rows.append(
                            {
                                "phase": "closed",
                                "rep": rep,
                                "long_clients": k,
                                "function": row["function"],
                                "bytes": row["bytes"],
                                "req_per_s": row["req_per_s"],
                                "p50_us": row["p50_us"],
                                "p99_us": row["p99_us"],
                            }
                        )
                    rows += open_phase(n.addr, rep, k)
                    log(
                        f"rep {rep} long clients {k}: "
                        + ", ".join(f"{x['function']} {x['p50_us']:.0f}" for x in r["rows"])
                    )
    fields = ["phase", "rep", "long_clients", "function", "bytes", "req_per_s", "p50_us", "p99_us"]
    finish(HERE, rows, fields, plot, summarize)


def open_phase(addr: str, rep: int, k: int) -> list[dict[str, Any]]:
    """Short flows at a fixed open-loop rate while k closed-loop long clients run beside them."""
    long_result: list[dict[str, Any]] = []
    long_thread = None
    if k:
        long_thread = threading.Thread(
            target=lambda: long_result.append(
                run_load(addr, clients=k, mix=LONG, duration=DUR + 0.6, warmup=WARM, cpus="0")
            )
        )
        long_thread.start()
        time.sleep(0.3)  # the long flow runs through the short flows' whole measurement
    r = run_load(
        addr, clients=3, mix=",".join(SHORT.values()), duration=DUR, warmup=WARM, rate=SHORT_RATE, cpus="0"
    )
    if long_thread:
        long_thread.join()
    return [
        {
            "phase": "open",
            "rep": rep,
            "long_clients": k,
            "function": row["function"],
            "bytes": row["bytes"],
            "req_per_s": row["req_per_s"],
            "p50_us": row["p50_us"],
            "p99_us": row["p99_us"],
        }
        for row in r["rows"] + [row for lr in long_result for row in lr["rows"]]
    ]


def med(rows: list[dict[str, Any]], f: str, k: int, key: str, phase: str) -> float:
    return median(
        [r[key] for r in rows if r["function"] == f and r["long_clients"] == k and r["phase"] == phase]
    )


def plot(rows: list[dict[str, Any]]) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, phase in zip(axes, ("closed", "open"), strict=True):
        for f in [*SHORT, "minmax"]:
            ks = [k for k in LONG_CLIENTS if any(r["function"] == f and r["long_clients"] == k for r in rows)]
            ax.plot(ks, [med(rows, f, k, "p50_us", phase) for k in ks], marker="o", label=f)
        ax.set_xlabel("closed-loop clients of the 4 KiB Normalization flow")
        ax.set_title(f"short flows {'closed loop' if phase == 'closed' else 'at 3k req/s each'}")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("median latency (µs)")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=120)


def table(rows: list[dict[str, Any]], phase: str) -> str:
    header = ["flow"] + [f"{k} long" for k in LONG_CLIENTS] + ["change 0 -> max"]
    body = []
    for f in [*SHORT, "minmax"]:
        vals = [med(rows, f, k, "p50_us", phase) for k in LONG_CLIENTS]
        have = [v for v in vals if v == v]
        change = f"{(have[-1] / have[0] - 1) * 100:+.0f} %" if len(have) > 1 else ""
        body.append([f] + [f"{v:.1f}" if v == v else "" for v in vals] + [change])
    tput = [f"{sum(med(rows, f, k, 'req_per_s', phase) for f in SHORT) / 1e3:.1f}" for k in LONG_CLIENTS]
    long = [f"{med(rows, 'minmax', k, 'req_per_s', phase) / 1e3:.1f}" for k in LONG_CLIENTS[1:]]
    return (
        md_table(header, body)
        + "\nShort flows' total k req/s: "
        + ", ".join(tput)
        + "; long flow k req/s: "
        + ", ".join(long)
        + "\n"
    )


def summarize(rows: list[dict[str, Any]]) -> str:
    return (
        "# Seed 001 Fig. 11: short flows beside a growing long flow\n\n"
        f"Machine: {machine()}. Command: `python3 experiments/fig11_dlrm_isolation/run.py`.\n"
        f"Median latency (µs) of each flow, median of {REPS} repetitions of {DUR} s; node on CPU 1, "
        "load generator on CPU 0.\n\n"
        "Short flows closed loop (one client each, as in the paper):\n\n"
        + table(rows, "closed")
        + "\nShort flows open loop at a fixed 3,000 req/s each:\n\n"
        + table(rows, "open")
    )


if __name__ == "__main__":
    main()
