"""cocotb testbench of rtl/offrac_selector.v: random slot states and requests against selector.rs's pick.

OFFRAC_SELECTOR_RUNTIME set (test_rtl.py's POLICY 2 build): the policy is the `policy` input, and
runtime_policy checks the one build against RR with 0 and against JSQ with 1."""

from __future__ import annotations

import os
import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from tb_util import sig, start

SIZE_WIDTH = 32
RUNTIME = bool(os.environ.get("OFFRAC_SELECTOR_RUNTIME"))


@cocotb.test()
async def random_picks(dut: Any) -> None:
    """Every cycle a random request over random queue states; the pick and the RR turns as selector.rs."""
    n = int(dut.SLOT_COUNT.value)
    dut.slot_mask.value = (1 << n) - 1
    dut.policy.value = 0  # POLICY 2: RR (unused with POLICY 0 or 1)
    await start(dut)
    await picks_as_core(dut, random.Random(8), [True] * n)


@cocotb.test(skip=not RUNTIME)
async def runtime_policy(dut: Any) -> None:
    """POLICY 2 (run time): the same build picks as selector.rs's RR with the policy input 0 and as
    its JSQ with 1, each from reset (RR's turns start over), over every slot and over a mask; then RR
    again, so a JSQ run leaves no trace on the next RR one."""
    assert int(dut.POLICY.value) == 2, "the runtime build has POLICY 2"
    n = int(dut.SLOT_COUNT.value)
    funcs = [int(dut.SLOT_FUNCS.value) >> (8 * i) & 0xFF for i in range(n)]
    spares = [i > 0 and funcs[i] in funcs[:i] for i in range(n)]  # all but each function's first
    for seed, (policy, mask) in enumerate(
        [(0, [True] * n), (1, [True] * n), (1, spares), (0, spares), (0, [True] * n)]
    ):
        dut.policy.value = policy
        dut.slot_mask.value = sum(int(m) << i for i, m in enumerate(mask))
        if seed == 0:
            await start(dut)
        else:
            dut.rst.value = 1
            await FallingEdge(dut.clk)
            dut.rst.value = 0
        await picks_as_core(dut, random.Random(800 + seed), mask)


@cocotb.test()
async def masked_picks(dut: Any) -> None:
    """The same with a slot mask (the node's configured slots): the selector picks among the configured
    slots only, as selector.rs over a configuration that lists just those (its RR turn an index into
    them); a slot outside the mask is never picked. Three masks, each from reset: one slot of each
    function with several left out, every other slot, and all but the first."""
    n = int(dut.SLOT_COUNT.value)
    funcs = [int(dut.SLOT_FUNCS.value) >> (8 * i) & 0xFF for i in range(n)]
    firsts = [funcs.index(f) for f in set(funcs)]
    for seed, mask in enumerate(
        [
            [i in firsts for i in range(n)],
            [i % 2 == 1 or funcs.count(funcs[i]) == 1 for i in range(n)],
            [i > 0 or funcs.count(funcs[0]) == 1 for i in range(n)],
        ]
    ):
        dut.slot_mask.value = sum(int(m) << i for i, m in enumerate(mask))
        dut.policy.value = 0
        if seed == 0:
            await start(dut)  # the clock (the previous test's stopped with it), and reset
        else:
            dut.rst.value = 1
            await FallingEdge(dut.clk)
            dut.rst.value = 0
        await picks_as_core(dut, random.Random(80 + seed), mask)


async def picks_as_core(dut: Any, rng: random.Random, mask: list[bool]) -> None:
    """3000 cycles of random requests and slot states against selector.rs's pick over the slots of
    `mask` (the RR turns from reset)."""
    n = int(dut.SLOT_COUNT.value)
    funcs = [int(dut.SLOT_FUNCS.value) >> (8 * i) & 0xFF for i in range(n)]
    cap = int(dut.QUEUE_BYTES.value)
    # the build's policy, or with POLICY 2 (run time) the policy input's
    jsq = int(dut.POLICY.value) == 1 or (int(dut.POLICY.value) == 2 and sig(dut.policy) == 1)
    nxt = [0] * 256  # the core's turn: an index into the function's list of slots
    picks = 0
    for _ in range(3000):
        queued = [rng.choice([0, 0, cap, rng.randrange(cap + 1)]) for _ in range(n)]
        busy = [rng.random() < 0.5 for _ in range(n)]
        full = [rng.random() < 0.1 for _ in range(n)]
        f = rng.randrange(max(funcs) + 2)
        cost = rng.choice([0, 1, cap, rng.randrange(cap + 1)])
        take = rng.random() < 0.7
        dut.slot_queued_bytes.value = sum(q << (SIZE_WIDTH * i) for i, q in enumerate(queued))
        dut.slot_busy.value = sum(b << i for i, b in enumerate(busy))
        dut.slot_full.value = sum(b << i for i, b in enumerate(full))
        dut.req_function.value = f
        dut.req_cost.value = cost
        dut.take.value = int(take)
        hosts = [i for i, g in enumerate(funcs) if g == f and mask[i]]  # the configured ones
        room = [s for s in hosts if queued[s] + cost <= cap and not full[s]]
        if jsq:
            want = min(room, key=lambda s: (queued[s], busy[s], s)) if room else None
        else:
            want = None
            for k in range(len(hosts)):
                s = hosts[(nxt[f] + k) % len(hosts)]
                if s in room:
                    want = s
                    if take:
                        nxt[f] = (nxt[f] + k + 1) % len(hosts)
                    break
        await ReadOnly()
        got = sig(dut.pick_slot) if sig(dut.pick_ok) else None
        assert got == want, (
            f"function {f} cost {cost} queued {queued} busy {busy} full {full}: rtl {got}, core {want}"
        )
        picks += want is not None
        await FallingEdge(dut.clk)
    assert picks > 1000 * sum(mask) // n, picks
