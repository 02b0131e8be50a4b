"""cocotb testbench of rtl/offrac_pool_admit.v: the core's admissions replayed; full pool; stalls; reset.

The replay reads traces written by the core (`crates/core/examples/rtl_trace.rs`,
path in OFFRAC_TRACES) and counts the decisions where the RTL differs
(OFFRAC_TRACE_SUMMARY, when set, receives the counts as JSON).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from tb_util import sig, start

SIZE_WIDTH = 32


def idle(dut: Any) -> None:
    dut.s_admit_tvalid.value = 0
    dut.s_admit_size.value = 0
    dut.finish_valid.value = 0
    dut.finish_buffer.value = 0
    dut.abort_valid.value = 0
    dut.abort_buffer.value = 0
    dut.abort_size.value = 0
    dut.release_valid.value = 0
    dut.release_buffer.value = 0
    dut.release_size.value = 0


def used(dut: Any) -> list[int]:
    n = int(dut.BUF_COUNT.value)
    v = sig(dut.buf_used)
    return [v >> (SIZE_WIDTH * i) & ((1 << SIZE_WIDTH) - 1) for i in range(n)]


def drive_events(dut: Any, ops: list[dict[str, Any]]) -> None:
    for op in ops:
        kind = op["op"]
        getattr(dut, f"{kind}_valid").value = 1
        getattr(dut, f"{kind}_buffer").value = op["buffer"]
        if kind != "finish":
            getattr(dut, f"{kind}_size").value = op["size"]


async def replay(dut: Any, trace: dict[str, Any], rng: random.Random, p_ready: float) -> int:
    """Run one trace from reset; return the number of decisions that differ from the core's."""
    idle(dut)
    dut.m_admit_tready.value = 1
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    groups: list[list[dict[str, Any]]] = []
    for op in trace["ops"]:
        if groups and groups[-1][0]["cycle"] == op["cycle"]:
            groups[-1].append(op)
        else:
            groups.append([op])
    expected: list[tuple[int, int, int]] = []  # (ok, buffer, size) in order
    diverged = 0
    gi = 0
    wait = 0
    for _ in range(100 * len(trace["ops"]) + 1000):
        out_valid = sig(dut.m_admit_tvalid)
        ready = rng.random() < p_ready
        dut.m_admit_tready.value = int(ready)
        idle(dut)
        dut.rst.value = 0
        if out_valid and ready:
            got = (sig(dut.m_admit_ok), sig(dut.m_admit_buffer), sig(dut.m_admit_size))
            want = expected.pop(0)
            if not want[0]:
                got = (0, 0, got[2])  # a refusal names no buffer
            if got != want:
                diverged += 1
                dut._log.info("divergence: core %s, rtl %s", want, got)
        if gi == len(groups):
            if not expected:
                break
        elif wait > 0:
            wait -= 1
        else:
            group = groups[gi]
            head = group[0]
            issued = False
            if head["op"] == "reset":
                if not expected:  # answers in flight are the directed test's business
                    dut.rst.value = 1
                    issued = True
            elif head["op"] == "admit":
                if not out_valid or ready:  # s_admit_tready, known at this edge
                    dut.s_admit_tvalid.value = 1
                    dut.s_admit_size.value = head["size"]
                    b = head["buffer"]
                    expected.append((int(b >= 0), max(b, 0), head["size"]))
                    drive_events(dut, group[1:])
                    issued = True
            else:
                drive_events(dut, group)
                issued = True
            if issued:
                gi += 1
                if gi < len(groups):  # the trace's idle cycles (a stall only adds to them)
                    wait = groups[gi][0]["cycle"] - head["cycle"] - 1
        await FallingEdge(dut.clk)
    else:
        raise AssertionError("trace replay stalled")
    idle(dut)
    return diverged


@cocotb.test()
async def core_traces(dut: Any) -> None:
    """Every admission decision of the core's traces, under output stalls."""
    await start(dut)
    path = os.environ.get("OFFRAC_TRACES")
    assert path, "OFFRAC_TRACES names the trace file"
    with open(path) as f:
        traces = json.load(f)
    rng = random.Random(12)
    n = int(dut.BUF_COUNT.value)
    decisions = diverged = bad_traces = 0
    for t in traces:
        assert t["buffers"] == n
        p_ready = rng.choice([1.0, 1.0, 0.6, 0.2])
        d = await replay(dut, t, rng, p_ready)
        decisions += sum(op["op"] == "admit" for op in t["ops"])
        diverged += d
        bad_traces += d > 0
    summary = {
        "traces": len(traces),
        "decisions": decisions,
        "diverged": diverged,
        "traces_diverged": bad_traces,
    }
    dut._log.info("pool trace replay: %s", summary)
    if out := os.environ.get("OFFRAC_TRACE_SUMMARY"):
        with open(out, "w") as f:
            json.dump(summary, f)
    assert diverged == 0, summary


