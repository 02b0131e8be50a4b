"""cocotb testbench of rtl/offrac_result_buffer.v: results out only with status OK, in order, under stalls.

Built with MAX_BEATS = 4 (test_rtl.py).
"""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from tb_util import kept_data, sig, start

MAX_BEATS = 4
FULL = (1 << 64) - 1
Action = tuple[str, int, int, int]  # ("res", data, keep, 0) or ("stat", meta, status, detail)


def byte_mask(keep: int) -> int:
    """The tdata bits whose tkeep byte is set."""
    return int.from_bytes(bytes(0xFF if keep >> b & 1 else 0 for b in range(64)), "little")


def idle(dut: Any) -> None:
    dut.s_res_tvalid.value = 0
    dut.s_stat_tvalid.value = 0
    dut.m_axis_tready.value = 0
    dut.m_meta_tready.value = 0


def results(
    rng: random.Random, n: int
) -> tuple[list[Action], list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """n results of 0..MAX_BEATS beats, OK or not: the actions, the answers and the beats expected."""
    actions: list[Action] = []
    answers, beats = [], []
    for _ in range(n):
        k = rng.randint(0, MAX_BEATS)
        status = rng.choice([0, 0, 0, 3, 5])
        rows = [(rng.getrandbits(512), FULL) for _ in range(k)]
        if k:
            rows[-1] = (rows[-1][0], (1 << rng.randint(1, 64)) - 1)
        actions += [("res", d, kp, 0) for d, kp in rows]
        meta, detail = rng.getrandbits(128), rng.getrandbits(32)
        actions.append(("stat", meta, status, detail))
        answers.append((meta, status, detail))
        if status == 0:
            for i, (d, kp) in enumerate(rows):
                beats.append((d & byte_mask(kp), kp, int(i == k - 1)))
    return actions, answers, beats


async def run(dut: Any, rng: random.Random, n: int, p_in: float, p_out: float) -> None:
    actions, want_answers, want_beats = results(rng, n)
    answers: list[tuple[int, int, int]] = []
    beats: list[tuple[int, int, int]] = []
    ai = 0
    for _ in range(200 + int(20 * len(actions) / min(p_in, p_out))):
        on = ai < len(actions) and rng.random() < p_in
        kind = actions[ai][0] if ai < len(actions) else ""
        dut.s_res_tvalid.value = int(on and kind == "res")
        dut.s_stat_tvalid.value = int(on and kind == "stat")
        if kind == "res":
            dut.s_res_tdata.value, dut.s_res_tkeep.value = actions[ai][1], actions[ai][2]
        elif kind == "stat":
            _, meta, status, detail = actions[ai]
            dut.s_stat_tdata.value, dut.s_stat_status.value, dut.s_stat_detail.value = meta, status, detail
        dut.m_axis_tready.value = int(rng.random() < p_out)
        dut.m_meta_tready.value = int(rng.random() < p_out)
        await ReadOnly()
        if on and sig(dut.s_res_tready if kind == "res" else dut.s_stat_tready):
            ai += 1
        if sig(dut.m_axis_tvalid) and sig(dut.m_axis_tready):
            keep = sig(dut.m_axis_tkeep)
            beats.append((kept_data(dut.m_axis_tdata, keep) & byte_mask(keep), keep, sig(dut.m_axis_tlast)))
        if sig(dut.m_meta_tvalid) and sig(dut.m_meta_tready):
            answers.append((sig(dut.m_meta_tdata), sig(dut.m_meta_status), sig(dut.m_meta_detail)))
        await FallingEdge(dut.clk)
        if ai == len(actions) and len(answers) == len(want_answers) and len(beats) == len(want_beats):
            idle(dut)
            dut.m_axis_tready.value = 1
            dut.m_meta_tready.value = 1
            for _ in range(4):
                await ReadOnly()
                assert not sig(dut.m_axis_tvalid) and not sig(dut.m_meta_tvalid), "output beyond the input"
                await FallingEdge(dut.clk)
            assert answers == want_answers
            assert beats == want_beats
            return
    raise AssertionError(f"stalled: {ai}/{len(actions)} in, {len(answers)} answers, {len(beats)} beats out")


@cocotb.test()
async def ok_and_refused(dut: Any) -> None:
    """Results of 0 to MAX_BEATS beats, OK (sent, tkeep of the last one kept) or not (dropped)."""
    idle(dut)
    await start(dut)
    rng = random.Random(111)
    for p_in, p_out in [(1.0, 1.0), (0.5, 0.2), (1.0, 0.6), (0.3, 1.0), (1.0, 0.05)]:
        await run(dut, rng, 30, p_in, p_out)


@cocotb.test()
async def reset_while_sending(dut: Any) -> None:
    """Reset with a result stored and its beats held on stalled sinks: nothing of it after."""
    idle(dut)
    await start(dut)
    rng = random.Random(112)
    dut.s_res_tvalid.value = 1
    dut.s_res_tdata.value, dut.s_res_tkeep.value = 7, FULL
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    idle(dut)
    dut.s_stat_tvalid.value = 1
    dut.s_stat_status.value = 0
    await FallingEdge(dut.clk)
    idle(dut)
    for _ in range(5):
        await FallingEdge(dut.clk)
    await ReadOnly()
    assert sig(dut.m_axis_tvalid) and sig(dut.m_meta_tvalid) and not sig(dut.s_res_tready)
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_axis_tvalid) and not sig(dut.m_meta_tvalid), "reset left an output"
    assert sig(dut.s_res_tready) and sig(dut.s_stat_tready), "reset left the buffer sending"
    await FallingEdge(dut.clk)
    await run(dut, rng, 10, 0.7, 0.7)
