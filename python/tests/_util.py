"""Raw-socket helpers shared by the tests (no pytest fixtures here; see conftest.py)."""

from __future__ import annotations

import os
import select
import socket
import time
from typing import Any

from offrac import HEADER_LEN, Hop, RequestHeader, ResponseHeader, encode_request

__all__ = ["RawConn", "encode_request", "free_port", "header_with", "parse_prometheus"]


# Ports handed out by free_port: below the kernel's ephemeral range (32768-60999), so no bind to
# port 0 and no outgoing connection takes one meanwhile.
_PORTS = range(20_000, 32_000)
_next_port = [(os.getpid() * 7919) % len(_PORTS)]


def _port_free(port: int) -> bool:
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(socket.AF_INET, kind) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_port() -> int:
    """A loopback port free for TCP and UDP right now (for servers that must be told their port),
    never the same twice in one process: ports come from a counter starting at a place drawn
    from the process id (two test processes start apart), below the ephemeral range. Binding
    port 0 and closing, as before, let another process be given the same port. A server
    started on it can still lose it to another process: start it with a retry (see
    ``test_inline_memcached.Memcached``)."""
    for _ in range(len(_PORTS)):
        port = _PORTS[_next_port[0] % len(_PORTS)]
        _next_port[0] += 1
        if _port_free(port):
            return port
    raise RuntimeError(f"no free loopback port in {_PORTS}")


def header_with(
    request_id: int,
    function: int,
    payload_len: int = 0,
    param: int = 0,
    **fields: Any,
) -> bytes:
    """A request header with some fields overridden (e.g. ``flags=1``, ``magic=...``, ``version=2``)."""
    magic = fields.pop("magic", None)
    version = fields.pop("version", None)
    base: dict[str, Any] = {
        "request_id": request_id,
        "payload_len": payload_len,
        "hops": (Hop.local(function, param),),
    }
    base.update(fields)
    b = bytearray(RequestHeader(**base).encode())
    if magic is not None:
        b[0:2] = int(magic).to_bytes(2, "little")
    if version is not None:
        b[2] = int(version)
    return bytes(b)


class RawConn:
    """A plain TCP connection to the node for byte-level tests."""

    def __init__(self, addr: tuple[str, int], *, timeout: float = 5.0, nodelay: bool = True) -> None:
        self.sock = socket.create_connection(addr, timeout=timeout)
        if nodelay:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout = timeout
        self._buf = bytearray()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request(self, request_id: int, function: int, payload: bytes = b"", param: int = 0) -> None:
        self.send(encode_request(request_id, function, payload, param=param))

    def _fill(self, n: int, deadline: float) -> bool:
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"waited for {n} bytes, have {len(self._buf)}")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(max(65536, n - len(self._buf)))
            except ConnectionResetError:
                chunk = b""
            except TimeoutError as e:
                raise TimeoutError(f"waited for {n} bytes, have {len(self._buf)}") from e
            if not chunk:
                return False
            self._buf += chunk
        return True

    def read_response(self, timeout: float | None = None) -> tuple[ResponseHeader, bytes]:
        """The next response; raises EOFError if the connection closes first."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        if not self._fill(HEADER_LEN, deadline):
            raise EOFError(f"connection closed (had {len(self._buf)} stray bytes)")
        header = ResponseHeader.decode(bytes(self._buf[:HEADER_LEN]))
        if not self._fill(HEADER_LEN + header.payload_len, deadline):
            raise EOFError("connection closed mid-response")
        payload = bytes(self._buf[HEADER_LEN : HEADER_LEN + header.payload_len])
        del self._buf[: HEADER_LEN + header.payload_len]
        return header, payload

    def has_data(self, wait: float) -> bool:
        """True if a byte (or EOF) is readable within ``wait`` seconds."""
        if self._buf:
            return True
        readable, _, _ = select.select([self.sock], [], [], wait)
        return bool(readable)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        """True if the node closes the connection (EOF or reset) within ``timeout`` with no more data."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False
            if not chunk:
                return not self._buf
            self._buf += chunk
        return False

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConn:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_prometheus(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Samples of a Prometheus text exposition: (name, labels, value)."""
    samples: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            label_text, value_text = rest.rsplit("}", 1)
            labels: dict[str, str] = {}
            for part in _split_labels(label_text):
                key, _, val = part.partition("=")
                labels[key.strip()] = val.strip().strip('"')
        else:
            name, value_text = line.split(None, 1)
            labels = {}
        value = value_text.split()[0]
        samples.append((name.strip(), labels, float(value)))
    return samples


def _split_labels(text: str) -> list[str]:
    parts, cur, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts
