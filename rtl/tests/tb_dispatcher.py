"""cocotb testbench of rtl/offrac_dispatcher.v: interleaved cut streams, refusals, full pool, stalls, reset.

Each request carries a unique request id, so every answer and every complete
request is matched to the request it belongs to; a request whose fate is
not the pool's (malformed, unknown function, unreachable, too large) must get
exactly its refusal; the pool's own choices (a buffer, or BUSY) are checked
against a model of the pool fed with the same admissions, finishes and
releases, cycle by cycle.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from cocotb.utils import get_sim_time
from header_model import FLAG_HOP_EXT, FLAG_TRACE, encode_request
from tb_util import CLOCK_NS, cycles_to, drive_segment_beat, sig, split_segment, start

BUSY, UNKNOWN_FUNCTION, TOO_LARGE, MALFORMED, UNSUPPORTED_VERSION, UNREACHABLE = 1, 2, 3, 4, 7, 11
ID_NONE = (1 << 64) - 1
# as test_rtl.py builds it
CONNS, BUF_COUNT, BUF_BYTES, MAX_PAYLOAD, DEVICE_ID = 4, 2, 512, 400, 3
SMALL_MAX, SMALL_BYTES = 264, 300  # the single-fragment FIFO: payloads up to 200 bytes, 300 queued
SMALL = -1  # a complete request's place: the small ring, not a buffer
HOSTED = {0, 1, 3}


@dataclass
class Req:
    conn: int
    rid: int
    wire: bytes
    payload: bytes
    # a deterministic refusal (status, tenant, hop_index, detail), or None: the pool decides
    refusal: tuple[int, int, int, int] | None
    closes: bool = False
    never: bool = False  # after a fatal header: never read, never answered


def make_request(rng: random.Random, conn: int, rid: int, kind: str) -> Req:
    ext = kind == "ext" or (kind != "closing" and rng.random() < 0.15)
    hop_count = rng.randint(5, 8) if ext else rng.randint(1, 4)
    hop_index = rng.randrange(hop_count)
    hops = [
        (rng.choice(sorted(HOSTED)), rng.choice([0xFF, DEVICE_ID]), rng.getrandbits(64))
        for _ in range(hop_count)
    ]
    hops += [(0, 0, 0)] * (8 - hop_count)
    length = rng.choice(
        [0, 1, 63, 64, 65, MAX_PAYLOAD, rng.randrange(1, 200), rng.randrange(1, MAX_PAYLOAD + 1)]
    )
    tenant = rng.getrandbits(16)
    refusal = None
    flags = (FLAG_HOP_EXT if ext else 0) | rng.choice([0, FLAG_TRACE])
    reply_device = 0xFF
    if kind == "malformed":
        flags |= rng.choice([0x10, 0x80])  # a reserved flag: the header's error (tenant, hop 0)
        refusal = (MALFORMED, 0, 0, 0)
    elif kind == "unknown":
        bad = rng.randrange(hop_index, hop_count)
        hops[bad] = (rng.choice([2, 4, 200]), 0xFF, 0)
        refusal = (UNKNOWN_FUNCTION, tenant, bad, hops[bad][0])
    elif kind == "unreachable":
        bad = rng.randrange(hop_index, hop_count)
        hops[bad] = (0, rng.choice([0, 7, 254]), 0)
        refusal = (UNREACHABLE, tenant, bad, hops[bad][1])
    elif kind == "reply":
        reply_device = rng.randrange(0, 255)
        refusal = (UNREACHABLE, tenant, 0, reply_device)
    elif kind == "large":
        length = rng.choice([MAX_PAYLOAD + 1, rng.randrange(MAX_PAYLOAD + 1, MAX_PAYLOAD + 300)])
        refusal = (TOO_LARGE, tenant, hop_index, MAX_PAYLOAD)
    fields = {
        "flags": flags,
        "tenant": tenant,
        "hop_count": hop_count,
        "hop_index": hop_index,
        "request_id": rid,
        "payload_len": length,
        "reply_device": reply_device,
        "budget_us": 0,
    }
    head = encode_request(fields, hops)
    payload = rng.randbytes(length)
    closes = False
    if kind == "closing":
        if rng.random() < 0.5:
            head = b"\x00\x00" + head[2:]  # bad magic
            refusal = (MALFORMED, 0, 0, 0)
        else:
            head = head[:2] + b"\x09" + head[3:]  # bad version
            refusal = (UNSUPPORTED_VERSION, 0, 0, 1)
        closes = True
    return Req(conn, rid, head + payload, payload, refusal, closes)


def traffic(rng: random.Random, per_conn: int, first_id: int) -> list[list[Req]]:
    kinds = ["ok"] * 10 + ["ext", "malformed", "unknown", "unreachable", "reply", "large", "extbad"]
    streams = []
    rid = first_id
    for c in range(CONNS):
        reqs = []
        for _ in range(per_conn):
            k = rng.choice(kinds)
            if k == "extbad":
                reqs.append(make_request(rng, c, rid, "ext"))
                r = reqs[-1]
                w = bytearray(r.wire)
                w[64 + 48] = 1  # reserved extension byte
                fields_tenant = int.from_bytes(w[4:6], "little")
                reqs[-1] = Req(c, rid, bytes(w), r.payload, (MALFORMED, fields_tenant, w[7], 0))
            else:
                reqs.append(make_request(rng, c, rid, k))
            rid += 1
        if c == CONNS - 1:
            reqs.append(make_request(rng, c, rid, "closing"))  # the connection ends here
            rid += 1
            junk = make_request(rng, c, rid, "ok")  # never answered: nothing after a fatal header is read
            reqs.append(Req(c, rid, junk.wire, b"", None, never=True))
            rid += 1
        streams.append(reqs)
    return streams


def release(dut: Any, b: int, size: int) -> None:
    """Drive one release for this cycle: a pool buffer's, or (b == SMALL) the small queue's bytes."""
    if b == SMALL:
        dut.small_release_valid.value = 1
        dut.small_release_size.value = size
    else:
        dut.release_valid.value = 1
        dut.release_buffer.value = b
        dut.release_size.value = size


def interleave(rng: random.Random, per: list[list[tuple[int, bytes]]]) -> list[tuple[int, bytes]]:
    """The connections' pieces merged in a random order, each connection's in its own order."""
    out = []
    while any(per):
        c = rng.choice([i for i, p in enumerate(per) if p])
        out.append(per[c].pop(0))
    return out


def beats(rng: random.Random, streams: list[list[Req]]) -> list[tuple[int, bytes]]:
    """Each connection's bytes cut at random points into beats of 1..64 bytes, interleaved at random."""
    per = []
    for c, reqs in enumerate(streams):
        data = b"".join(r.wire for r in reqs)
        cuts = []
        i = 0
        while i < len(data):
            n = rng.choice([64, 64, rng.randint(1, 64), rng.randint(1, 8)])
            cuts.append((c, data[i : i + n]))
            i += n
        per.append(cuts)
    return interleave(rng, per)


