"""cocotb testbench of rtl/offrac_accel_echo.v: payload and metadata out as they came in, under stalls."""

from __future__ import annotations

import logging
import random
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge, with_timeout
from cocotbext.axi import AxiStreamBus, AxiStreamFrame, AxiStreamSink, AxiStreamSource
from tb_util import BEAT, idle, sig, start, to_beats

Ports = tuple[AxiStreamSource, AxiStreamSource, AxiStreamSink, AxiStreamSink]


def make_ports(dut: Any) -> Ports:
    """cocotbext-axi drivers on the four streams; once per test (their tasks end with it: two sets would
    both drive and take beats)."""
    out = (
        AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis"), dut.clk, dut.rst),
        AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_meta"), dut.clk, dut.rst),
        AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis"), dut.clk, dut.rst),
        AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_meta"), dut.clk, dut.rst),
    )
    for port in out:
        port.log.setLevel(logging.WARNING)
    return out


async def echo(
    dut: Any,
    ports: Ports,
    payloads: list[bytes],
    metas: list[int],
    rng: random.Random,
    p_in: float,
    p_out: float,
) -> tuple[list[bytes], list[int]]:
    """Drive requests with cocotbext-axi: a source on each input paused at random (gaps), a sink on each
    output paused at random (stalls); data is offered whether or not its metadata went in."""
    data_in, meta_in, data_out, meta_out = ports
    for port, p in ((data_in, p_in), (meta_in, p_in), (data_out, p_out), (meta_out, p_out)):
        port.set_pause_generator(iter(lambda p=p: rng.random() >= p, None))
    for payload, meta in zip(payloads, metas, strict=True):
        # an empty payload: one beat with tkeep 0, as the dispatcher gives it
        data_in.send_nowait(AxiStreamFrame(payload) if payload else AxiStreamFrame(b"\0", tkeep=[0]))
        meta_in.send_nowait(AxiStreamFrame(meta.to_bytes(16, "little")))
    got: list[bytes] = []
    got_metas: list[int] = []
    for _ in payloads:
        frame = await with_timeout(data_out.recv(), 400_000, "ns")
        got.append(bytes(frame.tdata))
        meta = await with_timeout(meta_out.recv(), 400_000, "ns")
        got_metas.append(int.from_bytes(bytes(meta.tdata), "little"))
    for _ in range(3):  # nothing more comes out
        await RisingEdge(dut.clk)
    assert data_out.empty() and meta_out.empty() and not sig(dut.m_axis_tvalid), "output beyond the input"
    for port in (data_in, meta_in, data_out, meta_out):
        port.clear_pause_generator()
        port.pause = False
    await FallingEdge(dut.clk)
    return got, got_metas


def requests(rng: random.Random, n: int) -> tuple[list[bytes], list[int]]:
    sizes = [rng.choice([0, 1, 63, 64, 65, 128, rng.randint(1, 600)]) for _ in range(n)]
    return [rng.randbytes(s) for s in sizes], [rng.getrandbits(128) for _ in range(n)]


@cocotb.test()
async def full_rate(dut: Any) -> None:
    """No gaps, no stalls: every request echoed byte for byte with its metadata."""
    idle(dut)
    await start(dut)
    rng = random.Random(31)
    ports = make_ports(dut)
    payloads, metas = requests(rng, 100)
    got, got_metas = await echo(dut, ports, payloads, metas, rng, 1.0, 1.0)
    assert got == payloads and got_metas == metas


@cocotb.test()
async def backpressure(dut: Any) -> None:
    """Sparse inputs and sinks ready 20-60% of the time: nothing dropped, duplicated or reordered."""
    idle(dut)
    await start(dut)
    rng = random.Random(32)
    ports = make_ports(dut)
    for p_in, p_out in [(0.5, 0.2), (1.0, 0.6), (0.3, 1.0)]:
        payloads, metas = requests(rng, 60)
        got, got_metas = await echo(dut, ports, payloads, metas, rng, p_in, p_out)
        assert got == payloads and got_metas == metas, (p_in, p_out)


@cocotb.test()
async def empty_payloads(dut: Any) -> None:
    """Empty payloads (one beat, tkeep 0, as the dispatcher gives them) back to back and among others:
    each echoed as one beat with tkeep 0 and tlast, under stalls."""
    idle(dut)
    await start(dut)
    rng = random.Random(35)
    ports = make_ports(dut)
    for p_in, p_out in [(1.0, 1.0), (0.5, 0.3)]:
        payloads = [b"", b"", rng.randbytes(64), b"", rng.randbytes(3), b""]
        metas = [rng.getrandbits(128) for _ in payloads]
        got, got_metas = await echo(dut, ports, payloads, metas, rng, p_in, p_out)
        assert got == payloads and got_metas == metas


@cocotb.test()
async def no_data_before_metadata(dut: Any) -> None:
    """Data offered without metadata waits; it goes once the metadata word does."""
    idle(dut)
    await start(dut)
    dut.s_axis_tvalid.value = 1
    dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = to_beats(b"x")[0]
    for _ in range(5):
        await ReadOnly()
        assert not sig(dut.s_axis_tready), "data taken before its metadata"
        await FallingEdge(dut.clk)
    idle(dut)
    ports = make_ports(dut)
    got, metas = await echo(dut, ports, [b"x"], [7], random.Random(33), 1.0, 1.0)
    assert got == [b"x"] and metas == [7]


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset in the middle of a request with its output stalled: idle after, the next requests pass."""
    idle(dut)
    await start(dut)
    rng = random.Random(34)
    beats = to_beats(rng.randbytes(5 * BEAT))
    dut.s_meta_tvalid.value = 1
    dut.s_meta_tdata.value = 1
    dut.s_axis_tvalid.value = 1
    dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[0]
    await FallingEdge(dut.clk)
    dut.s_meta_tvalid.value = 0
    dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[1]
    await ReadOnly()
    assert sig(dut.m_axis_tvalid) and sig(dut.m_meta_tvalid) and not sig(dut.s_axis_tready)
    await FallingEdge(dut.clk)
    idle(dut)
    dut.rst.value = 1
    await RisingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    await ReadOnly()
    assert not sig(dut.m_axis_tvalid) and not sig(dut.m_meta_tvalid), "reset left an output"
    assert sig(dut.s_meta_tready), "reset left the request open"
    await FallingEdge(dut.clk)
    payloads, metas = requests(rng, 20)
    ports = make_ports(dut)
    got, got_metas = await echo(dut, ports, payloads, metas, rng, 0.7, 0.7)
    assert got == payloads and got_metas == metas
