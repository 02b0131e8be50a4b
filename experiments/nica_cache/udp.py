#!/usr/bin/env python3
"""Issue #16: the look-through cache over UDP (``udp = true``, docs/inline.md) vs over TCP.

One stock memcached (2 threads, TCP; also UDP on the same port, only for the ``direct_udp``
baseline) and one node fronting it with ``udp = true``. Debian's ``memaslap`` (``memcaslap``)
drives each path in turn, alternating the order by round: memcached direct over TCP and over
UDP, the node over TCP and over UDP. 16 B keys and values, 99.8 % GETs / 0.2 % SETs (memaslap
gets only keys it has set, so nearly every GET is a hit at the node), 1 thread with 4
concurrent clients. Per path: memaslap's ops/s, its GET misses and UDP timeouts/drops, and the
CPU time memcached spends per operation. Medians over rounds; ``--quick`` runs one short round.
``--sets F`` makes a share F of the operations SETs (default 0.002), each of which the node
forwards to memcached (over its backend connections: the UDP pool). Writes udp_results.csv and
udp_summary.md here (udp_sets_results.csv and udp_sets_summary.md with ``--sets``).

``--loops-ab OLD_BIN`` measures instead what spreading UDP over the event loops buys: four
nodes in front of the same memcached, the old binary (OLD_BIN: one built before each loop read
its own UDP socket, so only loop 0 reads UDP) and the new one (``$OFFRAC_BIN`` or
target/release/offrac), each with ``loops = 1`` and ``loops = 2``, driven over UDP only by
memaslap with 2 threads and 8 concurrent clients (several client sockets, which the kernel
spreads over the loops' sockets), the nodes' order alternating by round. Writes
udp_loops_results.csv and udp_loops_summary.md (ratios against the old binary with one loop).
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _bench import Server, free_port, log, machine, md_table, median

from offrac import wait_listening

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
ROUNDS = 1 if QUICK else 3
SECONDS = 2 if QUICK else 4
PATHS = ("direct_tcp", "direct_udp", "node_tcp", "node_udp")
FIELDS = ["path", "round", "ops_per_s", "gets", "get_misses", "udp_timeouts", "memcached_cpu_us_per_op"]
SETS = float(sys.argv[sys.argv.index("--sets") + 1]) if "--sets" in sys.argv else 0.002
CMDS = f"key\n16 16 1\nvalue\n16 16 1\ncmd\n0 {SETS}\n1 {1 - SETS}\n"
STEM = "udp_sets" if "--sets" in sys.argv else "udp"
COMMAND_ARGS = f" --sets {SETS}" if STEM != "udp" else ""


def cpu_seconds(pid: int) -> float:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memaslap(addr: str, udp: bool, cfg: Path) -> dict[str, float]:
    args = ["memcaslap", "-s", addr, "-F", str(cfg), "-t", f"{SECONDS}s", "-T", "1", "-c", "4"]
    out = subprocess.run([*args, *(["--udp"] if udp else [])], capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr

    def num(name: str, udp_only: bool = False) -> float:
        m = re.search(rf"{name}: (\d+)", text)
        if m is None:
            if udp_only and not udp:
                return 0.0  # printed for UDP runs only
            raise RuntimeError(f"memaslap printed no {name}: {text[-1500:]}")
        return float(m.group(1))

    tps = re.search(r"TPS: (\d+)", text)
    if tps is None:
        raise RuntimeError(f"memaslap printed no TPS: {text[-1500:]}")
    return {
        "ops_per_s": float(tps.group(1)),
        "gets": num("cmd_get"),
        "get_misses": num("get_misses"),
        "udp_timeouts": num("udp_timeout", True) + num("packet_drop", True),
        "ops": num("cmd_get") + num("cmd_set"),
    }


def measure() -> list[dict[str, Any]]:
    memcached = shutil.which("memcached")
    if memcached is None or shutil.which("memcaslap") is None:
        sys.exit("needs memcached and memcaslap (apt-get install memcached libmemcached-tools)")
    mport, aport = free_port(), free_port()
    args = [memcached, "-l", "127.0.0.1", "-p", str(mport), "-U", str(mport)]
    mc = subprocess.Popen(
        [*args, "-t", "2", "-m", "256", "-u", "nobody"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "node.toml"
        cfg.write_text(
            '[metrics]\nlisten = ""\n'
            f'[[attach]]\nlisten = "127.0.0.1:{aport}"\nfunction = "memcached_cache"\n'
            f'backend = "127.0.0.1:{mport}"\ncapacity_bytes = 67108864\nudp = true\n'
        )
        cmds = Path(tmp) / "cmds.cfg"
        cmds.write_text(CMDS)
        try:
            wait_listening(("127.0.0.1", mport))
            with Server(["serve", "--listen", "127.0.0.1:0", "--config", str(cfg)], "node"):
                addr = {"direct": f"127.0.0.1:{mport}", "node": f"127.0.0.1:{aport}"}
                for r in range(ROUNDS):
                    for path in PATHS if r % 2 == 0 else PATHS[::-1]:
                        where, proto = path.split("_")
                        c0 = cpu_seconds(mc.pid)
                        res = memaslap(addr[where], proto == "udp", cmds)
                        c1 = cpu_seconds(mc.pid)
                        row = {
                            "path": path,
                            "round": r,
                            "ops_per_s": res["ops_per_s"],
                            "gets": res["gets"],
                            "get_misses": res["get_misses"],
                            "udp_timeouts": res["udp_timeouts"],
                            "memcached_cpu_us_per_op": round((c1 - c0) * 1e6 / max(1.0, res["ops"]), 2),
                        }
                        log(str(row))
                        rows.append(row)
        finally:
            mc.kill()
            mc.wait()
    return rows


LOAD_BEFORE = os.getloadavg()


def summarize(rows: list[dict[str, Any]]) -> str:
    def med(path: str, field: str) -> float:
        return median([float(r[field]) for r in rows if r["path"] == path])

    base = med("direct_tcp", "ops_per_s")
    table = [
        (
            p,
            f"{med(p, 'ops_per_s'):.0f}",
            f"{med(p, 'ops_per_s') / base:.2f}x",
            f"{med(p, 'get_misses'):.0f} / {med(p, 'gets'):.0f}",
            f"{med(p, 'udp_timeouts'):.0f}",
            f"{med(p, 'memcached_cpu_us_per_op'):.2f}",
        )
        for p in PATHS
    ]
    header = (
        "path",
        "ops/s (memaslap)",
        "vs direct TCP",
        "GET misses / GETs",
        "UDP timeouts+drops",
        "memcached CPU µs/op",
    )
    return (
        "# The look-through cache over UDP vs TCP (memaslap)\n\n"
        f"Machine: {machine()}. memaslap 1 thread, 4 concurrent, 16 B keys and values, "
        f"{100 - 100 * SETS:g} % GETs / {100 * SETS:g} % SETs; "
        f"medians of {ROUNDS} rounds of {SECONDS} s per path, alternating; "
        f"load average {LOAD_BEFORE[0]:.1f} before, {os.getloadavg()[0]:.1f} after. "
        f"Command: `python3 experiments/nica_cache/udp.py{COMMAND_ARGS}`.\n\n"
        + md_table(header, table)
        + "\n"
    )


LOOPS_AB = sys.argv[sys.argv.index("--loops-ab") + 1] if "--loops-ab" in sys.argv else None
VARIANTS = ("old_loops1", "old_loops2", "new_loops1", "new_loops2")
LOOPS_FIELDS = ["node", "round", "ops_per_s", "gets", "get_misses", "udp_timeouts"]


def memaslap_udp(addr: str, cfg: Path) -> dict[str, float]:
    """memaslap over UDP with 2 threads and 8 concurrent clients."""
    args = ["memcaslap", "-s", addr, "-F", str(cfg), "-t", f"{SECONDS}s", "-T", "2", "-c", "8", "--udp"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    text = out.stdout + out.stderr

    def num(name: str) -> float:
        m = re.search(rf"{name}: (\d+)", text)
        if m is None:
            raise RuntimeError(f"memaslap printed no {name}: {text[-1500:]}")
        return float(m.group(1))

    return {
        "ops_per_s": num("TPS"),
        "gets": num("cmd_get"),
        "get_misses": num("get_misses"),
        "udp_timeouts": num("udp_timeout") + num("packet_drop"),
    }


def measure_loops(old_bin: str) -> list[dict[str, Any]]:
    memcached = shutil.which("memcached")
    if memcached is None or shutil.which("memcaslap") is None:
        sys.exit("needs memcached and memcaslap (apt-get install memcached libmemcached-tools)")
    new_bin = os.environ.get("OFFRAC_BIN", str(HERE.parent.parent / "target" / "release" / "offrac"))
    mport = free_port()
    mc = subprocess.Popen(
        [memcached, "-l", "127.0.0.1", "-p", str(mport), "-U", "0", "-t", "2", "-m", "256", "-u", "nobody"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    rows: list[dict[str, Any]] = []
    nodes: dict[str, Server] = {}
    try:
        wait_listening(("127.0.0.1", mport))
        with tempfile.TemporaryDirectory() as tmp:
            cmds = Path(tmp) / "cmds.cfg"
            cmds.write_text(CMDS)
            for v in VARIANTS:
                cfg = Path(tmp) / f"{v}.toml"
                cfg.write_text(
                    '[metrics]\nlisten = ""\n'
                    '[[attach]]\nlisten = "127.0.0.1:0"\nfunction = "memcached_cache"\n'
                    f'backend = "127.0.0.1:{mport}"\ncapacity_bytes = 67108864\nudp = true\n'
                    f"loops = {v[-1]}\n"
                )
                os.environ["OFFRAC_BIN"] = old_bin if v.startswith("old") else new_bin
                nodes[v] = Server(["serve", "--listen", "127.0.0.1:0", "--config", str(cfg)], v)
            os.environ["OFFRAC_BIN"] = new_bin
            for r in range(ROUNDS):
                for v in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                    res = memaslap_udp(str(nodes[v].info["attach"][0]), cmds)
                    row = {"node": v, "round": r, **{k: res[k] for k in LOOPS_FIELDS[2:]}}
                    log(str(row))
                    rows.append(row)
    finally:
        for n in nodes.values():
            n.stop()
        mc.kill()
        mc.wait()
    return rows


def summarize_loops(rows: list[dict[str, Any]], old_bin: str) -> str:
    def med(v: str, field: str) -> float:
        return median([float(r[field]) for r in rows if r["node"] == v])

    base = med("old_loops1", "ops_per_s")
    table = [
        (
            v,
            f"{med(v, 'ops_per_s'):.0f}",
            f"{med(v, 'ops_per_s') / base:.2f}x",
            f"{med(v, 'get_misses'):.0f} / {med(v, 'gets'):.0f}",
            f"{med(v, 'udp_timeouts'):.0f}",
        )
        for v in VARIANTS
    ]
    header = ("node", "ops/s (memaslap, UDP)", "vs old, 1 loop", "GET misses / GETs", "UDP timeouts+drops")
    return (
        "# UDP over one or two event loops, old vs new binary (memaslap)\n\n"
        f"Machine: {machine()}. memaslap --udp 2 threads, 8 concurrent, 16 B keys and values, "
        f"{100 - 100 * SETS:g} % GETs / {100 * SETS:g} % SETs; "
        f"medians of {ROUNDS} rounds of {SECONDS} s per node, alternating; "
        f"load average {LOAD_BEFORE[0]:.1f} before, {os.getloadavg()[0]:.1f} after. "
        "Command: `python3 experiments/nica_cache/udp.py --loops-ab OLD_BIN` "
        f"(old: {Path(old_bin).name}).\n\n" + md_table(header, table) + "\n"
    )


def main() -> None:
    if LOOPS_AB is not None:
        rows = measure_loops(LOOPS_AB)
        with (HERE / "udp_loops_results.csv").open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=LOOPS_FIELDS)
            w.writeheader()
            w.writerows(rows)
        text = summarize_loops(rows, LOOPS_AB)
        (HERE / "udp_loops_summary.md").write_text(text)
        print(text)
        return
    rows = measure()
    with (HERE / f"{STEM}_results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    text = summarize(rows)
    (HERE / f"{STEM}_summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
