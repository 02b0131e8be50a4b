"""Named buffers on a real node (``docs/protocol.md``, "Named buffers"): kept data feeding later
chains, unknown names and a full budget answered with their typed errors, tenants' names apart."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from offrac import BadInputError, Client, QuotaExceededError, Step, UnknownBufferError
from offrac.buffers import (
    FN_BUFFER,
    BufferOp,
    buffer_param,
    drop,
    drop_buffer,
    get_buffer,
    keep,
    load,
    put_buffer,
    tee,
)
from offrac.cluster import format_chain, parse_chain
from offrac.protocol import Hop, Status

from conftest import Node


def test_params_pack_as_documented() -> None:
    assert buffer_param(BufferOp.GET, 5) == 0x0000_0003_0000_0005
    assert keep(7).hop() == Hop(FN_BUFFER, 0xFF, 0x1_0000_0007)
    assert tee(1, device=2).hop() == Hop(FN_BUFFER, 2, 0x2_0000_0001)
    assert drop(0xFFFF_FFFF).param == 0x4_FFFF_FFFF
    for bad in (-1, 1 << 32):
        with pytest.raises(ValueError, match="buffer name"):
            load(bad)


def test_a_kept_matrix_feeds_gemv(client: Client) -> None:
    a = np.random.default_rng(1).standard_normal((33, 20)).astype(np.float32)
    put_buffer(client, 11, a)
    for i in range(3):
        x = np.random.default_rng(i).standard_normal(20).astype(np.float32)
        y = client.call_chain([load(11), Step("gemv", cols=20)], x)
        np.testing.assert_allclose(y, a.astype(np.float64) @ x, rtol=1e-5, atol=1e-5)
    assert get_buffer(client, 11) == a.tobytes()
    drop_buffer(client, 11)
    with pytest.raises(UnknownBufferError) as e:
        get_buffer(client, 11)
    assert e.value.detail == 11 and e.value.status == Status.UNKNOWN_BUFFER


def test_tee_mid_chain_and_errors_name_the_hop(client: Client) -> None:
    out = client.call_chain(["echo", tee(12), "echo"], b"passing through")
    assert out == b"passing through"
    assert client.call_chain([load(12)], b"+") == b"passing through+"
    with pytest.raises(UnknownBufferError) as e:
        client.call_chain(["echo", load(404), "echo"], b"x")
    assert (e.value.detail, e.value.hop) == (404, 1)
    header, msg = client.call_raw(FN_BUFFER, b"", 9 << 32)
    assert header.status == Status.BAD_INPUT and b"buffer operation 9" in msg
    with pytest.raises(BadInputError):
        client.call_chain([Step(FN_BUFFER, param=1 << 40)], b"")
    drop_buffer(client, 12)


def test_the_node_budget_is_held(start_node: Callable[..., Node]) -> None:
    node = start_node('[metrics]\nlisten = ""\n[named_buffers]\nmax_bytes = 1000\n')
    with node.client() as c:
        put_buffer(c, 1, b"x" * 600)
        with pytest.raises(QuotaExceededError, match="budget of 1000") as e:
            put_buffer(c, 2, b"y" * 401)
        assert e.value.detail == 1000
        put_buffer(c, 2, b"y" * 400)
        # replacing frees the old bytes first
        put_buffer(c, 1, b"z" * 600)
        assert get_buffer(c, 1) == b"z" * 600


def test_buffer_steps_in_the_chain_text_form(node: Node, node_bin: Path) -> None:
    """``buffer.OP:NAME`` steps parse alike in Python and in ``offrac call``, and work there."""
    spec = "buffer.put:21,buffer.get:21@3,gemv:4,buffer.tee:4294967295,buffer.drop:0"
    steps = parse_chain(spec)
    assert [s.hop() for s in steps[:2]] == [
        Hop(FN_BUFFER, 0xFF, buffer_param(BufferOp.PUT, 21)),
        Hop(FN_BUFFER, 3, buffer_param(BufferOp.GET, 21)),
    ]
    assert format_chain(steps) == spec
    assert format_chain([Step(FN_BUFFER, param=9)]) == "255:9"
    bads = (("buffer.get", "needs its name"), ("buffer.copy:1", "not put, tee, get, drop or create"))
    for bad, why in bads:
        with pytest.raises(ValueError, match=why):
            parse_chain(bad)

    def call(chain: str, data: str) -> subprocess.CompletedProcess[str]:
        args = [str(node_bin), "call", "--addr", node.address, chain, "--data", data]
        return subprocess.run(args, capture_output=True, text=True, timeout=30)

    put = call("buffer.put:21", "kept here")
    assert put.returncode == 0, put.stderr
    got = call("buffer.get:21,echo", "+more")
    assert got.returncode == 0 and "kept here+more" in got.stdout, (got.stdout, got.stderr)
    bad = call("buffer.copy:21", "x")
    assert bad.returncode != 0 and "not put, tee, get, drop or create" in bad.stderr
    assert call("buffer.drop:21", "").returncode == 0
    missing = call("buffer.get:21", "")
    assert missing.returncode != 0 and "21" in missing.stderr
    # create claims a name once; the second claim fails and keeps the first's bytes
    assert call("buffer.create:22", "first").returncode == 0
    again = call("buffer.create:22", "second")
    assert again.returncode != 0 and "BUFFER_EXISTS" in again.stderr, again.stderr
    assert "first" in call("buffer.get:22", "").stdout
    assert call("buffer.drop:22", "").returncode == 0
