"""The Python encoders of named-buffer requests against docs/vectors/buffers.json (written from
the spec's tables by docs/vectors/make_buffers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from offrac import Step
from offrac.buffers import create, drop, keep, load, tee
from offrac.collectives import CALL_FROM_BUFFER, CALL_KEEP, FN_COLLECTIVE, encode_call, hop_param
from offrac.protocol import Hop, RequestHeader

VECTORS = Path(__file__).resolve().parents[2] / "docs" / "vectors" / "buffers.json"


def test_buffer_requests_match_the_vectors() -> None:
    vectors = json.loads(VECTORS.read_text())["vectors"]
    # The same requests built with offrac.buffers' steps and offrac.collectives' encoder.
    ours: list[tuple[list[Hop], bytes]] = [
        ([keep(7).hop()], bytes(range(8))),
        ([load(7).hop(), Step("gemv", cols=2).hop()], np.array([1.0, 2.0], "<f4").tobytes()),
        ([Step("echo").hop(), tee(0xFFFF_FFFF, device=3).hop(), Step("echo", device=3).hop()], b"abc"),
        ([drop(7).hop()], b""),
        (
            [Hop.local(251, 3 << 32 | 2)],
            encode_call(3, 1, 1, 0, 0, 9, 8, 5000, [0, 1, 2, 3], CALL_FROM_BUFFER | CALL_KEEP),
        ),
        ([create(0xC011_0000).hop()], encode_call(5, 1, 0, 0, 0, 0, 2, 5000, [0, 1])),
        (
            [
                Step(FN_COLLECTIVE, param=hop_param(0xC011_0000, 7)).hop(),
                load(1).hop(),
                Step("gemv", cols=2).hop(),
                Step(FN_COLLECTIVE, param=hop_param(0xC011_0001, 8)).hop(),
            ],
            np.array([1.0, 2.0, 3.0, 4.0], "<f4").tobytes(),
        ),
    ]
    assert len(vectors) == len(ours)
    for i, (v, (hops, payload)) in enumerate(zip(vectors, ours, strict=True)):
        assert [(h.function, h.device, h.param) for h in hops] == [
            (h["function"], h["device"], h["param"]) for h in v["hops"]
        ], v["name"]
        assert payload.hex() == v["payload_hex"], v["name"]
        header = RequestHeader.chain(i + 1, hops, len(payload))
        assert (header.encode() + payload).hex() == v["hex"], v["name"]
