"""cocotb testbench for offrac_chain_router.v: after a hop, the chain goes on, leaves, or is answered.

The model below is the software node's behaviour written out from its code, step by step:
Job::advance (crates/core/src/job.rs: hop_index + 1, the output as the payload), Engine::route
(crates/core/src/engine.rs: a remote hop is forwarded; a local one refused TOO_LARGE over the
maximum payload), the driver's forward (crates/node/src/driver/links.rs: the forwarded header;
UNREACHABLE for a device missing from the device table), the worker's answer of a failed or last hop
(crates/node/src/worker.rs: that hop's index, the summed timings) and reply_to (a refusal: the
current, advanced, hop and no timings). Headers are compared byte for byte, as beats.

Built with CONN_WIDTH 2, DEVICE_ID 3, HOSTED = functions 0, 1, 6, PEERS = devices 1, 7, 200 and
MAX_PAYLOAD 256 (test_rtl.py).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
from dataclasses import dataclass
from typing import Any

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly, RisingEdge
from header_model import (
    FLAG_DIRECT_REPLY,
    FLAG_FORWARDED,
    FLAG_HOP_EXT,
    FLAG_TRACE,
    carries_origin,
    encode_request,
    encode_response,
    random_valid_request,
)
from tb_util import Beat, sig, start, to_beats

DEVICE_ID = 3
HOSTED = {0, 1, 6}
PEERS = {1, 7, 200}
MAX_PAYLOAD = 256
DEVICE_SELF = 0xFF
OK, UNKNOWN_FUNCTION, TOO_LARGE, UNREACHABLE = 0, 2, 3, 11
PORTS = ("resp", "net", "next")
FULL = (1 << 64) - 1


@dataclass
class Hop:
    """One hop that has run: the request as it came, and what the hop gave."""

    fields: dict[str, int]
    hops: list[tuple[int, int, int]]
    origin_id: int
    conn: int
    status: int
    detail: int
    result: bytes  # the hop's output (only sent when status is OK)
    reassembly: int
    queue: int
    exec: int
    times: int = 0  # the per-hop timings block so far (512 bits), sent after a TRACE answer's header

    def hdr(self) -> int:
        b = encode_request(self.fields, self.hops, self.origin_id)
        return int.from_bytes(b + bytes(128 - len(b)), "little")

    def payload_beats(self) -> list[Beat]:
        return to_beats(self.result) if self.status == OK else []


@dataclass
class Frame:
    port: str
    beats: list[Beat]
    conn: int
    dest: int | None = None  # tdest, on the network port
    times: tuple[int, int, int] | None = None  # reassembly, queue, exec on the next-hop port


def header_beats(b: bytes, more: bool) -> list[Beat]:
    n = len(b) // 64
    return [
        (int.from_bytes(b[64 * i : 64 * i + 64], "little"), FULL, int(i == n - 1 and not more))
        for i in range(n)
    ]


def expected(h: Hop) -> Frame:
    """Where the software sends this hop's request next, and the bytes it sends."""
    f = h.fields
    ran = f["hop_index"]
    nxt = ran + 1
    pay = h.payload_beats()

    def answer(
        status: int, hop: int, detail: int, timed: bool, result: bytes = b"", block: bool = False
    ) -> Frame:
        # the RTL's answers carry no English message: payload_len 0 on an error; a TRACE request's
        # result or hop error carries the per-hop timings block (Job::time_answer), and so does
        # UNREACHABLE (the driver's fail_forwarded), the other refusals not (reply_to)
        traced = (timed or block) and bool(f["flags"] & FLAG_TRACE)
        resp = {
            "status": status,
            "hop_index": hop,
            "device": DEVICE_ID,
            "request_id": f["request_id"],
            "payload_len": len(result),
            "tenant": f["tenant"],
            "reassembly_ns": h.reassembly if timed else 0,
            "queue_ns": h.queue if timed else 0,
            "exec_ns": h.exec if timed else 0,
            "detail": detail,
            "flags": int(traced),
        }
        body = to_beats(result) if status == OK else []
        block = h.times.to_bytes(64, "little") if traced else b""
        return Frame("resp", header_beats(encode_response(resp) + block, bool(body)) + body, h.conn)

    if h.status != OK:  # the hop failed: the chain ends there (worker.rs)
        return answer(h.status, ran, h.detail, True)
    if nxt >= f["hop_count"]:  # Job::is_last_hop: the result is the answer
        return answer(OK, ran, 0, True, h.result)
    function, device, _ = h.hops[nxt]
    if device not in (DEVICE_SELF, DEVICE_ID):  # Engine::route -> forward
        if device not in PEERS:  # the driver's forward: no link to it
            return answer(UNREACHABLE, nxt, device, False, block=True)
        g = dict(f)
        g["hop_index"] = nxt
        g["payload_len"] = len(h.result)
        dr = bool(f["flags"] & FLAG_DIRECT_REPLY)
        if not dr:
            g["reply_device"] = DEVICE_SELF
        caller_id = h.origin_id if carries_origin(f["flags"]) else f["request_id"]
        flags = f["flags"] | FLAG_FORWARDED
        # set_ext_flag
        flags = flags | FLAG_HOP_EXT if f["hop_count"] > 4 or carries_origin(flags) else flags & ~FLAG_HOP_EXT
        g["flags"] = flags
        b = encode_request(g, h.hops, caller_id if carries_origin(flags) else 0)
        return Frame("net", header_beats(b, bool(pay)) + pay, h.conn, dest=device)
    if len(h.result) > MAX_PAYLOAD:  # Engine::route
        return answer(TOO_LARGE, nxt, MAX_PAYLOAD, False)
    if function not in HOSTED:  # no slot hosts it (orphans' rule): never a drop
        return answer(UNKNOWN_FUNCTION, nxt, function, False)
    g = dict(f)
    g["hop_index"] = nxt  # Job::advance
    g["payload_len"] = len(h.result)  # the payload is now the result
    b = encode_request(g, h.hops, h.origin_id)
    return Frame("next", header_beats(b, bool(pay)) + pay, h.conn, times=(h.reassembly, h.queue, h.exec))


