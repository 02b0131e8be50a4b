"""cocotb testbench of rtl/offrac_accel_bucketize.v against the software's bucketize (its oracle).

Built with SETS_MAX = 3, BORDERS_MAX = 24 (the built-in set has 22) and MAX_BEATS = 8 (test_rtl.py).
"""

from __future__ import annotations

import random
import re
import struct
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from tb_util import (
    BEAT,
    builtin_state,
    idle,
    pulse_reset,
    request_cycles,
    run_requests,
    sig,
    software,
    start,
    to_beats,
)

SETS_MAX = 3
BORDERS_MAX = 24
MAX_BEATS = 8
STATUS_OK, STATUS_TOO_LARGE, STATUS_BAD_INPUT = 0, 3, 5
F32 = np.float32


def bits(x: float | np.float32) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def as_float(b: int) -> float:
    return struct.unpack("<f", struct.pack("<I", b))[0]


def border_set(rng: random.Random, m: int) -> list[int]:
    """m finite, strictly ascending float32 borders (as bits): spread, clustered or around zero."""
    kind = rng.choice(["spread", "close", "zero", "tiny"])
    if kind == "close":
        base = F32(rng.uniform(-100, 100))
        xs = [base]
        for _ in range(m - 1):
            xs.append(np.nextafter(xs[-1], F32(np.inf)))
    else:
        scale = {"spread": 1e30, "zero": 10.0, "tiny": 1e-38}[kind]
        vals: set[float] = {float(F32(rng.uniform(-scale, scale))) for _ in range(4 * m)}
        if kind == "zero":
            vals |= {0.0}
        xs = [F32(v) for v in sorted(vals)][:m]
        while len(xs) < m:
            xs.append(np.nextafter(xs[-1], F32(np.inf)))
    out = [bits(x) for x in xs]
    if kind == "zero" and rng.random() < 0.5:  # -0.0 is a valid border too: it must count as 0.0
        out = [0x80000000 if b == 0 else b for b in out]
    return out


def values(rng: random.Random, borders: list[int], n: int) -> list[int]:
    """Borders themselves, their neighbours, +-0, +-inf, subnormals and random floats (bits)."""
    out = []
    for _ in range(n):
        r = rng.random()
        b = np.frombuffer(struct.pack("<I", rng.choice(borders)), "<f4")[0]
        if r < 0.25:
            out.append(bits(b))
        elif r < 0.5:
            out.append(bits(np.nextafter(b, F32(rng.choice([np.inf, -np.inf])))))
        elif r < 0.6:
            out.append(rng.choice([0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x00000001, 0x80000001]))
        else:
            x = rng.getrandbits(32)
            while (x >> 23) & 0xFF == 0xFF and x & 0x7FFFFF:  # no NaN here
                x = rng.getrandbits(32)
            out.append(x)
    return out


def nan(rng: random.Random) -> int:
    return rng.choice([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFFFFFFFF, 0x7FBFFFFF])


def request(rng: random.Random, sets: list[list[int]]) -> tuple[bytes, int]:
    """A payload and its set (valid mostly; not configured, NaN, empty, ragged and too large too)."""
    kind = rng.random()
    s = rng.randrange(len(sets)) if sets else 0
    borders = sets[s] if sets else [0]
    n = rng.choice([1, 2, 15, 16, 17, 33, rng.randint(1, MAX_BEATS * 16)])
    xs = values(rng, borders, n)
    if kind < 0.08:
        s = rng.choice([len(sets), len(sets) + 1, 2**64 - 1])
    elif kind < 0.18:
        for _ in range(rng.randint(1, 3)):
            xs[rng.randrange(n)] = nan(rng)
    elif kind < 0.22:
        return b"", s
    elif kind < 0.26:
        return struct.pack(f"<{n}I", *xs) + rng.randbytes(rng.choice([1, 2, 3])), s
    elif kind < 0.3:
        xs = values(rng, borders, MAX_BEATS * 16 + rng.choice([0, 1, 20]))  # exactly full, or over
    return struct.pack(f"<{len(xs)}I", *xs), s


