"""Exactly one answer per request under the faults of issue #7, over real loopback sockets.

Each test here failed against the node before the sans-IO driver (the same cases run as seeded
simulations in ``crates/sim/tests/node_driver.rs``).
"""

from __future__ import annotations

import signal
import struct
import threading
import time
import urllib.request
from collections.abc import Callable

import numpy as np

from offrac import REQUEST_ID_NONE, FunctionId, Status

from _util import RawConn, encode_request, header_with, parse_prometheus
from conftest import Node

StartNode = Callable[[str | None], Node]
ECHO = int(FunctionId.ECHO)
TOPK = int(FunctionId.TOPK)
MATMUL = int(FunctionId.MATMUL)
SPIN = int(FunctionId.SPIN)


def read_all(conn: RawConn, timeout: float = 5.0) -> list[tuple[int, Status, bytes]]:
    """Every answer until the node closes the connection."""
    out = []
    while True:
        try:
            h, p = conn.read_response(timeout=timeout)
        except EOFError:
            return out
        out.append((h.request_id, h.status, p))


def test_requests_before_a_fatal_header_are_answered(node: Node) -> None:
    for bad in ({"magic": 0x1234}, {"version": 9}):
        with RawConn(node.addr) as c:
            segment = (
                encode_request(1, ECHO, b"first")
                + encode_request(2, TOPK, struct.pack("<4i", 5, 1, 9, 3), param=2)
                + encode_request(3, SPIN, b"slow", param=20_000)
                + header_with(4, ECHO, **bad)
                + encode_request(5, ECHO, b"never read")
            )
            c.send(segment)  # one write: one segment on loopback
            got = read_all(c)
            ids = sorted(rid for rid, _, _ in got)
            fatal = (REQUEST_ID_NONE, Status.MALFORMED) if "magic" in bad else (4, Status.UNSUPPORTED_VERSION)
            assert ids == sorted([1, 2, 3, fatal[0]]), got
            answers = {rid: (s, p) for rid, s, p in got}
            assert answers[1] == (Status.OK, b"first")
            assert answers[2] == (Status.OK, struct.pack("<2i", 9, 5))
            assert answers[3] == (Status.OK, b"slow")
            assert answers[fatal[0]][0] == fatal[1]


def test_a_refused_request_whose_client_stalls_gets_one_answer(start_node: StartNode) -> None:
    n = start_node("stall_timeout_ms = 200\nmax_payload = 65536\n[pool]\nbuffer_bytes = 65536\n")
    with RawConn(n.addr) as c:
        c.send(header_with(7, ECHO, payload_len=1_000_000) + bytes(5000))
        h, _ = c.read_response()
        assert (h.status, h.request_id) == (Status.TOO_LARGE, 7)
        # The client stalls mid-payload: the connection is closed, with no second answer.
        assert c.closed_by_peer(timeout=3), "a stalled discard must be closed"


def test_a_shutdown_longer_than_the_grace_answers_every_request(start_node: StartNode) -> None:
    n = start_node("shutdown_grace_ms = 300\n")
    conns = [RawConn(n.addr) for _ in range(3)]
    try:
        for k, c in enumerate(conns):
            c.send(b"".join(encode_request(10 * k + i, SPIN, b"x", param=50_000) for i in range(10)))
        time.sleep(0.1)
        n.proc.send_signal(signal.SIGTERM)
        statuses = []
        for k, c in enumerate(conns):
            got = read_all(c, timeout=10)
            assert sorted(rid for rid, _, _ in got) == [10 * k + i for i in range(10)], got
            statuses += [s for _, s, _ in got]
        assert set(statuses) <= {Status.OK, Status.SHUTTING_DOWN}
        # 30 requests of 50 ms on one slot do not fit a 300 ms grace.
        assert statuses.count(Status.SHUTTING_DOWN) >= 15, statuses
        assert n.proc.wait(10) == 0, n.stderr_tail()
        n.stopped = True
    finally:
        for c in conns:
            c.close()


