"""cocotb testbench of rtl/offrac_accel_mapid.v against the software's mapid (crates/accel, via its oracle).

Built with TABLE_BITS = 6 (64 slots, at most 32 distinct keys) and MAX_BEATS = 8 (test_rtl.py), so
that collisions, a full dictionary and TOO_LARGE are cheap to reach.
"""

from __future__ import annotations

import random
import struct
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from tb_util import BEAT, idle, pulse_reset, request_cycles, run_requests, sig, software, start, to_beats

TABLE_BITS = 6
DICT_MAX = (1 << TABLE_BITS) // 2
MAX_BEATS = 8
STATUS_TOO_LARGE = 3


def fold(k: int) -> int:
    """The RTL's hash: the key's TABLE_BITS-bit chunks XORed."""
    h = 0
    for b in range(0, 32, TABLE_BITS):
        h ^= (k >> b) & ((1 << TABLE_BITS) - 1)
    return h


def collider(rng: random.Random, k: int) -> int:
    """Another key in the same first slot as k: a chunk pair flipped alike."""
    m = rng.randrange(1, 1 << TABLE_BITS)
    lo = rng.randrange(0, 4) * TABLE_BITS
    return k ^ (m << lo) ^ (m << (lo + TABLE_BITS))  # lo + TABLE_BITS <= 24: within 32 bits


def dictionary(rng: random.Random, distinct: int) -> list[int]:
    """Keys in list order: random, colliding chains, repeats (first occurrence wins), 0 and 2^32-1."""
    keys: list[int] = []
    while len(set(keys)) < distinct:
        kind = rng.random()
        if keys and kind < 0.3:
            keys.append(collider(rng, rng.choice(keys)))
        elif keys and kind < 0.45:
            keys.append(rng.choice(keys))  # a repeat
        elif kind < 0.5:
            keys.append(rng.choice([0, 0xFFFFFFFF]))
        else:
            keys.append(rng.getrandbits(32))
    return keys


def ids(rng: random.Random, keys: list[int], n: int) -> bytes:
    """Ids that hit, collide without hitting, or are random."""
    out = []
    for _ in range(n):
        r = rng.random()
        if keys and r < 0.5:
            out.append(rng.choice(keys))
        elif keys and r < 0.75:
            out.append(collider(rng, rng.choice(keys)))
        else:
            out.append(rng.getrandbits(32))
    return struct.pack(f"<{n}I", *out)


def payload(rng: random.Random, keys: list[int]) -> bytes:
    kind = rng.random()
    if kind < 0.06:
        return b""
    if kind < 0.12:
        return ids(rng, keys, rng.randint(1, 40)) + rng.randbytes(rng.choice([1, 2, 3]))  # ragged
    if kind < 0.18:
        return ids(rng, keys, MAX_BEATS * 16 + rng.choice([0, 1, 30]))  # exactly full, over
    n = rng.choice([1, 2, 15, 16, 17, 32, 33, rng.randint(1, MAX_BEATS * 16)])
    return ids(rng, keys, n)


def model_for(keys: list[int], payloads: list[bytes]) -> Any:
    """What the software answers for each payload with this dictionary; TOO_LARGE past the buffer."""
    answers = software([("mapid", 0, p) for p in payloads], dictionary=keys)
    table = {}
    for p, (status, _msg, out) in zip(payloads, answers, strict=True):
        if len(p) > MAX_BEATS * BEAT:
            table[p] = (STATUS_TOO_LARGE, MAX_BEATS * BEAT, b"")  # the node refuses it before running
        else:
            table[p] = (status, 0, out)
    return lambda p, _meta: table[p]