class PoolModel:
    """crates/core/src/pool.rs for the shared pool (Eligible RR, as built)."""

    def __init__(self) -> None:
        self.used = [0] * BUF_COUNT
        self.reasm = [False] * BUF_COUNT
        self.turn = 0

    def admit(self, size: int) -> int | None:
        for k in range(BUF_COUNT):
            i = (self.turn + k) % BUF_COUNT
            if not self.reasm[i] and BUF_BYTES - self.used[i] >= size:
                self.turn = (i + 1) % BUF_COUNT
                self.used[i] += size
                self.reasm[i] = True
                return i
        return None


def idle(dut: Any) -> None:
    dut.s_axis_tvalid.value = 0
    dut.s_axis_tdata.value = 0
    dut.s_axis_tkeep.value = 0
    dut.s_axis_tuser.value = 0
    dut.s_axis_tseg.value = 0
    dut.small_release_valid.value = 0
    dut.small_release_size.value = 0
    dut.release_valid.value = 0
    dut.release_buffer.value = 0
    dut.release_size.value = 0
    dut.abort_valid.value = 0
    dut.abort_conn.value = 0


def kept(h: Any, n: int) -> bytes:
    bits = str(h.value)[::-1][: 8 * n]
    assert set(bits) <= {"0", "1"}, "a kept byte is not 0/1"
    return int(bits[::-1] or "0", 2).to_bytes(64, "little")[:n]


