"""Collectives across namespace hosts: offrac's nodes against OpenMPI (mpi4py), side by side.

For 2, 4 and 8 ranks, each on its own network-namespace host (veth + bridge, as the
multi-host tests), the five collectives (broadcast, scatter, gather, reduce and all-reduce;
sum of float32) at 1 KiB .. 16 MiB per rank, in one run:

- offrac ``payload``: each rank's client sends its data in the call to its own node and gets
  its output in the answer (the data crosses the client's loopback hop both ways);
- offrac ``buffers``: the input already sits at the node in a named buffer and the output is
  kept in one (descriptor byte 7, ``docs/collectives.md``): only the call crosses that hop;
- MPI: mpi4py over OpenMPI between the same namespaces, one rank per host, the data in the
  rank's memory. ``mpirun`` starts its daemons through a launch agent (``plm_rsh_agent``)
  that runs each in the namespace owning the host's address (``ip netns exec``); the ranks
  use the TCP BTL (``--mca btl tcp,self``) on the hosts' bridge subnet only
  (``btl_tcp_if_include``, ``oob_tcp_if_include``) and yield when idle
  (``mpi_yield_when_idle 1``: the hosts share the machine's cores). The nodes likewise
  sleep when idle (``[io] mode = "blocking"``; ``--io-mode poll`` busy-polls instead).

Latency: per iteration the slowest rank's time (the ranks line up before each iteration),
median over iterations. MB/s: bytes per rank / latency. Ratios offrac / MPI (< 1: offrac
faster).

    sudo python3 experiments/collectives/run.py [--quick] [--ranks 2,4,8] [--ops ...] [--reps 20]

Needs root, iproute2, openmpi-bin + libopenmpi-dev and mpi4py (``make experiment-deps``).
OFFRAC_BIN picks the node binary (default target/release/offrac).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "experiments"))

from _netns_nodes import Nodes, devices, start_linked_nodes  # noqa: E402
from netns import Hosts  # noqa: E402

PORT = 7300
WORKER = Path(__file__).resolve().parent / "worker.py"
OPS = ["bcast", "scatter", "gather", "reduce", "allreduce"]
KIB = 1024
SIZES = [KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1 << 20, 4 << 20, 16 << 20]


# The root's scatter input and gather output are 8 x 16 MiB at 8 ranks.
MAX_PAYLOAD = 160 << 20
# The root's call carries up to ranks x 16 MiB (payload variant) from a Python client on
# shared, loaded cores. The node's reassembly deadline (2 s from the request's first byte) grows
# with the bytes received (`reassembly_min_rate`, 1 MiB/s by default), so a 64 MiB call that keeps
# arriving is not cut off; the stall timeout (5 s without a byte) still applies.
# One mpirun (one collective, every size) takes well under this.
MPI_TIMEOUT_S = 240
# One offrac run (every rank, one collective, every size) takes well under this.
WORKER_TIMEOUT_S = 3600
# How long the other ranks get to end once one rank failed.
WORKER_GRACE_S = 20


IO_MODES = ("blocking", "poll", "yield")


SPIN_WHEN = ("always", "cpu_idle")


def io_config(io_mode: str, spin_us: int, spin_when: str | None = None) -> str:
    """The nodes' ``[io]`` section (also used by experiments/gemv); ``spin_when`` None leaves
    the node's default."""
    if io_mode not in IO_MODES:
        raise ValueError(f"io mode {io_mode!r} not one of {IO_MODES}")
    if spin_when is not None and spin_when not in SPIN_WHEN:
        raise ValueError(f"spin_when {spin_when!r} not one of {SPIN_WHEN}")
    when = f'spin_when = "{spin_when}"\n' if spin_when else ""
    return f'[io]\nmode = "{io_mode}"\nspin_us = {spin_us}\n{when}'


def node_config(
    hosts: Hosts, me: int, n: int, io_mode: str, spin_us: int, spin_when: str | None = None
) -> str:
    peers = devices(hosts, me, n, PORT)
    return (
        f"device_id = {me}\nmax_payload = {MAX_PAYLOAD}\n"
        f'[metrics]\nlisten = "{hosts.ip(me)}:{PORT + 1}"\n'
        f"{io_config(io_mode, spin_us, spin_when)}"
        f"[pool]\nbuffers = 8\nbuffer_bytes = {MAX_PAYLOAD}\n"
        f"[selector]\nslot_queue_bytes = {MAX_PAYLOAD}\n"
        f"[named_buffers]\nmax_bytes = {1 << 30}\n{peers}"
    )


