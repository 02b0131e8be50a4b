"""cocotb testbench of rtl/offrac_resp_header_build.v."""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from header_model import RESPONSE_FIELDS, VECTORS, encode_response
from tb_util import cycles_to, sig, start, stream

WIDTHS = {
    "status": 16,
    "hop_index": 8,
    "device": 8,
    "request_id": 64,
    "payload_len": 32,
    "tenant": 16,
    "reassembly_ns": 64,
    "queue_ns": 64,
    "exec_ns": 64,
    "detail": 64,
    "flags": 8,
}
assert set(WIDTHS) == set(RESPONSE_FIELDS)


def drive(dut: Any, f: dict[str, int] | None) -> None:
    dut.s_resp_valid.value = int(f is not None)
    for name, bits in WIDTHS.items():
        # idle inputs all ones, so a beat built from them would not match any expectation
        getattr(dut, f"s_resp_{name}").value = (2**bits - 1) if f is None else f.get(name, 0)


def capture(dut: Any) -> tuple[bytes, int, int]:
    return sig(dut.m_axis_tdata).to_bytes(64, "little"), sig(dut.m_axis_tkeep), sig(dut.m_axis_tlast)


async def run(
    dut: Any, items: list[dict[str, int]], rng: random.Random, p_valid: float, p_ready: float
) -> list[tuple[bytes, int, int]]:
    return await stream(
        dut,
        items,
        lambda f: drive(dut, f),
        "s_resp_valid",
        "s_resp_ready",
        "m_axis_tvalid",
        "m_axis_tready",
        lambda: capture(dut),
        rng,
        p_valid,
        p_ready,
    )


def check(f: dict[str, int], out: tuple[bytes, int, int]) -> None:
    data, keep, last = out
    assert data == encode_response(f), f"{f}: {data.hex()}"
    assert keep == 2**64 - 1
    # the frame ends at the header only when no payload and no timings block follow
    assert last == int(f["payload_len"] == 0 and not f.get("flags", 0) & 1)


def random_fields(rng: random.Random) -> dict[str, int]:
    return {name: rng.choice([0, 1, 2**bits - 1, rng.getrandbits(bits)]) for name, bits in WIDTHS.items()}


@cocotb.test()
async def vectors_byte_for_byte(dut: Any) -> None:
    """Every response vector, byte for byte."""
    drive(dut, None)
    await start(dut)
    vectors = VECTORS["responses"]
    got = await run(dut, [v["fields"] for v in vectors], random.Random(2), 1.0, 1.0)
    for v, out in zip(vectors, got, strict=True):
        assert out[0].hex() == v["hex"], v["note"]
        check(v["fields"], out)
    dut._log.info("%d response vectors pass", len(vectors))


@cocotb.test()
async def random_fields_backpressure(dut: Any) -> None:
    """Random field values (reserved flag bits included) under random gaps and stalls, in order."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(22)
    items = [random_fields(rng) for _ in range(1500)]
    got = await run(dut, items, rng, 0.7, 0.5)
    for f, out in zip(items, got, strict=True):
        check(f, out)


@cocotb.test()
async def reset_drops_held_beat(dut: Any) -> None:
    """Reset while a beat waits on a stalled sink: it is gone, and the next one passes."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(23)
    dut.m_axis_tready.value = 0
    drive(dut, random_fields(rng))
    await FallingEdge(dut.clk)
    drive(dut, None)
    await ReadOnly()
    assert sig(dut.m_axis_tvalid) and not sig(dut.s_resp_ready)
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_axis_tvalid) and sig(dut.s_resp_ready)
    await FallingEdge(dut.clk)
    f = random_fields(rng)
    check(f, (await run(dut, [f], rng, 1.0, 1.0))[0])


@cocotb.test()
async def response_latency(dut: Any) -> None:
    """Cycles from a result's fields in to its response header beat out (sink ready)."""
    await start(dut)
    dut.m_axis_tready.value = 1

    def drive() -> None:
        dut.s_resp_status.value = 0
        dut.s_resp_request_id.value = 9
        dut.s_resp_payload_len.value = 1024

    cycles, _ = await cycles_to(dut, [drive], "s_resp_valid", "s_resp_ready", "m_axis_tvalid")
    dut._log.info("latency result fields in -> response header out: %d cycles", cycles)
    assert cycles == 1, cycles  # docs/rtl.md, "Cycles per request"
