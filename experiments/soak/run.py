#!/usr/bin/env python3
"""Soak (issue #10): good pipelined clients beside hostile ones against one real node.

One `offrac serve` process (embedded default config unless `--config`) on loopback, for
`--duration` seconds:

* good clients: `offrac.Client` with `submit` futures (echo, topk, logit, minmax; every result
  checked against numpy) and raw-socket clients that pipeline their own requests and see every
  frame, so a duplicated or stray answer cannot hide inside a client library;
* hostile clients, each a loop of fresh connections: slowloris (half a header trickled, then
  silence), tricklers (a payload a few bytes at a time; the node must answer TIMEOUT and keep the
  connection usable), garbage bytes after valid requests, mid-request disconnects (FIN or RST),
  and never-reading clients that keep sending 64 KiB requests.

Every request with a defined answer must get exactly one: a result or an explicit error status.
The node's RSS and open fds (`/proc/PID/status`, `/proc/PID/fd`) and its `/metrics` are sampled
over time. Writes `results.csv` (the samples) and `summary.md` into `--out` (default: here), and
`--json FILE` the accounting. Exits 1 on a lost, duplicated or wrong answer, a node that died,
or unbounded growth (defined in `growth_verdict`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import csv
import json
import os
import random
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from offrac import (
    HEADER_LEN,
    REQUEST_ID_NONE,
    REQUEST_MAGIC,
    Client,
    ConnectionClosedError,
    FunctionId,
    OffracError,
    ResponseHeader,
    Status,
    encode_request,
)

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
ECHO = int(FunctionId.ECHO)
TOPK = int(FunctionId.TOPK)
# How long a good request may stay unanswered before it counts as lost.
ANSWER_TIMEOUT_S = 30.0
# Growth margins (see growth_verdict).
RSS_MARGIN_FRACTION = 0.10
RSS_MARGIN_MIB = 8.0
FD_MARGIN = 8
FD_DRAIN_MARGIN = 2


def offrac_bin() -> str:
    return os.environ.get("OFFRAC_BIN", str(REPO / "target" / "release" / "offrac"))


# ---------------------------------------------------------------------------------------------
# Accounting


@dataclass
class Tally:
    """What one client (good or hostile) sent and got."""

    name: str
    kind: str
    sent: int = 0  # requests that must get exactly one answer
    answered: int = 0
    ok: int = 0
    wrong: int = 0  # OK answers whose payload is not what the function computes
    duplicates: int = 0  # second answers to a request, or answers to ids never sent
    lost: int = 0
    statuses: Counter[str] = field(default_factory=Counter)
    connections: int = 0
    closed_by_node: int = 0
    bytes_sent: int = 0
    notes: Counter[str] = field(default_factory=Counter)

    def row(self) -> dict[str, Any]:
        return {
            "client": self.name,
            "kind": self.kind,
            "sent": self.sent,
            "answered": self.answered,
            "ok": self.ok,
            "errors": dict(sorted((k, v) for k, v in self.statuses.items() if k != "OK")),
            "wrong": self.wrong,
            "duplicates": self.duplicates,
            "lost": self.lost,
            "connections": self.connections,
            "closed_by_node": self.closed_by_node,
            "bytes_sent": self.bytes_sent,
            "notes": dict(sorted(self.notes.items())),
        }


class Answers:
    """Request ids of one connection awaiting their single answer."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.waiting: dict[int, Callable[[bytes], bool] | None] = {}
        self.seen: set[int] = set()

    def expect(self, rid: int, check: Callable[[bytes], bool] | None = None) -> None:
        self.waiting[rid] = check
        self.tally.sent += 1

    def got(self, header: ResponseHeader, payload: bytes) -> None:
        rid = header.request_id
        if rid not in self.waiting:
            if rid in self.seen:
                self.tally.duplicates += 1
            elif rid != REQUEST_ID_NONE:
                self.tally.duplicates += 1  # an answer to an id this connection never sent
            self.tally.statuses[header.status.name] += 1
            return
        check = self.waiting.pop(rid)
        self.seen.add(rid)
        self.tally.answered += 1
        self.tally.statuses[header.status.name] += 1
        if header.status == Status.OK:
            self.tally.ok += 1
            if check is not None and not check(payload):
                self.tally.wrong += 1

    def give_up(self) -> None:
        """The rest will never come (connection closed or the wait ran out): lost."""
        self.tally.lost += len(self.waiting)
        self.waiting.clear()


