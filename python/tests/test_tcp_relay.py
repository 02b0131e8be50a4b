"""``tcp_relay`` (an example of the node crate), the floor the attached cache is measured
against in ``experiments/nica_cache/run.py``: in both modes it must relay every byte both ways
in order, serve several clients at once, and close a client whose backend is gone."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import threading
from collections.abc import Iterator

import pytest

from conftest import REPO

RELAY = REPO / "target" / "release" / "examples" / "tcp_relay"


@pytest.fixture
def echo_server() -> Iterator[str]:
    """A threaded TCP echo server on loopback: its address."""
    srv = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{srv.getsockname()[1]}"
    stop.set()
    srv.close()


def start_relay(backend: str, mode: str) -> tuple[subprocess.Popen[str], tuple[str, int]]:
    if not RELAY.is_file():
        pytest.fail(f"{RELAY} not built: make build", pytrace=False)
    proc = subprocess.Popen(
        [str(RELAY), "--listen", "127.0.0.1:0", "--backend", backend, "--mode", mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    word, addr = proc.stdout.readline().split()
    assert word == "listening"
    host, port = addr.rsplit(":", 1)
    return proc, (host, int(port))


def roundtrip(addr: tuple[str, int], payload: bytes) -> bytes:
    with socket.create_connection(addr, timeout=20) as s:
        sender = threading.Thread(target=s.sendall, args=(payload,))
        sender.start()
        got = bytearray()
        while len(got) < len(payload):
            chunk = s.recv(1 << 20)
            assert chunk, f"relay closed after {len(got)} of {len(payload)} bytes"
            got += chunk
        sender.join()
        return bytes(got)


@pytest.mark.parametrize("mode", ["epoll", "spin"])
def test_relays_every_byte_in_order_for_several_clients(echo_server: str, mode: str) -> None:
    proc, addr = start_relay(echo_server, mode)
    try:
        payloads = [bytes((i * 7 + j) % 251 for j in range(n)) for i, n in enumerate([1, 1000, 3 << 20])]
        results: list[bytes] = [b""] * len(payloads)

        def run(i: int) -> None:
            results[i] = roundtrip(addr, payloads[i])

        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(payloads))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert results == payloads
        assert proc.poll() is None, "the relay exited"
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("mode", ["epoll", "spin"])
def test_a_client_whose_backend_is_gone_is_closed(mode: str) -> None:
    dead = socket.create_server(("127.0.0.1", 0))
    backend = f"127.0.0.1:{dead.getsockname()[1]}"
    dead.close()  # nothing listens there now
    proc, addr = start_relay(backend, mode)
    try:
        with socket.create_connection(addr, timeout=10) as s:
            s.sendall(b"get k\r\n")
            with contextlib.suppress(ConnectionResetError):  # a reset is a close too
                assert s.recv(100) == b""
        assert proc.poll() is None, "the relay exited instead of dropping the client"
    finally:
        proc.kill()
        proc.wait()


def test_bad_flags_are_refused_with_a_reason() -> None:
    if not RELAY.is_file():
        pytest.fail(f"{RELAY} not built: make build", pytrace=False)
    args = [str(RELAY), "--listen", "127.0.0.1:0", "--mode", "fast"]
    out = subprocess.run(args, capture_output=True, text=True)
    assert out.returncode == 2
    assert "--mode fast: epoll or spin" in out.stderr
