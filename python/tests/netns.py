"""Separate hosts for multi-node tests: Linux network namespaces joined by veth pairs to a
bridge. Host ``i`` is namespace ``<tag>h<i>`` at ``10.<net>.0.<i+1>``; the test process (the
root namespace) is ``10.<net>.0.254`` on the bridge. Needs root and ``ip`` (iproute2)."""

from __future__ import annotations

import os
import subprocess

__all__ = ["Hosts", "netns_available"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def netns_available() -> str | None:
    """None if namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    name = f"ofrprobe{os.getpid() % 100000}"
    try:
        _ip("netns", "add", name)
        _ip("netns", "del", name)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"cannot create a network namespace: {e}"
    return None


class Hosts:
    """``n`` namespace hosts on one bridge; removed by :meth:`close`."""

    def __init__(self, n: int) -> None:
        pid = os.getpid() % 10000
        self.tag = f"ofr{pid}"
        self.net = 100 + pid % 100
        self.n = n
        self.bridge = f"{self.tag}br"
        self.names = [f"{self.tag}h{i}" for i in range(n)]
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"10.{self.net}.0.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for i, ns in enumerate(self.names):
            _ip("netns", "add", ns)
            # the root side of host i's cable is named after the host: `link_down(i)` cuts it
            _ip("link", "add", ns, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", ns, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.ip(i)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def ip(self, i: int) -> str:
        return f"10.{self.net}.0.{i + 1}"

    def devices(self, me: int, port: int) -> str:
        """The ``[[devices]]`` tables of host ``me``'s node: every other host's, at ``port``."""
        return "".join(
            f'[[devices]]\nid = {j}\naddr = "{self.ip(j)}:{port}"\n' for j in range(self.n) if j != me
        )

    def prefix(self, i: int) -> list[str]:
        """Run a command on host ``i``."""
        return ["ip", "netns", "exec", self.names[i]]

    def link_down(self, i: int) -> None:
        _ip("link", "set", self.names[i], "down")

    def link_up(self, i: int) -> None:
        _ip("link", "set", self.names[i], "up")

    def close(self) -> None:
        for ns in self.names:
            subprocess.run(["ip", "link", "del", ns], capture_output=True, timeout=10)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True, timeout=10)
