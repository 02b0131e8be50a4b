"""Collectives across real separate hosts: four network namespaces on a bridge, one node each;
each rank is a client of its own node. Results against numpy; mismatched calls and a rank
that dies mid-collective end in an error at every other rank, within the deadline.

Needs root and iproute2 (as CI has); ``OFFRAC_ALLOW_NO_NETNS=1`` skips instead of failing."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from netns import Hosts

from offrac import (
    BadInputError,
    Client,
    OffracError,
    RequestTimeoutError,
    Step,
    TooLargeError,
    UnknownBufferError,
    UnreachableError,
)
from offrac.buffers import drop_buffer, keep, load, put_buffer
from offrac.collectives import MAX, SUM, Algorithm, Communicator

from conftest import Node, netns_hosts, node_on_host

PORT = 7100
N = 4
# Every collective on a communicator needs a tag no recent one used: each on_ranks call
# starts its communicators at a fresh base.
_TAGS = itertools.count(1000, 1000)


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    yield from netns_hosts(N)


def config(hosts: Hosts, me: int) -> str:
    devices = hosts.devices(me, PORT)
    # small thresholds, so the tests' sizes take every algorithm and both protocols
    return (
        f'device_id = {me}\n[metrics]\nlisten = ""\n'
        "[collectives]\neager_max_bytes = 4096\nsegment_bytes = 65536\nring_min_bytes = 8192\n"
        f"tree_min_bytes = 8192\n{devices}"
    )


def start(node_bin: Path, tmp: Path, hosts: Hosts, i: int) -> Node:
    return node_on_host(node_bin, tmp / f"host{i}-{time.monotonic_ns()}", hosts, i, config(hosts, i), PORT)


def wait_up(nodes: list[Node], timeout: float = 15.0) -> None:
    """Every node sees every peer's link up."""
    deadline = time.monotonic() + timeout
    for n in nodes:
        with Client(n.address, timeout=5) as c:
            while not all(p["up"] for p in c.describe()["peers"]):
                assert time.monotonic() < deadline, "links did not come up"
                time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster(node_bin: Path, hosts: Hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    tmp = tmp_path_factory.mktemp("collectives")
    nodes = [start(node_bin, tmp, hosts, i) for i in range(N)]
    try:
        wait_up(nodes)
        yield nodes
    finally:
        for n in nodes:
            n.stop()


def on_ranks(
    cluster: list[Node], members: list[int], fn: Callable[[Communicator], Any], timeout: float = 10.0
) -> list[Any]:
    """Run ``fn(comm)`` on every member at once (a thread per rank); results or exceptions."""

    first = next(_TAGS)

    def run(d: int) -> Any:
        with Communicator(cluster[d].address, members, device=d, timeout=timeout, first_tag=first) as comm:
            try:
                return fn(comm)
            except OffracError as e:
                return e

    with ThreadPoolExecutor(len(members)) as ex:
        return list(ex.map(run, members))


def data(rank: int, n: int, dtype: type) -> np.ndarray:
    rng = np.random.default_rng(rank * 7919 + n)
    if dtype is np.int32:
        return rng.integers(-1000, 1000, n, dtype=np.int32)
    return rng.standard_normal(n).astype(np.float32)


def check(got: Any, want: np.ndarray) -> None:
    assert isinstance(got, np.ndarray), got
    if want.dtype == np.float32:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


SIZES = [1, 1000, 50_000]  # 4 B: recursive doubling; 4 KB eager; 200 KB ring + rendezvous


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.int32], ids=["f32", "i32"])
@pytest.mark.parametrize("op", [SUM, MAX], ids=["sum", "max"])
def test_allreduce_on_four_hosts_equals_numpy(cluster: list[Node], n: int, dtype: type, op: Any) -> None:
    members = list(range(N))
    inputs = [data(r, n, dtype) for r in members]
    want = np.sum(inputs, axis=0, dtype=dtype) if op == SUM else np.max(inputs, axis=0)
    for got in on_ranks(cluster, members, lambda c: c.allreduce(inputs[c.rank], op=op)):
        check(got, want)


@pytest.mark.parametrize("algorithm", [Algorithm.RING, Algorithm.RECURSIVE_DOUBLING])
def test_forced_allreduce_algorithms_agree(cluster: list[Node], algorithm: Algorithm) -> None:
    inputs = [data(r, 3001, np.float32) for r in range(N)]
    got = on_ranks(
        cluster,
        list(range(N)),
        lambda c: (c.allreduce(inputs[c.rank], algorithm=algorithm), c.last_algorithm),
    )
    for out, used in got:
        check(out, np.sum(inputs, axis=0, dtype=np.float32))
        assert used == algorithm


