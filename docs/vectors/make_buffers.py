"""Regenerate buffers.json: requests that use named buffers (docs/protocol.md, "Named buffers").

Written from the spec's tables with `struct`, independently of the Rust (crates/proto) and
Python (offrac.buffers, offrac.collectives) encoders, which are checked against it.
Run: python3 docs/vectors/make_buffers.py > docs/vectors/buffers.json
"""

import json
import struct

FN_BUFFER = 0xFF
FN_GEMV = 18
FN_COLLECTIVE = 251
SELF = 0xFF
PUT, TEE, GET, DROP, CREATE = 1, 2, 3, 4, 5


def param(op, name):
    return op << 32 | name


def request(request_id, hops, payload):
    """A request header (no extension) followed by its payload."""
    h = struct.pack("<HBBHBBQIB3s", 0x4F51, 1, 0, 0, len(hops), 0, request_id, len(payload), SELF, b"\0\0\0")
    for f, d, p in hops + [(0, 0, 0)] * (4 - len(hops)):
        h += struct.pack("<BBQ", f, d, p)
    assert len(h) == 64
    return h + payload


def vector(name, request_id, hops, payload):
    return {
        "name": name,
        "hops": [{"function": f, "device": d, "param": p} for f, d, p in hops],
        "payload_hex": payload.hex(),
        "hex": request(request_id, hops, payload).hex(),
    }


def members(devices):
    m = bytearray(32)
    for d in devices:
        m[d // 8] |= 1 << (d % 8)
    return bytes(m)


# all-reduce (op 3) sum (redop 1) of 8 float32 on devices 0-3, tag 9, 5 s; byte 7 = 3:
# input from buffer 2 (param bits 0-31), output kept as buffer 3 (bits 32-63)
CALL = struct.pack("<BBBBBBBBQIIII32s", 1, 3, 1, 1, 0, 0, 0, 3, 9, 8, 0, 0, 5000, members([0, 1, 2, 3]))

# Collective hops (docs/protocol.md, "Collective hops"): a scatter (op 5) of 2 float32 per
# rank from root 0 and a reduce (op 2) sum of 4 float32 to root 0, devices 0-1, tag 0 (the
# hop's param bits 32-63 add the call's number), 5 s, byte 7 = 0; kept as buffers 0xC0110000
# and 0xC0110001
SCATTER = struct.pack("<BBBBBBBBQIIII32s", 1, 5, 1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 5000, members([0, 1]))
REDUCE = struct.pack("<BBBBBBBBQIIII32s", 1, 2, 1, 1, 0, 0, 0, 0, 0, 4, 0, 0, 5000, members([0, 1]))


def hop_param(descriptor, tag):
    return tag << 32 | descriptor


VECTORS = [
    vector("put: keep 8 bytes as buffer 7", 1, [(FN_BUFFER, SELF, param(PUT, 7))], bytes(range(8))),
    vector(
        "get then gemv: buffer 7 (a 1x2 matrix) ahead of the 2-vector [1, 2]",
        2,
        [(FN_BUFFER, SELF, param(GET, 7)), (FN_GEMV, SELF, 2)],
        struct.pack("<2f", 1.0, 2.0),
    ),
    vector(
        "tee on device 3 mid-chain, then echo",
        3,
        [(0, SELF, 0), (FN_BUFFER, 3, param(TEE, 0xFFFF_FFFF)), (0, 3, 0)],
        b"abc",
    ),
    vector("drop buffer 7", 4, [(FN_BUFFER, SELF, param(DROP, 7))], b""),
    vector(
        "collective call: input from buffer 2, output kept as buffer 3",
        5,
        [(FN_COLLECTIVE, SELF, 3 << 32 | 2)],
        CALL,
    ),
    vector(
        "create: keep a scatter's call descriptor as buffer 0xC0110000 unless it is kept",
        6,
        [(FN_BUFFER, SELF, param(CREATE, 0xC011_0000))],
        SCATTER,
    ),
    vector(
        "collective hops: scatter (tag 7) the root's 4 floats, buffer 1 ahead, gemv, reduce (tag 8)",
        7,
        [
            (FN_COLLECTIVE, SELF, hop_param(0xC011_0000, 7)),
            (FN_BUFFER, SELF, param(GET, 1)),
            (FN_GEMV, SELF, 2),
            (FN_COLLECTIVE, SELF, hop_param(0xC011_0001, 8)),
        ],
        struct.pack("<4f", 1.0, 2.0, 3.0, 4.0),
    ),
]

if __name__ == "__main__":
    print(json.dumps({"version": 1, "vectors": VECTORS}, indent=1))
