"""Collective hops' descriptor buffers: ``offrac collective ... --hop NAME`` keeps one at the node
and prints the chain hop, which ``offrac call`` then runs on both ranks of two loopback nodes;
``Communicator.close`` drops the ones ``hop()`` kept; two communicators of one tenant on one node
never share one."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from offrac import BufferExistsError, Client, Step, UnknownBufferError
from offrac.buffers import create_buffer, drop_buffer, get_buffer, put_buffer
from offrac.collectives import Communicator

from _util import free_port
from conftest import Node


def offrac(node_bin: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(node_bin), *args], capture_output=True, text=True, timeout=30)


@pytest.fixture
def pair(start_node: Callable[..., Node]) -> Iterator[list[Node]]:
    """Two nodes on loopback, devices 0 and 1, linked to each other."""
    ports = [free_port(), free_port()]
    nodes = [
        start_node(
            f'device_id = {i}\n[metrics]\nlisten = ""\n'
            f'[[devices]]\nid = {1 - i}\naddr = "127.0.0.1:{ports[1 - i]}"\n',
            listen=f"127.0.0.1:{ports[i]}",
        )
        for i in range(2)
    ]
    deadline = time.monotonic() + 15
    for n in nodes:
        with Client(n.address, timeout=5) as c:
            while not all(p["up"] for p in c.describe()["peers"]):
                assert time.monotonic() < deadline, "links did not come up"
                time.sleep(0.05)
    yield nodes


def test_cli_hop_runs_an_allreduce_and_a_scatter_in_chains(
    pair: list[Node], node_bin: Path, tmp_path: Path
) -> None:
    members = "--members=0,1"
    hops: list[list[str]] = [[], []]
    for i, n in enumerate(pair):
        a = offrac(node_bin, "collective", "allreduce", "--addr", n.address, members,
                   "--count", "3", "--hop", "40", "--hop-tag", "7")  # fmt: skip
        assert a.returncode == 0, a.stderr
        s = offrac(node_bin, "collective", "scatter", "--addr", n.address, members, "--tag", "100",
                   "--count", "2", "--hop", "41")  # fmt: skip
        assert s.returncode == 0, s.stderr
        hops[i] = [a.stdout.strip(), s.stdout.strip()]
    # param: the buffer in bits 0-31, --hop-tag in bits 32-63; the same text on both ranks
    assert hops[0] == hops[1] == [f"251:{40 | 7 << 32}", "251:41"]
    # the descriptor is what was kept: 64 bytes, kind CALL (1), byte 7 = 0
    with Client(pair[0].address, timeout=5) as c:
        desc = get_buffer(c, 40)
    assert len(desc) == 64 and desc[0] == 1 and desc[7] == 0

    xs = [np.array([1.5, -2.0, 4.0], np.float32), np.array([10.0, 20.0, 0.25], np.float32)]
    # each rank's chain: the allreduce hop on its x, then keep the sum at its node
    on_both(node_bin, pair, tmp_path, [f"{h[0]},buffer.put:50" for h in hops], [x.tobytes() for x in xs])
    scat = np.array([1.0, 2.0, 3.0, 4.0], np.float32)  # the root's (rank 0): 2 per rank
    on_both(node_bin, pair, tmp_path, [f"{h[1]},buffer.put:51" for h in hops], [scat.tobytes(), b""])
    for i, n in enumerate(pair):
        out = tmp_path / f"sum{i}.bin"
        g = offrac(node_bin, "buffer", "get", "50", "--addr", n.address, "--file", str(out))
        assert g.returncode == 0, g.stderr
        np.testing.assert_array_equal(np.frombuffer(out.read_bytes(), np.float32), xs[0] + xs[1])
        with Client(n.address, timeout=5) as c:
            got = np.frombuffer(get_buffer(c, 51), np.float32)
        np.testing.assert_array_equal(got, scat[2 * i : 2 * i + 2])


def on_both(node_bin: Path, pair: list[Node], tmp: Path, chains: list[str], inputs: list[bytes]) -> None:
    """``offrac call CHAIN --file INPUT`` on both ranks at once; both must succeed."""
    procs: list[subprocess.Popen[str]] = []
    for i, n in enumerate(pair):
        inp = tmp / f"in{i}-{time.monotonic_ns()}.bin"
        inp.write_bytes(inputs[i])
        args = [str(node_bin), "call", chains[i], "--addr", n.address, "--file", str(inp)]
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=30)
        assert p.returncode == 0, err


def test_cli_hop_refuses_what_makes_no_sense(node: Node, node_bin: Path) -> None:
    base = ["collective", "allreduce", "--addr", node.address, "--members=0,1"]
    cases = [
        (["--count", "3", "--hop", "1", "--keep", "2"], "cannot be used with"),
        (["--count", "3", "--hop", "1", "--from-buffer", "2"], "cannot be used with"),
        (["--hop", "1", "1", "2"], "give --count, not values"),
        (["--hop", "1"], "--hop needs --count"),
        (["--count", "3", "--hop", "x"], "invalid value 'x'"),
        (["--count", "3", "--hop", "4294967296"], "invalid value"),
        (["--count", "3", "--hop-tag", "5"], "--hop"),
        (["1", "2"], "--tag is required"),
    ]
    for extra, want in cases:
        r = offrac(node_bin, *base, *extra)
        assert r.returncode != 0, extra
        assert want in r.stderr, (extra, r.stderr)


def test_close_drops_the_descriptor_buffers_hop_kept(node: Node) -> None:
    with Client(node.address, timeout=5) as c:
        dev = int(c.describe()["device"])
        comm = Communicator(c, [dev], hop_buffers=900)
        comm.hop("allreduce", dtype=np.float32, count=4)
        comm.hop("allreduce", dtype=np.float32, count=4)  # the same descriptor: one buffer
        comm.hop("bcast", dtype=np.int32, count=2)
        assert len(get_buffer(c, 900)) == 64 and len(get_buffer(c, 901)) == 64
        with pytest.raises(UnknownBufferError):
            get_buffer(c, 902)
        comm.close()
        for name in (900, 901):
            with pytest.raises(UnknownBufferError):
                get_buffer(c, name)
        # the client was the caller's: still open
        assert c.describe()["device"] == dev

    # an owned client (the context manager): the buffers are gone for the next connection too
    with Communicator(node.address, [dev], hop_buffers=910) as comm:
        comm.hop("reduce", dtype=np.float32, count=8)
        with Client(node.address, timeout=5) as other:
            assert len(get_buffer(other, 910)) == 64
    with Client(node.address, timeout=5) as other, pytest.raises(UnknownBufferError):
        get_buffer(other, 910)


def test_two_communicators_on_one_node_keep_their_own_descriptors(node: Node) -> None:
    """Both start from the default ``hop_buffers``; each claims its names with a buffer CREATE. Before,
    both took 0xC0110000 and the second's PUT replaced the first's descriptor, so the first's chain ran
    the second's collective (a 2-int32 broadcast refusing 4 floats: BAD_INPUT)."""
    with Client(node.address, timeout=5) as c:
        dev = int(c.describe()["device"])
        a = Communicator(c, [dev])
        b = Communicator(c, [dev], first_tag=1000)  # a node refuses a tag reused on the same members
        ha = a.hop("allreduce", dtype=np.float32, count=4)
        hb = b.hop("bcast", dtype=np.int32, count=2)
        name_a, name_b = ha.param & 0xFFFF_FFFF, hb.param & 0xFFFF_FFFF
        assert (name_a, name_b) == (0xC011_0000, 0xC011_0001)
        x = np.array([1.5, -2.0, 4.0, 8.0], np.float32)
        out = c.call_chain([ha, Step("echo")], x.tobytes())  # one rank: the all-reduce is x
        np.testing.assert_array_equal(np.frombuffer(out, np.float32), x)
        y = np.array([7, -9], np.int32)
        out = c.call_chain([hb, Step("echo")], y.tobytes())
        np.testing.assert_array_equal(np.frombuffer(out, np.int32), y)

        # a name another client of the tenant keeps is skipped, never replaced
        put_buffer(c, 0xC011_0002, b"not a descriptor")
        with Communicator(c, [dev], first_tag=2000) as d:
            hd = d.hop("reduce", dtype=np.float32, count=4)
            assert hd.param & 0xFFFF_FFFF == 0xC011_0003
            assert get_buffer(c, 0xC011_0002) == b"not a descriptor"
        # CREATE itself: the second claim of a name is refused and changes nothing
        create_buffer(c, 77, b"first")
        with pytest.raises(BufferExistsError) as e:
            create_buffer(c, 77, b"second")
        assert e.value.detail == 77 and get_buffer(c, 77) == b"first"
        drop_buffer(c, 77)
        a.close()
        b.close()
        for name in (name_a, name_b):
            with pytest.raises(UnknownBufferError):
                get_buffer(c, name)
