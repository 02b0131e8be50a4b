"""Connections to one or more nodes behind one object: each call goes to the next connection,
round-robin, among those whose node hosts the function (as the nodes' describe answers say).

>>> with offrac.Pool(["10.0.0.1:7000", "10.0.0.2:7000"], per_node=2) as p:
...     p.call("topk", x, k=16)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from . import aio
from .client import Client, Data, RequestFuture, Step, StepLike
from .protocol import function_id, function_name

__all__ = ["AsyncPool", "Pool"]


class Pool:
    """``per_node`` :class:`Client` connections to each address (the keyword arguments are
    the clients'). A function no node of the pool hosts raises ``ValueError`` before anything
    is sent."""

    def __init__(self, addresses: str | Sequence[str], *, per_node: int = 2, **client_kwargs: Any) -> None:
        addrs = [addresses] if isinstance(addresses, str) else list(addresses)
        if not addrs or per_node < 1:
            raise ValueError("a pool needs at least one address and per_node >= 1")
        self._clients: list[Client] = []
        self._hosts = _Hosts()
        try:
            for addr in addrs:
                conns = [Client(addr, **client_kwargs) for _ in range(per_node)]
                self._clients += conns
                self._hosts.add(conns[0].describe(), conns)
        except BaseException:
            self.close()
            raise

    def client_for(self, function: str | int) -> Client:
        """The connection the next request for ``function`` goes to."""
        client: Client = self._hosts.next(function)
        return client

    def call(self, function: str | int, data: Data = b"", **kwargs: Any) -> Any:
        """:meth:`offrac.Client.call` on the next connection hosting ``function``."""
        return self.client_for(function).call(function, data, **kwargs)

    def submit(self, function: str | int, data: Data = b"", **kwargs: Any) -> RequestFuture[Any]:
        return self.client_for(function).submit(function, data, **kwargs)

    def call_chain(self, steps: Sequence[StepLike], data: Data = b"", **kwargs: Any) -> Any:
        """A chain goes to a connection whose node hosts its first step."""
        first = steps[0]
        fid = first.function if isinstance(first, Step) else function_id(first)
        return self.client_for(fid).call_chain(steps, data, **kwargs)

    @property
    def clients(self) -> list[Client]:
        return list(self._clients)

    def close(self) -> None:
        for c in self._clients:
            c.close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Hosts:
    """Which connections host each function, and whose turn it is (shared by both pools)."""

    def __init__(self) -> None:
        self.hosts: dict[int, list[Any]] = {}
        self.turns: dict[int, Iterator[int]] = {}
        self.lock: threading.Lock = threading.Lock()

    def add(self, description: dict[str, Any], conns: Sequence[Any]) -> None:
        for f in description["functions"]:
            self.hosts.setdefault(int(f["id"]), []).extend(conns)
        self.turns = {f: itertools.count() for f in self.hosts}

    def next(self, function: str | int) -> Any:
        fid = function_id(function)
        hosts = self.hosts.get(fid)
        if not hosts:
            name = function_name(fid) or str(fid)
            raise ValueError(f"no node of this pool hosts {name}")
        with self.lock:
            turn = next(self.turns[fid])
        return hosts[turn % len(hosts)]


class AsyncPool:
    """:class:`Pool` for asyncio: ``per_node`` :class:`offrac.aio.Client` connections to each
    address; create with ``await AsyncPool.connect(addresses)``. Calls go round-robin to the
    connections whose node hosts the function (from the nodes' describe answers)."""

    def __init__(self, clients: list[aio.Client], hosts: _Hosts) -> None:
        self._clients = clients
        self._hosts = hosts

    @classmethod
    async def connect(
        cls, addresses: str | Sequence[str], *, per_node: int = 2, **client_kwargs: Any
    ) -> AsyncPool:
        """Open every connection (the keyword arguments are :meth:`offrac.aio.Client.connect`'s)."""
        addrs = [addresses] if isinstance(addresses, str) else list(addresses)
        if not addrs or per_node < 1:
            raise ValueError("a pool needs at least one address and per_node >= 1")
        clients: list[aio.Client] = []
        hosts = _Hosts()
        try:
            for addr in addrs:
                conns = [await aio.Client.connect(addr, **client_kwargs) for _ in range(per_node)]
                clients += conns
                hosts.add(await conns[0].describe(), conns)
        except BaseException:
            for c in clients:
                await c.close()
            raise
        return cls(clients, hosts)

    def client_for(self, function: str | int) -> aio.Client:
        """The connection the next request for ``function`` goes to."""
        client: aio.Client = self._hosts.next(function)
        return client

    async def call(self, function: str | int, data: Data = b"", **kwargs: Any) -> Any:
        """:meth:`offrac.aio.Client.call` on the next connection hosting ``function``."""
        return await self.client_for(function).call(function, data, **kwargs)

    async def call_chain(self, steps: Sequence[StepLike], data: Data = b"", **kwargs: Any) -> Any:
        """A chain goes to a connection whose node hosts its first step."""
        first = steps[0]
        fid = first.function if isinstance(first, Step) else function_id(first)
        return await self.client_for(fid).call_chain(steps, data, **kwargs)

    @property
    def clients(self) -> list[aio.Client]:
        return list(self._clients)

    async def close(self) -> None:
        for c in self._clients:
            await c.close()

    async def __aenter__(self) -> AsyncPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
