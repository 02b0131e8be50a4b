"""The multi-host experiments' harness reports a failed run as it happened: which rank
failed and why, each node's exit status (a crash names its signal) and the tail of its log
(``experiments/_netns_nodes.py``, ``experiments/collectives/run.py``). No namespaces needed:
plain processes stand in for the nodes and ranks."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "experiments"))
sys.path.insert(0, str(REPO / "experiments" / "collectives"))

import _netns_nodes
import run as collectives_run
from _bench import parse_cpus


def spawn(code: str, log: Path) -> subprocess.Popen[str]:
    with log.open("w") as f:
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=f, text=True)


def test_report_names_each_nodes_exit_status_and_log_tail(tmp_path: Path) -> None:
    nodes = _netns_nodes.Nodes()
    codes = [
        "import sys, time; print('node 0 line', file=sys.stderr, flush=True); time.sleep(60)",
        "import sys; print('node 1 panicked here', file=sys.stderr); sys.exit(3)",
        "import sys, time; print('node 2 line', file=sys.stderr, flush=True); time.sleep(60)",
    ]
    for i, code in enumerate(codes):
        log = tmp_path / f"node{i}.log"
        nodes.procs.append(spawn(code, log))
        nodes.logs.append(log)
        nodes.metrics.append(None)
    try:
        nodes.procs[1].wait(timeout=30)
        deadline = time.monotonic() + 30
        while not all(log.read_text() for log in nodes.logs):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        nodes.procs[2].kill()
        nodes.procs[2].wait(timeout=30)
        assert nodes.dead() == [1, 2]
        report = nodes.report(tail=5)
        lines = report.splitlines()
        heads = [x for x in lines if x.startswith("--- node")]
        assert len(heads) == 3, report
        assert "running" in heads[0], report
        assert "exited with code 3" in heads[1], report
        assert "killed by SIGKILL" in heads[2], report
        assert "node 1 panicked here" in report
        assert lines.index(heads[1]) < lines.index("    node 1 panicked here") < lines.index(heads[2])
    finally:
        nodes.stop()
    assert nodes.dead() == [0, 1, 2]


def test_a_failed_rank_is_reported_and_the_waiting_ranks_get_a_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ranks still waiting when one fails are stopped after the grace period, and the
    nodes are not torn down under them before it: ending the nodes first answered the
    waiting ranks ``UNREACHABLE`` ("the link to device 0 broke"), hiding which rank failed."""
    monkeypatch.setattr(collectives_run, "WORKER_GRACE_S", 1.0)
    fail = "import sys; print('TIMEOUT request 2: not complete', file=sys.stderr); sys.exit(1)"
    wait = "import time; time.sleep(60)"
    procs = [spawn(fail, tmp_path / "r0"), spawn(wait, tmp_path / "r1"), spawn("pass", tmp_path / "r2")]
    t0 = time.monotonic()
    codes = collectives_run.wait_ranks(procs)
    took = time.monotonic() - t0
    assert codes[0] == 1 and codes[1] < 0 and codes[2] == 0, codes
    assert 1.0 <= took < 30, took
    with (tmp_path / "r0").open() as f:
        why = collectives_run.rank_failure(0, codes[0], f)
    assert why == "rank 0: exit 1: TIMEOUT request 2: not complete"
    with (tmp_path / "r1").open() as f:
        why = collectives_run.rank_failure(1, codes[1], f)
    assert why == "rank 1: killed (still waiting): (nothing on stderr)"


def test_io_config_is_the_nodes_io_section_and_refuses_unknown_modes() -> None:
    """The ``[io]`` section the collectives and gemv experiments give their nodes."""
    import tomllib

    for mode in ("blocking", "poll", "yield"):
        got = tomllib.loads(collectives_run.io_config(mode, 250))
        assert got == {"io": {"mode": mode, "spin_us": 250}}, got
    with pytest.raises(ValueError, match="busy"):
        collectives_run.io_config("busy", 100)


def test_cpu_lists_are_read_as_taskset_reads_them() -> None:
    """``--cpus`` of the cache experiment: single CPUs, lists and ranges; nonsense refused."""
    assert parse_cpus("0") == {0}
    assert parse_cpus("1,0") == {0, 1}
    assert parse_cpus("0-2,5") == {0, 1, 2, 5}
    for bad in ("3-1", "x", "", "-1", "0,,1"):
        with pytest.raises(ValueError):
            parse_cpus(bad)


def test_a_cpu_list_the_machine_lacks_is_refused_before_anything_starts() -> None:
    """The cache experiment exits with the reason, before it starts memcached or a node."""
    out = subprocess.run(
        [sys.executable, str(REPO / "experiments" / "nica_cache" / "run.py"), "--cpus", "4096"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO / "python")},
    )
    assert out.returncode != 0
    assert "--cpus 4096" in out.stderr and "CPUs" in out.stderr, out.stderr


def test_table_leaves_the_cells_of_a_variant_that_skips_a_collective_empty() -> None:
    """``chain`` runs all-reduces only: a broadcast row has no chain figure, and its cells stay
    empty instead of failing the table (or borrowing another variant's figure)."""
    rows: list[dict[str, object]] = [
        {"op": "bcast", "ranks": 2, "bytes": 1024, "buffers": 200e-6, "mpi": 100e-6, "algorithm": "1"},
        {"op": "allreduce", "ranks": 2, "bytes": 1024, "buffers": 400e-6, "chain": 100e-6, "mpi": 200e-6},
    ]
    lines = collectives_run.table(rows, ["buffers", "chain", "mpi"]).splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    bcast = dict(zip(head, [c.strip() for c in lines[2].strip("|").split("|")], strict=True))
    allreduce = dict(zip(head, [c.strip() for c in lines[3].strip("|").split("|")], strict=True))
    assert bcast["chain µs"] == "" and bcast["chain / MPI"] == "" and bcast["chain MB/s"] == ""
    assert bcast["buffers / MPI"] == "2.00"
    assert allreduce["chain µs"] == "100" and allreduce["chain / MPI"] == "0.50"
    assert allreduce["buffers / MPI"] == "2.00"


def test_the_chain_variant_refuses_a_collective_whose_output_cannot_feed_the_next() -> None:
    worker = str(REPO / "experiments" / "collectives" / "worker.py")
    args = ["--op", "bcast", "--variant", "chain", "--sizes", "1024", "--addr", "127.0.0.1:1"]
    out = subprocess.run(
        [sys.executable, worker, "offrac", *args, "--members", "0,1", "--device", "0"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO / "python")},
        timeout=60,
    )
    assert out.returncode != 0
    assert "--variant chain is for --op allreduce only" in out.stderr
