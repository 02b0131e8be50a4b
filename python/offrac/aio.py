"""An asyncio client with the synchronous client's API: ``await client.call(...)``.

Every call of one :class:`Client` is pipelined on one connection: many may be awaited at once
(``asyncio.gather``), and each gets exactly its own answer. Encoding, parameters, decoding,
typed errors and BUSY retries are those of :class:`offrac.Client`. Cancelling a call (or its
timeout expiring) abandons the request: its answer, if it comes, is dropped, and the
connection stays usable.

>>> async with await offrac.aio.Client.connect("127.0.0.1:7000") as c:
...     top = await c.call("topk", np.arange(100, dtype=np.int32), k=3)
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, overload

import numpy as np
import numpy.typing as npt

from ._aio_conn import Connection
from .client import (
    DEFAULT_MAX_ANSWER_BYTES,
    BytesInput,
    Data,
    FloatInput,
    IntInput,
    MatmulInput,
    RaggedInput,
    Step,
    StepLike,
    _budget_us,
    check_max_answer_bytes,
    parse_address,
    prepare_chain,
)
from .errors import ConnectError, ConnectionClosedError, OffracError, error_for_response
from .protocol import (
    FN_DESCRIBE,
    Hop,
    RequestHeader,
    ResponseHeader,
    Status,
    function_id,
)
from .registry import CSR, Ragged

__all__ = ["Client"]


@dataclass
class _Pending:
    future: asyncio.Future[Any]
    wire: bytes
    decode: Any  # Callable[[bytearray], Any] | None (None: raw mode)
    return_info: bool
    retries_left: int
    attempt: int = 0


class Client:
    """One connection to a node; create with ``await Client.connect(address)``."""

    def __init__(
        self,
        conn: Connection,
        address: tuple[str, int],
        *,
        timeout: float | None,
        busy_retries: int,
        busy_backoff: tuple[float, float],
        busy_backoff_max: float,
        tenant: int,
        budget: float | None,
        reconnect: bool = False,
        reconnect_attempts: int = 5,
        reconnect_backoff: tuple[float, float] = (0.05, 1.0),
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self.address: tuple[str, int] = address
        #: The largest answer payload the client allocates for (as :class:`offrac.Client`'s;
        #: checked by :meth:`connect`).
        self.max_answer_bytes: int = max_answer_bytes
        self.reconnect: bool = reconnect
        self.reconnect_attempts: int = reconnect_attempts
        self.reconnect_backoff: tuple[float, float] = reconnect_backoff
        #: Times the client connected again after losing its connection.
        self.reconnects: int = 0
        self.timeout: float | None = timeout
        self.busy_retries: int = busy_retries
        self.busy_backoff: tuple[float, float] = busy_backoff
        self.busy_backoff_max: float = busy_backoff_max
        self.tenant: int = tenant
        self.budget: float | None = budget
        self.last_response: ResponseHeader | None = None
        self._pending: dict[int, _Pending] = {}
        self._next_id = 1
        self._closed: OffracError | None = None
        self._user_closed = False
        self._reconnect_lock = asyncio.Lock()
        self._rng = random.Random()
        self._conn = conn
        self._attach(conn)

    @classmethod
    async def connect(
        cls,
        address: str | tuple[str, int],
        *,
        timeout: float | None = 10.0,
        busy_retries: int = 8,
        busy_backoff: tuple[float, float] = (80e-6, 120e-6),
        busy_backoff_max: float = 0.05,
        tenant: int = 0,
        budget: float | None = None,
        reconnect: bool = False,
        reconnect_attempts: int = 5,
        reconnect_backoff: tuple[float, float] = (0.05, 1.0),
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> Client:
        """Open the connection (within ``timeout``); the arguments mean what they mean for
        :class:`offrac.Client`. With ``reconnect``, a client whose connection was lost
        connects again before its next call (up to ``reconnect_attempts`` tries, jittered
        exponential back-off between ``reconnect_backoff`` seconds); calls outstanding at the
        loss fail with ConnectionClosedError and are never re-sent."""
        if busy_retries < 0:
            raise ValueError("busy_retries must be >= 0")
        if reconnect_attempts < 1 or not 0 < reconnect_backoff[0] <= reconnect_backoff[1]:
            raise ValueError("reconnect_attempts >= 1 and reconnect_backoff = (first, most) > 0")
        _budget_us(budget)
        check_max_answer_bytes(max_answer_bytes)
        host, port = parse_address(address)
        conn = await _open(host, port, timeout, max_answer_bytes)
        return cls(
            conn,
            (host, port),
            timeout=timeout,
            busy_retries=busy_retries,
            busy_backoff=busy_backoff,
            busy_backoff_max=busy_backoff_max,
            tenant=tenant,
            budget=budget,
            reconnect=reconnect,
            reconnect_attempts=reconnect_attempts,
            reconnect_backoff=reconnect_backoff,
            max_answer_bytes=max_answer_bytes,
        )

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def closed(self) -> bool:
        return self._closed is not None

    @property
    def outstanding(self) -> int:
        """Requests sent (or waiting for a BUSY retry) and not yet answered."""
        return len(self._pending)

    # -- calls -----------------------------------------------------------------------------

    # BEGIN GENERATED OVERLOADS aio-call (python/tools/gen_overloads.py)
    @overload
    async def call(
        self,
        function: Literal["echo"],
        data: BytesInput = ...,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> bytes: ...
    @overload
    async def call(
        self,
        function: Literal["echo"],
        data: BytesInput = ...,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[bytes, ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["topk"],
        data: IntInput,
        *,
        k: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.int32]: ...
    @overload
    async def call(
        self,
        function: Literal["topk"],
        data: IntInput,
        *,
        k: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.int32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["logit"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    async def call(
        self,
        function: Literal["logit"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["minmax"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    async def call(
        self,
        function: Literal["minmax"],
        data: FloatInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["matmul"],
        data: MatmulInput,
        *,
        n: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    async def call(
        self,
        function: Literal["matmul"],
        data: MatmulInput,
        *,
        n: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["spin"],
        data: BytesInput = ...,
        *,
        us: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> bytes: ...
    @overload
    async def call(
        self,
        function: Literal["spin"],
        data: BytesInput = ...,
        *,
        us: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[bytes, ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["mapid"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.uint32]: ...
    @overload
    async def call(
        self,
        function: Literal["mapid"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.uint32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["sparsetransform"],
        data: FloatInput,
        *,
        cols: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> CSR: ...
    @overload
    async def call(
        self,
        function: Literal["sparsetransform"],
        data: FloatInput,
        *,
        cols: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[CSR, ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["bucketize"],
        data: FloatInput,
        *,
        set: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.uint32]: ...
    @overload
    async def call(
        self,
        function: Literal["bucketize"],
        data: FloatInput,
        *,
        set: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.uint32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["sigridhash"],
        data: IntInput,
        *,
        max_value: int,
        salt: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.uint32]: ...
    @overload
    async def call(
        self,
        function: Literal["sigridhash"],
        data: IntInput,
        *,
        max_value: int,
        salt: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.uint32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["firstx"],
        data: RaggedInput,
        *,
        x: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> Ragged: ...
    @overload
    async def call(
        self,
        function: Literal["firstx"],
        data: RaggedInput,
        *,
        x: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[Ragged, ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["idlisttransform"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> Ragged: ...
    @overload
    async def call(
        self,
        function: Literal["idlisttransform"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[Ragged, ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["cartesian"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> Ragged: ...
    @overload
    async def call(
        self,
        function: Literal["cartesian"],
        data: RaggedInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[Ragged, ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["ngram"],
        data: RaggedInput,
        *,
        n: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> Ragged: ...
    @overload
    async def call(
        self,
        function: Literal["ngram"],
        data: RaggedInput,
        *,
        n: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[Ragged, ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["getlocalhour"],
        data: IntInput,
        *,
        utc_offset_s: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.uint32]: ...
    @overload
    async def call(
        self,
        function: Literal["getlocalhour"],
        data: IntInput,
        *,
        utc_offset_s: int = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.uint32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["onehot"],
        data: IntInput,
        *,
        classes: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    async def call(
        self,
        function: Literal["onehot"],
        data: IntInput,
        *,
        classes: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["boxcox"],
        data: FloatInput,
        *,
        lmbda: float = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    async def call(
        self,
        function: Literal["boxcox"],
        data: FloatInput,
        *,
        lmbda: float = ...,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["cnn"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    async def call(
        self,
        function: Literal["cnn"],
        data: IntInput,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: Literal["gemv"],
        data: FloatInput,
        *,
        cols: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[False] = ...,
    ) -> npt.NDArray[np.float32]: ...
    @overload
    async def call(
        self,
        function: Literal["gemv"],
        data: FloatInput,
        *,
        cols: int,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: Literal[True],
    ) -> tuple[npt.NDArray[np.float32], ResponseHeader]: ...
    @overload
    async def call(
        self,
        function: int,
        data: Data = ...,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: bool = ...,
        **params: object,
    ) -> Any: ...
    @overload
    async def call(
        self,
        function: str,
        data: Data = ...,
        *,
        tenant: int | None = ...,
        timeout: float | None = ...,
        budget: float | None = ...,
        return_info: bool = ...,
        param: int = ...,
    ) -> Any: ...
    # END GENERATED OVERLOADS aio-call
    async def call(
        self,
        function: str | int,
        data: Data = b"",
        *,
        tenant: int | None = None,
        timeout: float | None = -1.0,
        return_info: bool = False,
        budget: float | None = -1.0,
        **params: object,
    ) -> Any:
        """Run ``function`` on ``data``; as :meth:`offrac.Client.call`."""
        return await self.call_chain(
            [Step(function, **params)],
            data,
            tenant=tenant,
            timeout=timeout,
            return_info=return_info,
            budget=budget,
        )

    async def call_chain(
        self,
        steps: Sequence[StepLike],
        data: Data = b"",
        *,
        tenant: int | None = None,
        timeout: float | None = -1.0,
        return_info: bool = False,
        budget: float | None = -1.0,
    ) -> Any:
        """Run a chain in one request; as :meth:`offrac.Client.call_chain`."""
        payload, hops, decode = prepare_chain(steps, data)
        return await self._request(
            hops, payload, tenant, decode, return_info, self.busy_retries, budget, timeout
        )

    async def call_raw(
        self,
        function: int,
        payload: bytes | bytearray | memoryview = b"",
        param: int = 0,
        *,
        tenant: int | None = None,
        timeout: float | None = -1.0,
    ) -> tuple[ResponseHeader, bytes]:
        """Send ``payload`` as it is; ``(ResponseHeader, payload)`` whatever the status."""
        hops = (Hop.local(function_id(function), param),)
        result: tuple[ResponseHeader, bytes] = await self._request(
            hops, bytes(payload), tenant, None, False, 0, -1.0, timeout
        )
        return result

    async def describe(self, timeout: float | None = -1.0) -> dict[str, Any]:
        """What the node serves (``docs/protocol.md``, "Describe"); also a ping."""
        import json

        header, payload = await self.call_raw(FN_DESCRIBE, b"", 0, timeout=timeout)
        if header.status != Status.OK:
            raise error_for_response(header, payload)
        description: dict[str, Any] = json.loads(payload)
        return description

    async def close(self) -> None:
        """Close the connection; outstanding calls fail with ConnectionClosedError."""
        self._user_closed = True
        self._shutdown(ConnectionClosedError("client closed the connection"))
        self._conn.close()
        await self._conn.wait_closed()

    # -- internals -------------------------------------------------------------------------

    async def _request(
        self,
        hops: tuple[Hop, ...],
        payload: bytes,
        tenant: int | None,
        decode: Any,
        return_info: bool,
        retries: int,
        budget: float | None,
        timeout: float | None,
    ) -> Any:
        if self._closed is not None and self.reconnect and not self._user_closed:
            await self._reconnect()
        if self._closed is not None:
            raise ConnectionClosedError(f"connection is closed ({self._closed.message})")
        if timeout is not None and timeout < 0:
            timeout = self.timeout
        budget_us = _budget_us(self.budget if budget is not None and budget < 0 else budget)
        rid = self._next_id
        self._next_id += 1
        header = RequestHeader.encode_chain(
            rid, hops, len(payload), self.tenant if tenant is None else tenant, budget_us=budget_us
        )
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = _Pending(fut, header + payload, decode, return_info, retries)
        try:
            try:
                self._conn.write(header + payload)
                await self._conn.drain()
            except OSError as e:  # the write side failed: the connection is gone
                self._shutdown(ConnectionClosedError(f"send failed: {e}"))
                raise ConnectionClosedError(f"send failed: {e}", request_id=rid) from None
            try:
                return await asyncio.wait_for(fut, timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(f"no response to request {rid} within {timeout} s") from None
        finally:
            # Answered, timed out or cancelled: either way the request is no longer ours to
            # wait for (a late answer is dropped as unmatched).
            self._pending.pop(rid, None)
            if not fut.done():
                fut.cancel()

    async def _reconnect(self) -> None:
        """Connect again after the connection was lost (one coroutine does it, the others
        wait for it); ConnectError when every attempt fails."""
        async with self._reconnect_lock:
            if self._closed is None or self._user_closed:
                return  # another call reconnected meanwhile
            self._conn.close()
            delay, most = self.reconnect_backoff
            for attempt in range(self.reconnect_attempts):
                try:
                    conn = await _open(*self.address, self.timeout, self.max_answer_bytes)
                    break
                except ConnectError:
                    if attempt + 1 == self.reconnect_attempts:
                        raise
                    await asyncio.sleep(self._rng.uniform(0.5, 1.0) * min(delay * 2.0**attempt, most))
            self._conn = conn
            self._closed = None
            self.reconnects += 1
            self._attach(conn)

    def _backoff(self, attempt: int) -> float:
        lo, hi = self.busy_backoff
        return min(self._rng.uniform(lo, hi) * (2.0**attempt), self.busy_backoff_max)

    def _resend(self, rid: int) -> None:
        p = self._pending.get(rid)
        if p is not None and self._closed is None and not p.future.done():
            self._conn.write(p.wire)

    def _attach(self, conn: Connection) -> None:
        conn.on_answer = self._on_answer
        conn.on_lost = self._on_lost
        if conn.reason is not None:  # lost before it was ours
            self._on_lost(conn, conn.reason)

    def _on_answer(self, conn: Connection, header: ResponseHeader, payload: bytearray) -> None:
        if conn is self._conn:
            self.last_response = header
            self._dispatch(header, payload)

    def _on_lost(self, conn: Connection, reason: ConnectionClosedError) -> None:
        if conn is self._conn:  # not one replaced by a reconnect
            self._shutdown(reason)

    def _dispatch(self, header: ResponseHeader, payload: bytearray) -> None:
        p = self._pending.get(header.request_id)
        if p is None or p.future.done():
            return  # abandoned (timed out or cancelled) or not ours
        if header.status == Status.BUSY and p.retries_left > 0 and p.decode is not None:
            p.retries_left -= 1
            delay = self._backoff(p.attempt)
            p.attempt += 1
            asyncio.get_running_loop().call_later(delay, self._resend, header.request_id)
            return
        try:
            if p.decode is None:
                value: Any = (header, bytes(payload))
            elif header.status != Status.OK:
                p.future.set_exception(error_for_response(header, payload))
                return
            else:
                result = p.decode(payload)
                value = (result, header) if p.return_info else result
        except Exception as e:  # a decoder failure belongs to this request only
            p.future.set_exception(e)
            return
        p.future.set_result(value)

    def _shutdown(self, reason: OffracError) -> None:
        if self._closed is None:
            self._closed = reason
        for rid, p in list(self._pending.items()):
            if not p.future.done():
                p.future.set_exception(ConnectionClosedError(reason.message, request_id=rid))
        self._pending.clear()


async def _open(host: str, port: int, timeout: float | None, max_answer_bytes: int) -> Connection:
    loop = asyncio.get_running_loop()
    try:
        _, conn = await asyncio.wait_for(loop.create_connection(Connection, host, port), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        raise ConnectError(f"cannot connect to {host}:{port}: {getattr(e, 'strerror', None) or e}") from e
    conn.max_answer_bytes = max_answer_bytes
    return conn
