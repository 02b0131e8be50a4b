"""One rank of the collectives benchmark (run.py starts it inside the rank's namespace).

``offrac``: this rank's data goes to its own node, which runs the collective with the other
ranks' nodes. ``mpi``: the same collective with mpi4py over OpenMPI (TCP), the baseline.
Prints (rank 0 only, offrac: every rank) one JSON line per size: the per-iteration seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np


def reps_for(a: argparse.Namespace, nbytes: int) -> int:
    """Fewer repetitions of the large sizes (each takes tens of ms)."""
    return a.reps if nbytes <= 1 << 20 else max(5, a.reps // 4)


def operands(op: str, nbytes: int, rank: int) -> np.ndarray:
    return np.full(nbytes // 4, rank + 1, dtype=np.float32)


def run_offrac(a: argparse.Namespace) -> None:
    from offrac.collectives import Communicator

    members = [int(m) for m in a.members.split(",")]
    with Communicator(a.addr, members, device=a.device, timeout=60, first_tag=a.first_tag) as comm:
        for nbytes in a.sizes:
            x = operands(a.op, nbytes, comm.rank)
            times = []
            for i in range(a.warmup + reps_for(a, nbytes)):
                t0 = time.perf_counter()
                out = comm.allreduce(x) if a.op == "allreduce" else comm.bcast(x, root=0)
                dt = time.perf_counter() - t0
                if i >= a.warmup:
                    times.append(dt)
            want = sum(range(1, comm.size + 1)) if a.op == "allreduce" else 1
            assert out.size == x.size and float(out[0]) == want and float(out[-1]) == want, (out[:4], want)
            print(
                json.dumps(
                    {
                        "rank": comm.rank,
                        "bytes": nbytes,
                        "times": times,
                        "algorithm": str(comm.last_algorithm),
                    }
                )
            )
            sys.stdout.flush()


def run_mpi(a: argparse.Namespace) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    for nbytes in a.sizes:
        x = operands(a.op, nbytes, rank)
        out = np.empty_like(x)
        times = []
        for i in range(a.warmup + reps_for(a, nbytes)):
            t0 = time.perf_counter()
            if a.op == "allreduce":
                comm.Allreduce(x, out, op=MPI.SUM)
            else:
                buf = x if rank == 0 else out
                comm.Bcast(buf, root=0)
                out = buf
            dt = time.perf_counter() - t0
            if i >= a.warmup:
                times.append(dt)
        want = sum(range(1, comm.Get_size() + 1)) if a.op == "allreduce" else 1
        assert float(out[0]) == want and float(out[-1]) == want, (out[:4], want)
        every: Any = comm.gather(times, root=0)
        if rank == 0:
            for r, t in enumerate(every):
                print(json.dumps({"rank": r, "bytes": nbytes, "times": t}))
            sys.stdout.flush()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["offrac", "mpi"])
    p.add_argument("--op", choices=["allreduce", "bcast"], default="allreduce")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--addr", default="")
    p.add_argument("--members", default="")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--first-tag", type=int, default=1)
    a = p.parse_args()
    run_offrac(a) if a.mode == "offrac" else run_mpi(a)


if __name__ == "__main__":
    main()
