"""How the asyncio client reads answers: a large answer is read by the kernel straight into the
bytearray the decoder gets; answers cut at any byte still decode; the node closing mid-answer,
or sending garbage, fails the calls with the messages it always had; a writer waits for drain."""

from __future__ import annotations

import asyncio
import random
import time
import tracemalloc
from collections.abc import Awaitable, Callable

import numpy as np
import pytest

from offrac import ConnectionClosedError, aio
from offrac._aio_conn import READ_BUFFER, Connection
from offrac.buffers import keep, load
from offrac.client import DIRECT_READ_MIN
from offrac.protocol import HEADER_LEN, RESP_FLAG_HOP_TIMES, HopTime, ResponseHeader, Status

from conftest import Node


def run(coro: Awaitable[object]) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_a_large_answer_is_read_into_the_bytes_the_decoder_gets(node: Node) -> None:
    """The payload the client dispatches is the very bytearray whose views the transport was
    handed to read into; all but what came with its header landed there directly, and the
    reusable read buffer never grew."""
    rng = np.random.default_rng(3)
    big = rng.integers(0, 255, 1_500_000, dtype=np.uint8).tobytes()

    async def main() -> None:
        async with await aio.Client.connect(node.address) as c:
            conn = c._conn
            handed: list[memoryview] = []
            landed: dict[int, int] = {}
            dispatched: list[bytearray] = []
            get_buffer, buffer_updated, dispatch = conn.get_buffer, conn.buffer_updated, c._dispatch

            def spy_get(hint: int) -> memoryview:
                handed.append(get_buffer(hint))
                return handed[-1]

            def spy_updated(n: int) -> None:
                landed[id(handed[-1].obj)] = landed.get(id(handed[-1].obj), 0) + n
                buffer_updated(n)

            def spy_dispatch(header: ResponseHeader, payload: bytearray) -> None:
                dispatched.append(payload)
                dispatch(header, payload)

            conn.get_buffer = spy_get  # type: ignore[method-assign]
            conn.buffer_updated = spy_updated  # type: ignore[method-assign]
            c._dispatch = spy_dispatch  # type: ignore[method-assign]
            assert await c.call("echo", big) == big
            (payload,) = dispatched
            assert payload == big
            assert landed.get(id(payload), 0) >= len(big) - READ_BUFFER, landed
            assert conn.direct_reads == 1
            assert len(conn._buf) == READ_BUFFER
            # A kept buffer as the answer, and a numpy result that is a view of its bytes.
            await c.call_chain([keep(9)], big)
            assert await c.call_chain([load(9)], b"") == big
            got = await c.call("minmax", np.arange(1 << 18, dtype=np.float32))
            assert got.shape == (1 << 18,) and got[0] == 0.0 and got[-1] == 1.0
            assert np.shares_memory(got, np.frombuffer(dispatched[-1], dtype=np.uint8))
            assert conn.direct_reads == 3
            assert len(conn._buf) == READ_BUFFER

    run(main())


def test_many_calls_of_mixed_sizes_in_flight(node: Node) -> None:
    rng = np.random.default_rng(4)
    sizes = [DIRECT_READ_MIN - 1, DIRECT_READ_MIN, 0, 10, 1_000_000, 3 * READ_BUFFER, 7, 200_000]
    payloads = [rng.integers(0, 255, n, dtype=np.uint8).tobytes() for n in sizes * 4]

    async def main() -> None:
        async with await aio.Client.connect(node.address) as c:
            for _ in range(3):
                order = list(range(len(payloads)))
                random.Random(5).shuffle(order)
                got = await asyncio.gather(*(c.call("echo", payloads[i]) for i in order))
                assert got == [payloads[i] for i in order]
            assert c.outstanding == 0
            assert c._conn.direct_reads == 3 * 4 * sum(n >= DIRECT_READ_MIN for n in sizes)

    run(main())


# -- the connection alone, fed as a transport would ------------------------------------------


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def _frame(rid: int, payload: bytes, hop_times: bytes | None = None) -> bytes:
    header = bytearray(ResponseHeader(Status.OK, request_id=rid, payload_len=len(payload)).encode())
    if hop_times is not None:
        header[3] |= RESP_FLAG_HOP_TIMES
        return bytes(header) + hop_times + payload
    return bytes(header) + payload


def _hop_block(seed: int) -> bytes:
    return bytes((seed + i) % 251 for i in range(64))


