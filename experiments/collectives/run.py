"""Collectives across namespace hosts: offrac's nodes against OpenMPI (mpi4py), side by side.

For 2 and 4 ranks, each on its own network namespace host (veth + bridge, as the multi-host
tests), and sizes 1 KiB .. 16 MiB: the latency of all-reduce (sum, float32) and broadcast —
per iteration the slowest rank's time, median over iterations — and the algorithm bandwidth
(bytes / latency). offrac: each rank's client calls its own node, the nodes run the
collective. MPI: mpi4py over OpenMPI's TCP transport between the same namespaces, one
process per host, launched by mpirun through `ip netns exec`.

    sudo python3 experiments/collectives/run.py [--ranks 2,4] [--ops allreduce,bcast] [--reps 20]

Needs root, iproute2, openmpi-bin + libopenmpi-dev and `pip install mpi4py`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(REPO / "experiments"))

from _netns_nodes import devices, start_linked_nodes  # noqa: E402
from netns import Hosts  # noqa: E402

PORT = 7300
WORKER = Path(__file__).resolve().parent / "worker.py"
KIB = 1024
SIZES = [KIB, 4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, 1 << 20, 4 << 20, 16 << 20]


def node_config(hosts: Hosts, me: int, n: int) -> str:
    peers = devices(hosts, me, n, PORT)
    return (
        f'device_id = {me}\nmax_payload = {40 << 20}\n[metrics]\nlisten = ""\n'
        f"[pool]\nbuffers = 8\nbuffer_bytes = {40 << 20}\n"
        f"[selector]\nslot_queue_bytes = {40 << 20}\n{peers}"
    )


def start_nodes(hosts: Hosts, n: int, tmp: Path) -> list[subprocess.Popen[str]]:
    return start_linked_nodes(hosts, [node_config(hosts, i, n) for i in range(n)], PORT, tmp)


def latency(lines: list[dict[str, object]], nbytes: int) -> float:
    """Median over iterations of the slowest rank's time."""
    per_rank = [d["times"] for d in lines if d["bytes"] == nbytes]
    assert per_rank, nbytes
    slowest = [max(ts) for ts in zip(*per_rank, strict=True)]  # type: ignore[call-overload]
    return statistics.median(slowest)


def run_offrac(
    hosts: Hosts, n: int, op: str, reps: int, sizes: list[int], first_tag: int
) -> list[dict[str, object]]:
    members = ",".join(str(i) for i in range(n))
    size_arg = ",".join(map(str, sizes))
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    procs = [
        subprocess.Popen(
            [
                *hosts.prefix(i),
                sys.executable,
                str(WORKER),
                "offrac",
                "--op",
                op,
                "--sizes",
                size_arg,
                "--reps",
                str(reps),
                "--addr",
                f"{hosts.ip(i)}:{PORT}",
                "--members",
                members,
                "--device",
                str(i),
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
        assert p.returncode == 0, f"offrac worker failed ({p.returncode})"
        lines += [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    return lines


def run_mpi(hosts: Hosts, n: int, op: str, reps: int, sizes: list[int], tmp: Path) -> list[dict[str, object]]:
    # mpirun starts its daemons through this agent: `agent HOST COMMAND…` runs COMMAND in
    # the namespace that owns HOST's address.
    agent = tmp / "netns-agent.sh"
    cases = "".join(f"  {hosts.ip(i)}) ns={hosts.names[i]} ;;\n" for i in range(hosts.n))
    script = f'#!/bin/sh\nhost="$1"; shift\ncase "$host" in\n{cases}  *) exit 1 ;;\nesac\n'
    agent.write_text(script + 'exec ip netns exec "$ns" sh -c "$*"\n')
    agent.chmod(0o755)
    subnet = f"10.{hosts.net}.0.0/24"
    args = [
        "mpirun",
        "--allow-run-as-root",
        "-np",
        str(n),
        "-H",
        ",".join(f"{hosts.ip(i)}:1" for i in range(n)),
        "--mca",
        "plm_rsh_agent",
        str(agent),
        "--mca",
        "btl",
        "tcp,self",
        "--mca",
        "btl_tcp_if_include",
        subnet,
        "--mca",
        "oob_tcp_if_include",
        subnet,
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
        "-x",
        "PATH",
        "-x",
        "PYTHONPATH",
        sys.executable,
        str(WORKER),
        "mpi",
        "--op",
        op,
        "--sizes",
        ",".join(map(str, sizes)),
        "--reps",
        str(reps),
    ]
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(args, capture_output=True, text=True, timeout=1800, env=env)
    assert out.returncode == 0, f"mpirun failed:\n{out.stderr[-3000:]}"
    return [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]


def human(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--ops", default="allreduce,bcast")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--max-bytes", type=int, default=16 << 20)
    a = ap.parse_args()
    ranks = [int(r) for r in a.ranks.split(",")]
    sizes = [s for s in SIZES if s <= a.max_bytes]
    hosts = Hosts(max(ranks))
    rows = []
    try:
        with tempfile.TemporaryDirectory() as d:
            tmp = Path(d)
            for n in ranks:
                nodes = start_nodes(hosts, n, tmp)
                try:
                    for op in a.ops.split(","):
                        ours = run_offrac(hosts, n, op, a.reps, sizes, first_tag=1 + 1_000_000 * len(rows))
                        theirs = run_mpi(hosts, n, op, a.reps, sizes, tmp)
                        for s in sizes:
                            lo, lm = latency(ours, s), latency(theirs, s)
                            algo = next(str(x["algorithm"]) for x in ours if x["bytes"] == s)
                            rows.append((op, n, s, lo, lm, algo))
                            print(
                                f"{op:9} {n} ranks {human(s):>7}: offrac {lo * 1e6:10.0f} µs"
                                f"  MPI {lm * 1e6:10.0f} µs  ratio {lo / lm:5.2f}  ({algo})",
                                flush=True,
                            )
                finally:
                    for p in nodes:
                        p.terminate()
                        p.wait(timeout=10)
    finally:
        hosts.close()
    head = "| collective | ranks | size | offrac µs | MPI µs | offrac / MPI | offrac MB/s | MPI MB/s"
    print(f"\n{head} | algorithm |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for op, n, s, lo, lm, algo in rows:
        print(
            f"| {op} | {n} | {human(s)} | {lo * 1e6:.0f} | {lm * 1e6:.0f} | {lo / lm:.2f} | "
            f"{s / lo / 1e6:.1f} | {s / lm / 1e6:.1f} | {algo.removeprefix('Algorithm.').lower()} |"
        )


if __name__ == "__main__":
    main()
