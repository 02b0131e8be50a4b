"""Shared helpers for the simulator experiments: run `offrac sim`, aggregate seeds, write outputs."""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("OFFRAC_BIN", str(REPO / "target" / "release" / "offrac"))

# Two-sided 95% Student t quantiles by degrees of freedom (1..30); normal beyond.
_T95 = [
    12.706,
    4.303,
    3.182,
    2.776,
    2.571,
    2.447,
    2.365,
    2.306,
    2.262,
    2.228,
    2.201,
    2.179,
    2.160,
    2.145,
    2.131,
    2.120,
    2.110,
    2.101,
    2.093,
    2.086,
    2.080,
    2.074,
    2.069,
    2.064,
    2.060,
    2.056,
    2.052,
    2.048,
    2.045,
    2.042,
]


def t95(n: int) -> float:
    """The 95% two-sided t quantile for a mean of n samples."""
    return _T95[n - 2] if 2 <= n <= len(_T95) + 1 else 1.96


def sim(args: Sequence[str], seeds: int = 10, seed: int = 1) -> tuple[pd.DataFrame, dict[str, float]]:
    """Run `offrac sim` over `seeds` seeds; return its CSV and its speed report."""
    cmd = [BIN, "sim", *args, "--seeds", str(seeds), "--seed", str(seed)]
    p = subprocess.run(cmd, check=True, capture_output=True, text=True)
    speed = json.loads(p.stderr.strip().splitlines()[-1])
    return pd.read_csv(io.StringIO(p.stdout)), speed


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its 95% confidence interval."""
    s = pd.Series(values, dtype=float)
    n = len(s)
    if n < 2:
        return float(s.mean()), 0.0
    return float(s.mean()), t95(n) * float(s.std(ddof=1)) / math.sqrt(n)


def aggregate(df: pd.DataFrame, keys: list[str], metric: str) -> pd.DataFrame:
    """Mean and 95% CI of `metric` across seeds, for each combination of `keys`."""
    rows = []
    for k, g in df.groupby(keys, sort=False):
        m, ci = mean_ci(g[metric].tolist())
        rows.append(
            {
                **dict(zip(keys, k if isinstance(k, tuple) else (k,), strict=True)),
                "mean": m,
                "ci95": ci,
                "n": len(g),
            }
        )
    return pd.DataFrame(rows)


def here(file: str) -> Path:
    return Path(file).resolve().parent


def command_line(file: str) -> str:
    """The command that reproduces an experiment, relative to the repository root."""
    return f"python3 {Path(file).resolve().relative_to(REPO)}"


def write_summary(out: Path, title: str, cmd: str, body: str) -> None:
    binary = "binary: `$OFFRAC_BIN`, default `target/release/offrac`"
    text = f"# {title}\n\nReproduce: `{cmd}` ({binary}).\n\n{body}\n"
    (out / "summary.md").write_text(text)
    print(text)


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    cols = list(df.columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        cells = [format(v, floatfmt) if isinstance(v, float) else str(v) for v in r.tolist()]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
