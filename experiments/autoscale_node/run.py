#!/usr/bin/env python3
"""The autoscaler on the real node (loopback) on a time-compressed slice of the Azure trace,
against static provisioning by seed 001's N formula.

The slice: the trace's first ROWS rows (its first ~10 minutes, when the CNN is popular and then
fades while top-k grows), sleep times divided by SPEEDUP, replayed OPEN LOOP by
`offrac bench replay --open-loop` over CLIENTS connections (each row sent at its time in the
trace, whatever the answers). The trace's apps run as the node's built-ins by the trace's own
mapping (1 -> topk, 2 -> cnn, 3 -> logit, 5 -> minmax) with the trace's request sizes.

Provisionings (one node process each, REPS rounds interleaved, medians):

- one each:  one slot per function (4 slots); this run also measures each function's T_acc
             (the node's `exec_us`) and T_oh (median over functions of p50 latency minus exec);
- mean:      static, N = ceil(lambda (T_oh + T_acc) / rho) per function, lambda its mean rate over the WHOLE
             trace (compressed by SPEEDUP), rho = 0.7;
- peak:      static, N from each function's highest rate over one-minute windows of the slice;
- autoscale: one fixed slot per function plus SPARE spare slots, `[autoscale]` with
             period_ms = PERIOD_MS (PERIOD_MS x SPEEDUP of trace time), the default policy.

Measured per run: p50/p99 of the requests answered OK and the BUSY rate (client side); the node's
own counters: BUSY refusals (`offrac_refusals_total` of its metrics endpoint) and, for the
autoscaler, its describe answer (periods, replicated, reclaimed, failed) and the slot roles,
sampled every SAMPLE_S to integrate slot-seconds (static: slots x replay time).

The machine has 2 cores shared by node, client and other work: a replica adds a worker thread,
not a core, so what a replica can buy here is bounded; the figures are the shape, not capacity.

Run: `python3 experiments/autoscale_node/run.py` (`--quick`: one round). Needs the Python client
on PYTHONPATH (the script adds `python/`).
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "python"))
from _bench import REPO, log, machine, md_table, median, node, offrac_bin, write_csv

from offrac import Client

HERE = Path(__file__).resolve().parent
TRACE = Path(
    os.environ.get("TRACE", REPO.parent / "shared" / "data" / "azure-functions-2021" / "processed_trace.csv")
)
QUICK = "--quick" in sys.argv
REPS = 1 if QUICK else 3
ROWS = 12000
SPEEDUP = 150.0
CLIENTS = 4
RHO = 0.7
SPARE = 2
PERIOD_MS = 100
SAMPLE_S = 0.02
FUNCS = ["topk", "cnn", "logit", "minmax"]
APP = {"1": "topk", "2": "cnn", "3": "logit", "5": "minmax"}
HEAD = '[io]\nmode = "poll"\nspin_us = 100\n[metrics]\nlisten = "127.0.0.1:0"\n'


def slots_toml(counts: dict[str, int], spare: int = 0) -> str:
    out = HEAD
    for f in FUNCS:
        out += f'[[slots]]\nfunction = "{f}"\n' * counts[f]
    out += '[[slots]]\nfunction = "echo"\nspare = true\n' * spare
    if spare:
        out += f"[autoscale]\nperiod_ms = {PERIOD_MS}\ntarget_utilisation = {RHO}\n"
    return out


def trace_rates() -> tuple[dict[str, float], dict[str, float]]:
    """Per function: mean rate over the whole trace, and the highest one-minute rate in the
    slice, both in requests/s after compression."""
    t, total = 0.0, 0.0
    counts: dict[str, int] = dict.fromkeys(FUNCS, 0)
    minute: dict[tuple[str, int], int] = {}
    with TRACE.open() as fh:
        next(fh)
        for i, line in enumerate(fh):
            app, sleep, _, _ = line.strip().split(",")
            t += float(sleep)
            f = APP.get(app)
            if f is None:
                continue
            counts[f] += 1
            if i < ROWS:
                k = (f, int(t // 60))
                minute[k] = minute.get(k, 0) + 1
        total = t
    mean = {f: counts[f] / total * SPEEDUP for f in FUNCS}
    peak = {f: max((v for (g, _), v in minute.items() if g == f), default=0) / 60 * SPEEDUP for f in FUNCS}
    return mean, peak


def formula(rates: dict[str, float], t_acc_us: dict[str, float], t_oh_us: float) -> dict[str, int]:
    return {f: max(1, math.ceil(rates[f] * (t_oh_us + t_acc_us[f]) * 1e-6 / RHO)) for f in FUNCS}


def busy_refusals(metrics_addr: str) -> int:
    text = urllib.request.urlopen(f"http://{metrics_addr}/metrics", timeout=5).read().decode()
    m = re.search(r'^offrac_refusals_total\{reason="BUSY"\} (\d+)', text, re.M)
    return int(m.group(1)) if m else 0


def replay(addr: str) -> dict[str, Any]:
    args = [
        offrac_bin(),
        "bench",
        "replay",
        "--addr",
        addr,
        "--trace",
        str(TRACE),
        "--speedup",
        str(SPEEDUP),
        "--max-rows",
        str(ROWS),
        "--open-loop",
        "--clients",
        str(CLIENTS),
        "--json",
        "-",
        "--no-progress",
    ]
    out = subprocess.run(args, check=True, capture_output=True, text=True)
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def run(name: str, toml: str, tmp: Path, slots: int) -> dict[str, Any]:
    cfg = tmp / f"{name}.toml"
    cfg.write_text(toml)
    with node(cfg, name) as srv:
        c = Client(srv.addr)
        d0 = c.describe()
        metrics = d0["metrics"]
        busy0 = busy_refusals(metrics)
        samples: list[tuple[float, int]] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                d = c.describe()
                a = d.get("autoscale")
                n = slots if a is None else sum(1 for s in a["slots"] if s["role"] != "spare")
                samples.append((time.monotonic(), n))
                stop.wait(SAMPLE_S)

        th = threading.Thread(target=sample)
        t0 = time.monotonic()
        th.start()
        rep = replay(srv.addr)
        t1 = time.monotonic()
        stop.set()
        th.join()
        d1 = c.describe()
        busy = busy_refusals(metrics) - busy0
        c.close()
    slot_s = 0.0
    for (ta, n), (tb, _) in zip(samples, [*samples[1:], (t1, 0)], strict=True):
        slot_s += n * (min(tb, t1) - max(ta, t0))
    tot = rep["total"]
    sent = tot["ok"] + tot["errors"]
    stats = (d1.get("autoscale") or {}).get("stats", {})
    return {
        "provisioning": name,
        "slots": slots,
        "sent": sent,
        "ok": tot["ok"],
        "busy_client": tot["errors_by_status"].get("BUSY", 0),
        "busy_node": busy,
        "busy_rate": busy / max(sent, 1),
        "p50_us": tot["p50_us"],
        "p99_us": tot["p99_us"],
        "wall_s": t1 - t0,
        "slot_seconds": slot_s,
        "peak_slots": max((n for _, n in samples), default=slots),
        "replicated": stats.get("replicated", 0),
        "reclaimed": stats.get("reclaimed", 0),
        "failed": stats.get("failed", 0),
        "periods": stats.get("periods", 0),
        **per_function(rep["rows"]),
    }


def per_function(report_rows: list[dict[str, Any]]) -> dict[str, float]:
    """Per function over its request sizes: exec and p50 weighted by answers; the worst p99."""
    out: dict[str, float] = {}
    for f in FUNCS:
        rs = [r for r in report_rows if r["function"] == f and r["ok"] > 0]
        n = sum(r["ok"] for r in rs)
        if n == 0:
            continue
        out[f"exec_us_{f}"] = sum(r["exec_us"] * r["ok"] for r in rs) / n
        out[f"p50_us_{f}"] = sum(r["p50_us"] * r["ok"] for r in rs) / n
        out[f"p99_us_{f}"] = max(r["p99_us"] for r in rs)
    return out


FIELDS = [
    "round",
    "provisioning",
    "slots",
    "sent",
    "ok",
    "busy_client",
    "busy_node",
    "busy_rate",
    "p50_us",
    "p99_us",
    "wall_s",
    "slot_seconds",
    "peak_slots",
    "replicated",
    "reclaimed",
    "failed",
    "periods",
    *[f"p99_us_{f}" for f in FUNCS],
    *[f"exec_us_{f}" for f in FUNCS],
]


def main() -> None:
    if not TRACE.exists():
        sys.exit(f"trace not found: {TRACE}")
    mean_rate, peak_rate = trace_rates()
    one = dict.fromkeys(FUNCS, 1)
    rows: list[dict[str, Any]] = []
    plans: dict[str, tuple[dict[str, int], int]] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for rnd in range(REPS):
            r = run("one each", slots_toml(one), tmp, 4)
            rows.append({"round": rnd} | r)
            if not plans:
                t_acc = {f: r.get(f"exec_us_{f}", 0.0) for f in FUNCS}
                t_oh = median([r[f"p50_us_{f}"] - t_acc[f] for f in FUNCS if f"p50_us_{f}" in r])
                plans["mean"] = (formula(mean_rate, t_acc, t_oh), 0)
                plans["peak"] = (formula(peak_rate, t_acc, t_oh), 0)
                log(
                    f"T_acc {t_acc} µs, T_oh {t_oh:.1f} µs;"
                    f" mean N {plans['mean'][0]}, peak N {plans['peak'][0]}"
                )
            for name, (counts, _) in plans.items():
                rows.append({"round": rnd} | run(name, slots_toml(counts), tmp, sum(counts.values())))
            rows.append({"round": rnd} | run("autoscale", slots_toml(one, SPARE), tmp, 4 + SPARE))
            log(f"round {rnd + 1}/{REPS} done")
    write_csv(HERE / "results.csv", rows, FIELDS)
    names = ["one each", "mean", "peak", "autoscale"]

    def med(name: str, key: str) -> float:
        return median([float(r[key]) for r in rows if r["provisioning"] == name])

    def layout(name: str) -> str:
        if name == "autoscale":
            return f"4 fixed + {SPARE} spare"
        counts = one if name == "one each" else plans[name][0]
        return "+".join(str(counts[f]) for f in FUNCS)

    table = [
        [
            n,
            layout(n),
            f"{med(n, 'p50_us'):.0f}",
            f"{med(n, 'p99_us'):.0f}",
            f"{med(n, 'p99_us_cnn'):.0f}",
            f"{100 * med(n, 'busy_rate'):.2f} %",
            f"{med(n, 'busy_node'):.0f}",
            f"{med(n, 'slot_seconds'):.1f}",
            f"{med(n, 'peak_slots'):.0f}",
            f"{med(n, 'replicated'):.0f}/{med(n, 'reclaimed'):.0f}/{med(n, 'failed'):.0f}",
        ]
        for n in names
    ]
    sent = int(rows[0]["sent"])
    text = (
        "# The autoscaler on the node (Azure trace slice, loopback)\n\n"
        f"Reproduce: `python3 experiments/autoscale_node/run.py` ({machine()}).\n\n"
        f"The trace's first {ROWS} rows ({sent} requests) at {SPEEDUP:.0f}x, open loop over {CLIENTS}"
        f" connections (~{med('one each', 'wall_s'):.1f} s each run); slots as topk+cnn+logit+minmax;"
        f" autoscaler period {PERIOD_MS} ms ({PERIOD_MS * SPEEDUP / 1000:.0f} s of trace time), rho = {RHO};"
        f" medians of {REPS} interleaved rounds. BUSY: the node's own refusal counter (rate over requests"
        " sent); slot-s: slots not spare, sampled from the node's describe answer every"
        f" {SAMPLE_S * 1000:.0f} ms, integrated over the replay; rep/recl/fail: the autoscaler's counters."
        " The CNN (~0.4 ms a request) is the only function heavy enough to need a second slot here.\n\n"
        + md_table(
            [
                "provisioning",
                "slots",
                "p50 µs",
                "p99 µs",
                "cnn p99 µs",
                "BUSY",
                "BUSY (node)",
                "slot-s",
                "peak slots",
                "rep/recl/fail",
            ],
            table,
        )
        + "\n\nThe machine has 2 cores shared by the node, the load generator and other work: a"
        " replica is another worker thread, not another core, so these figures show the shape"
        " (what the autoscaler does on the node and what it costs), not capacity.\n"
    )
    (HERE / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
