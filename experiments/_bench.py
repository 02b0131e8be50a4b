"""Shared helpers for the experiments: start servers, drive `offrac bench load`, write results.

Every experiment starts its servers as separate processes on 127.0.0.1 (port 0, the address is
read from the server's first stdout line) and drives them with `offrac bench load --json -`.
The binary is `<repo>/target/release/offrac` unless OFFRAC_BIN says otherwise.
"""

from __future__ import annotations

import csv
import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def offrac_bin() -> str:
    return os.environ.get("OFFRAC_BIN", str(REPO / "target" / "release" / "offrac"))


class Server:
    """A server process (node or baseline) that prints one JSON `listening` line first."""

    def __init__(self, args: Sequence[str], name: str, cpus: str | None = None) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [*pinned(cpus), offrac_bin(), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{name}: server exited before listening")
        self.info: dict[str, Any] = json.loads(line)
        self.addr: str = self.info["addr"]

    def __enter__(self) -> Server:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def pinned(cpus: str | None) -> list[str]:
    """A command prefix that runs on the given CPUs only (``taskset -c``), or none."""
    return ["taskset", "-c", cpus] if cpus else []


def parse_cpus(spec: str) -> set[int]:
    """The CPUs of a taskset-style list (``0``, ``0,1``, ``0-3,6``)."""
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if first < 0 or last < first:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(first, last + 1))
    return cpus


def node(config: Path, name: str = "node", listen: str = "127.0.0.1:0", cpus: str | None = None) -> Server:
    return Server(["serve", "--listen", listen, "--config", str(config)], name, cpus)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def node_pair(tmp: Path, io: str, functions: Sequence[str]) -> tuple[Server, Server]:
    """Nodes A (device 0) and B (device 1) on loopback, each in the other's device table,
    hosting one slot per function, no metrics."""
    pa, pb = free_port(), free_port()
    slots = "".join(f'[[slots]]\nfunction = "{f}"\n' for f in functions)
    out = []
    for me, port, peer in ((0, pa, pb), (1, pb, pa)):
        cfg = tmp / f"node{me}.toml"
        cfg.write_text(
            f'device_id = {me}\n[io]\nmode = "{io}"\nspin_us = 100\n[metrics]\nlisten = ""\n{slots}'
            f'[[devices]]\nid = {1 - me}\naddr = "127.0.0.1:{peer}"\n'
        )
        out.append(node(cfg, f"node{me}", f"127.0.0.1:{port}"))
    return out[0], out[1]


def raw_echo(io: str, name: str = "raw") -> Server:
    return Server(["bench", "serve-raw", "--listen", "127.0.0.1:0", "--io", io], name)


def cpu_server(workers: int, io: str, name: str = "cpu") -> Server:
    args = ["bench", "serve-cpu", "--listen", "127.0.0.1:0", "--io", io, "--workers", str(workers)]
    return Server(args, name)


def grpc_server(threads: int = 2, name: str = "grpc") -> Server:
    args = ["bench", "serve-grpc", "--listen", "127.0.0.1:0", "--threads", str(threads)]
    return Server(args, name)


def load(
    addr: str,
    *,
    clients: int,
    mix: str,
    duration: float,
    warmup: float,
    busy_poll: bool = False,
    fragments: int = 1,
    gap_us: float = 0.0,
    rate: float | None = None,
    item_per_client: bool = False,
    label: str = "",
    protocol: str = "wire",
    chain: str = "",
    reply_at: str | None = None,
    cpus: str | None = None,
    extra: Sequence[str] = (),
) -> dict[str, Any]:
    """Run one `offrac bench load` (on `cpus` if given) and return its JSON report; `extra`
    arguments are appended (e.g. a tenant's hello)."""
    args = [
        *pinned(cpus),
        offrac_bin(),
        "bench",
        "load",
        "--addr",
        addr,
        "--clients",
        str(clients),
        "--mix",
        mix,
        "--duration",
        str(duration),
        "--warmup",
        str(warmup),
        "--fragments",
        str(fragments),
        "--gap-us",
        str(gap_us),
        "--label",
        label,
        "--json",
        "-",
        "--no-progress",
        "--protocol",
        protocol,
    ]
    if busy_poll:
        args.append("--busy-poll")
    if item_per_client:
        args.append("--item-per-client")
    if rate is not None:
        args += ["--rate", str(rate)]
    if chain:
        args += ["--chain", chain]
    if reply_at:
        args += ["--reply-at", reply_at]
    args += list(extra)
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def machine() -> str:
    """One line describing the machine the figures come from."""
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical CPUs, Linux {platform.release()}"


def write_csv(path: Path, rows: Iterable[dict[str, Any]], fields: Sequence[str]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(fields), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def read_csv(path: Path, text: Sequence[str]) -> list[dict[str, Any]]:
    """Rows :func:`write_csv` wrote, numbers back as int or float; the ``text`` columns stay
    strings (for redrawing a plot or summary without measuring again)."""
    with path.open(newline="") as f:
        rows: list[dict[str, Any]] = list(csv.DictReader(f))
    for r in rows:
        for k, v in r.items():
            if k not in text:
                try:
                    r[k] = int(v)
                except ValueError:
                    r[k] = float(v)
    return rows


def md_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for r in rows:
        lines.append("| " + " | ".join(str(x) for x in r) + " |")
    return "\n".join(lines)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return float("nan")
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def finish(
    here: Path,
    rows: list[dict[str, Any]],
    fields: Sequence[str],
    plot: Callable[[list[dict[str, Any]]], None],
    summarize: Callable[[list[dict[str, Any]]], str],
) -> None:
    """Write an experiment's results.csv, its plot and summary.md into `here`; print the summary."""
    write_csv(here / "results.csv", rows, fields)
    plot(rows)
    text = summarize(rows)
    (here / "summary.md").write_text(text)
    print(text)