def random_hop(rng: random.Random) -> Hop:
    """A hop of a valid request, its next hop spread over every case the router tells apart."""
    fields, hops, origin_id = random_valid_request(rng)
    n = fields["hop_count"]
    ran = rng.randrange(n)
    fields["hop_index"] = ran
    for i in range(n):
        device = rng.choice([DEVICE_SELF, DEVICE_SELF, DEVICE_ID, 1, 7, 200, 0, 2, 254, rng.getrandbits(8)])
        function = rng.choice([0, 1, 6, 0, 1, 6, 2, 3, 255, rng.getrandbits(8)])
        hops[i] = (function, device, hops[i][2])
    status = rng.choice([OK] * 6 + [5, 6, 10, 13])
    size = rng.choice([0, 1, 4, 63, 64, 65, 128, MAX_PAYLOAD, MAX_PAYLOAD + 1, 300, rng.randrange(1, 200)])
    result = bytes(rng.getrandbits(8) for _ in range(size))
    return Hop(
        fields=fields,
        hops=hops,
        origin_id=origin_id,
        conn=rng.randrange(4),
        status=status,
        detail=0 if status == OK else rng.getrandbits(64),
        result=result,
        reassembly=rng.getrandbits(64),
        queue=rng.getrandbits(64),
        exec=rng.getrandbits(64),
        times=rng.getrandbits(512),
    )


def idle(dut: Any) -> None:
    dut.s_hop_valid.value = 0
    dut.s_axis_tvalid.value = 0
    for p in PORTS:
        getattr(dut, f"m_{p}_axis_tready").value = 0


def drive_hop(dut: Any, h: Hop) -> None:
    dut.s_hop_hdr.value = h.hdr()
    dut.s_hop_conn.value = h.conn
    dut.s_hop_status.value = h.status
    dut.s_hop_detail.value = h.detail
    dut.s_hop_len.value = len(h.result)
    dut.s_hop_reassembly.value = h.reassembly
    dut.s_hop_queue.value = h.queue
    dut.s_hop_exec.value = h.exec
    dut.s_hop_times.value = h.times