async def offer(dut: Any, size: int) -> tuple[int, int]:
    """One admission with the output always ready: (ok, buffer)."""
    dut.m_admit_tready.value = 1
    dut.s_admit_tvalid.value = 1
    dut.s_admit_size.value = size
    await ReadOnly()
    assert sig(dut.s_admit_tready)
    await FallingEdge(dut.clk)
    dut.s_admit_tvalid.value = 0
    await ReadOnly()
    assert sig(dut.m_admit_tvalid)
    got = (sig(dut.m_admit_ok), sig(dut.m_admit_buffer))
    await FallingEdge(dut.clk)
    return got


@cocotb.test()
async def full_pool(dut: Any) -> None:
    """Every buffer mid-request: each new request is refused at once (BUSY), never held; room comes back."""
    await start(dut)
    idle(dut)
    n = int(dut.BUF_COUNT.value)
    policy = int(dut.POLICY.value)
    got = [await offer(dut, 10) for _ in range(n)]
    assert sorted(b for _, b in got) == list(range(n)) and all(ok for ok, _ in got)
    assert sig(dut.buf_reassembling) == (1 << n) - 1
    for _ in range(3):
        assert (await offer(dut, 1))[0] == 0
    # too large for any buffer, even an empty one
    dut.abort_valid.value = 1
    dut.abort_buffer.value = n - 1
    dut.abort_size.value = 10
    await FallingEdge(dut.clk)
    idle(dut)
    assert (await offer(dut, int(dut.BUF_BYTES.value) + 1))[0] == 0
    ok, b = await offer(dut, int(dut.BUF_BYTES.value) - 10 if policy == 0 else 5)
    if policy != 0:  # naive RR's turn may sit on a busy buffer; the others must find the free one
        assert (ok, b) == (1, n - 1)
    assert used(dut)[:-1] == [10] * (n - 1)


@cocotb.test()
async def stalled_output(dut: Any) -> None:
    """A stalled answer holds its beat and the input: every request answered once, in order."""
    await start(dut)
    idle(dut)
    rng = random.Random(3)
    sizes = [rng.randrange(0, 40) for _ in range(200)]
    answers: list[tuple[int, int, int]] = []
    i = 0
    for _ in range(10_000):
        ready = rng.random() < 0.1
        dut.m_admit_tready.value = int(ready)
        dut.s_admit_tvalid.value = int(i < len(sizes) and rng.random() < 0.7)
        dut.s_admit_size.value = sizes[i] if i < len(sizes) else 0
        await ReadOnly()
        assert sig(dut.s_admit_tready) == int(not sig(dut.m_admit_tvalid) or ready)
        took = sig(dut.s_admit_tvalid) and sig(dut.s_admit_tready)
        answer = None
        if sig(dut.m_admit_tvalid) and ready:
            answer = (sig(dut.m_admit_ok), sig(dut.m_admit_buffer), sig(dut.m_admit_size))
            answers.append(answer)
        await FallingEdge(dut.clk)
        idle(dut)
        if answer and answer[0]:  # the request is abandoned at once: its room comes back
            dut.abort_valid.value = 1
            dut.abort_buffer.value = answer[1]
            dut.abort_size.value = answer[2]
        i += took
        if len(answers) == len(sizes):
            break
    await FallingEdge(dut.clk)
    idle(dut)
    assert [s for _, _, s in answers] == sizes
    assert sum(ok for ok, _, _ in answers) > len(sizes) // 2
    assert used(dut) == [0] * int(dut.BUF_COUNT.value) and sig(dut.buf_reassembling) == 0
    for _ in range(3):
        await ReadOnly()
        assert not sig(dut.m_admit_tvalid), "an answer beyond the requests"
        await FallingEdge(dut.clk)


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset with buffers mid-request and an answer held on a stalled sink: all of it is gone."""
    await start(dut)
    idle(dut)
    n = int(dut.BUF_COUNT.value)
    for _ in range(n - 1):
        await offer(dut, 7)
    dut.m_admit_tready.value = 0
    dut.s_admit_tvalid.value = 1
    dut.s_admit_size.value = 3
    await FallingEdge(dut.clk)
    idle(dut)
    await ReadOnly()
    assert sig(dut.m_admit_tvalid)
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_admit_tvalid)
    assert sig(dut.buf_reassembling) == 0 and used(dut) == [0] * n
    await FallingEdge(dut.clk)
    got = [await offer(dut, 1) for _ in range(n)]
    assert all(ok for ok, _ in got)
    if int(dut.POLICY.value) != 2:
        assert [b for _, b in got] == list(range(n)), "the turn starts again at buffer 0"
