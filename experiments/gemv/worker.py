"""One rank of the distributed vector-matrix multiply (run.py starts it in the rank's namespace).

ACCL+ §6's FC layer: the m x n matrix A is split column-wise into ``size`` blocks; rank r's
node keeps block A[:, cols_r] (m x k, row-major) as named buffer 1 for the whole run. Per
multiply: the root scatters x (block r to rank r), each node keeping its block as buffer 2;
each rank's chain ``[load(2), load(1), gemv(cols=k), keep(3)]`` (empty payload) computes its
partial product y_r = A_r x_r on its node and keeps it as buffer 3; a reduce (sum) whose
input is buffer 3 gives y at the root. Only x's blocks and the partial products cross the
network; the matrix never does after the start. That is three client calls per rank and
multiply (``--mode three``). ``--mode one``: one call per rank and multiply, the collectives
as hops of the chain (``docs/collectives.md``, "Collectives in a chain"):
``[scatter, load(1), gemv(cols=k), reduce]`` with x as the root's payload, so x's block and
the partial product never come back to the client. ``--mode both`` (the default) alternates
the two within each repetition, so both see the same load. The root checks y against numpy
and prints one JSON line per size: seconds per multiply of each mode (and the three-call
mode's phases).

``--mpi`` (started by ``mpirun``, one rank per namespace host, ``run.py``): the MPI peer,
mpi4py over OpenMPI. Rank r holds its block A_r in its own memory; per multiply rank 0
scatters x (``Scatter``), each rank computes A_r @ x_r with numpy (float32, OpenBLAS on one
thread: run.py sets it), and ``Reduce`` (sum) gives y at rank 0, checked against numpy in
float64 as above. Rank 0 prints one JSON line per size: seconds per multiply and the
scatter / gemv / reduce phases.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import numpy.typing as npt

A_BUF, X_BUF, Y_BUF = 1, 2, 3


def matrix(m: int, n: int) -> npt.NDArray[np.float32]:
    return np.random.default_rng(m * 7919 + n).standard_normal((m, n), dtype=np.float32)


def vector(n: int, i: int) -> npt.NDArray[np.float32]:
    return np.random.default_rng(1_000_003 + i).standard_normal(n, dtype=np.float32)


def check(y: npt.NDArray[np.float32], a_full: npt.NDArray[np.float32], x: npt.NDArray[np.float32]) -> float:
    """Largest error of y against A x in float64, relative to sum_j |A_ij x_j| (float32
    rounding is ~1e-6 of it); fails above 1e-4."""
    want = a_full.astype(np.float64) @ x.astype(np.float64)
    bound = np.abs(a_full).astype(np.float64) @ np.abs(x).astype(np.float64)
    err = float(np.max(np.abs(y - want) / bound))
    assert err < 1e-4, err
    return err


def run_mpi(sizes: list[int], reps: int, warmup: int) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    for side in sizes:
        m = n = side
        if n % size:
            raise SystemExit(f"{n} columns do not split into {size} ranks")
        k = n // size
        a_full = matrix(m, n)
        mine = np.ascontiguousarray(a_full[:, rank * k : (rank + 1) * k])
        xr = np.empty(k, dtype=np.float32)
        y = np.empty(m, dtype=np.float32)
        times: list[float] = []
        phases: list[tuple[float, float, float]] = []
        worst = 0.0
        for i in range(warmup + reps):
            x = vector(n, i)
            t0 = time.perf_counter()
            comm.Scatter(x if rank == 0 else None, xr, root=0)
            t1 = time.perf_counter()
            yr = mine @ xr
            t2 = time.perf_counter()
            comm.Reduce(yr, y if rank == 0 else None, op=MPI.SUM, root=0)
            t3 = time.perf_counter()
            if rank == 0:
                worst = max(worst, check(y, a_full, x))
            if i >= warmup:
                times.append(t3 - t0)
                phases.append((t1 - t0, t2 - t1, t3 - t2))
        if rank == 0:
            line = {
                "side": side,
                "ranks": size,
                "times_mpi": times,
                "phases_mpi": phases,
                "max_rel_err": worst,
            }
            print(json.dumps(line))
            sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", action="store_true", help="the MPI peer (under mpirun; no offrac node)")
    ap.add_argument("--addr")
    ap.add_argument("--members")
    ap.add_argument("--device", type=int)
    ap.add_argument("--sizes", required=True, help="comma-separated matrix sides (square m = n)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--mode", choices=["three", "one", "both"], default="both")
    ap.add_argument(
        "--first-tag", type=int, default=1, help="the communicator's first tag (a new one per run)"
    )
    a = ap.parse_args()
    if a.mpi:
        run_mpi([int(s) for s in a.sizes.split(",")], a.reps, a.warmup)
    elif a.addr is None or a.members is None or a.device is None:
        ap.error("--addr, --members and --device are needed (or --mpi)")
    else:
        run_offrac(a)


def run_offrac(a: argparse.Namespace) -> None:
    from offrac import Step
    from offrac.buffers import drop, keep, load, put_buffer
    from offrac.collectives import Communicator

    modes = ["three", "one"] if a.mode == "both" else [a.mode]
    members = [int(x) for x in a.members.split(",")]
    with Communicator(a.addr, members, device=a.device, timeout=120, first_tag=a.first_tag) as comm:
        c = comm.client
        for side in (int(s) for s in a.sizes.split(",")):
            m = n = side
            if n % comm.size:
                raise SystemExit(f"{n} columns do not split into {comm.size} ranks")
            k = n // comm.size
            a_full = matrix(m, n)
            mine = np.ascontiguousarray(a_full[:, comm.rank * k : (comm.rank + 1) * k])
            put_buffer(c, A_BUF, mine)
            del mine
            chain = [load(X_BUF), load(A_BUF), Step("gemv", cols=k), keep(Y_BUF)]
            total: list[float] = []
            one: list[float] = []
            phases: list[tuple[float, float, float]] = []
            worst = 0.0
            for i, mode in ((i, mode) for i in range(a.warmup + a.reps) for mode in modes):
                x = vector(n, i)
                if mode == "one":
                    # One call: the collectives are hops of the chain, run at the nodes.
                    hops = [
                        comm.hop("scatter", dtype=np.float32, count=k),
                        load(A_BUF),
                        Step("gemv", cols=k),
                        comm.hop("reduce", dtype=np.float32, count=m, root=0),
                    ]
                    t0 = time.perf_counter()
                    out = c.call_chain(hops, x if comm.rank == 0 else b"")
                    t3 = time.perf_counter()
                    y = np.frombuffer(out, dtype=np.float32)
                    if comm.rank != 0:
                        assert y.size == 0
                else:
                    t0 = time.perf_counter()
                    comm.run(
                        "scatter",
                        dtype=np.float32,
                        count=k,
                        data=x.reshape(comm.size, k) if comm.rank == 0 else None,
                        keep=X_BUF,
                    )
                    t1 = time.perf_counter()
                    c.call_chain(chain)
                    t2 = time.perf_counter()
                    y = comm.run("reduce", dtype=np.float32, count=m, source=Y_BUF, root=0)
                    t3 = time.perf_counter()
                    if i >= a.warmup:
                        phases.append((t1 - t0, t2 - t1, t3 - t2))
                if comm.rank == 0:
                    assert y is not None and y.shape == (m,)
                    worst = max(worst, check(y, a_full, x))
                if i >= a.warmup:
                    (one if mode == "one" else total).append(t3 - t0)
            for name in (A_BUF, X_BUF, Y_BUF) if "three" in modes else (A_BUF,):
                c.call_chain([drop(name)])
            if comm.rank == 0:
                print(
                    json.dumps(
                        {
                            "side": side,
                            "ranks": comm.size,
                            "times": total,
                            "times_one": one,
                            "phases": phases,
                            "max_rel_err": worst,
                        }
                    )
                )
                sys.stdout.flush()


if __name__ == "__main__":
    main()
