"""``offrac demo`` (the README's first command) drives every built-in function of the
registry but ``spin`` (a synthetic load for experiments) and gets every call answered."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from offrac.registry import FUNCTIONS


def test_the_demo_calls_every_builtin_and_each_call_is_answered(node_bin: Path) -> None:
    out = subprocess.run(
        [str(node_bin), "demo", "--duration", "0.5", "--warmup", "0.1", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    called = {row["function"] for row in report["rows"] if row["ok"] > 0}
    expected = {f.name for f in FUNCTIONS} - {"spin"}
    assert expected <= called, f"not called in the demo: {sorted(expected - called)}"
    assert all(row["errors"] == 0 for row in report["rows"]), report["rows"]
    assert report["unanswered"] == 0