async def run(
    dut: Any,
    streams: list[list[Req]],
    rng: random.Random,
    p_in: float,
    p_out: float,
    hold: int,
    stop_at: int = 0,
) -> dict[str, int]:
    """Feed the beats, check every output, return counts. `hold`: cycles a request stays in its buffer."""
    reqs = {r.rid: r for s in streams for r in s}
    todo = beats(rng, streams)
    pool = PoolModel()
    collecting: dict[int, bytes] = {}
    complete: dict[int, list[bytes]] = {}
    done: set[int] = set()
    last_id = [-1] * CONNS  # complete requests in order per connection
    last_refused = [-1] * CONNS  # refusals in order per connection (the two ports may overtake each other)
    releases: list[tuple[int, int, int]] = []  # (cycle, buffer, size)
    pending: list[int | None] = []  # the model's answer to the admission made last cycle
    counts = {"admitted": 0, "busy": 0, "refused": 0, "small": 0, "beats": len(todo)}
    offering: tuple[int, bytes] | None = None
    for cycle in range(30_000):
        idle(dut)
        if stop_at and cycle == stop_at:
            return counts
        if offering is None and todo and rng.random() < p_in:
            offering = todo.pop(0)
        if offering is not None:
            c, data = offering
            dut.s_axis_tvalid.value = 1
            dut.s_axis_tuser.value = c
            dut.s_axis_tseg.value = len(data)  # a segment of its own
            dut.s_axis_tkeep.value = (1 << len(data)) - 1
            # bytes past tkeep are junk on the wire: the dispatcher must ignore them
            dut.s_axis_tdata.value = int.from_bytes(data + rng.randbytes(64 - len(data)), "little")
        if releases and releases[0][0] <= cycle:
            _, b, size = releases.pop(0)
            release(dut, b, size)
            released = (b, size)
        else:
            released = None
        dut.m_buf_axis_tready.value = int(rng.random() < p_out)
        dut.m_req_tready.value = int(rng.random() < p_out)
        dut.m_resp_axis_tready.value = int(rng.random() < p_out)
        await ReadOnly()
        if offering is not None and sig(dut.s_axis_tready):
            offering = None
        p = dut.pool_inst
        if pending:  # the pool's answer is registered: valid the cycle after the admission
            want = pending.pop()
            assert sig(p.m_admit_tvalid)
            got = (sig(p.m_admit_ok), sig(p.m_admit_buffer))
            assert got[0] == (want is not None) and (want is None or got[1] == want), (
                f"pool: rtl {got}, model {want}"
            )
        if sig(p.s_admit_tvalid) and sig(p.s_admit_tready):
            pending.append(pool.admit(sig(p.s_admit_size)))
            counts["busy"] += pending[-1] is None
        if sig(p.finish_valid):
            pool.reasm[sig(p.finish_buffer)] = False
        if (
            released and released[0] != SMALL
        ):  # lands on the edge, after this cycle's admission (as in the RTL)
            pool.used[released[0]] -= released[1]
        if sig(dut.m_buf_axis_tvalid) and sig(dut.m_buf_axis_tready):
            keep = sig(dut.m_buf_axis_tkeep)
            n = bin(keep).count("1")
            assert keep == (1 << n) - 1 and n > 0
            b = SMALL if sig(dut.m_buf_axis_tsmall) else sig(dut.m_buf_axis_tuser)
            collecting[b] = collecting.get(b, b"") + kept(dut.m_buf_axis_tdata, n)
            if sig(dut.m_buf_axis_tlast):  # complete in its buffer (another may start there before it leaves)
                complete.setdefault(b, []).append(collecting.pop(b))
        if sig(dut.m_req_tvalid) and sig(dut.m_req_tready):
            rid = sig(dut.m_req_request_id)
            r = reqs[rid]
            assert r.refusal is None and not r.never, f"request {rid} should have been refused {r.refusal}"
            assert rid not in done
            done.add(rid)
            assert sig(dut.m_req_conn) == r.conn and sig(dut.m_req_len) == len(r.payload)
            b = SMALL if sig(dut.m_req_small) else sig(dut.m_req_buffer)
            counts["small"] += b == SMALL
            got_p = complete[b].pop(0) if r.payload else b""
            assert got_p == r.payload, f"payload of request {rid}"
            assert rid > last_id[r.conn]
            last_id[r.conn] = rid
            counts["admitted"] += 1
            releases.append((cycle + rng.randint(0, hold), b, len(r.payload)))
        if sig(dut.m_resp_axis_tvalid) and sig(dut.m_resp_axis_tready):
            head = int(dut.m_resp_axis_tdata.value).to_bytes(64, "little")
            status = int.from_bytes(head[4:6], "little")
            rid = int.from_bytes(head[8:16], "little")
            conn = sig(dut.m_resp_axis_tuser)
            if rid == ID_NONE:
                closing = [r.rid for r in streams[conn] if r.closes]
                assert closing, (
                    f"bad magic on connection {conn}, status {status}, cycle {cycle}: {head.hex()}"
                )
                rid = closing[0]
            r = reqs[rid]
            assert rid not in done and r.conn == conn and not r.never
            done.add(rid)
            got = (
                status,
                int.from_bytes(head[20:22], "little"),
                head[6],
                int.from_bytes(head[48:56], "little"),
            )
            if r.refusal is None:
                assert status == BUSY, f"request {rid}: {got}, admissible"
                assert got[1:] == (int.from_bytes(r.wire[4:6], "little"), r.wire[7], 0)
            else:
                assert got == r.refusal, f"request {rid}: rtl {got}, want {r.refusal}"
                counts["refused"] += 1
            assert head[7] == DEVICE_ID and head[0:3] == b"\x52\x53\x01" and head[16:20] == bytes(4)
            assert rid > last_refused[r.conn]
            last_refused[r.conn] = rid
        await FallingEdge(dut.clk)
        if (
            not todo
            and offering is None
            and not releases
            and len(done) == sum(not r.never for r in reqs.values())
        ):
            idle(dut)  # the last beat was taken at the edge just past
            for _ in range(5):  # nothing more comes out
                await ReadOnly()
                assert (
                    not sig(dut.m_req_tvalid)
                    and not sig(dut.m_resp_axis_tvalid)
                    and not sig(dut.m_buf_axis_tvalid)
                )
                await FallingEdge(dut.clk)
            assert sig(dut.buf_reassembling) == 0
            return counts
    raise AssertionError(f"stalled: {len(done)} of {len(reqs)} answered")


