"""Regenerate headers.json from the field tables in docs/protocol.md.

Written directly from the spec with `struct`, independently of the Rust and
Python codecs, so both are checked against a third reading of the tables.
Run: python3 docs/vectors/make_headers.py > docs/vectors/headers.json
"""

import json
import struct

REQ = "<HBBHBBQIB"  # magic version flags tenant hop_count hop_index request_id payload_len reply_device, then budget_us (u24)
HOP = "<BBQ"
RESP = "<HBBHBBQIH2xQQQQ8x"


def request(valid, error, *, magic=0x4F51, version=1, flags=0, tenant=0, hop_count=1, hop_index=0,
            request_id=0, payload_len=0, reply_device=0xFF, budget_us=0, hops=((1, 0xFF, 16),), ext_reserved=b"",
            origin_id=None, note=""):
    """A 64-byte header, or 128 bytes (header + hop extension) when flags bit 0 is set."""
    b = struct.pack(REQ, magic, version, flags, tenant, hop_count, hop_index, request_id, payload_len, reply_device)
    b += budget_us.to_bytes(3, "little")
    ext = flags & 1
    hop_list = list(hops) + [(0, 0, 0)] * ((8 if ext else 4) - len(hops))
    for f, d, p in hop_list[:4]:
        b += struct.pack(HOP, f, d, p)
    assert len(b) == 64
    if ext:
        for f, d, p in hop_list[4:]:
            b += struct.pack(HOP, f, d, p)
        # Extension bytes 40..48: origin_id (on FORWARDED + DIRECT_REPLY hops), then reserved.
        tail = struct.pack("<Q", origin_id) + ext_reserved if origin_id is not None else ext_reserved
        b += tail.ljust(24, b"\0")
        assert len(b) == 128
    fields = dict(flags=flags, tenant=tenant, hop_count=hop_count, hop_index=hop_index, request_id=request_id,
                  payload_len=payload_len, reply_device=reply_device, budget_us=budget_us,
                  hops=[dict(function=f, device=d, param=p) for f, d, p in hop_list])
    if origin_id is not None:
        fields["origin_id"] = origin_id
    return dict(note=note, hex=b.hex(), valid=valid, error=error, fields=fields)


def response(status, request_id, payload_len, *, hop_index=0, device=0xFF, tenant=0, reassembly_ns=0,
             queue_ns=0, exec_ns=0, detail=0, flags=None, note=""):
    b = struct.pack(RESP, 0x5352, 1, flags or 0, status, hop_index, device, request_id, payload_len, tenant,
                    reassembly_ns, queue_ns, exec_ns, detail)
    assert len(b) == 64
    out = dict(note=note, hex=b.hex(), fields=dict(status=status, hop_index=hop_index, device=device,
                request_id=request_id, payload_len=payload_len, tenant=tenant, reassembly_ns=reassembly_ns,
                queue_ns=queue_ns, exec_ns=exec_ns, detail=detail))
    if flags is not None:
        out["fields"]["flags"] = flags
    return out


