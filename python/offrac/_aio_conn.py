"""The asyncio client's connection: a :class:`asyncio.BufferedProtocol` that cuts answers out
of the bytes the transport hands it, and the write side's flow control.

Headers and answers below ``DIRECT_READ_MIN`` bytes are read into one reusable buffer and
copied out once. An answer of ``DIRECT_READ_MIN`` bytes or more gets a bytearray of its own as
soon as its header is parsed; ``get_buffer`` then hands the transport the part of it still to
come, so the kernel's ``recv`` writes the payload straight into the bytes the decoder gets
(only what arrived in the same read as its header is copied).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
from collections.abc import Callable
from typing import Final

from .client import DEFAULT_MAX_ANSWER_BYTES, DIRECT_READ_MIN, answer_too_large
from .errors import ConnectionClosedError
from .protocol import HEADER_LEN, HeaderError, HopTime, ResponseHeader

#: Bytes of the reusable read buffer. What stays unread in it between reads is one incomplete
#: frame kept there (under ``DIRECT_READ_MIN + 128`` bytes), so after moving that to the front
#: at least ``2 * DIRECT_READ_MIN`` bytes are always free for the next read.
READ_BUFFER: Final = 4 * DIRECT_READ_MIN
_HOP_TIMES_LEN: Final = 64

AnswerSink = Callable[["Connection", ResponseHeader, bytearray], None]
LostSink = Callable[["Connection", ConnectionClosedError], None]


class Connection(asyncio.BufferedProtocol):
    """One connection to a node. ``on_answer(conn, header, payload)`` gets every answer in
    order; ``on_lost(conn, reason)`` once, when the connection ends (``reason`` also stays in
    :attr:`reason`)."""

    def __init__(self) -> None:
        self.on_answer: AnswerSink = _ignore_answer
        self.on_lost: LostSink = _ignore_lost
        #: Why the connection ended (None while it is up).
        self.reason: ConnectionClosedError | None = None
        #: Answers whose payload was read into their own bytearray.
        self.direct_reads: int = 0
        #: A header announcing a longer payload closes the connection instead of allocating.
        self.max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES
        self._buf = bytearray(READ_BUFFER)
        self._start = 0  # first unread byte of _buf
        self._end = 0  # end of what the transport wrote into _buf
        # The large answer being read into its own bytes (header None: none is).
        self._large: ResponseHeader | None = None
        self._payload = bytearray()
        self._have = 0
        self._transport: asyncio.Transport | None = None
        self._failed: ConnectionClosedError | None = None
        self._paused = False
        self._drain_waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- the read side -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._large is not None:
            # Exactly the rest of this answer: the next frame's bytes never land in it.
            return memoryview(self._payload)[self._have :]
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._buf) - self._end < DIRECT_READ_MIN:
            unread = self._end - self._start
            self._buf[:unread] = self._buf[self._start : self._end]
            self._start, self._end = 0, unread
        return memoryview(self._buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._large is not None:
            self._have += nbytes
            if self._have == len(self._payload):
                header, payload = self._large, self._payload
                self._large, self._payload, self._have = None, bytearray(), 0
                self.direct_reads += 1
                self.on_answer(self, header, payload)
            return
        self._end += nbytes
        self._parse()

    def _parse(self) -> None:
        """Hand on every whole answer in the buffer; begin reading a large one into its own
        bytes once its header (and hop times) are here."""
        buf = self._buf
        while self._failed is None and self._end - self._start >= HEADER_LEN:
            try:
                header = ResponseHeader.decode_from(buf, self._start)
            except HeaderError as e:
                self._fail(ConnectionClosedError(f"protocol error from the node: {e}"))
                return
            extra = _HOP_TIMES_LEN if header.has_hop_times else 0
            n = header.payload_len
            if n > self.max_answer_bytes:
                self._fail(ConnectionClosedError(answer_too_large(n, self.max_answer_bytes)))
                return
            avail = self._end - self._start - HEADER_LEN - extra
            if avail < 0 or (n < DIRECT_READ_MIN and avail < n):
                return  # the rest comes with a later read
            pos = self._start + HEADER_LEN
            if extra:
                block = HopTime.decode_block(buf[pos : pos + extra])
                header = dataclasses.replace(header, hop_times=block)
                pos += extra
            if n < DIRECT_READ_MIN:
                self._start = pos + n
                self.on_answer(self, header, buf[pos : pos + n] if n else bytearray())
                continue
            have = min(avail, n)
            payload = bytearray(n)
            payload[:have] = buf[pos : pos + have]
            self._start = pos + have
            if have == n:
                self.direct_reads += 1
                self.on_answer(self, header, payload)
                continue
            self._large, self._payload, self._have = header, payload, have
            return

    def eof_received(self) -> bool:
        return False  # the transport closes; connection_lost tells why

    def connection_lost(self, exc: Exception | None) -> None:
        if self._failed is not None:
            reason = self._failed
        elif exc is not None:
            reason = ConnectionClosedError(f"connection error: {exc}")
        elif self._large is not None or self._end > self._start:
            reason = ConnectionClosedError("the node closed the connection mid-response")
        else:
            reason = ConnectionClosedError("the node closed the connection")
        self.reason = reason
        self._large, self._payload = None, bytearray()
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(ConnectionResetError("Connection lost"))
        if not self._closed.done():
            self._closed.set_result(None)
        self.on_lost(self, reason)

    def _fail(self, reason: ConnectionClosedError) -> None:
        self._failed = reason
        if self._transport is not None:
            self._transport.abort()

    # -- the write side ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._transport is None or self.reason is not None:
            raise ConnectionResetError("Connection lost")
        self._transport.write(data)

    async def drain(self) -> None:
        """Wait until the transport takes more (its buffer fell below the low-water mark)."""
        if self.reason is not None:
            raise ConnectionResetError("Connection lost")
        if not self._paused:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        try:
            await waiter
        finally:
            self._drain_waiters.remove(waiter)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)


def _ignore_answer(conn: Connection, header: ResponseHeader, payload: bytearray) -> None:
    pass


def _ignore_lost(conn: Connection, reason: ConnectionClosedError) -> None:
    pass
