"""cocotb testbench of rtl/offrac_accel_sparse.v at seed 001 Table II's request size and a larger one:
the cycles of 1 KB and 16 KB requests (T_acc, pinned) and their results against the software.

Built with MAX_BEATS = 256 (16 KiB, test_rtl.py). The cycles depend on the beats in (a cycle each, one
pass) and the cycles out: a cycle per input beat for each of the two walks of the non-zero bitmap (the
row ends, cols 0: one cycle; the columns) and a cycle per 16 values, so the cases vary all three. In the
comments, the cycles of the one-pass unit with four packers before, then of the three-pass unit.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import cocotb
from tb_util import CLOCK_NS, idle, request_cycles, run_requests, software, start

# (case, bytes) -> cycles from the metadata word in to the last result beat out, every sink ready
CYCLES = {
    ("one row, half zero", 1024): 48,  # 40 one pass, 372 three passes
    ("one row, half zero", 16384): 648,  # 520, 5652
    ("16 columns, half zero", 1024): 63,  # 40, 372
    ("one row, none zero", 1024): 56,  # 56, 644
    ("one row, 90 % zero", 1024): 41,  # 29, 153
}


def elements(rng: random.Random, n: int, p_zero: float) -> bytes:
    xs = [rng.choice([0, 0x80000000]) if rng.random() < p_zero else rng.getrandbits(32) | 1 for _ in range(n)]
    if p_zero == 0.5:
        xs = [0 if i % 2 else 0x3F800000 for i in range(n)]  # exactly half, alternating
    return struct.pack(f"<{n}I", *xs)


@cocotb.test()
async def cycles_1k_16k(dut: Any) -> None:
    """The cases at full rate: the cycles pinned, the results bit for bit."""
    idle(dut)
    await start(dut)
    rng = random.Random(67)
    got: dict[tuple[str, int], int] = {}
    for case, size in CYCLES:
        p_zero = 0.5 if "half" in case else 0.0 if "none" in case else 0.9
        cols = 16 if "16 columns" in case else 0
        p = elements(rng, size // 4, p_zero)
        got[(case, size)] = await request_cycles(dut, p, cols)
        idle(dut)
        ((status, _msg, out),) = software([("sparsetransform", cols, p)])
        assert status == 0
        await run_requests(dut, [p], rng, 1.0, 1.0, [cols], lambda _p, _m, r=(status, 0, out): r)
    for (case, size), cycles in got.items():
        us = cycles * CLOCK_NS / 1000
        dut._log.info("SparseTransform %s, %5d B: %d cycles, %.3f us at 250 MHz", case, size, cycles, us)
    assert got == CYCLES, got
