"""cocotb testbench of rtl/offrac_accel_minmax.v: whole requests against the software's minmax (its oracle,
accel_oracle), under stalls.

Built with MAX_BEATS = 8 (512 bytes, test_rtl.py) so that TOO_LARGE is cheap to reach.
"""

from __future__ import annotations

import random
import re
import struct
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from minmax_model import STATUS_BAD_INPUT, STATUS_OK, STATUS_TOO_LARGE, random_array, random_nan
from tb_util import BEAT, Answer, Model, idle, pulse_reset, run_requests, sig, software, start, to_beats

MAX_BYTES = 8 * BEAT


def model_for(payloads: list[bytes], max_bytes: int) -> Model:
    """Each payload's (status, detail, output) from the shipping kernel; the detail of an infinity is the
    index its message names. Over max_bytes: TOO_LARGE, which the node answers before running it."""
    fits = [p for p in payloads if len(p) <= max_bytes]
    table: dict[bytes, tuple[int, int, bytes]] = {}
    for p, (status, msg, out) in zip(fits, software([("minmax", 0, p) for p in fits]), strict=True):
        found = re.match(r"infinite value at index (\d+)", msg)
        table[p] = (status, int(found.group(1)) if found else 0, out)
    return lambda p, _m: table[p] if len(p) <= max_bytes else (STATUS_TOO_LARGE, max_bytes, b"")


async def run(
    dut: Any, payloads: list[bytes], rng: random.Random, p_in: float, p_out: float
) -> tuple[list[Answer], list[bytes]]:
    metas = [rng.getrandbits(128) for _ in payloads]
    return await run_requests(dut, payloads, rng, p_in, p_out, metas, model_for(payloads, MAX_BYTES))


def sizes(rng: random.Random, n: int) -> list[int]:
    """Element counts around the 16-element beat (the lane / tail split) and up to the buffer."""
    return [rng.choice([1, 2, 15, 16, 17, 31, 32, 33, 48, 127, 128, rng.randint(1, 128)]) for _ in range(n)]


@cocotb.test()
async def random_arrays(dut: Any) -> None:
    """Random float32 arrays (every style of random_array) at full rate: results bit for bit."""
    idle(dut)
    await start(dut)
    rng = random.Random(51)
    payloads = [random_array(rng, n).tobytes() for n in sizes(rng, 45)]
    answers, _ = await run(dut, payloads, rng, 1.0, 1.0)
    assert all(a[1] == STATUS_OK for a in answers)


@cocotb.test()
async def signed_zeros_and_lanes(dut: Any) -> None:
    """Arrays of +-0.0, 1.0 and NaN: which zero is the minimum depends on the lane order, and shows."""
    idle(dut)
    await start(dut)
    rng = random.Random(52)
    pool = [0x00000000, 0x80000000, 0x3F800000, 0x7FC00000]
    arrays = [[rng.choice(pool) for _ in range(n)] for n in sizes(rng, 40)]
    # beat 0 lane 3 is -0.0, beat 1 lane 1 is +0.0: lane 1 folds first, so lo = +0.0 and -0.0 maps to
    # -0.0 (a front-to-back scan would take -0.0 as lo and give +0.0)
    crafted = [0x3F800000] * 32
    crafted[3], crafted[17] = 0x80000000, 0x00000000
    arrays.append(crafted)
    payloads = [struct.pack(f"<{len(a)}I", *a) for a in arrays]
    _, frames = await run(dut, payloads, rng, 1.0, 1.0)
    assert struct.unpack_from("<I", frames[-1], 3 * 4)[0] == 0x80000000
    assert any(b"\x00\x00\x00\x80" in f for f in frames)


@cocotb.test()
async def errors(dut: Any) -> None:
    """Empty, ragged, infinite and too-large requests among valid ones: status and detail, no payload."""
    idle(dut)
    await start(dut)
    rng = random.Random(53)
    payloads: list[bytes] = []
    for _ in range(30):
        kind = rng.choice(["ok", "empty", "ragged", "inf", "large", "edge_large"])
        n = rng.randint(1, 100)
        xs = random_array(rng, n).view("<u4").copy()
        if kind == "inf":
            for _ in range(rng.randint(1, 3)):
                xs[rng.randrange(n)] = rng.choice([0x7F800000, 0xFF800000])
            if n > 1 and rng.random() < 0.5:
                xs[0] = random_nan(rng)
        p = xs.tobytes()
        if kind == "empty":
            p = b""
        elif kind == "ragged":
            p = p + rng.randbytes(rng.choice([1, 2, 3]))
        elif kind == "large":
            p = rng.randbytes(rng.randint(MAX_BYTES + 1, 3 * MAX_BYTES))
        elif kind == "edge_large":
            p = random_array(rng, MAX_BYTES // 4 + rng.choice([0, 1])).tobytes()  # exactly full, or one over
        payloads.append(p)
    answers, _ = await run(dut, payloads, rng, 0.8, 0.8)
    seen = {(a[1], a[2] != 0) for a in answers}
    want = {(STATUS_OK, False), (STATUS_BAD_INPUT, False), (STATUS_BAD_INPUT, True), (STATUS_TOO_LARGE, True)}
    assert want <= seen, seen


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse inputs and sinks ready 2-60% of the time: nothing dropped, duplicated or reordered."""
    idle(dut)
    await start(dut)
    rng = random.Random(54)
    for p_in, p_out in [(0.5, 0.2), (1.0, 0.6), (0.3, 1.0)]:
        payloads = [random_array(rng, n).tobytes() for n in sizes(rng, 10)]
        payloads.append(rng.randbytes(MAX_BYTES + 64))
        await run(dut, payloads, rng, p_in, p_out)
    # sinks this slow make results wait on a full output stage and stall the element pipeline
    payloads = [random_array(rng, rng.choice([1, 2, 17])).tobytes() for _ in range(12)]
    await run(dut, payloads, rng, 1.0, 0.02)


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
    await run(dut, [struct.pack("<2f", 1.0, 2.0)], random.Random(55), 1.0, 1.0)


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset while a request is read in, and again while one is normalized with its output stalled."""
    idle(dut)
    await start(dut)
    rng = random.Random(56)
    for cycles in (3, 300):
        beats = to_beats(random_array(rng, 100).tobytes())
        dut.s_meta_tvalid.value = 1
        dut.s_meta_tdata.value = 1
        await FallingEdge(dut.clk)
        dut.s_meta_tvalid.value = 0
        for i in range(cycles):  # beats at full rate, then the output stalled (idle: sinks not ready)
            dut.s_axis_tvalid.value = int(i < len(beats))
            if i < len(beats):
                dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[i]
                await ReadOnly()
                assert sig(dut.s_axis_tready)
            await FallingEdge(dut.clk)
        await pulse_reset(dut)
        payloads = [random_array(rng, n).tobytes() for n in sizes(rng, 6)]
        await run(dut, payloads, rng, 0.7, 0.7)
