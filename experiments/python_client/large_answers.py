#!/usr/bin/env python3
"""Large answers through the Python client: read straight into the payload's own bytearray
(answers of at least ``offrac.client.DIRECT_READ_MIN`` bytes, the default) against the old
path through the client's read buffer (grown to fit, then the payload copied out of it).

One node (an echo slot, ``max_payload``, the pool's buffers and the slot queue raised to 32 MiB); in
this process, ``Client.call("echo", x)`` for x of 1, 4 and 16 MiB, the two read paths
alternating call by call, each on a connection of its own (the old path is
``DIRECT_READ_MIN`` set above any answer). Prints the median call time of each path, the
ratio direct / old per size, and the largest size each connection's read buffer reached.

``--old-bin PATH`` adds the node's side of a large answer: a kept named buffer of 1, 4 and
16 MiB fetched with ``get_buffer`` (a load as the chain's only hop) from two nodes, one
running PATH and one this tree's binary, alternating call by call (the client reads both
the same way). ``--quick`` makes fewer calls.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _bench import Server, log, machine, md_table, median

import offrac.client as client_module
from offrac import Client
from offrac.buffers import get_buffer, put_buffer

CALLS = 10 if "--quick" in sys.argv else 60
SIZES = (1 << 20, 4 << 20, 16 << 20)
HERE = Path(__file__).resolve().parent
OLD = 1 << 62  # no answer is that long: every answer goes through the read buffer


def alternate(
    calls: dict[str, Callable[[], object]], check: Callable[[str, object], None] | None = None
) -> dict[str, float]:
    """Median ms of each call, made CALLS times each in the order a, b, b, a, a, b, ...;
    ``check(name, result)`` after each, untimed."""
    names = list(calls)
    times: dict[str, list[float]] = {n: [] for n in names}
    for i in range(2 * CALLS):
        name = names[(i + i // 2) % 2]
        t = time.perf_counter()
        got = calls[name]()
        times[name].append(time.perf_counter() - t)
        if check is not None:
            check(name, got)
    return {n: median(v) * 1e3 for n, v in times.items()}


def kept_answers(old_bin: str, cfg: Path) -> None:
    """A kept buffer as a chain's answer, from a node of ``old_bin`` and one of this tree."""
    args = ["serve", "--listen", "127.0.0.1:0", "--config", str(cfg)]
    this_bin = os.environ.get("OFFRAC_BIN")
    os.environ["OFFRAC_BIN"] = old_bin
    try:
        old_node = Server(args, "old node")
    finally:
        if this_bin is None:
            del os.environ["OFFRAC_BIN"]
        else:
            os.environ["OFFRAC_BIN"] = this_bin
    rows = []
    with old_node, Server(args, "node") as new_node:
        clients = {"old": Client(old_node.addr), "new": Client(new_node.addr)}
        for size in SIZES:
            x = bytes(range(256)) * (size // 256)
            for c in clients.values():
                put_buffer(c, 7, x)
                if get_buffer(c, 7) != x:
                    sys.exit(f"a kept buffer of {size} bytes came back different")
            ms = alternate({n: (lambda c=c: get_buffer(c, 7)) for n, c in clients.items()})
            ratio = ms["new"] / ms["old"]
            rows.append((f"{size >> 20} MiB", f"{ms['old']:.2f}", f"{ms['new']:.2f}", f"{ratio:.2f}"))
            log(f"kept {size >> 20} MiB: old node {ms['old']:.2f} ms, this node {ms['new']:.2f} ms")
        for c in clients.values():
            c.close()
    print(f"\nA kept buffer as the answer (`get_buffer`), {old_bin} against this tree's node:\n")
    print(md_table(("kept buffer", "old node ms", "this node ms", "this / old"), rows))


def write_config(cfg: Path) -> Path:
    """A node config for answers up to 32 MiB: an echo slot, and kept buffers of that size."""
    big = 32 << 20
    cfg.write_text(
        f"max_payload = {big}\n[pool]\nbuffers = 4\nbuffer_bytes = {big}\n"
        f"[selector]\nslot_queue_bytes = {big}\n[named_buffers]\nmax_bytes = {4 * big}\n"
        '[[slots]]\nfunction = "echo"\n'
    )
    return cfg


def main() -> None:
    direct_min = client_module.DIRECT_READ_MIN
    rows = []
    cfg = write_config(HERE / "large_answers.toml")
    with Server(["serve", "--listen", "127.0.0.1:0", "--config", str(cfg)], "node") as node:
        clients = {"old": Client(node.addr), "direct": Client(node.addr)}
        for size in SIZES:
            x = bytes(range(256)) * (size // 256)
            buf: dict[str, int] = {"old": 0, "direct": 0}

            def echo(path: str, x: bytes = x) -> object:
                client_module.DIRECT_READ_MIN = OLD if path == "old" else direct_min  # type: ignore[misc]
                return clients[path].call("echo", x)

            def check(path: str, got: object, x: bytes = x, buf: dict[str, int] = buf) -> None:
                if got != x:
                    sys.exit(f"echo of {len(x)} bytes came back different")
                buf[path] = max(buf[path], len(clients[path]._rbuf))

            ms = alternate({p: (lambda p=p: echo(p)) for p in ("old", "direct")}, check)
            old, new = ms["old"], ms["direct"]
            cells = (f"{old:.2f}", f"{new:.2f}", f"{new / old:.2f}", buf["old"], buf["direct"])
            rows.append((f"{size >> 20} MiB", *cells))
            log(f"{size >> 20} MiB: old {old:.2f} ms, direct {new:.2f} ms")
        for c in clients.values():
            c.close()
    client_module.DIRECT_READ_MIN = direct_min  # type: ignore[misc]
    print(f"Machine: {machine()}; {CALLS} calls per path and size, alternating; medians.\n")
    header = ("echo answer", "old ms", "direct ms", "direct / old", "read buffer, old", "read buffer, direct")
    print(md_table(header, rows))
    old_bin = sys.argv[sys.argv.index("--old-bin") + 1] if "--old-bin" in sys.argv else None
    try:
        if old_bin is not None:
            kept_answers(old_bin, cfg)
    finally:
        cfg.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
