"""cocotb testbench of rtl/offrac_accel_mapid.v at seed 001 Table II's request size and a larger one:
the cycles of a 1 KB and a 16 KB request (T_acc, pinned) and their results against the software.

Built with TABLE_BITS = 10 (1,024 slots) and MAX_BEATS = 256 (test_rtl.py). Two dictionaries of 512
keys, the table half full as the default build is with the node's 32,768 built-in keys:
- "spread": keys 0..511, each in its own first slot, and ids from 0..1023: every lookup is one probe
  (the two ports' best case, 16 ids in 8 cycles);
- "random": 512 random keys, so linear probing's chains are those of a half-full table; ids 70 %
  keys, the rest random (mostly misses, whose chains are the longer ones).
"""

from __future__ import annotations

import random
import struct
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from tb_util import CLOCK_NS, idle, request_cycles, run_requests, sig, software, start

DICT = 512
# cycles from the metadata word in to the last result beat out, one request, every sink ready
CYCLES = {
    ("spread", 1024): 152,
    ("spread", 16384): 2312,
    ("random", 1024): 310,
    ("random", 16384): 4954,
}


async def load(dut: Any, keys: list[int]) -> None:
    """One configuration packet at full rate; wait until the accelerator takes requests again."""
    dut.s_cfg_tvalid.value = 1
    for i, k in enumerate(keys):
        dut.s_cfg_tdata.value, dut.s_cfg_tkeep.value, dut.s_cfg_tlast.value = k, 0xF, int(i == len(keys) - 1)
        await ReadOnly()
        while not sig(dut.s_cfg_tready):
            await FallingEdge(dut.clk)
            await ReadOnly()
        await FallingEdge(dut.clk)
    dut.s_cfg_tvalid.value = 0
    for _ in range(20_000):
        await ReadOnly()
        if sig(dut.s_meta_tready):
            await FallingEdge(dut.clk)
            assert sig(dut.cfg_dict_size) == len(set(keys))
            return
        await FallingEdge(dut.clk)
    raise AssertionError("the dictionary did not load")


@cocotb.test()
async def cycles_1k_16k(dut: Any) -> None:
    """1 KB and 16 KB requests at full rate: the cycles pinned, the results bit for bit."""
    idle(dut)
    await start(dut)
    rng = random.Random(61)
    got: dict[tuple[str, int], int] = {}
    for name in ("spread", "random"):
        keys = list(range(DICT)) if name == "spread" else [rng.getrandbits(32) for _ in range(DICT)]
        await load(dut, keys)
        for size in (1024, 16384):
            n = size // 4
            if name == "spread":
                xs = [rng.randrange(2 * DICT) for _ in range(n)]
            else:
                xs = [rng.choice(keys) if rng.random() < 0.7 else rng.getrandbits(32) for _ in range(n)]
            p = struct.pack(f"<{n}I", *xs)
            got[(name, size)] = await request_cycles(dut, p, 0)
            idle(dut)
            ((status, _msg, out),) = software([("mapid", 0, p)], dictionary=keys)
            await run_requests(dut, [p], rng, 1.0, 1.0, [1], lambda _p, _m, r=(status, 0, out): r)
    for (name, size), cycles in got.items():
        dut._log.info(
            "MapId %s, %5d B: %d cycles, %.3f us at 250 MHz", name, size, cycles, cycles * CLOCK_NS / 1000
        )
    assert got == CYCLES, got