class Sinks:
    """The three output ports: beats collected into frames, each held beat checked not to change."""

    def __init__(self, dut: Any) -> None:
        self.dut = dut
        self.frames: dict[str, list[Frame]] = {p: [] for p in PORTS}
        self.cur: dict[str, Frame | None] = dict.fromkeys(PORTS)
        self.held: dict[str, tuple[int, ...] | None] = dict.fromkeys(PORTS)
        self.order: list[Frame] = []  # every frame in the order it ended (one hop's after another's)

    def sample(self) -> None:
        """In the read-only phase: record the beats handed over at the coming edge."""
        d = self.dut
        for p in PORTS:
            valid = sig(getattr(d, f"m_{p}_axis_tvalid"))
            ready = sig(getattr(d, f"m_{p}_axis_tready"))
            if not valid:
                assert self.held[p] is None, f"{p}: a stalled beat was withdrawn"
                continue
            beat = (
                sig(getattr(d, f"m_{p}_axis_tdata")),
                sig(getattr(d, f"m_{p}_axis_tkeep")),
                sig(getattr(d, f"m_{p}_axis_tlast")),
            )
            conn = sig(getattr(d, f"m_{p}_axis_tuser"))
            dest = sig(d.m_net_axis_tdest) if p == "net" else None
            times = (
                (sig(d.m_next_reassembly), sig(d.m_next_queue), sig(d.m_next_exec)) if p == "next" else None
            )
            whole = (*beat, conn, dest or 0, *(times or ()))
            if self.held[p] is not None:
                assert whole == self.held[p], f"{p}: a stalled beat changed"
            self.held[p] = None if ready else whole
            if not ready:
                continue
            f = self.cur[p]
            if f is None:
                f = self.cur[p] = Frame(p, [], conn, dest, times)
            assert (f.conn, f.dest, f.times) == (conn, dest, times), f"{p}: sideband changed inside a frame"
            f.beats.append(beat)
            if beat[2]:
                self.frames[p].append(f)
                self.order.append(f)
                self.cur[p] = None

    def reset(self) -> None:
        self.cur = dict.fromkeys(PORTS)
        self.held = dict.fromkeys(PORTS)


async def run_hops(
    dut: Any, hops: list[Hop], rng: random.Random, p_in: float, p_out: float, sinks: Sinks | None = None
) -> dict[str, int]:
    """Offer the hops and their results with gaps, stall every output at random; check every frame."""
    sinks = sinks or Sinks(dut)
    before = {p: len(sinks.frames[p]) for p in PORTS}
    want = [expected(h) for h in hops]
    await drive_hops(dut, hops, rng, p_in, p_out, sinks)
    counts = dict.fromkeys(PORTS, 0)
    for p in PORTS:
        got_p = sinks.frames[p][before[p] :]
        want_p = [w for w in want if w.port == p]
        assert len(got_p) == len(want_p), f"{p}: {len(got_p)} frames, expected {len(want_p)}"
        for i, (g, w) in enumerate(zip(got_p, want_p, strict=True)):
            assert g == w, f"{p} frame {i}: got {g}, expected {w}"
        counts[p] = len(want_p)
    return counts


