"""The asyncio client against a real node: pipelined calls each get their own answer,
chains, describe, typed errors, timeouts and cancellation that leave the connection usable,
and a close that fails what is outstanding."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import numpy as np
import pytest

from offrac import BadInputError, ConnectError, ConnectionClosedError, Step, aio
from offrac.registry import Ragged

from _util import free_port
from conftest import Node


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_calls_chains_and_describe(node: Node) -> None:
    async def main() -> None:
        async with await aio.Client.connect(node.address) as c:
            top = await c.call("topk", np.arange(100, dtype=np.int32), k=3)
            assert top.tolist() == [99, 98, 97]
            lists = await c.call("firstx", [[1, 2, 3], [], [4]], x=2)
            assert isinstance(lists, Ragged) and lists.tolist() == [[1, 2], [], [4]]
            chained = await c.call_chain([Step("topk", k=4), "logit"], np.arange(8, dtype=np.int32))
            assert chained.dtype == np.float32 and len(chained) == 4
            d = await c.describe()
            assert any(f["name"] == "sigridhash" for f in d["functions"])
            with pytest.raises(BadInputError, match="max_value 0"):
                await c.call("sigridhash", [1], param=0)
            assert await c.call("echo", b"still fine") == b"still fine"

    run(main())


def test_many_calls_in_flight_each_get_their_own_answer(node: Node) -> None:
    async def main() -> None:
        async with await aio.Client.connect(node.address) as c:
            msgs = [b"m%d" % i for i in range(500)]
            got = await asyncio.gather(*(c.call("echo", m) for m in msgs))
            assert got == msgs
            assert c.outstanding == 0

    run(main())


def test_timeout_and_cancellation_leave_the_connection_usable(node: Node) -> None:
    async def main() -> None:
        async with await aio.Client.connect(node.address) as c:
            with pytest.raises(TimeoutError):
                await c.call("spin", b"", us=300_000, timeout=0.05)
            task = asyncio.ensure_future(c.call("spin", b"", us=300_000))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert c.outstanding == 0
            # The two late answers arrive while this runs: they are dropped, not mistaken.
            assert await c.call("echo", b"next") == b"next"
            await asyncio.sleep(0.6)
            assert await c.call("echo", b"after") == b"after"

    run(main())


def test_close_fails_outstanding_calls(node: Node) -> None:
    async def main() -> None:
        c = await aio.Client.connect(node.address)
        task = asyncio.ensure_future(c.call("spin", b"", us=500_000))
        await asyncio.sleep(0.05)
        await c.close()
        with pytest.raises(ConnectionClosedError):
            await task
        with pytest.raises(ConnectionClosedError):
            await c.call("echo", b"x")

    run(main())


def test_reconnect_after_the_node_restarts(start_node: Callable[..., Node]) -> None:
    """A call outstanding when the node dies fails with ConnectionClosedError (never re-sent);
    the next call connects again, also after a restart while idle; close() is final."""
    port = free_port()
    first = start_node(None, listen=f"127.0.0.1:{port}")

    async def main() -> list[Node]:
        nodes = [first]
        c = await aio.Client.connect(
            first.address, reconnect=True, reconnect_backoff=(0.02, 0.2), reconnect_attempts=30
        )
        assert await c.call("echo", b"one") == b"one"
        slow = asyncio.ensure_future(c.call("spin", b"", us=800_000))
        await asyncio.sleep(0.2)
        first.stopped = True  # killed on purpose: teardown need not stop it
        first.kill()
        with pytest.raises(ConnectionClosedError):
            await slow
        nodes.append(start_node(None, listen=f"127.0.0.1:{port}"))
        # Two calls race to reconnect: one connection is opened, both are answered.
        assert await asyncio.gather(c.call("echo", b"a"), c.call("echo", b"b")) == [b"a", b"b"]
        assert c.reconnects == 1
        nodes[-1].stopped = True
        nodes[-1].kill()
        await asyncio.sleep(0.2)  # lost while idle: the next call notices and reconnects
        nodes.append(start_node(None, listen=f"127.0.0.1:{port}"))
        assert await c.call("echo", b"idle") == b"idle"
        assert c.reconnects == 2
        await c.close()
        with pytest.raises(ConnectionClosedError):
            await c.call("echo", b"x")
        return nodes

    nodes = run(main())
    assert isinstance(nodes, list)
    nodes[-1].stop()


def test_reconnect_gives_up_with_connect_error(start_node: Callable[..., Node]) -> None:
    node = start_node()

    async def main() -> None:
        c = await aio.Client.connect(
            node.address, reconnect=True, reconnect_backoff=(0.01, 0.02), reconnect_attempts=3
        )
        assert await c.call("echo", b"a") == b"a"
        node.stopped = True
        node.kill()
        await asyncio.sleep(0.1)
        with pytest.raises(ConnectError):
            await c.call("echo", b"b")
        assert c.reconnects == 0
        await c.close()

    run(main())
