"""A pool over two real nodes: calls go round-robin to the connections whose node hosts the
function, by the nodes' describe answers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from offrac import AsyncPool, Pool, Step

from conftest import Node

A = 'device_id = 1\n[[slots]]\nfunction = "topk"\n[[slots]]\nfunction = "echo"\n'
B = 'device_id = 2\n[[slots]]\nfunction = "topk"\n[[slots]]\nfunction = "logit"\n'


def test_calls_go_round_robin_to_nodes_hosting_the_function(start_node: Callable[..., Node]) -> None:
    a, b = start_node(A), start_node(B)
    with Pool([a.address, b.address], per_node=2) as p:
        assert len(p.clients) == 4
        x = np.arange(64, dtype=np.int32)
        devices = [p.call("topk", x, k=2, return_info=True)[1].device for _ in range(8)]
        assert sorted(set(devices)) == [1, 2] and devices.count(1) == devices.count(2) == 4
        logit = [p.call("logit", np.float32([0.5]), return_info=True)[1].device for _ in range(4)]
        assert logit == [2, 2, 2, 2]
        assert {p.call("echo", b"e", return_info=True)[1].device for _ in range(3)} == {1}
        assert p.submit("echo", b"f").result(timeout=5) == b"f"
        out = p.call_chain([Step("topk", k=3), Step("topk", k=1)], x)
        assert out.tolist() == [63]
        with pytest.raises(ValueError, match="no node of this pool hosts minmax"):
            p.call("minmax", np.float32([1.0]))


def test_the_asyncio_pool_routes_like_the_sync_one(start_node: Callable[..., Node]) -> None:
    a, b = start_node(A), start_node(B)

    async def main() -> None:
        async with await AsyncPool.connect([a.address, b.address], per_node=2) as p:
            assert len(p.clients) == 4
            x = np.arange(64, dtype=np.int32)
            answers = await asyncio.gather(*(p.call("topk", x, k=2, return_info=True) for _ in range(8)))
            devices = [info.device for _, info in answers]
            assert devices.count(1) == devices.count(2) == 4
            assert all(out.tolist() == [63, 62] for out, _ in answers)
            _, info = await p.call("logit", np.float32([0.5]), return_info=True)
            assert info.device == 2
            assert (await p.call_chain([Step("topk", k=3), Step("topk", k=1)], x)).tolist() == [63]
            with pytest.raises(ValueError, match="no node of this pool hosts minmax"):
                await p.call("minmax", np.float32([1.0]))

    asyncio.run(main())