requests = [
    request(True, None, request_id=1, payload_len=1024, hops=((1, 0xFF, 16),), note="top-k, K=16, 1 KiB"),
    request(True, None, request_id=0x0102030405060708, payload_len=4096, tenant=0xBEEF, hops=((2, 0xFF, 0),),
            note="logit, multi-byte ids show byte order"),
    request(True, None, request_id=2**64 - 1, payload_len=2**32 - 1, hop_count=4, hop_index=3, reply_device=7,
            hops=((3, 1, 0), (1, 2, 5), (0, 63, 2**64 - 1), (2, 0xFF, 1)), note="four-hop chain, extreme values"),
    request(True, None, request_id=9, payload_len=0, hops=((0, 0xFF, 0),), note="empty echo"),
    request(True, None, request_id=16, payload_len=8, budget_us=0x0A1B2C, hops=((2, 0xFF, 0),),
            note="a 662,316 us budget (24-bit little-endian at offset 21)"),
    request(True, None, request_id=17, payload_len=8, budget_us=2**24 - 1, hops=((2, 0xFF, 0),),
            note="the largest budget, about 16.8 s"),
    request(True, None, request_id=18, payload_len=0, hops=((253, 0xFF, 0),), note="describe (control function 253)"),
    request(True, None, request_id=19, payload_len=0, hops=((254, 0xFF, 255),),
            note="register a reply endpoint, any free id (control function 254)"),
    request(True, None, request_id=20, payload_len=3, reply_device=7, hops=((0, 0xFF, 0),),
            note="echo answered to reply endpoint 7"),
    request(False, "BadMagic", magic=0x1234, request_id=5, note="wrong magic: connection-fatal"),
    request(False, "BadVersion", version=2, request_id=6, note="wrong version: connection-fatal"),
    request(False, "ReservedFlags", flags=16, request_id=7, note="reserved flag set (bit 4)"),
    request(True, None, flags=2, request_id=21, payload_len=1, hops=((0, 0xFF, 0),),
            note="echo asking for per-hop timings (flags bit 1)"),
    request(False, "BadHopCount", hop_count=0, request_id=8, note="zero hops"),
    request(False, "BadHopCount", hop_count=5, request_id=8, note="five hops without the extension"),
    request(True, None, flags=1, request_id=10, payload_len=256, hop_count=6, hop_index=0,
            hops=((3, 0xFF, 0), (2, 1, 0), (0, 2, 0), (1, 3, 64), (1, 0xFF, 8), (0, 7, 2**64 - 1)),
            note="six-hop chain: header + hop extension (128 bytes)"),
    request(True, None, flags=1, request_id=11, payload_len=4, hop_count=8, hop_index=7,
            hops=tuple((i, i, i) for i in range(8)), note="eight hops, the last one next"),
    request(False, "BadHopCount", flags=1, hop_count=9, request_id=12, hops=tuple((0, 0xFF, 0) for _ in range(8)),
            note="nine hops"),
    request(False, "NeedlessExtension", flags=1, hop_count=4, request_id=13,
            hops=tuple((0, 0xFF, 0) for _ in range(4)), note="extension flag with a chain that fits the header"),
    request(False, "ReservedBytes", flags=1, hop_count=5, request_id=14, hops=tuple((0, 0xFF, 0) for _ in range(5)),
            ext_reserved=b"\0\0\1", note="non-zero reserved byte in the extension"),
    request(False, "UnusedHop", flags=1, hop_count=5, request_id=15,
            hops=tuple((0, 0xFF, 0) for _ in range(5)) + ((2, 0xFF, 0),), note="non-zero extension hop beyond hop_count"),
    request(False, "BadHopIndex", hop_count=2, hop_index=2, hops=((1, 0xFF, 1), (2, 0xFF, 0)), request_id=8,
            note="hop index past the chain"),
    request(False, "UnusedHop", hop_count=1, hops=((1, 0xFF, 1), (2, 0xFF, 0)), request_id=8,
            note="non-zero hop beyond hop_count"),
    request(True, None, flags=4, tenant=5, hop_count=2, request_id=21, payload_len=1024, reply_device=7,
            hops=((6, 1, 0), (7, 2, 0)),
            note="MapId on device 1 then SparseTransform on device 2, answer written directly to reply endpoint 7"
            " on the node that answers (flags bit 2)"),
    request(True, None, flags=13, tenant=5, hop_count=2, hop_index=1, request_id=3, payload_len=1024,
            reply_device=7, hops=((6, 1, 0), (7, 2, 0)), origin_id=21,
            note="the same request as device 1 forwards it to device 2: hop 1 next, the link's request id 3,"
            " flags bits 3 (forwarded) and 0: the hop extension carries the caller's request id 21"
            " (origin_id, extension bytes 40..48)"),
]

responses = [
    response(0, 1, 64, reassembly_ns=1500, queue_ns=250, exec_ns=1600, note="OK top-k result of 16 int32"),
    response(1, 0x0102030405060708, 0, note="BUSY"),
    response(3, 3, 11, detail=1 << 20, note="TOO_LARGE with the maximum in detail"),
    response(10, 2**64 - 1, 0, hop_index=3, device=2, tenant=0xBEEF, reassembly_ns=2**64 - 1,
             queue_ns=2**40, exec_ns=1, detail=42, note="extreme values"),
    response(0, 3, 0, hop_index=1, device=2, tenant=5, reassembly_ns=900, queue_ns=300, exec_ns=2100, flags=2,
             note="receipt from device 2: the answer to link request 3 went to reply endpoint 7 there"
             " (flags bit 1, no payload)"),
]

print(json.dumps(dict(requests=requests, responses=responses), indent=1))
