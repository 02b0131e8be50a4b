#!/usr/bin/env python3
"""The node against the real transport floor, in one run.

Servers, each a separate process: the node (poll mode, echo inline), `bench serve-raw` (the same
framing on one epoll thread, like the node) and `bench serve-floor` (one thread per connection
spinning on recv, no epoll: the real floor). One busy-polling client at 1 and 4 KiB, REPS
interleaved rounds so that noise on a shared machine hits every server alike; then 4 and 16
clients (no busy-poll) for the many-connection case. Writes results.csv and summary.md here.
`--quick` shortens every run (a smoke test, not a measurement).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _bench import REPO, Server, log, machine, md_table, median, node, raw_echo, write_csv
from _bench import load as run_load

HERE = Path(__file__).resolve().parent
CONFIG = REPO / "experiments" / "configs" / "echo-poll.toml"
QUICK = "--quick" in sys.argv
REPS = 2 if QUICK else 7
DUR, WARM = (0.3, 0.1) if QUICK else (1.0, 0.3)
SIZES = [1024, 4096]
MANY = [4, 16]
FIELDS = ["round", "server", "clients", "size", "p50_us", "p99_us", "req_per_s", "errors"]


def floor() -> Server:
    return Server(["bench", "serve-floor", "--listen", "127.0.0.1:0"], "floor")


def servers() -> dict[str, Server]:
    return {"floor": floor(), "node": node(CONFIG), "raw-epoll": raw_echo("poll")}


def measure(addr: str, clients: int, size: int, busy: bool) -> dict[str, Any]:
    r = run_load(addr, clients=clients, mix=f"echo:{size}", duration=DUR, warmup=WARM, busy_poll=busy)
    t = r["total"]
    return {"p50_us": t["p50_us"], "p99_us": t["p99_us"], "req_per_s": t["req_per_s"], "errors": t["errors"]}


def main() -> None:
    rows: list[dict[str, Any]] = []
    for rnd in range(REPS):
        for size in SIZES:
            # A fresh set of servers per round: a thread-per-connection server keeps a spinning
            # thread per connection it ever served.
            for name, srv in servers().items():
                with srv:
                    rows.append(
                        {"round": rnd, "server": name, "clients": 1, "size": size}
                        | measure(srv.addr, 1, size, True)
                    )
        log(f"round {rnd + 1}/{REPS} done")
    for clients in MANY:
        for name, srv in servers().items():
            with srv:
                rows.append(
                    {"round": 0, "server": name, "clients": clients, "size": 1024}
                    | measure(srv.addr, clients, 1024, False)
                )
    write_csv(HERE / "results.csv", rows, FIELDS)

    def med(server: str, clients: int, size: int, key: str) -> float:
        return median(
            [r[key] for r in rows if (r["server"], r["clients"], r["size"]) == (server, clients, size)]
        )

    one = []
    for size in SIZES:
        f = med("floor", 1, size, "p50_us")
        for name in ("floor", "node", "raw-epoll"):
            p = med(name, 1, size, "p50_us")
            one.append([size, name, f"{p:.2f}", f"{p - f:+.2f}", f"{p / f:.3f}"])
    many = []
    for clients in MANY:
        for name in ("floor", "node", "raw-epoll"):
            many.append(
                [
                    clients,
                    name,
                    f"{med(name, clients, 1024, 'req_per_s'):,.0f}",
                    f"{med(name, clients, 1024, 'p50_us'):.1f}",
                ]
            )
    text = (
        "# The node against the real transport floor\n\n"
        f"Reproduce: `python3 experiments/transport_floor/run.py` ({machine()}).\n\n"
        f"One busy-polling client, echo, medians of {REPS} interleaved rounds of {DUR} s:\n\n"
        + md_table(["bytes", "server", "p50 µs", "vs floor µs", "ratio"], one)
        + "\n\nMany connections (no busy-poll), 1 KiB, one round:\n\n"
        + md_table(["clients", "server", "req/s", "p50 µs"], many)
        + "\n"
    )
    (HERE / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
