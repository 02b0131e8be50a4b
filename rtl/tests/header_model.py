"""A Python model of the 64-byte header codec, as the RTL implements it.

Written from docs/protocol.md and the check order of RequestHeader::decode
(crates/proto/src/request.rs); it is itself checked against the vector file
in test_rtl.py, so the testbenches can compare the RTL with it on random
headers the vectors do not cover.
"""

from __future__ import annotations

import json
import random
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VECTORS: dict[str, list[dict[str, Any]]] = json.loads(
    (REPO / "docs" / "vectors" / "headers.json").read_text()
)

REQUEST_MAGIC = 0x4F51
RESPONSE_MAGIC = 0x5352
VERSION = 1
HEADER_HOPS = 4
MAX_HOPS = 8
ORIGIN_OFFSET = 40  # in the hop extension
FLAG_HOP_EXT = 0x01
FLAG_TRACE = 0x02
FLAG_DIRECT_REPLY = 0x04
FLAG_FORWARDED = 0x08
KNOWN_FLAGS = 0x0F

# m_hdr_error codes of offrac_req_header_parse.v, named as the vectors name errors.
ERRORS = {
    None: 0,
    "BadMagic": 1,
    "BadVersion": 2,
    "ReservedFlags": 3,
    "BadHopCount": 4,
    "NeedlessExtension": 5,
    "BadHopIndex": 6,
    "UnusedHop": 7,  # error hop 0..3 in the header, 4..7 in the extension
    "ReservedBytes": 8,
}
FATAL = {ERRORS["BadMagic"], ERRORS["BadVersion"]}


@dataclass
class Decoded:
    error: int
    error_hop: int = 0
    fields: dict[str, int] = field(default_factory=dict)
    hops: list[tuple[int, int, int]] = field(default_factory=list)  # (function, device, param)
    origin_id: int = 0


def hop_at(b: bytes, off: int) -> tuple[int, int, int]:
    return (b[off], b[off + 1], int.from_bytes(b[off + 2 : off + 10], "little"))


def decode_header(b: bytes) -> Decoded:
    """Decode one 64-byte header: fields always (the RTL shows them even on error), first error wins."""
    assert len(b) == 64
    magic, version, flags, tenant, hop_count, hop_index, request_id, payload_len = struct.unpack_from(
        "<HBBHBBQI", b, 0
    )
    fields = {
        "flags": flags,
        "tenant": tenant,
        "hop_count": hop_count,
        "hop_index": hop_index,
        "request_id": request_id,
        "payload_len": payload_len,
        "reply_device": b[20],
        "budget_us": int.from_bytes(b[21:24], "little"),
    }
    hops = [hop_at(b, 24 + 10 * i) for i in range(HEADER_HOPS)] + [(0, 0, 0)] * HEADER_HOPS
    has_ext = bool(flags & FLAG_HOP_EXT)
    unused = [i for i in range(hop_count, HEADER_HOPS) if hops[i] != (0, 0, 0)]

    def result(name: str | None, hop: int = 0) -> Decoded:
        return Decoded(ERRORS[name], hop, fields, hops)

    if magic != REQUEST_MAGIC:
        return result("BadMagic")
    if version != VERSION:
        return result("BadVersion")
    if flags & ~KNOWN_FLAGS:
        return result("ReservedFlags")
    if hop_count == 0 or hop_count > (MAX_HOPS if has_ext else HEADER_HOPS):
        return result("BadHopCount")
    if has_ext and hop_count <= HEADER_HOPS and not carries_origin(flags):
        return result("NeedlessExtension")
    if hop_index >= hop_count:
        return result("BadHopIndex")
    if unused:
        return result("UnusedHop", unused[0])
    return result(None)


def carries_origin(flags: int) -> bool:
    return bool(flags & FLAG_FORWARDED) and bool(flags & FLAG_DIRECT_REPLY)


def wire_beats(header: bytes) -> int:
    """Beats the parser takes for a request: the extension follows a flagged header unless it is fatal."""
    d = decode_header(header[:64])
    return 2 if d.fields["flags"] & FLAG_HOP_EXT and d.error not in FATAL else 1


def decode_request(b: bytes) -> Decoded:
    """Decode a header and, when it is flagged, its extension (`b` is 64 or 128 bytes, as wire_beats says).

    The header's error wins; an extension is still shown (hops 4..7, origin_id) as it came.
    Then decode_ext's order: reserved bytes, then the first non-zero hop past hop_count.
    """
    assert len(b) == 64 * wire_beats(b), len(b)
    d = decode_header(b[:64])
    if len(b) == 64:
        return d
    ext = b[64:]
    d.hops[HEADER_HOPS:] = [hop_at(ext, 10 * i) for i in range(HEADER_HOPS)]
    origin = carries_origin(d.fields["flags"])
    if origin:
        d.origin_id = int.from_bytes(ext[ORIGIN_OFFSET : ORIGIN_OFFSET + 8], "little")
    if d.error:
        return d
    if any(ext[ORIGIN_OFFSET + 8 * origin :]):
        d.error = ERRORS["ReservedBytes"]
        return d
    unused = [i for i in range(d.fields["hop_count"], MAX_HOPS) if d.hops[i] != (0, 0, 0)]
    if unused:
        d.error, d.error_hop = ERRORS["UnusedHop"], unused[0]
    return d


