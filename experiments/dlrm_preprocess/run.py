#!/usr/bin/env python3
"""Issue #8, item 4: a user's DLRM preprocessing job through a node, against numpy.

Criteo rows -> the tensors a DLRM consumes (``offrac.dlrm``): dense = minmax(ln(1 + x)) per
column (13 two-hop requests: ``boxcox`` lambda 0 then ``minmax``), sparse = ``sigridhash`` per
column into embedding tables (26 requests); all 39 requests of a batch in flight at once on one
connection. The same steps in numpy (``preprocess_numpy``) run in this process on the same
rows. Every node result is checked against numpy (sparse identical, dense within 2e-7).

Rows: the 200 real Criteo rows of ``data/criteo-sample`` (one batch) and 65,536 rows drawn from
a generator fitted to them, in batches of 256 and 4,096 rows. Rounds alternate node and numpy;
the table gives the median rows/s over rounds. `--quick` runs fewer rows (smoke test).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from _bench import REPO, Server, finish, log, machine, md_table, median

from offrac import Client
from offrac.dlrm import SPARSE, CriteoBatch, CriteoShape, load_criteo, preprocess, preprocess_numpy

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
ROWS = 4096 if QUICK else 65_536
ROUNDS = 2 if QUICK else 5
BATCHES = (256, 4096)
#: Embedding-table sizes per sparse column (the DLRM benchmark caps Criteo tables at 10^7 rows).
TABLES = [min(10_000_000, 1000 * 3 ** (j % 12)) for j in range(SPARSE)]


def batches(rows: CriteoBatch, size: int) -> list[CriteoBatch]:
    return [
        CriteoBatch(
            rows.label[i : i + size],
            rows.dense[i : i + size],
            rows.sparse[i : i + size],
            rows.sparse_missing[i : i + size],
        )
        for i in range(0, len(rows), size)
    ]


def run_node(c: Client, parts: list[CriteoBatch], check: bool) -> float:
    t = time.perf_counter()
    out = [preprocess(c, b, TABLES) for b in parts]
    dt = time.perf_counter() - t
    if check:
        for b, got in zip(parts, out, strict=True):
            want = preprocess_numpy(b, TABLES)
            np.testing.assert_array_equal(got.sparse, want.sparse)
            np.testing.assert_allclose(got.dense, want.dense, rtol=0, atol=2e-7)
    return sum(len(b) for b in parts) / dt


def run_numpy(parts: list[CriteoBatch]) -> float:
    t = time.perf_counter()
    for b in parts:
        preprocess_numpy(b, TABLES)
    return sum(len(b) for b in parts) / (time.perf_counter() - t)


def main() -> None:
    real = load_criteo(REPO / "data" / "criteo-sample" / "criteo_sample.csv")
    generated = CriteoShape.fit(real).sample(ROWS, seed=8)
    rows: list[dict[str, Any]] = []
    with Server(["serve", "--listen", "127.0.0.1:0"], "node") as node, Client(node.addr) as c:
        for data, dname in ((real, "criteo-sample (200 real rows)"), (generated, f"generated ({ROWS} rows)")):
            for size in sorted({min(b, len(data)) for b in BATCHES}):
                parts = batches(data, size)
                run_node(c, parts[:2], check=True)  # warm-up, and every result checked once
                node_rps, np_rps = [], []
                for r in range(ROUNDS):
                    node_rps.append(run_node(c, parts, check=(r == 0)))
                    np_rps.append(run_numpy(parts))
                row = {
                    "data": dname,
                    "batch_rows": size,
                    "node_rows_per_s": median(node_rps),
                    "numpy_rows_per_s": median(np_rps),
                }
                row["ratio"] = row["node_rows_per_s"] / row["numpy_rows_per_s"]
                log(
                    f"{dname} batch {size}: node {row['node_rows_per_s']:.0f} rows/s, numpy "
                    f"{row['numpy_rows_per_s']:.0f} rows/s ({row['ratio']:.2f}x)"
                )
                rows.append(row)
    finish(
        HERE, rows, ["data", "batch_rows", "node_rows_per_s", "numpy_rows_per_s", "ratio"], plot, summarize
    )


def plot(rows: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    labels = [f"{r['data'].split(' ')[0]}\n{r['batch_rows']} rows" for r in rows]
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r["node_rows_per_s"] for r in rows], 0.4, label="offrac node")
    ax.bar(x + 0.2, [r["numpy_rows_per_s"] for r in rows], 0.4, label="numpy (same process)")
    ax.set_xticks(x, labels)
    ax.set_ylabel("rows/s")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("DLRM preprocessing of Criteo rows: node vs numpy")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=120)


def summarize(rows: list[dict[str, Any]]) -> str:
    table = md_table(
        ["rows", "batch (rows)", "node rows/s", "numpy rows/s", "node / numpy"],
        [
            [
                r["data"],
                r["batch_rows"],
                f"{r['node_rows_per_s']:,.0f}",
                f"{r['numpy_rows_per_s']:,.0f}",
                f"{r['ratio']:.2f}",
            ]
            for r in rows
        ],
    )
    return (
        "# DLRM preprocessing: node vs numpy (issue #8)\n\n"
        f"Machine: {machine()}. Command: `python3 experiments/dlrm_preprocess/run.py`.\n"
        f"Median of {ROUNDS} alternating rounds. Node: default configuration, one Python client "
        "connection, the 39 requests of a batch in flight together; every node result checked "
        "against numpy.\n\n" + table + "\n"
    )


if __name__ == "__main__":
    main()
