"""Clock, reset, valid/ready drivers and the accelerator request driver shared by the testbenches.

Every cycle the driver sets inputs at the falling edge, then reads the settled
signals in the read-only phase: a handshake seen there is the one the next
rising edge performs. Doing both from one loop keeps source, sink and
scoreboard in lockstep, so a dropped or duplicated beat cannot hide.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from cocotb.clock import Clock
from cocotb.handle import SimHandleBase
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge

CLOCK_NS = 4  # 250 MHz, the clock the issue counts cycles at


async def start(dut: Any) -> None:
    """Start the clock and hold reset for a few cycles with every input idle."""
    Clock(dut.clk, CLOCK_NS, unit="ns").start()
    dut.rst.value = 1
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst.value = 0
    await FallingEdge(dut.clk)


def zero(dut: Any, *inputs: str) -> None:
    """Drive each named input of `dut` to 0: a testbench's idle, every valid and ready low."""
    for name in inputs:
        getattr(dut, name).value = 0


def sig(h: SimHandleBase) -> int:
    return int(h.value)  # type: ignore[attr-defined]


def kept_data(h: SimHandleBase, keep: int) -> int:
    """tdata of which only the tkeep bytes count: those must be 0/1, the others may be X (read as 0)."""
    bits = str(h.value)[::-1]  # type: ignore[attr-defined]  # bit 0 first
    for i in range(len(bits) // 8):
        if keep >> i & 1:
            assert set(bits[8 * i : 8 * i + 8]) <= {"0", "1"}, f"byte {i} of a kept lane is not 0/1"
    return int(bits[::-1].translate(str.maketrans("xXzZuUwW-", "000000000")), 2)


async def stream(
    dut: Any,
    items: Sequence[Any],
    drive: Callable[[Any | None], None],
    in_valid: str,
    in_ready: str,
    out_valid: str,
    out_ready: str,
    capture: Callable[[], Any],
    rng: random.Random,
    p_valid: float = 1.0,
    p_ready: float = 1.0,
    max_cycles: int = 20_000,
    n_out: int | None = None,
) -> list[Any]:
    """Push `items` through a valid/ready handshake with random gaps and stalls; return the outputs.

    One output per item, or `n_out` in all (a module that takes several beats per output).
    `drive(None)` must deassert the input valid. The loop starts and ends on a falling edge,
    and checks that no extra output follows the last one.
    """
    want = len(items) if n_out is None else n_out
    outputs: list[Any] = []
    nxt = 0
    offering: Any | None = None
    for _ in range(max_cycles):
        if offering is None and nxt < len(items) and rng.random() < p_valid:
            offering = items[nxt]
            nxt += 1
        drive(offering)
        getattr(dut, out_ready).value = int(rng.random() < p_ready)
        await ReadOnly()
        if offering is not None and sig(getattr(dut, in_valid)) and sig(getattr(dut, in_ready)):
            offering = None  # taken at the coming edge
        if sig(getattr(dut, out_valid)) and sig(getattr(dut, out_ready)):
            outputs.append(capture())
            assert len(outputs) <= want, "more outputs than inputs call for"
        if len(outputs) == want and nxt == len(items) and offering is None:
            # nothing more may come out: a duplicated beat would show here
            for _ in range(3):
                await FallingEdge(dut.clk)
                drive(None)
                getattr(dut, out_ready).value = 1
                await ReadOnly()
                assert not sig(getattr(dut, out_valid)), "an output beat beyond the inputs"
            await FallingEdge(dut.clk)
            return outputs
        await FallingEdge(dut.clk)
    raise AssertionError(f"stream stalled: {len(outputs)} of {want} out after {max_cycles} cycles")


# ---- accelerator wrappers: payload and metadata in, metadata with status and payload out ------

BEAT = 64  # bytes per 512-bit beat
Beat = tuple[int, int, int]  # tdata, tkeep, tlast


JUNK = 0xA5  # the bytes of a beat past tkeep: not zero, so a module that reads them shows it


def to_beats(payload: bytes) -> list[Beat]:
    """A request's payload as AXI-Stream beats: byte 0 in tdata[7:0], tkeep marks the tail's bytes;
    the bytes past tkeep are junk, as a real source may leave them."""
    chunks = [payload[i : i + BEAT] for i in range(0, len(payload), BEAT)]
    padded = [c + bytes([JUNK]) * (BEAT - len(c)) for c in chunks]
    return [
        (int.from_bytes(d, "little"), (1 << len(c)) - 1, int(i == len(chunks) - 1))
        for i, (c, d) in enumerate(zip(chunks, padded, strict=True))
    ]


def from_beats(beats: list[Beat]) -> list[bytes]:
    """Split an output stream at tlast back into payloads (only tkeep bytes count)."""
    frames, cur = [], b""
    for data, keep, last in beats:
        n = bin(keep).count("1")
        assert keep == (1 << n) - 1, f"tkeep {keep:x} is not a contiguous low run"
        cur += data.to_bytes(BEAT, "little")[:n]
        if last:
            frames.append(cur)
            cur = b""
    assert cur == b"", "stream ended mid-request"
    return frames


def split_segment(rng: random.Random, data: bytes | None) -> list[bytes]:
    """A segment cut into beats of 1..64 bytes, mostly 64 (none for a close)."""
    beats: list[bytes] = []
    i = 0
    while data is not None and i < len(data):
        n = rng.choice([64, 64, 64, rng.randint(1, 64)])
        beats.append(data[i : i + n])
        i += n
    return beats


def drive_segment_beat(dut: Any, rng: random.Random, conn: int, left: int, b: bytes) -> None:
    """Offer beat `b` of connection `conn`, with the `left` bytes of the segment from it on
    (s_axis_tseg) and random bytes past its tkeep."""
    dut.s_axis_tvalid.value = 1
    dut.s_axis_tuser.value = conn
    dut.s_axis_tseg.value = left
    dut.s_axis_tkeep.value = (1 << len(b)) - 1
    dut.s_axis_tdata.value = int.from_bytes(b + rng.randbytes(64 - len(b)), "little")


def idle(dut: Any) -> None:
    """Every input of an accelerator wrapper idle, every sink stalled."""
    dut.s_axis_tvalid.value = 0
    dut.s_axis_tdata.value = 0
    dut.s_axis_tkeep.value = 0
    dut.s_axis_tlast.value = 0
    dut.s_meta_tvalid.value = 0
    dut.s_meta_tdata.value = 0
    dut.m_axis_tready.value = 0
    dut.m_meta_tready.value = 0
    if hasattr(dut, "s_cfg_tvalid"):  # the accelerators with state loaded by a configuration stream
        dut.s_cfg_tvalid.value = 0


def beats_of(payload: bytes) -> list[Beat]:
    """As to_beats; the empty payload is one beat without bytes, as the dispatcher gives it."""
    return to_beats(payload) if payload else [(0, 0, 1)]  # an empty payload: one beat, no bytes


Model = Callable[[bytes, int], tuple[int, int, bytes]]  # (payload, metadata word) -> status, detail, result


async def run_requests(
    dut: Any,
    payloads: list[bytes],
    rng: random.Random,
    p_in: float,
    p_out: float,
    metas: list[int],
    model: Model,
) -> tuple[list[Answer], list[bytes]]:
    """Send requests with random gaps on both inputs and stalls on both outputs; check them with the model.

    For the accelerators with a status beside the metadata word out: each answer (metadata word,
    status, detail) and each OK result byte for byte, nothing more out after the last.
    """
    beats = [b for p in payloads for b in beats_of(p)]
    out_beats: list[Beat] = []
    answers: list[Answer] = []
    want = [model(p, m) for p, m in zip(payloads, metas, strict=True)]
    n_data = sum(len(to_beats(w[2])) for w in want if w[0] == 0)
    bi = mi = 0
    # an accelerator whose result length is not its input's says it beside the metadata word
    has_len = hasattr(dut, "m_meta_len")
    lens: list[int] = []
    limit = 200 + sum(40 * (len(p) // 4 + 2) + 20 for p in payloads) / min(p_in, p_out)
    for _ in range(int(limit)):
        data_on = bi < len(beats) and rng.random() < p_in
        meta_on = mi < len(metas) and rng.random() < p_in
        dut.s_axis_tvalid.value = int(data_on)
        if bi < len(beats):
            dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[bi]
        dut.s_meta_tvalid.value = int(meta_on)
        if mi < len(metas):
            dut.s_meta_tdata.value = metas[mi]
        dut.m_axis_tready.value = int(rng.random() < p_out)
        dut.m_meta_tready.value = int(rng.random() < p_out)
        await ReadOnly()
        if data_on and sig(dut.s_axis_tready):
            bi += 1
        if meta_on and sig(dut.s_meta_tready):
            mi += 1
        if sig(dut.m_axis_tvalid) and sig(dut.m_axis_tready):
            keep = sig(dut.m_axis_tkeep)
            out_beats.append((kept_data(dut.m_axis_tdata, keep), keep, sig(dut.m_axis_tlast)))
        if sig(dut.m_meta_tvalid) and sig(dut.m_meta_tready):
            answers.append((sig(dut.m_meta_tdata), sig(dut.m_meta_status), sig(dut.m_meta_detail)))
            if has_len:
                lens.append(sig(dut.m_meta_len))
        await FallingEdge(dut.clk)
        if len(answers) == len(payloads) and len(out_beats) == n_data and bi == len(beats):
            idle(dut)
            dut.m_axis_tready.value = 1
            dut.m_meta_tready.value = 1
            for _ in range(3):
                await ReadOnly()
                assert not sig(dut.m_axis_tvalid) and not sig(dut.m_meta_tvalid), "output beyond the input"
                await FallingEdge(dut.clk)
            frames = from_beats(out_beats)
            assert answers == [(m, w[0], w[1]) for m, w in zip(metas, want, strict=True)]
            ok = [w[2] for w in want if w[0] == 0]
            if has_len:
                assert [n for n, w in zip(lens, want, strict=True) if w[0] == 0] == [len(r) for r in ok], (
                    "m_meta_len"
                )
            for i, (got, exp) in enumerate(zip(frames, ok, strict=True)):
                assert got == exp, f"result {i}: {diff(got, exp)}"
            return answers, frames
    raise AssertionError(
        f"stalled: {bi}/{len(beats)} beats in, {len(answers)}/{len(payloads)} answers, "
        f"{len(out_beats)}/{n_data} beats out"
    )


def diff(got: bytes, exp: bytes) -> str:
    """Where two results of 4-byte words differ first."""
    if len(got) != len(exp):
        return f"{len(got)} bytes, want {len(exp)}"
    g, e = np.frombuffer(got, "<u4"), np.frombuffer(exp, "<u4")
    i = int(np.flatnonzero(g != e)[0])
    return f"element {i}: {g[i]:08x}, want {e[i]:08x}"


async def pulse_reset(dut: Any) -> None:
    """A one-cycle reset between requests' beats: after it no output is valid and no request open."""
    idle(dut)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_axis_tvalid) and not sig(dut.m_meta_tvalid), "reset left an output"
    assert sig(dut.s_meta_tready) and not sig(dut.s_axis_tready), "reset left the request open"
    await FallingEdge(dut.clk)


# ---- the software built-ins as the accelerators' oracle ----------------------------------------

Answer = tuple[int, int, int]  # metadata word, status, detail
Software = tuple[int, str, bytes]  # status, message, output


def software(
    calls: Sequence[tuple[str, int, bytes]],
    dictionary: Sequence[int] | None = None,
    borders: Sequence[Sequence[int]] | None = None,
) -> list[Software]:
    """Run (function, param, payload) calls through the shipping kernels (crates/accel, example
    accel_oracle, built by test_rtl.py); None: the node's built-in state."""
    req = {
        "dictionary": None if dictionary is None else list(dictionary),
        "borders": None if borders is None else [list(s) for s in borders],
        "calls": [{"function": f, "param": p, "input": x.hex()} for f, p, x in calls],
    }
    out = subprocess.run(
        [os.environ["OFFRAC_ACCEL_ORACLE"]], input=json.dumps(req), capture_output=True, text=True, check=True
    )
    return [(a["status"], a["message"], bytes.fromhex(a["output"])) for a in json.loads(out.stdout)]


def builtin_state() -> dict[str, Any]:
    """The node's built-in MapId keys and Bucketize border sets (float32 bits), from the software."""
    out = subprocess.run(
        [os.environ["OFFRAC_ACCEL_ORACLE"], "builtin-state"], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


# ---- latency: the cycles a module adds ----------------------------------------------------------


async def cycles_to(
    dut: Any,
    drives: Sequence[Callable[[], None]],
    in_valid: str,
    in_ready: str,
    out_valid: str,
    limit: int = 2_000,
) -> tuple[int, int]:
    """Offer input beats back to back (each drive sets one beat's data), the sinks as the caller set
    them; return the cycles from the first and from the last input handshake to the first cycle the
    output is valid (1: a single register stage)."""
    t_first = t_last = -1
    bi = 0
    for t in range(limit):
        if bi < len(drives):
            drives[bi]()
        getattr(dut, in_valid).value = int(bi < len(drives))
        await ReadOnly()
        if t_first >= 0 and sig(getattr(dut, out_valid)):
            await FallingEdge(dut.clk)
            getattr(dut, in_valid).value = 0
            return t - t_first, t - t_last
        if bi < len(drives) and sig(getattr(dut, in_ready)):
            t_first = t if t_first < 0 else t_first
            t_last = t
            bi += 1
        await FallingEdge(dut.clk)
    raise AssertionError(f"no output within {limit} cycles ({bi} of {len(drives)} beats in)")


async def request_cycles(dut: Any, payload: bytes, meta: int, limit: int = 20_000) -> int:
    """One request at full rate, every sink ready: cycles from its metadata word in to its last result
    beat out (the accelerator's T_acc in cycles; 4 ns each at 250 MHz)."""
    beats = beats_of(payload)
    dut.m_axis_tready.value = 1
    dut.m_meta_tready.value = 1
    t0 = -1
    bi = 0
    for t in range(limit):
        dut.s_meta_tvalid.value = int(t0 < 0)
        dut.s_meta_tdata.value = meta
        dut.s_axis_tvalid.value = int(bi < len(beats))
        if bi < len(beats):
            dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[bi]
        await ReadOnly()
        if t0 < 0 and sig(dut.s_meta_tready):
            t0 = t
        if bi < len(beats) and sig(dut.s_axis_tready):
            bi += 1
        if sig(dut.m_axis_tvalid) and sig(dut.m_axis_tlast):
            await FallingEdge(dut.clk)
            idle(dut)
            return t - t0 + 1
        await FallingEdge(dut.clk)
    raise AssertionError(f"no result within {limit} cycles")