def padded_hops(hops: list[dict[str, int]]) -> list[tuple[int, int, int]]:
    """A vector's hops (four, or eight with an extension) as the eight the parser shows."""
    return [(h["function"], h["device"], h["param"]) for h in hops] + [(0, 0, 0)] * (MAX_HOPS - len(hops))


def encode_request(fields: dict[str, int], hops: list[tuple[int, int, int]], origin_id: int = 0) -> bytes:
    """The header, and the extension (hops 4..7, origin_id) when `fields` flag it."""
    b = struct.pack(
        "<HBBHBBQIB",
        REQUEST_MAGIC,
        VERSION,
        fields["flags"],
        fields["tenant"],
        fields["hop_count"],
        fields["hop_index"],
        fields["request_id"],
        fields["payload_len"],
        fields["reply_device"],
    ) + fields["budget_us"].to_bytes(3, "little")
    for function, device, param in hops[:HEADER_HOPS]:
        b += struct.pack("<BBQ", function, device, param)
    assert len(b) == 64
    if fields["flags"] & FLAG_HOP_EXT:
        for function, device, param in hops[HEADER_HOPS:]:
            b += struct.pack("<BBQ", function, device, param)
        b += struct.pack("<Q", origin_id) + bytes(16)
        assert len(b) == 128
    else:
        assert hops[HEADER_HOPS:] == [(0, 0, 0)] * HEADER_HOPS and origin_id == 0
    return b


RESPONSE_FIELDS = (
    "status",
    "hop_index",
    "device",
    "request_id",
    "payload_len",
    "tenant",
    "reassembly_ns",
    "queue_ns",
    "exec_ns",
    "detail",
    "flags",
)


def encode_response(f: dict[str, int]) -> bytes:
    b = struct.pack(
        "<HBBHBBQIHHQQQQQ",
        RESPONSE_MAGIC,
        VERSION,
        f.get("flags", 0) & 0x03,
        f["status"],
        f["hop_index"],
        f["device"],
        f["request_id"],
        f["payload_len"],
        f["tenant"],
        0,
        f["reassembly_ns"],
        f["queue_ns"],
        f["exec_ns"],
        f["detail"],
        0,
    )
    assert len(b) == 64
    return b


def random_valid_request(rng: random.Random) -> tuple[dict[str, int], list[tuple[int, int, int]], int]:
    """Fields, eight hops and origin_id of a request the decoder accepts, spread over the valid space."""
    ext = rng.random() < 0.4
    hop_count = rng.randint(1, MAX_HOPS) if ext else rng.randint(1, HEADER_HOPS)
    flags = rng.choice([0, FLAG_TRACE]) | rng.choice([0, FLAG_DIRECT_REPLY]) | rng.choice([0, FLAG_FORWARDED])
    if ext and hop_count <= HEADER_HOPS:
        flags |= FLAG_DIRECT_REPLY | FLAG_FORWARDED  # the only reason for a short chain's extension
    if ext:
        flags |= FLAG_HOP_EXT

    def edge(bits: int) -> int:
        return rng.choice([0, 1, (1 << bits) - 1, rng.getrandbits(bits)])

    fields = {
        "flags": flags,
        "tenant": edge(16),
        "hop_count": hop_count,
        "hop_index": rng.randrange(hop_count),
        "request_id": edge(64),
        "payload_len": edge(32),
        "reply_device": edge(8),
        "budget_us": edge(24),
    }
    hops = [(edge(8), edge(8), edge(64)) if i < hop_count else (0, 0, 0) for i in range(MAX_HOPS)]
    origin_id = edge(64) if ext and carries_origin(flags) else 0
    return fields, hops, origin_id


def mutate(rng: random.Random, b: bytes) -> bytes:
    """A request with one to three bytes changed, favouring the checked ones, as the parser would take it.

    A change to the flags can add or remove the extension beat: the result is cut to the header, or
    given a (mostly zero) extension, so that it is the beats wire_beats says.
    """
    out = bytearray(b)
    for _ in range(rng.randint(1, 3)):
        pos = rng.choice(
            [0, 1, 2, 3, 3, 6, 6, 7, 7, rng.randrange(24, 64), rng.randrange(64)]
            + (
                [rng.randrange(64, 128), rng.randrange(104, 128), rng.choice([104, 112, 127])]
                if len(b) > 64
                else []
            )
        )
        out[pos] = rng.choice([0, 1, 4, 5, 8, 9, 0xFF, rng.getrandbits(8)])
    if wire_beats(bytes(out)) == 1:
        return bytes(out[:64])
    if len(out) == 64:
        ext = bytearray(64)
        if rng.random() < 0.5:
            ext[rng.randrange(64)] = rng.getrandbits(8)
        out += ext
    return bytes(out)