@pytest.mark.parametrize("members", [[0, 1], [1, 2, 3], [0, 1, 2, 3]], ids=["2", "3", "4"])
@pytest.mark.parametrize("n", [10, 20_000])
def test_bcast_reduce_gather_scatter(cluster: list[Node], members: list[int], n: int) -> None:
    size = len(members)
    root = size - 1
    x = [data(r, n, np.float32) for r in range(size)]
    blocks = data(99, size * n, np.int32).reshape(size, n)

    def run(c: Communicator) -> tuple[Any, Any, Any, Any]:
        b = c.bcast(x[root] if c.rank == root else np.zeros(n, np.float32), root=root)
        r = c.reduce(x[c.rank], op=SUM, root=root)
        g = c.gather(x[c.rank], root=root)
        s = c.scatter(blocks if c.rank == root else None, root=root, count=n, dtype=np.int32)
        return b, r, g, s

    for rank, res in enumerate(on_ranks(cluster, members, run)):
        assert not isinstance(res, Exception), res
        b, r, g, s = res
        check(b, x[root])
        check(s, blocks[rank])
        if rank == root:
            check(r, np.sum(x, axis=0, dtype=np.float32))
            check(g, np.stack(x))
        else:
            assert r is None and g is None


def test_distributed_gemv_with_the_matrix_kept_at_the_nodes(cluster: list[Node]) -> None:
    """ACCL+'s distributed vector-matrix multiply: A split column-wise, each block kept at its
    rank's node (named buffer 1); per multiply x is scattered into buffer 2, each node runs
    ``[load(2), load(1), gemv, keep(3)]`` and a reduce from buffer 3 gives y at the root."""
    members = list(range(N))
    m, n = 96, 64
    k = n // N
    a = np.random.default_rng(5).standard_normal((m, n)).astype(np.float32)
    xs = [np.random.default_rng(10 + i).standard_normal(n).astype(np.float32) for i in range(3)]

    def run(c: Communicator) -> list[Any]:
        put_buffer(c.client, 1, np.ascontiguousarray(a[:, c.rank * k : (c.rank + 1) * k]))
        ys = []
        for x in xs:
            kept = c.run(
                "scatter", dtype=np.float32, count=k, data=x.reshape(N, k) if c.rank == 0 else None, keep=2
            )
            assert kept is None
            c.client.call_chain([load(2), load(1), Step("gemv", cols=k), keep(3)])
            ys.append(c.run("reduce", dtype=np.float32, count=m, source=3, root=0))
        for name in (1, 2, 3):
            drop_buffer(c.client, name)
        return ys

    for rank, res in enumerate(on_ranks(cluster, members, run)):
        assert not isinstance(res, Exception), res
        for x, y in zip(xs, res, strict=True):
            if rank == 0:
                np.testing.assert_allclose(
                    y, a.astype(np.float64) @ x.astype(np.float64), rtol=1e-4, atol=1e-4
                )
            else:
                assert y is not None and y.size == 0


def test_distributed_gemv_as_one_chain_per_rank_with_collective_hops(cluster: list[Node]) -> None:
    """The same multiply as one request per rank and multiply: ``[scatter, load(A), gemv,
    reduce]``, the collectives as hops of the chain (``Communicator.hop``); and every chain
    answers (a ``BadInputError`` at the scatter hop) when the root's scatter names the wrong
    size."""
    members = list(range(N))
    m, n = 96, 64
    k = n // N
    a = np.random.default_rng(6).standard_normal((m, n)).astype(np.float32)
    xs = [np.random.default_rng(20 + i).standard_normal(n).astype(np.float32) for i in range(3)]

    def run(c: Communicator) -> list[Any]:
        put_buffer(c.client, 1, np.ascontiguousarray(a[:, c.rank * k : (c.rank + 1) * k]))
        ys = []
        for x in xs:
            chain = [
                c.hop("scatter", dtype=np.float32, count=k),
                load(1),
                Step("gemv", cols=k),
                c.hop("reduce", dtype=np.float32, count=m, root=0),
            ]
            ys.append(np.frombuffer(c.client.call_chain(chain, x if c.rank == 0 else b""), np.float32))
        try:
            # The root's scatter says k + 1 per rank: its input is short, so it is refused
            # and the others' scatter hops are aborted.
            bad = [c.hop("scatter", dtype=np.float32, count=k + (c.rank == 0)), load(1)]
            c.client.call_chain(bad, xs[0] if c.rank == 0 else b"")
            ys.append(None)
        except BadInputError as e:
            ys.append(e)
        drop_buffer(c.client, 1)
        return ys

    for rank, res in enumerate(on_ranks(cluster, members, run)):
        assert not isinstance(res, Exception), res
        for x, y in zip(xs, res[:-1], strict=True):
            if rank == 0:
                np.testing.assert_allclose(
                    y, a.astype(np.float64) @ x.astype(np.float64), rtol=1e-4, atol=1e-4
                )
            else:
                assert y.size == 0
        err = res[-1]
        assert isinstance(err, BadInputError), (rank, err)
        assert err.hop == 0, (rank, err)


