"""Client behaviour against a scripted fake node (no node binary needed).

These pin down what the real node cannot easily be made to do on demand: out-of-order answers,
every error status, BUSY a given number of times, a connection dropped with requests outstanding.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from offrac import (
    HEADER_LEN,
    BadInputError,
    BusyError,
    Client,
    ConnectionClosedError,
    InternalError,
    MalformedError,
    OffracError,
    RequestHeader,
    RequestTimeoutError,
    ResponseHeader,
    ShuttingDownError,
    Status,
    TooLargeError,
    UnknownFunctionError,
    UnsupportedError,
    UnsupportedVersionError,
)
from offrac.client import DIRECT_READ_MIN

from conftest import Node


class FakeConn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()

    def _need(self, n: int) -> bool:
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    def read_request(self) -> tuple[RequestHeader, bytes] | None:
        if not self._need(HEADER_LEN):
            return None
        h = RequestHeader.decode(bytes(self.buf[:HEADER_LEN]))
        if not self._need(HEADER_LEN + h.payload_len):
            return None
        payload = bytes(self.buf[HEADER_LEN : HEADER_LEN + h.payload_len])
        del self.buf[: HEADER_LEN + h.payload_len]
        return h, payload

    def reply(self, req: RequestHeader, status: Status, payload: bytes = b"", **fields: int) -> None:
        h = ResponseHeader(
            status=status, request_id=req.request_id, payload_len=len(payload), tenant=req.tenant, **fields
        )
        self.sock.sendall(h.encode() + payload)


Handler = Callable[[FakeConn], None]


class FakeNode:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[tuple[RequestHeader, bytes]] = []
        self.errors: list[BaseException] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            self.handler(FakeConn(sock))
        except OSError:
            pass
        except BaseException as e:  # surfaced by the fixture
            self.errors.append(e)
        finally:
            sock.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def fake() -> Iterator[Callable[[Handler], FakeNode]]:
    nodes: list[FakeNode] = []

    def make(handler: Handler) -> FakeNode:
        n = FakeNode(handler)
        nodes.append(n)
        return n

    yield make
    for n in nodes:
        n.close()
        assert not n.errors, n.errors


def echo_handler(record: list[tuple[RequestHeader, bytes]] | None = None) -> Handler:
    def handle(conn: FakeConn) -> None:
        while (req := conn.read_request()) is not None:
            h, payload = req
            if record is not None:
                record.append(req)
            conn.reply(h, Status.OK, payload, reassembly_ns=11, queue_ns=22, exec_ns=33)

    return handle


def test_out_of_order_responses_match_by_id(fake: Callable[[Handler], FakeNode]) -> None:
    def reverse(conn: FakeConn) -> None:
        batch = []
        while (req := conn.read_request()) is not None:
            batch.append(req)
            if len(batch) == 5:
                for h, p in reversed(batch):
                    conn.reply(h, Status.OK, p)
                batch = []

    node = fake(reverse)
    with Client(node.address) as c:
        futs = [c.submit("echo", bytes([i]) * (i + 1)) for i in range(5)]
        assert len({f.request_id for f in futs}) == 5
        assert [f.result(5) for f in futs] == [bytes([i]) * (i + 1) for i in range(5)]
        assert c.outstanding == 0


def test_encoding_of_inputs_and_params(fake: Callable[[Handler], FakeNode]) -> None:
    seen: list[tuple[RequestHeader, bytes]] = []
    node = fake(echo_handler(seen))
    with Client(node.address, tenant=5) as c:
        out = c.call("topk", [3, -1, 2**31 - 1], k=2)
        h, p = seen[-1]
        assert h.current_hop.function == 1 and h.current_hop.param == 2 and h.tenant == 5
        assert p == struct.pack("<3i", 3, -1, 2**31 - 1)
        assert out.dtype == np.int32 and out.tolist() == [3, -1, 2**31 - 1]  # echoed back

        c.call("topk", np.array([1.0, 2.0]), k=1)  # integral floats are fine
        assert seen[-1][1] == struct.pack("<2i", 1, 2)

        x = np.linspace(0, 1, 6, dtype=np.float64).reshape(2, 3)
        y = c.call("logit", x, tenant=9)
        assert seen[-1][0].tenant == 9
        assert seen[-1][1] == x.astype("<f4").tobytes()
        assert y.dtype == np.float32 and y.shape == (2, 3)

        a = np.arange(9, dtype=np.float32).reshape(3, 3)
        b = np.eye(3, dtype=np.float32)
        # the fake echoes 18 floats back, which is not an n x n result
        with pytest.raises(OffracError, match="n x n"):
            c.call("matmul", (a, b))
        h, p = seen[-1]
        assert h.current_hop.function == 4 and h.current_hop.param == 3
        assert p == a.tobytes() + b.tobytes()


def test_matmul_output_decode_and_raw_params(fake: Callable[[Handler], FakeNode]) -> None:
    seen: list[tuple[RequestHeader, bytes]] = []
    node = fake(echo_handler(seen))
    with Client(node.address) as c:
        four = np.arange(4, dtype=np.float32)
        m = c.call("matmul", four, n=0)  # pre-concatenated input; echo returns 4 floats -> 2 x 2
        assert m.shape == (2, 2) and m.dtype == np.float32
        assert seen[-1][0].current_hop.param == 0
        with pytest.raises(OffracError, match="n x n"):
            c.call("matmul", np.arange(3, dtype=np.float32))
        assert c.call("spin", b"abc", us=250) == b"abc"
        assert seen[-1][0].current_hop == seen[-1][0].hops[0] and seen[-1][0].hops[0].param == 250
        assert c.call(5, memoryview(b"xy"), param=7) == b"xy"
        assert seen[-1][0].hops[0].param == 7
        assert c.call("echo", np.array([1, 2], dtype="<u2")) == b"\x01\x00\x02\x00"


def test_raw_payloads_are_sent_uncopied_as_their_bytes(fake: Callable[[Handler], FakeNode]) -> None:
    """``call_raw`` sends a buffer's bytes without copying them (a float array's view counts
    bytes, not items), small and large, contiguous or not."""
    seen: list[tuple[RequestHeader, bytes]] = []
    node = fake(echo_handler(seen))
    with Client(node.address) as c:
        for n in (3, 50_000):  # joined behind the header / sent from its own buffer
            a = np.arange(n, dtype=np.float32)
            buf = bytearray(a.tobytes())
            for payload in (memoryview(a), buf, memoryview(a)[::2]):
                want = bytes(memoryview(payload).tobytes())
                h, p = c.call_raw(5, payload)
                assert h.payload_len == len(want) and p == want
                assert seen[-1][1] == want


def test_input_validation_raises_before_sending(fake: Callable[[Handler], FakeNode]) -> None:
    seen: list[tuple[RequestHeader, bytes]] = []
    node = fake(echo_handler(seen))
    with Client(node.address) as c:
        with pytest.raises(ValueError, match="fractional"):
            c.call("topk", [1.5, 2.0], k=1)
        with pytest.raises(ValueError, match="non-finite"):
            c.call("topk", [np.nan], k=1)
        with pytest.raises(ValueError, match="int32 range"):
            c.call("topk", np.array([2**40]), k=1)
        with pytest.raises(TypeError, match="integer array"):
            c.call("topk", ["a", "b"], k=1)
        with pytest.raises(TypeError, match="needs k="):
            c.call("topk", [1, 2])
        with pytest.raises(TypeError, match="numeric"):
            c.call("logit", np.array([1 + 2j]))
        with pytest.raises(TypeError, match="unexpected keyword"):
            c.call("logit", [0.5], k=3)
        with pytest.raises(ValueError, match=r"us=-1 outside 0\.\.="):
            c.call("spin", b"", us=-1)
        with pytest.raises(ValueError, match="u64"):
            c.call("spin", b"", param=-1)
        with pytest.raises(ValueError, match=r"salt=2147483648 outside -2147483648..=2147483647"):
            c.call("sigridhash", [1], max_value=10, salt=2**31)
        with pytest.raises(TypeError, match="sigridhash needs max_value="):
            c.call("sigridhash", [1], salt=1)
        with pytest.raises(ValueError, match="uint32 range"):
            c.call("mapid", [-1])
        with pytest.raises(TypeError, match="either param= or the named"):
            c.call("topk", [1], k=1, param=1)
        with pytest.raises(ValueError, match="n x n"):
            c.call("matmul", (np.zeros((2, 2)), np.zeros((3, 3))))
        with pytest.raises(ValueError, match="does not match"):
            c.call("matmul", (np.zeros((2, 2)), np.zeros((2, 2))), n=3)
        with pytest.raises(ValueError, match="unknown function"):
            c.call("nope", b"")
        with pytest.raises(TypeError):
            c.call("echo", "a string")
        assert seen == []


def test_return_info_and_last_response(fake: Callable[[Handler], FakeNode]) -> None:
    node = fake(echo_handler())
    with Client(node.address) as c:
        out, info = c.call("echo", b"hi", return_info=True, tenant=3)
        assert out == b"hi"
        assert isinstance(info, ResponseHeader)
        assert (info.status, info.tenant, info.reassembly_ns, info.queue_ns, info.exec_ns) == (
            Status.OK,
            3,
            11,
            22,
            33,
        )
        assert info.node_ns == 66
        assert c.last_response == info
        h, payload = c.call_raw(0, b"raw", 0)
        assert h.status == Status.OK and payload == b"raw"


ERRORS: list[tuple[Status, type[OffracError]]] = [
    (Status.BUSY, BusyError),
    (Status.UNKNOWN_FUNCTION, UnknownFunctionError),
    (Status.TOO_LARGE, TooLargeError),
    (Status.MALFORMED, MalformedError),
    (Status.BAD_INPUT, BadInputError),
    (Status.INTERNAL, InternalError),
    (Status.UNSUPPORTED_VERSION, UnsupportedVersionError),
    (Status.TIMEOUT, RequestTimeoutError),
    (Status.SHUTTING_DOWN, ShuttingDownError),
    (Status.UNSUPPORTED, UnsupportedError),
]


def test_every_status_raises_its_exception(fake: Callable[[Handler], FakeNode]) -> None:
    def by_param(conn: FakeConn) -> None:  # the status to answer is the spin parameter
        while (req := conn.read_request()) is not None:
            h, _ = req
            st = Status(h.current_hop.param)
            conn.reply(h, st, f"message for {st.name} ✓".encode(), detail=1000 + int(st))

    node = fake(by_param)
    with Client(node.address, busy_retries=0) as c:
        for status, cls in ERRORS:
            fut = c.submit("spin", b"", us=int(status))
            with pytest.raises(cls) as info:
                fut.result(5)
            e = info.value
            assert isinstance(e, OffracError) and not isinstance(e, ConnectionClosedError)
            assert e.status == status
            assert e.request_id == fut.request_id
            assert e.message == f"message for {status.name} ✓"
            assert e.detail == 1000 + int(status)
            assert e.header is not None and e.header.status == status
            assert status.name in str(e)
        # raw mode returns the error instead of raising
        h, payload = c.call_raw(5, b"", int(Status.BAD_INPUT))
        assert h.status == Status.BAD_INPUT and payload.startswith(b"message")
    assert not issubclass(RequestTimeoutError, TimeoutError)


def busy_then_echo(times: int, attempts: dict[int, int]) -> Handler:
    def handle(conn: FakeConn) -> None:
        while (req := conn.read_request()) is not None:
            h, payload = req
            n = attempts.get(h.request_id, 0)
            attempts[h.request_id] = n + 1
            if n < times:
                conn.reply(h, Status.BUSY)
            else:
                conn.reply(h, Status.OK, payload)

    return handle


def test_busy_is_retried_with_backoff(fake: Callable[[Handler], FakeNode]) -> None:
    attempts: dict[int, int] = {}
    node = fake(busy_then_echo(3, attempts))
    with Client(node.address, busy_retries=5, busy_backoff=(0.01, 0.012)) as c:
        t0 = time.monotonic()
        assert c.call("echo", b"payload") == b"payload"
        elapsed = time.monotonic() - t0
        assert list(attempts.values()) == [4]
        assert c.busy_retries_done == 3
        # back-off doubles: at least 10 + 20 + 40 ms
        assert elapsed >= 0.07


def test_busy_exhausted_raises(fake: Callable[[Handler], FakeNode]) -> None:
    attempts: dict[int, int] = {}
    node = fake(busy_then_echo(100, attempts))
    with Client(node.address, busy_retries=2) as c:
        fut = c.submit("echo", b"x")
        with pytest.raises(BusyError) as info:
            fut.result(5)
        assert info.value.request_id == fut.request_id
        assert attempts == {fut.request_id: 3}
    attempts.clear()
    with Client(node.address, busy_retries=0) as c:
        with pytest.raises(BusyError):
            c.call("echo", b"x")
        assert list(attempts.values()) == [1]
        h, _ = c.call_raw(0, b"y")  # raw calls never retry
        assert h.status == Status.BUSY


def test_default_backoff_is_paper_range() -> None:
    c = Client.__new__(Client)
    c.busy_backoff = (80e-6, 120e-6)
    c.busy_backoff_max = 0.05
    import random

    c._rng = random.Random(1)
    for attempt in range(4):
        for _ in range(50):
            d = c._backoff(attempt)
            assert 80e-6 * 2**attempt <= d <= 120e-6 * 2**attempt
    assert c._backoff(30) == 0.05


def test_connection_close_fails_outstanding(fake: Callable[[Handler], FakeNode]) -> None:
    def answer_one_then_close(conn: FakeConn) -> None:
        first = conn.read_request()
        second = conn.read_request()
        assert first is not None and second is not None
        conn.reply(first[0], Status.OK, first[1])
        conn.sock.shutdown(socket.SHUT_RDWR)

    node = fake(answer_one_then_close)
    c = Client(node.address)
    try:
        f1 = c.submit("echo", b"one")
        f2 = c.submit("echo", b"two")
        assert f1.result(5) == b"one"
        with pytest.raises(ConnectionClosedError) as info:
            f2.result(5)
        assert info.value.request_id == f2.request_id
        deadline = time.monotonic() + 5
        while not c.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        with pytest.raises(ConnectionClosedError):
            c.submit("echo", b"three")
    finally:
        c.close()


def test_unmatched_error_explains_close(fake: Callable[[Handler], FakeNode]) -> None:
    def reject_stream(conn: FakeConn) -> None:
        req = conn.read_request()
        assert req is not None
        h = ResponseHeader(Status.MALFORMED, request_id=0, payload_len=9)
        conn.sock.sendall(h.encode() + b"bad magic")

    node = fake(reject_stream)
    with Client(node.address) as c, pytest.raises(ConnectionClosedError, match="MALFORMED"):
        c.call("echo", b"x")


def test_garbage_response_closes(fake: Callable[[Handler], FakeNode]) -> None:
    def garbage(conn: FakeConn) -> None:
        assert conn.read_request() is not None
        conn.sock.sendall(b"\xff" * HEADER_LEN)
        time.sleep(0.5)

    node = fake(garbage)
    with Client(node.address) as c, pytest.raises(ConnectionClosedError, match="protocol error"):
        c.call("echo", b"x")


_GARBLED = r"4294967280 bytes, over .*max_answer_bytes \(1073741824\)"


def test_a_garbled_length_closes_instead_of_allocating(fake: Callable[[Handler], FakeNode]) -> None:
    """A header with its magic intact but a 4 GiB length (a garbled stream): the client closes
    the connection at once, failing every outstanding call with a message naming
    max_answer_bytes; it allocates nothing of that size and does not wait for bytes that will
    never come."""

    def garbled(conn: FakeConn) -> None:
        first, second = conn.read_request(), conn.read_request()
        assert first is not None and second is not None
        h = ResponseHeader(Status.OK, request_id=second[0].request_id, payload_len=0xFFFF_FFF0)
        conn.sock.sendall(h.encode() + b"\0" * 1000)
        time.sleep(1.0)

    node = fake(garbled)
    tracemalloc.start()
    try:
        with Client(node.address, timeout=5.0) as c:
            t0 = time.monotonic()
            waiting = c.submit("echo", b"first")
            with pytest.raises(ConnectionClosedError, match=_GARBLED):
                c.call("echo", b"second")
            with pytest.raises(ConnectionClosedError, match="max_answer_bytes"):
                waiting.result(1.0)
            assert time.monotonic() - t0 < 2.0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


def test_max_answer_bytes_bounds_what_a_real_node_may_answer(node: Node) -> None:
    """An answer at the limit is taken; one byte over closes the connection, saying why; a
    reconnecting client goes on; an ``out=`` array is the caller's memory and is read into
    whatever its size; bad limits are refused."""
    limit = 1 << 17
    with Client(node.address, max_answer_bytes=limit, reconnect=True) as c:
        assert c.call("echo", bytes(limit)) == bytes(limit)
        with pytest.raises(ConnectionClosedError, match=f"{limit + 1} bytes, over .*max_answer_bytes"):
            c.call("echo", bytes(limit + 1))
        assert c.call("echo", b"again") == b"again"
        assert c.reconnects == 1
        n = limit  # floats: 4 * limit bytes, over the limit
        out = np.empty(n, dtype=np.float32)
        got = c.call("minmax", np.arange(n, dtype=np.float32), out=out)
        assert got is out and out[0] == 0.0 and out[-1] == 1.0
    for bad in (0, DIRECT_READ_MIN - 1, True, 1.5):
        with pytest.raises(ValueError, match="max_answer_bytes"):
            Client(node.address, max_answer_bytes=bad)  # type: ignore[arg-type]


def test_timeout_and_close_with_outstanding(fake: Callable[[Handler], FakeNode]) -> None:
    def silent(conn: FakeConn) -> None:
        while conn.read_request() is not None:
            pass

    node = fake(silent)
    c = Client(node.address, timeout=0.2)
    with pytest.raises(TimeoutError, match="no response"):
        c.call("echo", b"x")
    assert c.outstanding == 0
    fut = c.submit("echo", b"y")
    c.close()
    with pytest.raises(ConnectionClosedError, match="client closed"):
        fut.result(5)
    assert c.closed
    c.close()  # idempotent


def test_many_threads_share_a_client(fake: Callable[[Handler], FakeNode]) -> None:
    node = fake(echo_handler())
    results: dict[int, list[bytes]] = {}

    with Client(node.address) as c:

        def worker(t: int) -> None:
            futs = [c.submit("echo", f"{t}:{i}".encode()) for i in range(200)]
            results[t] = [f.result(10) for f in futs]

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    for t in range(8):
        assert results[t] == [f"{t}:{i}".encode() for i in range(200)]


def test_parse_address() -> None:
    from offrac import parse_address

    assert parse_address("127.0.0.1:80") == ("127.0.0.1", 80)
    assert parse_address("[::1]:9") == ("::1", 9)
    assert parse_address(("h", 1)) == ("h", 1)
    for bad in ("nohost", ":80", "h:", "h:x"):
        with pytest.raises(ValueError):
            parse_address(bad)


def test_wait_listening_returns_once_a_listener_is_up_and_names_the_port_when_none_comes() -> None:
    from offrac import ConnectError, wait_listening

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    # Nothing there: a ConnectError naming the address, the refusal as its cause.
    t0 = time.monotonic()
    with pytest.raises(ConnectError, match=f"127.0.0.1:{port}") as e:
        wait_listening(("127.0.0.1", port), timeout=0.3)
    assert time.monotonic() - t0 >= 0.3
    assert isinstance(e.value.__cause__, OSError)
    # A listener that starts later: the wait returns once it accepts.
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)

    def listen_later() -> None:
        time.sleep(0.2)
        server.bind(("127.0.0.1", port))
        server.listen()

    t = threading.Thread(target=listen_later)
    t.start()
    try:
        wait_listening(f"127.0.0.1:{port}", timeout=10)
        t.join()
    finally:
        server.close()