def detail_of(status: int, message: str) -> int:
    """The RTL's detail: the NaN's index, or the number of sets, as the software's message names them."""
    if m := re.search(r"NaN at index (\d+)", message):
        return int(m[1])
    if m := re.search(r"this node has (\d+)\)", message):
        return int(m[1])
    return 0


def model_for(sets: list[list[int]] | None, reqs: list[tuple[bytes, int]]) -> Any:
    answers = software([("bucketize", s, p) for p, s in reqs], borders=sets)
    table = {}
    for (p, s), (status, msg, out) in zip(reqs, answers, strict=True):
        if len(p) > MAX_BEATS * BEAT:
            table[(p, s)] = (STATUS_TOO_LARGE, MAX_BEATS * BEAT, b"")  # the node refuses it before running
        else:
            table[(p, s)] = (status, detail_of(status, msg), out)
    return lambda p, meta: table[(p, meta & (2**64 - 1))]


async def load(dut: Any, words: list[int], rng: random.Random, p_valid: float = 1.0) -> None:
    """One configuration packet, then wait until a request could be taken."""
    bi = 0
    for _ in range(5_000):
        on = bi < len(words) and rng.random() < p_valid
        dut.s_cfg_tvalid.value = int(on)
        if bi < len(words):
            dut.s_cfg_tdata.value = words[bi]
            dut.s_cfg_tlast.value = int(bi == len(words) - 1)
        await ReadOnly()
        if on and sig(dut.s_cfg_tready):
            bi += 1
        done = bi == len(words) and sig(dut.s_meta_tready)
        await FallingEdge(dut.clk)
        dut.s_cfg_tvalid.value = 0
        if done:
            return
    raise AssertionError(f"configuration stalled at word {bi} of {len(words)}")


def packet(sets: list[list[int]]) -> list[int]:
    return [len(sets)] + [w for s in sets for w in [len(s), *s]]


async def check(
    dut: Any,
    sets: list[list[int]] | None,
    reqs: list[tuple[bytes, int]],
    rng: random.Random,
    p_in: float,
    p_out: float,
) -> list[tuple[int, int, int]]:
    metas = [rng.getrandbits(64) << 64 | s for _, s in reqs]
    answers, _ = await run_requests(dut, [p for p, _ in reqs], rng, p_in, p_out, metas, model_for(sets, reqs))
    return answers


@cocotb.test()
async def builtin_set(dut: Any) -> None:
    """The node's built-in set 0 (0 and 2^0..2^20) as the software has it: borders, neighbours, extremes."""
    idle(dut)
    await start(dut)
    rng = random.Random(81)
    sets = builtin_state()["borders"]
    await load(dut, packet(sets), rng)
    assert sig(dut.cfg_sets) == 1 and not sig(dut.cfg_error)
    reqs = [request(rng, sets) for _ in range(30)]
    answers = await check(dut, None, reqs, rng, 1.0, 1.0)  # None: the oracle's own built-in state
    assert STATUS_OK in {a[1] for a in answers}


@cocotb.test()
async def random_sets(dut: Any) -> None:
    """Three sets of 1 to BORDERS_MAX borders; every error among valid requests; then fewer sets."""
    idle(dut)
    await start(dut)
    rng = random.Random(82)
    for m in ([1, BORDERS_MAX, 7], [rng.randint(1, BORDERS_MAX) for _ in range(3)], [5]):
        sets = [border_set(rng, k) for k in m]
        if len(sets[-1]) < BORDERS_MAX and not {0, 0x80000000} & set(sets[-1]):  # a -0.0 border
            sets[-1] = sorted([*sets[-1], 0x80000000], key=as_float)
        await load(dut, packet(sets), rng, 0.6)
        assert sig(dut.cfg_sets) == len(sets) and not sig(dut.cfg_error)
        reqs = [request(rng, sets) for _ in range(25)]
        answers = await check(dut, sets, reqs, rng, 0.9, 0.9)
        seen = {(a[1], a[2] != 0) for a in answers}
        assert (STATUS_OK, False) in seen and (STATUS_BAD_INPUT, True) in seen, seen


