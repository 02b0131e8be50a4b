"""cocotb testbench of rtl/offrac_mapid_probe.v, one lookup port of MapId, on its own.

Built with KEYS = 4 and TABLE_BITS = 5 (32 slots, test_rtl.py). The bench is the block RAM: a
table filled by linear probing (in the bench, from the keys, as offrac_accel_mapid inserts them),
read with one cycle of latency wherever the probe sends its address. Checked every cycle: the
addresses read are exactly each key's probe chain in order (first slot the key's fold hash, then
the next slots, wrapping, to the key or an empty slot) and nothing else; `ready` is high exactly
when the probe is idle or resolves its batch's last key, which for a batch is the cycle `start`
plus its chains' total length; `done` is high the cycle after; `results` then equal a dictionary
lookup (the key's index, or `missing` for one not in it) and stay until the next `done`, also
while the caller has already changed `keys`. Batches come back to back and with random gaps;
resets in the middle of a batch leave no `done` behind.
"""

from __future__ import annotations

import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from tb_util import sig, start, zero

KEYS = 4
TABLE_BITS = 5
SLOTS = 1 << TABLE_BITS
MASK = SLOTS - 1


def fold(k: int) -> int:
    h = 0
    for b in range(0, 32, TABLE_BITS):
        h ^= (k >> b) & MASK
    return h


class Table:
    """The dictionary's hash table as the accelerator fills it: first occurrence wins."""

    def __init__(self, keys: list[int]) -> None:
        self.slots: list[tuple[int, int, int]] = [(0, 0, 0)] * SLOTS
        self.index: dict[int, int] = {}
        for k in keys:
            if k in self.index or len(self.index) >= SLOTS // 2:
                continue
            a = fold(k)
            while self.slots[a][0]:
                a = (a + 1) & MASK
            self.slots[a] = (1, k, len(self.index))
            self.index[k] = len(self.index)

    def chain(self, k: int) -> list[int]:
        """The slots a lookup of k reads, in order."""
        a = fold(k)
        out = [a]
        while self.slots[a][0] and self.slots[a][1] != k:
            a = (a + 1) & MASK
            out.append(a)
        return out

    def lookup(self, k: int, missing: int) -> int:
        return self.index.get(k, missing)


def pack(xs: list[int]) -> int:
    return sum(x << (32 * i) for i, x in enumerate(xs))


def keys_for(rng: random.Random, table: Table, only_hits: bool) -> list[int]:
    """Hits, misses that collide with a used slot (long chains, some wrapping), random ids."""
    present = list(table.index)
    out = []
    for _ in range(KEYS):
        r = 0.0 if only_hits else rng.random()
        if present and r < 0.45:
            out.append(rng.choice(present))
        elif present and r < 0.75:
            k = rng.choice(present)
            out.append(k ^ (1 << TABLE_BITS) ^ 1)  # the same fold: the same first slot, not the key
        else:
            out.append(rng.getrandbits(32))
    return out


