"""cocotb testbench of rtl/offrac_req_header_parse.v: the header beat and, when flagged, its extension."""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from header_model import (
    ERRORS,
    FATAL,
    VECTORS,
    Decoded,
    decode_request,
    encode_request,
    mutate,
    padded_hops,
    random_valid_request,
    wire_beats,
)
from tb_util import sig, start, stream

FIELDS = (
    "flags",
    "tenant",
    "hop_count",
    "hop_index",
    "request_id",
    "payload_len",
    "reply_device",
    "budget_us",
)


def drive(dut: Any, beat: bytes | None) -> None:
    dut.s_axis_tvalid.value = int(beat is not None)
    # idle data is a non-header pattern so a beat taken while invalid would decode wrongly
    dut.s_axis_tdata.value = int.from_bytes(beat if beat is not None else b"\xa5" * 64, "little")


def capture(dut: Any) -> Decoded:
    fields = {name: sig(getattr(dut, f"m_hdr_{name}")) for name in FIELDS}
    fn, dev, par = (sig(dut.m_hdr_hop_function), sig(dut.m_hdr_hop_device), sig(dut.m_hdr_hop_param))
    hops = [((fn >> 8 * i) & 0xFF, (dev >> 8 * i) & 0xFF, (par >> 64 * i) & (2**64 - 1)) for i in range(8)]
    d = Decoded(sig(dut.m_hdr_error), sig(dut.m_hdr_error_hop), fields, hops, sig(dut.m_hdr_origin_id))
    assert sig(dut.m_hdr_fatal) == int(d.error in FATAL)
    return d


def beats_of(requests: list[bytes]) -> list[bytes]:
    for r in requests:
        assert len(r) == 64 * wire_beats(r)
    return [r[i : i + 64] for r in requests for i in range(0, len(r), 64)]


async def run(
    dut: Any, requests: list[bytes], rng: random.Random, p_valid: float, p_ready: float
) -> list[Decoded]:
    return await stream(
        dut,
        beats_of(requests),
        lambda b: drive(dut, b),
        "s_axis_tvalid",
        "s_axis_tready",
        "m_hdr_valid",
        "m_hdr_ready",
        lambda: capture(dut),
        rng,
        p_valid,
        p_ready,
        n_out=len(requests),
    )


@cocotb.test()
async def vectors_byte_for_byte(dut: Any) -> None:
    """Every request vector, extensions included: the Rust decoder's error, every field of the valid ones."""
    drive(dut, None)
    await start(dut)
    vectors = VECTORS["requests"]
    got = await run(dut, [bytes.fromhex(v["hex"]) for v in vectors], random.Random(1), 1.0, 1.0)
    for v, d in zip(vectors, got, strict=True):
        want_error = ERRORS[v["error"]]
        assert d.error == want_error, f"{v['note']}: error {d.error}, want {want_error}"
        if v["valid"]:
            want = v["fields"]
            assert d.fields == {k: want[k] for k in FIELDS}, v["note"]
            assert d.hops == padded_hops(want["hops"]), v["note"]
    extended = sum(len(v["hex"]) == 256 for v in vectors)
    dut._log.info("%d request vectors pass, %d of them with an extension", len(vectors), extended)


