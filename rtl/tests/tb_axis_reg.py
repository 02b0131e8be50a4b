"""cocotb testbench of rtl/offrac_axis_reg.v: every beat out once, in order, under gaps and stalls.

Built with WIDTH = 37 (test_rtl.py): odd, so no byte boundary hides a dropped bit.
"""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from tb_util import sig, start, stream

WIDTH = 37


def drive(dut: Any, item: int | None) -> None:
    dut.s_tvalid.value = int(item is not None)
    if item is not None:
        dut.s_tdata.value = item


async def through(dut: Any, items: list[int], rng: random.Random, p_valid: float, p_ready: float) -> None:
    out = await stream(
        dut,
        items,
        lambda i: drive(dut, i),
        "s_tvalid",
        "s_tready",
        "m_tvalid",
        "m_tready",
        lambda: sig(dut.m_tdata),
        rng,
        p_valid,
        p_ready,
    )
    assert out == items


@cocotb.test()
async def gaps_and_stalls(dut: Any) -> None:
    """Full rate, then sparse inputs and sinks ready 5-60% of the time; s_tready = !m_tvalid || m_tready."""
    drive(dut, None)
    dut.m_tready.value = 0
    await start(dut)
    rng = random.Random(101)
    for p_valid, p_ready in [(1.0, 1.0), (0.5, 0.2), (1.0, 0.6), (0.3, 1.0), (1.0, 0.05)]:
        await through(dut, [rng.getrandbits(WIDTH) for _ in range(300)], rng, p_valid, p_ready)
    for _ in range(200):  # the ready rule itself, cycle by cycle
        dut.m_tready.value = rng.random() < 0.5
        drive(dut, rng.getrandbits(WIDTH) if rng.random() < 0.5 else None)
        await ReadOnly()
        assert sig(dut.s_tready) == int(not sig(dut.m_tvalid) or sig(dut.m_tready))
        await FallingEdge(dut.clk)
    drive(dut, None)
    dut.m_tready.value = 1
    await FallingEdge(dut.clk)


@cocotb.test()
async def reset_with_a_held_beat(dut: Any) -> None:
    """Reset while a beat waits on a stalled sink: gone after, the next beats pass."""
    await start(dut)
    rng = random.Random(102)
    dut.m_tready.value = 0
    drive(dut, 5)
    await FallingEdge(dut.clk)
    drive(dut, None)
    await ReadOnly()
    assert sig(dut.m_tvalid) and sig(dut.m_tdata) == 5
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_tvalid), "reset left the held beat"
    await FallingEdge(dut.clk)
    await through(dut, [rng.getrandbits(WIDTH) for _ in range(50)], rng, 0.7, 0.7)
