"""Chains across two real node processes on loopback: forwarding, relayed answers, and the
answers a caller gets when the peer is killed (-9) or silent."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable

import numpy as np
import pytest

from offrac import (
    FN_REGISTER_REPLY,
    Client,
    FunctionId,
    Hop,
    RequestHeader,
    RequestTimeoutError,
    Status,
    Step,
    UnreachableError,
)

from _util import RawConn, free_port, parse_prometheus
from conftest import Node

StartNode = Callable[..., Node]


def pair(start_node: StartNode, extra_a: str = "") -> tuple[Node, Node, int]:
    """Node A (device 0) and node B (device 1), each in the other's device table, A linked.
    Returns A, B and B's port; ``A.refused_probes`` counts the probes A refused meanwhile."""
    pa, pb = free_port(), free_port()

    def config(me: int, peer_port: int, extra: str) -> str:
        return f'device_id = {me}\n{extra}\n[[devices]]\nid = {1 - me}\naddr = "127.0.0.1:{peer_port}"\n'

    a = start_node(config(0, pb, extra_a), listen=f"127.0.0.1:{pa}")
    b = start_node(config(1, pa, ""), listen=f"127.0.0.1:{pb}")
    a.refused_probes = wait_linked(a)  # type: ignore[attr-defined]
    return a, b, pb


def wait_linked(a: Node, timeout: float = 10.0) -> int:
    """Wait until A's link to B is up (a hop on B answers); returns the probes refused."""
    deadline = time.monotonic() + timeout
    refused = 0
    with a.client() as c:
        while True:
            try:
                c.call_chain([Step("echo", device=1)], b"up")
                return refused
            except UnreachableError:
                refused += 1
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


def test_a_chain_across_nodes_equals_its_steps_one_by_one(start_node: StartNode) -> None:
    a, _b, _ = pair(start_node)
    x = np.random.default_rng(3).normal(0, 20, 2000).astype(np.float32)
    with a.client() as c:
        want = c.call("logit", c.call("minmax", x))
        got, info = c.call_chain(["minmax", Step("logit", device=1)], x, return_info=True)
        np.testing.assert_array_equal(got, want)
        assert (info.hop_index, info.device) == (1, 1)
        # first hop remote, last hop back on A
        ints = np.arange(-500, 500, dtype=np.int32)
        out = c.call_chain([Step("topk", device=1, k=64), Step("topk", k=4)], ints)
        assert sorted(out.tolist()) == [496, 497, 498, 499]
    m = metrics(a)
    assert m[("offrac_link_up", '{device="1"}')] == 1
    assert m[("offrac_forwarded_total", "")] >= 3  # wait_linked's probe, then these two
    assert m[("offrac_relayed_total", "")] == m[("offrac_forwarded_total", "")]
    # every refused probe, and nothing else, was answered by A itself
    assert m[("offrac_forward_failures_total", "")] == a.refused_probes  # type: ignore[attr-defined]


def metrics(n: Node) -> dict[tuple[str, str], float]:
    """The node's metrics by (name, 'device="N"'-style labels), once published (the node
    publishes when idle)."""
    time.sleep(0.1)
    with urllib.request.urlopen(f"http://{n.metrics}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        (name, ",".join(f'{k}="{v}"' for k, v in labels.items()).join("{}") if labels else ""): value
        for name, labels, value in parse_prometheus(text)
    }


def test_a_peer_killed_mid_hop_is_unreachable_then_comes_back(start_node: StartNode) -> None:
    a, b, pb = pair(start_node)
    with Client(a.address, timeout=10) as c:
        slow = c.submit_chain(["echo", Step("spin", device=1, us=1_000_000)], b"lost")
        time.sleep(0.3)  # the spin is running on B
        b.kill()
        b.stopped = True  # killed on purpose: teardown must not expect it alive
        t = time.monotonic()
        with pytest.raises(UnreachableError) as e:
            slow.result(5)
        assert time.monotonic() - t < 2, "the caller waited for the forward timeout"
        assert (e.value.hop, e.value.detail, e.value.device) == (1, 1, 0)
        assert c.call("echo", b"A still serves") == b"A still serves"
        m = metrics(a)
        assert m[("offrac_link_up", '{device="1"}')] == 0
        assert m[("offrac_forward_failures_total", "")] >= 1
        # B restarts on the same port; A's link reopens after its back-off.
        start_node(f'device_id = 1\n[[devices]]\nid = 0\naddr = "{a.address}"\n', listen=f"127.0.0.1:{pb}")
        wait_linked(a)
        assert c.call_chain(["echo", Step("echo", device=1)], b"back") == b"back"