async def drive_hops(
    dut: Any, hops: list[Hop], rng: random.Random, p_in: float, p_out: float, sinks: Sinks
) -> None:
    """Offer the hops and their results with gaps, stall every output at random, until a frame per hop
    is out (into `sinks`); then check that nothing more comes."""
    before = {p: len(sinks.frames[p]) for p in PORTS}
    payload = [b for h in hops for b in h.payload_beats()]
    hi = bi = 0
    limit = 200 + sum(10 + 2 * len(h.payload_beats()) for h in hops) * 4 / (p_in * p_out)
    for _ in range(int(limit)):
        hop_on = hi < len(hops) and rng.random() < p_in
        # a result beat may be offered once its hop has been offered (the router takes it in order)
        offered = sum(len(h.payload_beats()) for h in hops[: hi + int(hop_on)])
        data_on = bi < min(len(payload), offered) and rng.random() < p_in
        dut.s_hop_valid.value = int(hop_on)
        if hi < len(hops):
            drive_hop(dut, hops[hi])
        dut.s_axis_tvalid.value = int(data_on)
        if bi < len(payload):
            dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = payload[bi]
        for p in PORTS:
            getattr(dut, f"m_{p}_axis_tready").value = int(rng.random() < p_out)
        await ReadOnly()
        if hop_on and sig(dut.s_hop_ready):
            hi += 1
        if data_on and sig(dut.s_axis_tready):
            bi += 1
        sinks.sample()
        await FallingEdge(dut.clk)
        got = sum(len(sinks.frames[p]) - before[p] for p in PORTS)
        if got == len(hops) and hi == len(hops) and bi == len(payload):
            break
    else:
        raise AssertionError(f"stalled: {hi} hops in, {bi} result beats in")
    # nothing more comes out
    idle(dut)
    for p in PORTS:
        getattr(dut, f"m_{p}_axis_tready").value = 1
    for _ in range(4):
        await ReadOnly()
        for p in PORTS:
            assert not sig(getattr(dut, f"m_{p}_axis_tvalid")), f"{p}: a beat beyond the hops"
        await FallingEdge(dut.clk)


def statuses(hops: list[Hop]) -> dict[str, int]:
    """How many of each outcome the hops exercise (so a test cannot pass on one kind alone)."""
    out: dict[str, int] = {}
    for h in hops:
        w = expected(h)
        key = f"resp-{w.beats[0][0] >> 32 & 0xFFFF}" if w.port == "resp" else w.port  # status: bytes 4..5
        out[key] = out.get(key, 0) + 1
        if w.port == "resp" and w.beats[0][0] >> 24 & 1:  # HOP_TIMES: a per-hop timings block follows
            out["traced"] = out.get("traced", 0) + 1
    return out


@cocotb.test()
async def directed(dut: Any) -> None:
    """Seed 001's case and each rule alone: echo then top-k locally, a remote hop, every refusal."""
    await start(dut)
    idle(dut)
    rng = random.Random(1)
    base = {
        "flags": 0,
        "tenant": 7,
        "hop_count": 2,
        "hop_index": 0,
        "request_id": 0x1122334455667788,
        "payload_len": 40,
        "reply_device": DEVICE_SELF,
        "budget_us": 0,
    }
    z = (0, 0, 0)

    def mk(fields: dict[str, int], hops: list[tuple[int, int, int]], result: bytes, **kw: Any) -> Hop:
        f = dict(base)
        f.update(fields)
        return Hop(
            fields=f,
            hops=hops + [z] * (8 - len(hops)),
            origin_id=kw.get("origin_id", 0),
            conn=kw.get("conn", 1),
            status=kw.get("status", OK),
            detail=kw.get("detail", 0),
            result=result,
            reassembly=10,
            queue=20,
            exec=30,
            times=kw.get("times", 0),
        )

    data = bytes(range(40))
    T = int.from_bytes(bytes(range(1, 65)), "little")  # a recognisable timings block
    hops = [
        mk({}, [(0, DEVICE_SELF, 0), (1, DEVICE_SELF, 3)], data),  # echo ran: top-k is next, here
        mk({"hop_index": 1}, [(0, DEVICE_SELF, 0), (1, DEVICE_SELF, 3)], data[:12]),  # top-k ran: answer
        mk({}, [(0, DEVICE_ID, 0), (6, DEVICE_ID, 0)], b""),  # own id, empty result
        mk({}, [(0, DEVICE_SELF, 0), (1, 7, 3)], data),  # remote: forwarded to 7
        mk(
            {"flags": FLAG_DIRECT_REPLY, "reply_device": 9},
            [(0, DEVICE_SELF, 0), (1, 200, 3)],
            data,
        ),  # direct reply: extension with the caller's id
        mk({}, [(0, DEVICE_SELF, 0), (1, 8, 3)], data),  # not a peer: UNREACHABLE
        mk({}, [(0, DEVICE_SELF, 0), (3, DEVICE_SELF, 0)], data),  # not hosted: UNKNOWN_FUNCTION
        mk({}, [(0, DEVICE_SELF, 0), (1, DEVICE_SELF, 0)], bytes(MAX_PAYLOAD + 4)),  # TOO_LARGE
        mk({}, [(0, DEVICE_SELF, 0), (1, DEVICE_SELF, 0)], b"", status=5, detail=77),  # hop failed
        mk(
            {"hop_count": 6, "flags": FLAG_HOP_EXT, "hop_index": 4},
            [(0, DEVICE_SELF, 0)] * 5 + [(6, DEVICE_SELF, 1)],
            data,
        ),  # the sixth hop, in the extension
        # TRACE: the answer of the last hop and a hop's error carry the block, a refusal does not
        mk({"hop_index": 1, "flags": FLAG_TRACE}, [(0, DEVICE_SELF, 0), (1, DEVICE_SELF, 3)], data, times=T),
        mk({"flags": FLAG_TRACE}, [(0, DEVICE_SELF, 0), (1, DEVICE_SELF, 0)], b"", status=5, times=T),
        mk({"flags": FLAG_TRACE}, [(0, DEVICE_SELF, 0), (1, 8, 3)], data, times=T),  # UNREACHABLE: the block
        mk({"flags": FLAG_TRACE}, [(0, DEVICE_SELF, 0), (3, DEVICE_SELF, 0)], data, times=T),  # no block
    ]
    counts = await run_hops(dut, hops, rng, 1.0, 1.0)
    assert counts == {"resp": 9, "net": 2, "next": 3}, counts
    kinds = statuses(hops)
    assert {"resp-0", "resp-2", "resp-3", "resp-5", "resp-11", "net", "next"} <= set(kinds), kinds


