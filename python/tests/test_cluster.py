"""Nodes that find each other through a real etcd: membership under a lease, named pipelines
(CLI, Rust client through `offrac call --pipeline`, Python), and what happens when a node dies
or etcd goes away. Needs the `etcd` server binary (CI installs Debian's etcd-server);
``OFFRAC_ALLOW_NO_ETCD=1`` skips instead of failing."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from offrac import Client, Step, UnreachableError
from offrac import cluster as store

from _util import free_port
from conftest import Node

StartNode = Callable[..., Node]


class Etcd:
    def __init__(self, workdir: Path) -> None:
        self.port, peer = free_port(), free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                "etcd",
                "--name", "offrac-test",
                "--data-dir", str(workdir / "etcd"),
                "--listen-client-urls", f"http://{self.addr}",
                "--advertise-client-urls", f"http://{self.addr}",
                "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                "--initial-cluster", f"offrac-test=http://127.0.0.1:{peer}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(f"http://{self.addr}/health", timeout=1) as r:
                    if b"true" in r.read():
                        return
            except OSError:
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("etcd did not become healthy")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[Etcd]:
    if shutil.which("etcd") is None:
        if os.environ.get("OFFRAC_ALLOW_NO_ETCD") == "1":
            pytest.skip("no etcd server binary")
        pytest.fail(
            "no `etcd` on PATH (apt-get install etcd-server, or OFFRAC_ALLOW_NO_ETCD=1)", pytrace=False
        )
    e = Etcd(tmp_path)
    yield e
    e.stop()


def clustered(start_node: StartNode, etcd: Etcd, device: int, port: int | None = None) -> Node:
    port = port or free_port()
    cfg = f'device_id = {device}\n[cluster]\netcd = ["{etcd.addr}"]\nlease_ttl_s = 2\n'
    return start_node(cfg, listen=f"127.0.0.1:{port}")


def wait_for(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def reaches(entry: Node, device: int) -> bool:
    with Client(entry.address, timeout=5) as c:
        try:
            return bool(c.call_chain([Step("echo", device=device)], b"?") == b"?")
        except UnreachableError:
            return False


def test_nodes_find_each_other_and_run_a_chain(start_node: StartNode, etcd: Etcd) -> None:
    a = clustered(start_node, etcd, 0)
    b = clustered(start_node, etcd, 1)
    wait_for(lambda: store.members(etcd=etcd.addr) == {0: a.address, 1: b.address}, "both registered")
    wait_for(lambda: reaches(a, 1) and reaches(b, 0), "each node linked to the other")
    x = np.random.default_rng(1).uniform(0.01, 0.99, 500).astype(np.float32)
    with a.client() as c:
        want = c.call("minmax", c.call("logit", x))
        got = c.call_chain([Step("logit", device=1), Step("minmax", device=0)], x)
    np.testing.assert_array_equal(got, want)


def test_named_pipelines_from_the_cli_rust_and_python(
    start_node: StartNode, etcd: Etcd, node_bin: Path
) -> None:
    a = clustered(start_node, etcd, 0)
    clustered(start_node, etcd, 1)
    wait_for(lambda: reaches(a, 1), "a linked to b")

    def cli(*args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([str(node_bin), *args], capture_output=True, timeout=30)

    put = cli("pipeline", "--etcd", etcd.addr, "put", "prep", "logit@1, minmax@0")
    assert put.returncode == 0, put.stderr
    assert cli("pipeline", "--etcd", etcd.addr, "get", "prep").stdout.decode().strip() == "logit@1,minmax@0"
    store.put_pipeline("top3", "topk:64@1,topk:3", etcd=etcd.addr)
    listed = cli("pipeline", "--etcd", etcd.addr, "list").stdout.decode().splitlines()
    assert listed == ["prep logit@1,minmax@0", "top3 topk:64@1,topk:3"]
    # the Rust client, through the CLI
    r = cli("call", "--addr", a.address, "--pipeline", "top3", "--etcd", etcd.addr, "--data", "5,9,1,7,3")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == "9,7,5"
    # the Python client
    x = np.random.default_rng(2).uniform(0.01, 0.99, 100).astype(np.float32)
    with a.client() as c:
        want = c.call("minmax", c.call("logit", x))
        got, info = c.call_pipeline("prep", x, etcd=etcd.addr, return_info=True)
    np.testing.assert_array_equal(got, want)
    assert (info.hop_index, info.device) == (1, 0)
    assert store.delete_pipeline("prep", etcd=etcd.addr)
    gone = cli("pipeline", "--etcd", etcd.addr, "get", "prep")
    assert gone.returncode != 0 and b"no pipeline named" in gone.stderr
    with pytest.raises(KeyError):
        store.get_pipeline("prep", etcd=etcd.addr)
    bad = cli("pipeline", "--etcd", etcd.addr, "put", "x", "fft@1")
    assert bad.returncode != 0 and b"unknown function" in bad.stderr


def test_a_dead_node_leaves_with_its_lease_and_rejoins(start_node: StartNode, etcd: Etcd) -> None:
    a = clustered(start_node, etcd, 0)
    port = free_port()
    b = clustered(start_node, etcd, 1, port)
    wait_for(lambda: reaches(a, 1), "a linked to b")
    b.kill()
    b.stopped = True
    wait_for(lambda: 1 not in store.members(etcd=etcd.addr), "b's lease to expire", timeout=10)
    with a.client() as c, pytest.raises(UnreachableError) as e:
        c.call_chain([Step("echo", device=1)], b"x")
    assert e.value.detail == 1
    clustered(start_node, etcd, 1, port)
    wait_for(lambda: reaches(a, 1), "b back in a's table")


def test_nodes_keep_serving_when_etcd_goes_away(start_node: StartNode, etcd: Etcd) -> None:
    a = clustered(start_node, etcd, 0)
    b = clustered(start_node, etcd, 1)
    wait_for(lambda: reaches(a, 1), "a linked to b")
    etcd.stop()
    time.sleep(3)  # longer than the lease: the last table must stand
    with a.client() as c:
        for _ in range(20):
            assert c.call_chain(["echo", Step("echo", device=1)], b"still") == b"still"
    assert b.alive()
