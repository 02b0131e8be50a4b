"""cocotb testbench of rtl/offrac_minmax_elem.v: (x - lo) / (hi - lo) bit for bit against numpy float32.

The unit is a pipeline of fixed latency (LATENCY cycles, one element a cycle) once it holds the reciprocal
of the range (hi - lo); a new range holds it RECIP cycles while that is computed. fixed_latency pins both.
"""

from __future__ import annotations

import random
from typing import Any

import cocotb
import numpy as np
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from minmax_model import F32, bits, f32, nan_min_max, normalise, random_array
from tb_util import sig, start, stream

Triple = tuple[int, int, int]  # x, lo, hi as float32 bits

MAX = 0x7F7FFFFF
NEG_MAX = 0xFF7FFFFF
INF = 0x7F800000
NEG_INF = 0xFF800000
ONE = 0x3F800000
LATENCY = 8  # cycles from an element taken to its result valid, its range's reciprocal held
RECIP = 58  # cycles the pipeline is held when an element with a new range reaches its second stage

# (x, lo, hi) the random draws may miss: zeros of both signs, the f64 path at its extremes,
# quotients that round to a subnormal or to zero, the all-NaN request (lo = +inf, hi = -inf)
EDGES: list[Triple] = [
    (0x80000000, 0x00000000, ONE),  # -0 - +0 = -0: the output is -0.0
    (0x00000000, 0x80000000, ONE),
    (0x80000000, 0x80000000, ONE),
    (0x00000000, 0x00000000, 0x00000000),  # zero range
    (0x80000000, 0x00000000, 0x80000000),
    (0x7FC00000, 0x00000000, ONE),  # NaN, quiet and signalling, any sign and payload
    (0x7F800001, 0x00000000, ONE),
    (0xFFA5A5A5, ONE, ONE),
    (0x7F812345, INF, NEG_INF),
    (0x00000000, INF, NEG_INF),
    (0x00000000, NEG_MAX, MAX),  # hi - lo overflows: f64 path
    (MAX, NEG_MAX, MAX),
    (NEG_MAX, NEG_MAX, MAX),
    (0x00000001, NEG_MAX, MAX),
    (0x7F000000, 0xFF000000, MAX),
    (0x00000001, 0x00000000, MAX),  # 2^-149 / 3.4e38: rounds to zero
    (0x00000001, 0x00000000, 0x00800000),  # subnormal quotients
    (0x00000003, 0x00000000, 0x3F000000),
    (0x00000001, 0x00000000, 0x00000002),
    (0x00400000, 0x00000000, 0x3F800000),
    (0x00000001, 0x80000001, 0x00000002),
    (0x00000003, 0x00000000, 0x40000000),  # subnormal ties: 1.5, 0.5 and 2.5 units to even
    (0x00000001, 0x00000000, 0x40000000),
    (0x00000005, 0x00000000, 0x40000000),
    # the same with a range whose reciprocal is inexact (6.0): 9/6, 15/6 and 21/6 units, and an exact
    # 3/6; the product gives one less than the quotient and the remainder check must add it back
    (0x00000009, 0x00000000, 0x40C00000),
    (0x0000000F, 0x00000000, 0x40C00000),
    (0x00000015, 0x00000000, 0x40C00000),
    (0x40400000, 0x00000000, 0x40C00000),
    # f64 path, quotient inexact but a float32 tie once rounded to 53 bits: double rounding differs
    # from one rounding of the exact quotient (found by search, see docs/rtl.md)
    (0xED1FA70C, 0xFB503F87, 0x7F7F74F6),
    (0x6C3C5A51, 0xFAAC2E99, 0x7F7FF598),
    (0xEC96EFC7, 0xFB6FDCAA, 0x7F7F984E),
    (0x3F800001, ONE, 0x3F800003),
    (0x3F800002, ONE, 0x3F800003),
]


def expected(t: Triple) -> int:
    x, lo, hi = t
    return bits(normalise(np.array([f32(x)], dtype=F32), f32(lo), f32(hi))[0])


def random_triples(rng: random.Random, n: int) -> list[Triple]:
    """Elements with their request's lo and hi, as the wrapper would present them."""
    out: list[Triple] = []
    while len(out) < n:
        xs = random_array(rng, rng.randint(1, 40))
        lo, hi = nan_min_max(xs)
        assert not np.isinf(xs).any()  # the wrapper refuses infinities
        for x in xs[: rng.randint(1, 10)]:
            out.append((bits(x), bits(lo), bits(hi)))
    return out[:n]


def drive(dut: Any, t: Triple | None) -> None:
    dut.s_valid.value = int(t is not None)
    x, lo, hi = t if t is not None else (0xA5A5A5A5, 0xA5A5A5A5, 0xA5A5A5A5)
    dut.s_x.value, dut.s_lo.value, dut.s_hi.value = x, lo, hi


