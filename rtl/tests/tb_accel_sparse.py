"""cocotb testbench of rtl/offrac_accel_sparse.v against the software's sparsetransform (its oracle).

Built with MAX_BEATS = 8 (test_rtl.py) so that TOO_LARGE is cheap to reach.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from tb_util import BEAT, idle, pulse_reset, request_cycles, run_requests, sig, software, start, to_beats

MAX_BEATS = 8
MAX_ELEMS = MAX_BEATS * 16
STATUS_OK, STATUS_TOO_LARGE, STATUS_BAD_INPUT = 0, 3, 5
SPECIAL = [0x00000000, 0x80000000, 0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000, 0x00000001, 0x80000001]


def dense(rng: random.Random, n: int) -> list[int]:
    """float32 bits: all zero, all non-zero, or sparse; +-0, NaN, infinities and subnormals among them."""
    p_zero = rng.choice([0.0, 0.3, 0.8, 1.0])
    out = []
    for _ in range(n):
        r = rng.random()
        if r < p_zero:
            out.append(rng.choice([0x00000000, 0x80000000]))
        elif r < p_zero + 0.1:
            out.append(rng.choice(SPECIAL))
        else:
            out.append(rng.getrandbits(32))
    return out


def shape(rng: random.Random, n: int) -> int:
    """cols: 0 (one row), 1, n, a divisor, a non-divisor, more than n, 2^64 - 1, and two whose low bits
    are a divisor (2^8 + 1: 1 in the 8-bit element count of MAX_BEATS 8; 2^32 + n)."""
    divisors = [d for d in range(1, n + 1) if n % d == 0]
    some = [rng.choice(divisors), rng.choice(divisors), rng.randint(1, n)]
    return rng.choice([0, 0, 1, n, *some, n + 1, 2**64 - 1, 2**8 + 1, 2**32 + n])


def request(rng: random.Random) -> tuple[bytes, int]:
    kind = rng.random()
    n = rng.choice([1, 2, 5, 15, 16, 17, 32, 48, rng.randint(1, MAX_ELEMS)])
    if kind < 0.05:
        return b"", rng.choice([0, 3])
    if kind < 0.1:
        return struct.pack(f"<{n}I", *dense(rng, n)) + rng.randbytes(rng.choice([1, 2, 3])), 0
    if kind < 0.15:
        n = MAX_ELEMS + rng.choice([0, 1, 16])  # exactly full, or over
    return struct.pack(f"<{n}I", *dense(rng, n)), shape(rng, n)


def model_for(reqs: list[tuple[bytes, int]]) -> Any:
    answers = software([("sparsetransform", c, p) for p, c in reqs])
    table = {}
    for (p, c), (status, _msg, out) in zip(reqs, answers, strict=True):
        if len(p) > MAX_BEATS * BEAT:
            table[(p, c)] = (STATUS_TOO_LARGE, MAX_BEATS * BEAT, b"")  # the node refuses it before running
        else:
            table[(p, c)] = (status, 0, out)
    return lambda p, meta: table[(p, meta & (2**64 - 1))]


async def check(
    dut: Any, reqs: list[tuple[bytes, int]], rng: random.Random, p_in: float, p_out: float
) -> list[tuple[int, int, int]]:
    metas = [rng.getrandbits(64) << 64 | c for _, c in reqs]
    answers, _ = await run_requests(dut, [p for p, _ in reqs], rng, p_in, p_out, metas, model_for(reqs))
    return answers


@cocotb.test()
async def papers_example_and_shapes(dut: Any) -> None:
    """Seed 001's [0, 4.2, 0, -0, 7.1] as one row; then random arrays in every shape at full rate."""
    idle(dut)
    await start(dut)
    rng = random.Random(91)
    example = struct.pack("<5f", 0.0, 4.2, 0.0, -0.0, 7.1)
    reqs = [(example, 0), (example, 5), (example, 1)]
    reqs += [request(rng) for _ in range(50)]
    answers = await check(dut, reqs, rng, 1.0, 1.0)
    assert answers[0][1] == STATUS_OK
    seen = {a[1] for a in answers}
    assert seen == {STATUS_OK, STATUS_TOO_LARGE, STATUS_BAD_INPUT}, seen


