"""Fault handling, admission and concurrency of the real node, mostly over raw sockets."""

from __future__ import annotations

import signal
import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from offrac import (
    REQUEST_ID_NONE,
    BadInputError,
    BusyError,
    ConnectionClosedError,
    FunctionId,
    Hop,
    RequestFuture,
    ShuttingDownError,
    Status,
    TooLargeError,
    UnknownFunctionError,
)

from _util import RawConn, encode_request, header_with, parse_prometheus
from conftest import Node

ECHO, TOPK, LOGIT, MINMAX, MATMUL, SPIN = (int(f) for f in list(FunctionId)[:6])
StartNode = Callable[[str | None], Node]


# ----------------------------------------------------------------------------- header errors


def test_bad_magic_is_malformed_then_closed(node: Node) -> None:
    with RawConn(node.addr) as c:
        c.send(header_with(11, ECHO, magic=0x1234))
        h, _ = c.read_response()
        assert h.status == Status.MALFORMED
        assert h.request_id == REQUEST_ID_NONE  # the id of a bad-magic header cannot be trusted
        assert c.closed_by_peer(), "node must close after a bad magic"


def test_wrong_version_is_unsupported_version_then_closed(node: Node) -> None:
    with RawConn(node.addr) as c:
        c.send(header_with(12, ECHO, version=2))
        h, _ = c.read_response()
        assert h.status == Status.UNSUPPORTED_VERSION
        assert h.request_id == 12
        assert h.detail == 1  # highest version supported
        assert c.closed_by_peer(), "node must close after a wrong version"


@pytest.mark.parametrize(
    "fields",
    [
        {"flags": 1},
        {"flags": 0x80},
        {"flags": 0x10},
        {"hop_count": 0},
        {"hop_count": 5},
        {"hop_count": 1, "hop_index": 1},
        {"hops": (Hop.local(ECHO), Hop(LOGIT, 0xFF, 0))},  # a hop beyond hop_count
    ],
    ids=["flag1-needless-extension", "flag80", "flag10", "hops0", "hops5", "index", "unused-hop"],
)
def test_malformed_header_keeps_connection(node: Node, fields: dict[str, Any]) -> None:
    with RawConn(node.addr) as c:
        # the bad header announces a payload: the node must skip exactly that many bytes
        c.send(header_with(13, ECHO, payload_len=100, **fields) + b"z" * 100)
        h, msg = c.read_response()
        assert h.status == Status.MALFORMED
        assert h.request_id == 13
        msg.decode("utf-8")  # a human-readable message (may be empty)
        c.request(14, ECHO, b"still here")
        h, p = c.read_response()
        assert (h.status, h.request_id, p) == (Status.OK, 14, b"still here")


# ----------------------------------------------------------------------------- request errors


def test_too_large_raw_payload_discarded(node: Node) -> None:
    maximum = 2 << 20  # the default max_payload (fits matmul n = 512)
    with RawConn(node.addr, timeout=10) as c:
        c.send(header_with(17, ECHO, payload_len=maximum + 1) + b"\xab" * (maximum + 1))
        h, _ = c.read_response()
        assert (h.status, h.request_id, h.detail) == (Status.TOO_LARGE, 17, maximum)
        c.request(18, ECHO, b"after")
        h, p = c.read_response()
        assert (h.status, h.request_id, p) == (Status.OK, 18, b"after")


def test_too_large_via_client(start_node: StartNode) -> None:
    n = start_node("max_payload = 4096\n")
    with n.client() as c:
        assert c.call("echo", bytes(4096)) == bytes(4096)  # exactly the maximum is fine
        with pytest.raises(TooLargeError) as e:
            c.call("echo", bytes(4097))
        assert e.value.detail == 4096
        assert c.call("echo", b"usable") == b"usable"


def test_unknown_function(node: Node) -> None:
    with node.client() as c:
        h, _ = c.call_raw(200, b"abc")
        assert (h.status, h.detail) == (Status.UNKNOWN_FUNCTION, 200)
        with pytest.raises(UnknownFunctionError) as e:
            c.call(200, b"")
        assert e.value.detail == 200
        assert c.call("echo", b"fine") == b"fine"


