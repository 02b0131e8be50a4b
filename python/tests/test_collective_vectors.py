"""The Python call encoder against docs/vectors/collective.json (written from the spec's
table by docs/vectors/make_collective.py)."""

from __future__ import annotations

import json
from pathlib import Path

from offrac.collectives import encode_call

VECTORS = Path(__file__).resolve().parents[2] / "docs" / "vectors" / "collective.json"


def test_calls_encode_as_the_vectors() -> None:
    calls = [v for v in json.loads(VECTORS.read_text())["vectors"] if v.get("fields", {}).get("kind") == 1]
    assert len(calls) >= 2
    for v in calls:
        f = v["fields"]
        desc = encode_call(
            f["op"],
            f["dtype"],
            f["redop"],
            f["root"],
            f["algorithm"],
            f["tag"],
            f["count"],
            f["timeout_ms"],
            v["members"],
        )
        assert (desc + bytes.fromhex(v["body_hex"])).hex() == v["hex"], v["name"]
