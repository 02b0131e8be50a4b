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
    "UnusedHop": 7,
}
# Errors only the hop extension (second beat) can show; the header parser does not see it.
EXTENSION_ERRORS = {"ReservedBytes", "UnusedHop"}


@dataclass
class Decoded:
    error: int
    error_hop: int = 0
    fields: dict[str, int] = field(default_factory=dict)
    hops: list[tuple[int, int, int]] = field(default_factory=list)  # (function, device, param)


def decode_request(b: bytes) -> Decoded:
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
    hops = [
        (b[24 + 10 * i], b[25 + 10 * i], int.from_bytes(b[26 + 10 * i : 34 + 10 * i], "little"))
        for i in range(HEADER_HOPS)
    ]
    has_ext = bool(flags & FLAG_HOP_EXT)
    carries_origin = bool(flags & FLAG_FORWARDED) and bool(flags & FLAG_DIRECT_REPLY)
    unused = [i for i in range(hop_count, HEADER_HOPS) if hops[i] != (0, 0, 0)]

    def result(name: str | None, hop: int = 0) -> Decoded:
        return Decoded(ERRORS[name], hop, fields, hops)

    if magic != REQUEST_MAGIC:
        return result("BadMagic")
    if version != VERSION:
        return result("BadVersion")
    if flags & ~KNOWN_FLAGS:
        return result("ReservedFlags")
    if hop_count == 0 or hop_count > (8 if has_ext else HEADER_HOPS):
        return result("BadHopCount")
    if has_ext and hop_count <= HEADER_HOPS and not carries_origin:
        return result("NeedlessExtension")
    if hop_index >= hop_count:
        return result("BadHopIndex")
    if unused:
        return result("UnusedHop", unused[0])
    return result(None)


def encode_request(fields: dict[str, int], hops: list[tuple[int, int, int]]) -> bytes:
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
    for function, device, param in hops:
        b += struct.pack("<BBQ", function, device, param)
    assert len(b) == 64
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


def random_valid_request(rng: random.Random) -> tuple[dict[str, int], list[tuple[int, int, int]]]:
    """Fields of a header the decoder accepts, spread over the whole valid space."""
    ext = rng.random() < 0.3
    hop_count = rng.randint(1, 8) if ext else rng.randint(1, HEADER_HOPS)
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
    hops = [(edge(8), edge(8), edge(64)) if i < hop_count else (0, 0, 0) for i in range(HEADER_HOPS)]
    return fields, hops


def mutate(rng: random.Random, b: bytes) -> bytes:
    """A header with one to three bytes of its first 64 changed, favouring the checked ones."""
    out = bytearray(b)
    for _ in range(rng.randint(1, 3)):
        pos = rng.choice([0, 1, 2, 3, 3, 6, 6, 7, 7, rng.randrange(24, 64), rng.randrange(64)])
        out[pos] = rng.choice([0, 1, 4, 5, 8, 9, 0xFF, rng.getrandbits(8)])
    return bytes(out)