def start_nodes(
    hosts: Hosts, n: int, tmp: Path, io_mode: str, spin_us: int, logs: Path, spin_when: str | None = None
) -> Nodes:
    configs = [node_config(hosts, i, n, io_mode, spin_us, spin_when) for i in range(n)]
    return start_linked_nodes(hosts, configs, PORT, tmp, logs)


def latency(lines: list[dict[str, object]], nbytes: int) -> float:
    """Median over iterations of the slowest rank's time."""
    per_rank = [d["times"] for d in lines if d["bytes"] == nbytes]
    assert per_rank, nbytes
    slowest = [max(ts) for ts in zip(*per_rank, strict=True)]  # type: ignore[call-overload]
    return statistics.median(slowest)


def run_offrac(
    hosts: Hosts, n: int, op: str, variant: str, reps: int, sizes: list[int], first_tag: int
) -> list[dict[str, object]]:
    with contextlib.ExitStack() as files:
        outs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(n)]
        errs = [files.enter_context(tempfile.TemporaryFile("w+")) for _ in range(n)]
        return run_ranks(hosts, n, op, variant, reps, sizes, first_tag, outs, errs)


def run_ranks(
    hosts: Hosts,
    n: int,
    op: str,
    variant: str,
    reps: int,
    sizes: list[int],
    first_tag: int,
    outs: list[IO[str]],
    errs: list[IO[str]],
) -> list[dict[str, object]]:
    """One worker per rank, its stdout and stderr to ``outs[i]`` and ``errs[i]``."""
    members = ",".join(str(i) for i in range(n))
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    procs = [
        subprocess.Popen(
            [
                *hosts.prefix(i),
                sys.executable,
                str(WORKER),
                "offrac",
                *("--op", op, "--variant", variant, "--sizes", ",".join(map(str, sizes))),
                *("--reps", str(reps), "--addr", f"{hosts.ip(i)}:{PORT}", "--members", members),
                *("--device", str(i), "--first-tag", str(first_tag), "--poll-us", str(POLL_US)),
            ],
            stdout=outs[i],
            stderr=errs[i],
            text=True,
            env=env,
        )
        for i in range(n)
    ]
    try:
        codes = wait_ranks(procs)
        failed = [i for i, rc in enumerate(codes) if rc != 0]
        if failed:
            why = "\n  ".join(rank_failure(i, codes[i], errs[i]) for i in failed)
            raise RuntimeError(f"{op} ({variant}), {n} ranks failed:\n  {why}")
        lines = []
        for f in outs:
            f.seek(0)
            lines += [json.loads(x) for x in f.read().splitlines() if x.startswith("{")]
        return lines
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def wait_ranks(procs: list[subprocess.Popen[str]]) -> list[int]:
    """Every rank's exit code. Once one rank fails, the others get ``WORKER_GRACE_S`` to end
    (each is answered at its node as soon as its node sees the failure, or at the call's
    deadline) before they are killed: a failed rank is reported as such, not as the nodes
    torn down under the ranks still waiting (which would answer those ``UNREACHABLE``)."""
    start = time.monotonic()
    first_failure = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return [c for c in codes if c is not None]
        now = time.monotonic()
        if first_failure is None and any(c not in (None, 0) for c in codes):
            first_failure = now
        late = first_failure is not None and now - first_failure > WORKER_GRACE_S
        if late or now - start > WORKER_TIMEOUT_S:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            return [p.wait() for p in procs]
        time.sleep(0.05)


def rank_failure(rank: int, rc: int, err: IO[str]) -> str:
    """``rank r: exit code, its error's last line``."""
    err.seek(0)
    tail = [x for x in err.read().splitlines() if x.strip()]
    why = tail[-1] if tail else "(nothing on stderr)"
    status = "killed (still waiting)" if rc < 0 else f"exit {rc}"
    return f"rank {rank}: {status}: {why}"


