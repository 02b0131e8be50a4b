#!/usr/bin/env python3
"""Large answers through the asyncio client: this tree's ``offrac.aio`` (answers of
``DIRECT_READ_MIN`` bytes or more read by the kernel straight into their own bytearray)
against an older tree's (``asyncio.StreamReader.readexactly``, then ``bytearray(...)``).

One node (the config of large_answers.py) keeps a buffer of 1 KiB, 64 KiB, 1 MiB and 16 MiB
in turn; two asyncio clients on connections of their own, one of each module, fetch it
(``load`` as the chain's only hop, so the request is tiny and the answer is the buffer),
alternating call by call through large_answers.py's ``alternate()`` (each call one
``run_until_complete`` on one event loop). Prints the median call time of each, the ratio
new / old per size, and the most bytes Python allocated at once during one call
(``tracemalloc``, one untimed call per module and size).

``--old-rev REV`` (default: the commit before the BufferedProtocol read) names the tree
whose ``python/offrac/aio.py`` is the old module; ``--quick`` makes fewer calls.
"""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import tempfile
import tracemalloc
from collections.abc import Coroutine
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _bench import Server, log, machine, md_table
from large_answers import CALLS, HERE, alternate, write_config

from offrac import aio
from offrac.buffers import keep, load

SIZES = (1 << 10, 1 << 16, 1 << 20, 16 << 20)
OLD_REV = "7447567"
REPO = HERE.parent.parent


def old_module(rev: str, tmp: Path) -> ModuleType:
    """``python/offrac/aio.py`` of ``rev``, imported as a module of this tree's package (its
    relative imports are this tree's client, protocol and errors)."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:python/offrac/aio.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = tmp / "aio_old.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("offrac._aio_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def peak_bytes(loop: asyncio.AbstractEventLoop, call: Coroutine[Any, Any, object]) -> int:
    """The most bytes Python allocated at once while ``call`` ran (its result included)."""
    tracemalloc.start()
    try:
        loop.run_until_complete(call)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def main() -> None:
    rev = sys.argv[sys.argv.index("--old-rev") + 1] if "--old-rev" in sys.argv else OLD_REV
    cfg = write_config(HERE / "aio_large_answers.toml")
    loop = asyncio.new_event_loop()
    rows = []
    try:
        with (
            tempfile.TemporaryDirectory() as tmp,
            Server(["serve", "--listen", "127.0.0.1:0", "--config", str(cfg)], "node") as node,
        ):
            modules = {"old": old_module(rev, Path(tmp)), "new": aio}
            clients = {
                name: loop.run_until_complete(m.Client.connect(node.addr)) for name, m in modules.items()
            }
            for size in SIZES:
                x = bytes(range(256)) * (size // 256)
                loop.run_until_complete(clients["new"].call_chain([keep(7)], x))

                def fetch(name: str) -> object:
                    return loop.run_until_complete(clients[name].call_chain([load(7)], b""))

                def check(name: str, got: object, x: bytes = x) -> None:
                    if got != x:
                        sys.exit(f"{name}: a kept buffer of {len(x)} bytes came back different")

                ms = alternate({n: (lambda n=n: fetch(n)) for n in clients}, check)
                peak = {n: peak_bytes(loop, c.call_chain([load(7)], b"")) for n, c in clients.items()}
                ratio = ms["new"] / ms["old"]
                label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
                rows.append(
                    (
                        label,
                        f"{ms['old']:.3f}",
                        f"{ms['new']:.3f}",
                        f"{ratio:.2f}",
                        f"{peak['old'] / size:.1f}",
                        f"{peak['new'] / size:.1f}",
                    )
                )
                log(f"{label}: old {ms['old']:.3f} ms, new {ms['new']:.3f} ms ({ratio:.2f})")
            for c in clients.values():
                loop.run_until_complete(c.close())
    finally:
        loop.close()
        cfg.unlink(missing_ok=True)
    print(f"Machine: {machine()}; {CALLS} calls per module and size, alternating; medians.\n")
    header = ("kept buffer", "old ms", "new ms", "new / old", "peak alloc / size, old", "new")
    print(md_table(header, rows))


if __name__ == "__main__":
    main()
