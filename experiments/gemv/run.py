"""Distributed vector-matrix multiply across namespace hosts (ACCL+ §6), against one node.

The m x n float32 matrix A stays at the nodes in named buffers; per multiply only the vector
and the partial products travel. Distributed (``--ranks`` hosts, default 4): A split
column-wise, block r kept at rank r's node; scatter x, each node multiplies its block
(function ``gemv``), reduce (sum) to the root — see worker.py. One node: the whole A kept
at node 0, each multiply the chain ``[load(A), gemv]`` with x as the payload. Also, for
reference, one node without named buffers (A sent with every multiply). Every result is
checked against numpy (float64). Prints median ms per multiply and the speed-up.

The distributed multiply runs two ways, alternated within each repetition (worker.py
``--mode both``): three client calls per rank (scatter, the gemv chain, reduce) and one (the
collectives as hops of the chain, ``docs/collectives.md``, "Collectives in a chain"); a
second table compares them (``--mode three|one`` runs one of them; ``--no-single`` skips the
one-node baselines).

The MPI peer (``--rounds R``, default 2; ``--no-mpi`` skips it): the same multiply with
mpi4py over OpenMPI on the same namespace hosts, one rank per host, started with
experiments/collectives' ``mpirun`` launch (its launch agent, TCP BTL on the bridge subnet,
``mpi_yield_when_idle``). Rank r holds A_r in its memory; per multiply ``Scatter`` x,
numpy ``A_r @ x_r`` (OpenBLAS on one thread, as offrac's gemv kernel), ``Reduce`` (sum) to
rank 0, checked against numpy (worker.py ``--mpi``). The offrac multiply and the MPI one
alternate, ``R`` rounds each; a third table gives per size the medians (over the rounds'
medians) of offrac one call / three calls / MPI, the ratios to MPI and the compute phases
(the one / three table and the one-node table below it are the first round's).

The nodes run ``[io] mode = "blocking"`` (``--io-mode``, default blocking; ``--spin-us``),
the ``[io]`` section built by experiments/collectives' ``io_config``: they sleep when idle,
as the MPI ranks yield. The node's default ``poll`` (``--io-mode poll``) busy-polls after
each event and on the 2 shared cores starves the other hosts: the one-call multiply took
about twice as long at 64 and 256 (``io_modes.py`` alternates the two modes against MPI;
summary.md).

    sudo python3 experiments/gemv/run.py [--ranks 4] [--sizes 1024,2048,4096] [--reps 10] [--rounds 2]
        [--io-mode blocking|poll|yield] [--spin-us 100]

Needs root and iproute2 (network namespaces), and a release build of ``offrac``; the MPI
peer needs openmpi and mpi4py (``make experiment-deps``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "experiments"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _netns_nodes import Nodes, devices, start_linked_nodes  # noqa: E402
from collectives.run import IO_MODES, io_config, mpirun_args, run_mpirun  # noqa: E402
from netns import Hosts  # noqa: E402
from worker import matrix, vector  # noqa: E402

from offrac import Client, Step  # noqa: E402
from offrac.buffers import drop, load, put_buffer  # noqa: E402

PORT = 7400
WORKER = Path(__file__).resolve().parent / "worker.py"
MAX = 80 << 20  # a 4096 x 4096 float32 matrix (64 MiB) and its vector in one request


def node_config(hosts: Hosts, me: int, n: int, io_mode: str, spin_us: int) -> str:
    peers = devices(hosts, me, n, PORT)
    return (
        f'device_id = {me}\nmax_payload = {MAX}\n[metrics]\nlisten = ""\n{io_config(io_mode, spin_us)}'
        f"[pool]\nbuffers = 4\nbuffer_bytes = {MAX}\n[selector]\nslot_queue_bytes = {MAX}\n"
        f'[[slots]]\nfunction = "gemv"\n[collectives]\ntimeout_ms = 120000\n{peers}'
    )


def start_nodes(hosts: Hosts, n: int, tmp: Path, io_mode: str, spin_us: int) -> Nodes:
    configs = [node_config(hosts, i, n, io_mode, spin_us) for i in range(n)]
    return start_linked_nodes(hosts, configs, PORT, tmp, tmp / "logs")


def check(y: np.ndarray, a: np.ndarray, x: np.ndarray) -> float:
    want = a.astype(np.float64) @ x.astype(np.float64)
    bound = np.abs(a).astype(np.float64) @ np.abs(x).astype(np.float64)
    err = float(np.max(np.abs(y - want) / bound))
    assert err < 1e-4, err
    return err


def one_node(addr: str, side: int, reps: int, warmup: int = 2) -> tuple[list[float], list[float]]:
    """Seconds per multiply on one node: A kept there, and A sent every time."""
    a = matrix(side, side)
    kept, sent = [], []
    with Client(addr, timeout=120) as c:
        put_buffer(c, 1, a)
        for i in range(warmup + reps):
            x = vector(side, i)
            t0 = time.perf_counter()
            y = c.call_chain([load(1), Step("gemv", cols=side)], x)
            t1 = time.perf_counter()
            check(np.asarray(y), a, x)
            payload = np.concatenate([a.ravel(), x]).tobytes()
            t2 = time.perf_counter()
            y2 = c.call_chain([Step("gemv", cols=side)], payload)
            t3 = time.perf_counter()
            check(np.asarray(y2), a, x)
            if i >= warmup:
                kept.append(t1 - t0)
                sent.append(t3 - t2)
        c.call_chain([drop(1)])
    return kept, sent


def distributed(
    hosts: Hosts, n: int, sizes: list[int], reps: int, mode: str, first_tag: int = 1
) -> list[dict[str, object]]:
    """One offrac run of the distributed multiply; ``first_tag``: a new one per run (the nodes
    refuse a tag used recently)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    members = ",".join(str(i) for i in range(n))
    procs = [
        subprocess.Popen(
            [
                *hosts.prefix(i),
                sys.executable,
                str(WORKER),
                "--addr",
                f"{hosts.ip(i)}:{PORT}",
                "--members",
                members,
                "--device",
                str(i),
                "--sizes",
                ",".join(map(str, sizes)),
                "--reps",
                str(reps),
                "--mode",
                mode,
                "--first-tag",
                str(first_tag),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for i in range(n)
    ]
    lines = []
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        assert p.returncode == 0, f"worker failed ({p.returncode})"
        lines += [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    return lines


def run_mpi(hosts: Hosts, n: int, sizes: list[int], reps: int, tmp: Path) -> list[dict[str, object]]:
    """The MPI peer's multiply (worker.py ``--mpi``) under ``mpirun``, one rank per host."""
    one_thread = [f"{v}=1" for v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")]
    args = [
        *mpirun_args(hosts, n, tmp),
        "env",
        *one_thread,
        sys.executable,
        str(WORKER),
        "--mpi",
        *("--sizes", ",".join(map(str, sizes)), "--reps", str(reps)),
    ]
    return run_mpirun(args)


def med(xs: object) -> float:
    """Median of a JSON list of numbers (nan if empty)."""
    assert isinstance(xs, list)
    vals = [float(x) for x in xs]  # type: ignore[arg-type]
    return statistics.median(vals) if vals else float("nan")


def against_mpi(
    rounds: list[tuple[dict[int, dict[str, object]], dict[int, dict[str, object]]]],
    ranks: int,
    sizes: list[int],
    single: dict[int, tuple[list[float], list[float]]],
) -> None:
    """Per size: offrac one call / three calls / MPI (median over the rounds of each round's
    median), the ratios to MPI (median and range of the per-round ratio), and the compute
    phases: offrac's three-call gemv call and MPI's local numpy gemv (the rank-0 view)."""
    print(
        "| ranks | matrix | rounds | offrac one µs | offrac three µs | MPI µs | one / MPI | one / MPI range "
        "| three / MPI | offrac gemv call µs | MPI numpy gemv µs | MPI scatter / reduce µs "
        "| one node, A kept µs |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|---:|")
    for s in sizes:
        one = [med(d[s].get("times_one", [])) for d, _ in rounds]
        three = [med(d[s].get("times", [])) for d, _ in rounds]
        mpi = [med(m[s]["times_mpi"]) for _, m in rounds]
        r1 = [o / m for o, m in zip(one, mpi, strict=True)]
        r3 = [t / m for t, m in zip(three, mpi, strict=True)]
        gemv_off = statistics.median(med([p[1] for p in d[s].get("phases", [])]) for d, _ in rounds)  # type: ignore[union-attr]
        ph = [m[s]["phases_mpi"] for _, m in rounds]
        gemv_mpi, sc, re = (statistics.median(med([p[j] for p in x]) for x in ph) for j in (1, 0, 2))  # type: ignore[union-attr]
        kept = f"{statistics.median(single[s][0]) * 1e6:.0f}" if s in single else "-"
        print(
            f"| {ranks} | {s} x {s} | {len(rounds)} | {statistics.median(one) * 1e6:.0f} | "
            f"{statistics.median(three) * 1e6:.0f} | {statistics.median(mpi) * 1e6:.0f} | "
            f"{statistics.median(r1):.2f} | {min(r1):.2f}-{max(r1):.2f} | {statistics.median(r3):.2f} | "
            f"{gemv_off * 1e6:.0f} | {gemv_mpi * 1e6:.0f} | {sc * 1e6:.0f} / {re * 1e6:.0f} | {kept} |"
        )


def one_vs_three(dist: dict[int, dict[str, object]], ranks: int, sizes: list[int]) -> None:
    """The distributed multiply with three client calls per rank against one (collective hops)."""
    print("| ranks | matrix | three calls µs | one call µs | one / three |")
    print("|---:|---|---:|---:|---:|")
    for s in sizes:
        three = [float(t) for t in dist[s]["times"]]  # type: ignore[union-attr]
        one = [float(t) for t in dist[s]["times_one"]]  # type: ignore[union-attr]
        t3 = statistics.median(three) if three else float("nan")
        t1 = statistics.median(one) if one else float("nan")
        print(f"| {ranks} | {s} x {s} | {t3 * 1e6:.0f} | {t1 * 1e6:.0f} | {t1 / t3:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--sizes", default="1024,2048,4096")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--mode", choices=["three", "one", "both"], default="both")
    ap.add_argument("--no-single", action="store_true", help="skip the one-node baselines")
    ap.add_argument("--rounds", type=int, default=2, help="offrac and MPI runs, alternated (default 2)")
    ap.add_argument("--no-mpi", action="store_true", help="skip the MPI peer (one offrac round)")
    ap.add_argument(
        "--io-mode",
        choices=IO_MODES,
        default="blocking",
        help="the nodes' [io] mode, as experiments/collectives' --io-mode (default blocking: sleep "
        "when idle, as the MPI ranks yield; poll busy-polls spin_us after each event, which starves "
        "the other hosts on the shared cores)",
    )
    ap.add_argument(
        "--spin-us",
        type=int,
        default=100,
        help="the nodes' [io] spin_us: how long a poll-mode node busy-polls, or a yield-mode node "
        "polls and yields, after its last event before it sleeps (default 100, the node's default)",
    )
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    try:
        load_avg = os.getloadavg()[0]
    except OSError:
        load_avg = float("nan")
    hosts = Hosts(a.ranks)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as d:
            nodes = start_nodes(hosts, a.ranks, Path(d), a.io_mode, a.spin_us)
            try:
                single = (
                    {} if a.no_single else {s: one_node(f"{hosts.ip(0)}:{PORT}", s, a.reps) for s in sizes}
                )
                rounds: list[tuple[dict[int, dict[str, object]], dict[int, dict[str, object]]]] = []
                for r in range(1 if a.no_mpi else a.rounds):
                    d_off = {
                        int(str(x["side"])): x
                        for x in distributed(
                            hosts, a.ranks, sizes, a.reps, a.mode, first_tag=1 + r * 1_000_000
                        )
                    }
                    if a.no_mpi:
                        rounds.append((d_off, {}))
                        break
                    d_mpi = {int(str(x["side"])): x for x in run_mpi(hosts, a.ranks, sizes, a.reps, Path(d))}
                    rounds.append((d_off, d_mpi))
                    print(f"round {r + 1} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr, flush=True)
                dist = rounds[0][0]
            except BaseException:
                print(nodes.report(), file=sys.stderr, flush=True)
                raise
            finally:
                nodes.stop()
    finally:
        hosts.close()
    try:
        load_end = os.getloadavg()[0]
    except OSError:
        load_end = float("nan")
    print(
        f"load average at start: {load_avg:.1f}, at the end: {load_end:.1f}; "
        f"nodes' io mode {a.io_mode}, spin_us {a.spin_us}"
    )
    if not a.no_mpi:
        against_mpi(rounds, a.ranks, sizes, single)
    one_vs_three(dist, a.ranks, sizes)
    if a.no_single or a.mode == "one":
        return
    head = "| matrix | MiB | one node, A sent µs | one node, A kept µs | 4 hosts µs | speed-up"
    print(f"{head.replace('4 hosts', f'{a.ranks} hosts')} | scatter / gemv / reduce µs | max rel. error |")
    print("|---|---:|---:|---:|---:|---:|---|---:|")
    for s in sizes:
        kept, sent = single[s]
        dx = dist[s]
        times = [float(t) for t in dx["times"]]  # type: ignore[union-attr]
        phases = dx["phases"]
        assert isinstance(phases, list)
        med = [statistics.median(float(p[j]) for p in phases) * 1e6 for j in range(3)]
        k, se, di = statistics.median(kept), statistics.median(sent), statistics.median(times)
        rows.append((s, k, di))
        print(
            f"| {s} x {s} | {s * s * 4 / (1 << 20):.0f} | {se * 1e6:.0f} | {k * 1e6:.0f} | {di * 1e6:.0f} | "
            f"{k / di:.2f} | {med[0]:.0f} / {med[1]:.0f} / {med[2]:.0f} | "
            f"{float(str(dx['max_rel_err'])):.1e} |"
        )


if __name__ == "__main__":
    main()