class Frames:
    """Reads response frames off a socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.eof = False

    def pump(self, wait: float) -> bool:
        """Read what arrives within ``wait`` s; False once the node closed (EOF or reset)."""
        if self.eof:
            return False
        readable, _, _ = select.select([self.sock], [], [], max(wait, 0.0))
        if not readable:
            return True
        try:
            chunk = self.sock.recv(1 << 16)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        except (BlockingIOError, TimeoutError):
            return True
        if not chunk:
            self.eof = True
            return False
        self.buf += chunk
        return True

    def next(self) -> tuple[ResponseHeader, bytes] | None:
        if len(self.buf) < HEADER_LEN:
            return None
        header = ResponseHeader.decode(bytes(self.buf[:HEADER_LEN]))
        end = HEADER_LEN + header.payload_len
        if len(self.buf) < end:
            return None
        payload = bytes(self.buf[HEADER_LEN:end])
        del self.buf[:end]
        return header, payload

    def drain_into(self, answers: Answers, wait: float) -> bool:
        alive = self.pump(wait)
        while (frame := self.next()) is not None:
            answers.got(*frame)
        return alive


def connect(addr: tuple[str, int]) -> socket.socket:
    s = socket.create_connection(addr, timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def close_hard(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0), as a crashed client would."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


# ---------------------------------------------------------------------------------------------
# Good clients


def same_bytes(want: bytes) -> Callable[[bytes], bool]:
    return lambda got: bytes(got) == want


def topk_check(x: npt.NDArray[np.int32], k: int) -> Callable[[bytes], bool]:
    return same_bytes(np.sort(x)[::-1][:k].tobytes())


def same_array(want: npt.NDArray[Any]) -> Callable[[Any], bool]:
    return lambda got: bool(np.array_equal(got, want))


def close_array(want: npt.NDArray[Any]) -> Callable[[Any], bool]:
    # float32 on both sides, computed in a different order: a few ulps apart.
    return lambda got: bool(np.allclose(got, want, rtol=1e-4, atol=1e-5))


class CountingClient(Client):
    """offrac.Client that counts answers to ids it is not waiting for: the library drops them,
    so a duplicated answer would otherwise vanish."""

    unmatched = 0

    def _dispatch(self, header: ResponseHeader, payload: bytearray) -> None:
        with self._lock:
            known = header.request_id in self._pending
        if not known:
            self.unmatched += 1
        super()._dispatch(header, payload)


def good_library_client(
    tally: Tally, addr: str, stop: threading.Event, window: int, pause: float, seed: int
) -> None:
    """Pipelined offrac.Client: ``window`` futures in flight per batch, results checked."""
    rng = np.random.default_rng(seed)
    client: CountingClient | None = None
    try:
        while not stop.is_set():
            if client is None or client.closed:
                if client is not None:
                    tally.duplicates += client.unmatched
                    client.close()
                client = CountingClient(addr, timeout=ANSWER_TIMEOUT_S)
                tally.connections += 1
            batch: list[tuple[concurrent.futures.Future[Any], Callable[[Any], bool]]] = []
            for _ in range(window):
                fut: concurrent.futures.Future[Any]
                kind = int(rng.integers(0, 4))
                if kind == 0:
                    data = rng.bytes(int(rng.integers(1, 4096)))
                    fut = client.submit("echo", data)
                    batch.append((fut, same_bytes(data)))
                elif kind == 1:
                    xi = rng.integers(-(2**31), 2**31 - 1, int(rng.integers(64, 4096)), dtype=np.int32)
                    k = int(rng.integers(1, 33))
                    want = np.sort(xi)[::-1][:k]
                    fut = client.submit("topk", xi, k=k)
                    batch.append((fut, same_array(want)))
                elif kind == 2:
                    xf = rng.uniform(0.01, 0.99, int(rng.integers(16, 2048))).astype(np.float32)
                    want_f = np.log(xf / (1 - xf))
                    fut = client.submit("logit", xf)
                    batch.append((fut, close_array(want_f)))
                else:
                    xf = rng.standard_normal(int(rng.integers(16, 4096))).astype(np.float32)
                    lo, hi = xf.min(), xf.max()
                    want_f = (xf - lo) / (hi - lo)
                    fut = client.submit("minmax", xf)
                    batch.append((fut, close_array(want_f)))
                tally.sent += 1
            deadline = time.monotonic() + ANSWER_TIMEOUT_S
            for fut, check in batch:
                try:
                    got = fut.result(timeout=max(0.0, deadline - time.monotonic()))
                except concurrent.futures.TimeoutError:
                    tally.lost += 1
                    tally.notes["answer timeout"] += 1
                    continue
                except ConnectionClosedError:
                    tally.lost += 1  # the node closed a good client's connection with this open
                    tally.notes["connection closed"] += 1
                    continue
                except OffracError as e:
                    tally.answered += 1
                    tally.statuses[e.status.name if e.status is not None else type(e).__name__] += 1
                    continue
                tally.answered += 1
                tally.ok += 1
                tally.statuses["OK"] += 1
                if not check(got):
                    tally.wrong += 1
            if any(not f.done() for f, _ in batch):
                client.close()  # its outstanding requests were counted lost; start afresh
            if pause:
                stop.wait(pause)
    finally:
        if client is not None:
            # Let a late duplicate arrive before counting.
            time.sleep(0.2)
            tally.duplicates += client.unmatched
            client.close()


def good_raw_client(
    tally: Tally, addr: tuple[str, int], stop: threading.Event, window: int, pause: float, seed: int
) -> None:
    """Pipelined raw-socket client (no BUSY retry): every frame on the wire is accounted for."""
    rng = np.random.default_rng(seed)
    rid = 0
    while not stop.is_set():
        sock = connect(addr)
        tally.connections += 1
        frames, answers = Frames(sock), Answers(tally)
        try:
            while not stop.is_set():
                out = bytearray()
                for _ in range(window):
                    rid += 1
                    if rng.random() < 0.5:
                        data = rng.bytes(int(rng.integers(1, 8192)))
                        out += encode_request(rid, ECHO, data)
                        answers.expect(rid, same_bytes(data))
                    else:
                        xi = rng.integers(-(2**31), 2**31 - 1, int(rng.integers(8, 1024)), dtype=np.int32)
                        k = int(rng.integers(1, 16))
                        out += encode_request(rid, TOPK, xi.tobytes(), param=k)
                        answers.expect(rid, topk_check(xi, k))
                sock.sendall(out)
                tally.bytes_sent += len(out)
                deadline = time.monotonic() + ANSWER_TIMEOUT_S
                while answers.waiting and time.monotonic() < deadline:
                    if not frames.drain_into(answers, 0.5):
                        break
                if answers.waiting:
                    tally.notes["closed by node" if frames.eof else "answer timeout"] += 1
                    if frames.eof:
                        tally.closed_by_node += 1
                    answers.give_up()
                    break
                if pause:
                    stop.wait(pause)
            # A short look for late duplicates before closing.
            frames.drain_into(answers, 0.1)
        except OSError as e:
            tally.notes[f"socket error {type(e).__name__}"] += 1
            answers.give_up()
        finally:
            sock.close()


# ---------------------------------------------------------------------------------------------
# Hostile clients


def slowloris(tally: Tally, addr: tuple[str, int], stop: threading.Event, gap: float, seed: int) -> None:
    """Half a header, a byte every ``gap`` s, then silence: the node must answer TIMEOUT (naming
    the request once its id has arrived) and close."""
    rng = random.Random(seed)
    while not stop.is_set():
        rid = rng.randrange(1, 2**32)
        head = encode_request(rid, ECHO, b"x" * 100)[: HEADER_LEN // 2]
        sock = connect(addr)
        tally.connections += 1
        frames, answers = Frames(sock), Answers(tally)
        t0 = time.monotonic()
        try:
            for i, b in enumerate(head):
                sock.sendall(bytes([b]))
                tally.bytes_sent += 1
                if i == 15:  # request_id is bytes 8..16: from here on the answer names it
                    answers.expect(rid)
                if stop.wait(gap) or not frames.drain_into(answers, 0):
                    break
            while not stop.is_set() and frames.drain_into(answers, 0.5):
                if time.monotonic() - t0 > 60:
                    tally.notes["held over 60 s"] += 1
                    break
        except OSError:
            frames.eof = True
        if frames.eof:
            tally.closed_by_node += 1
            tally.notes[f"closed after {int(time.monotonic() - t0)} s"] += 1
        elif stop.is_set():
            # We leave first: the node cannot owe an answer to a connection we closed.
            tally.sent -= len(answers.waiting)
            answers.waiting.clear()
        answers.give_up()
        sock.close()


def trickler(tally: Tally, addr: tuple[str, int], stop: threading.Event, gap: float, seed: int) -> None:
    """A payload a few bytes at a time. Its request gets one answer (TIMEOUT once the reassembly
    timeout passes); then the rest of the payload and a normal request on the same connection,
    which must be answered too (the connection stays usable)."""
    rng = random.Random(seed)
    rid = 0
    while not stop.is_set():
        sock = connect(addr)
        tally.connections += 1
        frames, answers = Frames(sock), Answers(tally)
        size = 8192
        rid += 1
        payload = rng.randbytes(size)
        try:
            req = encode_request(rid, ECHO, payload)
            sock.sendall(req[:HEADER_LEN])
            answers.expect(rid, same_bytes(payload))
            pos = HEADER_LEN
            while pos < len(req) and answers.waiting and not stop.is_set():
                step = req[pos : pos + 16]
                sock.sendall(step)
                pos += len(step)
                tally.bytes_sent += len(step)
                if not frames.drain_into(answers, gap):
                    break
            if not stop.is_set() and not frames.eof:
                sock.sendall(req[pos:])  # the rest at once: read and discarded by the node
                tally.bytes_sent += len(req) - pos
                rid += 1
                after = rng.randbytes(rng.randint(1, 1024))
                sock.sendall(encode_request(rid, ECHO, after))
                answers.expect(rid, same_bytes(after))
            deadline = time.monotonic() + ANSWER_TIMEOUT_S
            while answers.waiting and time.monotonic() < deadline and frames.drain_into(answers, 0.5):
                pass
        except OSError:
            frames.eof = True
        if frames.eof:
            tally.closed_by_node += 1
        # Even a request cut short at the stop is owed its answer (TIMEOUT after the reassembly
        # or stall timeout), so nothing is excused here.
        answers.give_up()
        sock.close()


def garbage(tally: Tally, addr: tuple[str, int], stop: threading.Event, seed: int) -> None:
    """A few valid requests, then random bytes: those requests are answered, then MALFORMED and
    the connection closed."""
    rng = random.Random(seed)
    rid = 0
    while not stop.is_set():
        sock = connect(addr)
        tally.connections += 1
        frames, answers = Frames(sock), Answers(tally)
        out = bytearray()
        for _ in range(rng.randint(0, 3)):
            rid += 1
            data = rng.randbytes(rng.randint(1, 512))
            out += encode_request(rid, ECHO, data)
            answers.expect(rid, same_bytes(data))
        junk = bytearray(rng.randbytes(rng.randint(HEADER_LEN, 1024)))
        if int.from_bytes(junk[:2], "little") == REQUEST_MAGIC:
            junk[0] ^= 0xFF  # garbage, not a valid header by chance
        out += junk
        try:
            sock.sendall(out)
            tally.bytes_sent += len(out)
            deadline = time.monotonic() + ANSWER_TIMEOUT_S
            while time.monotonic() < deadline and frames.drain_into(answers, 0.5):
                pass
        except OSError:
            frames.eof = True
        if frames.eof:
            tally.closed_by_node += 1
        else:
            tally.notes["not closed"] += 1
        answers.give_up()
        sock.close()
        stop.wait(0.05)


def disconnector(tally: Tally, addr: tuple[str, int], stop: threading.Event, seed: int) -> None:
    """Requests, then one cut off mid-header or mid-payload, then gone (FIN or RST, at random)."""
    rng = random.Random(seed)
    rid = 0
    while not stop.is_set():
        sock = connect(addr)
        tally.connections += 1
        out = bytearray()
        for _ in range(rng.randint(0, 4)):
            rid += 1
            out += encode_request(rid, ECHO, rng.randbytes(rng.randint(1, 16384)))
        rid += 1
        last = encode_request(rid, ECHO, rng.randbytes(rng.randint(1, 65536)))
        out += last[: rng.randint(1, len(last) - 1)]
        try:
            sock.sendall(out)
            tally.bytes_sent += len(out)
        except OSError:
            tally.notes["send failed"] += 1
        stop.wait(rng.uniform(0, 0.05))
        if rng.random() < 0.5:
            close_hard(sock)
            tally.notes["rst"] += 1
        else:
            sock.close()
            tally.notes["fin"] += 1
        stop.wait(0.05)


def never_reader(tally: Tally, addr: tuple[str, int], stop: threading.Event, hold: float) -> None:
    """64 KiB echo requests as fast as the node takes them, answers never read, for ``hold`` s."""
    rid = 0
    payload = bytes(64 * 1024)
    while not stop.is_set():
        sock = connect(addr)
        sock.setblocking(False)
        tally.connections += 1
        t_end = time.monotonic() + hold
        pending, off, blocked = b"", 0, False
        while not stop.is_set() and time.monotonic() < t_end:
            if off == len(pending):
                rid += 1
                pending, off = encode_request(rid, ECHO, payload), 0
            # Wait for room rather than time out inside sendall, which could leave half a request
            # and turn this client into a garbage one.
            _, writable, _ = select.select([], [sock], [], 0.2)
            if not writable:
                blocked = True
                continue
            try:
                n = sock.send(pending[off:])
            except BlockingIOError:
                continue
            except OSError:
                tally.closed_by_node += 1
                break
            off += n
            tally.bytes_sent += n
        if blocked:
            tally.notes["held back by the node"] += 1
        close_hard(sock)  # a FIN would do as well; RST drops the unread answers at once


# ---------------------------------------------------------------------------------------------
# The node and its samples


class Node:
    def __init__(self, config: str | None, workdir: Path) -> None:
        args = [offrac_bin(), "serve", "--listen", "127.0.0.1:0"]
        if config:
            args += ["--config", config]
        self.stderr_path = workdir / "node.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"node exited before listening: {self.stderr_path.read_text()[-2000:]}")
        info = json.loads(line)
        host, _, port = str(info["addr"]).rpartition(":")
        self.addr = (host, int(port))
        self.address = f"{host}:{port}"
        self.metrics: str | None = info.get("metrics")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        self._stderr.close()
        return self.proc.returncode


def proc_status(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "Threads"):
            out[key] = int(rest.split()[0])
    return out


def scrape(metrics: str | None) -> dict[str, float]:
    """A few unlabelled samples of the node's /metrics (empty if unreachable)."""
    if not metrics:
        return {}
    wanted = {"offrac_connections", "offrac_requests_total", "process_open_fds", "process_cpu_seconds_total"}
    try:
        with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in wanted:
            out[parts[0]] = float(parts[1])
    return out


