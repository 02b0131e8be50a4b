#!/usr/bin/env python3
"""Issue #12 (rtl-mask): the Verilated datapath's top-k throughput with one and two top-k slots.

`offrac serve --datapath rtl` with a configuration of the six hosted functions once each (one
top-k slot) and with a second top-k slot (the instance's spare top-k slot, chosen by the slot
mask). Many top-k calls in flight: CLIENTS threads, each its own connection, each CALLS
synchronous calls of 4 KiB of int32 (K 64), every answer checked against numpy. Rounds alternate
the runs in one script: the old binary (OLD_OFFRAC_BIN, e.g. main's: one top-k slot, the only
configuration it hosts), the new binary (OFFRAC_BIN or target/release/offrac) with one top-k slot,
and the new binary with two. Prints each round's calls a second, then medians and ratios, with the
load average. `--quick` runs fewer calls.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "python"))
from offrac import Client

REPO = Path(__file__).resolve().parent.parent.parent
QUICK = "--quick" in sys.argv
CLIENTS = 4
CALLS = 10 if QUICK else 40
ROUNDS = 2 if QUICK else 3
N = 1024  # int32 elements: 4 KiB
SLOTS = "".join(
    f'[[slots]]\nfunction = "{f}"\n'
    for f in ("echo", "topk", "minmax", "mapid", "sparsetransform", "bucketize")
)


def start(binary: str, config: Path) -> tuple[subprocess.Popen[str], str]:
    p = subprocess.Popen(
        [binary, "serve", "--datapath", "rtl", "--listen", "127.0.0.1:0", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(f"{binary} --config {config}: exited before listening")
    addr: str = json.loads(line)["addr"]
    return p, addr


def one_run(binary: str, config: Path, xs: list[np.ndarray], want: list[np.ndarray]) -> float:
    """Calls a second over CLIENTS connections, CALLS calls each."""
    p, addr = start(binary, config)
    try:

        def client(c: int) -> None:
            with Client(addr, timeout=300) as h:
                for i in range(c * CALLS, (c + 1) * CALLS):
                    got = h.call("topk", xs[i], k=64)
                    assert np.array_equal(got, want[i]), i

        t0 = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as ex:
            for f in [ex.submit(client, c) for c in range(CLIENTS)]:
                f.result()
        return CLIENTS * CALLS / (time.perf_counter() - t0)
    finally:
        p.terminate()
        p.wait(timeout=30)


def main() -> None:
    new = os.environ.get("OFFRAC_BIN", str(REPO / "target" / "release" / "offrac"))
    old = os.environ.get("OLD_OFFRAC_BIN")
    rng = np.random.default_rng(12)
    xs = [
        rng.integers(-(2**31), 2**31, size=N, dtype=np.int64).astype(np.int32) for _ in range(CLIENTS * CALLS)
    ]
    want = [np.sort(x)[::-1][:64] for x in xs]
    tmp = Path(tempfile.mkdtemp(prefix="rtl-slots-"))
    one, two = tmp / "one.toml", tmp / "two.toml"
    one.write_text(SLOTS)
    two.write_text(SLOTS + '[[slots]]\nfunction = "topk"\n')
    runs: list[tuple[str, str, Path]] = []
    if old:
        runs.append(("old, 1 top-k slot", old, one))
    runs += [("new, 1 top-k slot", new, one), ("new, 2 top-k slots", new, two)]
    rates: dict[str, list[float]] = {name: [] for name, _, _ in runs}
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    for r in range(ROUNDS):
        for name, binary, config in runs:
            rate = one_run(binary, config, xs, want)
            rates[name].append(rate)
            print(f"round {r}: {name}: {rate:.1f} calls/s", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    base = float(np.median(rates["new, 1 top-k slot"]))
    for name, v in rates.items():
        med = float(np.median(v))
        print(f"{name}: median {med:.1f} calls/s, {med / base:.2f}x the new binary with one slot")


if __name__ == "__main__":
    main()