def mpirun_args(hosts: Hosts, n: int, tmp: Path) -> list[str]:
    """``mpirun`` with one rank on each of the first ``n`` namespace hosts (module docstring)."""
    # `agent HOST COMMAND…` runs COMMAND in the namespace that owns HOST's address.
    agent = tmp / "netns-agent.sh"
    cases = "".join(f"  {hosts.ip(i)}) ns={hosts.names[i]} ;;\n" for i in range(hosts.n))
    script = f'#!/bin/sh\nhost="$1"; shift\ncase "$host" in\n{cases}  *) exit 1 ;;\nesac\n'
    agent.write_text(script + 'exec ip netns exec "$ns" sh -c "$*"\n')
    agent.chmod(0o755)
    subnet = f"10.{hosts.net}.0.0/24"
    mca = {
        "plm_rsh_agent": str(agent),
        "plm_rsh_no_tree_spawn": "1",
        "btl": "tcp,self",
        "btl_tcp_if_include": subnet,
        "oob_tcp_if_include": subnet,
        "mpi_yield_when_idle": "1",
    }
    args = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(n),
        "-H",
        ",".join(f"{hosts.ip(i)}:1" for i in range(n)),
    ]
    for k, v in mca.items():
        args += ["--mca", k, v]
    return [*args, "-x", "PATH", "-x", "PYTHONPATH"]


def run_mpi(hosts: Hosts, n: int, op: str, reps: int, sizes: list[int], tmp: Path) -> list[dict[str, object]]:
    args = [
        *mpirun_args(hosts, n, tmp),
        sys.executable,
        str(WORKER),
        "mpi",
        *("--op", op, "--sizes", ",".join(map(str, sizes)), "--reps", str(reps)),
    ]
    return run_mpirun(args)