@cocotb.test()
async def random_valid_headers(dut: Any) -> None:
    """Random valid requests (40% extended) at full rate: no error, every field, hop and origin_id."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(12)
    cases = [random_valid_request(rng) for _ in range(1000)]
    got = await run(dut, [encode_request(*c) for c in cases], rng, 1.0, 1.0)
    for (fields, hops, origin_id), d in zip(cases, got, strict=True):
        assert d.error == 0, (fields, hops, d)
        assert d.fields == fields and d.hops == hops and d.origin_id == origin_id
    assert sum(c[0]["flags"] & 1 for c in cases) > 300


@cocotb.test()
async def random_corrupt_headers(dut: Any) -> None:
    """Requests with bytes changed: error, error hop, fields, hops and origin_id equal the model's."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(13)
    reqs = [mutate(rng, encode_request(*random_valid_request(rng))) for _ in range(2500)]
    got = await run(dut, reqs, rng, 0.8, 0.8)
    seen: set[tuple[int, bool]] = set()
    for b, d in zip(reqs, got, strict=True):
        want = decode_request(b)
        assert (d.error, d.error_hop) == (want.error, want.error_hop), b.hex()
        assert d.fields == want.fields and d.hops == want.hops and d.origin_id == want.origin_id, b.hex()
        seen.add((d.error, len(b) == 128))
    # the mutations must reach every error, and each with and without an extension where it can
    # occur both ways, or this test checks less than it says
    both = {ERRORS[e] for e in ("ReservedFlags", "BadHopCount", "BadHopIndex", "UnusedHop")} | {0}
    ext_only = {ERRORS["NeedlessExtension"], ERRORS["ReservedBytes"]}
    want_seen = {(e, False) for e in ERRORS.values() if e not in ext_only} | {
        (e, True) for e in both | ext_only
    }
    assert want_seen <= seen, sorted(want_seen - seen)
    # hop 0 is always in use (hop_count 0 is BadHopCount); every other hop must have shown as unused
    assert {want.error_hop for b in reqs if (want := decode_request(b)).error == ERRORS["UnusedHop"]} == set(
        range(1, 8)
    )


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse input and a consumer ready 30% of the time: every request out once, in order."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(14)
    reqs = [encode_request(*random_valid_request(rng)) for _ in range(300)]
    got = await run(dut, reqs, rng, 0.5, 0.3)
    assert [(d.fields, d.hops, d.origin_id) for d in got] == [
        (w.fields, w.hops, w.origin_id) for w in map(decode_request, reqs)
    ]


async def pulse_reset(dut: Any) -> None:
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def reset_drops_held_header(dut: Any) -> None:
    """Reset while a header waits on a stalled consumer: it is gone, and the next header passes."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(15)
    first = encode_request(*random_valid_request(rng))[:64]
    first = first[:3] + bytes([first[3] & ~1]) + first[4:]  # no extension: one beat
    dut.m_hdr_ready.value = 0
    drive(dut, first)
    await FallingEdge(dut.clk)
    drive(dut, None)
    await ReadOnly()
    assert sig(dut.m_hdr_valid) and not sig(dut.s_axis_tready), "header not held while stalled"
    await FallingEdge(dut.clk)
    await pulse_reset(dut)
    await ReadOnly()
    assert not sig(dut.m_hdr_valid) and sig(dut.s_axis_tready), "reset left the header"
    await FallingEdge(dut.clk)
    second = encode_request(*random_valid_request(rng))
    got = await run(dut, [second], rng, 1.0, 1.0)
    assert got[0].fields == decode_request(second).fields


@cocotb.test()
async def reset_between_header_and_extension(dut: Any) -> None:
    """Reset after a flagged header, before its extension: the next beat is a header, not an extension."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(16)
    while not (fields_hops := random_valid_request(rng))[0]["flags"] & 1:
        pass
    dut.m_hdr_ready.value = 1
    drive(dut, encode_request(*fields_hops)[:64])
    await FallingEdge(dut.clk)
    drive(dut, None)
    for _ in range(3):  # the extension is late: nothing comes out meanwhile
        await ReadOnly()
        assert not sig(dut.m_hdr_valid) and sig(dut.s_axis_tready)
        await FallingEdge(dut.clk)
    await pulse_reset(dut)
    await FallingEdge(dut.clk)
    reqs = [encode_request(*random_valid_request(rng)) for _ in range(20)]
    got = await run(dut, reqs, rng, 0.7, 0.7)
    assert [(d.error, d.fields, d.hops) for d in got] == [
        (0, w.fields, w.hops) for w in map(decode_request, reqs)
    ]
