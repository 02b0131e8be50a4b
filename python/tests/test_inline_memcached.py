"""The node's memcached look-through cache (``[[attach]]``, docs/inline.md) in front of a real
memcached, driven by unmodified clients: pymemcache and memaslap (Debian's ``memcaslap``).

Needs the ``memcached`` binary (CI installs Debian's package); each test starts its own on a
free port. Skipped, saying so, where it is not installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import pytest
from pymemcache.client.base import Client as Memcache
from pymemcache.exceptions import MemcacheError

from offrac import ConnectError, wait_listening

from _util import free_port
from conftest import Node

MEMCACHED = shutil.which("memcached")
pytestmark = pytest.mark.skipif(
    MEMCACHED is None, reason="memcached is not installed (apt-get install memcached)"
)


class Memcached:
    """A fresh memcached on a free port; on another port when another process took it first
    (it exits, or what answers on the port has another pid)."""

    def __init__(self) -> None:
        assert MEMCACHED is not None
        for _ in range(5):
            self.port = free_port()
            self.proc = subprocess.Popen(
                [
                    MEMCACHED,
                    *("-l", "127.0.0.1", "-p", str(self.port)),
                    *("-U", "0", "-t", "2", "-m", "64", "-u", "nobody"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._is_ours():
                return
            self.stop()
        raise RuntimeError("memcached did not get a port in five tries")

    def _is_ours(self) -> bool:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                wait_listening(("127.0.0.1", self.port), timeout=0.2)
                if self.stat("pid") == self.proc.pid:
                    return True
            except (ConnectError, OSError, KeyError, MemcacheError):
                pass
            time.sleep(0.02)
        return False

    def stat(self, name: str) -> int:
        with closing(Memcache(("127.0.0.1", self.port))) as c:
            return int(c.stats()[name.encode()])

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def memcached() -> Iterator[Memcached]:
    m = Memcached()
    yield m
    m.stop()


@pytest.fixture
def cached(start_node: Callable[..., Node], memcached: Memcached) -> tuple[str, int]:
    """The attached address of a node fronting ``memcached``."""
    node = start_node(
        '[metrics]\nlisten = ""\n[[attach]]\nlisten = "127.0.0.1:0"\nfunction = "memcached_cache"\n'
        f'backend = "127.0.0.1:{memcached.port}"\ncapacity_bytes = 1048576\n'
    )
    host, _, port = str(node.info["attach"][0]).rpartition(":")
    return host, int(port)


def test_pymemcache_works_unmodified(cached: tuple[str, int], memcached: Memcached) -> None:
    with closing(Memcache(cached, default_noreply=False)) as c:
        assert c.get("a") is None
        assert c.set("a", b"1")
        assert c.get("a") == b"1"
        assert c.get("a") == b"1"
        assert c.get_many(["a", "b"]) == {"a": b"1"}
        value, cas = c.gets("a")
        assert value == b"1"
        assert c.cas("a", b"2", cas)
        assert not c.cas("a", b"3", cas)
        assert c.get("a") == b"2"
        assert c.set("n", b"5")
        assert c.incr("n", 3) == 8
        assert c.get("n") == b"8"
        assert c.decr("n", 10) == 0
        assert c.add("a", b"x") is False
        assert c.append("a", b"y")
        assert c.prepend("a", b"<")
        assert c.get("a") == b"<2y"
        assert c.touch("a", 100)
        assert c.delete("a")
        assert c.get("a") is None
        c.set("q", b"v", noreply=True)
        assert c.get("q") == b"v"
        assert c.version().startswith(b"1.")
        assert c.flush_all()
        assert c.get_many(["n", "q"]) == {}
        # A value above memcached's item limit: its error, and the connection stays usable.
        with pytest.raises(Exception, match="too large"):
            c.set("big", b"x" * (2 << 20), noreply=False)
        assert c.set("after", b"ok") and c.get("after") == b"ok"
    # Hits never reach memcached.
    with closing(Memcache(cached, default_noreply=False)) as c:
        c.set("hot", b"0123456789abcdef")
        before = memcached.stat("cmd_get")
        for _ in range(500):
            assert c.get("hot") == b"0123456789abcdef"
        assert memcached.stat("cmd_get") - before <= 1


def test_concurrent_writers_never_read_an_older_value(cached: tuple[str, int]) -> None:
    """Writers increment shared counters (memcached orders the increments) while readers keep
    them cached: after an ``incr`` answers v, its writer's ``get`` returns at least v."""
    keys = ["c0", "c1", "c2"]
    with closing(Memcache(cached, default_noreply=False)) as c:
        for k in keys:
            c.set(k, b"0")
    stop = threading.Event()
    errors: list[str] = []

    def reader() -> None:
        with closing(Memcache(cached, default_noreply=False)) as c:
            while not stop.is_set():
                c.get_many(keys)

    def writer(w: int) -> None:
        with closing(Memcache(cached, default_noreply=False)) as c:
            for i in range(300):
                k = keys[(i + w) % len(keys)]
                v = c.incr(k, 1)
                got = c.get(k)
                if v is None or got is None or int(got) < v:
                    errors.append(f"writer {w}: {k}={got!r} after incr answered {v}")

    readers = [threading.Thread(target=reader) for _ in range(2)]
    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert errors == []
    with closing(Memcache(cached, default_noreply=False)) as c:
        assert sum(int(c.get(k) or b"0") for k in keys) == 4 * 300


