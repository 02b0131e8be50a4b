#!/usr/bin/env python3
"""Seed 001 Fig. 9: latency across 24 closed-loop clients, per operator and slot count.

For each of MapId, SparseTransform, Logit and Normalization (minmax) with N = 1 and 4 slots
(runs on the slot threads), 24 closed-loop clients send 1 KiB requests; per client its P5,
P50 and P95. The table gives the median over clients of each and the spread of the client
medians (P95 - P5 over clients): small means every client is treated alike.

Node: blocking I/O, pinned to CPU 1; load generator on CPU 0. `--quick`: shorter runs.
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
from _bench import finish, log, machine, md_table, median, node
from _bench import load as run_load

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
OPS = {"mapid": "MapId", "sparsetransform": "Sparse Trans.", "logit": "Logit", "minmax": "Normalization"}
NS = [1, 4]
CLIENTS = 24
DUR, WARM = (0.5, 0.2) if QUICK else (3.0, 0.5)
FIELDS = ["op", "n", "client", "ok", "req_per_s", "p5_us", "p50_us", "p95_us"]


def main() -> None:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as t:
        for op in OPS:
            for n in NS:
                cfg = Path(t) / f"{op}-{n}.toml"
                slots = f'[[slots]]\nfunction = "{op}"\ninline_max_bytes = 0\n' * n
                cfg.write_text(f'[io]\nmode = "blocking"\n[metrics]\nlisten = ""\n{slots}')
                with node(cfg, f"{op}x{n}", cpus="1") as srv:
                    r = run_load(
                        srv.addr, clients=CLIENTS, mix=f"{op}:1024", duration=DUR, warmup=WARM, cpus="0"
                    )
                for i, c in enumerate(r["per_client"]):
                    rows.append({"op": op, "n": n, "client": i} | {k: c[k] for k in FIELDS[3:]})
                log(
                    f"{op} N={n}: {r['total']['req_per_s']:.0f} req/s, "
                    f"spread {r['client_p50_spread_us']:.1f} us"
                )
    finish(HERE, rows, FIELDS, plot, summarize)


def group(rows: list[dict[str, Any]], op: str, n: int) -> list[dict[str, Any]]:
    return [r for r in rows if r["op"] == op and r["n"] == n and r["ok"] > 0]


def plot(rows: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    data, labels = [], []
    for op in OPS:
        for n in NS:
            data.append([r["p50_us"] for r in group(rows, op, n)])
            labels.append(f"{OPS[op]}\nN={n}")
    ax.boxplot(data, whis=(5, 95), showfliers=False)
    ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=8)
    ax.set_ylabel("per-client median latency (µs)")
    ax.set_title(f"{CLIENTS} closed-loop clients, 1 KiB (boxes: quartiles; whiskers: P5-P95 over clients)")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=120)


def summarize(rows: list[dict[str, Any]]) -> str:
    body = []
    for op in OPS:
        for n in NS:
            g = group(rows, op, n)
            p50s = sorted(r["p50_us"] for r in g)
            spread = p50s[int(0.95 * (len(p50s) - 1))] - p50s[int(0.05 * (len(p50s) - 1))]
            body.append(
                [
                    OPS[op],
                    n,
                    f"{sum(r['req_per_s'] for r in g) / 1e3:.1f}",
                    f"{median([r['p5_us'] for r in g]):.0f}",
                    f"{median(p50s):.0f}",
                    f"{median([r['p95_us'] for r in g]):.0f}",
                    f"{spread:.0f}",
                ]
            )
    return (
        "# Seed 001 Fig. 9: latency across 24 closed-loop clients\n\n"
        f"Machine: {machine()}. Command: `python3 experiments/fig9_dlrm_fairness/run.py`. "
        f"{DUR} s per case; node on CPU 1, load generator on CPU 0. Medians over clients.\n\n"
        + md_table(
            ["operator", "N", "k req/s", "P5 µs", "P50 µs", "P95 µs", "spread of client P50s µs"], body
        )
    )


if __name__ == "__main__":
    main()
