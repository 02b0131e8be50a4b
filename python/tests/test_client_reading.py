"""How the client reads answers, on a real node: a synchronous call reads its own answer on
its own thread (no hand-off to the reader thread); futures, concurrent callers, timeouts and
large answers still get exactly their own answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from offrac import Client, ConnectionClosedError, Step
from offrac.client import DIRECT_READ_MIN

from conftest import Node


def test_a_synchronous_call_reads_its_answer_on_its_own_thread(node: Node) -> None:
    with node.client() as c:
        seen: list[str] = []
        dispatch = c._dispatch

        def spy(*frame: object) -> None:
            seen.append(threading.current_thread().name)
            dispatch(*frame)  # type: ignore[arg-type]

        c._dispatch = spy  # type: ignore[method-assign]
        for i in range(50):
            assert c.call("echo", b"x%d" % i) == b"x%d" % i
        assert seen == [threading.current_thread().name] * 50
        # A future nobody waits on in call() is read by the reader thread.
        assert c.submit("echo", b"f").result(timeout=5) == b"f"
        assert seen[-1].startswith("offrac-reader")


def test_callers_and_futures_on_one_client_each_get_their_own_answer(node: Node) -> None:
    with node.client() as c:
        errors: list[BaseException] = []
        got: dict[int, bytes] = {}
        done = threading.Event()
        lock = threading.Lock()

        def sync_caller(tag: int) -> None:
            try:
                for i in range(200):
                    msg = b"%d-%d" % (tag, i)
                    assert c.call("echo", msg) == msg
            except BaseException as e:
                errors.append(e)

        def on_done(i: int) -> object:
            def cb(f: object) -> None:
                with lock:
                    got[i] = f.result()  # type: ignore[attr-defined]
                    if len(got) == 300:
                        done.set()

            return cb

        threads = [threading.Thread(target=sync_caller, args=(t,)) for t in range(3)]
        for t in threads:
            t.start()
        for i in range(300):
            c.submit("echo", b"cb-%d" % i).add_done_callback(on_done(i))
            if i % 50 == 0:
                time.sleep(0.001)
        for t in threads:
            t.join(timeout=30)
        assert done.wait(timeout=30), f"{len(got)} of 300 callbacks ran"
        assert not errors, errors
        assert got == {i: b"cb-%d" % i for i in range(300)}
        assert c.outstanding == 0


def test_a_call_that_times_out_leaves_the_stream_readable(node: Node) -> None:
    with node.client() as c:
        with pytest.raises(TimeoutError):
            c.call("spin", b"late", us=300_000, timeout=0.05)
        # The late answer arrives while this call reads: it is not mistaken for ours.
        assert c.call("echo", b"next", timeout=5) == b"next"
        time.sleep(0.3)
        assert c.call("topk", np.arange(10, dtype=np.int32), k=3).tolist() == [9, 8, 7]


def test_large_answers_are_read_into_their_own_bytes(node: Node) -> None:
    """An answer of ``DIRECT_READ_MIN`` bytes or more goes from the socket into the payload
    the caller gets, not through the read buffer, which stays near its first size; sizes on both
    sides of the threshold in flight at once come back whole, in the calling thread and the
    reader thread, with and without a deadline."""
    rng = np.random.default_rng(2)
    with node.client() as c:
        first = len(c._rbuf)
        big = rng.integers(0, 255, 1_500_000, dtype=np.uint8).tobytes()
        assert c.call("echo", big) == big
        assert c.call("echo", b"small") == b"small"
        assert c.call("echo", big, timeout=10) == big
        sizes = [DIRECT_READ_MIN - 1, DIRECT_READ_MIN, first + 1, 10, 1_000_000, 3 * first]
        payloads = [rng.integers(0, 255, n, dtype=np.uint8).tobytes() for n in sizes]
        futs = [c.submit("echo", x) for x in payloads]
        for f, x in zip(futs, payloads, strict=True):
            assert f.result(timeout=10) == x
        got = c.call("minmax", np.arange(1 << 18, dtype=np.float32))
        assert got.shape == (1 << 18,) and got[0] == 0.0 and got[-1] == 1.0
        # It holds at most a header, hop times and an answer below the threshold.
        assert len(c._rbuf) <= max(first, DIRECT_READ_MIN + 128)


def test_close_ends_a_call_blocked_reading(node: Node) -> None:
    c = node.client()
    result: list[BaseException] = []

    def blocked() -> None:
        try:
            c.call("spin", b"", us=900_000, timeout=10)
        except BaseException as e:
            result.append(e)

    t = threading.Thread(target=blocked)
    t.start()
    time.sleep(0.2)
    c.close()
    t.join(timeout=5)
    assert not t.is_alive(), "close() left a reading call hanging"
    assert result and isinstance(result[0], ConnectionClosedError), result


def test_a_reused_plan_still_checks_parameter_types(node: Node) -> None:
    with node.client() as c:
        x = np.arange(8, dtype=np.int32)
        assert c.call("topk", x, k=2).tolist() == [7, 6]
        with pytest.raises(TypeError):
            c.call("topk", x, k=True)
        with pytest.raises(TypeError):
            c.call("topk", x, k=2.0)
        assert c.call("topk", x, k=2).tolist() == [7, 6]
        assert c.call("topk", x, k=3).tolist() == [7, 6, 5]


def test_connection_errors_are_typed_and_builtin_connection_errors(node: Node) -> None:
    import asyncio
    import socket

    from offrac import ConnectError, aio

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectError, match=f"cannot connect to 127.0.0.1:{port}") as info:
        Client(f"127.0.0.1:{port}")
    assert isinstance(info.value, ConnectionError) and isinstance(
        info.value.__cause__, ConnectionRefusedError
    )
    with pytest.raises(ConnectError):
        asyncio.run(aio.Client.connect(f"127.0.0.1:{port}"))
    c = node.client()
    c.close()
    with pytest.raises(ConnectionError):  # ConnectionClosedError is one
        c.call("echo", b"x")


def test_reconnect_after_the_node_restarts(start_node: Callable[..., Node]) -> None:
    from _util import free_port

    port = free_port()
    first = start_node(None, listen=f"127.0.0.1:{port}")
    plain = first.client()
    c = first.client(reconnect=True, reconnect_backoff=(0.02, 0.2), reconnect_attempts=30)
    assert c.call("echo", b"one") == b"one"
    late: list[BaseException] = []
    t = threading.Thread(target=lambda: _catch(late, lambda: c.call("spin", b"", us=800_000)))
    t.start()
    time.sleep(0.2)
    first.stopped = True  # killed on purpose: teardown need not stop it
    first.kill()  # mid-request: that call fails, it is never re-sent
    t.join(timeout=10)
    assert late and isinstance(late[0], ConnectionClosedError), late
    second = start_node(None, listen=f"127.0.0.1:{port}")
    assert c.call("echo", b"two") == b"two"
    assert c.reconnects == 1
    # Restarted while the client is idle: the next call notices and reconnects.
    second.stopped = True
    second.kill()
    second = start_node(None, listen=f"127.0.0.1:{port}")
    assert c.call("echo", b"idle") == b"idle"
    assert c.reconnects == 2
    assert c.submit("echo", b"three").result(timeout=5) == b"three"
    # Without reconnect the client stays closed.
    with pytest.raises(ConnectionClosedError):
        plain.call("echo", b"x")
    # An explicit close is final.
    c.close()
    with pytest.raises(ConnectionClosedError):
        c.call("echo", b"x")
    plain.close()
    second.stop()


def test_reconnect_gives_up_with_connect_error(start_node: Callable[..., Node]) -> None:
    from offrac import ConnectError

    node = start_node()
    c = node.client(reconnect=True, reconnect_backoff=(0.01, 0.02), reconnect_attempts=3)
    assert c.call("echo", b"a") == b"a"
    node.stopped = True
    node.kill()  # while the client is idle: it sees the loss at its next call
    with pytest.raises(ConnectError):
        c.call("echo", b"b")
    assert c.reconnects == 0


def _catch(into: list[BaseException], f: Callable[[], object]) -> None:
    try:
        f()
    except BaseException as e:
        into.append(e)


def test_out_arrays_take_the_answer_straight_from_the_socket(node: Node) -> None:
    """``out=``: the result is read into the caller's array (no copy on the way), which is
    returned with its shape; from the calling thread and from the reader thread alike."""
    x = np.random.default_rng(4).normal(0, 5, 1 << 18).astype(np.float32)  # 1 MiB
    with node.client() as c:
        want = c.call("minmax", x)
        out = np.empty(1 << 18, np.float32)
        got = c.call("minmax", x, out=out)
        assert got is out
        np.testing.assert_array_equal(out, want)
        assert c.direct_reads == 1
        # A shape of the caller's choosing is kept; top-k into a preallocated int32 array.
        ints = np.arange(1000, dtype=np.int32)
        top = np.zeros((4, 4), np.int32)
        assert c.call("topk", ints, k=16, out=top) is top
        assert top.ravel().tolist() == list(range(999, 983, -1))
        # Many in flight through futures: the reader thread fills each array.
        outs = [np.empty(1000, np.float32) for _ in range(20)]
        futs = [c.submit("minmax", x[i * 1000 : (i + 1) * 1000], out=o) for i, o in enumerate(outs)]
        for i, (f, o) in enumerate(zip(futs, outs, strict=True)):
            assert f.result(timeout=10) is o
            np.testing.assert_array_equal(o, c.call("minmax", x[i * 1000 : (i + 1) * 1000]))
        # A chain's last step decides the dtype.
        last = np.empty(8, np.float32)
        assert c.call_chain([Step("topk", k=8), "logit"], ints, out=last) is last
        # The wrong size raises and writes nothing; the stream stays in step.
        small = np.full(3, -1.0, np.float32)
        with pytest.raises(ValueError, match="out has 12 bytes"):
            c.call("minmax", x[:10], out=small)
        assert small.tolist() == [-1.0, -1.0, -1.0]
        assert c.call("echo", b"still in step") == b"still in step"
        # Checked before anything is sent.
        with pytest.raises(TypeError, match="int32"):
            c.call("topk", ints, k=4, out=np.empty(4, np.float32))
        with pytest.raises(TypeError, match="returns bytes"):
            c.call("echo", b"x", out=np.empty(1, np.uint8))
        with pytest.raises(TypeError, match="contiguous"):
            c.call("minmax", x[:10], out=np.empty(20, np.float32)[::2])


def test_a_polling_client_reads_its_answers_while_polling(node: Node) -> None:
    # A 1 s poll window: every answer comes well within it, so each is read by a
    # non-blocking poll, never by a blocking recv.
    with node.client(poll_us=1_000_000) as c:
        before = c.polled_reads
        for i in range(20):
            assert c.call("echo", b"p%d" % i) == b"p%d" % i
        assert c.polled_reads - before >= 20
    # Without it (the default) nothing is read by polling.
    with node.client() as c:
        for i in range(5):
            assert c.call("echo", b"b%d" % i) == b"b%d" % i
        assert c.polled_reads == 0


@pytest.mark.parametrize("bad", [-1, 1.5, True])
def test_poll_us_must_be_a_non_negative_int(node: Node, bad: object) -> None:
    with pytest.raises(ValueError, match="poll_us"):
        Client(node.address, poll_us=bad)  # type: ignore[arg-type]
