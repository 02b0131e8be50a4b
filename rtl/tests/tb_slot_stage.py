"""cocotb testbench of rtl/offrac_slot_stage.v (selector + slot queues): core picks replayed; full; reset.

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
from tb_util import cycles_to, sig, start

SIZE_WIDTH = 32
DESC_WIDTH = 64


def idle(dut: Any) -> None:
    dut.s_req_tvalid.value = 0
    dut.s_req_tdata.value = 0
    dut.s_req_function.value = 0
    dut.s_req_cost.value = 0
    dut.m_axis_tready.value = 0
    dut.slot_done.value = 0
    dut.slot_mask.value = (1 << int(dut.SLOT_COUNT.value)) - 1  # every slot configured


def lane(h: Any, i: int, width: int) -> int:
    """Field i of a packed vector; it must be 0/1 (another lane, an empty queue's, may be X)."""
    bits = str(h.value)[::-1][width * i : width * (i + 1)]  # bit 0 first
    assert set(bits) <= {"0", "1"}, f"lane {i} is not 0/1: {bits[::-1]}"
    return int(bits[::-1], 2)


def bit(h: Any, i: int) -> int:
    return sig(h) >> i & 1


class Replay:
    """Drives one trace's groups of operations; checks picks, starts and descriptors."""

    def __init__(self, dut: Any, nslots: int) -> None:
        self.dut = dut
        self.queues: list[list[tuple[int, int]]] = [[] for _ in range(nslots)]  # (tag, cost) per slot
        self.diverged = 0
        self.tag = 0

    def differ(self, what: str, want: object, got: object) -> None:
        self.diverged += 1
        self.dut._log.info("divergence in %s: core %s, rtl %s", what, want, got)

    def events(self, ops: list[dict[str, Any]]) -> None:
        ready = done = 0
        for op in ops:
            s = op["slot"]
            if op["op"] == "start":
                valid = bit(self.dut.m_axis_tvalid, s)
                got = lane(self.dut.m_axis_tsize, s, SIZE_WIDTH) if valid else -1
                if got != op["cost"]:
                    self.differ(f"start of slot {s}", op["cost"], got)
                if valid:
                    tag = lane(self.dut.m_axis_tdata, s, DESC_WIDTH)
                    want = self.queues[s].pop(0) if self.queues[s] else None
                    if want is None or want[0] != tag:
                        self.differ(f"descriptor out of slot {s}", want, tag)
                ready |= 1 << s
            else:
                done |= 1 << s
        self.dut.m_axis_tready.value = ready
        self.dut.slot_done.value = done


async def replay(dut: Any, trace: dict[str, Any], rng: random.Random, p_ready: float) -> int:
    """Run one trace from reset; return the number of decisions that differ from the core's."""
    idle(dut)
    dut.m_sel_tready.value = 1
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    r = Replay(dut, len(trace["slots"]))
    groups: list[list[dict[str, Any]]] = []
    for op in trace["ops"]:
        if groups and groups[-1][0]["cycle"] == op["cycle"]:
            groups[-1].append(op)
        else:
            groups.append([op])
    expected: list[tuple[int, int]] = []  # (ok, slot) in order
    gi = wait = 0
    for _ in range(100 * len(trace["ops"]) + 1000):
        out_valid = sig(dut.m_sel_tvalid)
        ready = rng.random() < p_ready
        dut.m_sel_tready.value = int(ready)
        idle(dut)
        dut.rst.value = 0
        if out_valid and ready:
            got = (sig(dut.m_sel_ok), sig(dut.m_sel_slot))
            want = expected.pop(0)
            if not want[0]:
                got = (got[0], 0)  # a refusal names no slot
            if got != want:
                r.differ("pick", want, got)
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
                if not expected:
                    dut.rst.value = 1
                    r.queues = [[] for _ in r.queues]
                    issued = True
            elif head["op"] == "pick":
                if not out_valid or ready:  # s_req_tready, known at this edge
                    r.tag += 1
                    dut.s_req_tvalid.value = 1
                    dut.s_req_tdata.value = r.tag
                    dut.s_req_function.value = head["function"]
                    dut.s_req_cost.value = head["cost"]
                    s = head["slot"]
                    expected.append((int(s >= 0), max(s, 0)))
                    if s >= 0:
                        r.queues[s].append((r.tag, head["cost"]))
                    r.events(group[1:])
                    issued = True
            else:
                r.events(group)
                issued = True
            if issued:
                gi += 1
                if gi < len(groups):
                    wait = groups[gi][0]["cycle"] - head["cycle"] - 1
        await FallingEdge(dut.clk)
    else:
        raise AssertionError("trace replay stalled")
    idle(dut)
    return r.diverged


@cocotb.test()
async def core_traces(dut: Any) -> None:
    """Every pick and start of the core's traces, under stalls of the answer."""
    await start(dut)
    path = os.environ.get("OFFRAC_TRACES")
    assert path, "OFFRAC_TRACES names the trace file"
    with open(path) as f:
        traces = json.load(f)
    rng = random.Random(6)
    decisions = diverged = bad_traces = 0
    for t in traces:
        assert len(t["slots"]) == int(dut.SLOT_COUNT.value) and t["depth"] == int(dut.DEPTH.value)
        d = await replay(dut, t, rng, rng.choice([1.0, 1.0, 0.6, 0.2]))
        decisions += sum(op["op"] in ("pick", "start") for op in t["ops"])
        diverged += d
        bad_traces += d > 0
    summary = {
        "traces": len(traces),
        "decisions": decisions,
        "diverged": diverged,
        "traces_diverged": bad_traces,
    }
    dut._log.info("slot trace replay: %s", summary)
    if out := os.environ.get("OFFRAC_TRACE_SUMMARY"):
        with open(out, "w") as f:
            json.dump(summary, f)
    assert diverged == 0, summary


def funcs(dut: Any) -> list[int]:
    v = int(dut.SLOT_FUNCS.value)
    return [v >> (8 * i) & 0xFF for i in range(int(dut.SLOT_COUNT.value))]


async def offer(dut: Any, function: int, cost: int, tag: int = 0) -> tuple[int, int]:
    dut.m_sel_tready.value = 1
    dut.s_req_tvalid.value = 1
    dut.s_req_function.value = function
    dut.s_req_cost.value = cost
    dut.s_req_tdata.value = tag
    await FallingEdge(dut.clk)
    dut.s_req_tvalid.value = 0
    await ReadOnly()
    assert sig(dut.m_sel_tvalid)
    got = (sig(dut.m_sel_ok), sig(dut.m_sel_slot))
    await FallingEdge(dut.clk)
    return got


@cocotb.test()
async def full_queues(dut: Any) -> None:
    """Queues full by bytes, then by entries: 'no room' at once, never a wait; room comes back."""
    await start(dut)
    idle(dut)
    f = funcs(dut)
    fn = f[0]
    hosts = [i for i, g in enumerate(f) if g == fn]
    cap = int(dut.QUEUE_BYTES.value)
    depth = int(dut.DEPTH.value)
    for _ in hosts:
        ok, _ = await offer(dut, fn, cap)
        assert ok
    assert (await offer(dut, fn, 1))[0] == 0, "full by bytes"
    assert (await offer(dut, fn, 0))[0] == 1, "a zero-byte request still fits by bytes"
    absent = max(f) + 1
    assert (await offer(dut, absent, 0))[0] == 0, "a function no slot hosts"
    # start the head of every host: bytes free again, then fill by entries with zero-byte requests
    dut.m_axis_tready.value = (1 << len(f)) - 1
    await FallingEdge(dut.clk)
    idle(dut)
    n = 0
    while (await offer(dut, fn, 0))[0]:
        n += 1
        assert n <= depth * len(hosts)
    assert sum(lane(dut.slot_queued_bytes, s, SIZE_WIDTH) for s in hosts) == 0
    assert n + 1 == depth * len(hosts), f"{n} zero-byte requests took the free entries"
    assert (await offer(dut, fn, 0))[0] == 0, "full by entries"


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset with queued requests, a busy slot and an answer held on a stalled sink: all of it gone."""
    await start(dut)
    idle(dut)
    f = funcs(dut)
    for k in range(4):
        await offer(dut, f[0], 1, k)
    dut.m_axis_tready.value = 1
    await FallingEdge(dut.clk)
    idle(dut)
    assert sig(dut.slot_busy) & 1
    dut.m_sel_tready.value = 0
    dut.s_req_tvalid.value = 1
    dut.s_req_function.value = f[0]
    await FallingEdge(dut.clk)
    idle(dut)
    assert sig(dut.m_sel_tvalid)
    dut.rst.value = 1
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_sel_tvalid) and sig(dut.m_axis_tvalid) == 0 and sig(dut.slot_busy) == 0
    assert sig(dut.slot_queued_bytes) == 0
    await FallingEdge(dut.clk)
    assert await offer(dut, f[0], 5, 9) == (1, 0), "the turn starts again at the first host"
    await ReadOnly()
    assert bit(dut.m_axis_tvalid, 0) and lane(dut.m_axis_tdata, 0, DESC_WIDTH) == 9


@cocotb.test()
async def request_latency(dut: Any) -> None:
    """Cycles from a complete request in to its descriptor at the head of a slot's lane (queues empty,
    every sink ready): what the selector and the slot queue add."""
    await start(dut)
    idle(dut)
    dut.m_sel_tready.value = 1

    def drive() -> None:
        dut.s_req_function.value = funcs(dut)[0]
        dut.s_req_cost.value = 64
        dut.s_req_tdata.value = 5

    cycles, _ = await cycles_to(dut, [drive], "s_req_tvalid", "s_req_tready", "m_axis_tvalid")
    dut._log.info("latency request in -> slot lane: %d cycles (%.3f us at 250 MHz)", cycles, cycles * 0.004)
    assert cycles == 1, cycles  # docs/rtl.md, "Cycles per request"
