"""cocotb testbench of rtl/offrac_req_header_parse.v."""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from header_model import (
    ERRORS,
    EXTENSION_ERRORS,
    VECTORS,
    Decoded,
    decode_request,
    encode_request,
    mutate,
    random_valid_request,
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
    hops = [((fn >> 8 * i) & 0xFF, (dev >> 8 * i) & 0xFF, (par >> 64 * i) & (2**64 - 1)) for i in range(4)]
    d = Decoded(sig(dut.m_hdr_error), sig(dut.m_hdr_error_hop), fields, hops)
    assert sig(dut.m_hdr_fatal) == int(d.error in (ERRORS["BadMagic"], ERRORS["BadVersion"]))
    return d


async def run(
    dut: Any, beats: list[bytes], rng: random.Random, p_valid: float, p_ready: float
) -> list[Decoded]:
    return await stream(
        dut,
        beats,
        lambda b: drive(dut, b),
        "s_axis_tvalid",
        "s_axis_tready",
        "m_hdr_valid",
        "m_hdr_ready",
        lambda: capture(dut),
        rng,
        p_valid,
        p_ready,
    )


def expected_error(v: dict[str, Any]) -> int:
    """The header beat's verdict for a vector: extension errors are not the header's."""
    if len(v["hex"]) == 256 and v["error"] in EXTENSION_ERRORS:
        return ERRORS[None]
    return ERRORS[v["error"]]


@cocotb.test()
async def vectors_byte_for_byte(dut: Any) -> None:
    """Every request vector: error code as the Rust decoder gives it, every field of the valid ones."""
    drive(dut, None)
    await start(dut)
    vectors = VECTORS["requests"]
    got = await run(dut, [bytes.fromhex(v["hex"])[:64] for v in vectors], random.Random(1), 1.0, 1.0)
    for v, d in zip(vectors, got, strict=True):
        assert d.error == expected_error(v), f"{v['note']}: error {d.error}, want {expected_error(v)}"
        if v["valid"]:
            want = v["fields"]
            assert d.fields == {k: want[k] for k in FIELDS}, v["note"]
            assert d.hops == [(h["function"], h["device"], h["param"]) for h in want["hops"][:4]], v["note"]
    dut._log.info("%d request vectors pass", len(vectors))


@cocotb.test()
async def random_valid_headers(dut: Any) -> None:
    """Random valid headers at full rate: no error, every field as encoded."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(12)
    cases = [random_valid_request(rng) for _ in range(1000)]
    got = await run(dut, [encode_request(f, h) for f, h in cases], rng, 1.0, 1.0)
    for (fields, hops), d in zip(cases, got, strict=True):
        assert d.error == 0, (fields, hops, d)
        assert d.fields == fields and d.hops == hops


@cocotb.test()
async def random_corrupt_headers(dut: Any) -> None:
    """Valid headers with bytes changed: error and error hop equal the model's, precedence included."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(13)
    beats = [mutate(rng, encode_request(*random_valid_request(rng))) for _ in range(2000)]
    got = await run(dut, beats, rng, 0.8, 0.8)
    seen: set[int] = set()
    for b, d in zip(beats, got, strict=True):
        want = decode_request(b)
        assert (d.error, d.error_hop) == (want.error, want.error_hop), b.hex()
        assert d.fields == want.fields and d.hops == want.hops, b.hex()
        seen.add(d.error)
    # the mutations must reach every error, or this test checks less than it says
    assert seen == set(ERRORS.values()), seen


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse input and a consumer ready 30% of the time: every header out once, in order."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(14)
    beats = [encode_request(*random_valid_request(rng)) for _ in range(300)]
    got = await run(dut, beats, rng, 0.5, 0.3)
    assert [d.fields["request_id"] for d in got] == [decode_request(b).fields["request_id"] for b in beats]
    assert [d.fields for d in got] == [decode_request(b).fields for b in beats]


@cocotb.test()
async def reset_drops_held_header(dut: Any) -> None:
    """Reset while a header waits on a stalled consumer: it is gone, and the next header passes."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(15)
    first = encode_request(*random_valid_request(rng))
    dut.m_hdr_ready.value = 0
    drive(dut, first)
    await FallingEdge(dut.clk)
    drive(dut, None)
    await ReadOnly()
    assert sig(dut.m_hdr_valid) and not sig(dut.s_axis_tready), "header not held while stalled"
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_hdr_valid) and sig(dut.s_axis_tready), "reset left the header"
    await FallingEdge(dut.clk)
    second = encode_request(*random_valid_request(rng))
    got = await run(dut, [second], rng, 1.0, 1.0)
    assert got[0].fields == decode_request(second).fields