async def run(dut: Any, triples: list[Triple], rng: random.Random, p_valid: float, p_ready: float) -> None:
    got = await stream(
        dut,
        triples,
        lambda t: drive(dut, t),
        "s_valid",
        "s_ready",
        "m_valid",
        "m_ready",
        lambda: sig(dut.m_y),
        rng,
        p_valid,
        p_ready,
        max_cycles=80 * len(triples) + 100,
    )
    for t, y in zip(triples, got, strict=True):
        want = expected(t)
        assert y == want, f"x, lo, hi = {[f'{v:08x}' for v in t]}: got {y:08x}, want {want:08x}"


@cocotb.test()
async def edge_cases(dut: Any) -> None:
    """Signed zeros, NaN payloads, the f64 path, subnormal and underflowing quotients, the all-NaN case."""
    drive(dut, None)
    await start(dut)
    await run(dut, EDGES, random.Random(40), 1.0, 1.0)


@cocotb.test()
async def random_elements(dut: Any) -> None:
    """Elements of random arrays (any bit pattern, subnormal, huge, close, ordinary; NaN) with lo and hi."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(41)
    triples = random_triples(rng, 1500)
    await run(dut, triples, rng, 1.0, 1.0)
    wide = sum(1 for _, lo, hi in triples if np.isinf(F32(f32(hi) - f32(lo))) and f32(hi) > f32(lo))
    sub = sum(1 for t in triples if 0 < expected(t) < 0x00800000)
    dut._log.info(
        "%d random elements pass (%d on the f64 path, %d subnormal results)", len(triples), wide, sub
    )
    assert wide > 50 and sub > 20, (wide, sub)


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Gaps on the input, a sink ready 30% of the time: every result once, in order."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(42)
    await run(dut, random_triples(rng, 300), rng, 0.3, 0.3)


async def timed(dut: Any, g: list[Triple], wait: bool) -> None:
    """g back to back, the sink ready: with `wait` (a range not held) the first two elements wait RECIP
    cycles more, the others are taken every cycle, each out exactly LATENCY cycles later, bit for bit."""
    taken: list[int] = []
    out: list[tuple[int, int]] = []
    for t in range(len(g) + LATENCY + RECIP + 5):
        drive(dut, g[len(taken)] if len(taken) < len(g) else None)
        await ReadOnly()
        if len(taken) < len(g) and sig(dut.s_ready):
            taken.append(t)
        if sig(dut.m_valid):
            out.append((t, sig(dut.m_y)))
        await FallingEdge(dut.clk)
    assert len(out) == len(g)
    extra = RECIP if wait else 0
    for i, (t_in, (t_out, y), tr) in enumerate(zip(taken, out, g, strict=True)):
        assert t_out - t_in == LATENCY + (extra if i < 2 else 0), f"element {i}: {t_out - t_in} cycles"
        assert y == expected(tr), f"element {i}: {y:08x}, want {expected(tr):08x}"
    assert taken == [i + (extra if i >= 2 else 0) for i in range(len(g))], taken


@cocotb.test()
async def fixed_latency(dut: Any) -> None:
    """One range after the other, a reset between them (no reciprocal held): the first two elements
    wait RECIP cycles, the rest go a cycle each, LATENCY cycles through; the same range again right
    after: no wait at all."""
    drive(dut, None)
    await start(dut)
    rng = random.Random(44)
    dut.m_ready.value = 1
    groups: list[list[Triple]] = [[e] for e in EDGES[:6]]
    while len(groups) < 12:
        xs = random_array(rng, 60)
        lo, hi = nan_min_max(xs)
        groups.append([(bits(x), bits(lo), bits(hi)) for x in xs])
    for g in groups:
        dut.rst.value = 1
        await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0
        await timed(dut, g, True)
        await timed(dut, g, False)


@cocotb.test()
async def reset_mid_division(dut: Any) -> None:
    """Reset with one element held on a stalled sink and one in the middle of the divider: nothing comes
    out, the next elements are right."""
    drive(dut, None)
    await start(dut)
    dut.m_ready.value = 1
    for gap in (RECIP + 2, 0):  # the first element past the reciprocal's wait, then the second
        drive(dut, (0x3F900000, ONE, 0x40000000))
        await FallingEdge(dut.clk)
        drive(dut, None)
        for _ in range(gap):
            await FallingEdge(dut.clk)
    dut.m_ready.value = 0
    for _ in range(LATENCY):
        await FallingEdge(dut.clk)
    await ReadOnly()
    assert sig(dut.m_valid) and not sig(dut.s_ready), "the first element is not held on the stalled sink"
    await FallingEdge(dut.clk)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    for _ in range(40):
        await ReadOnly()
        assert not sig(dut.m_valid) and sig(dut.s_ready), "reset left the element"
        await FallingEdge(dut.clk)
    rng = random.Random(43)
    await run(dut, random_triples(rng, 50), rng, 0.7, 0.7)
