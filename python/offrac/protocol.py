"""The offrac wire format, version 1 (see ``docs/protocol.md``, the single source of truth).

Every request and every response is a fixed 64-byte little-endian header followed by
``payload_len`` payload bytes. This module only encodes and decodes headers; it does no I/O.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import struct
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEVICE_SELF",
    "EXT_LEN",
    "FLAG_DIRECT_REPLY",
    "FLAG_FORWARDED",
    "FLAG_HOP_EXT",
    "FLAG_TRACE",
    "FN_DESCRIBE",
    "FN_REGISTER_REPLY",
    "FUNCTION_IDS",
    "FUNCTION_NAMES",
    "HEADER_ERROR_KINDS",
    "HEADER_HOPS",
    "HEADER_LEN",
    "MAX_BUDGET_US",
    "MAX_HOPS",
    "REQUEST_ID_NONE",
    "REQUEST_MAGIC",
    "RESPONSE_MAGIC",
    "RESP_FLAG_RECEIPT",
    "VERSION",
    "FunctionId",
    "HeaderError",
    "Hop",
    "HopTime",
    "RequestHeader",
    "ResponseHeader",
    "Status",
    "encode_request",
    "function_id",
    "function_name",
]

#: Size of every header, request or response: one 512-bit beat.
HEADER_LEN: Final = 64
#: The protocol version this package speaks.
VERSION: Final = 1
#: Request magic (bytes ``51 4F`` on the wire, ASCII "QO").
REQUEST_MAGIC: Final = 0x4F51
#: Response magic (bytes ``52 53`` on the wire, ASCII "RS").
RESPONSE_MAGIC: Final = 0x5352
#: Hops a request can carry: four in the 64-byte header, four more in the hop extension.
MAX_HOPS: Final = 8
#: Hops the 64-byte header itself carries.
HEADER_HOPS: Final = 4
#: ``flags`` bit 0: a 64-byte hop extension (hops 4..8) follows the header.
FLAG_HOP_EXT: Final = 0x01
#: Length of the hop extension.
EXT_LEN: Final = 64
#: ``flags`` bit 1: answer with per-hop timings (a 64-byte block after the response header).
FLAG_TRACE: Final = 0x02
#: ``flags`` bit 2: ``reply_device`` is a reply endpoint the caller registered (same tenant) on
#: the chain's nodes; the node that produces the answer writes it there when it holds it.
FLAG_DIRECT_REPLY: Final = 0x04
#: ``flags`` bit 3: set by nodes on the hops they forward (the sender is owed receipts).
FLAG_FORWARDED: Final = 0x08
_KNOWN_FLAGS: Final = FLAG_HOP_EXT | FLAG_TRACE | FLAG_DIRECT_REPLY | FLAG_FORWARDED
#: Response ``flags`` bit 0: the per-hop timings block follows the header.
RESP_FLAG_HOP_TIMES: Final = 0x01
#: Response ``flags`` bit 1: a receipt (the answer went to the direct reply endpoint); only
#: nodes receive them.
RESP_FLAG_RECEIPT: Final = 0x02
_HOP_TIME = struct.Struct("<BBHI")  # device, ran, queue µs (u16), exec ns (u32)
#: Device id meaning "this node" in a hop, or "back to the caller" as reply device.
DEVICE_SELF: Final = 0xFF
#: Control function: register the connection as a reply endpoint (param: the id wanted, or 255
#: for any free one); answered OK with the endpoint id in ``detail``.
FN_REGISTER_REPLY: Final = 0xFE
#: Control function: the node describes itself (functions, slots, peers, metrics) as JSON.
FN_DESCRIBE: Final = 0xFD
#: Request id of a response that answers no identifiable request (a wrong magic, or a stall
#: before the id arrived); reserved: clients never send it.
REQUEST_ID_NONE: Final = 0xFFFF_FFFF_FFFF_FFFF

# magic version flags tenant hop_count hop_index request_id payload_len reply_device budget_us[3]
_REQ_FIXED = struct.Struct("<HBBHBBQIB3s")
#: Largest budget the 24-bit ``budget_us`` field holds (about 16.8 s).
MAX_BUDGET_US: Final = (1 << 24) - 1
_HOP = struct.Struct("<BBQ")
_ZERO_HOP = bytes(_HOP.size)
_HOPS_OFFSET = 24
# magic version flags status hop_index device request_id payload_len tenant reserved[2]
# reassembly_ns queue_ns exec_ns detail reserved[8]
_RESP = struct.Struct("<HBBHBBQIH2sQQQQ8s")
assert _REQ_FIXED.size == _HOPS_OFFSET
assert _HOPS_OFFSET + HEADER_HOPS * _HOP.size == HEADER_LEN
assert _RESP.size == HEADER_LEN

_U8 = 0xFF
_U16 = 0xFFFF
_U32 = 0xFFFF_FFFF
_U64 = 0xFFFF_FFFF_FFFF_FFFF


class Status(enum.IntEnum):
    """Response status codes."""

    OK = 0
    BUSY = 1
    UNKNOWN_FUNCTION = 2
    TOO_LARGE = 3
    MALFORMED = 4
    BAD_INPUT = 5
    INTERNAL = 6
    UNSUPPORTED_VERSION = 7
    TIMEOUT = 8
    SHUTTING_DOWN = 9
    UNSUPPORTED = 10
    UNREACHABLE = 11
    UNAUTHORIZED = 12
    TRAPPED = 13
    FUEL_EXHAUSTED = 14
    QUOTA_EXCEEDED = 15
    UNKNOWN_BUFFER = 16
    BUFFER_EXISTS = 17

    @property
    def closes_connection(self) -> bool:
        """True for the statuses after which the node always closes the connection.

        ``TIMEOUT`` is not one: a budget, forward or reassembly timeout keeps the connection;
        only a stall mid-request closes it, and that close is then seen on the next read."""
        return self in (Status.UNSUPPORTED_VERSION, Status.SHUTTING_DOWN)


#: Status by code (the codes are 0, 1, 2, … in order).
_STATUSES: Final[tuple[Status, ...]] = tuple(Status)
assert all(int(st) == i for i, st in enumerate(_STATUSES))


class FunctionId(enum.IntEnum):
    """Built-in function ids (version 1); the registry (``offrac.registry``) has each one's
    layouts and parameters, and must agree with this list (checked on import)."""

    ECHO = 0
    TOPK = 1
    LOGIT = 2
    MINMAX = 3
    MATMUL = 4
    SPIN = 5
    MAPID = 6
    SPARSETRANSFORM = 7
    BUCKETIZE = 8
    SIGRIDHASH = 9
    FIRSTX = 10
    IDLISTTRANSFORM = 11
    CARTESIAN = 12
    NGRAM = 13
    GETLOCALHOUR = 14
    ONEHOT = 15
    BOXCOX = 16
    CNN = 17
    GEMV = 18


def _check_against_registry() -> None:
    from .registry import FUNCTIONS

    ours = {f.name.lower(): int(f) for f in FunctionId}
    theirs = {f.name: f.id for f in FUNCTIONS}
    if ours != theirs:
        raise ImportError(f"offrac.protocol.FunctionId disagrees with functions.json: {ours} != {theirs}")


_check_against_registry()


#: Function name -> id.
FUNCTION_IDS: Final[dict[str, int]] = {f.name.lower(): int(f) for f in FunctionId}
#: Function id -> name.
FUNCTION_NAMES: Final[dict[int, str]] = {v: k for k, v in FUNCTION_IDS.items()}


def function_id(name_or_id: str | int) -> int:
    """Resolve a function name (``"topk"``) or id (``1``) to its id.

    Ids not in the built-in table are allowed (0..=255) so that custom functions can be
    addressed; unknown names raise ``ValueError``.
    """
    if isinstance(name_or_id, str):
        try:
            return FUNCTION_IDS[name_or_id.lower()]
        except KeyError:
            known = ", ".join(FUNCTION_IDS)
            raise ValueError(f"unknown function name {name_or_id!r} (known: {known})") from None
    if isinstance(name_or_id, bool) or not isinstance(name_or_id, int):
        raise TypeError(f"function must be a name or an int id, not {type(name_or_id).__name__}")
    if not 0 <= name_or_id <= _U8:
        raise ValueError(f"function id {name_or_id} outside 0..=255")
    return int(name_or_id)


def function_name(fid: int) -> str | None:
    """The built-in name of a function id, or None."""
    return FUNCTION_NAMES.get(fid)


#: The ``kind`` values a request-header ``HeaderError`` can carry (named like the vector file's errors).
HEADER_ERROR_KINDS: Final = (
    "BadMagic",
    "BadVersion",
    "ReservedFlags",
    "BadHopCount",
    "BadHopIndex",
    "NeedlessExtension",
    "ReservedBytes",
    "UnusedHop",
)


class HeaderError(ValueError):
    """A header that does not decode.

    ``kind`` is one of :data:`HEADER_ERROR_KINDS` for requests; response decoding may also
    report ``"BadMagic"``, ``"BadVersion"``, ``"UnknownStatus"`` or ``"ShortHeader"``.
    ``fatal`` is True when the stream cannot be parsed past this header (bad magic/version).
    """

    def __init__(self, kind: str, message: str, *, request_id: int | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.request_id = request_id

    @property
    def fatal(self) -> bool:
        return self.kind in ("BadMagic", "BadVersion")


def _check_range(name: str, value: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not 0 <= value <= maximum:
        raise ValueError(f"{name}={value} outside 0..={maximum}")


def _header_bytes(buf: bytes | bytearray | memoryview) -> bytes:
    b = bytes(buf)
    if len(b) != HEADER_LEN:
        raise HeaderError("ShortHeader", f"a header is {HEADER_LEN} bytes, got {len(b)}")
    return b


@dataclass(frozen=True)
class Hop:
    """One step of a function chain: which function, on which device, with what parameter."""

    function: int = 0
    device: int = 0
    param: int = 0

    @classmethod
    def local(cls, function: int, param: int = 0) -> Hop:
        """A hop run on the node that receives the request."""
        return cls(function, DEVICE_SELF, param)

    def encode(self) -> bytes:
        if type(self.function) is int and type(self.device) is int and type(self.param) is int:
            # The fast path (every call encodes hops): struct refuses what is out of range.
            with contextlib.suppress(struct.error):
                return _HOP.pack(self.function, self.device, self.param)
        _check_range("function", self.function, _U8)
        _check_range("device", self.device, _U8)
        _check_range("param", self.param, _U64)
        return _HOP.pack(self.function, self.device, self.param)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> Hop:
        return cls(*_HOP.unpack(bytes(buf)))

    @property
    def is_zero(self) -> bool:
        return self.function == 0 and self.device == 0 and self.param == 0


def _pad_hops(hops: tuple[Hop, ...] | list[Hop]) -> tuple[Hop, ...]:
    hops = tuple(hops)
    if len(hops) > MAX_HOPS:
        raise ValueError(f"at most {MAX_HOPS} hops, got {len(hops)}")
    return hops + (Hop(),) * (MAX_HOPS - len(hops))


@functools.lru_cache(maxsize=1024)
def _hop_block(hops: tuple[Hop, ...]) -> bytes:
    """The header's hop records (and the extension's, beyond four hops) for ``hops``: a
    client sends the same chains over and over, so they are encoded once."""
    n = len(hops)
    encoded = b"".join(h.encode() for h in hops)
    if n <= HEADER_HOPS:
        return encoded + _ZERO_HOP * (HEADER_HOPS - n)
    return encoded + _ZERO_HOP * (MAX_HOPS - n) + bytes(EXT_LEN - MAX_HOPS // 2 * _HOP.size)


def _request_flags(hops: int, trace: bool, direct: bool) -> int:
    return (
        (FLAG_HOP_EXT if hops > HEADER_HOPS else 0)
        | (FLAG_TRACE if trace else 0)
        | (FLAG_DIRECT_REPLY if direct else 0)
    )


@dataclass(frozen=True)
class RequestHeader:
    """A request header. ``hops`` is always padded to four entries.

    :meth:`encode` writes the fields as given (so tests can build invalid headers); only
    integer ranges are checked. :meth:`decode` validates like the node does, in the order of
    the Rust codec, and raises :class:`HeaderError`.
    """

    request_id: int = 0
    payload_len: int = 0
    tenant: int = 0
    hop_count: int = 1
    hop_index: int = 0
    reply_device: int = DEVICE_SELF
    flags: int = 0
    #: Time budget in µs from the request's first byte at a node (0: none): a hop not started
    #: within it is answered TIMEOUT.
    budget_us: int = 0
    hops: tuple[Hop, ...] = field(default_factory=lambda: (Hop(),) * MAX_HOPS)
    #: On a hop a node forwards with a direct reply (flags bits 2 and 3): the caller's own
    #: request id, in the hop extension (bytes 40..48); 0 otherwise.
    origin_id: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "hops", _pad_hops(self.hops))

    @classmethod
    def single(
        cls, request_id: int, function: int, param: int = 0, payload_len: int = 0, tenant: int = 0
    ) -> RequestHeader:
        """A single-hop request for ``function`` run on this node, answered to the caller."""
        return cls(
            request_id=request_id,
            payload_len=payload_len,
            tenant=tenant,
            hops=(Hop.local(function, param),),
        )

    @classmethod
    def chain(
        cls,
        request_id: int,
        hops: tuple[Hop, ...] | list[Hop],
        payload_len: int = 0,
        tenant: int = 0,
        reply_device: int = DEVICE_SELF,
        *,
        budget_us: int = 0,
        trace: bool = False,
        direct: bool = False,
    ) -> RequestHeader:
        """A request running ``hops`` in order (1 to 8; more than 4 ride in the hop
        extension), the last hop's result going to ``reply_device`` (the caller by default).
        ``direct``: ``reply_device`` is an endpoint registered on the chain's nodes and the
        node that answers writes to it directly (``FLAG_DIRECT_REPLY``)."""
        if not 1 <= len(hops) <= MAX_HOPS:
            raise ValueError(f"a chain has 1 to {MAX_HOPS} hops, got {len(hops)}")
        return cls(
            flags=_request_flags(len(hops), trace, direct),
            request_id=request_id,
            payload_len=payload_len,
            tenant=tenant,
            hop_count=len(hops),
            reply_device=reply_device,
            budget_us=budget_us,
            hops=tuple(hops),
        )

    @staticmethod
    def encode_chain(
        request_id: int,
        hops: tuple[Hop, ...] | list[Hop],
        payload_len: int = 0,
        tenant: int = 0,
        reply_device: int = DEVICE_SELF,
        *,
        budget_us: int = 0,
        trace: bool = False,
        direct: bool = False,
    ) -> bytes:
        """``RequestHeader.chain(...).encode()`` without building the header object: the
        same bytes, a few µs less per request (the client's path). Out-of-range values take
        the slow path, which names the field."""
        n = len(hops)
        flags = _request_flags(n, trace, direct)
        try:
            if not 1 <= n <= MAX_HOPS or not 0 <= budget_us <= MAX_BUDGET_US:
                raise OverflowError
            fixed = _REQ_FIXED.pack(
                REQUEST_MAGIC,
                VERSION,
                flags,
                tenant,
                n,
                0,
                request_id,
                payload_len,
                reply_device,
                budget_us.to_bytes(3, "little"),
            )
        except (struct.error, OverflowError, TypeError, AttributeError):
            header = RequestHeader.chain(
                request_id,
                hops,
                payload_len,
                tenant,
                reply_device,
                budget_us=budget_us,
                trace=trace,
                direct=direct,
            )
            return header.encode()
        return fixed + _hop_block(hops if type(hops) is tuple else tuple(hops))

    @property
    def current_hop(self) -> Hop:
        """The hop to run next."""
        return self.hops[self.hop_index % MAX_HOPS]

    def encode(self) -> bytes:
        fields = (self.flags, self.tenant, self.hop_count, self.hop_index, self.request_id)
        fields += (self.payload_len, self.reply_device, self.budget_us)
        # Checked field by field only when a field is not a plain int in range (the
        # fast path of every call); the check then names the field.
        if not all(type(f) is int for f in fields) or not 0 <= self.budget_us <= MAX_BUDGET_US:
            self._check_fields()
        try:
            fixed = self._pack_fixed()
        except struct.error:
            self._check_fields()
            raise
        head = fixed + b"".join(h.encode() for h in self.hops[:HEADER_HOPS])
        if not self.flags & FLAG_HOP_EXT:
            return head
        ext = b"".join(h.encode() for h in self.hops[HEADER_HOPS:])
        if self.carries_origin:
            _check_range("origin_id", self.origin_id, _U64)
            ext += self.origin_id.to_bytes(8, "little")
        return head + ext + b"\0" * (EXT_LEN - len(ext))

    @property
    def carries_origin(self) -> bool:
        """A forwarded direct-reply hop: its extension carries the caller's request id."""
        both = FLAG_DIRECT_REPLY | FLAG_FORWARDED
        return self.flags & both == both

    def _check_fields(self) -> None:
        _check_range("flags", self.flags, _U8)
        _check_range("tenant", self.tenant, _U16)
        _check_range("hop_count", self.hop_count, _U8)
        _check_range("hop_index", self.hop_index, _U8)
        _check_range("request_id", self.request_id, _U64)
        _check_range("payload_len", self.payload_len, _U32)
        _check_range("reply_device", self.reply_device, _U8)
        _check_range("budget_us", self.budget_us, MAX_BUDGET_US)

    def _pack_fixed(self) -> bytes:
        return _REQ_FIXED.pack(
            REQUEST_MAGIC,
            VERSION,
            self.flags,
            self.tenant,
            self.hop_count,
            self.hop_index,
            self.request_id,
            self.payload_len,
            self.reply_device,
            self.budget_us.to_bytes(3, "little"),
        )

    @property
    def wire_len(self) -> int:
        """Bytes before the payload: 64, or 128 with the hop extension."""
        return HEADER_LEN + (EXT_LEN if self.flags & FLAG_HOP_EXT else 0)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> RequestHeader:
        """Decode and validate a request header: 64 bytes, or 128 when it is flagged with the
        hop extension (see :attr:`wire_len`)."""
        b = bytes(buf)
        if len(b) not in (HEADER_LEN, HEADER_LEN + EXT_LEN):
            raise HeaderError("ShortHeader", f"a header is 64 bytes (128 with the extension), got {len(b)}")
        (
            magic,
            version,
            flags,
            tenant,
            hop_count,
            hop_index,
            request_id,
            payload_len,
            reply_device,
            budget,
        ) = _REQ_FIXED.unpack_from(b, 0)
        if magic != REQUEST_MAGIC:
            raise HeaderError("BadMagic", f"bad magic 0x{magic:04x} (expected 0x{REQUEST_MAGIC:04x})")
        if version != VERSION:
            raise HeaderError(
                "BadVersion",
                f"unsupported protocol version {version} (this client speaks {VERSION})",
                request_id=request_id,
            )
        ext = bool(flags & FLAG_HOP_EXT)
        if ext and len(b) < HEADER_LEN + EXT_LEN:
            raise HeaderError(
                "ShortHeader",
                "a header flagged with the hop extension needs 128 bytes",
                request_id=request_id,
            )
        hops = tuple(Hop(*_HOP.unpack_from(b, _HOPS_OFFSET + i * _HOP.size)) for i in range(HEADER_HOPS))
        if ext:
            hops += tuple(Hop(*_HOP.unpack_from(b, HEADER_LEN + i * _HOP.size)) for i in range(HEADER_HOPS))
        if flags & ~_KNOWN_FLAGS:
            bits = flags & ~_KNOWN_FLAGS
            raise HeaderError("ReservedFlags", f"reserved flag bits set: 0x{bits:02x}", request_id=request_id)
        most = MAX_HOPS if ext else HEADER_HOPS
        if not 1 <= hop_count <= most:
            raise HeaderError(
                "BadHopCount", f"hop_count {hop_count} outside 1..={most}", request_id=request_id
            )
        # A forwarded direct-reply hop carries the caller's request id in the extension.
        both = FLAG_DIRECT_REPLY | FLAG_FORWARDED
        origin = ext and flags & both == both
        if ext and hop_count <= HEADER_HOPS and not origin:
            raise HeaderError(
                "NeedlessExtension",
                f"the hop extension flag is set but hop_count {hop_count} fits the header",
                request_id=request_id,
            )
        if hop_index >= hop_count:
            raise HeaderError(
                "BadHopIndex",
                f"hop_index {hop_index} not below hop_count {hop_count}",
                request_id=request_id,
            )
        reserved = HEADER_LEN + HEADER_HOPS * _HOP.size + (8 if origin else 0)
        if ext and any(b[reserved:]):
            raise HeaderError("ReservedBytes", "reserved bytes are not zero", request_id=request_id)
        for i in range(hop_count, len(hops)):
            if not hops[i].is_zero:
                raise HeaderError("UnusedHop", f"hop {i} beyond hop_count is not zero", request_id=request_id)
        return cls(
            request_id=request_id,
            payload_len=payload_len,
            tenant=tenant,
            hop_count=hop_count,
            hop_index=hop_index,
            reply_device=reply_device,
            flags=flags,
            budget_us=int.from_bytes(budget, "little"),
            hops=hops,
            origin_id=int.from_bytes(b[HEADER_LEN + 40 : HEADER_LEN + 48], "little") if origin else 0,
        )


def encode_request(
    request_id: int,
    function: int,
    payload: bytes | bytearray | memoryview = b"",
    *,
    param: int = 0,
    tenant: int = 0,
) -> bytes:
    """Header plus payload of a single-hop request, ready to write to a socket."""
    payload = bytes(payload)
    header = RequestHeader.single(request_id, function, param, len(payload), tenant).encode()
    return header + payload


@dataclass(frozen=True)
class HopTime:
    """What one hop of a chain cost (from an answer to a request flagged ``FLAG_TRACE``)."""

    device: int
    ran: bool
    queue_ns: int
    exec_ns: int

    @classmethod
    def decode_block(cls, buf: bytes | bytearray | memoryview) -> tuple[HopTime, ...]:
        """The 64-byte per-hop timings block: eight hops."""
        b = bytes(buf)
        if len(b) != 64:
            raise HeaderError("ShortHeader", f"a timings block is 64 bytes, got {len(b)}")
        out = []
        for i in range(MAX_HOPS):
            device, ran, queue_us, exec_ns = _HOP_TIME.unpack_from(b, i * 8)
            out.append(cls(device, bool(ran), queue_us * 1000, exec_ns))
        return tuple(out)


@dataclass(frozen=True)
class ResponseHeader:
    """A response header, including the node's timing of the request (nanoseconds).

    ``status`` is a :class:`Status`. ``reassembly_ns`` runs from the first header byte seen to
    the request being complete; ``queue_ns`` from complete to execution start; ``exec_ns`` is
    the function's execution time. ``detail`` is status-specific (e.g. the maximum payload for
    ``TOO_LARGE``), else 0.
    """

    status: Status
    request_id: int = 0
    payload_len: int = 0
    hop_index: int = 0
    device: int = DEVICE_SELF
    tenant: int = 0
    reassembly_ns: int = 0
    queue_ns: int = 0
    exec_ns: int = 0
    detail: int = 0
    #: Response flags as received (bit 0: a per-hop timings block follows).
    flags: int = 0
    #: Per-hop timings, when the request asked for them (``FLAG_TRACE``).
    hop_times: tuple[HopTime, ...] | None = None

    @property
    def receipt(self) -> bool:
        """A receipt: the answer itself went to the request's direct reply endpoint."""
        return bool(self.flags & RESP_FLAG_RECEIPT)

    @property
    def has_hop_times(self) -> bool:
        """A per-hop timings block follows this header on the wire (64 bytes, before the payload)."""
        return bool(self.flags & RESP_FLAG_HOP_TIMES) and self.hop_times is None

    @property
    def node_ns(self) -> int:
        """Total time the node accounted for: reassembly + queueing + execution."""
        return self.reassembly_ns + self.queue_ns + self.exec_ns

    def encode(self) -> bytes:
        _check_range("status", int(self.status), _U16)
        _check_range("hop_index", self.hop_index, _U8)
        _check_range("device", self.device, _U8)
        _check_range("request_id", self.request_id, _U64)
        _check_range("payload_len", self.payload_len, _U32)
        _check_range("tenant", self.tenant, _U16)
        for name in ("reassembly_ns", "queue_ns", "exec_ns", "detail"):
            _check_range(name, getattr(self, name), _U64)
        return _RESP.pack(
            RESPONSE_MAGIC,
            VERSION,
            self.flags & RESP_FLAG_RECEIPT,  # the timings block is not encoded here
            int(self.status),
            self.hop_index,
            self.device,
            self.request_id,
            self.payload_len,
            self.tenant,
            b"\0\0",
            self.reassembly_ns,
            self.queue_ns,
            self.exec_ns,
            self.detail,
            b"\0" * 8,
        )

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview) -> ResponseHeader:
        """Decode a 64-byte response header; reserved fields are ignored."""
        return cls.decode_from(_header_bytes(buf))

    @classmethod
    def decode_from(cls, buf: bytes | bytearray | memoryview, offset: int = 0) -> ResponseHeader:
        """Decode the 64-byte response header at ``buf[offset:]`` in place (no copy; the
        client's read path). The caller guarantees 64 bytes are there."""
        (
            magic,
            version,
            flags,
            status,
            hop_index,
            device,
            request_id,
            payload_len,
            tenant,
            _res1,
            reassembly_ns,
            queue_ns,
            exec_ns,
            detail,
            _res2,
        ) = _RESP.unpack_from(buf, offset)
        if magic != RESPONSE_MAGIC:
            raise HeaderError(
                "BadMagic", f"bad response magic 0x{magic:04x} (expected 0x{RESPONSE_MAGIC:04x})"
            )
        if version != VERSION:
            raise HeaderError("BadVersion", f"unsupported response version {version}", request_id=request_id)
        if status >= len(_STATUSES):
            raise HeaderError("UnknownStatus", f"unknown status code {status}", request_id=request_id)
        # Built without the frozen dataclass's per-field __setattr__ (a few µs per answer);
        # every field is set, as __init__ would.
        h = object.__new__(cls)
        h.__dict__.update(
            status=_STATUSES[status],
            request_id=request_id,
            payload_len=payload_len,
            hop_index=hop_index,
            device=device,
            tenant=tenant,
            reassembly_ns=reassembly_ns,
            queue_ns=queue_ns,
            exec_ns=exec_ns,
            detail=detail,
            flags=flags,
            hop_times=None,
        )
        return h
