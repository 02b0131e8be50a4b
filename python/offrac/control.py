"""Control requests (``docs/control.md``): upload a WebAssembly module to a node's library,
swap a slot's function, list, unload (with ``force=True`` even from slots running it),
replicate a function into spare slots — each an envelope signed with the tenant's
HMAC-SHA256 key, sent to the reserved function ``FN_CONTROL``.

>>> from offrac import Client
>>> with Client("127.0.0.1:7000") as c:                       # doctest: +SKIP
...     ctl = c.control(tenant=1, key=bytes.fromhex("00112233445566778899aabbccddeeff"))
...     digest = ctl.upload(open("add.wasm", "rb").read())
...     ctl.swap(1, wasm=digest, function=130)
...     c.call_raw(130, b"abc", 1)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct
import threading
import time
from typing import TYPE_CHECKING, Any, Final

from .errors import error_for_response
from .protocol import FUNCTION_IDS, Status

if TYPE_CHECKING:
    from .client import Client

__all__ = [
    "FN_CONTROL",
    "OP_HELLO",
    "OP_LIST",
    "OP_REPLICATE",
    "OP_RESIZE",
    "OP_SHRINK",
    "OP_SWAP",
    "OP_UNLOAD",
    "OP_UPLOAD",
    "Controller",
    "encode_envelope",
]

#: The reserved function id of control requests.
FN_CONTROL: Final = 0xFC
OP_UPLOAD: Final = 1
OP_SWAP: Final = 2
OP_LIST: Final = 3
OP_UNLOAD: Final = 4
OP_HELLO: Final = 5
OP_REPLICATE: Final = 6
OP_SHRINK: Final = 7
OP_RESIZE: Final = 8

_FIXED = struct.Struct("<BBHIQQ8x")
assert _FIXED.size == 32


def encode_envelope(op: int, body: bytes, *, tenant: int, timestamp_ms: int, nonce: int, key: bytes) -> bytes:
    """The control envelope of ``docs/protocol.md`` ("Control requests"): 32 fixed bytes, the
    body, then HMAC-SHA256(key) over both."""
    signed = _FIXED.pack(op, 0, tenant, len(body), timestamp_ms, nonce) + body
    return signed + hmac.new(key, signed, hashlib.sha256).digest()


def _digest_bytes(digest: str) -> bytes:
    raw = bytes.fromhex(digest)
    if len(raw) != 32:
        raise ValueError(f"{digest!r} is not a 64-digit hex SHA-256 digest")
    return raw


def _targeted(first: int, builtin: str | int | None, wasm: str | None, function: int | None) -> bytes:
    """The body of SWAP (``first`` = slot) and REPLICATE (``first`` = n): ``u16``, the function
    id, its kind, and a module's digest."""
    if (builtin is None) == (wasm is None):
        raise ValueError("give exactly one of builtin= or wasm=")
    if builtin is not None:
        fid = FUNCTION_IDS[builtin] if isinstance(builtin, str) else int(builtin)
        return struct.pack("<HBB", first, fid, 0)
    if function is None:
        raise ValueError("wasm= needs function= (128..=250)")
    return struct.pack("<HBB", first, function, 1) + _digest_bytes(str(wasm))


