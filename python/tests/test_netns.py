"""Chains across real separate hosts: four network namespaces on a bridge, one node each.
Faults under load — a link cut, a node killed -9 and restarted with the same device id —
each end in exactly one answer per request, counted at the caller from the raw byte stream.

Needs root and iproute2 (as CI has); ``OFFRAC_ALLOW_NO_NETNS=1`` skips instead of failing."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from netns import Hosts

from offrac import Client, FunctionId, Hop, RequestHeader, Status, Step

from _util import RawConn
from conftest import Node, netns_hosts, node_on_host

PORT = 7000
N = 4


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    yield from netns_hosts(N)


def config(hosts: Hosts, me: int) -> str:
    devices = hosts.devices(me, PORT)
    return f'device_id = {me}\nforward_timeout_ms = 1000\n[metrics]\nlisten = ""\n{devices}'


def start(node_bin: Path, tmp: Path, hosts: Hosts, i: int) -> Node:
    return node_on_host(node_bin, tmp / f"host{i}-{time.monotonic_ns()}", hosts, i, config(hosts, i), PORT)


@pytest.fixture(scope="module")
def cluster(node_bin: Path, hosts: Hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    tmp = tmp_path_factory.mktemp("netns")
    nodes = [start(node_bin, tmp, hosts, i) for i in range(N)]
    try:
        # Every node's link to every other: a node that started before its
        # peer found it down once and retries after a back-off.
        for a in range(N):
            for b in range(N):
                wait_linked(nodes[a], b)
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def wait_linked(entry: Node, device: int, timeout: float = 15.0) -> None:
    """A hop on ``device`` (entered at ``entry``) answers."""
    deadline = time.monotonic() + timeout
    with Client(entry.address, timeout=5) as c:
        while True:
            try:
                if c.call_chain([Step("echo", device=device)], b"up") == b"up":
                    return
            except Exception:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.05)


ROUTES = [
    [0],
    [0, 1],
    [1, 2, 3],
    [3, 0, 2, 1, 0],
    [0, 1, 2, 3, 3, 2, 1, 0],
    [2, 2, 1, 3, 0, 3, 1, 2],
]
FUNCS = ["logit", "echo", "minmax", "echo", "minmax", "echo", "echo", "minmax"]


@pytest.mark.parametrize("route", ROUTES, ids=["-".join(map(str, r)) for r in ROUTES])
def test_chains_across_hosts_equal_their_steps_one_by_one(cluster: list[Node], route: list[int]) -> None:
    x = np.random.default_rng(len(route)).uniform(0.01, 0.99, 3000).astype(np.float32)
    steps = [Step(f, device=d) for f, d in zip(FUNCS, route, strict=False)]
    with Client(cluster[0].address, timeout=10) as c:
        want = x
        for f in FUNCS[: len(route)]:
            want = c.call(f, want)
        got, info = c.call_chain(steps, x, return_info=True)
    np.testing.assert_array_equal(got, want)
    assert (info.hop_index, info.device) == (len(route) - 1, route[-1])


def raw_chain(request_id: int, route: list[int], payload: bytes) -> bytes:
    hops = [Hop(FunctionId.ECHO, d, 0) for d in route]
    return RequestHeader.chain(request_id, hops, len(payload)).encode() + payload


def exactly_once(conn: RawConn, ids: set[int], within: float) -> Counter[Status]:
    """Read until every id is answered; no id twice, nothing unasked, nothing more after."""
    seen: Counter[int] = Counter()
    statuses: Counter[Status] = Counter()
    deadline = time.monotonic() + within
    while set(seen) != ids:
        assert time.monotonic() < deadline, f"unanswered: {sorted(ids - set(seen))[:10]}"
        h, _ = conn.read_response(timeout=deadline - time.monotonic())
        assert h.request_id in ids, f"an answer to request {h.request_id}, never sent"
        seen[h.request_id] += 1
        assert seen[h.request_id] == 1, f"request {h.request_id} answered twice"
        statuses[h.status] += 1
    assert not conn.has_data(1.5), "an answer came after every request had one"
    return statuses


def test_a_cut_link_under_load_ends_every_request_once(cluster: list[Node], hosts: Hosts) -> None:
    with RawConn((cluster[0].addr[0], PORT), timeout=10) as c:
        ids = set(range(1, 301))
        for i in sorted(ids):
            c.send(raw_chain(i, [0, 2, 0], b"x" * 200))
            if i == 100:
                hosts.link_down(2)
            if i == 200:
                time.sleep(0.3)
            time.sleep(0.002)
        statuses = exactly_once(c, ids, within=10)
        hosts.link_up(2)
    assert statuses[Status.OK] > 0
    lost = sum(n for s, n in statuses.items() if s != Status.OK)
    assert lost > 0, "the cut lost nothing: it came too late to test anything"
    assert set(statuses) <= {Status.OK, Status.TIMEOUT, Status.UNREACHABLE}, statuses
    wait_linked(cluster[0], 2)


def test_a_node_killed_and_restarted_with_its_device_id(
    cluster: list[Node], hosts: Hosts, node_bin: Path, tmp_path: Path
) -> None:
    with RawConn((cluster[0].addr[0], PORT), timeout=10) as c:
        ids = set(range(1, 201))
        for i in sorted(ids):
            c.send(raw_chain(i, [0, 1, 3], b"y" * 100))
            if i == 80:
                cluster[1].kill()
            time.sleep(0.002)
        statuses = exactly_once(c, ids, within=10)
    assert statuses[Status.OK] > 0 and statuses[Status.UNREACHABLE] > 0, statuses
    assert set(statuses) <= {Status.OK, Status.UNREACHABLE, Status.TIMEOUT}, statuses
    cluster[1] = start(node_bin, tmp_path, hosts, 1)
    wait_linked(cluster[0], 1)
    with Client(cluster[0].address, timeout=10) as cl:
        assert cl.call_chain(["echo", Step("echo", device=1), Step("echo", device=3)], b"back") == b"back"