def sample(node: Node, t0: float, tallies: list[Tally], phase: str) -> dict[str, Any]:
    st = proc_status(node.pid)
    m = scrape(node.metrics)
    good = [t for t in tallies if t.kind.startswith("good")]
    return {
        "t_s": round(time.monotonic() - t0, 1),
        "phase": phase,
        "rss_mib": round(st["VmRSS"] / 1024, 2),
        "fds": len(os.listdir(f"/proc/{node.pid}/fd")),
        "threads": st["Threads"],
        "connections": int(m.get("offrac_connections", -1)),
        "node_requests": int(m.get("offrac_requests_total", -1)),
        "node_cpu_s": round(m.get("process_cpu_seconds_total", -1.0), 2),
        "good_sent": sum(t.sent for t in good),
        "good_answered": sum(t.answered for t in good),
        "hostile_conns": sum(t.connections for t in tallies if not t.kind.startswith("good")),
    }


COLUMNS = [
    "t_s",
    "phase",
    "rss_mib",
    "fds",
    "threads",
    "connections",
    "node_requests",
    "node_cpu_s",
    "good_sent",
    "good_answered",
    "hostile_conns",
]


def print_row(row: dict[str, Any], header: bool = False) -> None:
    widths = [max(len(c), 8) for c in COLUMNS]
    if header:
        print("  ".join(c.rjust(w) for c, w in zip(COLUMNS, widths, strict=True)), flush=True)
    print("  ".join(str(row[c]).rjust(w) for c, w in zip(COLUMNS, widths, strict=True)), flush=True)