async def fresh(dut: Any) -> None:
    await start(dut)
    idle(dut)
    dut.m_buf_axis_tready.value = 1
    dut.m_req_tready.value = 1
    dut.m_resp_axis_tready.value = 1


async def reset(dut: Any) -> None:
    """Between runs: the pool model and the closed connection start again too."""
    idle(dut)
    dut.rst.value = 1
    await FallingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def interleaved_streams(dut: Any) -> None:
    """Four connections cut at random and interleaved; every kind of refusal; all outputs ready."""
    await fresh(dut)
    rng = random.Random(1)
    counts = await run(dut, traffic(rng, 40, 1000), rng, 1.0, 1.0, hold=4)
    dut._log.info("%s", counts)
    assert counts["admitted"] > 50 and counts["refused"] > 30


@cocotb.test()
async def stalls(dut: Any) -> None:
    """Input gaps and every output stalled at random (ready 50%, then 10%)."""
    await fresh(dut)
    rng = random.Random(2)
    for k, (p_in, p_out) in enumerate([(0.5, 0.5), (1.0, 0.1)]):
        await reset(dut)
        counts = await run(dut, traffic(rng, 15, 10_000 * (k + 1)), rng, p_in, p_out, hold=10)
        dut._log.info("%s", counts)


@cocotb.test()
async def full_pool(dut: Any) -> None:
    """Complete requests stay in their buffers a long while: new ones are refused BUSY at once, never held."""
    await fresh(dut)
    rng = random.Random(3)
    counts = await run(dut, traffic(rng, 30, 50_000), rng, 1.0, 1.0, hold=3000)
    dut._log.info("%s", counts)
    assert counts["busy"] > 10


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset in the middle of the streams (headers split, payloads half in): afterwards all starts clean."""
    await fresh(dut)
    rng = random.Random(4)
    for stop in (157, 400, 1111):
        await run(dut, traffic(rng, 10, 70_000 + stop * 100), rng, 1.0, 0.5, hold=5, stop_at=stop)
        dut.rst.value = 1
        await FallingEdge(dut.clk)
        dut.rst.value = 0
        await ReadOnly()
        assert sig(dut.buf_reassembling) == 0 and sig(dut.buf_used) == 0
        assert (
            not sig(dut.m_req_tvalid) and not sig(dut.m_resp_axis_tvalid) and not sig(dut.m_buf_axis_tvalid)
        )
        await FallingEdge(dut.clk)
    counts = await run(dut, traffic(rng, 10, 90_000), rng, 1.0, 1.0, hold=5)
    assert counts["admitted"] > 5


@cocotb.test()
async def refused_header_before_its_extension(dut: Any) -> None:
    """A header flagged HOP_EXT whose own checks fail is answered at once, as the engine answers it,
    not after its extension: a client that waits for the answer before sending more is not left
    hanging. Its extension is then skipped with the payload, and the next request is read."""
    await fresh(dut)
    hops = [(0, 0xFF, 0)] * 5 + [(0, 0, 0)] * 3
    fields = {
        "flags": FLAG_HOP_EXT | 0x80,  # a reserved flag: the header's own error
        "tenant": 9,
        "hop_count": 5,
        "hop_index": 0,
        "request_id": 77,
        "payload_len": 3,
        "reply_device": 0xFF,
        "budget_us": 0,
    }
    wire = encode_request(fields, hops)
    replies, done, _ = await replay_segment(dut, random.Random(5), 0, wire[:64], 1.0)
    assert done == [] and len(replies) == 1, (replies, done)
    conn, head = replies[0]
    assert conn == 0 and int.from_bytes(head[4:6], "little") == MALFORMED
    assert int.from_bytes(head[8:16], "little") == 77 and head[6] == 0
    # the extension and the payload are skipped; the request after them is admitted
    for k, rest in enumerate((wire[64:], bytes(3))):
        replies, done, _ = await replay_segment(dut, random.Random(6 + k), 0, rest, 1.0)
        assert replies == [] and done == [], (replies, done)
    nxt = encode_request(
        {**fields, "flags": 0, "hop_count": 1, "request_id": 78, "payload_len": 0}, hops[:1] + [(0, 0, 0)] * 7
    )
    replies, done, _ = await replay_segment(dut, random.Random(8), 0, nxt, 1.0)
    assert replies == [] and done == [(0, 78, 0)], (replies, done)


def wire_request(rid: int, function: int, length: int) -> bytes:
    fields = {
        "flags": 0,
        "tenant": 7,
        "hop_count": 1,
        "hop_index": 0,
        "request_id": rid,
        "payload_len": length,
        "reply_device": 0xFF,
        "budget_us": 0,
    }
    return encode_request(fields, [(function, 0xFF, 0)] + [(0, 0, 0)] * 7) + bytes(
        i % 251 for i in range(length)
    )


@cocotb.test()
async def request_latency(dut: Any) -> None:
    """Cycles the receive path adds (every sink ready, whole 64-byte beats on one connection): header in
    to the complete request out, last payload beat in to it, and header in to a refusal's answer."""
    idle(dut)
    await start(dut)
    dut.m_buf_axis_tready.value = 1
    dut.m_req_tready.value = 1
    dut.m_resp_axis_tready.value = 1

    def beat_drives(wire: bytes) -> list[Any]:
        def drive(chunk: bytes) -> Any:
            def f() -> None:
                dut.s_axis_tdata.value = int.from_bytes(chunk, "little")
                dut.s_axis_tkeep.value = (1 << len(chunk)) - 1
                dut.s_axis_tuser.value = 0
                dut.s_axis_tseg.value = len(chunk)  # a segment a beat

            return f

        return [drive(wire[i : i + 64]) for i in range(0, len(wire), 64)]

    measured = {}
    first, _ = await cycles_to(
        dut, beat_drives(wire_request(1, 0, 0)), "s_axis_tvalid", "s_axis_tready", "m_req_tvalid"
    )
    # no payload: it arrived whole, so it is small (the single-fragment FIFO, no pool admission)
    measured["header only (small): header in -> request out"] = first
    for _ in range(4):
        await FallingEdge(dut.clk)
    dut.release_valid.value = 1  # give the buffer back, as the drain would
    dut.release_buffer.value = 0
    await FallingEdge(dut.clk)
    idle(dut)
    wire = wire_request(2, 0, 384)  # 1 + 6 beats
    first, last = await cycles_to(dut, beat_drives(wire), "s_axis_tvalid", "s_axis_tready", "m_req_tvalid")
    measured["384 B payload: header in -> request out"] = first
    measured["384 B payload: last beat in -> request out"] = last
    for _ in range(4):
        await FallingEdge(dut.clk)
    first, _ = await cycles_to(
        dut, beat_drives(wire_request(3, 2, 0)), "s_axis_tvalid", "s_axis_tready", "m_resp_axis_tvalid"
    )
    measured["refusal: header in -> answer out"] = first
    for name, cycles in measured.items():
        dut._log.info("latency %s: %d cycles (%.3f us at 250 MHz)", name, cycles, cycles * 0.004)
    assert measured == LATENCY, measured


