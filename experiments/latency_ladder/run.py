#!/usr/bin/env python3
"""Seed 002's ladder of added latency on one node: each rung adds one layer to the one before.

One busy-polling closed-loop client, one connection, echo payloads of 64 B, 1 KiB and 4 KiB.
Every rung is a separate server process started for its measurement (a spinning floor server
keeps a core per connection it ever served) and stopped after it; rungs and sizes are
interleaved in REPS rounds and medians are reported, with ratios to the raw echo floor.

The rungs (cumulative; each is the previous plus one thing):

0. raw echo        `bench serve-floor`: the same framing, one thread per connection spinning on
                   recv, the header's length read and the bytes written back. The floor.
1. + engine, null  the node (I/O thread busy-polls 100 µs): header validated, request admitted by
   function        the engine and dispatched, the `echo` built-in (output = input, the copy the
                   raw echo also makes) run inline on the I/O thread, the answer framed with its
                   timings. Requests up to 8 KiB arrive whole and take the small-request path,
                   so no reassembly buffer is used.
2. + reassembly    `small_request_max = 0`: every request is copied into a reassembly buffer of
                   the pool first (what a fragmented or large request always does).
3. + hand-off      `inline_max_bytes = 0`: the echo runs on its slot's worker thread, queued and
                   handed over (the worker sleeps when idle, the node's default).
4. + tenancy/auth  `[control] anonymous = "refuse"` and one tenant: the connection opens with an
                   HMAC-signed hello, every request is attributed to the tenant, checked against
                   its quotas and scheduled by the DRR of its slot.
5. + WebAssembly   the tenant uploads an echo module (`echo.wat`, output = input in place) through
                   the control plane and swaps it into the slot as function 200; the client sends
                   the same payloads to function 200 (`bench load --function-id 200`); the call
                   runs in wasmtime on the slot's worker.

Two series, because the machine has 2 cores. The client busy-polls one core. In the *poll*
series the node's I/O thread busy-polls the other, which is the fastest a node can answer, but a
slot worker woken for the hand-off then has no idle core and waits for a scheduler tick
(milliseconds): rungs 3-5 are not measured there. In the *blocking* series (`[io] mode =
"blocking"`) every node thread sleeps when idle, so all six rungs fit on 2 cores and each step
is the cost of its layer including the wake-ups it needs; its floor is the raw echo on one
blocking epoll thread (`bench serve-raw --io blocking`). `bench serve-raw --io poll` (the same
echo on one busy-polling epoll thread, like the node's I/O thread) is measured as a reference.

The echo built-in is the null function: its output is its input, the copy the raw echo also
makes. The node cannot answer after reassembly without running a function, so the engine's
admission and the null function share rung 1.

Run: `python3 experiments/latency_ladder/run.py` (`--quick`: one short round).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _bench import Server, load, log, machine, md_table, median, node, offrac_bin, raw_echo, write_csv

HERE = Path(__file__).resolve().parent
QUICK = "--quick" in sys.argv
REPS, DUR, WARM = (1, 0.5, 0.2) if QUICK else (5, 1.0, 0.3)
SIZES = [64, 1024, 4096]
TENANT, KEY = 1, "5a" * 16
WASM_ID = 200
ECHO_WAT = """;; Echo for the latency ladder: the output is the input, in place.
(module
  (memory (export "memory") 1)
  (func (export "alloc") (param $len i32) (result i32)
    (local $need i32)
    (local.set $need (i32.add (i32.const 1024) (local.get $len)))
    (if (i32.gt_u (local.get $need) (i32.shl (memory.size) (i32.const 16)))
      (then
        (if (i32.eq
              (memory.grow
                (i32.sub (i32.add (i32.shr_u (local.get $need) (i32.const 16)) (i32.const 1))
                         (memory.size)))
              (i32.const -1))
          (then unreachable))))
    (i32.const 1024))
  (func (export "run") (param $ptr i32) (param $len i32) (param $param i64) (result i64)
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len))))
)
"""

BASE = """
[io]
mode = "{mode}"
spin_us = 100
[metrics]
listen = ""
[pool]
small_request_max = {small}
small_queue_bytes = 1048576
[[slots]]
function = "echo"
inline_max_bytes = {inline}
"""
CONTROL = f"""
[control]
anonymous = "refuse"
[[control.tenants]]
id = {TENANT}
key = "{KEY}"
"""

# (series, rung, name, server kind); the node's configuration per rung comes from config().
RUNGS: list[tuple[str, int, str, str]] = [
    ("poll", 0, "raw echo (spinning thread)", "floor"),
    ("poll", 1, "+ engine, null function", "node"),
    ("poll", 2, "+ reassembly", "node"),
    ("poll", -1, "raw epoll, polling (reference)", "raw-poll"),
    ("blocking", 0, "raw echo (blocking epoll)", "raw-blocking"),
    ("blocking", 1, "+ engine, null function", "node"),
    ("blocking", 2, "+ reassembly", "node"),
    ("blocking", 3, "+ hand-off", "node"),
    ("blocking", 4, "+ tenancy/auth", "node"),
    ("blocking", 5, "+ WebAssembly", "node"),
]


def config(series: str, rung: int) -> str:
    small = 8256 if rung == 1 else 0
    inline = 65536 if rung <= 2 else 0
    text = BASE.format(mode=series, small=small, inline=inline)
    return text + (CONTROL if rung >= 4 else "")


def ctl(*args: str) -> str:
    out = subprocess.run([offrac_bin(), "ctl", *args], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def start(series: str, rung: int, kind: str, tmp: Path) -> Server:
    if kind == "floor":
        return Server(["bench", "serve-floor", "--listen", "127.0.0.1:0"], "floor")
    if kind.startswith("raw-"):
        return raw_echo(kind.removeprefix("raw-"))
    cfg = tmp / f"{series}{rung}.toml"
    cfg.write_text(config(series, rung))
    srv = node(cfg, f"{series}{rung}")
    if rung == 5:
        auth = ["--addr", srv.addr, "--tenant", str(TENANT), "--key", KEY]
        wat = tmp / "echo.wat"
        wat.write_text(ECHO_WAT)
        found = re.search(r"[0-9a-f]{64}", ctl("upload", *auth, str(wat)))
        if found is None:
            raise RuntimeError("the upload printed no digest")
        digest = found.group(0)
        ctl("swap", *auth, "--slot", "0", "--wasm", digest, "--function", str(WASM_ID))
    return srv


def measure(rung: int, kind: str, addr: str, size: int) -> dict[str, Any]:
    extra: list[str] = []
    if rung >= 4 and kind == "node":
        extra += ["--tenant", str(TENANT), "--key", KEY]
    if rung == 5:
        extra += ["--function-id", str(WASM_ID)]
    r = load(addr, clients=1, mix=f"echo:{size}", duration=DUR, warmup=WARM, busy_poll=True, extra=extra)
    t = r["total"]
    if t["errors"] or t["ok"] == 0:
        raise RuntimeError(f"rung {rung} at {size} B: {t['ok']} ok, errors {t['errors_by_status']}")
    return {"p50_us": t["p50_us"], "p99_us": t["p99_us"], "req_per_s": t["req_per_s"], "ok": t["ok"]}


FIELDS = ["round", "series", "rung", "name", "bytes", "p50_us", "p99_us", "req_per_s", "ok"]


def main() -> None:
    rows: list[dict[str, Any]] = []
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for rnd in range(REPS):
            for size in SIZES:
                for series, rung, name, kind in RUNGS:
                    with start(series, rung, kind, tmp) as srv:
                        m = measure(rung, kind, srv.addr, size)
                    row = {"round": rnd, "series": series, "rung": rung, "name": name, "bytes": size}
                    rows.append(row | m)
            log(f"round {rnd + 1}/{REPS} done")
    load_after = os.getloadavg()[0]
    write_csv(HERE / "results.csv", rows, FIELDS)

    def med(series: str, rung: int, size: int, key: str) -> float:
        return median([r[key] for r in rows if (r["series"], r["rung"], r["bytes"]) == (series, rung, size)])

    table = []
    for series in ("poll", "blocking"):
        for size in SIZES:
            f50, f99 = med(series, 0, size, "p50_us"), med(series, 0, size, "p99_us")
            prev = f50
            for s_, rung, name, _ in RUNGS:
                if s_ != series:
                    continue
                p50, p99 = med(series, rung, size, "p50_us"), med(series, rung, size, "p99_us")
                step = f"{p50 - prev:+.2f}" if rung > 0 else ""
                ratios = [f"{p50 / f50:.2f}", f"{p99:.2f}", f"{p99 / f99:.2f}"]
                table.append([series, size, name, f"{p50:.2f}", step, *ratios])
                if rung >= 0:
                    prev = p50
    text = (
        "# Seed 002's latency ladder on one node\n\n"
        f"Reproduce: `python3 experiments/latency_ladder/run.py` ({machine()}; 1-minute load average"
        f" {load_before:.2f} before, {load_after:.2f} after).\n\n"
        "One busy-polling client, one connection, closed loop; each rung a fresh server process;"
        f" medians of {REPS} interleaved rounds of {DUR} s (after {WARM} s warm-up) per rung and"
        " size. Client and server share the machine's 2 cores. What each rung adds, and why there"
        " are two series, is in the script's docstring. `step` is the p50 added by the rung over"
        " the one above; the ratios are to the series' floor (rung 0) at the same size.\n\n"
        + md_table(
            ["series", "bytes", "rung", "p50 µs", "step µs", "p50 / floor", "p99 µs", "p99 / floor"], table
        )
        + "\n"
    )
    (HERE / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
