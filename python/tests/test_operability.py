"""Running the node as a service: health endpoints, signals, CLI timeouts and inputs (issue #10)."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from offrac import FunctionId, UnknownFunctionError, encode_request

from conftest import Node

StartNode = Callable[[str | None], Node]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def offrac(
    node_bin: Path, *args: str, stdin: bytes | None = None, timeout: float = 20
) -> subprocess.CompletedProcess:
    return subprocess.run([str(node_bin), *args], input=stdin, capture_output=True, timeout=timeout)


def test_health_and_readiness(start_node: StartNode) -> None:
    n = start_node('[[slots]]\nfunction = "spin"\n')
    assert get(f"http://{n.metrics}/healthz") == (200, "ok\n")
    assert get(f"http://{n.metrics}/readyz") == (200, "ready\n")
    with n.client() as c:
        fut = c.submit("spin", b"x", us=600_000)
        time.sleep(0.1)
        n.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 3
        code = 0
        while time.monotonic() < deadline:
            code, _ = get(f"http://{n.metrics}/readyz")
            if code == 503:
                break
            time.sleep(0.02)
        assert code == 503, "not unready while shutting down"
        assert get(f"http://{n.metrics}/healthz")[0] == 200
        assert fut.result(10) == b"x"
    assert n.proc.wait(10) == 0
    n.stopped = True


def test_sighup_is_ignored_and_a_second_stop_signal_forces_the_exit(start_node: StartNode) -> None:
    n = start_node('shutdown_grace_ms = 60000\n[[slots]]\nfunction = "spin"\n')
    n.proc.send_signal(signal.SIGHUP)
    time.sleep(0.2)
    assert n.alive(), "SIGHUP killed the node"
    with n.client() as c:
        assert c.call("spin", b"still here", us=10) == b"still here"
        c.submit("spin", b"long", us=1_000_000)
        time.sleep(0.1)
        n.proc.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        assert n.alive(), "the first SIGTERM waits for held work"
        t0 = time.monotonic()
        n.proc.send_signal(signal.SIGTERM)
        n.proc.wait(5)
        assert time.monotonic() - t0 < 0.8, "the second SIGTERM did not force the exit"
    assert "SIGHUP ignored" in n.stderr_tail()
    n.stopped = True


def test_call_gives_up_on_a_silent_peer(node_bin: Path) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        host, port = silent.getsockname()
        addr = f"{host}:{port}"
        t0 = time.monotonic()
        r = offrac(node_bin, "call", "--addr", addr, "echo", "--data", "x", "--timeout", "1")
        took = time.monotonic() - t0
        assert r.returncode != 0
        assert b"no answer" in r.stderr and b"within 1 s" in r.stderr, r.stderr
        assert 0.9 < took < 3, took
        r = offrac(node_bin, "status", "--metrics", addr, "--timeout", "1")
        assert r.returncode != 0 and b"no answer" in r.stderr, r.stderr


def test_call_inputs(node: Node, node_bin: Path) -> None:
    r = offrac(node_bin, "call", "--addr", node.address, "topk", "-p", "2", "--data", "-5,-1,7,-9")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == "7,-1"
    r = offrac(node_bin, "call", "--addr", node.address, "topk", "--data", "1,2")
    assert r.returncode != 0 and b"topk needs k: how many" in r.stderr and b"-p" in r.stderr, r.stderr
    r = offrac(node_bin, "call", "--addr", node.address, "echo", "--file", "-", stdin=b"from stdin")
    assert r.returncode == 0 and r.stdout.decode().strip() == "from stdin", r


def test_serve_flags_come_from_the_environment(node_bin: Path, tmp_path: Path) -> None:
    env = {"OFFRAC_LISTEN": "127.0.0.1:0", "OFFRAC_METRICS_LISTEN": "", "PATH": "/usr/bin:/bin"}
    p = subprocess.Popen([str(node_bin), "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert p.stdout is not None
        line = p.stdout.readline().decode()
        assert '"metrics":null' in line.replace(" ", ""), line
        assert '"addr":"127.0.0.1:' in line.replace(" ", ""), line
    finally:
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0


def test_a_stop_signal_right_after_the_listening_line_stops_cleanly(node_bin: Path) -> None:
    # A supervisor may signal the moment it reads the "listening" line; the
    # node must already handle SIGTERM then (a race CI once hit: exit -15).
    for _ in range(30):
        p = subprocess.Popen(
            [str(node_bin), "serve", "--listen", "127.0.0.1:0", "--metrics-listen", ""],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert p.stdout is not None
        assert b"listening" in p.stdout.readline()
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 0


def test_a_closed_pipe_ends_the_cli_quietly(node: Node, node_bin: Path) -> None:
    # `offrac sim` writes a long CSV; `head -1` closes the pipe after one line.
    cmd = f"{node_bin} sim --seeds 50 --requests 50 2>/dev/null | head -1; echo status ${{PIPESTATUS[0]}}"
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, timeout=60)
    out = r.stdout.decode()
    assert out.startswith("seed,group"), out
    assert "panicked" not in r.stderr.decode()
    assert out.strip().endswith(("status 0", "status 141")), out


def sig_ignored(pid: int, sig: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line for line in status.splitlines() if line.startswith("SigIgn:")).split()[1], 16)
    return bool(mask & (1 << (sig - 1)))


def test_servers_ignore_sigpipe_and_survive_clients_that_reset_mid_answer(node: Node, node_bin: Path) -> None:
    """The CLI restores SIGPIPE's default for its filters (above), never for a server: a write
    to a connection its client reset must fail on that connection only. A node with the default
    died of SIGPIPE in the soak of issue #10, after ~5 minutes of hostile clients."""
    assert sig_ignored(node.proc.pid, signal.SIGPIPE), "offrac serve must ignore SIGPIPE"
    raw = subprocess.Popen(
        [str(node_bin), "bench", "serve-raw"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert raw.stdout is not None and b"listening" in raw.stdout.readline()
        assert sig_ignored(raw.pid, signal.SIGPIPE), "offrac bench serve-raw must ignore SIGPIPE"
    finally:
        raw.terminate()
        raw.wait(10)
    # And in practice: clients that send requests with large answers and reset at once.
    batch = b"".join(encode_request(i, int(FunctionId.ECHO), bytes(60_000)) for i in range(20))
    for _ in range(30):
        s = socket.create_connection(node.addr)
        s.sendall(batch)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
    with node.client() as c:
        assert c.call("echo", b"still here") == b"still here"
    assert node.alive()


def test_config_default_and_check(node_bin: Path, tmp_path: Path) -> None:
    r = offrac(node_bin, "config", "default")
    assert r.returncode == 0 and b"[pool]" in r.stdout
    good = tmp_path / "default.toml"
    good.write_bytes(r.stdout)
    r = offrac(node_bin, "config", "check", str(good))
    assert r.returncode == 0 and b"ok" in r.stdout and f"{len(FunctionId)} slot(s)".encode() in r.stdout, r
    bad = tmp_path / "bad.toml"
    bad.write_text('[pool]\npolicy = "eligible_rr"\n')
    r = offrac(node_bin, "config", "check", str(bad))
    assert r.returncode != 0 and b"eligible-rr" in r.stderr, r.stderr


def test_completions_and_man_page(node_bin: Path) -> None:
    r = offrac(node_bin, "completions", "bash")
    assert r.returncode == 0 and b"_offrac()" in r.stdout
    r = offrac(node_bin, "man")
    assert r.returncode == 0 and r.stdout.startswith(b".ie") and b".TH offrac 1" in r.stdout


def test_refusals_are_logged_but_a_flood_is_not(start_node: StartNode) -> None:
    n = start_node(None)
    for _ in range(30):
        with socket.create_connection(n.addr, timeout=5) as s:
            s.sendall(b"\x00" * 64)  # wrong magic: MALFORMED, then the node closes
            while s.recv(4096):
                pass
    time.sleep(0.2)
    lines = [line for line in n.stderr_tail(100_000).splitlines() if "request refused" in line]
    assert lines and "MALFORMED" in lines[0], n.stderr_tail()
    assert len(lines) <= 3, f"{len(lines)} log lines for 30 refusals in well under 3 s"


def test_refusals_are_counted_per_function_and_tenant(start_node: StartNode) -> None:
    n = start_node('[[slots]]\nfunction = "echo"\n')
    with n.client() as c:
        for _ in range(3):
            with pytest.raises(UnknownFunctionError):  # no slot hosts topk
                c.call("topk", [1, 2], k=1, tenant=7)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        _, text = get(f"http://{n.metrics}/metrics")
        if 'offrac_refusals_by_function_total{function="topk",reason="UNKNOWN_FUNCTION"} 3' in text:
            break
        time.sleep(0.06)
    assert 'offrac_refusals_by_function_total{function="topk",reason="UNKNOWN_FUNCTION"} 3' in text, text
    assert 'offrac_refusals_by_tenant_total{tenant="7",reason="UNKNOWN_FUNCTION"} 3' in text, text
    with urllib.request.urlopen(f"http://{n.metrics}/metrics", timeout=5) as r:
        assert "charset=utf-8" in r.headers["Content-Type"]


def test_call_runs_a_chain(node_bin: Path, node: Node) -> None:
    addr = f"{node.addr[0]}:{node.addr[1]}"
    r = offrac(node_bin, "call", "--addr", addr, "topk:3,topk:2", "--data", "1,9,3,7")
    assert r.returncode == 0, r.stderr
    assert sorted(int(v) for v in r.stdout.decode().split(",")) == [7, 9]
    r = offrac(node_bin, "call", "--addr", addr, "echo,topk:0", "--data", "1,2,3,4")
    assert r.returncode == 1
    assert b"BAD_INPUT at hop 1" in r.stderr
    r = offrac(node_bin, "call", "--addr", addr, "echo,echo", "-p", "3", "--data", "x")
    assert r.returncode == 1 and b"NAME:PARAM" in r.stderr


def test_status_finds_the_metrics_through_describe(node_bin: Path, node: Node) -> None:
    r = offrac(node_bin, "status", "--addr", node.address)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert f"metrics at {node.metrics}" in out and "| slot | function " in out
