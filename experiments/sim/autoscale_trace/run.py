#!/usr/bin/env python3
"""The autoscaler on the Azure Functions 2021 trace in the simulator, against static provisioning.

The one-hour trace slice (`../shared/data/azure-functions-2021`, override with TRACE=path) has four
apps whose popularity shifts over the hour (the CNN's first 20 minutes, then top-k, then logit).
They run as the node's built-ins by the trace's own mapping: app 1 -> topk, 2 -> cnn, 3 -> logit,
5 -> minmax, each modelled as taking EXEC_US per request whatever its size (so popularity alone
decides what a function needs), sent open loop over 16 connections with the trace's sleep times
divided by SPEEDUP (the hour becomes 1.8 s of virtual time). `offrac sim-trace` runs the node's own
driver in the simulator's virtual world. Provisionings compared on the same arrivals:

- mean:      static, each function N = ceil(lambda (T_oh + T_acc) / rho) slots with lambda its mean rate over
             the whole trace (seed 001's formula, rho = 0.7, T_oh = 3 µs);
- mean x64:  static, the same shares scaled up to use all 64 slots;
- peak:      static, N from each function's highest rate in any 5-minute window of the trace;
- autoscale: 64 slots, one fixed per function and 60 spare, the autoscaler's default policy
             (rho 0.7, grow after 2 periods, reclaim after 8, at most 2 replicas a period) with a
             period of 10 ms of virtual time (20 s of trace time);
- autoscale step 8: the same with up to 8 replicas a period.

Reported per provisioning, medians over SEEDS seeds (they vary segmentation and the node's
choices): p50/p99 latency of the requests answered OK, the BUSY (refusal) rate, and slot-seconds
(slots provisioned x virtual time; the autoscaler's spare slots count only while they hold a
replica), also in slot-hours of trace time.

Run: `python3 experiments/sim/autoscale_trace/run.py` (`--quick`: two seeds).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import pandas as pd
from common import BIN, REPO, command_line, here, markdown_table, write_summary

TRACE = Path(
    os.environ.get("TRACE", REPO.parent / "shared" / "data" / "azure-functions-2021" / "processed_trace.csv")
)
QUICK = "--quick" in sys.argv
SEEDS = 2 if QUICK else 5
SPEEDUP = 2000.0
EXEC_US = 1000
SLOTS = 64
PERIOD_MS = 10.0
# Five minutes of trace time, in virtual ms.
PEAK_WINDOW_MS = 300_000 / SPEEDUP


def sim_trace(provision: str, *extra: str) -> list[dict[str, Any]]:
    cmd = [
        BIN,
        "sim-trace",
        "--trace",
        str(TRACE),
        "--speedup",
        str(SPEEDUP),
        "--exec-us",
        ",".join([str(EXEC_US)] * 4),
        "--provision",
        provision,
        "--slots",
        str(SLOTS),
        "--period-ms",
        str(PERIOD_MS),
        "--peak-window-ms",
        str(PEAK_WINDOW_MS),
        "--seeds",
        str(SEEDS),
        *extra,
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def rows_of(name: str, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for line in lines:
        r = line["report"]
        t = r["total"]
        rows.append(
            {
                "provisioning": name,
                "seed": line["seed"],
                "slots": "+".join(str(n) for n in line["slots_per_function"])
                if not name.startswith("autoscale")
                else f"4 fixed + {SLOTS - 4} spare",
                "configured": r["configured_slots"],
                "peak_slots": r["peak_slots"],
                "sent": t["sent"],
                "ok": t["ok"],
                "busy": t["busy"],
                "busy_rate": t["busy"] / t["sent"],
                "p50_us": t["p50_ns"] / 1e3,
                "p99_us": t["p99_ns"] / 1e3,
                "slot_seconds": r["slot_seconds"],
                "slot_hours_trace": r["slot_seconds"] * SPEEDUP / 3600,
                "replicated": r["replicated"],
                "reclaimed": r["reclaimed"],
                "unanswered": r["unanswered"],
                **{
                    f"p99_us_{f}": fr["p99_ns"] / 1e3
                    for f, fr in zip(line["functions"], r["functions"], strict=True)
                },
                **{
                    f"busy_rate_{f}": fr["busy"] / max(fr["sent"], 1)
                    for f, fr in zip(line["functions"], r["functions"], strict=True)
                },
            }
        )
    return rows


def main() -> None:
    if not TRACE.exists():
        sys.exit(f"trace not found: {TRACE}")
    out = here(__file__)
    rows: list[dict[str, Any]] = []
    mean = sim_trace("mean")
    rows += rows_of("static mean", mean)
    shares = mean[0]["slots_per_function"]
    scaled = [max(1, math.floor(n * SLOTS / sum(shares))) for n in shares]
    scaled[scaled.index(max(scaled))] += SLOTS - sum(scaled)
    rows += rows_of("static mean x64", sim_trace("static:" + ",".join(map(str, scaled))))
    rows += rows_of("static peak", sim_trace("peak"))
    rows += rows_of("autoscale", sim_trace("autoscale"))
    rows += rows_of("autoscale step 8", sim_trace("autoscale", "--max-step", "8"))
    df = pd.DataFrame(rows)
    df.to_csv(out / "results.csv", index=False)
    if (df["unanswered"] != 0).any():
        sys.exit("some request was not answered exactly once")
    cols = ["p50_us", "p99_us", "busy_rate", "slot_seconds", "slot_hours_trace", "peak_slots", "replicated"]
    med = df.groupby("provisioning", sort=False)[cols].median().reset_index()
    med.insert(1, "slots", df.groupby("provisioning", sort=False)["slots"].first().to_numpy())
    med["busy_rate"] = med["busy_rate"].map(lambda x: f"{100 * x:.2f} %")
    fn = [c for c in df.columns if c.startswith(("p99_us_", "busy_rate_"))]
    per_fn = df.groupby("provisioning", sort=False)[fn].median().reset_index()
    for c in fn:
        if c.startswith("busy_rate_"):
            per_fn[c] = per_fn[c].map(lambda x: f"{100 * x:.1f} %")
    body = (
        f"Trace: {int(df['sent'].iloc[0])} requests (one hour) compressed {SPEEDUP:.0f}x into"
        f" {df['slot_seconds'].iloc[0] / df['configured'].iloc[0]:.2f} s of virtual time; every function"
        f" {EXEC_US} µs per request; 16 connections, open loop; slot queues 4 deep; autoscaler period"
        f" {PERIOD_MS:.0f} ms virtual ({PERIOD_MS * SPEEDUP / 1000:.0f} s of trace time)."
        f" Medians over {SEEDS} seeds; every request was answered exactly once in every run."
        " Latency: the requests answered OK; BUSY: refused for want of room."
        " slot_hours_trace: slot-seconds scaled back to trace time.\n\n"
        + markdown_table(med)
        + "\n\nPer function (p99 µs of OK answers, BUSY rate):\n\n"
        + markdown_table(per_fn)
    )
    write_summary(
        out, "The autoscaler on the Azure trace (simulator, 64 slots)", command_line(__file__), body
    )


if __name__ == "__main__":
    main()
