#!/usr/bin/env python3
"""Azure Functions 2021 trace replay (OffRAC artifact Fig. 18) against a node.

One connection; each row is sent sleep_time / SPEEDUP after the previous answer. Every row is sent:
top-k, logit, min-max and the CNN (24,576-byte images; rows of unknown apps would be counted as
skipped).
Run twice: against a node with the default 100 us I/O spin and one spinning 5 ms, since the
trace's gaps mostly exceed 100 us and the node sleeps between requests.
Writes results.csv (one row per function and request size), cdf.csv, plot.png and summary.md here.
The trace is read from ../shared/data/azure-functions-2021/ relative to the repository root
(override with TRACE=path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from _bench import REPO, log, machine, md_table, node, offrac_bin, write_csv

HERE = Path(__file__).resolve().parent
# (name, node configuration): the default 100 us I/O spin, and a 5 ms one that rarely sleeps.
NODES = [
    ("spin 100 us", REPO / "experiments" / "configs" / "isolation.toml"),
    ("spin 5 ms", REPO / "experiments" / "configs" / "isolation-spin5ms.toml"),
]
TRACE = Path(
    os.environ.get("TRACE", REPO.parent / "shared" / "data" / "azure-functions-2021" / "processed_trace.csv")
)
QUICK = "--quick" in sys.argv
SPEEDUP = 600.0 if QUICK else 120.0
FIELDS = [
    "node",
    "label",
    "function",
    "bytes",
    "ok",
    "errors",
    "p25_us",
    "p50_us",
    "p75_us",
    "p90_us",
    "p99_us",
    "p999_us",
]


def run(config: Path) -> dict[str, Any]:
    with node(config) as n:
        args = [
            offrac_bin(),
            "bench",
            "replay",
            "--addr",
            n.addr,
            "--trace",
            str(TRACE),
            "--speedup",
            str(SPEEDUP),
            "--json",
            "-",
            "--no-progress",
            "--busy-poll",
        ]
        log(f"replaying {TRACE} at {SPEEDUP:.0f}x against {config.name} ...")
        out = subprocess.run(args, check=True, capture_output=True, text=True)
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def plot(reports: list[tuple[str, dict[str, Any]]]) -> None:
    fig, axes = plt.subplots(1, len(reports), figsize=(7 * len(reports), 4.5), sharey=True)
    for ax, (name, report) in zip(axes, reports, strict=True):
        for row in sorted(report["rows"], key=lambda r: r["label"]):
            xs = [p[0] for p in row["cdf"]]
            ys = [p[1] for p in row["cdf"]]
            ax.plot(xs, ys, label=f"{row['label']} (n={row['ok']})")
        ax.set_xscale("log")
        ax.set_xlabel("round-trip latency (us)")
        ax.set_ylabel("CDF")
        ax.set_title(f"node I/O {name}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    skipped = ", ".join(f"{k}: {v} rows" for k, v in reports[0][1].get("skipped", {}).items())
    fig.suptitle(f"Azure Functions 2021 replay at {SPEEDUP:.0f}x (skipped: {skipped or 'none'})", fontsize=10)
    fig.tight_layout()
    fig.savefig(HERE / "plot.png", dpi=110)


HEADER = ["node I/O", "function/bytes", "ok", "errors", "p25 µs", "p50 µs", "p90 µs", "p99 µs", "exec µs"]


def summarize(reports: list[tuple[str, dict[str, Any]]]) -> str:
    table = [
        [
            name,
            r["label"],
            r["ok"],
            r["errors"],
            f"{r['p25_us']:.1f}",
            f"{r['p50_us']:.1f}",
            f"{r['p90_us']:.1f}",
            f"{r['p99_us']:.1f}",
            f"{r['exec_us']:.2f}",
        ]
        for name, report in reports
        for r in sorted(report["rows"], key=lambda r: r["label"])
    ]
    skipped = reports[0][1].get("skipped", {})
    walls = ", ".join(f"{name}: {rep['window_s']:.1f} s" for name, rep in reports)
    return "\n".join(
        [
            "# Azure Functions 2021 trace replay",
            "",
            f"Machine: {machine()}. Client (busy-polling) and node share the same 2 cores.",
            f"Command: `python3 experiments/trace_replay/run.py` (sleep times divided by {SPEEDUP:.0f};"
            f" wall time {walls}).",
            "",
            md_table(
                HEADER,
                table,
            ),
            "",
            "Skipped (no such function on the node): "
            + (", ".join(f"{k} {v} rows" for k, v in skipped.items()) or "none"),
            "",
        ]
    )


def main() -> None:
    if not TRACE.exists():
        sys.exit(f"trace not found: {TRACE}")
    reports = [(name, run(config)) for name, config in NODES]
    rows = [dict(r, node=name) for name, rep in reports for r in rep["rows"]]
    write_csv(HERE / "results.csv", rows, FIELDS)
    cdf = [
        {"node": name, "label": r["label"], "latency_us": x, "quantile": q}
        for name, rep in reports
        for r in rep["rows"]
        for x, q in r["cdf"]
    ]
    write_csv(HERE / "cdf.csv", cdf, ["node", "label", "latency_us", "quantile"])
    plot(reports)
    text = summarize(reports)
    (HERE / "summary.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
