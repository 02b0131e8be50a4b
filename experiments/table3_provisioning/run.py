#!/usr/bin/env python3
"""Seed 001 Table III and Fig. 7: does the provisioning model predict where a node saturates?

For each of the four operators of Table II (MapId, SparseTransform, Logit, Normalization =
minmax) and N = 1..4 slots hosting it, 1 KiB requests:

- predicted: the seed's model, Theta(N) = N * s / (T_oh + T_acc), with T_oh and T_acc the
  node's own live figures (``describe`` -> ``provisioning``) at light load (medians of those
  read after a one-client warm-up and after the 1- and 2-client points); and a
  core-aware variant for a software node, Theta_c(N) = s * min(C / (T_oh + T_acc), 1 / T_io,
  N / (T_slot + T_acc)): the work per request must fit the C cores the node may use, the I/O
  thread's share T_io of T_oh is serial (one thread serves every slot), and the slot threads'
  share T_slot plus T_acc is spread over N slots;
- measured: closed-loop clients swept 1..32 (Fig. 7's method), median latency vs throughput;
  the breakpoint is the onset of a > 10 % rise of the median latency over the one-client
  median, or, if latency never rises that much, the largest throughput reached.

The node runs requests on its slot threads (``inline_max_bytes = 0``, so that N is the
parallelism), blocking I/O, pinned to CPU 1; the load generator is pinned to CPU 0 (on this
2-core machine C = 1). `--quick` shortens the runs (smoke test).
"""

from __future__ import annotations

import itertools
import json
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

from offrac import Client

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
SIZE = 1024
OPS = {"mapid": "MapId", "sparsetransform": "Sparse Trans.", "logit": "Logit", "minmax": "Normalization"}
#: Seed 001 Table III (Gbit/s), P / E per N; None = not measured there.
PAPER: dict[str, list[tuple[float, float | None]]] = {
    "mapid": [(7.5, 9.5), (15.0, 16.5), (22.5, None), (30.0, None)],
    "sparsetransform": [(5.0, 5.5), (10.0, 10.3), (15.0, 14.9), (20.0, None)],
    "logit": [(5.5, 5.2), (11.0, 11.1), (16.5, 14.1), (22.0, None)],
    "minmax": [(1.8, 1.6), (3.6, 3.1), (5.5, 4.7), (7.3, 6.2)],
}
NS = [1, 2] if QUICK else [1, 2, 3, 4]
CLIENTS = [1, 4, 16] if QUICK else [1, 2, 4, 8, 16, 32]
DUR, WARM = (0.4, 0.1) if QUICK else (1.5, 0.4)
NODE_CPUS, LOAD_CPUS, CORES = "1", "0", 1


def config(op: str, n: int) -> str:
    slots = f'[[slots]]\nfunction = "{op}"\ninline_max_bytes = 0\n' * n
    return f'[io]\nmode = "blocking"\n[metrics]\nlisten = ""\n{slots}'


def gbps(req_per_s: float) -> float:
    return req_per_s * SIZE * 8 / 1e9


def breakpoint_of(points: list[dict[str, Any]]) -> tuple[float, str]:
    """(Gbit/s, how): the throughput at the onset of a > 10 % median-latency rise, or the
    largest throughput when latency never rises that much."""
    base = points[0]["p50_us"]
    for prev, p in itertools.pairwise(points):
        if p["p50_us"] > 1.1 * base:
            # Onset between prev and p: the throughput at the last point still within 10 %,
            # unless the rising point itself carried more (then the knee is there).
            return max(prev["gbps"], p["gbps"]) if p["gbps"] < 1.02 * prev["gbps"] else p["gbps"], "onset"
    return max(p["gbps"] for p in points), "max"


def run_case(tmp: Path, op: str, n: int) -> dict[str, Any]:
    cfg = tmp / f"{op}-{n}.toml"
    cfg.write_text(config(op, n))
    figures: list[tuple[float, float, float, float]] = []

    def read_figures(addr: str) -> None:
        with Client(addr) as c:
            prov = c.describe()["provisioning"]
        (acc,) = [a for a in prov["t_acc"] if a["name"] == op and a["size_class"] == SIZE]
        figures.append((prov["t_oh_ns"], prov["t_oh_io_ns"], prov["t_oh_slot_ns"], acc["t_acc_ns"]))

    with node(cfg, f"{op}x{n}", cpus=NODE_CPUS) as srv:
        run_load(srv.addr, clients=1, mix=f"{op}:{SIZE}", duration=DUR, warmup=WARM, cpus=LOAD_CPUS)
        read_figures(srv.addr)
        points = []
        for k in CLIENTS:
            r = run_load(srv.addr, clients=k, mix=f"{op}:{SIZE}", duration=DUR, warmup=WARM, cpus=LOAD_CPUS)
            row = r["rows"][0]
            points.append(
                {"clients": k, "gbps": row["gbit_per_s"], "p50_us": row["p50_us"], "errors": row["errors"]}
            )
            log(f"{op} N={n} clients={k}: {row['gbit_per_s']:.3f} Gbit/s, p50 {row['p50_us']:.1f} us")
            if k <= 2:
                read_figures(srv.addr)
    # The live figures at light load (after the warm-up, the 1- and 2-client points): medians.
    t_oh, t_io, t_slot, t_acc = (median([f[i] for f in figures]) for i in range(4))
    predicted = gbps(n * 1e9 / (t_oh + t_acc))
    core_aware = gbps(1e9 * min(CORES / (t_oh + t_acc), 1 / t_io, n / (t_slot + t_acc)))
    measured, how = breakpoint_of(points)
    return {
        "op": op,
        "n": n,
        "t_oh_ns": t_oh,
        "t_oh_io_ns": t_io,
        "t_oh_slot_ns": t_slot,
        "t_acc_ns": t_acc,
        "predicted_gbps": predicted,
        "core_aware_gbps": core_aware,
        "measured_gbps": measured,
        "how": how,
        "error": abs(predicted - measured) / measured,
        "core_aware_error": abs(core_aware - measured) / measured,
        "points": json.dumps(points),
    }


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as t:
        for op in OPS:
            for n in NS:
                rows.append(run_case(Path(t), op, n))
    fields = [
        "op",
        "n",
        "t_oh_ns",
        "t_oh_io_ns",
        "t_oh_slot_ns",
        "t_acc_ns",
        "predicted_gbps",
        "core_aware_gbps",
        "measured_gbps",
        "how",
        "error",
        "core_aware_error",
        "points",
    ]
    finish(HERE, rows, fields, plot, summarize)