def run_mpirun(args: list[str]) -> list[dict[str, object]]:
    """Run ``args`` (an ``mpirun_args`` command line), started again if ``mpirun`` hangs; the
    JSON lines of its stdout."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    # mpirun now and then hangs starting its daemons in the namespaces (one never reports
    # back): stopped (SIGTERM lets it take its daemons down) and started again.
    for attempt in range(3):
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            out, err = p.communicate(timeout=MPI_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            p.terminate()
            try:
                p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
            print(f"  (mpirun hung, attempt {attempt + 1}; started again)", flush=True)
            continue
        assert p.returncode == 0, f"mpirun failed:\n{err[-3000:]}"
        return [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    raise RuntimeError("mpirun hung three times")


def human(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def algorithm_of(lines: list[dict[str, object]], nbytes: int) -> str:
    a = next(str(x["algorithm"]) for x in lines if x["bytes"] == nbytes)
    return a.removeprefix("Algorithm.").lower()


VARIANTS = ["payload", "buffers", "chain"]
# Variants that run only some collectives (worker.py: chain is all-reduces in one chain).
ONLY = {"chain": {"allreduce"}}
# The ranks' clients poll this long for an answer before blocking (--poll-us; 0: block at once).
POLL_US = 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--quick", action="store_true", help="2 and 4 ranks, 1 KiB / 64 KiB / 1 MiB / 16 MiB, 5 reps"
    )
    ap.add_argument("--ranks", default=None, help="default 2,4,8 (--quick: 2,4)")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--variants", default=",".join([*VARIANTS, "mpi"]))
    ap.add_argument(
        "--reps", type=int, default=None, help="iterations per size up to 1 MiB (default 20, quick 5)"
    )
    ap.add_argument("--sizes", default=None, help="bytes per rank, comma-separated")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument(
        "--logs",
        type=Path,
        default=None,
        help="the nodes' logs go here (default: a new temporary directory, kept and printed)",
    )
    ap.add_argument(
        "--io-mode",
        choices=IO_MODES,
        default="blocking",
        help="the nodes' [io] mode (default blocking: sleep when idle, as the MPI ranks yield; "
        "poll busy-polls spin_us after each event, which starves the other hosts on shared cores)",
    )
    ap.add_argument(
        "--spin-us",
        type=int,
        default=1000,
        help="the nodes' [io] spin_us: how long a yield-mode node polls and yields, or a poll-mode "
        "node busy-polls, after its last event before it sleeps (default 1000)",
    )
    ap.add_argument(
        "--spin-when",
        choices=SPIN_WHEN,
        default=None,
        help="the nodes' [io] spin_when: cpu_idle polls only while no more threads are runnable "
        "than the machine has CPUs, always whenever inside spin_us (default: the node's)",
    )
    ap.add_argument(
        "--poll-us",
        type=int,
        default=0,
        help="the offrac ranks' clients poll the socket and sched_yield for up to this many µs "
        "after each call before they block (Client(poll_us=...), as MPI's ranks yield; default 0)",
    )
    a = ap.parse_args()
    global POLL_US
    POLL_US = a.poll_us
    ranks = [int(r) for r in (a.ranks or ("2,4" if a.quick else "2,4,8")).split(",")]
    reps = a.reps or (5 if a.quick else 20)
    if a.sizes:
        sizes = [int(s) for s in a.sizes.split(",")]
    else:
        sizes = [KIB, 64 * KIB, 1 << 20, 16 << 20] if a.quick else SIZES
    variants = a.variants.split(",")
    load = os.getloadavg()
    print(
        f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"nodes' io mode {a.io_mode}, spin_us {a.spin_us}, spin_when {a.spin_when or 'default'}",
        flush=True,
    )
    logs = a.logs or Path(tempfile.mkdtemp(prefix="offrac-collectives-"))
    print(f"nodes' logs in {logs}", flush=True)
    hosts = Hosts(max(ranks))
    rows: list[dict[str, object]] = []
    runs = 0
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for n in ranks:
                nodes = start_nodes(hosts, n, tmp, a.io_mode, a.spin_us, logs, a.spin_when)
                try:
                    for op in a.ops.split(","):
                        got: dict[str, list[dict[str, object]]] = {}
                        for v in variants:
                            if op not in ONLY.get(v, {op}):
                                continue
                            runs += 1
                            if v == "mpi":
                                got[v] = run_mpi(hosts, n, op, reps, sizes, tmp)
                            else:
                                got[v] = run_offrac(hosts, n, op, v, reps, sizes, first_tag=runs * 1_000_000)
                            if nodes.dead():
                                raise RuntimeError(f"node(s) {nodes.dead()} died during {op} ({v})")
                        for s in sizes:
                            row: dict[str, object] = {"op": op, "ranks": n, "bytes": s}
                            for v, lines in got.items():
                                row[v] = latency(lines, s)
                            ours = [v for v in VARIANTS if v in got]
                            if ours:
                                row["algorithm"] = algorithm_of(got[ours[0]], s)
                            rows.append(row)
                            print(summary(row), flush=True)
                except BaseException as e:
                    print(f"\n{n} ranks failed ({type(e).__name__}: {e}); the nodes:", file=sys.stderr)
                    print(nodes.report(), file=sys.stderr, flush=True)
                    raise
                finally:
                    nodes.stop()
    finally:
        hosts.close()
        print(f"nodes' logs in {logs}", flush=True)
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(table(rows, variants))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


def summary(row: dict[str, object]) -> str:
    s = int(row["bytes"])  # type: ignore[call-overload]
    parts = [f"{row['op']:9} {row['ranks']} ranks {human(s):>7}:"]
    for v in [*VARIANTS, "mpi"]:
        if v in row:
            parts.append(f"{v} {float(row[v]) * 1e6:9.0f} µs")  # type: ignore[arg-type]
    for v in VARIANTS:
        if v in row and "mpi" in row:
            parts.append(f"{v}/MPI {float(row[v]) / float(row['mpi']):5.2f}")  # type: ignore[arg-type]
    return "  ".join(parts) + f"  ({row.get('algorithm', '')})"


def table(rows: list[dict[str, object]], variants: list[str]) -> str:
    ours = [v for v in VARIANTS if v in variants]
    mpi = "mpi" in variants
    cols = [f"{v} µs" for v in ours] + (["MPI µs"] if mpi else [])
    cols += [f"{v} / MPI" for v in ours if mpi]
    cols += [f"{v} MB/s" for v in ours] + (["MPI MB/s"] if mpi else []) + ["algorithm"]
    out = ["| collective | ranks | size | " + " | ".join(cols) + " |"]
    out.append("|---|---:|---:|" + "---:|" * (len(cols) - 1) + "---|")
    for r in rows:
        s = int(r["bytes"])  # type: ignore[call-overload]
        # A variant that does not run this collective (ONLY) leaves its cells empty.
        t = {v: float(r[v]) for v in [*ours, *(["mpi"] if mpi else [])] if v in r}  # type: ignore[arg-type]
        cells = [f"{t[v] * 1e6:.0f}" if v in t else "" for v in ours]
        cells += [f"{t['mpi'] * 1e6:.0f}"] if mpi else []
        cells += [f"{t[v] / t['mpi']:.2f}" if v in t else "" for v in ours if mpi]
        cells += [f"{s / t[v] / 1e6:.1f}" if v in t else "" for v in [*ours, *(["mpi"] if mpi else [])]]
        cells.append(str(r.get("algorithm", "")))
        out.append(f"| {r['op']} | {r['ranks']} | {human(s)} | " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    main()