_FRAMES = [
    (1, b"small", None),
    (2, b"", None),
    (3, b"timed", _hop_block(1)),
    (4, bytes(range(256)) * (DIRECT_READ_MIN // 256) + b"xyz", None),  # large, after small
    (5, b"q" * (DIRECT_READ_MIN - 1), _hop_block(2)),
    (6, bytes(range(255, -1, -1)) * (DIRECT_READ_MIN // 128), _hop_block(3)),  # large, timed
    (7, b"z", None),
    (8, b"w" * DIRECT_READ_MIN, None),
]
_STREAM = b"".join(_frame(*f) for f in _FRAMES)


def _feed(conn: Connection, data: bytes, cuts: list[int]) -> None:
    """Hand ``data`` to ``conn`` as a transport would, each read ending at the next cut (or
    earlier, where the buffer it was handed ends)."""
    pos = 0
    for end in [*cuts, len(data)]:
        while pos < end:
            view = conn.get_buffer(-1)
            n = min(len(view), end - pos)
            view[:n] = data[pos : pos + n]
            conn.buffer_updated(n)
            pos += n


def _connection() -> tuple[Connection, list[tuple[ResponseHeader, bytearray]]]:
    conn = Connection()
    got: list[tuple[ResponseHeader, bytearray]] = []
    conn.on_answer = lambda _c, header, payload: got.append((header, payload))
    conn.connection_made(_Transport())
    return conn, got


def _check(got: list[tuple[ResponseHeader, bytearray]]) -> None:
    assert [h.request_id for h, _ in got] == [f[0] for f in _FRAMES]
    for (header, payload), (_, want, hops) in zip(got, _FRAMES, strict=True):
        assert isinstance(payload, bytearray) and payload == want
        assert header.payload_len == len(want) and not header.has_hop_times
        assert header.hop_times == (None if hops is None else HopTime.decode_block(hops))


def _awkward_cuts() -> list[int]:
    """Every byte within a header and hop-times block of each frame's start and of each
    large payload's end."""
    cuts: set[int] = set()
    pos = 0
    for f in _FRAMES:
        for d in range(-3, HEADER_LEN + 64 + 3):
            cuts.add(pos + d)
        pos += len(_frame(*f))
    return sorted(c for c in cuts if 0 < c < len(_STREAM))


def test_answers_cut_at_every_awkward_byte_still_decode() -> None:
    async def main() -> None:
        for cut in _awkward_cuts():
            conn, got = _connection()
            _feed(conn, _STREAM, [cut])
            _check(got)
            assert conn.direct_reads == 3

    run(main())


def test_answers_in_reads_of_random_sizes_still_decode() -> None:
    async def main() -> None:
        rng = random.Random(7)
        for _ in range(200):
            cuts = sorted(rng.sample(range(1, len(_STREAM)), rng.randint(1, 40)))
            conn, got = _connection()
            _feed(conn, _STREAM, cuts)
            _check(got)

    run(main())


@pytest.mark.parametrize(
    ("sent", "message"),
    [
        (0, "the node closed the connection"),
        (HEADER_LEN - 1, "the node closed the connection mid-response"),
        (HEADER_LEN + 2, "the node closed the connection mid-response"),
        (HEADER_LEN + DIRECT_READ_MIN, "the node closed the connection mid-response"),
    ],
)
def test_a_connection_ending_mid_answer_says_so(sent: int, message: str) -> None:
    async def main() -> None:
        conn, got = _connection()
        lost: list[ConnectionClosedError] = []
        conn.on_lost = lambda _c, reason: lost.append(reason)
        _feed(conn, _frame(1, b"a") + _frame(2, b"b" * 2 * DIRECT_READ_MIN)[:sent], [])
        conn.connection_lost(None)
        assert [h.request_id for h, _ in got] == [1]
        assert [r.message for r in lost] == [message]

    run(main())


# -- a socket server standing in for a node ------------------------------------------------


async def _with_server(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    client: Callable[[aio.Client], Awaitable[None]],
) -> None:
    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        c = await aio.Client.connect(f"127.0.0.1:{port}")
        try:
            await client(c)
        finally:
            await c.close()
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.parametrize("size", [100, 3 * DIRECT_READ_MIN])
def test_the_node_closing_mid_answer_fails_the_call(size: int) -> None:
    async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read(1 << 16)
        w.write(_frame(1, bytes(size))[: HEADER_LEN + size // 2])
        await w.drain()
        w.close()

    async def client(c: aio.Client) -> None:
        with pytest.raises(ConnectionClosedError, match="the node closed the connection mid-response"):
            await c.call("echo", b"x")
        with pytest.raises(ConnectionClosedError, match="connection is closed"):
            await c.call("echo", b"y")

    run(_with_server(answer, client))


def test_the_node_closing_between_answers_and_garbage_are_told_apart() -> None:
    async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read(1 << 16)
        w.write(_frame(1, b"x"))
        await w.drain()
        await r.read(1 << 16)
        w.close()

    async def clean(c: aio.Client) -> None:
        assert await c.call("echo", b"x") == b"x"
        with pytest.raises(ConnectionClosedError, match=r"the node closed the connection$"):
            await c.call("echo", b"y")

    run(_with_server(answer, clean))

    async def garbage(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.read(1 << 16)
        w.write(b"\xff" * HEADER_LEN)
        await w.drain()
        await r.read(1 << 16)

    async def bad(c: aio.Client) -> None:
        with pytest.raises(ConnectionClosedError, match=r"protocol error from the node: .*magic"):
            await c.call("echo", b"x")

    run(_with_server(garbage, bad))


_GARBLED = r"4294967280 bytes, over .*max_answer_bytes \(1073741824\)"


def test_a_garbled_length_closes_instead_of_allocating() -> None:
    """A header with its magic intact but a 4 GiB length: the connection closes at once, both
    outstanding calls fail naming max_answer_bytes, nothing of that size is allocated."""

    async def garbled(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await r.readexactly(2 * (HEADER_LEN + 1))
        header = ResponseHeader(Status.OK, request_id=2, payload_len=0xFFFF_FFF0).encode()
        w.write(header + bytes(1000))
        await w.drain()
        await asyncio.sleep(1.0)

    async def client(c: aio.Client) -> None:
        t0 = time.monotonic()
        calls = [asyncio.ensure_future(c.call("echo", b"a")), asyncio.ensure_future(c.call("echo", b"b"))]
        for call in calls:
            with pytest.raises(ConnectionClosedError, match=_GARBLED):
                await call
        assert time.monotonic() - t0 < 0.9

    tracemalloc.start()
    try:
        run(_with_server(garbled, client))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


def test_max_answer_bytes_bounds_what_a_real_node_may_answer(node: Node) -> None:
    limit = 1 << 17

    async def main() -> None:
        async with await aio.Client.connect(node.address, max_answer_bytes=limit, reconnect=True) as c:
            assert await c.call("echo", bytes(limit)) == bytes(limit)
            with pytest.raises(ConnectionClosedError, match=f"{limit + 1} bytes, over .*max_answer_bytes"):
                await c.call("echo", bytes(limit + 1))
            assert await c.call("echo", b"again") == b"again"
            assert c.reconnects == 1
            assert c._conn.max_answer_bytes == limit  # the new connection keeps the limit
        for bad in (0, DIRECT_READ_MIN - 1, True):
            with pytest.raises(ValueError, match="max_answer_bytes"):
                await aio.Client.connect(node.address, max_answer_bytes=bad)

    run(main())


def test_a_writer_waits_for_drain_and_still_gets_its_answer() -> None:
    """A request larger than the socket buffers, to a node that does not read for a while:
    the transport pauses writing, the call's drain returns only once the node reads, and the
    call is answered."""
    size = 32 << 20
    paused: list[bool] = []
    drained_while_reading: list[bool] = []
    reading = asyncio.Event()

    async def answer(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.3)
        reading.set()
        await r.readexactly(HEADER_LEN + size)
        w.write(_frame(1, b"done"))
        await w.drain()
        await r.read(1)

    async def client(c: aio.Client) -> None:
        pause, drain = c._conn.pause_writing, c._conn.drain

        def spy_pause() -> None:
            paused.append(True)
            pause()

        async def spy_drain() -> None:
            await drain()
            drained_while_reading.append(reading.is_set())

        c._conn.pause_writing = spy_pause  # type: ignore[method-assign]
        c._conn.drain = spy_drain  # type: ignore[method-assign]
        _, payload = await c.call_raw(1, bytes(size))
        assert payload == b"done"
        assert paused and drained_while_reading == [True]

    run(_with_server(answer, client))