def plot(rows: list[dict[str, Any]]) -> None:
    fig, axes = plt.subplots(1, len(OPS), figsize=(4 * len(OPS), 3.4), sharey=False)
    for ax, op in zip(axes, OPS, strict=True):
        for r in (r for r in rows if r["op"] == op):
            pts = json.loads(r["points"])
            ax.plot(
                [p["gbps"] for p in pts], [p["p50_us"] for p in pts], marker="o", ms=3, label=f"N={r['n']}"
            )
            ax.axvline(r["predicted_gbps"], ls=":", lw=0.8, color=ax.lines[-1].get_color())
        ax.set_title(f"{OPS[op]} (1 KiB)")
        ax.set_xlabel("throughput (Gbit/s)")
        ax.set_ylabel("median latency (µs)")
        ax.legend(fontsize=7)
    fig.suptitle("Median latency vs throughput per slot count (dotted: the seed's model)")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=110)


def oh_parts(r: dict[str, Any]) -> str:
    return f"{r['t_oh_ns'] / 1e3:.2f} ({r['t_oh_io_ns'] / 1e3:.2f} + {r['t_oh_slot_ns'] / 1e3:.2f})"


def summarize(rows: list[dict[str, Any]]) -> str:
    def cell(op: str, n: int) -> list[str]:
        r = next((r for r in rows if r["op"] == op and r["n"] == n), None)
        if r is None:
            return ["", "", ""]
        return [f"{r['predicted_gbps']:.2f}", f"{r['core_aware_gbps']:.2f}", f"{r['measured_gbps']:.2f}"]

    header = ["operator"] + [f"N={n} {k}" for n in NS for k in ("P", "Pc", "E")]
    table = md_table(header, [[OPS[op]] + [c for n in NS for c in cell(op, n)] for op in OPS])
    errs = md_table(
        ["operator", "T_oh µs (I/O + slot)", "T_acc µs"] + [f"N={n} err P / Pc" for n in NS],
        [
            [
                OPS[op],
                oh_parts(rs[0]),
                f"{rs[0]['t_acc_ns'] / 1e3:.3f}",
            ]
            + [f"{r['error'] * 100:.0f} % / {r['core_aware_error'] * 100:.0f} %" for r in rs]
            for op in OPS
            for rs in [[r for r in rows if r["op"] == op]]
        ],
    )
    paper = md_table(
        ["operator"] + [f"N={n} P / E" for n in (1, 2, 3, 4)],
        [[OPS[op]] + [f"{p} / {e if e is not None else '-'}" for p, e in PAPER[op]] for op in OPS],
    )
    worst = max(r["error"] for r in rows)
    worst_c = max(r["core_aware_error"] for r in rows)
    return (
        "# Seed 001 Table III / Fig. 7 on this machine: provisioning model vs measured breakpoints\n\n"
        f"Machine: {machine()}. Command: `python3 experiments/table3_provisioning/run.py`.\n"
        "1 KiB requests; node on CPU 1 (blocking I/O, runs on slot threads), load generator on "
        f"CPU 0; clients {CLIENTS}, {DUR} s each. Gbit/s of request payload. P = the seed's "
        "model N·s/(T_oh + T_acc) from the node's live T_oh, T_acc; Pc = core-aware model "
        "s·min(C/(T_oh + T_acc), 1/T_io, N/(T_slot + T_acc)), C = 1 core; E = measured breakpoint "
        "(onset of a > 10 % median-latency rise, else the largest throughput).\n\n"
        + table
        + "\nRelative errors |P - E| / E:\n\n"
        + errs
        + f"\nWorst error: seed model {worst * 100:.0f} %, core-aware {worst_c * 100:.0f} %.\n\n"
        "Seed 001 Table III (FPGA, Gbit/s, T_oh = 0.4 µs assumed), for the shapes:\n\n" + paper
    )


if __name__ == "__main__":
    main()