# What the dispatcher takes today (checked, so that a change shows); docs/rtl.md, "Cycles per request".
LATENCY = {
    "header only (small): header in -> request out": 4,  # 6 through the pool, before the small FIFO
    "384 B payload: header in -> request out": 13,  # 24 before the line-rate payload path
    "384 B payload: last beat in -> request out": 2,  # 3 before
    "refusal: header in -> answer out": 4,
}


def engine_answers(traces: list[list[tuple[int, bytes | None]]]) -> list[list[dict[str, Any]]]:
    """What `Engine` itself does with each segment (crates/core/examples/engine_replay.rs: one
    `handle_bytes` call each); a segment without bytes is the connection's close."""
    config = {
        "buffers": BUF_COUNT,
        "buffer_bytes": BUF_BYTES,
        "policy": "eligible-rr",
        "max_payload": MAX_PAYLOAD,
        "device_id": DEVICE_ID,
        "hosted": sorted(HOSTED),
        "small_request_max": SMALL_MAX,
        "small_queue_bytes": SMALL_BYTES,
    }
    text = json.dumps(
        {"config": config, "traces": [[[c, None if d is None else d.hex()] for c, d in t] for t in traces]}
    )
    out = subprocess.run(
        [os.environ["OFFRAC_ENGINE_REPLAY"]], input=text, capture_output=True, text=True, check=True
    )
    answers: list[list[dict[str, Any]]] = json.loads(out.stdout)
    return answers


