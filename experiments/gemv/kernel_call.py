"""One rank's gemv call at the node against numpy's ``A @ x`` on the same data, in one run.

The call is the one each rank of ``run.py`` makes per multiply (``--mode three``): the chain
``[load(x), load(A_r), gemv(cols=k), keep(y_r)]`` with an empty payload, ``A_r`` an m x k
float32 block kept at the node as a named buffer, ``x_r`` a k-vector kept beside it. One node
per binary (``--bins``, e.g. main's copy and this tree's build; loopback, no namespaces), the
nodes as run.py's (``[io] mode = "blocking"``, gemv slot). Per repetition every binary's call
and numpy's ``A_r @ x_r`` (OpenBLAS on one thread, as MPI's peer in run.py) run back to back,
in an order that alternates; before timing, each node's ``y`` is checked against numpy in
float64. Prints per shape the median µs of each and the ratios, and the load average.

    python3 experiments/gemv/kernel_call.py [--bins OLD,NEW] [--shapes 2048x1024,1024x1024]
        [--reps 41]

``--bins`` defaults to ``$OFFRAC_BIN`` (or target/release/offrac) alone. ``--hold S`` keeps
calling the last binary's node for S seconds after the table (its pid printed first), for
``perf record -g -p PID``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
import numpy.typing as npt

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "experiments"))

from _bench import offrac_bin  # noqa: E402
from collectives.run import io_config  # noqa: E402

from offrac import Step  # noqa: E402
from offrac.buffers import keep, load, put_buffer  # noqa: E402

from conftest import Node  # noqa: E402

A_BUF, X_BUF, Y_BUF = 1, 2, 3
MAX = 80 << 20


def config() -> str:
    return (
        f'max_payload = {MAX}\n[metrics]\nlisten = ""\n{io_config("blocking", 100)}'
        f"[pool]\nbuffers = 4\nbuffer_bytes = {MAX}\n[selector]\nslot_queue_bytes = {MAX}\n"
        f'[[slots]]\nfunction = "gemv"\n'
    )


def shape(s: str) -> tuple[int, int]:
    m, _, k = s.partition("x")
    return int(m), int(k)


def check(y: npt.NDArray[np.float32], a: npt.NDArray[np.float32], x: npt.NDArray[np.float32]) -> None:
    want = a.astype(np.float64) @ x.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(x).astype(np.float64)
    err = float(np.max(np.abs(y.astype(np.float64) - want) / bound))
    assert err < 1e-5, err


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bins", default=offrac_bin(), help="comma-separated node binaries")
    ap.add_argument("--shapes", default="2048x1024,1024x1024", help="m x k blocks, comma-separated")
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--hold", type=float, default=0.0, help="seconds of calls after the table")
    a = ap.parse_args()
    bins = [Path(b) for b in a.bins.split(",")]
    names = [f"bin{i} ({b.parent.name}/{b.name})" if len(bins) > 1 else "offrac" for i, b in enumerate(bins)]
    tmp = Path(tempfile.mkdtemp(prefix="gemv-call-"))
    nodes = [Node(b, tmp / f"node{i}", config()) for i, b in enumerate(bins)]
    clients = [n.client(timeout=120) for n in nodes]
    print(f"load average at start: {os.getloadavg()}")
    for i, n in enumerate(names):
        print(f"{n}: {bins[i]}, pid {nodes[i].proc.pid}")
    try:
        print("median µs per call; 'numpy' is A_r @ x_r (OpenBLAS, one thread)")
        print(f"{'shape':<10} " + " ".join(f"{f'bin{i}':>9}" for i in range(len(bins))) + " numpy  ratios")
        rng = np.random.default_rng(16)
        for m, k in (shape(s) for s in a.shapes.split(",")):
            am = rng.standard_normal((m, k), dtype=np.float32)
            x = rng.standard_normal(k, dtype=np.float32)
            chain = [load(X_BUF), load(A_BUF), Step("gemv", cols=k), keep(Y_BUF)]
            for c in clients:
                put_buffer(c, A_BUF, am)
                put_buffer(c, X_BUF, x)
                y = c.call_chain([load(X_BUF), load(A_BUF), Step("gemv", cols=k)])
                check(np.asarray(y), am, x)
            times: list[list[float]] = [[] for _ in range(len(bins) + 1)]
            for r in range(a.warmup + a.reps):
                order = list(range(len(bins) + 1))
                if r % 2:
                    order.reverse()
                for j in order:
                    t0 = time.perf_counter()
                    if j < len(bins):
                        clients[j].call_chain(chain)
                    else:
                        np.matmul(am, x)
                    t1 = time.perf_counter()
                    if r >= a.warmup:
                        times[j].append((t1 - t0) * 1e6)
            meds = [statistics.median(t) for t in times]
            ratios = [f"bin{i}/numpy {meds[i] / meds[-1]:.1f}" for i in range(len(bins))]
            if len(bins) > 1:
                ratios.append(f"bin{len(bins) - 1}/bin0 {meds[-2] / meds[0]:.2f}")
            print(f"{f'{m}x{k}':<10} " + " ".join(f"{v:>9.0f}" for v in meds) + "  " + ", ".join(ratios))
            sys.stdout.flush()
        print(f"load average at end: {os.getloadavg()}")
        if a.hold > 0:
            end = time.monotonic() + a.hold
            calls = 0
            while time.monotonic() < end:
                clients[-1].call_chain(chain)
                calls += 1
            print(f"held: {calls} calls on pid {nodes[-1].proc.pid} in {a.hold} s")
    finally:
        for c in clients:
            c.close()
        for n in nodes:
            n.stop()


if __name__ == "__main__":
    main()