@cocotb.test()
async def bad_configuration(dut: Any) -> None:
    """Packets outside the limits leave no set (cfg_error): every request is 'not configured'; an
    empty packet (S = 0) is valid and also leaves none."""
    idle(dut)
    await start(dut)
    rng = random.Random(83)
    good = packet([border_set(rng, 3)])
    bad = [
        [SETS_MAX + 1, 1, 0],
        [1, 0, 0],
        [1, BORDERS_MAX + 1] + [0] * (BORDERS_MAX + 1),
        good[:-1],  # tlast one word early
        [*good, 0],  # and one late
        [2, *good[1:]],  # a second set announced, not sent
    ]
    for words in bad:
        await load(dut, good, rng)
        assert sig(dut.cfg_sets) == 1
        await load(dut, words, rng)
        assert sig(dut.cfg_error) and sig(dut.cfg_sets) == 0, words
        await check(dut, [], [request(rng, []) for _ in range(3)], rng, 1.0, 1.0)
    await load(dut, [0], rng)
    assert not sig(dut.cfg_error) and sig(dut.cfg_sets) == 0
    await check(dut, [], [request(rng, []) for _ in range(3)], rng, 1.0, 1.0)


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse inputs and sinks ready 5-60% of the time: nothing dropped, duplicated or reordered."""
    idle(dut)
    await start(dut)
    rng = random.Random(84)
    sets = [border_set(rng, k) for k in (4, 16)]
    await load(dut, packet(sets), rng)
    for p_in, p_out in [(0.5, 0.2), (1.0, 0.6), (0.3, 1.0), (1.0, 0.05)]:
        await check(dut, sets, [request(rng, sets) for _ in range(8)], rng, p_in, p_out)


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset while a request is read in and while its result waits on stalled sinks (the sets stay);
    reset in the middle of a configuration packet (no set is trusted: reload)."""
    idle(dut)
    await start(dut)
    rng = random.Random(85)
    sets = [border_set(rng, k) for k in (3, 9)]
    await load(dut, packet(sets), rng)
    for cycles in (5, 200):
        beats = to_beats(struct.pack("<100I", *values(rng, sets[0], 100)))
        dut.s_meta_tvalid.value = 1
        dut.s_meta_tdata.value = 0
        await FallingEdge(dut.clk)
        dut.s_meta_tvalid.value = 0
        bi = 0
        for _ in range(cycles):  # beats as fast as taken, then the sinks stalled (idle: not ready)
            dut.s_axis_tvalid.value = int(bi < len(beats))
            if bi < len(beats):
                dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[bi]
            await ReadOnly()
            if bi < len(beats) and sig(dut.s_axis_tready):
                bi += 1
            await FallingEdge(dut.clk)
        await pulse_reset(dut)
        assert sig(dut.cfg_sets) == 2, "a reset between packets lost the sets"
        await check(dut, sets, [request(rng, sets) for _ in range(6)], rng, 0.7, 0.7)
    words = packet(sets)
    dut.s_cfg_tvalid.value = 1
    for w in words[:6]:
        dut.s_cfg_tdata.value, dut.s_cfg_tlast.value = w, 0
        await FallingEdge(dut.clk)
    idle(dut)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert sig(dut.cfg_sets) == 0 and sig(dut.cfg_error), "a packet cut by a reset was trusted"
    await FallingEdge(dut.clk)
    await check(dut, [], [request(rng, []) for _ in range(2)], rng, 1.0, 1.0)
    await load(dut, words, rng)
    await check(dut, sets, [request(rng, sets) for _ in range(6)], rng, 0.7, 0.7)


@cocotb.test()
async def cycles_for_512b(dut: Any) -> None:
    """T_acc of a full request (MAX_BEATS beats): one element a cycle, 16 a beat (docs/rtl.md)."""
    idle(dut)
    await start(dut)
    rng = random.Random(86)
    sets = builtin_state()["borders"]
    await load(dut, packet(sets), rng)
    n = MAX_BEATS * 16
    cycles = await request_cycles(dut, struct.pack(f"<{n}I", *values(rng, sets[0], n)), 0)
    dut._log.info("Bucketize %d B: %d cycles (%.3f us at 250 MHz)", 4 * n, cycles, cycles * 0.004)
    assert cycles == 92, cycles  # docs/rtl.md (PAR = 2; 163 at one element a cycle)
