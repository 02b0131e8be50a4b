"""The gemv experiment against MPI with the nodes in two ``[io]`` modes, alternated.

Runs ``run.py --ranks R --sizes S --reps N --rounds K --io-mode M`` for each pair, each rank
count and each mode (the two modes' order swapped every pair), each run with its MPI peer,
and prints per rank count, mode and size the medians over the runs of offrac one call,
three calls, MPI and the per-run ratios one / MPI, three / MPI, and the load at each run's
start and end.

    sudo python3 experiments/gemv/io_modes.py [--ranks 2,4] [--modes blocking,poll] [--pairs 2]
        [--sizes 64,256,1024,2048] [--reps 20] [--rounds 2] [--no-single]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parent / "run.py"
LOAD = re.compile(r"load average at start: ([\d.]+), at the end: ([\d.]+)")


def run(ranks: int, mode: str, a: argparse.Namespace) -> tuple[dict[int, list[float]], str]:
    """One run.py run; per size (offrac one, three, MPI µs, one / MPI, three / MPI) and its load."""
    cmd = [
        sys.executable,
        str(RUN),
        *("--ranks", str(ranks), "--sizes", a.sizes, "--reps", str(a.reps)),
        *("--rounds", str(a.rounds), "--io-mode", mode),
        *(["--no-single"] if a.no_single else []),
    ]
    print("$ " + " ".join(cmd[1:]), flush=True)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800).stdout
    load = LOAD.search(out)
    rows: dict[int, list[float]] = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        # against_mpi's rows: ranks, matrix, rounds, one, three, MPI, one/MPI, range, three/MPI, ...
        if len(cells) == 13 and cells[0] == str(ranks) and " x " in cells[1]:
            side = int(cells[1].split(" x ")[0])
            rows[side] = [float(cells[j]) for j in (3, 4, 5, 6, 8)]
    print(out, flush=True)
    return rows, f"{load.group(1)}-{load.group(2)}" if load else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--modes", default="blocking,poll")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--sizes", default="64,256,1024,2048")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-single", action="store_true", help="skip run.py's one-node baselines")
    a = ap.parse_args()
    modes = a.modes.split(",")
    ranks = [int(r) for r in a.ranks.split(",")]
    got: dict[tuple[int, str], list[dict[int, list[float]]]] = {}
    loads: dict[tuple[int, str], list[str]] = {}
    for p in range(a.pairs):
        for r in ranks:
            for m in modes if p % 2 == 0 else modes[::-1]:
                rows, load = run(r, m, a)
                got.setdefault((r, m), []).append(rows)
                loads.setdefault((r, m), []).append(load)
    print(
        "| ranks | io mode | matrix | runs | offrac one µs | offrac three µs | MPI µs | one / MPI "
        "| three / MPI |"
    )
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for r in ranks:
        for m in modes:
            for s in (int(x) for x in a.sizes.split(",")):
                per = [x[s] for x in got[(r, m)] if s in x]
                if not per:
                    continue
                med = [statistics.median(v[j] for v in per) for j in range(5)]
                print(
                    f"| {r} | {m} | {s} x {s} | {len(per)} | {med[0]:.0f} | {med[1]:.0f} | {med[2]:.0f} | "
                    f"{med[3]:.2f} | {med[4]:.2f} |"
                )
    for (r, m), ls in loads.items():
        print(f"ranks {r}, {m}: load at start-end per run {', '.join(ls)}")


if __name__ == "__main__":
    main()
