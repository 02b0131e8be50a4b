#!/usr/bin/env python3
"""Issue #13: the CNN's per-image latency through a node, against the same ONNX model in
onnxruntime in this process, and the held-out accuracy measured through the node.

One node hosting only the CNN (experiments/configs/cnn.toml) pinned to CPU 1, so the model runs
on one core; the load generators on CPU 0. In alternating rounds:

- ``offrac bench load --clients 1 --mix cnn:24576 --fragments 6``: closed loop, each image sent
  as six 4 KiB writes as in the paper; round trip p50/p99 and the node's own execution time;
- the Python client: every held-out image through ``Client.call`` (round trip per call), and
  the accuracy of the node's answers;
- onnxruntime (1 thread, sequential) on the same images in this process, pinned to CPU 1 too.

Beside them the paper's figures: 8.2 ms on the FPGA and 40 ms for TensorFlow on its CPU server
(§5). Needs the cnn extra (onnxruntime, scikit-learn). `--quick` runs shorter rounds.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "models" / "cnn"))

import matplotlib

matplotlib.use("Agg")
import bench_onnxruntime as bort
import matplotlib.pyplot as plt
import numpy as np
from _bench import REPO, finish, log, machine, md_table, median, node
from _bench import load as run_load

from offrac import Client

import digits
import reference as ref

HERE = Path(__file__).resolve().parent
CONFIG = REPO / "experiments" / "configs" / "cnn.toml"
QUICK = "--quick" in sys.argv
REPS = 3
DUR, WARM = (1.0, 0.3) if QUICK else (4.0, 1.0)
NODE_CPU, CLIENT_CPU = "1", "0"
FIELDS = ["rep", "path", "images", "p50_ms", "p99_ms", "exec_ms", "accuracy"]


def python_client(addr: str, payloads: list[bytes], labels: list[int]) -> dict[str, Any]:
    with Client(addr) as c:
        for p in payloads[:20]:
            c.call("cnn", p)
        ns: list[int] = []
        correct = 0
        for p, y in zip(payloads, labels, strict=True):
            t0 = time.perf_counter_ns()
            scores = c.call("cnn", p)
            ns.append(time.perf_counter_ns() - t0)
            correct += int(np.argmax(scores) == y)
    ms = np.array(ns) / 1e6
    return {
        "images": len(ms),
        "p50_ms": float(np.median(ms)),
        "p99_ms": float(np.percentile(ms, 99)),
        "accuracy": correct / len(ms),
    }


def run() -> list[dict[str, Any]]:
    images, labels_arr, _ = digits.held_out()
    payloads = [ref.image_to_bytes(img) for img in images]
    labels = [int(y) for y in labels_arr]
    rows: list[dict[str, Any]] = []
    with node(CONFIG, cpus=NODE_CPU) as n:
        for rep in range(REPS):
            r = run_load(
                n.addr,
                clients=1,
                mix="cnn:24576",
                duration=DUR,
                warmup=WARM,
                fragments=6,
                cpus=CLIENT_CPU,
            )["rows"][0]
            rows.append(
                {
                    "rep": rep,
                    "path": "node, Rust client",
                    "images": r["ok"],
                    "p50_ms": r["p50_us"] / 1e3,
                    "p99_ms": r["p99_us"] / 1e3,
                    "exec_ms": r["exec_us"] / 1e3,
                    "accuracy": "",
                }
            )
            log(f"rust client: p50 {r['p50_us'] / 1e3:.3f} ms, exec {r['exec_us'] / 1e3:.3f} ms")
            os.sched_setaffinity(0, {int(CLIENT_CPU)})
            p = python_client(n.addr, payloads, labels)
            rows.append({"rep": rep, "path": "node, Python client", "exec_ms": "", **p})
            log(f"python client: p50 {p['p50_ms']:.3f} ms, accuracy {p['accuracy']:.4f}")
            os.sched_setaffinity(0, {int(NODE_CPU)})
            o = bort.measure(ref.MODEL_PATH, payloads, labels, repeat=1)
            rows.append(
                {
                    "rep": rep,
                    "path": "onnxruntime, in process",
                    "images": o["images"],
                    "p50_ms": o["median_ms"],
                    "p99_ms": o["p99_ms"],
                    "exec_ms": o["median_ms"],
                    "accuracy": o["accuracy"],
                }
            )
            log(f"onnxruntime: p50 {o['median_ms']:.3f} ms")
            os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return rows


PATHS = ["node, Rust client", "node, Python client", "onnxruntime, in process"]


def med(rows: list[dict[str, Any]], path: str, key: str) -> float:
    vals = [r[key] for r in rows if r["path"] == path and r[key] != ""]
    return median([float(v) for v in vals]) if vals else float("nan")


def plot(rows: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(7, 3.6))
    names = [*PATHS, "paper: FPGA", "paper: TensorFlow CPU"]
    vals = [med(rows, p, "p50_ms") for p in PATHS] + [bort.PAPER_FPGA_MS, bort.PAPER_TF_CPU_MS]
    ax.barh(names, vals, color=["C0", "C0", "C1", "C7", "C7"])
    ax.set_xscale("log")
    ax.set_xlabel("per-image latency p50 (ms, log scale)")
    ax.set_title("CNN (A4), one image per request, one core")
    for y, v in enumerate(vals):
        ax.text(v, y, f" {v:.3g}", va="center", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=110)


def summarize(rows: list[dict[str, Any]]) -> str:
    ort_p50 = med(rows, "onnxruntime, in process", "p50_ms")
    table = []
    for p in PATHS:
        acc = med(rows, p, "accuracy")
        exec_ms = med(rows, p, "exec_ms")
        table.append(
            [
                p,
                f"{med(rows, p, 'p50_ms'):.3f}",
                f"{med(rows, p, 'p99_ms'):.3f}",
                "-" if exec_ms != exec_ms else f"{exec_ms:.3f}",
                f"{med(rows, p, 'p50_ms') / ort_p50:.2f}",
                "-" if acc != acc else f"{100 * acc:.2f} %",
            ]
        )
    table.append(["OffRAC A4 on the FPGA (paper §5)", f"{bort.PAPER_FPGA_MS}", "", "", "", ""])
    table.append(["TensorFlow on the paper's CPU server (§5)", f"{bort.PAPER_TF_CPU_MS}", "", "", "", ""])
    return "\n".join(
        [
            "# The CNN (A4): per-image latency and held-out accuracy through the node",
            "",
            f"Machine: {machine()}. Node pinned to CPU {NODE_CPU} (the model runs on one core),",
            f"load generators on CPU {CLIENT_CPU}; onnxruntime (1 thread) in the experiment's process",
            f"on CPU {NODE_CPU}. Command: `python3 experiments/cnn_latency/run.py`. Median of {REPS} rounds.",
            "The Rust client sends each image as six 4 KiB writes (the paper's fragments); the Python",
            "client sends all 360 held-out images one call at a time. exec = the node's execution time",
            "(tract), as the node reports it.",
            "",
            md_table(
                ["path", "p50 ms", "p99 ms", "exec ms", "p50 / onnxruntime", "held-out accuracy"],
                table,
            ),
            "",
            "The paper's network is not ours (it publishes no layer sizes); its figures are a scale.",
            "",
        ]
    )


def main() -> None:
    finish(HERE, run(), FIELDS, plot, summarize)


if __name__ == "__main__":
    main()
