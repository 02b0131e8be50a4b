#!/usr/bin/env python3
"""Issue #16: the memcached look-through cache (docs/inline.md) on NICA's workloads.

One stock memcached (2 threads) and one node fronting it (``[[attach]]``, function
``memcached_cache``); the same closed-loop clients (``memcached_load``, an example of the node
crate: 16 B keys and values, one request in flight per client) run straight at memcached and
through the node, alternating, in one run:

- ``hits``: 100 % GETs of 100,000 preloaded keys, all cached at the node (NICA Fig. 7's case);
- ``zipf``: GETs with Zipf(0.99) popularity and 0.2 % SETs (NICA's skewed workload);
- ``misses``: GETs of keys never stored: every one goes to memcached (the cost of a miss);
- ``misses_1client``: the same with one client, so no request waits behind another's (the
  cost of a miss without queueing on the shared cores).

Beside memcached direct and the node, the same clients go through two minimal TCP relays
(``tcp_relay``, an example of the node crate: each client gets its own backend connection and
bytes are copied both ways, nothing parsed): ``relay`` sleeps in one epoll loop as the node's
attach loop does; ``relay_spin`` polls each client's two sockets from a thread of its own
without ever sleeping. They are the floor of any proxy on this machine: what a miss costs
through the node beyond ``relay`` is the node's own; what ``relay`` costs beyond direct is the
extra hop's (two more processes' wake-ups), which only a proxy that never sleeps avoids.

For each: requests/s, p50 and p99 (µs), and the CPU time memcached spends per request (its
utime + stime from /proc/PID/stat over the run), beside the node's own. Medians over rounds.
Here the node shares the machine's cores with memcached and the clients, standing in for NICA's
FPGA NIC. ``--quick`` runs one short round; ``--loops N`` sets the attached address's event
loops (``loops`` in ``[[attach]]``; the node's default otherwise), ``--spin-us N`` their
busy-polling (``spin_us``) and ``--backend-spin-us N`` their polling while memcached owes an
answer (``backend_spin_us``), ``--spin-when always|cpu_idle`` whether they poll only while a CPU
is free (``spin_when``); ``--rounds N`` and ``--workloads a,b`` narrow or lengthen a run.
``--also-node 0:always,50:cpu_idle:2`` adds more nodes, each its own process and cache in front of
the same memcached, with that ``spin_us:spin_when[:loops]`` (paths ``node_s0_always``,
``node_s50_cpu_idle_l2``), measured in turn with the others, so settings compare in one run;
``--paths direct,node,...`` leaves the others out.
``--cpus LIST`` (as taskset takes it: ``0``, ``0,1``, ``0-1``) runs every process of the run
(memcached, the node, the relays and the clients) on those CPUs only. With ``--cpus 0`` every
hand-off is a switch on one CPU, none a wake-up of another CPU, so what a path costs beyond
another is its own work, apart from where the scheduler happens to place the woken threads
(docs/results.md, "Where the scheduler puts a wake-up"). A spinning relay on one CPU only
takes time from the client and memcached, so expect ``relay_spin`` to be slow there.
``IPIs/req`` counts the machine's rescheduling and function-call interrupts over a client run
(its 0.5 s warm-up included, as in the CPU columns) per measured request: each wakes a sleeping
CPU to run a thread woken from the other, the costly kind of hand-off on this VM.
Needs ``make build`` (the two examples) and ``memcached``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from _bench import REPO, Server, finish, free_port, log, machine, md_table, median, parse_cpus

from offrac import wait_listening

HERE = Path(__file__).resolve().parent
if "--help" in sys.argv or "-h" in sys.argv:
    print(__doc__)
    print("Writes results.csv, summary.md and plot.png next to this script.")
    sys.exit(0)
QUICK = "--quick" in sys.argv


def flag(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


ROUNDS = int(flag("--rounds") or (1 if QUICK else 3))
SECONDS = 1.0 if QUICK else 2.0
KEYS = 100_000
CLIENTS = 4
ALL_WORKLOADS = ("hits", "zipf", "misses", "misses_1client")
WORKLOADS = tuple((flag("--workloads") or ",".join(ALL_WORKLOADS)).split(","))
if not set(WORKLOADS) <= set(ALL_WORKLOADS):
    sys.exit(f"--workloads: a comma-separated subset of {','.join(ALL_WORKLOADS)}")
LOOPS = int(v) if (v := flag("--loops")) is not None else None
SPIN_US = int(v) if (v := flag("--spin-us")) is not None else None
BACKEND_SPIN_US = int(v) if (v := flag("--backend-spin-us")) is not None else None
CPUS = flag("--cpus")
if CPUS is not None:
    # Children inherit the affinity: memcached, the node, the relays and every client.
    try:
        os.sched_setaffinity(0, parse_cpus(CPUS))
    except (ValueError, OSError) as e:
        sys.exit(f"--cpus {CPUS}: {e} (a list such as 0 or 0,1 or 0-1 of this machine's CPUs)")
ARGS = (
    (" --quick" if QUICK else "")
    + (f" --rounds {ROUNDS}" if flag("--rounds") else "")
    + (f" --workloads {','.join(WORKLOADS)}" if flag("--workloads") else "")
    + (f" --loops {LOOPS}" if LOOPS is not None else "")
    + (f" --spin-us {SPIN_US}" if SPIN_US is not None else "")
    + (f" --backend-spin-us {BACKEND_SPIN_US}" if BACKEND_SPIN_US is not None else "")
    + (f" --spin-when {flag('--spin-when')}" if flag("--spin-when") else "")
    + (f" --also-node {flag('--also-node')}" if flag("--also-node") else "")
    + (f" --paths {flag('--paths')}" if flag("--paths") else "")
    + (f" --cpus {CPUS}" if CPUS is not None else "")
)
SPIN_WHEN = flag("--spin-when")


def node_variants(spec: str | None) -> dict[str, tuple[int, str, int | None]]:
    """``--also-node 50:always,50:cpu_idle:2``: more nodes, each its own process and cache in
    front of the same memcached, with that ``spin_us``, ``spin_when`` and (optionally)
    ``loops``; path names ``node_s50_always``, ``node_s50_cpu_idle_l2``..."""
    out: dict[str, tuple[int, str, int | None]] = {}
    for item in (spec or "").split(","):
        if not item:
            continue
        us, when, *rest = item.split(":")
        loops = rest[0] if len(rest) == 1 else None
        ok = us.isdigit() and when in ("always", "cpu_idle") and len(rest) <= 1
        if not ok or (loops is not None and not loops.isdigit()):
            sys.exit(f"--also-node: {item!r} is not SPIN_US:always|cpu_idle[:LOOPS]")
        name = f"node_s{us}_{when}" + (f"_l{loops}" if loops else "")
        out[name] = (int(us), when, int(loops) if loops else None)
    return out


VARIANTS = node_variants(flag("--also-node"))
ALL_PATHS = ("direct", "relay", "relay_spin", "node", *VARIANTS)
PATHS = tuple((flag("--paths") or ",".join(ALL_PATHS)).split(","))
if not set(PATHS) <= set(ALL_PATHS) or "direct" not in PATHS or "node" not in PATHS:
    sys.exit(f"--paths: a comma-separated subset of {','.join(ALL_PATHS)} with direct and node")
EXAMPLES = REPO / "target" / "release" / "examples"
LOAD = os.environ.get("OFFRAC_MEMCACHED_LOAD", str(EXAMPLES / "memcached_load"))
RELAY = os.environ.get("OFFRAC_TCP_RELAY", str(EXAMPLES / "tcp_relay"))
FIELDS = [
    "workload",
    "path",
    "round",
    "ops",
    "rate",
    "p50_us",
    "p99_us",
    "hit_answers",
    "memcached_cpu_us_per_req",
    "proxy_cpu_us_per_req",
    "ipis_per_req",
]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])  # utime, stime: fields 14 and 15 of proc(5)
    return ticks / os.sysconf("SC_CLK_TCK")


def ipis() -> int:
    """Rescheduling and function-call interrupts so far, all CPUs: one wakes a sleeping CPU to
    run a thread woken from another (on a VM each costs an exit; /proc/interrupts RES, CAL)."""
    total = 0
    for line in Path("/proc/interrupts").read_text().splitlines():
        name, _, rest = line.strip().partition(":")
        if name in ("RES", "CAL"):
            total += sum(int(x) for x in rest.split() if x.isdigit())
    return total


def load(addr: str, workload: str, seconds: float, extra: list[str] | None = None) -> dict[str, Any]:
    clients = 1 if workload.endswith("_1client") else CLIENTS
    args = [LOAD, "--addr", addr, "--keys", str(KEYS), "--clients", str(clients)]
    args += [
        "--workload",
        workload.removesuffix("_1client"),
        "--seconds",
        str(seconds),
        "--warmup",
        "0.5",
        *(extra or []),
    ]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def start_relay(backend: str, mode: str) -> tuple[subprocess.Popen[str], str]:
    """A ``tcp_relay`` in front of ``backend``: the process and the address it listens on."""
    proc = subprocess.Popen(
        [RELAY, "--listen", "127.0.0.1:0", "--backend", backend, "--mode", mode],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if line[:1] != ["listening"]:
        proc.kill()
        sys.exit(f"tcp_relay did not start: {line}")
    return proc, line[1]


def measure() -> list[dict[str, Any]]:
    memcached = shutil.which("memcached")
    if memcached is None:
        sys.exit("needs memcached (apt-get install memcached)")
    for tool in (LOAD, RELAY):
        if not os.access(tool, os.X_OK):
            sys.exit(f"needs {tool} (make build)")
    mport = free_port()
    mc = subprocess.Popen(
        [memcached, "-l", "127.0.0.1", "-p", str(mport), "-t", "2", "-m", "256", "-U", "0", "-u", "nobody"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    nodes: dict[str, tuple[int | None, str | None, int | None]] = {"node": (SPIN_US, SPIN_WHEN, LOOPS)}
    nodes |= {p: v for p, v in VARIANTS.items() if p in PATHS}
    aport = {path: free_port() for path in nodes}
    cfgs = {path: HERE / f"{path}.toml" for path in nodes}
    for path, (spin_us, when, loops) in nodes.items():
        cfgs[path].write_text(
            '[metrics]\nlisten = ""\n[[slots]]\nfunction = "echo"\n'
            f'[[attach]]\nlisten = "127.0.0.1:{aport[path]}"\nfunction = "memcached_cache"\n'
            f'backend = "127.0.0.1:{mport}"\ncapacity_bytes = 67108864\n'
            + (f"loops = {loops}\n" if loops is not None else "")
            + (f"spin_us = {spin_us}\n" if spin_us is not None else "")
            + (f'spin_when = "{when}"\n' if when is not None else "")
            + (f"backend_spin_us = {BACKEND_SPIN_US}\n" if BACKEND_SPIN_US is not None else "")
        )
    rows: list[dict[str, Any]] = []
    relays: dict[str, subprocess.Popen[str]] = {}
    try:
        wait_listening(("127.0.0.1", mport))
        with contextlib.ExitStack() as stack:
            serve = ["serve", "--listen", "127.0.0.1:0", "--config"]
            servers = {path: stack.enter_context(Server([*serve, str(c)], path)) for path, c in cfgs.items()}
            addr = {"direct": f"127.0.0.1:{mport}"} | {path: f"127.0.0.1:{aport[path]}" for path in nodes}
            for path, mode in (("relay", "epoll"), ("relay_spin", "spin")):
                if path in PATHS:
                    relays[path], addr[path] = start_relay(addr["direct"], mode)
            pid = {path: proc.pid for path, proc in relays.items()} | {
                path: srv.proc.pid for path, srv in servers.items()
            }
            # Store every key (through the node), then read each once through every node: all cached.
            load(addr["node"], "hits", 0.1, ["--preload", "--warm"])
            for path in VARIANTS:
                if path in nodes:
                    load(addr[path], "hits", 0.1, ["--warm"])
            for r in range(ROUNDS):
                for w in WORKLOADS:
                    for path in PATHS if r % 2 == 0 else PATHS[::-1]:
                        proxy = pid.get(path)
                        mc0, n0 = cpu_seconds(mc.pid), cpu_seconds(proxy) if proxy else 0.0
                        i0 = ipis()
                        res = load(addr[path], w, SECONDS)
                        i1 = ipis()
                        mc1, n1 = cpu_seconds(mc.pid), cpu_seconds(proxy) if proxy else 0.0
                        ops = max(1, int(res["ops"]))
                        row = {
                            "workload": w,
                            "path": path,
                            "round": r,
                            "ops": res["ops"],
                            "rate": res["rate"],
                            "p50_us": res["p50_us"],
                            "p99_us": res["p99_us"],
                            "hit_answers": round(res["hits"] / max(1, res["gets"]), 4),
                            # Includes the 0.5 s warm-up's requests in the CPU but not in ops:
                            # the same bias for both paths.
                            "memcached_cpu_us_per_req": round((mc1 - mc0) * 1e6 / ops, 2),
                            "proxy_cpu_us_per_req": round((n1 - n0) * 1e6 / ops, 2),
                            "ipis_per_req": round((i1 - i0) / ops, 2),
                        }
                        log(json.dumps(row))
                        rows.append(row)
    finally:
        for proc in relays.values():
            proc.kill()
            proc.wait()
        mc.kill()
        mc.wait()
        for c in cfgs.values():
            c.unlink(missing_ok=True)
    return rows


def med(rows: list[dict[str, Any]], w: str, path: str, field: str) -> float:
    return median([float(r[field]) for r in rows if r["workload"] == w and r["path"] == path])


def plot(rows: list[dict[str, Any]]) -> None:
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.5))
    x = range(len(WORKLOADS))
    width = 0.8 / len(PATHS)
    for i, path in enumerate(PATHS):
        xs = [j + (i - (len(PATHS) - 1) / 2) * width for j in x]
        a.bar(xs, [med(rows, w, path, "rate") / 1e3 for w in WORKLOADS], width, label=path)
        b.bar(xs, [med(rows, w, path, "memcached_cpu_us_per_req") for w in WORKLOADS], width, label=path)
    for ax, title in ((a, "requests/s (thousands)"), (b, "memcached CPU per request (µs)")):
        ax.set_xticks(list(x), list(WORKLOADS))
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=120)


LOAD_BEFORE = os.getloadavg()


def summarize(rows: list[dict[str, Any]]) -> str:
    table = []
    for w in WORKLOADS:
        d = {f: med(rows, w, "direct", f) for f in FIELDS[4:]}
        for path in PATHS:
            p = {f: med(rows, w, path, f) for f in FIELDS[4:]}
            table.append(
                (
                    w,
                    path,
                    f"{p['rate']:.0f}",
                    f"{p['rate'] / d['rate']:.2f}x",
                    f"{p['p50_us']:.1f} / {p['p99_us']:.1f}",
                    f"{p['p50_us'] - d['p50_us']:+.1f}",
                    f"{p['memcached_cpu_us_per_req']:.2f}",
                    f"{p['proxy_cpu_us_per_req']:.2f}" if path != "direct" else "",
                    f"{p['hit_answers']:.3f}",
                    f"{p['ipis_per_req']:.2f}",
                )
            )
    header = (
        "workload",
        "path",
        "req/s",
        "/ direct",
        "p50 / p99 µs",
        "p50 - direct µs",
        "memcached CPU µs/req",
        "proxy CPU µs/req",
        "answers with a value",
        "IPIs/req",
    )
    return (
        f"# NICA look-through cache: through the node vs memcached direct and minimal relays\n\n"
        f"Machine: {machine()}. {CLIENTS} closed-loop clients (one request in flight each; "
        f"one for `misses_1client`), {KEYS} keys, 16 B keys and values, memcached -t 2; medians "
        f"of {ROUNDS} rounds of {SECONDS:g} s per workload and path, the paths' order reversed "
        f"every other round; `relay` and `relay_spin` are `tcp_relay` (no cache: every request "
        f"goes to memcached) in its epoll and spin modes; the node's attach loops: "
        f"{LOOPS if LOOPS is not None else 'default'}, "
        f"spin_us: {SPIN_US if SPIN_US is not None else 'default'}, "
        f"backend_spin_us: {BACKEND_SPIN_US if BACKEND_SPIN_US is not None else 'default'}, "
        f"spin_when: {SPIN_WHEN or 'default'}; "
        + ("`node_sN_WHEN` is another node with spin_us N and spin_when WHEN; " if VARIANTS else "")
        + (f"every process on CPUs {CPUS} only; " if CPUS is not None else "")
        + f"load average {LOAD_BEFORE[0]:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after. Command: "
        f"`python3 experiments/nica_cache/run.py{ARGS}`.\n\n" + md_table(header, table) + "\n"
    )


def main() -> None:
    rows = measure()
    finish(HERE, rows, FIELDS, plot, summarize)


if __name__ == "__main__":
    main()