@cocotb.test()
async def random_hops(dut: Any) -> None:
    """Random hops of valid requests, all outputs ready, then gaps and stalls down to 5%."""
    await start(dut)
    idle(dut)
    rng = random.Random(2)
    sinks = Sinks(dut)
    total = dict.fromkeys(PORTS, 0)
    seen: dict[str, int] = {}
    for p_in, p_out, n in [(1.0, 1.0, 400), (0.5, 0.5, 200), (1.0, 0.2, 150), (0.3, 0.05, 60)]:
        hops = [random_hop(rng) for _ in range(n)]
        for k, v in statuses(hops).items():
            seen[k] = seen.get(k, 0) + v
        counts = await run_hops(dut, hops, rng, p_in, p_out, sinks)
        for p in PORTS:
            total[p] += counts[p]
    dut._log.info("frames per port %s; outcomes %s", total, seen)
    for k in ("resp-0", "resp-2", "resp-3", "resp-5", "resp-11", "net", "next", "traced"):
        assert seen.get(k, 0) >= 5, (k, seen)


@cocotb.test()
async def reset_mid_request(dut: Any) -> None:
    """Reset with a frame half out on each stalled port: everything gone, the next hops exact."""
    await start(dut)
    idle(dut)
    rng = random.Random(3)
    for port in PORTS:
        # a hop bound for `port` with a result of several beats
        while True:
            h = random_hop(rng)
            h.status = OK
            h.result = bytes(rng.getrandbits(8) for _ in range(200))
            last = h.fields["hop_index"] + 1 >= h.fields["hop_count"]
            if expected(h).port == port and (port != "resp" or last):  # an answer with a result
                break
        drive_hop(dut, h)
        dut.s_hop_valid.value = 1
        beats = h.payload_beats()
        await ReadOnly()
        assert sig(dut.s_hop_ready)
        await FallingEdge(dut.clk)
        dut.s_hop_valid.value = 0
        # the header and one result beat through, then the port stalls
        sent = 0
        for _ in range(12):
            dut.s_axis_tvalid.value = 1
            dut.s_axis_tdata.value, dut.s_axis_tkeep.value, dut.s_axis_tlast.value = beats[sent]
            getattr(dut, f"m_{port}_axis_tready").value = int(_ < 2)
            await ReadOnly()
            if sig(dut.s_axis_tready):
                sent += 1
            await FallingEdge(dut.clk)
            assert sent < len(beats)
        assert sig(getattr(dut, f"m_{port}_axis_tvalid")), "the stalled port holds a beat"
        dut.rst.value = 1
        dut.s_axis_tvalid.value = 0
        await RisingEdge(dut.clk)
        await RisingEdge(dut.clk)
        dut.rst.value = 0
        await FallingEdge(dut.clk)
        await ReadOnly()
        for p in PORTS:
            assert not sig(getattr(dut, f"m_{p}_axis_tvalid")), f"{p} valid after reset"
        assert sig(dut.s_hop_ready), "ready for a hop after reset"
        await FallingEdge(dut.clk)
        idle(dut)
        await run_hops(dut, [random_hop(rng) for _ in range(40)], rng, 0.7, 0.5)