def segments(rng: random.Random, streams: list[list[Req]]) -> list[tuple[int, bytes]]:
    """Each connection's bytes cut into segments (reads) interleaved at random: a beat's worth or a
    few bytes (a header split across reads), a few hundred bytes, or up to the end of a request
    (whole requests in one read: the small ones arrive whole). About half the connections send only
    short reads, so their requests hold buffers while the others' come in: the pool fills."""
    per = []
    for c, reqs in enumerate(streams):
        short = rng.random() < 0.5
        data = b"".join(r.wire for r in reqs)
        ends, at = [], 0
        for r in reqs:
            at += len(r.wire)
            ends.append(at)
        cuts, i = [], 0
        while i < len(data):
            later = [e for e in ends if e > i]
            if short:
                n = rng.choice([rng.randint(1, 64), rng.randint(1, 8)])
            else:
                n = rng.choice(
                    [
                        rng.randint(1, 64),
                        rng.randint(65, 700),
                        later[0] - i,
                        later[min(1, len(later) - 1)] - i,
                    ]
                )
            cuts.append((c, data[i : i + n]))
            i += n
        per.append(cuts)
    return interleave(rng, per)


def with_closes(rng: random.Random, trace: list[tuple[int, bytes]]) -> list[tuple[int, bytes | None]]:
    """The trace with one to three connections closed at random points of its second half (a segment
    without bytes): the connection's partial request, if any, is dropped, and its later bytes are a
    new connection's (mostly the rest of a request, so a bad magic: MALFORMED, and closed again)."""
    out: list[tuple[int, bytes | None]] = list(trace)
    for _ in range(rng.randint(1, 3)):
        out.insert(rng.randrange(len(out) // 2, len(out) + 1), (rng.randrange(CONNS), None))
    return out


async def replay_segment(
    dut: Any, rng: random.Random, conn: int, data: bytes | None, p_out: float
) -> tuple[list[tuple[int, bytes]], list[tuple[int, int, int]], list[tuple[int, int]]]:
    """One segment in, cut into beats of 1..64 bytes (mostly 64) each carrying the bytes of the
    segment from it on (s_axis_tseg), or the connection's close when `data` is None (abort_* until
    taken); every output it causes, taken with the sinks stalled at random; then quiet.

    Returns the answers (connection, header with `payload_len` zeroed), the complete requests
    (connection, request id, length) and where they were (buffer or SMALL, length), in the order
    they came."""
    replies: list[tuple[int, bytes]] = []
    done: list[tuple[int, int, int]] = []
    held: list[tuple[int, int]] = []
    beats = split_segment(rng, data)
    left = 0 if data is None else len(data)
    offered, quiet = True, 0
    for _ in range(4_000):
        idle(dut)
        if offered and data is None:
            dut.abort_valid.value = 1
            dut.abort_conn.value = conn
        elif offered:
            drive_segment_beat(dut, rng, conn, left, beats[0])
        ready = rng.random() < p_out or quiet > 0
        dut.m_buf_axis_tready.value = int(ready)
        dut.m_req_tready.value = int(ready)
        dut.m_resp_axis_tready.value = int(ready)
        await ReadOnly()
        busy = offered or any(
            sig(s) for s in (dut.m_buf_axis_tvalid, dut.m_req_tvalid, dut.m_resp_axis_tvalid)
        )
        if offered and sig(dut.abort_ready if data is None else dut.s_axis_tready):
            if data is None:
                offered = False
            else:
                left -= len(beats.pop(0))
                offered = bool(beats)
        if ready and sig(dut.m_req_tvalid):
            done.append((sig(dut.m_req_conn), sig(dut.m_req_request_id), sig(dut.m_req_len)))
            held.append((SMALL if sig(dut.m_req_small) else sig(dut.m_req_buffer), sig(dut.m_req_len)))
        if ready and sig(dut.m_resp_axis_tvalid):
            head = bytearray(int(dut.m_resp_axis_tdata.value).to_bytes(64, "little"))
            replies.append((sig(dut.m_resp_axis_tuser), bytes(head)))
        # quiet: the segment taken, nothing offered and the dispatcher ready for the next beat
        quiet = quiet + 1 if not busy and sig(dut.s_axis_tready) else 0
        await FallingEdge(dut.clk)
        if quiet >= 4:
            return replies, done, held
    raise AssertionError(f"the segment on connection {conn} was not used up in 4000 cycles")


@cocotb.test()
async def engine_replay(dut: Any) -> None:
    """The dispatcher against `Engine` itself: the same segments, the same answers, admissions, buffers
    and small-request decisions.

    Each trace: four connections' requests of every kind (tb traffic), cut into segments (reads) and
    interleaved at random, with one to three connection closes among them (abort_*, the engine's
    handle_close). Each segment is one `handle_bytes` call of the engine and, for the RTL, beats of
    1..64 bytes carrying the bytes of the segment from them on (s_axis_tseg), fed one after another.
    After each segment, as the engine drains complete requests out of the pool and the small queue at
    the end of the call that completed them, the replay releases the buffers (and the small queue's
    bytes) of the requests that came out; then it compares, for that segment, every answer
    (connection, the whole 64-byte header except `payload_len`: the RTL sends no message text), the
    complete requests (connection, request id, length; the engine dispatches the small ones first,
    so as sets), how many went to the small queue, the small queue's bytes and which buffers hold a
    partial request. Any difference fails the trace."""
    # its own count first: the simulator's environment is the process's over test_rtl.py's extra_env
    traces = int(os.environ.get("OFFRAC_RTL_DISPATCHER_TRACES", os.environ.get("OFFRAC_RTL_TRACES", "25")))
    seed = int(os.environ.get("OFFRAC_RTL_TRACE_SEED", "1"))
    await fresh(dut)
    rng = random.Random(seed)
    streams = [traffic(rng, rng.randint(3, 12), 1 + 1000 * t) for t in range(traces)]
    # closes drawn apart, so that the traces' segments stay those of the replay without them
    crng = random.Random(seed + 7919)
    cut = [with_closes(crng, segments(rng, s)) for s in streams]
    expected = engine_answers(cut)
    diverged = 0
    totals = {"segments": 0, "bytes": 0, "answers": 0, "admitted": 0, "small": 0, "busy": 0}
    totals |= {"closes": 0, "dropped": 0}
    for t, (trace, want) in enumerate(zip(cut, expected, strict=True)):
        await reset(dut)
        p_out = rng.choice([1.0, 0.6, 0.2])
        for k, ((conn, data), w) in enumerate(zip(trace, want, strict=True)):
            replies, done, held = await replay_segment(dut, rng, conn, data, p_out)
            for b, size in held:  # the engine's drain: out of the pool at the end of the segment
                release(dut, b, size)
                await FallingEdge(dut.clk)
                idle(dut)
            await ReadOnly()
            reassembling = [b for b in range(BUF_COUNT) if sig(dut.buf_reassembling) >> b & 1]
            small_used = sig(dut.small_used)
            await FallingEdge(dut.clk)
            events = w["events"]
            w_replies = [
                (
                    e["reply"][0],
                    bytes.fromhex(e["reply"][1])[:16] + bytes(4) + bytes.fromhex(e["reply"][1])[20:],
                )
                for e in events
                if "reply" in e
            ]
            w_done = sorted(tuple(e["dispatch"]) for e in events if "dispatch" in e)
            small = sum(b == SMALL for b, _ in held)
            got = (replies, sorted(done), small, small_used, reassembling)
            exp = (w_replies, w_done, w["small"], w["small_bytes"], w["reassembling"])
            if got != exp:
                diverged += 1
                dut._log.error("trace %d segment %d (connection %d): rtl %s, engine %s", t, k, conn, got, exp)
                break
            totals["segments"] += 1
            totals["bytes"] += 0 if data is None else len(data)
            if data is None:
                totals["closes"] += 1
                # a close that dropped a partial request in a buffer (the engine's pool abort)
                totals["dropped"] += int(k > 0 and sorted(want[k - 1]["reassembling"]) != w["reassembling"])
            totals["answers"] += len(replies)
            totals["admitted"] += len(done)
            totals["small"] += small
            totals["busy"] += sum(int.from_bytes(h[4:6], "little") == BUSY for _, h in replies)
    dut._log.info("engine replay: %d traces, %s, %d diverged", traces, totals, diverged)
    if out := os.environ.get("OFFRAC_TRACE_SUMMARY"):
        with open(out, "w") as f:
            json.dump({"traces": traces, **totals, "diverged": diverged}, f)
    assert diverged == 0, f"{diverged} of {traces} traces diverged from the engine"
    assert totals["admitted"] > 0 and totals["answers"] > 0
    # the generator reaches every case: small requests taken, split ones and a full pool refused
    assert totals["small"] > 0 and totals["busy"] > 0, totals


# ---- line rate (issue #12's rtl-linerate): a request's payload a beat a cycle -------------------------


async def long_request_cycles(
    dut: Any, rid: int, length: int, head_cut: tuple[int, ...] = (64,)
) -> dict[str, int]:
    """One request of `length` payload bytes in whole 64-byte beats after its header (cut into beats of
    `head_cut` bytes), each beat its own segment (so through the pool), the input always valid and every
    output ready: when each beat was taken, when the last payload beat and the complete request went out
    (cycles from the header's first beat taken), the payload checked byte for byte and the request's
    reassembly time (from its first byte's beat to its going out) against the cycles seen."""
    wire = wire_request(rid, 0, length)
    at = [sum(head_cut[:k]) for k in range(len(head_cut) + 1)]
    assert at[-1] == 64
    chunks = [wire[a:b] for a, b in pairwise(at)] + [wire[i : i + 64] for i in range(64, len(wire), 64)]
    taken: list[int] = []
    got = b""
    out: dict[str, int] = {}
    for t in range(20 * len(chunks) + 100):
        idle(dut)
        if len(taken) < len(chunks):
            chunk = chunks[len(taken)]
            dut.s_axis_tvalid.value = 1
            dut.s_axis_tdata.value = int.from_bytes(chunk, "little")
            dut.s_axis_tkeep.value = (1 << len(chunk)) - 1
            dut.s_axis_tseg.value = len(chunk)
        await ReadOnly()
        if len(taken) < len(chunks) and sig(dut.s_axis_tready):
            taken.append(t)
        if sig(dut.m_buf_axis_tvalid) and sig(dut.m_buf_axis_tready):
            n = bin(sig(dut.m_buf_axis_tkeep)).count("1")
            got += kept(dut.m_buf_axis_tdata, n)
            if sig(dut.m_buf_axis_tlast):
                out["last payload beat out"] = t - taken[0]
        if sig(dut.m_req_tvalid) and sig(dut.m_req_tready):
            assert sig(dut.m_req_request_id) == rid and sig(dut.m_req_len) == length
            out["request out"] = t - taken[0]
            # counted up to the edge that sent it out
            assert sig(dut.m_req_reassembly) == t - 1 - taken[0], (sig(dut.m_req_reassembly), t, taken)
            await FallingEdge(dut.clk)
            break
        await FallingEdge(dut.clk)
    assert got == wire[64:], f"payload of request {rid}: {len(got)} of {length} bytes"
    assert "request out" in out, f"request {rid} did not complete: {len(taken)} of {len(chunks)} beats taken"
    # the payload's beats taken back to back, one a cycle
    gaps = [b - a for a, b in pairwise(taken[len(head_cut) :])]
    out["payload beats"] = len(chunks) - len(head_cut)
    out["payload beats taken late"] = sum(g != 1 for g in gaps)
    return out


@cocotb.test()
async def line_rate_long_request(dut: Any) -> None:
    """A long request, input always valid and every output ready: its payload goes in and out a beat a
    cycle, so header in to last payload beat out takes at most its beats plus a few cycles (the
    header's parse and the pool's admission). 4 KB where the build admits it (test_rtl.py's line-rate
    configuration), else the largest whole-beat payload this build admits."""
    await fresh(dut)
    max_payload = sig(dut.MAX_PAYLOAD)
    length = 4096 if max_payload >= 4096 else (max_payload // 64) * 64
    # twice whole: the second request starts where the first left the connection; then the header
    # cut into three beats (held until whole), with a gap of idle cycles between requests
    for k, cut in enumerate([(64,), (64,), (20, 20, 24)]):
        m = await long_request_cycles(dut, 500 + k, length, cut)
        dut._log.info("line rate, %d B payload, header in %s: %s", length, cut, m)
        release(dut, sig(dut.m_req_buffer), length)  # the drain gives the buffer back
        await FallingEdge(dut.clk)
        idle(dut)
        for _ in range(3 * k):
            await FallingEdge(dut.clk)
        beats_in = len(cut) + m["payload beats"]
        assert m["payload beats taken late"] == 0, m
        assert m["last payload beat out"] <= beats_in + LINE_RATE_SLACK, m
        assert m["request out"] == m["last payload beat out"] + 1, m


# cycles the header's beat costs past its own (parse, admission) in line_rate_long_request
LINE_RATE_SLACK = 6


@cocotb.test()
async def interleaved_cycles(dut: Any) -> None:
    """The interleaved streams (interleaved_streams' traffic, every output ready, input always valid):
    cycles for all their beats, logged for docs/rtl.md and pinned."""
    await fresh(dut)
    rng = random.Random(1)
    t0 = get_sim_time("ns")
    counts = await run(dut, traffic(rng, 40, 1000), rng, 1.0, 1.0, hold=4)
    cycles = int(get_sim_time("ns") - t0) // CLOCK_NS
    dut._log.info("interleaved streams: %d beats in %d cycles (%s)", counts["beats"], cycles, counts)
    assert cycles == INTERLEAVED_CYCLES, (cycles, counts)


# pinned, so that a change shows (docs/rtl.md): 2,985 before the line-rate payload path
INTERLEAVED_CYCLES = 2020
