"""Seed each fuzz target's corpus (fuzz/corpus/TARGET/) from the protocol
vectors (docs/vectors/headers.json). Run by `make fuzz`; idempotent (a seed
is named by its content's hash). Standard library only.

- proto_headers: every request and response vector as it is on the wire.
- accel_inputs: for every hop of every request vector, its function and
  parameter (the target's first 9 bytes), a cut at half, then the vector's
  bytes as payload.
- core_engine: the vectors' bytes as they are; the target reads its input
  as a sequence of choices, so a vector is only a start.
- node_driver: a preamble of choices (a segmentation seed, no shutdown,
  three buffers, segments of up to 1,400 bytes, four clients: well-behaved,
  stops reading, staller, garbage), then a vector's bytes as the rest of the
  choices. (Left to the vectors alone, their many zero bytes pick 1-byte
  segments, a scenario of millions of events.)
"""

import hashlib
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent
VECTORS = ROOT.parent / "docs" / "vectors" / "headers.json"


def put(target: str, data: bytes) -> None:
    d = ROOT / "corpus" / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def main() -> None:
    vectors = json.loads(VECTORS.read_text())
    wire = [bytes.fromhex(v["hex"]) for v in vectors["requests"] + vectors["responses"]]
    preamble = bytes(range(1, 9)) + bytes([1, 2]) + struct.pack("<H", 1399) + bytes([3, 0, 4, 1, 2])
    for b in wire:
        put("proto_headers", b)
        put("core_engine", b)
        put("node_driver", preamble + b)
    for v in vectors["requests"]:
        payload = bytes.fromhex(v["hex"])
        for hop in v["fields"]["hops"]:
            put("accel_inputs", struct.pack("<BQB", hop["function"], hop["param"], 128) + payload)
    for t in ("proto_headers", "core_engine", "node_driver", "accel_inputs"):
        print(f"{t}: {len(list((ROOT / 'corpus' / t).iterdir()))} seeds")


if __name__ == "__main__":
    main()
