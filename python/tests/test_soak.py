"""The soak of issue #10, shortened for CI: experiments/soak/run.py against the real node for 45 s.

Good pipelined clients beside slowloris, tricklers, garbage, mid-request disconnects and
never-reading clients; every good request must get exactly one answer, and the node's RSS and fds
must stay bounded (the script's own verdict, checked here figure by figure as well).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import REPO

SOAK = REPO / "experiments" / "soak" / "run.py"
DURATION_S = 45


def test_soak_answers_every_request_once_and_stays_bounded(node_bin: Path, tmp_path: Path) -> None:
    out = tmp_path / "soak"
    report = tmp_path / "soak.json"
    env = dict(os.environ, OFFRAC_BIN=str(node_bin))
    # This checkout's client first, whatever is installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, str(SOAK), "--duration", str(DURATION_S), "--out", str(out), "--json", str(report)],
        env=env,
        capture_output=True,
        text=True,
        timeout=DURATION_S + 60,
    )
    tail = proc.stdout[-6000:] + proc.stderr[-3000:]
    assert report.exists(), f"no report (exit {proc.returncode})\n{tail}"
    result = json.loads(report.read_text())
    assert result["failures"] == [], tail
    assert proc.returncode == 0, tail

    good = result["good"]
    assert good["sent"] > 2000, f"good clients barely ran: {good}"
    assert good["answered"] == good["sent"], good
    assert good["lost"] == good["duplicates"] == good["wrong"] == 0, good
    assert good["ok"] > good["sent"] // 2, f"mostly refused: {good}"
    hostile = result["hostile"]
    assert hostile["answered"] == hostile["sent"] and hostile["lost"] == hostile["duplicates"] == 0, hostile

    by_kind: dict[str, list[dict[str, Any]]] = {}
    for c in result["clients"]:
        by_kind.setdefault(str(c["kind"]), []).append(c)

    def count(kind: str, key: str) -> int:
        return sum(int(c[key]) for c in by_kind[kind])

    # Every hostile kind really ran, and the node dealt with it as documented.
    assert count("slowloris", "closed_by_node") >= 4, by_kind["slowloris"]
    trickled = sum(c["errors"].get("TIMEOUT", 0) for c in by_kind["trickler"])
    assert trickled >= 4, by_kind["trickler"]
    assert count("trickler", "closed_by_node") == 0, "a reassembly timeout must keep the connection"
    assert count("garbage", "closed_by_node") == count("garbage", "connections") > 10, by_kind["garbage"]
    assert count("disconnect", "connections") > 20, by_kind["disconnect"]
    assert count("never-reader", "bytes_sent") > 16 * 2**20, by_kind["never-reader"]

    growth = result["growth"]
    assert growth["rss_ok"] and growth["fd_ok"] and growth["fd_drain_ok"], growth
    assert growth["fds_after_drain"] <= growth["fds_before"] + 2, growth
    assert result["rss_mib"]["max"] < 64, f"RSS {result['rss_mib']} MiB for a default node"
    assert result["node_exit"] == 0
    assert (out / "results.csv").read_text().count("\n") >= 10