async def load(dut: Any, keys: list[int], rng: random.Random, p_valid: float = 1.0) -> None:
    """One configuration packet of keys (an empty dictionary: one beat without a key), then idle."""
    beats = [(k, 0xF, int(i == len(keys) - 1)) for i, k in enumerate(keys)] or [(0, 0, 1)]
    bi = 0
    for _ in range(20_000):
        on = bi < len(beats) and rng.random() < p_valid
        dut.s_cfg_tvalid.value = int(on)
        if bi < len(beats):
            dut.s_cfg_tdata.value, dut.s_cfg_tkeep.value, dut.s_cfg_tlast.value = beats[bi]
        await ReadOnly()
        if on and sig(dut.s_cfg_tready):
            bi += 1
        done = bi == len(beats) and sig(dut.s_meta_tready)
        await FallingEdge(dut.clk)
        dut.s_cfg_tvalid.value = 0
        if done:
            assert sig(dut.cfg_dict_size) == min(len(set(keys)), DICT_MAX)
            assert sig(dut.cfg_overflow) == int(len(set(keys)) > DICT_MAX)
            return
    raise AssertionError(f"dictionary load stalled at key {bi} of {len(beats)}")


async def check(dut: Any, keys: list[int], rng: random.Random, n: int, p_in: float, p_out: float) -> None:
    payloads = [payload(rng, keys) for _ in range(n)]
    metas = [rng.getrandbits(128) for _ in payloads]
    await run_requests(dut, payloads, rng, p_in, p_out, metas, model_for(keys, payloads))


@cocotb.test()
async def before_any_dictionary(dut: Any) -> None:
    """First of the module (one simulation): after the first reset the hardware clears the table, so
    before any packet the dictionary is empty."""
    idle(dut)
    await start(dut)
    rng = random.Random(77)
    assert sig(dut.cfg_dict_size) == 0
    await check(dut, [], rng, 4, 1.0, 1.0)


@cocotb.test()
async def dictionaries(dut: Any) -> None:
    """Dictionaries of 0 to DICT_MAX distinct keys (colliding chains, repeats) loaded one after another."""
    idle(dut)
    await start(dut)
    rng = random.Random(71)
    for distinct in [3, 0, 1, 17, DICT_MAX, rng.randint(1, DICT_MAX)]:
        keys = dictionary(rng, distinct)
        await load(dut, keys, rng, 0.7)
        await check(dut, keys, rng, 12, 1.0, 1.0)


