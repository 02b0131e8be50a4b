"""One rank of the collectives benchmark (run.py starts it inside the rank's namespace).

``offrac``: the collective runs on the nodes, this rank's client calls its own node, either
with the data in the call and the output in the answer (``--variant payload``: the data
crosses the client's loopback hop both ways) or with the input already kept at the node in a
named buffer and the output kept in another (``--variant buffers``, descriptor byte 7: the
call and its answer carry no data), or (``--variant chain``, all-reduce only) as
``CHAIN`` all-reduces in a row inside one chain per rank (``docs/collectives.md``,
"Collectives in a chain": ``load`` of the kept input, the all-reduce hops, ``keep`` of the
output): the nodes start every all-reduce but the first without a client in the loop, and
the time printed is the chain's divided by ``CHAIN`` (per all-reduce). ``mpi``: the same
collective with mpi4py over OpenMPI (TCP), the data in the rank's own memory.

``size`` is the bytes per rank (MPI's count * 4): the block each rank sends (gather) or gets
(scatter), the vector each rank reduces or gets (broadcast). Before every iteration the ranks
synchronise (MPI: ``Barrier``; offrac: an all-reduce of one float, not timed), then each rank
times its own call. Prints one JSON line per rank and size (MPI: rank 0 prints every rank's).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import numpy as np
import numpy.typing as npt

OPS = ["bcast", "scatter", "gather", "reduce", "allreduce"]
IN_BUF = 0x4F460001  # the named buffers of the ``buffers`` and ``chain`` variants
OUT_BUF = 0x4F460002
# All-reduces per chain: a chain has at most 8 hops, and ``load`` and ``keep`` take two.
CHAIN = 6


def reps_for(a: argparse.Namespace, nbytes: int) -> int:
    """Fewer repetitions of the large sizes (each takes tens of ms or more)."""
    return a.reps if nbytes <= 1 << 20 else max(3, a.reps // 4)


def has_input(op: str, rank: int, root: int = 0) -> bool:
    return op not in ("bcast", "scatter") or rank == root


def operand(op: str, count: int, rank: int, size: int) -> npt.NDArray[np.float32]:
    """This rank's input: rank + 1 everywhere (scatter's root: block r holds r + 1)."""
    if op == "scatter":
        return np.repeat(np.arange(1, size + 1, dtype=np.float32), count)
    return np.full(count, rank + 1, dtype=np.float32)


def expected(op: str, count: int, rank: int, size: int) -> npt.NDArray[np.float32] | None:
    """This rank's output (None: MPI gives nothing at this rank)."""
    if op in ("bcast", "scatter"):
        return np.full(count, 1 if op == "bcast" else rank + 1, dtype=np.float32)
    if op == "gather":
        return np.repeat(np.arange(1, size + 1, dtype=np.float32), count) if rank == 0 else None
    if op == "reduce" and rank != 0:
        return None
    return np.full(count, size * (size + 1) / 2, dtype=np.float32)


def expected_chain(count: int, size: int) -> npt.NDArray[np.float32]:
    """After ``CHAIN`` sums over ``size`` ranks: each all-reduce after the first multiplies by
    ``size`` (exact in float32 up to 8 ranks: 36 * 8**5 < 2**24)."""
    return np.full(count, size * (size + 1) / 2 * size ** (CHAIN - 1), dtype=np.float32)


def check(op: str, got: npt.NDArray[Any] | None, want: npt.NDArray[np.float32] | None) -> None:
    if want is None:
        return
    assert got is not None and got.size == want.size and np.array_equal(got, want), (op, got, want[:4])


def line(rank: int, nbytes: int, times: list[float], **extra: object) -> None:
    print(json.dumps({"rank": rank, "bytes": nbytes, "times": times, **extra}))
    sys.stdout.flush()


