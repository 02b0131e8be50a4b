"""cocotb testbench of rtl/offrac_accel_mapid.v at full size: the node's built-in dictionary (32,768
keys from the software) in the default 65,536-slot table, answers against the software's own built-in
state. Long (the load is ~130k cycles): run by `make rtl-mapid-full`, not by `make rtl-test`.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from tb_util import BEAT, builtin_state, idle, run_requests, sig, software, start


@cocotb.test()
async def builtin_dictionary(dut: Any) -> None:
    idle(dut)
    await start(dut)
    keys = builtin_state()["dictionary"]
    dut.s_cfg_tkeep.value = 0xF
    for _ in range(1 << 17):  # the clearing after reset
        await ReadOnly()
        if sig(dut.s_meta_tready):
            break
        await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    for i, k in enumerate(keys):
        dut.s_cfg_tvalid.value = 1
        dut.s_cfg_tdata.value = k
        dut.s_cfg_tlast.value = int(i == len(keys) - 1)
        while True:
            await ReadOnly()
            taken = sig(dut.s_cfg_tready)
            await FallingEdge(dut.clk)
            if taken:
                break
    idle(dut)
    for _ in range(100):
        await ReadOnly()
        if sig(dut.s_meta_tready):
            break
        await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    assert sig(dut.cfg_dict_size) == len(set(keys)) == 32768 and not sig(dut.cfg_overflow)
    rng = random.Random(79)
    max_ids = int(dut.MAX_BEATS.value) * BEAT // 4
    payloads = []
    for _ in range(12):
        n = rng.choice([1, 16, 17, 256, rng.randint(1, max_ids)])
        ids = [rng.choice(keys) if rng.random() < 0.7 else rng.getrandbits(32) for _ in range(n)]
        payloads.append(struct.pack(f"<{n}I", *ids))
    answers = software([("mapid", 0, p) for p in payloads])  # the software's built-in dictionary
    table = {p: (status, 0, out) for p, (status, _m, out) in zip(payloads, answers, strict=True)}
    metas = [rng.getrandbits(128) for _ in payloads]
    await run_requests(dut, payloads, rng, 1.0, 0.7, metas, lambda p, _m: table[p])
    misses = sum(out.count(struct.pack("<I", 32768)) for _s, _m, out in answers)
    dut._log.info("built-in dictionary: %d requests, %d ids missed (-> 32768)", len(payloads), misses)
    assert misses > 0
