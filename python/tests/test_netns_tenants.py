"""Tenants across real separate hosts: two network namespaces, one node each, sharing a node key
(docs/control.md, "Tenants across nodes"). With ``anonymous = "refuse"`` on both, a tenant's chain
across them works and is that tenant's on the second host (its quota there applies).

Needs root and iproute2 (as CI has); ``OFFRAC_ALLOW_NO_NETNS=1`` skips instead of failing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from netns import Hosts

from offrac import Client, Step
from offrac.errors import QuotaExceededError, UnauthorizedError

from conftest import Node, netns_hosts, node_on_host

PORT = 7000
KEYS = {1: b"0123456789abcdef", 2: b"fedcba9876543210"}
NODE_KEY = b"the cluster's node key"


@pytest.fixture(scope="module")
def hosts() -> Iterator[Hosts]:
    yield from netns_hosts(2)


def config(hosts: Hosts, me: int) -> str:
    # Tenant 1 may hold 50,000 reassembly bytes on host 1, a megabyte on host 0.
    pool = 50_000 if me == 1 else 1 << 20
    return (
        f'device_id = {me}\n[metrics]\nlisten = ""\n'
        f"{hosts.devices(me, PORT)}"
        f'[control]\nanonymous = "refuse"\nnode_key = "{NODE_KEY.hex()}"\n'
        f'[[control.tenants]]\nid = 1\nkey = "{KEYS[1].hex()}"\nmax_pool_bytes = {pool}\n'
        f'[[control.tenants]]\nid = 2\nkey = "{KEYS[2].hex()}"\n'
    )


@pytest.fixture(scope="module")
def nodes(node_bin: Path, hosts: Hosts, tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Node]]:
    tmp = tmp_path_factory.mktemp("netns-tenants")
    started = [node_on_host(node_bin, tmp / f"host{i}", hosts, i, config(hosts, i), PORT) for i in range(2)]
    try:
        yield started
    finally:
        for n in started:
            n.stop()


def test_a_tenants_chain_across_hosts_is_its_own_on_the_second(nodes: list[Node]) -> None:
    chain = [Step("echo", device=0), Step("echo", device=1)]
    with Client(nodes[0].address, timeout=10, tenant=1, key=KEYS[1]) as one:
        # Host 0's first connect may have raced host 1's start: it retries with back-off.
        deadline = time.monotonic() + 15
        while True:
            try:
                assert one.call_chain(chain, b"across") == b"across"
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        big = bytes(100_000)
        with pytest.raises(QuotaExceededError) as over:
            one.call_chain(chain, big)
        assert over.value.detail == 50_000
    with Client(nodes[0].address, timeout=10, tenant=2, key=KEYS[2]) as two:
        assert two.call_chain(chain, big) == big
    # Without a hello, host 0 refuses the chain before it goes anywhere.
    with Client(nodes[0].address, timeout=10) as anon, pytest.raises(UnauthorizedError):
        anon.call_chain(chain, b"x")
