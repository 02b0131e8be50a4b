"""Clock, reset and a cycle-accurate valid/ready driver shared by the testbenches.

Every cycle the driver sets inputs at the falling edge, then reads the settled
signals in the read-only phase: a handshake seen there is the one the next
rising edge performs. Doing both from one loop keeps source, sink and
scoreboard in lockstep, so a dropped or duplicated beat cannot hide.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from cocotb.clock import Clock
from cocotb.handle import SimHandleBase
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

CLOCK_NS = 4  # 250 MHz, the clock the issue counts cycles at


async def start(dut: Any) -> None:
    """Start the clock and hold reset for a few cycles with every input idle."""
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await FallingEdge(dut.clk)


def sig(h: SimHandleBase) -> int:
    return int(h.value)  # type: ignore[attr-defined]


def kept_data(h: SimHandleBase, keep: int) -> int:
    """tdata of which only the tkeep bytes count: those must be 0/1, the others may be X (read as 0)."""
    bits = str(h.value)[::-1]  # type: ignore[attr-defined]  # bit 0 first
    for i in range(len(bits) // 8):
        if keep >> i & 1:
            assert set(bits[8 * i : 8 * i + 8]) <= {"0", "1"}, f"byte {i} of a kept lane is not 0/1"
    return int(bits[::-1].translate(str.maketrans("xXzZuUwW-", "000000000")), 2)


async def stream(
    dut: Any,
    items: Sequence[Any],
    drive: Callable[[Any | None], None],
    in_valid: str,
    in_ready: str,
    out_valid: str,
    out_ready: str,
    capture: Callable[[], Any],
    rng: random.Random,
    p_valid: float = 1.0,
    p_ready: float = 1.0,
    max_cycles: int = 20_000,
    n_out: int | None = None,
) -> list[Any]:
    """Push `items` through a valid/ready handshake with random gaps and stalls; return the outputs.

    One output per item, or `n_out` in all (a module that takes several beats per output).
    `drive(None)` must deassert the input valid. The loop starts and ends on a falling edge,
    and checks that no extra output follows the last one.
    """
    want = len(items) if n_out is None else n_out
    outputs: list[Any] = []
    nxt = 0
    offering: Any | None = None
    for _ in range(max_cycles):
        if offering is None and nxt < len(items) and rng.random() < p_valid:
            offering = items[nxt]
            nxt += 1
        drive(offering)
        getattr(dut, out_ready).value = int(rng.random() < p_ready)
        await ReadOnly()
        if offering is not None and sig(getattr(dut, in_valid)) and sig(getattr(dut, in_ready)):
            offering = None  # taken at the coming edge
        if sig(getattr(dut, out_valid)) and sig(getattr(dut, out_ready)):
            outputs.append(capture())
            assert len(outputs) <= want, "more outputs than inputs call for"
        if len(outputs) == want and nxt == len(items) and offering is None:
            # nothing more may come out: a duplicated beat would show here
            for _ in range(3):
                await FallingEdge(dut.clk)
                drive(None)
                getattr(dut, out_ready).value = 1
                await ReadOnly()
                assert not sig(getattr(dut, out_valid)), "an output beat beyond the inputs"
            await FallingEdge(dut.clk)
            return outputs
        await FallingEdge(dut.clk)
    raise AssertionError(f"stream stalled: {len(outputs)} of {want} out after {max_cycles} cycles")
