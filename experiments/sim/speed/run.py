"""Simulator speed: simulated request attempts per second, offrac sim beside SimPy, in one run.

The same model for both (the Fig. 7 set-up: 8 closed-loop clients, multi-fragment sizes, Eligible RR,
4 buffers, 4 instances of each of three accelerators at 10/5/1 µs per fragment, refused clients abort
and retry after 80-120 µs). Per core: one process, one thread. Per machine: every core busy (offrac
sim runs seeds on all cores with --jobs; SimPy runs one process per core).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fig07"))
import simpy_model
from common import BIN, command_line, here, markdown_table, write_summary

ARGS = [
    "--clients", "8", "--mix", "33:33:33", "--sizes", "multi", "--buffers", "4", "--policy", "eligible-rr",
    "--exec-us", "10,5,1", "--instances", "4,4,4", "--on-refusal", "abort", "--requests", "100",
]  # fmt: skip
RUST_SEEDS = 2000
SIMPY_SEEDS = 40
CORES = os.cpu_count() or 1


def offrac(jobs: int) -> float:
    cmd = [BIN, "sim", *ARGS, "--seeds", str(RUST_SEEDS), "--jobs", str(jobs)]
    p = subprocess.run(cmd, check=True, capture_output=True, text=True)
    speed = json.loads(p.stderr.strip().splitlines()[-1])
    return float(speed["attempts_per_s"])


def simpy_seed(seed: int) -> tuple[int, float]:
    r = simpy_model.run("eligible-rr", 8, seed, [10.0, 5.0, 1.0])
    return int(r["attempts"]), float(r["wall_s"])


def simpy(procs: int) -> float:
    t0 = time.perf_counter()
    if procs == 1:
        runs = [simpy_seed(s) for s in range(1, SIMPY_SEEDS + 1)]
    else:
        with multiprocessing.Pool(procs) as pool:
            runs = pool.map(simpy_seed, range(1, SIMPY_SEEDS + 1))
    wall = time.perf_counter() - t0
    return sum(a for a, _ in runs) / wall


def main() -> None:
    out = here(__file__)
    rows = []
    # Interleaved, three rounds: noise on a shared machine hits both alike.
    for rnd in range(3):
        for scope, n in (("per core", 1), ("per machine", CORES)):
            r, p = offrac(n), simpy(n)
            rows.append({"round": rnd, "scope": scope, "offrac_sim": r, "simpy": p, "ratio": r / p})
    df = pd.DataFrame(rows)
    df.to_csv(out / "results.csv", index=False)
    med = df.groupby("scope", sort=False)[["offrac_sim", "simpy", "ratio"]].median().reset_index()
    body = (
        f"Simulated request attempts per wall-clock second on this {CORES}-core machine, the Fig. 7 model "
        f"(eligible-rr, 8 clients, abort on refusal), {RUST_SEEDS} offrac sim seeds and {SIMPY_SEEDS} SimPy "
        "seeds per measurement, medians of 3 interleaved rounds.\n\n" + markdown_table(med, ".3g")
    )
    write_summary(out, "Simulator speed against SimPy", command_line(__file__), body)


if __name__ == "__main__":
    main()