def rows_of(*rows: list[int]) -> bytes:
    flat = [x for r in rows for x in r]
    return struct.pack(f"<{len(flat)}I", *flat)


@cocotb.test()
async def corner_shapes(dut: Any) -> None:
    """The shapes the bitmap walks meet: all-zero rows, full rows, one column, rows spanning beats, a row
    ending on a beat's last lane and on the first lane of the next, the largest result (every element a
    row of one non-zero), at full rate and on stalled sinks."""
    idle(dut)
    await start(dut)
    rng = random.Random(95)
    z, one = 0x00000000, 0x3F800000
    full = [rng.getrandbits(31) | 1 for _ in range(MAX_ELEMS)]
    reqs = [
        (rows_of([z] * 40), 1),  # 40 empty rows of one column
        (rows_of([z] * 40), 0),  # one empty row
        (rows_of(full[:40]), 1),  # 40 full rows of one column
        (rows_of(full), 1),  # the largest result: 2 + 128 + 2 * 128 words
        (rows_of(full), 0),  # one full row, exactly MAX_BEATS beats
        (rows_of(full), MAX_ELEMS),  # the same as one row of cols
        (rows_of([z] * MAX_ELEMS), MAX_ELEMS),  # one empty row, every beat
        (rows_of([z] * 16, full[:16], [z] * 15 + [one], [one] + [z] * 15), 16),  # a row a beat
        (rows_of(full[:40], [z] * 40, full[40:80]), 40),  # rows spanning beats, the middle one empty
        (rows_of([z] * 16 + [one], full[:17]), 17),  # row ends on lane 16 of one beat, lane 1 of the next
        (rows_of([z] * 15 + [one], [z] * 16), 16),  # a last beat with no non-zero
        (rows_of([one] + [z] * 16), 17),  # the last element zero, on lane 0 of the last beat
        (rows_of([z] * 17, [z] * 17, full[:17]), 17),
        (rows_of(*[[z, one, z]] * 40), 3),  # rows ending on every lane in turn
    ]
    await check(dut, reqs, rng, 1.0, 1.0)
    await check(dut, reqs, rng, 0.6, 0.3)


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse inputs and sinks ready 5-60% of the time: nothing dropped, duplicated or reordered."""
    idle(dut)
    await start(dut)
    rng = random.Random(92)
    for p_in, p_out in [(0.5, 0.2), (1.0, 0.6), (0.3, 1.0), (1.0, 0.05)]:
        await check(dut, [request(rng) for _ in range(10)], rng, p_in, p_out)


@cocotb.test()
async def no_data_before_metadata(dut: Any) -> None:
    """Data offered without metadata waits; it goes once the metadata word does."""
    idle(dut)
    await start(dut)
    dut.s_axis_tvalid.value = 1
    dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = to_beats(bytes(4))[0]
    for _ in range(5):
        await ReadOnly()
        assert not sig(dut.s_axis_tready), "data taken before its metadata"
        await FallingEdge(dut.clk)
    idle(dut)
    await check(dut, [(struct.pack("<2f", 1.0, 0.0), 0)], random.Random(93), 1.0, 1.0)


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset while a request is read in, and while its CSR goes out on stalled sinks."""
    idle(dut)
    await start(dut)
    rng = random.Random(94)
    for cycles in (4, 60):
        beats = to_beats(struct.pack("<100I", *dense(rng, 100)))
        dut.s_meta_tvalid.value = 1
        dut.s_meta_tdata.value = 10
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
        await check(dut, [request(rng) for _ in range(6)], rng, 0.7, 0.7)


@cocotb.test()
async def cycles_for_512b(dut: Any) -> None:
    """T_acc of a full request (MAX_BEATS beats, one row, half the elements zero)."""
    idle(dut)
    await start(dut)
    n = MAX_BEATS * 16
    xs = [0 if i % 2 else 0x3F800000 for i in range(n)]
    cycles = await request_cycles(dut, struct.pack(f"<{n}I", *xs), 0)
    dut._log.info("SparseTransform %d B: %d cycles (%.3f us at 250 MHz)", 4 * n, cycles, cycles * 0.004)
    assert cycles == 28, cycles  # docs/rtl.md (24 with the one-pass unit, 191 with three passes, 430 before)