def table_keys(rng: random.Random) -> list[int]:
    """Up to half the slots, clustered near the top so that chains wrap to slot 0; repeats included."""
    keys: list[int] = []
    while len(set(keys)) < rng.choice([0, 1, 5, SLOTS // 2]):
        r = rng.random()
        if keys and r < 0.2:
            keys.append(rng.choice(keys))
        elif r < 0.6:
            keys.append(rng.randrange(SLOTS - 6, SLOTS) | rng.getrandbits(1) << (2 * TABLE_BITS))
        else:
            keys.append(rng.getrandbits(32))
    return keys


async def run(
    dut: Any,
    rng: random.Random,
    table: Table,
    batches: int,
    p_start: float,
    p_reset: float,
    only_hits: bool = False,
) -> tuple[int, int]:
    """Drive `batches` batches; return how many finished (a reset abandons the one under way) and
    the cycles from the first start to the last batch's end."""
    rd = (0, 0, 0)
    busy = False
    chain: list[int] = []  # the addresses the batch under way has still to read
    end = -1  # the cycle its last key resolves
    want: list[int] = []  # its expected results
    results: int | None = None  # the results last announced by done
    done_due = -1
    missing = rng.randrange(1 << 32)
    due: list[int] = []  # the results the next done announces
    started = finished = 0
    first = last = t = 0
    while started < batches or busy:
        t += 1
        assert t < 20_000, "the probe stalled"
        dut.rd_used.value, dut.rd_key.value, dut.rd_idx.value = rd
        reset = busy and t != end and rng.random() < p_reset
        dut.rst.value = int(reset)
        go = not reset and started < batches and (not busy or t == end) and rng.random() < p_start
        if not busy and not go and rng.random() < 0.3:
            missing = rng.randrange(1 << 32)  # D may change between batches, not during one
        keys = keys_for(rng, table, only_hits)
        dut.start.value = int(go)
        dut.keys.value = pack(keys) if go else rng.getrandbits(32 * KEYS)  # held inside after start
        dut.missing.value = missing
        await ReadOnly()
        assert sig(dut.ready) == int(not busy or t == end), f"ready at cycle {t}"
        assert sig(dut.done) == int(t == done_due), f"done at cycle {t}"
        if t == done_due:
            results = sig(dut.results)
            assert results == pack(due), f"results {results:#x}, expected {pack(due):#x}"
        elif results is not None:
            assert sig(dut.results) == results, f"results changed without done (cycle {t})"
        en = sig(dut.ram_en)
        if go:
            # the first address goes out with start, in this cycle
            if busy:  # the batch before ends in this cycle
                finished += 1
                done_due = t + 1
                due = want
                last = t
            want = [table.lookup(k, missing) for k in keys]
            chain = [a for k in keys for a in table.chain(k)]
            assert en, "no read with start"
            busy = True
            started += 1
            first = first or t
            end = t + len(chain)
        elif busy and t == end:
            assert not en, f"a read after the batch's last key (cycle {t})"
            busy = False
            finished += 1
            done_due = t + 1
            due = want
            last = t
        else:
            assert en == int(busy), f"ram_en {en} at cycle {t}, busy {busy}"
        if en:
            addr = sig(dut.ram_addr)
            assert chain and addr == chain[0], f"read slot {addr}, expected {chain[:1]} (cycle {t})"
            chain.pop(0)
            rd = table.slots[addr]
        if reset:
            busy = False
            chain = []
        await FallingEdge(dut.clk)
        dut.rst.value = 0
    dut.start.value = 0
    for _ in range(KEYS * 4):  # nothing more
        t += 1
        await ReadOnly()
        assert sig(dut.done) == int(t == done_due) and sig(dut.ready) and not sig(dut.ram_en)
        await FallingEdge(dut.clk)
    return finished, last - first


def idle(dut: Any) -> None:
    zero(dut, "start", "keys", "missing", "rd_used", "rd_key", "rd_idx")


@cocotb.test()
async def back_to_back(dut: Any) -> None:
    """A batch every time the probe is ready: KEYS lookups every KEYS cycles without collisions."""
    idle(dut)
    await start(dut)
    rng = random.Random(3)
    # keys in their own first slots: a hit is one read, so 40 batches of hits take 40 * KEYS cycles
    spread = Table([i | (i + 1) * (1 << TABLE_BITS | 1 << 2 * TABLE_BITS) for i in range(SLOTS // 2)])
    assert all(len(spread.chain(k)) == 1 for k in spread.index)
    assert await run(dut, rng, spread, 40, 1.0, 0.0, only_hits=True) == (40, 40 * KEYS)
    assert (await run(dut, rng, spread, 40, 1.0, 0.0))[0] == 40
    for _ in range(6):
        assert (await run(dut, rng, Table(table_keys(rng)), 60, 1.0, 0.0))[0] == 60


@cocotb.test()
async def gaps(dut: Any) -> None:
    """Batches with random gaps between them (the caller's stalls), the missing value per batch."""
    idle(dut)
    await start(dut)
    rng = random.Random(4)
    for p in (0.5, 0.1, 0.03):
        assert (await run(dut, rng, Table(table_keys(rng)), 50, p, 0.0))[0] == 50


@cocotb.test()
async def resets(dut: Any) -> None:
    """Resets in the middle of batches: no done for the abandoned one, the next ones exact."""
    idle(dut)
    await start(dut)
    rng = random.Random(5)
    table = Table(table_keys(rng))
    done, _ = await run(dut, rng, table, 80, 0.7, 0.08)
    assert 20 < done < 80, done  # some abandoned, most finished
    assert (await run(dut, rng, table, 20, 1.0, 0.0))[0] == 20