def test_trickling_clients_cannot_hold_the_pool(start_node: StartNode) -> None:
    n = start_node("reassembly_timeout_ms = 300\nstall_timeout_ms = 5000\n[pool]\nbuffers = 4\n")
    tricklers = [RawConn(n.addr) for _ in range(4)]
    try:
        for k, t in enumerate(tricklers):
            t.send(header_with(k, ECHO, payload_len=100_000))
        with n.client(busy_retries=0) as c:
            big = bytes(20_000)
            refused, served_after = 0, None
            t0 = time.monotonic()
            while time.monotonic() - t0 < 3:
                for t in tricklers:
                    t.send(bytes(10))  # well under the stall timeout
                try:
                    c.call("echo", big)
                    served_after = time.monotonic() - t0
                    break
                except Exception:  # BUSY while the tricklers hold every buffer
                    refused += 1
                    time.sleep(0.05)
            assert served_after is not None, f"refused {refused} times in 3 s: the tricklers kept the pool"
        for k, t in enumerate(tricklers):
            h, _ = t.read_response(timeout=5)
            assert (h.status, h.request_id) == (Status.TIMEOUT, k)
    finally:
        for t in tricklers:
            t.close()


def test_an_unregistered_reply_endpoint_is_named_and_an_early_stall_names_no_request(
    start_node: StartNode,
) -> None:
    n = start_node("stall_timeout_ms = 200\n")
    with RawConn(n.addr) as c:
        # A reply endpoint nobody registered: refused on this connection, naming it.
        c.send(header_with(3, ECHO, reply_device=3))
        h, _ = c.read_response()
        assert (h.status, h.request_id, h.detail) == (Status.UNREACHABLE, 3, 3)
    with RawConn(n.addr) as c:
        c.send(header_with(0, ECHO, payload_len=8)[:10])
        h, _ = c.read_response(timeout=3)
        assert (h.status, h.request_id) == (Status.TIMEOUT, REQUEST_ID_NONE)


def test_silent_connections_are_counted_and_the_handoff_is_queueing(node: Node) -> None:
    assert node.metrics
    silent = [RawConn(node.addr) for _ in range(5)]
    try:
        deadline = time.monotonic() + 5
        count = 0.0
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://{node.metrics}/metrics", timeout=5) as resp:
                samples = parse_prometheus(resp.read().decode())
            count = next(v for name, _, v in samples if name == "offrac_connections")
            if count >= 5:
                break
            time.sleep(0.06)
        assert count >= 5, f"{count} connections counted, 5 open"
    finally:
        for s in silent:
            s.close()
    with node.client() as c:
        eye = np.eye(2, dtype=np.float32)
        queue_ns = []
        for _ in range(20):
            _, info = c.call("matmul", np.concatenate([eye.ravel(), eye.ravel()]), n=2, return_info=True)
            queue_ns.append(info.queue_ns)
        # matmul runs on its slot's thread: the hand-off is queueing time, never exactly 0.
        assert min(queue_ns) > 0, queue_ns


def test_the_largest_documented_matmul_is_served(node: Node) -> None:
    a = np.random.default_rng(1).standard_normal((512, 512)).astype(np.float32)
    b = np.eye(512, dtype=np.float32)
    with node.client() as c:
        out = c.call("matmul", np.concatenate([a.ravel(), b.ravel()]), n=512, timeout=30)
    assert np.allclose(np.asarray(out).reshape(512, 512), a, atol=1e-5)


def test_a_client_the_node_stopped_reading_is_not_a_staller(start_node: StartNode) -> None:
    """A client that does not read its answers is paused by the node (backpressure); the request
    the node was partway through then makes no progress, which is not the client's stall."""
    n = start_node("stall_timeout_ms = 300\n")
    # ~29 MB of answers, past the kernel's socket buffers and the node's 4 MiB pause; small
    # requests run inline, so none is refused and every answer is as big as its request.
    count, payload = 20_000, bytes(1400)
    with RawConn(n.addr, timeout=60) as c:
        stream = b"".join(encode_request(i, ECHO, payload) for i in range(count))
        sender = threading.Thread(target=lambda: c.send(stream), daemon=True)
        sender.start()
        time.sleep(1.5)  # well past the stall timeout, reading nothing
        got = [c.read_response(timeout=30) for _ in range(count)]
        sender.join(30)
        assert sorted(h.request_id for h, _ in got) == list(range(count))
        # BUSY is the pool's own backpressure (the client sends faster than one echo slot runs);
        # what must not happen is a TIMEOUT and a close for the request the node stopped reading.
        odd = [(h.request_id, h.status.name) for h, _ in got if h.status not in (Status.OK, Status.BUSY)]
        assert not odd, odd