def test_function_without_slot_is_unknown(start_node: StartNode) -> None:
    n = start_node('[[slots]]\nfunction = "topk"\n')
    with n.client() as c:
        np.testing.assert_array_equal(c.call("topk", [3, 1, 2], k=2), [3, 2])
        with pytest.raises(UnknownFunctionError) as e:
            c.call("echo", b"x")
        assert e.value.detail == ECHO


def test_odd_length_float_payload_is_bad_input(node: Node) -> None:
    with node.client() as c:
        for fn in ("logit", "minmax", "matmul"):
            with pytest.raises(BadInputError) as e:
                c.call(fn, bytes(6))
            assert e.value.status == Status.BAD_INPUT
        assert c.call("echo", b"fine") == b"fine"


def test_device_id_in_responses(start_node: StartNode) -> None:
    n = start_node("device_id = 7\n")
    with n.client() as c:
        _, info = c.call("echo", b"d", return_info=True)
        assert info.device == 7


# ----------------------------------------------------------------------------- stalls and disconnects


def test_stalled_client_times_out_while_others_are_served(start_node: StartNode) -> None:
    n = start_node("stall_timeout_ms = 300\n")
    t0 = time.monotonic()
    mid_header = RawConn(n.addr)
    mid_header.send(header_with(21, ECHO, payload_len=10)[:32])
    mid_payload = RawConn(n.addr)
    mid_payload.send(header_with(22, ECHO, payload_len=1000) + b"x" * 500)
    with n.client() as c:
        served = 0
        while time.monotonic() - t0 < 0.7:
            if time.monotonic() - t0 < 0.15:
                assert not mid_header.has_data(0) and not mid_payload.has_data(0), "timed out too early"
            assert c.call("echo", b"%d" % served) == b"%d" % served
            served += 1
            time.sleep(0.005)
        assert served >= 20
        for conn, rid in ((mid_header, None), (mid_payload, 22)):
            h, _ = conn.read_response(timeout=5)
            assert h.status == Status.TIMEOUT
            if rid is not None:
                assert h.request_id == rid
            assert conn.closed_by_peer(), "node must close after TIMEOUT"
            conn.close()
        # an idle connection is not a stalled one
        time.sleep(0.5)
        assert c.call("echo", b"idle ok") == b"idle ok"


