"""Fixtures that run the real node binary on loopback.

The binary is ``$OFFRAC_BIN`` or ``<repo>/target/release/offrac``. If it is missing, tests that
need it FAIL, unless ``OFFRAC_ALLOW_NO_NODE=1``, in which case they are skipped.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from netns import Hosts, netns_available

from offrac import Client

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0


def node_binary() -> Path | None:
    env = os.environ.get("OFFRAC_BIN")
    path = Path(env) if env else REPO / "target" / "release" / "offrac"
    return path if path.is_file() and os.access(path, os.X_OK) else None


class Node:
    """One running ``offrac serve`` process."""

    def __init__(
        self,
        binary: Path,
        workdir: Path,
        config: str | None = None,
        listen: str = "127.0.0.1:0",
        prefix: Sequence[str] = (),
        extra: Sequence[str] = (),
    ) -> None:
        """``prefix`` runs the node under another command, e.g. ``ip netns exec NS``; ``extra``
        are more ``serve`` flags (e.g. ``--datapath rtl``)."""
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        args = [*prefix, str(binary), "serve", "--listen", listen, *extra]
        if config is not None:
            cfg = workdir / "offrac.toml"
            cfg.write_text(config)
            args += ["--config", str(cfg)]
        self.args = args
        self.stderr_path = workdir / "node.stderr"
        self._stderr = self.stderr_path.open("wb")
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL
        )
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._drain_stdout, daemon=True).start()
        try:
            first = self._lines.get(timeout=START_TIMEOUT)
        except queue.Empty:
            self.kill()
            raise RuntimeError(
                f"node printed no 'listening' line within {START_TIMEOUT} s\n{self.stderr_tail()}"
            ) from None
        if not first:
            self.proc.wait(timeout=STOP_TIMEOUT)
            raise RuntimeError(
                f"node exited with {self.proc.returncode} before listening\n{self.stderr_tail()}"
            )
        try:
            info = json.loads(first)
        except json.JSONDecodeError:
            self.kill()
            raise RuntimeError(f"first stdout line is not JSON: {first!r}\n{self.stderr_tail()}") from None
        if info.get("event") != "listening":
            self.kill()
            raise RuntimeError(f"unexpected first event {info!r}")
        self.info = info
        host, _, port = str(info["addr"]).rpartition(":")
        self.addr: tuple[str, int] = (host, int(port))
        self.address = f"{host}:{port}"
        self.metrics: str | None = info.get("metrics")
        self.stopped = False

    def _drain_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")

    def client(self, **kwargs: object) -> Client:
        return Client(self.address, **kwargs)  # type: ignore[arg-type]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self, n: int = 4000) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        try:
            text = self.stderr_path.read_bytes()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""
        return f"--- node stderr (tail) ---\n{text}"

    def stop(self) -> int | None:
        """SIGTERM, wait up to 10 s, then SIGKILL. Returns the exit code."""
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
        self._stderr.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def node_bin() -> Path:
    binary = node_binary()
    if binary is None:
        where = os.environ.get("OFFRAC_BIN") or REPO / "target" / "release" / "offrac"
        msg = (
            f"node binary not found at {where}: build it with "
            "`cargo build --release -p offrac-cli` or set OFFRAC_BIN "
            "(set OFFRAC_ALLOW_NO_NODE=1 to skip the integration tests instead)"
        )
        if os.environ.get("OFFRAC_ALLOW_NO_NODE") == "1":
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    return binary


def _finish(node: Node) -> None:
    """Stop a node at teardown; it must still be running and exit cleanly on SIGTERM."""
    if node.stopped:  # the test stopped it and checked what it wanted
        return
    was_alive = node.alive()
    code = node.stop()
    assert was_alive, f"node died during the test (exit {node.proc.returncode})\n{node.stderr_tail()}"
    assert code == 0, f"node exited with {code} after SIGTERM\n{node.stderr_tail()}"


@pytest.fixture(scope="module")
def node(node_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    """A node with the default configuration, shared by a test module."""
    n = Node(node_bin, tmp_path_factory.mktemp("node"))
    yield n
    _finish(n)


@pytest.fixture
def start_node(node_bin: Path, tmp_path: Path) -> Iterator[Callable[[str | None], Node]]:
    """Factory: ``start_node(config_toml_text)`` -> a fresh node, stopped after the test."""
    started: list[Node] = []

    def start(config: str | None = None, listen: str = "127.0.0.1:0") -> Node:
        n = Node(node_bin, tmp_path / f"node{len(started)}", config, listen)
        started.append(n)
        return n

    yield start
    for n in started:
        _finish(n)


@pytest.fixture
def client(node: Node) -> Iterator[Client]:
    with node.client() as c:
        yield c


def netns_hosts(n: int) -> Iterator[Hosts]:
    """``n`` namespace hosts for a module's fixture, removed after; where namespaces cannot be made,
    the tests fail saying why, or are skipped with ``OFFRAC_ALLOW_NO_NETNS=1``."""
    why = netns_available()
    if why is not None:
        if os.environ.get("OFFRAC_ALLOW_NO_NETNS") == "1":
            pytest.skip(why)
        pytest.fail(f"{why} (set OFFRAC_ALLOW_NO_NETNS=1 to skip the multi-host tests)", pytrace=False)
    h = Hosts(n)
    try:
        yield h
    finally:
        h.close()


def node_on_host(binary: Path, workdir: Path, hosts: Hosts, i: int, config: str, port: int) -> Node:
    """A node on namespace host ``i``, listening on its address at ``port``."""
    return Node(binary, workdir, config, f"{hosts.ip(i)}:{port}", hosts.prefix(i))
