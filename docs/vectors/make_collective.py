"""Regenerate collective.json: collective descriptors (docs/protocol.md, "Collectives").

Written from the spec's table with `struct`, independently of the Rust
(crates/collective) and Python (offrac.collectives) codecs, which are checked against it.
Run: python3 docs/vectors/make_collective.py > docs/vectors/collective.json
"""

import json
import struct

# kind op dtype redop root algorithm src flags tag count step offset timeout_ms members
# (byte 7, "flags": 0 in a call's descriptor here; in a node-to-node message bit 0 asks for an answer)
DESC = "<BBBBBBBBQIIII32s"


def members(devices):
    m = bytearray(32)
    for d in devices:
        m[d // 8] |= 1 << (d % 8)
    return bytes(m)


def vector(name, fields, body=b"", error=None):
    b = struct.pack(DESC, *fields) + body
    v = {"name": name, "hex": b.hex()}
    if error is None:
        keys = [
            "kind",
            "op",
            "dtype",
            "redop",
            "root",
            "algorithm",
            "src",
            "flags",
            "tag",
            "count",
            "step",
            "offset",
            "timeout_ms",
        ]
        v["fields"] = dict(zip(keys, fields[:13], strict=True))
        v["members"] = [d for d in range(256) if fields[13][d // 8] >> (d % 8) & 1]
        v["body_hex"] = body.hex()
    else:
        v["error"] = error
    return v


VECTORS = [
    vector(
        "call: allreduce sum of 2 float32 on devices 0-3, 5 s",
        (1, 3, 1, 1, 0, 0, 0, 0, 1, 2, 0, 0, 5000, members([0, 1, 2, 3])),
        struct.pack("<2f", 1.5, -2.0),
    ),
    vector(
        "call: broadcast of 1 int32 from root rank 1 on devices 3 and 200, tree forced",
        (1, 1, 2, 0, 1, 2, 0, 0, 0xFFFF_FFFF_FFFF_FFFE, 1, 0, 0, 0, members([3, 200])),
    ),
    vector(
        "data: rank 2 sends 4 bytes of step 3 at offset 4096 (ring all-reduce, max)",
        (2, 3, 2, 2, 0, 3, 2, 0, 77, 4096, 3, 4096, 0, members([1, 4, 9])),
        struct.pack("<i", -7),
    ),
    vector(
        "ready: rank 0 takes step 1 of a gather",
        (3, 4, 1, 0, 0, 1, 0, 0, 5, 1000, 1, 0, 0, members([0, 1])),
    ),
    vector(
        "abort: rank 1 failed with UNREACHABLE (code 2 in offset)",
        (4, 3, 1, 1, 0, 4, 1, 0, 9, 8, 0, 2, 0, members([0, 1])),
        b"device 3 went down",
    ),
    vector(
        "data asking for an answer (byte 7 bit 0): rank 1 sends step 0 of a broadcast",
        (2, 1, 1, 0, 0, 1, 1, 1, 12, 1, 0, 0, 0, members([0, 1])),
        struct.pack("<f", 0.5),
    ),
    vector(
        "ready asking for an answer (byte 7 bit 0)",
        (3, 4, 1, 0, 0, 1, 0, 1, 5, 1000, 1, 0, 0, members([0, 1])),
    ),
    vector(
        "data with an undefined bit of byte 7",
        (2, 1, 1, 0, 0, 1, 1, 2, 12, 1, 0, 0, 0, members([0, 1])),
        struct.pack("<f", 0.5),
        error="byte 7",
    ),
    vector(
        "allreduce without a reduction",
        (1, 3, 1, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0, members([0])),
        error="reduction",
    ),
    vector(
        "gather with a reduction", (1, 4, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, members([0])), error="no reduction"
    ),
    vector("unknown kind 9", (9, 3, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, members([0])), error="kind"),
    vector(
        "unknown element type 3", (1, 3, 3, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, members([0])), error="element type"
    ),
    vector("reserved byte set", (1, 3, 1, 1, 0, 0, 0, 1, 1, 1, 0, 0, 0, members([0])), error="reserved"),
    {"name": "shorter than 64 bytes", "hex": "0103", "error": "shorter"},
]

print(json.dumps({"vectors": VECTORS}, indent=1))