# ---- the replay against the software node itself ------------------------------------------------
# crates/core/examples/chain_replay.rs runs each hop through `Engine` (and the worker's and the
# driver's few lines around it) and says what the node does next; the router is given the same hop.
# Functions 0xFB..0xFF are the node's own (control, collectives, describe, replies, named buffers),
# which the RTL has none of: the replay's chains do not use them.
NODE_FUNCTIONS = 0xFB
FAILED = [5, 6, 10, 13]
# Fields of the software's output the RTL leaves out or decides elsewhere, by design (docs/rtl.md):
# they are not compared, and each time one actually differs it is counted under its name.
EXCLUDED = (
    "message",  # an error's English text (payload_len and payload of a refusal or failed hop)
    "link request_id",  # a forwarded hop's id on the link: the link stage's to assign
    "budget_us",  # what is left of a forwarded hop's budget: the RTL has no budgets
    "stale payload_len",  # the in-memory job's header keeps the first hop's payload_len
)
# Where the software departs from docs/protocol.md and the RTL does not: counted, not compared. (Empty
# since the software's chained hop keeps the request's reassembly, as the router passes it on: it held
# the earlier hops' queueing and execution, counted twice, before.)
KNOWN: tuple[str, ...] = ()
REQ_FIELDS = {
    "magic+version": (0, 3),
    "flags": (3, 4),
    "tenant": (4, 6),
    "hop_count": (6, 7),
    "hop_index": (7, 8),
    "request_id": (8, 16),
    "payload_len": (16, 20),
    "reply_device": (20, 21),
    "budget_us": (21, 24),
    "hops": (24, 64),
    "extension": (64, 128),
}
RESP_FIELDS = {
    "magic+version": (0, 3),
    "flags": (3, 4),
    "status": (4, 6),
    "hop_index": (6, 7),
    "device": (7, 8),
    "request_id": (8, 16),
    "payload_len": (16, 20),
    "tenant": (20, 24),
    "reassembly_ns": (24, 32),
    "queue_ns": (32, 40),
    "exec_ns": (40, 48),
    "detail": (48, 56),
    "reserved": (56, 64),
    "timings block": (64, 128),
}