def test_a_silent_peer_is_answered_timeout_naming_the_hop(start_node: StartNode) -> None:
    a, _, _ = pair(start_node, extra_a="forward_timeout_ms = 300")
    with Client(a.address, timeout=10) as c:
        t = time.monotonic()
        with pytest.raises(RequestTimeoutError) as e:
            c.call_chain([Step("spin", device=1, us=1_000_000)], b"late")
        assert 0.25 < time.monotonic() - t < 0.9
        assert (e.value.hop, e.value.detail) == (0, 1)
        # the late answer is dropped: the next call gets its own answer, on the same connection
        time.sleep(1.0)
        assert c.call_chain([Step("echo", device=1)], b"next") == b"next"
        assert c.outstanding == 0


def test_a_traced_call_reports_each_hops_device_and_times(start_node: StartNode) -> None:
    a, _b, _ = pair(start_node)
    with Client(a.address, timeout=10, trace=True) as c:
        out, info = c.call_chain(
            [Step("spin", device=1, us=2000), Step("echo", device=0), Step("spin", device=1, us=1000)],
            b"t",
            return_info=True,
        )
    assert out == b"t"
    assert info.hop_times is not None
    assert [(h.device, h.ran) for h in info.hop_times[:4]] == [(1, True), (0, True), (1, True), (0, False)]
    assert info.hop_times[0].exec_ns >= 2_000_000 and info.hop_times[2].exec_ns >= 1_000_000


def test_a_direct_reply_comes_from_the_last_node_and_settles_the_first(start_node: StartNode) -> None:
    """The caller registers endpoint 40 (tenant 5) on B, sends A→B chains flagged for a
    direct reply on A: B writes each answer to the endpoint and sends A a receipt, so A
    answers nothing and times nothing out; an answer B cannot deliver comes back through A."""
    a, b, _ = pair(start_node, "forward_timeout_ms = 500")
    x = np.random.default_rng(5).normal(0, 20, 256).astype(np.float32)
    with a.client() as plain, RawConn(b.addr) as rx, RawConn(a.addr) as tx:
        rx.send(RequestHeader.chain(1, [Hop.local(FN_REGISTER_REPLY, 40)], tenant=5).encode())
        h, _ = rx.read_response()
        assert (h.status, h.detail) == (Status.OK, 40)
        want = plain.call("logit", plain.call("minmax", x))
        steps = [Hop.local(FunctionId.MINMAX), Hop(FunctionId.LOGIT, 1, 0)]
        for i in range(20):
            header = RequestHeader.chain(100 + i, steps, x.nbytes, tenant=5, reply_device=40, direct=True)
            tx.send(header.encode() + x.tobytes())
        got = {}
        for _ in range(20):
            h, p = rx.read_response()
            assert (h.status, h.device, h.hop_index, h.tenant) == (Status.OK, 1, 1, 5)
            got[h.request_id] = np.frombuffer(p, dtype=np.float32)
        assert sorted(got) == list(range(100, 120))
        for v in got.values():
            np.testing.assert_array_equal(v, want)
        # Another tenant's request naming endpoint 40 comes back to its sender, through A.
        echo_b = [Hop(FunctionId.ECHO, 1, 0)]
        other = RequestHeader.chain(200, echo_b, 2, tenant=6, reply_device=40, direct=True)
        tx.send(other.encode() + b"hi")
        h, p = tx.read_response()
        assert (h.request_id, h.status, p) == (200, Status.OK, b"hi")
        # Past the forward timeout: had a receipt been missed, A would answer TIMEOUT now.
        assert not tx.has_data(0.8), "the sender got an answer for a directly delivered request"
        assert not rx.has_data(0.0), "the endpoint got another tenant's answer"
    m = metrics(a)
    assert m[("offrac_receipts_total", "")] == 20
    assert m[("offrac_relayed_total", "")] == m[("offrac_forwarded_total", "")] - 20
    assert m[("offrac_forward_failures_total", "")] == a.refused_probes  # type: ignore[attr-defined]
