"""Nodes on network-namespace hosts for the multi-host experiments (collectives, gemv):
one ``offrac serve`` per host with its own configuration, started in order and returned
once every node's links to its peers are up."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "python" / "tests"))
sys.path.insert(0, str(REPO / "python"))

from _bench import offrac_bin  # noqa: E402
from netns import Hosts  # noqa: E402

from offrac import Client  # noqa: E402


def devices(hosts: Hosts, me: int, n: int, port: int) -> str:
    """The ``[[devices]]`` table of host ``me``: every other host of the first ``n``."""
    return "".join(f'[[devices]]\nid = {j}\naddr = "{hosts.ip(j)}:{port}"\n' for j in range(n) if j != me)


def start_linked_nodes(hosts: Hosts, configs: list[str], port: int, tmp: Path) -> list[subprocess.Popen[str]]:
    """Node ``i`` on host ``i`` with ``configs[i]``; waits until every node sees its peers up."""
    n = len(configs)
    procs = []
    for i, text in enumerate(configs):
        cfg = tmp / f"node{n}-{i}.toml"
        cfg.write_text(text)
        listen = f"{hosts.ip(i)}:{port}"
        args = [*hosts.prefix(i), offrac_bin(), "serve", "--listen", listen, "--config", str(cfg)]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert p.stdout is not None
        line = p.stdout.readline()
        assert '"listening"' in line, line
        procs.append(p)
    deadline = time.monotonic() + 20
    for i in range(n):
        with Client(f"{hosts.ip(i)}:{port}", timeout=5) as c:
            while not all(p["up"] for p in c.describe()["peers"]):
                assert time.monotonic() < deadline, "links did not come up"
                time.sleep(0.05)
    return procs
