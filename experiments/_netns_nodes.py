"""Nodes on network-namespace hosts for the multi-host experiments (collectives, gemv):
one ``offrac serve`` per host with its own configuration, started in order and returned
once every node's links to its peers are up.

Each node's stderr (its log) goes to ``<log_dir>/node<n>-<i>.log``; :meth:`Nodes.report`
gives every node's exit status (running, exit code or the signal that killed it), the tail
of its log and, if it serves metrics, its link and refusal counters, for a run that failed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(REPO / "python"))

from _bench import offrac_bin  # noqa: E402
from netns import Hosts  # noqa: E402

from offrac import Client  # noqa: E402

# The node's own log level, plus the reactor's debug lines: connections and links
# opened and closed (a few per run). OFFRAC_LOG in the environment wins.
NODE_LOG = "info,offrac_node::reactor=debug"


def devices(hosts: Hosts, me: int, n: int, port: int) -> str:
    """The ``[[devices]]`` table of host ``me``: every other host of the first ``n``."""
    return "".join(f'[[devices]]\nid = {j}\naddr = "{hosts.ip(j)}:{port}"\n' for j in range(n) if j != me)


def exit_status(p: subprocess.Popen[str]) -> str:
    """``running``, ``exited with code C`` or ``killed by SIGNAME``."""
    rc = p.poll()
    if rc is None:
        return "running"
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with code {rc}"


class Nodes:
    """Running nodes, node ``i`` on host ``i``, each with its log file."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        self.logs: list[Path] = []
        # Each node's metrics address (None: it serves none), from its "listening" line.
        self.metrics: list[str | None] = []

    def dead(self) -> list[int]:
        """The nodes that are no longer running."""
        return [i for i, p in enumerate(self.procs) if p.poll() is not None]

    def report(self, tail: int = 30) -> str:
        """Every node's exit status and the last ``tail`` lines of its log."""
        out = []
        for i, (p, log) in enumerate(zip(self.procs, self.logs, strict=True)):
            try:
                lines = log.read_text(errors="replace").splitlines()
            except OSError as e:
                lines = [f"(cannot read the log: {e})"]
            head = f"--- node {i} (pid {p.pid}): {exit_status(p)}; log {log} ({len(lines)} lines)"
            out.append(f"{head}, last {tail}:")
            out += [f"    {x}" for x in lines[-tail:]]
            if i < len(self.metrics) and (addr := self.metrics[i]) and p.poll() is None:
                out.append(f"    metrics at {addr}:")
                out += [f"      {x}" for x in counters(addr)]
        return "\n".join(out)

    def stop(self) -> None:
        """SIGTERM each node and wait for it (SIGKILL after 10 s)."""
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


# The metrics worth seeing after a failure: links, refusals, collectives.
COUNTERS = ("offrac_link", "offrac_forward", "refus", "collective", "timeout", "stall")


def counters(addr: str) -> list[str]:
    """The node's nonzero metrics about links, refusals and collectives."""
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=5) as r:
            text = r.read().decode(errors="replace")
    except OSError as e:
        return [f"(cannot read its metrics: {e})"]
    keep = []
    for x in text.splitlines():
        if x.startswith("#") or not any(c in x.lower() for c in COUNTERS):
            continue
        if x.rsplit(" ", 1)[-1] not in ("0", "0.0"):
            keep.append(x)
    return keep or ["(all zero)"]


def start_linked_nodes(hosts: Hosts, configs: list[str], port: int, tmp: Path, log_dir: Path) -> Nodes:
    """Node ``i`` on host ``i`` with ``configs[i]``, its log in ``log_dir``; waits until
    every node sees its peers up."""
    n = len(configs)
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OFFRAC_LOG": os.environ.get("OFFRAC_LOG", NODE_LOG)}
    nodes = Nodes()
    try:
        for i, text in enumerate(configs):
            cfg = tmp / f"node{n}-{i}.toml"
            cfg.write_text(text)
            listen = f"{hosts.ip(i)}:{port}"
            args = [*hosts.prefix(i), offrac_bin(), "serve", "--listen", listen, "--config", str(cfg)]
            log = log_dir / f"node{n}-{i}.log"
            with log.open("w") as f:
                p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=f, text=True, env=env)
            nodes.procs.append(p)
            nodes.logs.append(log)
            assert p.stdout is not None
            # The one stdout line; nothing else is written there.
            line = p.stdout.readline()
            assert '"listening"' in line, f"node {i} did not start: {line!r}\n{nodes.report()}"
            nodes.metrics.append(json.loads(line).get("metrics"))
        deadline = time.monotonic() + 20
        for i in range(n):
            with Client(f"{hosts.ip(i)}:{port}", timeout=5) as c:
                while not all(p["up"] for p in c.describe()["peers"]):
                    assert time.monotonic() < deadline, f"links did not come up\n{nodes.report()}"
                    time.sleep(0.05)
    except BaseException:
        nodes.stop()
        raise
    return nodes