@cocotb.test()
async def full_dictionary(dut: Any) -> None:
    """Keys past DICT_MAX distinct are not inserted and flag cfg_overflow; the next packet clears it."""
    idle(dut)
    await start(dut)
    rng = random.Random(72)
    keys = dictionary(rng, DICT_MAX + 1)
    await load(dut, keys, rng)  # checks the size (DICT_MAX) and the flag
    await load(dut, keys[:5], rng)
    await check(dut, keys[:5], rng, 6, 1.0, 1.0)


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse inputs and sinks ready 5-60% of the time: nothing dropped, duplicated or reordered."""
    idle(dut)
    await start(dut)
    rng = random.Random(73)
    keys = dictionary(rng, 20)
    await load(dut, keys, rng)
    for p_in, p_out in [(0.5, 0.2), (1.0, 0.6), (0.3, 1.0), (1.0, 0.05)]:
        await check(dut, keys, rng, 10, p_in, p_out)


@cocotb.test()
async def long_results_stalled(dut: Any) -> None:
    """Requests of 6 to 8 beats back to back while the sinks stall: the next request's lookups run
    while the buffer still sends the last result, and must not lose a beat to it."""
    idle(dut)
    await start(dut)
    rng = random.Random(79)
    keys = dictionary(rng, 24)
    await load(dut, keys, rng)
    for p_out in (0.1, 0.3):
        payloads = [ids(rng, keys, rng.randint(81, MAX_BEATS * 16)) for _ in range(8)]
        metas = [rng.getrandbits(128) for _ in payloads]
        await run_requests(dut, payloads, rng, 1.0, p_out, metas, model_for(keys, payloads))


@cocotb.test()
async def no_data_before_metadata(dut: Any) -> None:
    """Data offered without metadata waits; a request waits while a dictionary is being loaded."""
    idle(dut)
    await start(dut)
    rng = random.Random(74)
    dut.s_axis_tvalid.value = 1
    dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = to_beats(bytes(4))[0]
    for _ in range(5):
        await ReadOnly()
        assert not sig(dut.s_axis_tready), "data taken before its metadata"
        await FallingEdge(dut.clk)
    idle(dut)
    dut.s_cfg_tvalid.value = 1
    dut.s_cfg_tdata.value, dut.s_cfg_tkeep.value, dut.s_cfg_tlast.value = (5, 0xF, 1)
    dut.s_meta_tvalid.value = 1
    await ReadOnly()
    assert not sig(dut.s_meta_tready), "a request taken before the configuration offered with it"
    await FallingEdge(dut.clk)
    idle(dut)
    await load(dut, [5], rng)
    await check(dut, [5], rng, 3, 1.0, 1.0)


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset while a request is read in and while its result waits on stalled sinks; reset while the
    table is cleared (it is cleared to the end: an empty dictionary) and while keys go in (reload)."""
    idle(dut)
    await start(dut)
    rng = random.Random(75)
    keys = dictionary(rng, 12)
    await load(dut, keys, rng)
    for cycles in (5, 120):
        beats = to_beats(ids(rng, keys, 100))
        dut.s_meta_tvalid.value = 1
        dut.s_meta_tdata.value = 1
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
        assert sig(dut.cfg_dict_size) == len(set(keys)), "a reset between requests lost the dictionary"
        await check(dut, keys, rng, 6, 0.7, 0.7)
    # reset in the middle of the clearing: cleared to the end, the dictionary is empty
    dut.s_cfg_tvalid.value = 1
    dut.s_cfg_tdata.value, dut.s_cfg_tkeep.value, dut.s_cfg_tlast.value = (keys[0], 0xF, 0)
    for _ in range(5):
        await FallingEdge(dut.clk)
    idle(dut)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    for _ in range(4 << TABLE_BITS):
        await ReadOnly()
        if sig(dut.s_meta_tready):
            break
        await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    assert sig(dut.cfg_dict_size) == 0
    await check(dut, [], rng, 4, 1.0, 1.0)
    # reset while keys go in, then the whole dictionary again
    dut.s_cfg_tvalid.value = 1
    for i, k in enumerate(keys):
        dut.s_cfg_tdata.value, dut.s_cfg_tkeep.value, dut.s_cfg_tlast.value = (k, 0xF, 0)
        while True:
            await ReadOnly()
            taken = sig(dut.s_cfg_tready)
            await FallingEdge(dut.clk)
            if taken:
                break
        if i == 5:
            break
    idle(dut)
    await pulse_reset(dut)
    await load(dut, keys, rng)
    await check(dut, keys, rng, 6, 0.7, 0.7)


@cocotb.test()
async def cycles_for_512b(dut: Any) -> None:
    """T_acc of a full request (MAX_BEATS beats), all hits and all misses (docs/rtl.md)."""
    idle(dut)
    await start(dut)
    rng = random.Random(76)
    keys = dictionary(rng, 20)
    await load(dut, keys, rng)
    hits = struct.pack("<256I", *[rng.choice(keys) for _ in range(256)])
    misses = struct.pack("<256I", *[rng.getrandbits(32) | 1 << 31 for _ in range(256)])
    got = {}
    for name, p in (("hits", hits), ("misses", misses)):
        got[name] = await request_cycles(dut, p[: MAX_BEATS * BEAT], 0)
        dut._log.info(
            "MapId %s, %d B: %d cycles (%.3f us at 250 MHz)",
            name,
            MAX_BEATS * BEAT,
            got[name],
            got[name] * 0.004,
        )
    assert got == CYCLES, got


CYCLES = {"hits": 149, "misses": 132}
