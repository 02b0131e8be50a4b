"""Hostile clients: the node's memory stays bounded and other clients keep being served."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from offrac import encode_request

from conftest import Node

StartNode = Callable[[str | None], Node]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_client_that_never_reads_cannot_grow_memory_or_starve_others(node: Node) -> None:
    # 64 KiB echo requests, sent as fast as the node will take them, answers never read.
    payload = bytes(64 * 1024)
    batch = b"".join(encode_request(i + 1, 0, payload) for i in range(16))
    flooder = socket.create_connection(node.addr)
    flooder.settimeout(0.5)
    sent = 0
    blocked = 0
    stop = threading.Event()

    def flood() -> None:
        nonlocal sent, blocked
        while not stop.is_set() and sent < 2_000_000_000:
            try:
                flooder.sendall(batch)
                sent += len(batch)
            except (TimeoutError, OSError):
                # The node stopped reading from us: the kernel buffers are full.
                blocked += 1
                time.sleep(0.01)

    base = rss_bytes(node.proc.pid)
    t = threading.Thread(target=flood, daemon=True)
    t.start()
    served = 0
    rng = np.random.default_rng(1)
    with node.client() as c:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            x = rng.integers(-1000, 1000, 256, dtype=np.int32)
            np.testing.assert_array_equal(c.call("topk", x, k=4), np.sort(x)[::-1][:4])
            served += 1
    stop.set()
    t.join(timeout=5)
    grown = rss_bytes(node.proc.pid) - base
    flooder.close()
    assert served > 50, f"the well-behaved client was starved ({served} calls in 2 s)"
    # The node pauses reading a connection with > 4 MiB of unread answers; the
    # rest sits in kernel socket buffers. Far less than what the flooder pushed.
    assert blocked > 0, f"the flooder was never held back ({sent} bytes sent)"
    assert sent > 8 * 2**20, f"flooder managed only {sent} bytes"
    mib = 2**20
    assert grown < 48 * mib, f"node RSS grew {grown / mib:.1f} MiB; the flooder sent {sent / mib:.0f} MiB"
    assert node.alive()


def test_many_connections_with_partial_headers_are_collected(start_node: StartNode) -> None:
    n = start_node("stall_timeout_ms = 300\n")
    socks = []
    for i in range(200):
        s = socket.create_connection(n.addr)
        s.sendall(encode_request(i + 1, 0, b"x" * 100)[:30])  # half a header
        socks.append(s)
    # While they stall, a normal client is served.
    with n.client() as c:
        assert c.call("echo", b"ok") == b"ok"
    time.sleep(0.8)
    closed = 0
    for s in socks:
        s.settimeout(2)
        data = b""
        try:
            while chunk := s.recv(4096):
                data += chunk
        except OSError:
            pass
        # Each got a TIMEOUT response (status 8) and then end-of-stream.
        if len(data) >= 64 and int.from_bytes(data[4:6], "little") == 8:
            closed += 1
        s.close()
    assert closed == 200
    with n.client() as c:
        assert c.call("echo", b"still here") == b"still here"