def engine_hop(rng: random.Random, conn: int) -> tuple[Hop, dict[str, Any]]:
    """A hop of a valid request (random_hop's spread of next hops) as the engine can be given it: the hop
    that runs is local and no hop is a node function; its input fits `MAX_PAYLOAD`, the timings and the
    budget stay short of the budget running out. Returns the hop and its input to chain_replay."""
    h = random_hop(rng)
    ran = h.fields["hop_index"]
    n = h.fields["hop_count"]
    h.hops = [
        (f if f < NODE_FUNCTIONS or i >= n else rng.randrange(NODE_FUNCTIONS), d, p)
        for i, (f, d, p) in enumerate(h.hops)
    ]
    f, _, p = h.hops[ran]
    h.hops[ran] = (f, rng.choice([DEVICE_SELF, DEVICE_ID]), p)
    data = rng.randbytes(rng.choice([0, 1, 64, 100, MAX_PAYLOAD, rng.randrange(MAX_PAYLOAD)]))
    h.fields["payload_len"] = len(data)
    h.fields["budget_us"] = rng.choice([0, 0, 5_000, (1 << 24) - 1])
    if h.fields["reply_device"] == DEVICE_ID and not h.fields["flags"] & FLAG_DIRECT_REPLY:
        h.fields["reply_device"] = DEVICE_SELF  # a reply endpoint's id is never the node's own
    h.conn = conn
    h.reassembly = 0 if not data else rng.choice([0, 1, rng.randrange(1 << 20)])
    h.queue = rng.randrange(1 << 20)
    h.exec = rng.randrange(1 << 20)
    h.detail = 0  # a failed hop's answer has no detail in the software (the worker's ResponseHeader::answer)
    message = f"hop {ran} failed ({rng.getrandbits(16)})" if h.status != OK else ""
    b = encode_request(h.fields, h.hops, h.origin_id)
    hop = {
        "conn": conn,
        "header": b.hex(),
        "payload": data.hex(),
        "reassembly_ns": h.reassembly,
        "queue_ns": h.queue,
        "exec_ns": h.exec,
        "status": h.status,
        "detail": h.detail,
        "message": message,
        "output": h.result.hex() if h.status == OK else "",
    }
    return h, hop