def test_collective_buffers_refusals(cluster: list[Node]) -> None:
    with Communicator(cluster[0].address, [0, 1], device=0, first_tag=next(_TAGS)) as c:
        with pytest.raises(UnknownBufferError) as e:
            c.run("allreduce", dtype=np.float32, count=4, source=424242)
        assert e.value.detail == 424242
        with pytest.raises(ValueError, match="not both"):
            c.run("allreduce", dtype=np.float32, count=4, source=1, data=np.ones(4, np.float32))


def test_mismatched_sizes_fail_every_rank_with_a_clear_error(cluster: list[Node]) -> None:
    def run(c: Communicator) -> Any:
        return c.allreduce(np.ones(100 + (c.rank == 2), np.float32))

    got = on_ranks(cluster, list(range(N)), run, timeout=5)
    assert all(isinstance(e, BadInputError) for e in got), got
    assert any("mismatched" in str(e) and "101" in str(e) for e in got), got


def test_bad_calls_are_refused(cluster: list[Node]) -> None:
    with (
        pytest.raises(UnreachableError, match="device 9 is not in"),
        Communicator(cluster[0].address, [0, 9], device=0, first_tag=next(_TAGS)) as c,
    ):
        c.allreduce(np.ones(4, np.float32))
    with Communicator(cluster[0].address, [0, 1, 2], device=0, first_tag=next(_TAGS)) as c:
        with pytest.raises(BadInputError, match="ring cannot run gather"):
            c.gather(np.ones(4, np.float32), algorithm=Algorithm.RING)
        with pytest.raises(BadInputError, match="power-of-two"):
            c.allreduce(np.ones(4, np.float32), algorithm=Algorithm.RECURSIVE_DOUBLING)


def test_a_call_beyond_max_payload_fails_every_rank_at_once(cluster: list[Node]) -> None:
    """The root's call is refused by its node's engine (2.4 MB against the default
    max_payload of 2 MiB) before the node's collectives see it: the root gets TOO_LARGE,
    and the ranks waiting for it are told at once, not at their 20 s deadline."""
    count = 600_000

    def run(c: Communicator) -> Any:
        if c.rank == 0:
            time.sleep(0.3)  # the others wait first
            return c.bcast(np.ones(count, np.float32))
        return c.bcast(None, count=count, dtype=np.float32)

    t0 = time.monotonic()
    got = on_ranks(cluster, list(range(N)), run, timeout=20)
    took = time.monotonic() - t0
    assert isinstance(got[0], TooLargeError), got
    assert "exceeds the maximum of 2097152" in str(got[0])
    for e in got[1:]:
        assert isinstance(e, TooLargeError), got
        assert "rank 0 (device 0) failed the collective: its node refused the call" in str(e), e
    assert took < 5, took


def test_a_rank_that_never_calls_times_out_everyone_else(cluster: list[Node]) -> None:
    t0 = time.monotonic()
    got = on_ranks(
        cluster, [0, 1, 2, 3], lambda c: None if c.rank == 3 else c.allreduce(np.ones(10, np.int32)), 1.0
    )
    took = time.monotonic() - t0
    assert all(isinstance(e, RequestTimeoutError) for e in got[:3]), got
    assert "waiting for rank" in str(got[0])
    assert took < 3.0, took


def test_a_rank_killed_mid_collective_fails_the_others_before_the_deadline(
    cluster: list[Node], node_bin: Path, hosts: Hosts, tmp_path: Path
) -> None:
    """Rank 3's node dies while ranks 0-2 wait for it: their links see it go, and every
    other rank gets an error well before the 20 s deadline."""

    def run(c: Communicator) -> Any:
        if c.rank == 3:
            time.sleep(0.3)
            cluster[3].kill()
            return None
        return c.allreduce(np.ones(200_000, np.float32))

    t0 = time.monotonic()
    got = on_ranks(cluster, [0, 1, 2, 3], run, timeout=20)
    took = time.monotonic() - t0
    try:
        for e in got[:3]:
            assert isinstance(e, (UnreachableError, BadInputError)), got
        assert any("device 3" in str(e) for e in got[:3]), got
        assert took < 5, took
    finally:
        cluster[3] = start(node_bin, tmp_path, hosts, 3)
        wait_up(cluster)
    # and the restarted node takes part again
    inputs = [data(r, 64, np.int32) for r in range(N)]
    for out in on_ranks(cluster, list(range(N)), lambda c: c.allreduce(inputs[c.rank])):
        check(out, np.sum(inputs, axis=0, dtype=np.int32))
