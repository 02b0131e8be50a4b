"""cocotb testbench of rtl/offrac_accel_topk.v against the software's topk (its oracle, accel_oracle), under
stalls.

Built with K_MAX = 16 (test_rtl.py) so that UNSUPPORTED (min(K, n) > K_MAX) is cheap to reach.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from tb_util import Model, idle, run_requests, sig, software, start, to_beats

K_MAX = 16
STATUS_OK, STATUS_BAD_INPUT, STATUS_UNSUPPORTED = 0, 5, 10
I32_MIN, I32_MAX = -(2**31), 2**31 - 1


def model_for(reqs: list[tuple[bytes, int]]) -> Model:
    """Each request's (status, detail, output) from the shipping kernel (element_count, then K >= 1);
    a request the software answers with more than K_MAX values is UNSUPPORTED here (detail K_MAX)."""
    answers = software([("topk", m & (2**64 - 1), p) for p, m in reqs])
    table: dict[tuple[bytes, int], tuple[int, int, bytes]] = {}
    for (p, m), (status, _msg, out) in zip(reqs, answers, strict=True):
        k = m & (2**64 - 1)
        if status == STATUS_OK and min(k, len(p) // 4) > K_MAX:
            table[(p, k)] = (STATUS_UNSUPPORTED, K_MAX, b"")
        else:
            table[(p, k)] = (status, 0, out)
    return lambda p, meta: table[(p, meta & (2**64 - 1))]


def meta_for(rng: random.Random, k: int) -> int:
    return rng.getrandbits(64) << 64 | k  # K in bits 0..63, the rest opaque


def values(rng: random.Random, n: int) -> list[int]:
    """Random, ascending, descending, all-equal, few distinct or extreme int32."""
    kind = rng.choice(["random", "ascending", "descending", "equal", "few", "extreme"])
    if kind == "ascending":
        base = rng.randint(I32_MIN, I32_MAX - n)
        return list(range(base, base + n))
    if kind == "descending":
        base = rng.randint(I32_MIN + n, I32_MAX)
        return list(range(base, base - n, -1))
    if kind == "equal":
        return [rng.randint(I32_MIN, I32_MAX)] * n
    if kind == "few":
        pool = [rng.randint(-5, 5) for _ in range(3)]
        return [rng.choice(pool) for _ in range(n)]
    if kind == "extreme":
        return [rng.choice([I32_MIN, I32_MAX, -1, 0, 1]) for _ in range(n)]
    return [rng.randint(I32_MIN, I32_MAX) for _ in range(n)]


def request(rng: random.Random) -> tuple[bytes, int]:
    n = rng.choice([1, 2, 15, 16, 17, 32, 33, rng.randint(1, 100)])
    k = rng.choice([1, 2, rng.randint(1, K_MAX), K_MAX, n, min(n, K_MAX)])
    xs = values(rng, n)
    return struct.pack(f"<{n}i", *xs), meta_for(rng, k)


async def check(
    dut: Any, reqs: list[tuple[bytes, int]], rng: random.Random, p_in: float, p_out: float
) -> None:
    await run_requests(dut, [p for p, _ in reqs], rng, p_in, p_out, [m for _, m in reqs], model_for(reqs))


@cocotb.test()
async def random_and_adversarial(dut: Any) -> None:
    """Random, ascending, descending, all-equal, few-distinct and extreme inputs, K from 1 to K_MAX and n."""
    idle(dut)
    await start(dut)
    rng = random.Random(61)
    await check(dut, [request(rng) for _ in range(80)], rng, 1.0, 1.0)


@cocotb.test()
async def errors(dut: Any) -> None:
    """Empty, ragged, K = 0 and min(K, n) > K_MAX among valid requests; K > K_MAX with n <= K_MAX is fine."""
    idle(dut)
    await start(dut)
    rng = random.Random(62)
    reqs = [
        (b"", meta_for(rng, 3)),
        (bytes(7), meta_for(rng, 1)),
        (bytes(8), meta_for(rng, 0)),
        (b"", meta_for(rng, 0)),
        (struct.pack("<20i", *range(20)), meta_for(rng, 17)),
        (struct.pack("<16i", *range(16)), meta_for(rng, 2**64 - 1)),
        (struct.pack("<17i", *range(17)), meta_for(rng, 2**64 - 1)),
    ]
    reqs += [request(rng) for _ in range(10)]
    rng.shuffle(reqs)
    metas = [m for _, m in reqs]
    answers, _ = await run_requests(dut, [p for p, _ in reqs], rng, 0.8, 0.8, metas, model_for(reqs))
    assert {a[1] for a in answers} == {STATUS_OK, STATUS_BAD_INPUT, STATUS_UNSUPPORTED}


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse inputs and sinks ready 5-60% of the time: nothing dropped, duplicated or reordered."""
    idle(dut)
    await start(dut)
    rng = random.Random(63)
    for p_in, p_out in [(0.5, 0.2), (1.0, 0.6), (0.3, 1.0), (1.0, 0.05)]:
        await check(dut, [request(rng) for _ in range(15)], rng, p_in, p_out)


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset while a request is read in, and while its result waits on a stalled sink."""
    idle(dut)
    await start(dut)
    rng = random.Random(64)
    for cycles in (20, 150):
        beats = to_beats(struct.pack("<64i", *values(rng, 64)))
        dut.s_meta_tvalid.value = 1
        dut.s_meta_tdata.value = meta_for(rng, K_MAX)
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
        idle(dut)
        dut.rst.value = 1
        await RisingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0
        await ReadOnly()
        assert not sig(dut.m_axis_tvalid) and not sig(dut.m_meta_tvalid), "reset left an output"
        assert sig(dut.s_meta_tready) and not sig(dut.s_axis_tready), "reset left the request open"
        await FallingEdge(dut.clk)
        await check(dut, [request(rng) for _ in range(8)], rng, 0.7, 0.7)