def growth_verdict(rows: list[dict[str, Any]], fds_before: int, fds_after: int) -> dict[str, Any]:
    """Unbounded growth, defined on the samples taken under load (in time order):

    * RSS: the maximum over the last quarter exceeds the maximum over the first half by more than
      RSS_MARGIN_FRACTION of it plus RSS_MARGIN_MIB (allocator noise; a leak grows past it);
    * fds: the maximum over the last quarter exceeds the maximum over the first half by more than
      FD_MARGIN (hostile connections come and go, so single samples vary);
    * once every client has gone and the close linger has passed, more than FD_DRAIN_MARGIN fds
      above the count before any client connected (a leaked socket stays open)."""
    load = [r for r in rows if r["phase"] == "load"]
    n = len(load)
    first, last = load[: max(1, n // 2)], load[n - max(1, n // 4) :]
    rss_first = max(r["rss_mib"] for r in first)
    rss_last = max(r["rss_mib"] for r in last)
    rss_limit = rss_first * (1 + RSS_MARGIN_FRACTION) + RSS_MARGIN_MIB
    fd_first = max(r["fds"] for r in first)
    fd_last = max(r["fds"] for r in last)
    return {
        "samples_under_load": n,
        "rss_first_half_max_mib": rss_first,
        "rss_last_quarter_max_mib": rss_last,
        "rss_limit_mib": round(rss_limit, 2),
        "rss_ok": rss_last <= rss_limit,
        "fd_first_half_max": fd_first,
        "fd_last_quarter_max": fd_last,
        "fd_limit": fd_first + FD_MARGIN,
        "fd_ok": fd_last <= fd_first + FD_MARGIN,
        "fds_before": fds_before,
        "fds_after_drain": fds_after,
        "fd_drain_ok": fds_after <= fds_before + FD_DRAIN_MARGIN,
    }


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--duration", type=float, default=1800.0, help="seconds of load (default 1800)")
    p.add_argument("--interval", type=float, default=0.0, help="seconds between samples (default: ~40)")
    p.add_argument("--config", help="node TOML (default: the embedded one)")
    p.add_argument("--out", type=Path, default=HERE, help="where results.csv and summary.md go")
    p.add_argument("--json", type=Path, help="also write the accounting as JSON here")
    p.add_argument("--library-clients", type=int, default=2, help="good offrac.Client clients")
    p.add_argument("--raw-clients", type=int, default=1, help="good raw-socket pipelined clients")
    p.add_argument("--window", type=int, default=16, help="requests in flight per good client")
    p.add_argument("--pause-ms", type=float, default=5.0, help="good clients: pause between batches")
    p.add_argument("--slowloris", type=int, default=4)
    p.add_argument("--tricklers", type=int, default=2)
    p.add_argument("--garbage", type=int, default=1)
    p.add_argument("--disconnectors", type=int, default=1)
    p.add_argument("--never-readers", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    interval = args.interval or max(2.0, min(60.0, args.duration / 40))
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="offrac-soak-"))
    node = Node(args.config, workdir)
    t0 = time.monotonic()
    rows = [sample(node, t0, [], "before")]
    fds_before = rows[0]["fds"]
    print(f"node pid {node.pid} at {node.address}, metrics {node.metrics}; {args.duration:.0f} s", flush=True)
    print_row(rows[0], header=True)

    stop = threading.Event()
    tallies: list[Tally] = []
    threads: list[threading.Thread] = []
    pause = args.pause_ms / 1000

    def spawn(name: str, kind: str, fn: Callable[..., None], *fargs: Any) -> None:
        tally = Tally(name, kind)
        tallies.append(tally)

        def body() -> None:
            try:
                fn(tally, *fargs)
            except Exception as e:  # a crashed client is a finding, not a silent stop
                tally.notes[f"client crashed: {type(e).__name__}: {e}"] += 1

        thread = threading.Thread(target=body, name=name, daemon=True)
        threads.append(thread)
        thread.start()

    seed, window = args.seed, args.window
    for i in range(args.library_clients):
        spawn(
            f"good-lib-{i}",
            "good offrac.Client",
            good_library_client,
            node.address,
            stop,
            window,
            pause,
            seed + i,
        )
    for i in range(args.raw_clients):
        spawn(f"good-raw-{i}", "good raw", good_raw_client, node.addr, stop, window, pause, seed + 100 + i)
    for i in range(args.slowloris):
        spawn(f"slowloris-{i}", "slowloris", slowloris, node.addr, stop, 0.1, seed + 200 + i)
    for i in range(args.tricklers):
        spawn(f"trickler-{i}", "trickler", trickler, node.addr, stop, 0.05, seed + 300 + i)
    for i in range(args.garbage):
        spawn(f"garbage-{i}", "garbage", garbage, node.addr, stop, seed + 400 + i)
    for i in range(args.disconnectors):
        spawn(f"disconnect-{i}", "disconnect", disconnector, node.addr, stop, seed + 500 + i)
    for i in range(args.never_readers):
        spawn(f"never-read-{i}", "never-reader", never_reader, node.addr, stop, 5.0)

    end = t0 + args.duration
    died = False
    while (now := time.monotonic()) < end:
        time.sleep(min(interval, end - now))
        if node.proc.poll() is not None:
            died = True
            break
        rows.append(sample(node, t0, tallies, "load"))
        print_row(rows[-1])

    stop.set()
    for th in threads:
        th.join(timeout=ANSWER_TIMEOUT_S + 10)
    stuck = [th.name for th in threads if th.is_alive()]
    fds_after = -1
    if not died:
        # Clients gone: wait out the close linger (2 s by default), then every fd must be back.
        deadline = time.monotonic() + 15
        while True:
            row = sample(node, t0, tallies, "drained")
            if row["fds"] <= fds_before + FD_DRAIN_MARGIN or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        rows.append(row)
        print_row(row)
        fds_after = row["fds"]
    exit_code = node.stop()
    elapsed = time.monotonic() - t0

    growth = growth_verdict(rows, fds_before, fds_after) if not died else {}
    good = [t for t in tallies if t.kind.startswith("good")]
    hostile = [t for t in tallies if not t.kind.startswith("good")]

    def total(ts: list[Tally], attr: str) -> int:
        return sum(int(getattr(t, attr)) for t in ts)

    failures = []
    if died:
        failures.append(f"the node died during the soak (exit {node.proc.returncode})")
    if exit_code != 0:
        failures.append(f"the node exited with {exit_code} after SIGTERM")
    if stuck:
        failures.append(f"clients did not stop: {stuck}")
    for t in tallies:
        for what in ("lost", "duplicates", "wrong"):
            if getattr(t, what):
                failures.append(f"{t.name}: {getattr(t, what)} {what}")
        if t.sent != t.answered + t.lost:
            failures.append(f"{t.name}: sent {t.sent} != answered {t.answered} + lost {t.lost}")
        crashed = [n for n in t.notes if n.startswith(("client crashed", "held over"))]
        if crashed:
            failures.append(f"{t.name}: {crashed}")
    for key in ("rss_ok", "fd_ok", "fd_drain_ok"):
        if growth and not growth[key]:
            failures.append(f"unbounded growth: {key} false ({growth})")

    load_rows = [r for r in rows if r["phase"] == "load"] or rows
    result = {
        "duration_s": args.duration,
        "elapsed_s": round(elapsed, 1),
        "node_exit": exit_code,
        "node_stderr_bytes": node.stderr_path.stat().st_size,
        "good": {
            "sent": total(good, "sent"),
            "answered": total(good, "answered"),
            "ok": total(good, "ok"),
            "lost": total(good, "lost"),
            "duplicates": total(good, "duplicates"),
            "wrong": total(good, "wrong"),
        },
        "hostile": {
            "connections": total(hostile, "connections"),
            "sent": total(hostile, "sent"),
            "answered": total(hostile, "answered"),
            "lost": total(hostile, "lost"),
            "duplicates": total(hostile, "duplicates"),
            "closed_by_node": total(hostile, "closed_by_node"),
            "bytes_sent": total(hostile, "bytes_sent"),
        },
        "clients": [t.row() for t in tallies],
        "rss_mib": {"min": min(r["rss_mib"] for r in load_rows), "max": max(r["rss_mib"] for r in load_rows)},
        "fds": {"min": min(r["fds"] for r in load_rows), "max": max(r["fds"] for r in load_rows)},
        "growth": growth,
        "failures": failures,
    }

    print("\nper client:")
    for t in tallies:
        r = t.row()
        print(
            f"  {r['client']:<14} sent {r['sent']:>8} answered {r['answered']:>8} ok {r['ok']:>8}"
            f" lost {r['lost']} dup {r['duplicates']} wrong {r['wrong']} conns {r['connections']}"
            f" closed-by-node {r['closed_by_node']} errors {r['errors']} {r['notes'] or ''}"
        )
    print(f"\ngood: {result['good']}\nhostile: {result['hostile']}")
    print(f"RSS MiB {result['rss_mib']}, fds {result['fds']}, growth {growth}")
    print("FAIL:\n  " + "\n  ".join(failures) if failures else "PASS", flush=True)

    with (args.out / "results.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    (args.out / "summary.md").write_text(summary_md(args, result, rows))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 1 if failures else 0


def summary_md(args: argparse.Namespace, result: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    g, h, gr = result["good"], result["hostile"], result["growth"]
    lines = [
        "# Soak (issue #10)",
        "",
        f"Command: `python3 experiments/soak/run.py --duration {args.duration:g}`"
        + (f" --config {args.config}" if args.config else "")
        + f" (ran {result['elapsed_s']} s in all, with start and drain).",
        "",
        f"Node: `offrac serve`, {'config ' + args.config if args.config else 'embedded default config'}."
        f" Good clients: {args.library_clients} offrac.Client (echo, topk, logit, minmax) and"
        f" {args.raw_clients} raw-socket (echo, topk), {args.window} requests in flight each,"
        f" {args.pause_ms:g} ms between batches. Hostile: {args.slowloris} slowloris,"
        f" {args.tricklers} tricklers, {args.garbage} garbage, {args.disconnectors} mid-request"
        f" disconnect, {args.never_readers} never-reading.",
        "",
        f"**Verdict: {'PASS' if not result['failures'] else 'FAIL'}**"
        + ("" if not result["failures"] else ": " + "; ".join(result["failures"])),
        "",
        "| | sent | answered | OK | lost | duplicates | wrong |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        f"| good | {g['sent']} | {g['answered']} | {g['ok']} | {g['lost']} | {g['duplicates']}"
        f" | {g['wrong']} |",
        f"| hostile (requests with a defined answer) | {h['sent']} | {h['answered']} | | {h['lost']}"
        f" | {h['duplicates']} | |",
        "",
        f"Hostile connections: {h['connections']} ({h['closed_by_node']} closed by the node),"
        f" {h['bytes_sent'] / 2**20:.0f} MiB sent.",
        "",
        f"Node RSS under load {result['rss_mib']['min']}-{result['rss_mib']['max']} MiB;"
        f" open fds {result['fds']['min']}-{result['fds']['max']}"
        f" ({gr.get('fds_before')} before any client, {gr.get('fds_after_drain')} after they left)."
        f" Growth check: last-quarter RSS max {gr.get('rss_last_quarter_max_mib')} MiB vs limit"
        f" {gr.get('rss_limit_mib')} MiB (first-half max {gr.get('rss_first_half_max_mib')} MiB"
        f" + {RSS_MARGIN_FRACTION:.0%} + {RSS_MARGIN_MIB:g} MiB); last-quarter fd max"
        f" {gr.get('fd_last_quarter_max')} vs limit {gr.get('fd_limit')}."
        f" Node log: {result['node_stderr_bytes']} bytes of stderr.",
        "",
        "## Per client",
        "",
        "| client | kind | sent | answered | OK | errors by status | lost | dup | wrong | conns |"
        " closed by node | notes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in result["clients"]:
        errors = ", ".join(f"{k} {v}" for k, v in c["errors"].items()) or "-"
        notes = ", ".join(f"{k}: {v}" for k, v in c["notes"].items()) or "-"
        lines.append(
            f"| {c['client']} | {c['kind']} | {c['sent']} | {c['answered']} | {c['ok']} | {errors}"
            f" | {c['lost']} | {c['duplicates']} | {c['wrong']} | {c['connections']}"
            f" | {c['closed_by_node']} | {notes} |"
        )
    lines += ["", "## Over time (results.csv)", "", "| " + " | ".join(COLUMNS) + " |"]
    lines.append("|" + " --- |" * len(COLUMNS))
    for r in rows:
        lines.append("| " + " | ".join(str(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
