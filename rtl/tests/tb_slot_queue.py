"""cocotb testbench of rtl/offrac_slot_queue.v: FIFO order, bytes, busy until done, full by entries, reset."""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from tb_util import sig, start, zero


def idle(dut: Any) -> None:
    zero(dut, "s_axis_tvalid", "s_axis_tdata", "s_axis_tsize", "m_axis_tready", "done")


@cocotb.test()
async def random_traffic(dut: Any) -> None:
    """Random pushes, starts and dones against a model: order, bytes, busy, full, each checked every cycle."""
    await start(dut)
    idle(dut)
    depth = int(dut.DEPTH.value)
    rng = random.Random(5)
    queue: list[tuple[int, int]] = []
    busy = False
    started = full_seen = 0
    for tag in range(1, 4001):
        push = rng.random() < 0.5
        pop = rng.random() < 0.4
        done = busy and rng.random() < 0.3
        size = rng.choice([0, 1, rng.randrange(1, 5000)])
        dut.s_axis_tvalid.value = int(push)
        dut.s_axis_tdata.value = tag
        dut.s_axis_tsize.value = size
        dut.m_axis_tready.value = int(pop)
        dut.done.value = int(done)
        await ReadOnly()
        assert sig(dut.queued_bytes) == sum(s for _, s in queue)
        assert sig(dut.busy) == busy and sig(dut.full) == (len(queue) == depth)
        assert sig(dut.s_axis_tready) == (len(queue) < depth)
        assert sig(dut.m_axis_tvalid) == (bool(queue) and not busy)
        took = sig(dut.m_axis_tvalid) and pop
        if took:
            assert (sig(dut.m_axis_tdata), sig(dut.m_axis_tsize)) == queue[0]
        full_seen += len(queue) == depth
        if took:
            queue.pop(0)
            started += 1
        if done:
            busy = False
        if took:
            busy = True  # a start wins over a done in the same cycle
        if push and sig(dut.s_axis_tready):
            queue.append((tag, size))
        await FallingEdge(dut.clk)
        idle(dut)
    assert started > 300 and full_seen > 50, (started, full_seen)


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset with entries queued and the slot busy: empty, idle, zero bytes; then works again."""
    await start(dut)
    idle(dut)
    for k in range(3):
        dut.s_axis_tvalid.value = 1
        dut.s_axis_tdata.value = k
        dut.s_axis_tsize.value = 10
        await FallingEdge(dut.clk)
    idle(dut)
    dut.m_axis_tready.value = 1
    await FallingEdge(dut.clk)
    idle(dut)
    assert sig(dut.busy) and sig(dut.queued_bytes) == 20
    dut.rst.value = 1
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.busy) and sig(dut.queued_bytes) == 0 and not sig(dut.m_axis_tvalid)
    await FallingEdge(dut.clk)
    dut.s_axis_tvalid.value = 1
    dut.s_axis_tdata.value = 42
    dut.s_axis_tsize.value = 7
    await FallingEdge(dut.clk)
    idle(dut)
    await ReadOnly()
    assert sig(dut.m_axis_tvalid) and sig(dut.m_axis_tdata) == 42 and sig(dut.queued_bytes) == 7
