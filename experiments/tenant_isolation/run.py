"""Performance isolation between tenants, in the shape of NICA's Fig. 6 (seed 004).

One node, one `spin` slot (each request busy-computes SPIN_US), two tenants with weights
W_VICTIM : W_FLOOD. The victim runs a closed loop of VICTIM_CLIENTS; the flooder a closed loop
of FLOOD_CLIENTS (many more). Phases, each REPS times (medians reported):

- alone:  the victim by itself (its throughput is the slot's capacity, its p99 the baseline);
- drr:    victim and flooder at once, each connection opened with an authenticated hello, so the
          slot is time-shared by deficit round robin charged by measured execution time;
- fifo:   the same load with anonymous connections: one class, first come first served.

The victim's weighted share is W_VICTIM / (W_VICTIM + W_FLOOD) of its alone throughput; the goal
(issue #15) is that under DRR it keeps >= 95 % of that share and its p99 stays within 2x of alone.

Run: `cargo build --release -p offrac-cli && python3 experiments/tenant_isolation/run.py`
(`--quick` for a short smoke run).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _bench import log, md_table, median, node, offrac_bin

SPIN_US = 1000
W_VICTIM, W_FLOOD = 2, 1
VICTIM_CLIENTS, FLOOD_CLIENTS = 2, 16
KEYS = {1: "11" * 16, 2: "22" * 16}
VICTIM, FLOOD = 1, 2
QUICK = "--quick" in sys.argv
DUR, WARM = (1.0, 0.3) if QUICK else (4.0, 1.0)
REPS = 1 if QUICK else 3

CONFIG = f"""
[metrics]
listen = ""
[[slots]]
function = "spin"
[control]
[[control.tenants]]
id = {VICTIM}
key = "{KEYS[VICTIM]}"
weight = {W_VICTIM}
[[control.tenants]]
id = {FLOOD}
key = "{KEYS[FLOOD]}"
weight = {W_FLOOD}
"""


def load(addr: str, clients: int, tenant: int | None) -> dict[str, Any]:
    """One closed-loop `offrac bench load` of spin requests; its JSON report's row."""
    args = [
        offrac_bin(),
        "bench",
        "load",
        "--addr",
        addr,
        "--clients",
        str(clients),
        "--mix",
        f"spin:64:{SPIN_US}",
        "--duration",
        str(DUR),
        "--warmup",
        str(WARM),
        "--json",
        "-",
        "--no-progress",
    ]
    if tenant is not None:
        args += ["--tenant", str(tenant), "--key", KEYS[tenant]]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    import json

    row: dict[str, Any] = json.loads(out.stdout)["rows"][0]
    return row


def phase(addr: str, name: str) -> dict[str, Any]:
    if name == "alone":
        return {"victim": load(addr, VICTIM_CLIENTS, VICTIM)}
    hello = name == "drr"
    with ThreadPoolExecutor(max_workers=2) as pool:
        v = pool.submit(load, addr, VICTIM_CLIENTS, VICTIM if hello else None)
        f = pool.submit(load, addr, FLOOD_CLIENTS, FLOOD if hello else None)
        return {"victim": v.result(), "flood": f.result()}


def main() -> None:
    results: dict[str, list[dict[str, Any]]] = {"alone": [], "drr": [], "fifo": []}
    with tempfile.TemporaryDirectory() as tmp:
        cfg = Path(tmp) / "node.toml"
        cfg.write_text(CONFIG)
        with node(cfg) as n:
            for rep in range(REPS):
                for name in results:
                    log(f"rep {rep + 1}/{REPS}: {name}")
                    results[name].append(phase(n.addr, name))

    def med(name: str, who: str, key: str) -> float:
        return median([r[who][key] for r in results[name]])

    alone_rps = med("alone", "victim", "req_per_s")
    alone_p99 = med("alone", "victim", "p99_us")
    share = W_VICTIM / (W_VICTIM + W_FLOOD)
    rows = [
        [
            "victim alone",
            f"{alone_rps:.0f}",
            "—",
            f"{med('alone', 'victim', 'p50_us'):.0f}",
            f"{alone_p99:.0f}",
            "—",
            "—",
        ]
    ]
    for name, label in (("drr", "with flood, DRR (hello)"), ("fifo", "with flood, FIFO (anonymous)")):
        rps = med(name, "victim", "req_per_s")
        p99 = med(name, "victim", "p99_us")
        rows.append(
            [
                f"victim {label}",
                f"{rps:.0f}",
                f"{med(name, 'flood', 'req_per_s'):.0f}",
                f"{med(name, 'victim', 'p50_us'):.0f}",
                f"{p99:.0f}",
                f"{100 * rps / (share * alone_rps):.1f} %",
                f"{p99 / alone_p99:.2f}x",
            ]
        )
    print(
        f"spin {SPIN_US} us on one slot; weights victim {W_VICTIM} : flood {W_FLOOD}; "
        f"victim {VICTIM_CLIENTS} clients, flood {FLOOD_CLIENTS}; {DUR} s x {REPS} (medians)"
    )
    print(
        md_table(
            [
                "run",
                "victim req/s",
                "flood req/s",
                "victim p50 us",
                "victim p99 us",
                "of weighted share",
                "p99 vs alone",
            ],
            rows,
        )
    )
    print(f"(weighted share = {share:.3f} x the victim's alone throughput; goal >= 95 %, p99 <= 2x)")


if __name__ == "__main__":
    main()
