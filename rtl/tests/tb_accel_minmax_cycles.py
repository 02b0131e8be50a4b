"""cocotb testbench of rtl/offrac_accel_minmax.v at request sizes of OffRAC Table 5: the cycles of a 1 KB
and a 16 KB request (T_acc, pinned) and their results against the software (accel_oracle).

Built with MAX_BEATS = 256 (16 KiB, test_rtl.py).
"""

from __future__ import annotations

import random
from typing import Any

import cocotb
from minmax_model import random_array
from tb_accel_minmax import model_for
from tb_util import BEAT, CLOCK_NS, idle, request_cycles, run_requests, start

MAX_BYTES = 256 * BEAT
# cycles from the metadata word in to the last result beat out, one request, every sink ready
CYCLES = {1024: 359, 16384: 4439}  # 354 and 4,434 with the unrolled divider (no reciprocal wait)


@cocotb.test()
async def cycles_1k_16k(dut: Any) -> None:
    """1 KB and 16 KB requests at full rate: the cycles pinned, the results bit for bit."""
    idle(dut)
    await start(dut)
    rng = random.Random(57)
    got: dict[int, int] = {}
    for size in CYCLES:
        payload = random_array(rng, size // 4).tobytes()
        got[size] = await request_cycles(dut, payload, 0)
        idle(dut)
        await run_requests(dut, [payload], rng, 1.0, 1.0, [1], model_for([payload], MAX_BYTES))
    for size, cycles in got.items():
        dut._log.info("%5d B: %d cycles, %.2f us at 250 MHz", size, cycles, cycles * CLOCK_NS / 1000)
    assert got == CYCLES, got