def test_disconnect_mid_request_repeatedly(node: Node) -> None:
    big = 100_000  # needs a reassembly buffer
    with node.client() as c:
        slow = c.submit("spin", b"slow", us=200_000)
        for i in range(50):
            s = socket.create_connection(node.addr, timeout=5)
            mode = i % 3
            if mode == 0:  # half a header
                s.sendall(header_with(1000 + i, ECHO, payload_len=big)[:30])
            elif mode == 1:  # header and part of a large payload (holds a pool buffer)
                s.sendall(header_with(1000 + i, ECHO, payload_len=big) + bytes(5000))
            else:  # same, but reset instead of FIN
                s.sendall(header_with(1000 + i, TOPK, payload_len=big, param=3) + bytes(7000))
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        assert slow.result(10) == b"slow"
        assert c.call("echo", b"alive") == b"alive"
    # the abandoned requests' buffers are released: a large request gets admitted again
    payload = bytes(range(256)) * (big // 256)
    with node.client(busy_retries=0) as c:
        deadline = time.monotonic() + 5
        while True:
            try:
                assert c.call("echo", payload) == payload
                break
            except BusyError:
                assert time.monotonic() < deadline, "reassembly buffers leaked by disconnected clients"
                time.sleep(0.05)


# ----------------------------------------------------------------------------- admission


@pytest.mark.parametrize("policy", ["naive-rr", "eligible-rr", "jsb"])
def test_more_large_requests_than_buffers(start_node: StartNode, policy: str) -> None:
    n = start_node(f'[pool]\nbuffers = 2\nbuffer_bytes = 70000\npolicy = "{policy}"\n')
    size = 64 * 1024
    payloads = [bytes([i + 1]) * size for i in range(5)]
    conns = [RawConn(n.addr) for _ in range(5)]
    try:
        for i, c in enumerate(conns):
            c.send(header_with(100 + i, ECHO, payload_len=size) + payloads[i][:1000])
        busy: set[int] = set()
        deadline = time.monotonic() + 3
        while len(busy) < 3 and time.monotonic() < deadline:
            for i, c in enumerate(conns):
                if i not in busy and c.has_data(0.01):
                    h, _ = c.read_response()
                    assert (h.status, h.request_id) == (Status.BUSY, 100 + i)
                    assert (h.reassembly_ns, h.queue_ns, h.exec_ns) == (0, 0, 0)
                    busy.add(i)
        assert len(busy) >= 3, f"only {len(busy)} of 5 requests refused with 2 buffers"
        time.sleep(0.1)
        for i, c in enumerate(conns):  # at most one answer per request so far
            if i in busy:
                assert not c.has_data(0), "more than one response to a request"
        # finish every request; the refused ones' bytes are discarded by the node
        for i, c in enumerate(conns):
            c.send(payloads[i][1000:])
        for i, c in enumerate(conns):
            if i not in busy:
                h, p = c.read_response(timeout=10)
                assert (h.status, h.request_id) == (Status.OK, 100 + i)
                assert p == payloads[i]
        for i, c in enumerate(conns):  # every stream is still in sync
            c.request(200 + i, ECHO, b"next")
            h, p = c.read_response(timeout=10)
            assert (h.status, h.request_id, p) == (Status.OK, 200 + i, b"next")
    finally:
        for c in conns:
            c.close()


def test_client_retries_busy(start_node: StartNode) -> None:
    n = start_node("[pool]\nbuffers = 1\nbuffer_bytes = 70000\n")
    big = bytes(range(250)) * 200  # 50 000 bytes: needs the single buffer
    with RawConn(n.addr) as hold:
        hold.send(header_with(1, ECHO, payload_len=60_000) + b"h" * 100)  # occupies the buffer
        time.sleep(0.05)
        with n.client(busy_retries=0) as c0, pytest.raises(BusyError) as e:
            c0.call("echo", big)
        assert e.value.status == Status.BUSY
        with n.client(busy_retries=14, busy_backoff_max=0.1) as c:
            fut = c.submit("echo", big)
            time.sleep(0.05)
            hold.send(b"h" * 59_900)  # completes the held request, freeing the buffer
            assert fut.result(10) == big
            assert c.busy_retries_done >= 1
        h, p = hold.read_response()
        assert h.status == Status.OK and p == b"h" * 60_000


def test_busy_storm_with_retries(start_node: StartNode) -> None:
    """Many clients contend for one buffer; with retries every call succeeds."""
    n = start_node("[pool]\nbuffers = 1\nbuffer_bytes = 70000\n")
    payload = np.arange(15_000, dtype=np.int32)  # 60 000 bytes

    def worker(seed: int) -> int:
        with n.client(busy_retries=40, busy_backoff_max=0.02) as c:
            for k in range(1, 11):
                out = c.call("topk", np.roll(payload, seed * k), k=k)
                np.testing.assert_array_equal(out, np.arange(14_999, 14_999 - k, -1))
            return c.busy_retries_done

    with ThreadPoolExecutor(4) as ex:
        list(ex.map(worker, range(4)))  # re-raises any worker failure


# ----------------------------------------------------------------------------- segmentation


def test_request_in_one_byte_writes(node: Node) -> None:
    x = np.random.default_rng(1).integers(-1000, 1000, 300).astype(np.int32)
    wire = encode_request(31, TOPK, x.astype("<i4").tobytes(), param=10)
    with RawConn(node.addr) as c:
        for i in range(len(wire)):
            c.send(wire[i : i + 1])
            if i < 70 or i % 97 == 0:
                time.sleep(0.0005)
        h, p = c.read_response()
        assert (h.status, h.request_id) == (Status.OK, 31)
        np.testing.assert_array_equal(np.frombuffer(p, "<i4"), np.sort(x)[::-1][:10])
        assert h.reassembly_ns > 0  # the request took many segments to arrive


Check = Callable[[bytes], bool]


def mixed_request(rng: np.random.Generator, rid: int, *, max_echo: int = 2000) -> tuple[bytes, Check]:
    """A random small request and a checker of its OK payload."""
    want: Any
    kind = int(rng.integers(0, 6))
    if kind == 0:
        data = rng.integers(0, 256, int(rng.integers(0, max_echo)), dtype=np.uint8).tobytes()
        return encode_request(rid, ECHO, data), lambda p, d=data: p == d
    if kind == 1:
        x = rng.integers(-(2**31), 2**31 - 1, int(rng.integers(1, 300)), dtype=np.int32)
        k = int(rng.integers(1, 20))
        want = np.sort(x)[::-1][:k].astype("<i4").tobytes()
        return encode_request(rid, TOPK, x.astype("<i4").tobytes(), param=k), lambda p, w=want: p == w
    if kind == 2:
        x = rng.uniform(0.01, 0.99, int(rng.integers(1, 300))).astype(np.float32)
        want = np.log(x.astype(np.float64) / (1 - x.astype(np.float64)))
        return encode_request(rid, LOGIT, x.astype("<f4").tobytes()), lambda p, w=want: bool(
            np.allclose(np.frombuffer(p, "<f4"), w, rtol=1e-5, atol=1e-6)
        )
    if kind == 3:
        x = rng.normal(size=int(rng.integers(2, 300))).astype(np.float32)
        x64 = x.astype(np.float64)
        want = (x64 - x64.min()) / (x64.max() - x64.min())
        return encode_request(rid, MINMAX, x.astype("<f4").tobytes()), lambda p, w=want: bool(
            np.allclose(np.frombuffer(p, "<f4"), w, rtol=1e-5, atol=1e-6)
        )
    if kind == 4:
        m = int(rng.integers(1, 8))
        a = rng.uniform(-1, 1, (m, m)).astype(np.float32)
        b = rng.uniform(-1, 1, (m, m)).astype(np.float32)
        want = a.astype(np.float64) @ b.astype(np.float64)
        return encode_request(rid, MATMUL, a.tobytes() + b.tobytes(), param=m), lambda p, w=want: bool(
            np.allclose(np.frombuffer(p, "<f4").reshape(w.shape), w, rtol=1e-4, atol=1e-4)
        )
    data = bytes(int(rng.integers(0, 100)))
    return encode_request(rid, SPIN, data, param=int(rng.integers(0, 50))), lambda p, d=data: p == d


def test_coalesced_requests(node: Node) -> None:
    rng = np.random.default_rng(2)
    reqs = {100 + i: mixed_request(rng, 100 + i, max_echo=200) for i in range(100)}
    with RawConn(node.addr, timeout=10) as c:
        c.send(b"".join(wire for wire, _ in reqs.values()))
        seen: dict[int, Status] = {}
        for _ in reqs:
            h, p = c.read_response()
            assert h.request_id in reqs and h.request_id not in seen
            seen[h.request_id] = h.status
            assert h.status == Status.OK, (h, p)
            assert reqs[h.request_id][1](p), f"wrong result for request {h.request_id}"
        assert set(seen) == set(reqs)
        assert not c.has_data(0.2), "extra response"


def test_pipelined_clients_every_id_answered_once(node: Node) -> None:
    clients, per_client = 8, 200

    def run(ci: int) -> tuple[list[int], int, int]:
        rng = np.random.default_rng(100 + ci)
        reqs = {(ci << 32) | j: mixed_request(rng, (ci << 32) | j) for j in range(per_client)}
        with RawConn(node.addr, timeout=30) as c:

            def send_all() -> None:
                for wire, _ in reqs.values():
                    c.send(wire)

            sender = threading.Thread(target=send_all)
            sender.start()
            ids, ok, busy = [], 0, 0
            for _ in range(per_client):
                h, p = c.read_response()
                ids.append(h.request_id)
                assert h.request_id in reqs, f"response to unknown id {h.request_id:#x}"
                assert h.status in (Status.OK, Status.BUSY), h
                if h.status == Status.OK:
                    assert reqs[h.request_id][1](p), f"wrong result for {h.request_id:#x}"
                    ok += 1
                else:
                    busy += 1
            sender.join()
            assert not c.has_data(0.2), "extra response"
            return ids, ok, busy

    with ThreadPoolExecutor(clients) as ex:
        results = list(ex.map(run, range(clients)))
    all_ids = [i for ids, _, _ in results for i in ids]
    expected = {(ci << 32) | j for ci in range(clients) for j in range(per_client)}
    assert len(all_ids) == len(expected) and set(all_ids) == expected
    ok = sum(r[1] for r in results)
    assert ok >= len(expected) // 2, f"only {ok} OK of {len(expected)}"


def test_pipelined_clients_via_client_class(node: Node) -> None:
    def run(ci: int) -> int:
        rng = np.random.default_rng(200 + ci)
        with node.client(busy_retries=30) as c:
            futs: list[tuple[RequestFuture[Any], Any]] = []
            for j in range(150):
                kind = j % 4
                if kind == 0:
                    data = rng.integers(0, 256, int(rng.integers(0, 3000)), dtype=np.uint8).tobytes()
                    futs.append((c.submit("echo", data), data))
                elif kind == 1:
                    x = rng.integers(-100, 100, int(rng.integers(1, 2000)), dtype=np.int32)
                    futs.append((c.submit("topk", x, k=5), np.sort(x)[::-1][:5]))
                elif kind == 2:
                    x = rng.normal(size=int(rng.integers(2, 2000))).astype(np.float32)
                    futs.append((c.submit("minmax", x), (x - x.min()) / (x.max() - x.min())))
                else:
                    futs.append((c.submit("spin", b"s", us=int(rng.integers(0, 30))), b"s"))
            ids = {f.request_id for f, _ in futs}
            assert len(ids) == len(futs)
            for f, want in futs:
                got = f.result(30)
                if isinstance(want, bytes):
                    assert got == want
                else:
                    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            return len(futs)

    with ThreadPoolExecutor(8) as ex:
        assert sum(ex.map(run, range(8))) == 8 * 150


def test_out_of_order_completion(node: Node) -> None:
    with node.client() as c:
        slow = c.submit("spin", b"slow", us=300_000)
        fast = c.submit("echo", b"fast")
        assert fast.result(5) == b"fast"
        assert not slow.done(), "echo should overtake a 300 ms spin on the same connection"
        assert slow.result(5) == b"slow"


# ----------------------------------------------------------------------------- metrics and shutdown


def test_metrics_endpoint(node: Node) -> None:
    assert node.metrics, "default config serves metrics"
    with node.client() as c:
        for _ in range(25):
            c.call("echo", b"m")
        for _ in range(7):
            c.call("topk", [1, 2, 3], k=1)
    with urllib.request.urlopen(f"http://{node.metrics}/metrics", timeout=5) as resp:
        assert resp.status == 200
        text = resp.read().decode("utf-8")
    samples = parse_prometheus(text)
    completions = [(labels, v) for name, labels, v in samples if name == "offrac_slot_completions_total"]
    assert completions, f"no offrac_slot_completions_total in:\n{text[:2000]}"
    assert all("slot" in labels for labels, _ in completions), completions

    def count(fn: str) -> float:
        return sum(v for labels, v in completions if labels.get("function") == fn)

    assert count("echo") >= 25, completions
    assert count("topk") >= 7, completions


def test_metrics_can_be_disabled(start_node: StartNode) -> None:
    n = start_node('[metrics]\nlisten = ""\n')
    assert n.metrics is None
    with n.client() as c:
        assert c.call("echo", b"x") == b"x"


def test_io_modes_and_policies(start_node: StartNode) -> None:
    n = start_node('[io]\nmode = "blocking"\n[pool]\npolicy = "jsb"\n[selector]\npolicy = "jsq"\n')
    with n.client() as c:
        np.testing.assert_array_equal(c.call("topk", np.arange(1000), k=3), [999, 998, 997])
        assert c.call("echo", bytes(100_000)) == bytes(100_000)


def test_sigterm_is_graceful(start_node: StartNode) -> None:
    """docs/operations.md: complete requests are finished, partial ones get SHUTTING_DOWN."""
    n = start_node(None)
    c = n.client()
    partial = RawConn(n.addr)
    try:
        fut = c.submit("spin", b"s", us=300_000)
        partial.send(header_with(77, ECHO, payload_len=10_000) + bytes(100))
        time.sleep(0.05)
        n.proc.send_signal(signal.SIGTERM)
        assert fut.result(10) == b"s"  # held and complete: finished and answered
        h, _ = partial.read_response(timeout=10)
        assert (h.status, h.request_id) == (Status.SHUTTING_DOWN, 77)
        assert partial.closed_by_peer()
        assert n.proc.wait(10) == 0, n.stderr_tail()
        with pytest.raises((ConnectionClosedError, ShuttingDownError)):
            c.call("echo", b"late", timeout=5)
    finally:
        partial.close()
        c.close()
        n.stop()
    with pytest.raises(OSError):
        socket.create_connection(n.addr, timeout=1).close()
