#!/usr/bin/env python3
"""Issue #11: the Python client's overhead over a raw socket, and its pipelined throughput.

One node (default configuration); in this process, alternating rounds of:

- raw socket: a top-k request (1 KiB of int32, K = 16; header built per call, payload bytes
  ready) sent with ``sendall`` and its answer read with ``recv_into`` and its header parsed,
  on the same thread: the floor for Python;
- ``Client.call("topk", x, k=16)``: the synchronous call (reads its own answer when no other
  thread is reading);
- ``Client.submit(...).result()``: the same request through a future completed by the client's
  reader thread (the hand-off the synchronous path avoids);
- ``submit`` throughput: 2,000 requests in flight through ``submit``, then all results.

Beside them the Rust client's closed-loop rate on one connection (``offrac bench load
--clients 1``). Medians over rounds. `--quick` runs fewer calls.
"""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
from _bench import Server, finish, log, machine, md_table, median
from _bench import load as run_load

from offrac import Client
from offrac.protocol import HEADER_LEN, RequestHeader, ResponseHeader

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
CALLS = 500 if QUICK else 5000
ROUNDS = 2 if QUICK else 5
PIPELINE = 2000
X = np.random.default_rng(1).integers(-(2**31), 2**31, 256, dtype=np.int64).astype(np.int32)


def p50_us(samples: list[float]) -> float:
    return median(samples) * 1e6


def raw_socket(addr: str) -> tuple[float, float]:
    """p50 round trip (µs) and this thread's CPU time per call (µs, user + system)."""
    host, port = addr.rsplit(":", 1)
    payload = X.astype("<i4").tobytes()
    with socket.create_connection((host, int(port))) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = bytearray(1 << 16)
        view = memoryview(buf)
        times = []
        cpu = time.thread_time()
        for i in range(CALLS):
            # Timed like a call: building the request and parsing the answer's header included
            # (the payload bytes are ready, as the client's encoded input is for a raw user).
            t = time.perf_counter()
            wire = RequestHeader.single(i + 1, 1, 16, len(payload)).encode() + payload
            s.sendall(wire)
            got = 0
            need = HEADER_LEN
            while got < need:
                got += s.recv_into(view[got:])
                if got >= HEADER_LEN and need == HEADER_LEN:
                    need = HEADER_LEN + ResponseHeader.decode(bytes(buf[:HEADER_LEN])).payload_len
            times.append(time.perf_counter() - t)
        cpu = time.thread_time() - cpu
    return p50_us(times), cpu / CALLS * 1e6


def sync_call(c: Client) -> tuple[float, float]:
    """As :func:`raw_socket`, through ``Client.call``; the CPU time includes the client's
    own work per call."""
    times = []
    cpu = time.thread_time()
    for _ in range(CALLS):
        t = time.perf_counter()
        c.call("topk", X, k=16)
        times.append(time.perf_counter() - t)
    cpu = time.thread_time() - cpu
    return p50_us(times), cpu / CALLS * 1e6


def future_call(c: Client) -> float:
    times = []
    for _ in range(CALLS):
        t = time.perf_counter()
        c.submit("topk", X, k=16).result()
        times.append(time.perf_counter() - t)
    return p50_us(times)


def submit_rate(c: Client) -> float:
    t = time.perf_counter()
    futs = [c.submit("topk", X, k=16) for _ in range(PIPELINE)]
    for f in futs:
        f.result()
    return PIPELINE / (time.perf_counter() - t)


def main() -> None:
    rows: list[dict[str, Any]] = []
    with Server(["serve", "--listen", "127.0.0.1:0"], "node") as node, Client(node.addr) as c:
        sync_call(c)  # warm-up
        for rnd in range(ROUNDS):
            raw_p50, raw_cpu = raw_socket(node.addr)
            call_p50, call_cpu = sync_call(c)
            row = {
                "round": rnd,
                "raw_p50_us": raw_p50,
                "call_p50_us": call_p50,
                "raw_cpu_us": raw_cpu,
                "call_cpu_us": call_cpu,
                "future_p50_us": future_call(c),
                "submit_req_per_s": submit_rate(c),
                "rust_req_per_s": run_load(
                    node.addr, clients=1, mix="topk:1024:16", duration=1.0, warmup=0.2
                )["total"]["req_per_s"],
            }
            log(", ".join(f"{k} {v:.1f}" for k, v in row.items()))
            rows.append(row)
    fields = [
        "round",
        "raw_p50_us",
        "call_p50_us",
        "raw_cpu_us",
        "call_cpu_us",
        "future_p50_us",
        "submit_req_per_s",
        "rust_req_per_s",
    ]
    finish(HERE, rows, fields, plot, summarize)


def plot(rows: list[dict[str, Any]]) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    keys = ["raw_p50_us", "call_p50_us", "future_p50_us"]
    ax.bar(["raw socket", "Client.call", "submit().result()"], [median([r[k] for r in rows]) for k in keys])
    ax.set_ylabel("p50 round trip (µs), top-k 1 KiB")
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=120)


def summarize(rows: list[dict[str, Any]]) -> str:
    m = {k: median([r[k] for r in rows]) for k in rows[0] if k != "round"}
    return (
        "# Python client: overhead over a raw socket, pipelined throughput (issue #11)\n\n"
        f"Machine: {machine()}. Command: `python3 experiments/python_client/run.py`. "
        f"Median of {ROUNDS} rounds of {CALLS} calls; top-k, 1 KiB int32, K = 16; default node.\n\n"
        + md_table(
            ["path", "p50 µs", "vs raw socket"],
            [
                ["raw socket (same thread)", f"{m['raw_p50_us']:.1f}", ""],
                ["Client.call", f"{m['call_p50_us']:.1f}", f"{m['call_p50_us'] - m['raw_p50_us']:+.1f} µs"],
                [
                    "Client.submit().result()",
                    f"{m['future_p50_us']:.1f}",
                    f"{m['future_p50_us'] - m['raw_p50_us']:+.1f} µs",
                ],
            ],
        )
        + "\n"
        + f"CPU time of the calling thread per call: raw socket {m['raw_cpu_us']:.1f} µs, "
        f"Client.call {m['call_cpu_us']:.1f} µs ({m['call_cpu_us'] - m['raw_cpu_us']:+.1f} µs of client "
        "work per call).\n\n"
        + md_table(
            ["throughput", "req/s", "vs Rust"],
            [
                [
                    f"Python submit, {PIPELINE} in flight",
                    f"{m['submit_req_per_s']:,.0f}",
                    f"{m['submit_req_per_s'] / m['rust_req_per_s']:.2f}",
                ],
                ["Rust client, closed loop, 1 connection", f"{m['rust_req_per_s']:,.0f}", ""],
            ],
        )
    )


if __name__ == "__main__":
    main()
