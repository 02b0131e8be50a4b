"""cocotb testbench of rtl/offrac_sparse_packer.v against a word-level model, cycle by cycle.

The model is the module's contract (its header comment), written over lists of words: the lanes
set in the mask, in lane order, appended to what is held; a full beat of 16 goes out as soon as
there is one; a last input sends what is left with out_last (a second beat the next cycle, busy,
when more than 16 are left); nothing moves without `en`; `clear` empties. Every cycle the DUT's
out_valid, and on a valid beat its out_cnt, out_last and first out_cnt words, must equal the
model's, and busy must equal the model's pending rest. Inputs, masks, `en` and `clear` are random,
so runs of empty inputs, exact multiples of 16 and rests over 16 all occur (the test counts them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from tb_util import sig, start, zero

LANES = 16
W = 32


@dataclass
class Model:
    held: list[int] = field(default_factory=list)
    pend: bool = False

    def step(self, valid: bool, mask: int, words: list[int], last: bool) -> tuple[list[int], bool] | None:
        """One cycle with `en`: the beat out (words, last) or None, and the state after it."""
        if self.pend:  # the rest of a last input; the input is ignored
            out = (self.held, True)
            self.held, self.pend = [], False
            return out
        new = [words[lane] for lane in range(LANES) if mask >> lane & 1] if valid else []
        total = self.held + new
        if valid and last and len(total) <= LANES:
            self.held = []
            return (total, True) if total else None
        if len(total) >= LANES:
            self.held = total[LANES:]
            self.pend = valid and last and len(total) > LANES
            return (total[:LANES], False)
        self.held = total
        return None


def random_mask(rng: random.Random) -> int:
    kind = rng.random()
    if kind < 0.15:
        return 0
    if kind < 0.3:
        return (1 << LANES) - 1
    if kind < 0.45:
        return (1 << rng.randint(1, LANES)) - 1  # a low run
    return rng.getrandbits(LANES)


@cocotb.test()
async def against_the_model(dut: Any) -> None:
    rng = random.Random(7)
    zero(dut, "en", "clear", "in_valid", "in_mask", "in_words", "in_last")
    await start(dut)
    model = Model()
    seen = {"beats": 0, "last beats": 0, "rests over 16": 0, "empty lasts": 0, "clears": 0, "stalls": 0}
    pending: tuple[int, list[int], bool] | None = None  # the input on offer until taken
    for cycle in range(10_000):
        await FallingEdge(dut.clk)
        if pending is None and rng.random() < 0.8:
            pending = (random_mask(rng), [rng.getrandbits(W) for _ in range(LANES)], rng.random() < 0.2)
        en = rng.random() < 0.85
        clear = rng.random() < 0.005
        dut.en.value = int(en)
        dut.clear.value = int(clear)
        dut.in_valid.value = int(pending is not None)
        if pending is not None:
            mask, words, last = pending
            dut.in_mask.value = mask
            dut.in_words.value = sum(w << (W * lane) for lane, w in enumerate(words))
            dut.in_last.value = int(last)
        await ReadOnly()
        assert sig(dut.busy) == int(model.pend), f"cycle {cycle}: busy {sig(dut.busy)}, model {model.pend}"
        if not en:
            seen["stalls"] += 1
            if clear:
                model = Model()
                seen["clears"] += 1
                pending = None
            continue
        was_pend = model.pend
        if pending is None:
            want = model.step(False, 0, [0] * LANES, False)
        else:
            mask, words, last = pending
            if last and not was_pend and not mask and not model.held:
                seen["empty lasts"] += 1
            want = model.step(True, mask, words, last)
        got_valid = sig(dut.out_valid)
        assert got_valid == int(want is not None), f"cycle {cycle}: out_valid {got_valid}, model {want}"
        if want is not None:
            words_out, last_out = want
            cnt = sig(dut.out_cnt)
            assert cnt == len(words_out), f"cycle {cycle}: out_cnt {cnt}, model {len(words_out)}"
            assert sig(dut.out_last) == int(last_out), f"cycle {cycle}: out_last, model {last_out}"
            data = sig(dut.out_data)
            got = [data >> (W * lane) & ((1 << W) - 1) for lane in range(cnt)]
            assert got == words_out, f"cycle {cycle}: words {got}, model {words_out}"
            seen["beats"] += 1
            seen["last beats"] += int(last_out)
        if model.pend:
            seen["rests over 16"] += 1
        if not was_pend:
            pending = None  # taken (a pending rest ignores the input: it stays on offer)
        if clear:
            model = Model()
            seen["clears"] += 1
            pending = None
    dut._log.info("packer: %s", seen)
    assert all(n > 0 for n in seen.values()), f"a case was never reached: {seen}"