def chain_replay(hops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    config = {
        "device_id": DEVICE_ID,
        "hosted": sorted(HOSTED),
        "peers": sorted(PEERS),
        "max_payload": MAX_PAYLOAD,
    }
    out = subprocess.run(
        [os.environ["OFFRAC_CHAIN_REPLAY"]],
        input=json.dumps({"config": config, "hops": hops}),
        capture_output=True,
        text=True,
        check=True,
    )
    answers: list[dict[str, Any]] = json.loads(out.stdout)
    return answers


def frame_bytes(f: Frame) -> bytes:
    return b"".join(d.to_bytes(64, "little")[: bin(k).count("1")] for d, k, _ in f.beats)


def split(port: str, b: bytes) -> tuple[bytes, bytes]:
    """A frame's header (the request's with its extension; the response's with its timings block) and
    payload."""
    n = 128 if len(b) >= 64 and b[3] & 1 else 64
    return b[:n], b[n:]


def compare(rtl: Frame, want: dict[str, Any], excluded: dict[str, int], known: dict[str, int]) -> list[str]:
    """The fields in which the RTL's frame differs from the software's decision (none: the same)."""
    w = want["out"]
    if rtl.port != w["port"]:
        return ["port"]
    diff = [] if rtl.conn == w["conn"] else ["conn"]
    head, pay = split(w["port"], bytes.fromhex(w["header"]) + bytes.fromhex(w["payload"]))
    got_head, got_pay = split(rtl.port, frame_bytes(rtl))
    head = bytearray(head)
    if w["port"] == "resp":
        status = int.from_bytes(head[4:6], "little")
        if status != OK:  # no English message in the RTL's answers
            excluded["message"] += int(bool(pay))
            head[16:20], pay = bytes(4), b""
        fields = RESP_FIELDS
    else:
        fields = REQ_FIELDS
        if w["port"] == "net":
            diff += [] if rtl.dest == w["dest"] else ["dest"]
            excluded["link request_id"] += int(head[8:16] != got_head[8:16])
            excluded["budget_us"] += int(head[21:24] != got_head[21:24])
            head[8:16], head[21:24] = got_head[8:16], got_head[21:24]
        else:
            reassembly, queue, exec_ = w["times"]
            assert rtl.times is not None
            diff += [] if rtl.times == (reassembly, queue, exec_) else ["timing sums"]
            excluded["stale payload_len"] += int(w["header_payload_len"] != len(pay))
            head[16:20] = len(pay).to_bytes(4, "little")
    for name, (a, b) in fields.items():
        if head[a:b] != got_head[a:b]:
            diff.append(name)
    if len(head) != len(got_head) and "flags" not in diff:
        diff.append("header length")
    if pay != got_pay:
        diff.append("payload")
    # the beats themselves: full header beats, the payload packed from byte 0, tlast on the last
    shape = [(FULL, 0)] * (len(got_head) // 64) + [(k, 0) for _, k, _ in to_beats(got_pay)]
    shape[-1] = (shape[-1][0], 1)
    if [(k, last) for _, k, last in rtl.beats] != shape:
        diff.append("framing")
    return diff


@cocotb.test()
async def engine_replay(dut: Any) -> None:
    """The router against the software node (crates/core/examples/chain_replay.rs): the same hops, the
    same decisions, field by field.

    A trace: ten hops of valid requests (random_hop's spread: every outcome, extensions, direct replies,
    forwarded headers with an origin, results around the beat and the maximum, failed hops, TRACE) on
    four connections, run back to back with one of four gap and stall profiles. Every hop's frame is
    compared with what the software does next: the port (the next local hop, the network towards a
    device, or an answer), the connection, tdest, the timing sums, every header field, the payload and
    the beats' framing. The fields in EXCLUDED are the RTL's documented differences: not compared, and
    counted each time they actually differ."""
    # its own count first: the simulator's environment is the process's over test_rtl.py's extra_env
    traces = int(os.environ.get("OFFRAC_RTL_ROUTER_TRACES", os.environ.get("OFFRAC_RTL_TRACES", "25")))
    seed = int(os.environ.get("OFFRAC_RTL_TRACE_SEED", "1"))
    await start(dut)
    idle(dut)
    rng = random.Random(seed)
    per = 10
    made = [engine_hop(rng, rng.randrange(4)) for _ in range(traces * per)]
    answers = chain_replay([m for _, m in made])
    sinks = Sinks(dut)
    diverged = 0
    fields: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    excluded = dict.fromkeys(EXCLUDED, 0)
    known = dict.fromkeys(KNOWN, 0)
    for t in range(traces):
        hops = [h for h, _ in made[t * per : (t + 1) * per]]
        want = answers[t * per : (t + 1) * per]
        for h, a in zip(hops, want, strict=True):
            inp = a["inputs"]
            h.reassembly, h.queue, h.exec = inp["reassembly"], inp["queue"], inp["exec"]
            h.times = int.from_bytes(bytes.fromhex(inp["times"]), "little")
        p_in, p_out = rng.choice([(1.0, 1.0), (0.5, 0.5), (1.0, 0.2), (0.3, 0.05)])
        first = len(sinks.order)
        await drive_hops(dut, hops, rng, p_in, p_out, sinks)
        got = sinks.order[first:]
        assert len(got) == len(hops), f"trace {t}: {len(got)} frames for {len(hops)} hops"
        bad = False
        for k, (g, a) in enumerate(zip(got, want, strict=True)):
            w = a["out"]
            key = w["port"] if w["port"] != "resp" else f"resp-{int(w['header'][8:10], 16)}"
            outcomes[key] = outcomes.get(key, 0) + 1
            diff = compare(g, a, excluded, known)
            for name in diff:
                fields[name] = fields.get(name, 0) + 1
            if diff:
                bad = True
                dut._log.error("trace %d hop %d: %s differ; rtl %s, software %s", t, k, diff, g, w)
        diverged += int(bad)
    summary = {
        "traces": traces,
        "decisions": traces * per,
        "diverged": diverged,
        "fields": fields,
        "outcomes": outcomes,
        "excluded": excluded,
        "known": known,
    }
    dut._log.info("engine replay: %s", summary)
    if out := os.environ.get("OFFRAC_TRACE_SUMMARY"):
        with open(out, "w") as f:
            json.dump(summary, f)
    assert diverged == 0, f"{diverged} of {traces} traces diverged from the software: {fields}"
    # every outcome reached (OK answers, a failed hop, each refusal, a forward, a next local hop)
    reached = [outcomes.get(k, 0) for k in ("resp-0", "resp-2", "resp-3", "resp-5", "resp-11", "net", "next")]
    assert min(reached) > 0, outcomes
