"""Regenerate control.json: control requests (docs/protocol.md, "Control requests").

Written from the spec's table with `struct`, `hmac` and `hashlib`, independently of the
Rust (crates/control) and Python (offrac.control) codecs, which are checked against it.
Run: python3 docs/vectors/make_control.py > docs/vectors/control.json
"""

import hashlib
import hmac
import json
import struct

ENV = "<BBHIQQ8x"  # op reserved tenant body_len timestamp_ms nonce reserved[8]
REQ = "<HBBHBBQIB"  # the request header's fixed part (see make_headers.py)
HOP = "<BBQ"
FN_CONTROL = 0xFC


def envelope(op, body, tenant, timestamp_ms, nonce, key, *, tamper=None):
    signed = struct.pack(ENV, op, 0, tenant, len(body), timestamp_ms, nonce) + body
    mac = hmac.new(key, signed, hashlib.sha256).digest()
    b = bytearray(signed + mac)
    if tamper is not None:
        b[tamper] ^= 1
    return bytes(b)


def header(request_id, payload_len, tenant):
    b = struct.pack(REQ, 0x4F51, 1, 0, tenant, 1, 0, request_id, payload_len, 0xFF)
    b += (0).to_bytes(3, "little")
    b += struct.pack(HOP, FN_CONTROL, 0xFF, 0) + bytes(30)
    assert len(b) == 64
    return b


KEY = bytes(range(16))
DIGEST = hashlib.sha256(b"\0asm\x01\0\0\0").digest()  # the empty module's digest
TS = 1_764_000_000_000


def vector(note, op, op_fields, body, *, tenant=1, nonce=1, key=KEY, tamper=None, valid=True, mac_ok=True,
           error=None):
    env = envelope(op, body, tenant, TS, nonce, key, tamper=tamper)
    nonce = struct.unpack_from("<Q", env, 16)[0]  # as sent (after any tampering)
    return dict(note=note, key=KEY.hex(), tenant=tenant, timestamp_ms=TS, nonce=nonce, op=op_fields,
                envelope=env.hex(), request=(header(100 + nonce, len(env), tenant) + env).hex(),
                valid=valid, mac_ok=mac_ok, error=error)


vectors = [
    vector("LIST", 3, dict(kind="list"), b""),
    vector("UPLOAD the empty module (8 bytes)", 1, dict(kind="upload", module="0061736d01000000"),
           b"\0asm\x01\0\0\0", nonce=2),
    vector("SWAP slot 2 to the built-in logit (2)", 2, dict(kind="swap", slot=2, function=2, wasm=None),
           struct.pack("<HBB", 2, 2, 0), nonce=3),
    vector("SWAP slot 1 to a module served as function 130", 2,
           dict(kind="swap", slot=1, function=130, wasm=DIGEST.hex()),
           struct.pack("<HBB", 1, 130, 1) + DIGEST, nonce=4),
    vector("UNLOAD a module", 4, dict(kind="unload", digest=DIGEST.hex()), DIGEST, nonce=5),
    vector("UNLOAD with force: swap the slots running it out first", 4,
           dict(kind="unload", digest=DIGEST.hex(), force=True), DIGEST + b"\x01", nonce=13),
    vector("UNLOAD with a flags byte of 2 (MALFORMED)", 4, None, DIGEST + b"\x02", nonce=14, valid=False,
           mac_ok=False, error="Body"),
    vector("REPLICATE the built-in spin (5) twice", 6, dict(kind="replicate", n=2, function=5, wasm=None),
           struct.pack("<HBB", 2, 5, 0), nonce=15),
    vector("REPLICATE a module served as function 130, once", 6,
           dict(kind="replicate", n=1, function=130, wasm=DIGEST.hex()),
           struct.pack("<HBB", 1, 130, 1) + DIGEST, nonce=16),
    vector("SHRINK spin (5) to one spare slot", 7, dict(kind="shrink", keep=1, function=5),
           struct.pack("<HBB", 1, 5, 0), nonce=18),
    vector("SHRINK with a nonzero reserved byte (MALFORMED)", 7, None, struct.pack("<HBB", 1, 5, 1), nonce=19,
           valid=False, mac_ok=False, error="Body"),
    vector("RESIZE to the template \"dlrm\"", 8, dict(kind="resize", name="dlrm"), b"dlrm", nonce=20),
    vector("RESIZE with an empty name (MALFORMED)", 8, None, b"", nonce=21, valid=False, mac_ok=False, error="Body"),
    vector("REPLICATE of 0 instances (MALFORMED)", 6, None, struct.pack("<HBB", 0, 5, 0), nonce=17, valid=False,
           mac_ok=False, error="Body"),
    vector("HELLO: attribute the data connection to tenant 1", 5, dict(kind="hello"), b"", nonce=10),
    vector("HELLO for tenant 7", 5, dict(kind="hello"), b"", tenant=7, nonce=11),
    vector("HELLO of a node on a link to another (tenant 0xFFFF, signed with the node key)", 5, dict(kind="hello"),
           b"", tenant=0xFFFF, nonce=13),
    vector("HELLO with a body (MALFORMED)", 5, None, b"x", nonce=12, valid=False, mac_ok=False, error="Body"),
    vector("LIST signed with another key: decodes, MAC fails (UNAUTHORIZED)", 3, dict(kind="list"), b"",
           nonce=6, key=b"another key", mac_ok=False),
    vector("LIST with a flipped nonce bit after signing: MAC fails (UNAUTHORIZED)", 3, dict(kind="list"), b"",
           nonce=7, tamper=16, mac_ok=False),
    vector("unknown op 9 (MALFORMED)", 9, None, b"", nonce=8, valid=False, mac_ok=False, error="UnknownOp"),
    vector("SWAP of kind 2 (MALFORMED)", 2, None, struct.pack("<HBB", 1, 1, 2), nonce=9, valid=False,
           mac_ok=False, error="Body"),
]

print(json.dumps(dict(vectors=vectors), indent=1))
