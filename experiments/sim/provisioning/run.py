"""Seed 001's provisioning rule: predicted break-point throughput N·s/(T_oh + T_acc) vs the simulated one."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import command_line, here, markdown_table, sim, write_summary

S_BYTES = 1024  # request size s: one 1 KB fragment
T_ACC_US = 1.1  # per-request compute time (a Logit-like operator at 1 KB)
T_OH_US = 0.4  # per-request overhead, as seed 001 sets it
CLIENTS = 16
REQUESTS = 2000
SEEDS = 3
LOADS = [0.2, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1, 1.2, 1.4]


def gbps(rps: float) -> float:
    return rps * S_BYTES * 8 / 1e9


def main() -> None:
    out = here(__file__)
    rows = []
    for n in (1, 2, 3, 4):
        predicted_rps = n / ((T_OH_US + T_ACC_US) * 1e-6)
        for load in LOADS:
            rate = load * predicted_rps
            think_us = CLIENTS / rate * 1e6
            args = [
                "--clients",
                str(CLIENTS),
                "--requests",
                str(REQUESTS),
                "--open-loop",
                "--mix",
                "1",
                "--sizes",
                "1",
                "--think",
                f"exp:{think_us}",
                "--exec-us",
                str(T_ACC_US),
                "--overhead-us",
                str(T_OH_US),
                "--instances",
                str(n),
                "--frag-bytes",
                str(S_BYTES),
            ]
            df, _ = sim(args, seeds=SEEDS)
            a = df[df.group == "A"]
            rows.append(
                {
                    "N": n,
                    "load": load,
                    "offered_gbps": gbps(rate),
                    "delivered_gbps": gbps(a.throughput_rps.mean()),
                    "p50_us": a.lat_p50_us.mean(),
                    "drop_rate": a.drop_rate.mean(),
                }
            )
    data = pd.DataFrame(rows)
    data.to_csv(out / "results.csv", index=False)
    summary = []
    for n, g in data.groupby("N"):
        predicted = gbps(int(n) / ((T_OH_US + T_ACC_US) * 1e-6))
        base = g.p50_us.iloc[0]
        knee = g[g.p50_us <= 1.1 * base].offered_gbps.max()
        saturation = g.delivered_gbps.max()
        summary.append(
            {
                "N": int(n),
                "predicted_gbps": predicted,
                "sim_knee_gbps": knee,
                "knee_rel_error": (knee - predicted) / predicted,
                "sim_max_gbps": saturation,
                "max_rel_error": (saturation - predicted) / predicted,
            }
        )
    summ = pd.DataFrame(summary)
    summ.to_csv(out / "breakpoints.csv", index=False)
    target = 20.0
    needed = math.ceil(target * 1e9 / (S_BYTES * 8) * (T_OH_US + T_ACC_US) * 1e-6)
    fig, ax = plt.subplots(figsize=(6, 4))
    for n, g in data.groupby("N"):
        ax.plot(g.delivered_gbps, g.p50_us, marker="o", label=f"N={n}")
        ax.axvline(gbps(int(n) / ((T_OH_US + T_ACC_US) * 1e-6)), ls="--", lw=0.8, color="gray")
    ax.set_yscale("log")
    ax.set_xlabel("delivered throughput (Gbps)")
    ax.set_ylabel("median latency (µs)")
    ax.set_title("dashed: predicted break points N·s/(T_oh+T_acc)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "provisioning.png", dpi=120)
    body = (
        f"s = {S_BYTES} B (one fragment), T_acc = {T_ACC_US} µs, T_oh = {T_OH_US} µs (added to every "
        f"execution), N instances; {CLIENTS} open-loop clients with exponential gaps (Poisson arrivals) at "
        f"{len(LOADS)} offered loads from {LOADS[0]} to {LOADS[-1]} x the predicted "
        f"break point; {SEEDS} seeds x "
        f"{CLIENTS * REQUESTS:,} requests per point. Knee = highest offered load whose median latency stays "
        "within 10% of the lightest load's (seed 001's definition); max = highest delivered throughput.\n\n"
        "![provisioning](provisioning.png)\n\n"
        + markdown_table(summ)
        + f"\n\nRule (1): a {target:g} Gbps target needs N = ceil(Θ·(T_oh+T_acc)/s) = {needed} instances.\n"
    )
    write_summary(out, "Provisioning rule (seed 001)", command_line(__file__), body)


if __name__ == "__main__":
    main()