def run_offrac(a: argparse.Namespace) -> None:
    from offrac.buffers import drop_buffer, get_buffer, keep, load, put_buffer
    from offrac.collectives import Communicator

    members = [int(m) for m in a.members.split(",")]
    op: str = a.op
    if a.variant == "chain" and op != "allreduce":
        sys.exit("--variant chain is for --op allreduce only (its output is the next hop's input)")
    kept = a.variant in ("buffers", "chain")
    with Communicator(
        a.addr, members, device=a.device, timeout=120, first_tag=a.first_tag, poll_us=a.poll_us
    ) as comm:
        rank, size = comm.rank, comm.size
        one = np.ones(1, dtype=np.float32)
        for nbytes in a.sizes:
            count = nbytes // 4
            x = operand(op, count, rank, size)
            mine = has_input(op, rank)
            if kept and mine:
                put_buffer(comm.client, IN_BUF, x)
            times: list[float] = []
            out: npt.NDArray[Any] | None = None
            for i in range(a.warmup + reps_for(a, nbytes)):
                comm.allreduce(one)  # line the ranks up (not timed)
                t0 = time.perf_counter()
                if a.variant == "chain":
                    hops = [comm.hop(op, dtype=np.float32, count=count) for _ in range(CHAIN)]
                    comm.client.call_chain([load(IN_BUF), *hops, keep(OUT_BUF)], b"")
                elif a.variant == "buffers":
                    comm.run(op, dtype=np.float32, count=count, source=IN_BUF if mine else None, keep=OUT_BUF)
                else:
                    out = comm.run(op, dtype=np.float32, count=count, data=x if mine else None)
                dt = time.perf_counter() - t0
                if a.variant == "chain":
                    dt /= CHAIN
                if i >= a.warmup:
                    times.append(dt)
            want = expected_chain(count, size) if a.variant == "chain" else expected(op, count, rank, size)
            if kept:
                if want is not None:
                    out = np.frombuffer(get_buffer(comm.client, OUT_BUF), dtype=np.float32)
                drop_buffer(comm.client, OUT_BUF)
                if mine:
                    drop_buffer(comm.client, IN_BUF)
            check(op, out, want)
            line(rank, nbytes, times, algorithm=str(comm.last_algorithm))


def run_mpi(a: argparse.Namespace) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    op: str = a.op
    for nbytes in a.sizes:
        count = nbytes // 4
        x = operand(op, count, rank, size)
        out = np.zeros(count * (size if op == "gather" else 1), dtype=np.float32)
        times: list[float] = []
        for i in range(a.warmup + reps_for(a, nbytes)):
            comm.Barrier()
            t0 = time.perf_counter()
            if op == "allreduce":
                comm.Allreduce(x, out, op=MPI.SUM)
            elif op == "reduce":
                comm.Reduce(x, out if rank == 0 else None, op=MPI.SUM, root=0)
            elif op == "bcast":
                if rank == 0:
                    out[:] = x
                comm.Bcast(out, root=0)
            elif op == "scatter":
                comm.Scatter(x if rank == 0 else None, out, root=0)
            else:
                comm.Gather(x, out if rank == 0 else None, root=0)
            dt = time.perf_counter() - t0
            if i >= a.warmup:
                times.append(dt)
        check(op, out, expected(op, count, rank, size))
        every: Any = comm.gather(times, root=0)
        if rank == 0:
            for r, t in enumerate(every):
                line(r, nbytes, t)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["offrac", "mpi"])
    p.add_argument("--op", choices=OPS, default="allreduce")
    p.add_argument("--variant", choices=["payload", "buffers", "chain"], default="payload")
    p.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], required=True)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--addr", default="")
    p.add_argument("--members", default="")
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--first-tag", type=int, default=1)
    p.add_argument(
        "--poll-us",
        type=int,
        default=0,
        help="the client polls (and yields) this long for an answer before blocking",
    )
    a = p.parse_args()
    run_offrac(a) if a.mode == "offrac" else run_mpi(a)


if __name__ == "__main__":
    main()