class Controller:
    """Signs and sends control requests for one tenant on a :class:`~offrac.Client`'s
    connection. A refusal raises the status's exception (``UnauthorizedError``,
    ``BadInputError``, ``UnknownFunctionError``, ``BusyError``, ...). Requests are never
    retried: a resent envelope would be a replay."""

    def __init__(self, client: Client, *, tenant: int, key: bytes) -> None:
        self.client = client
        self.tenant = tenant
        self._key = bytes(key)
        self._lock = threading.Lock()
        self._nonce = time.time_ns()

    def request(self, op: int, body: bytes = b"", *, timeout: float | None = -1.0) -> bytes:
        """Send one control operation; the answer's payload (JSON text, or empty)."""
        with self._lock:
            self._nonce += 1
            nonce = self._nonce
        env = encode_envelope(
            op, body, tenant=self.tenant, timestamp_ms=time.time_ns() // 1_000_000, nonce=nonce, key=self._key
        )
        header, payload = self.client.call_raw(FN_CONTROL, env, 0, tenant=self.tenant, timeout=timeout)
        if header.status != Status.OK:
            raise error_for_response(header, payload)
        return payload

    def upload(self, module: bytes) -> str:
        """Store a WebAssembly module (binary) in the node's library; its SHA-256 digest (hex)."""
        answer: dict[str, Any] = json.loads(self.request(OP_UPLOAD, bytes(module)))
        return str(answer["digest"])

    def swap(
        self,
        slot: int,
        *,
        builtin: str | int | None = None,
        wasm: str | None = None,
        function: int | None = None,
    ) -> dict[str, Any]:
        """Make ``slot`` run a built-in (``builtin=`` name or id) or a library module
        (``wasm=`` digest, served as ``function=`` 128..=250). Returns the node's report:
        ``{"slot", "previous", "target", "total_ns", "drain_ns", "install_ns",
        "handed_to_replica", "refused_busy"}``."""
        report: dict[str, Any] = json.loads(self.request(OP_SWAP, _targeted(slot, builtin, wasm, function)))
        return report

    def replicate(
        self,
        n: int = 1,
        *,
        builtin: str | int | None = None,
        wasm: str | None = None,
        function: int | None = None,
    ) -> dict[str, Any]:
        """Load ``n`` more instances of a built-in (``builtin=``) or of a library module
        (``wasm=`` digest, served as ``function=``) into spare slots the node chooses, all or
        nothing: too few spare slots raises ``BusyError`` (``detail`` = how many are free) and
        changes nothing. Returns ``{"function", "slots": [...], "swaps": [reports]}``."""
        if not 1 <= n <= 0xFFFF:
            raise ValueError("n must be in 1..=65535")
        answer: dict[str, Any] = json.loads(self.request(OP_REPLICATE, _targeted(n, builtin, wasm, function)))
        return answer

    def shrink(self, function: str | int, *, keep: int = 0) -> dict[str, Any]:
        """Give the spare slots serving ``function`` (a built-in's name or any function id)
        back to spare, all but ``keep`` of them (highest slot first); configured slots are never
        touched. Returns ``{"function", "slots": [given back], "swaps": [reports]}``."""
        fid = FUNCTION_IDS[function] if isinstance(function, str) else int(function)
        if not 0 <= keep <= 0xFFFF:
            raise ValueError("keep must be in 0..=65535")
        answer: dict[str, Any] = json.loads(self.request(OP_SHRINK, struct.pack("<HBB", keep, fid, 0)))
        return answer

    def resize(self, template: str) -> dict[str, Any]:
        """Move the node's slots to the arrangement of a template of its configuration
        (``[[control.templates]]``), each changed slot through the swap sequence. Returns
        ``{"template", "slots": [changed], "swaps": [reports]}``."""
        name = template.encode()
        if not 1 <= len(name) <= 64:
            raise ValueError("a template name is 1 to 64 bytes of UTF-8")
        answer: dict[str, Any] = json.loads(self.request(OP_RESIZE, name))
        return answer

    def list(self) -> dict[str, Any]:
        """The library's modules and what each slot runs: ``{"modules": [...], "slots": [...]}``."""
        listing: dict[str, Any] = json.loads(self.request(OP_LIST))
        return listing

    def hello(self) -> None:
        """Attribute this connection to the tenant (``docs/protocol.md``, "Tenants"): from now
        on its requests are charged to it and see its modules. ``Client(key=...)`` does this."""
        self.request(OP_HELLO)

    def unload(self, digest: str, *, force: bool = False) -> dict[str, Any] | None:
        """Remove a module from the library. No slot may run it, unless ``force``: then every
        slot running it is swapped to its configured built-in first (the swap sequence: nothing
        is lost) and the answer lists those swaps, ``{"digest", "swapped_out": [reports]}``."""
        body = _digest_bytes(digest) + (b"\x01" if force else b"")
        answer = self.request(OP_UNLOAD, body)
        if not answer:
            return None
        report: dict[str, Any] = json.loads(answer)
        return report