@pytest.mark.skipif(
    shutil.which("memcaslap") is None, reason="memcaslap (libmemcached-tools) is not installed"
)
def memaslap_verifies(address: str, *extra: str) -> str:
    """memaslap for 2 s (4 connections, 20 % of gets verified) at ``address``: no error, no
    failed verification, over 1000 gets. Returns its output."""
    out = subprocess.run(
        ["memcaslap", "-s", address, *extra, "-t", "2s", "-T", "1", "-c", "4", "-v", "0.2"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    text = out.stdout + out.stderr
    assert "ERROR" not in text, text[-2000:]
    assert re.search(r"verify_failed: 0\b", text), text[-2000:]
    gets = re.search(r"cmd_get: (\d+)", text)
    assert gets is not None and int(gets.group(1)) > 1000, text[-2000:]
    return text


def test_memaslap_runs_through_the_node_and_verifies(cached: tuple[str, int]) -> None:
    memaslap_verifies(f"{cached[0]}:{cached[1]}")


@pytest.mark.skipif(
    shutil.which("memcaslap") is None, reason="memcaslap (libmemcached-tools) is not installed"
)
def test_memaslap_over_udp_through_the_node_verifies(
    start_node: Callable[..., Node], memcached: Memcached
) -> None:
    """memaslap's ``--udp`` (memcached's UDP framing; the TCP and UDP ports must be the same)
    through a node with ``udp = true``, in front of a memcached that serves TCP only."""
    node = start_node(
        '[metrics]\nlisten = ""\n[[attach]]\nlisten = "127.0.0.1:0"\nfunction = "memcached_cache"\n'
        f'backend = "127.0.0.1:{memcached.port}"\nudp = true\n'
    )
    host, _, port = str(node.info["attach"][0]).rpartition(":")
    text = memaslap_verifies(f"{host}:{port}", "--udp")
    assert re.search(r"udp_timeout: 0\b", text), text[-2000:]
    gets = re.search(r"cmd_get: (\d+)", text)
    assert gets is not None
    # The gets were served (misses filled from memcached over TCP): memcached saw far fewer.
    assert memcached.stat("cmd_get") < int(gets.group(1)) // 2


def test_serve_attach_flag(node_bin: Path, memcached: Memcached) -> None:
    """``offrac serve --attach SPEC`` alone (no config file) fronts memcached; the listening
    line names the attached address."""
    spec = (
        f"listen=127.0.0.1:0,function=memcached_cache,backend=127.0.0.1:{memcached.port},capacity_bytes=65536"
    )
    args = [str(node_bin), "serve", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--attach", spec]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        info = json.loads(proc.stdout.readline())
        host, _, port = str(info["attach"][0]).rpartition(":")
        with closing(Memcache((host, int(port)), default_noreply=False)) as c:
            assert c.set("k", b"v") and c.get("k") == b"v"
        bad = subprocess.run(
            [*args[:-1], "listen=127.0.0.1:0,function=nope,backend=a:1"], capture_output=True
        )
        assert bad.returncode != 0 and b"unknown attach function" in bad.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=15)
