"""cocotb testbench of rtl/offrac_accel_echo.v: payload and metadata out as they came in, under stalls."""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from tb_util import BEAT, Beat, beats_of, from_beats, idle, sig, start, to_beats


async def echo(
    dut: Any, payloads: list[bytes], metas: list[int], rng: random.Random, p_in: float, p_out: float
) -> tuple[list[bytes], list[int]]:
    """Drive requests with independent random gaps on both inputs and stalls on both outputs."""
    beats = [b for p in payloads for b in beats_of(p)]  # an empty payload: one beat with tkeep 0
    out_beats: list[Beat] = []
    out_metas: list[int] = []
    bi = mi = 0
    for _ in range(50_000):
        # data is offered whether or not its metadata went in: the wrapper must hold it off
        data_on = bi < len(beats) and rng.random() < p_in
        meta_on = mi < len(metas) and rng.random() < p_in
        dut.s_axis_tvalid.value = int(data_on)
        if bi < len(beats):
            dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[bi]
        dut.s_meta_tvalid.value = int(meta_on)
        if mi < len(metas):
            dut.s_meta_tdata.value = metas[mi]
        dut.m_axis_tready.value = int(rng.random() < p_out)
        dut.m_meta_tready.value = int(rng.random() < p_out)
        await ReadOnly()
        if data_on and sig(dut.s_axis_tready):
            bi += 1
        if meta_on and sig(dut.s_meta_tready):
            mi += 1
        if sig(dut.m_axis_tvalid) and sig(dut.m_axis_tready):
            out_beats.append((sig(dut.m_axis_tdata), sig(dut.m_axis_tkeep), sig(dut.m_axis_tlast)))
        if sig(dut.m_meta_tvalid) and sig(dut.m_meta_tready):
            out_metas.append(sig(dut.m_meta_tdata))
        await FallingEdge(dut.clk)
        if len(out_beats) == len(beats) and len(out_metas) == len(metas):
            idle(dut)
            dut.m_axis_tready.value = 1
            dut.m_meta_tready.value = 1
            await ReadOnly()
            assert not sig(dut.m_axis_tvalid) and not sig(dut.m_meta_tvalid), "output beyond the input"
            await FallingEdge(dut.clk)
            return from_beats(out_beats), out_metas
    raise AssertionError(f"stalled: {len(out_beats)}/{len(beats)} beats, {len(out_metas)}/{len(metas)} metas")


def requests(rng: random.Random, n: int) -> tuple[list[bytes], list[int]]:
    sizes = [rng.choice([0, 1, 63, 64, 65, 128, rng.randint(1, 600)]) for _ in range(n)]
    return [rng.randbytes(s) for s in sizes], [rng.getrandbits(128) for _ in range(n)]


@cocotb.test()
async def full_rate(dut: Any) -> None:
    """No gaps, no stalls: every request echoed byte for byte with its metadata."""
    idle(dut)
    await start(dut)
    rng = random.Random(31)
    payloads, metas = requests(rng, 100)
    got, got_metas = await echo(dut, payloads, metas, rng, 1.0, 1.0)
    assert got == payloads and got_metas == metas


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse inputs and sinks ready 20-60% of the time: nothing dropped, duplicated or reordered."""
    idle(dut)
    await start(dut)
    rng = random.Random(32)
    for p_in, p_out in [(0.5, 0.2), (1.0, 0.6), (0.3, 1.0)]:
        payloads, metas = requests(rng, 60)
        got, got_metas = await echo(dut, payloads, metas, rng, p_in, p_out)
        assert got == payloads and got_metas == metas, (p_in, p_out)


@cocotb.test()
async def empty_payloads(dut: Any) -> None:
    """Empty payloads (one beat, tkeep 0, as the dispatcher gives them) back to back and among others:
    each echoed as one beat with tkeep 0 and tlast, under stalls."""
    idle(dut)
    await start(dut)
    rng = random.Random(35)
    for p_in, p_out in [(1.0, 1.0), (0.5, 0.3)]:
        payloads = [b"", b"", rng.randbytes(64), b"", rng.randbytes(3), b""]
        metas = [rng.getrandbits(128) for _ in payloads]
        got, got_metas = await echo(dut, payloads, metas, rng, p_in, p_out)
        assert got == payloads and got_metas == metas


@cocotb.test()
async def no_data_before_metadata(dut: Any) -> None:
    """Data offered without metadata waits; it goes once the metadata word does."""
    idle(dut)
    await start(dut)
    dut.s_axis_tvalid.value = 1
    dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = to_beats(b"x")[0]
    for _ in range(5):
        await ReadOnly()
        assert not sig(dut.s_axis_tready), "data taken before its metadata"
        await FallingEdge(dut.clk)
    idle(dut)
    got, metas = await echo(dut, [b"x"], [7], random.Random(33), 1.0, 1.0)
    assert got == [b"x"] and metas == [7]


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset in the middle of a request with its output stalled: idle after, the next requests pass."""
    idle(dut)
    await start(dut)
    rng = random.Random(34)
    beats = to_beats(rng.randbytes(5 * BEAT))
    dut.s_meta_tvalid.value = 1
    dut.s_meta_tdata.value = 1
    dut.s_axis_tvalid.value = 1
    dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[0]
    await FallingEdge(dut.clk)
    dut.s_meta_tvalid.value = 0
    dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[1]
    await ReadOnly()
    assert sig(dut.m_axis_tvalid) and sig(dut.m_meta_tvalid) and not sig(dut.s_axis_tready)
    await FallingEdge(dut.clk)
    idle(dut)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_axis_tvalid) and not sig(dut.m_meta_tvalid), "reset left an output"
    assert sig(dut.s_meta_tready), "reset left the request open"
    await FallingEdge(dut.clk)
    payloads, metas = requests(rng, 20)
    got, got_metas = await echo(dut, payloads, metas, rng, 0.7, 0.7)
    assert got == payloads and got_metas == metas
