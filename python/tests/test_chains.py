"""Chains of functions run inside one node: results, timings and errors on the real node."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from offrac import (
    DEVICE_SELF,
    FN_DESCRIBE,
    FN_REGISTER_REPLY,
    BadInputError,
    Client,
    FunctionId,
    Hop,
    RequestHeader,
    RequestTimeoutError,
    Status,
    Step,
    UnknownFunctionError,
    UnreachableError,
)
from offrac.registry import FUNCTIONS

from _util import RawConn
from conftest import Node

ECHO, TOPK, LOGIT, MINMAX = FunctionId.ECHO, FunctionId.TOPK, FunctionId.LOGIT, FunctionId.MINMAX


@pytest.fixture(scope="module")
def rng() -> np.random.Generator:
    return np.random.default_rng(9)


def test_chain_equals_the_functions_called_one_by_one(node: Node, rng: np.random.Generator) -> None:
    x = rng.normal(0, 50, 1000).astype(np.float32)
    with node.client() as c:
        one_by_one = c.call("logit", c.call("minmax", x))
        chained, info = c.call_chain(["minmax", "logit"], x, return_info=True)
    assert chained.dtype == np.float32
    np.testing.assert_array_equal(chained, one_by_one)
    assert info.status == Status.OK and info.hop_index == 1  # the answer comes from the last hop


def test_chain_keeps_the_shape_of_elementwise_steps(node: Node, rng: np.random.Generator) -> None:
    x = rng.normal(0, 1, (8, 16)).astype(np.float32)
    with node.client() as c:
        out = c.call_chain(["minmax", "echo", "logit"], x)
    assert out.shape == (8, 16)


def test_topk_of_topk_with_parameters(node: Node, rng: np.random.Generator) -> None:
    x = rng.integers(-(2**31), 2**31 - 1, 4096, dtype=np.int64).astype(np.int32)
    with node.client() as c:
        out = c.call_chain([Step("topk", k=64), Step("topk", k=8)], x)
    np.testing.assert_array_equal(np.sort(out), np.sort(x)[-8:])


def test_a_failing_hop_answers_once_naming_itself(node: Node) -> None:
    with node.client() as c:
        with pytest.raises(BadInputError) as e:
            c.call_chain(["minmax", Step("topk", k=0), "logit"], np.ones(16, np.float32))
        assert e.value.hop == 1
        assert "hop 1" in str(e.value)
        # the connection still serves: exactly one answer came for the chain
        assert c.call("echo", b"after") == b"after"
        assert c.outstanding == 0


def test_an_unhosted_hop_is_unknown_function_naming_hop_and_function(node: Node) -> None:
    with node.client() as c, pytest.raises(UnknownFunctionError) as e:
        c.call_chain(["echo", "echo", 200], b"abc")
    assert (e.value.hop, e.value.detail) == (2, 200)


def test_a_device_missing_from_the_device_table_is_unreachable(node: Node) -> None:
    with node.client() as c:
        with pytest.raises(UnreachableError) as e:
            c.call_chain(["echo", Step("echo", device=7)], b"abc")
        assert (e.value.hop, e.value.detail) == (1, 7)
        assert "device 7" in e.value.message


def test_chain_of_nine_steps_is_refused_by_the_client(node: Node) -> None:
    with node.client() as c, pytest.raises(ValueError, match="1 to 8"):
        c.call_chain(["echo"] * 9, b"x")


def test_eight_steps_ride_in_the_hop_extension(node: Node, rng: np.random.Generator) -> None:
    x = rng.uniform(0.01, 0.99, 777).astype(np.float32)
    steps = ["logit", "echo", "minmax", "echo", "minmax", "echo", "echo", "minmax"]
    with node.client() as c:
        want = x
        for s in steps:
            want = c.call(s, want)
        got, info = c.call_chain(steps, x, return_info=True)
    np.testing.assert_array_equal(got, want)
    assert info.hop_index == 7
    assert RequestHeader.chain(1, [Hop.local(ECHO)] * 5).wire_len == 128


def test_raw_chain_header_timings_cover_every_hop(node: Node) -> None:
    """The answer's exec_ns is the sum over the hops: three 300 us spins take >= 900 us."""
    spin = Hop.local(FunctionId.SPIN, 300)
    with RawConn(node.addr) as c:
        h = RequestHeader.chain(41, (spin, spin, spin), payload_len=2)
        assert h.reply_device == DEVICE_SELF
        c.send(h.encode() + b"hi")
        r, p = c.read_response()
    assert (r.status, r.request_id, r.hop_index, p) == (Status.OK, 41, 2, b"hi")
    assert r.exec_ns >= 900_000


def test_chains_from_many_clients_all_answer(node: Node, rng: np.random.Generator) -> None:
    xs = [rng.normal(0, 1, 256).astype(np.float32) for _ in range(200)]
    with Client(node.addr, busy_retries=50) as c:
        futs = [c.submit_chain(["minmax", "echo", "logit"], x) for x in xs]
        outs = [f.result(30) for f in futs]
        refs = [c.call("logit", c.call("minmax", x)) for x in xs[:20]]
    for got, want in zip(outs, refs, strict=False):
        np.testing.assert_array_equal(got, want)
    assert len(outs) == 200


def test_a_budget_spent_waiting_is_timeout_and_the_work_is_not_run(node: Node) -> None:
    with node.client() as c:
        hold = c.submit("spin", b"hold", us=300_000)
        time.sleep(0.05)
        t = time.monotonic()
        with pytest.raises(RequestTimeoutError) as e:
            c.call_chain(["echo", Step("spin", us=400_000)], b"late", budget=0.02)
        waited = time.monotonic() - t
        assert (e.value.hop, e.value.device) == (1, 0)
        assert "budget" in e.value.message
        # answered when the slot freed (~250 ms), without running the 400 ms spin
        assert waited < 0.5, waited
        assert hold.result(5) == b"hold"
        assert c.call("echo", b"in time", budget=1.0) == b"in time"
        with pytest.raises(ValueError, match="budget"):
            c.call("echo", b"x", budget=20.0)


def test_answers_go_to_a_registered_reply_connection(node: Node) -> None:
    with node.client() as receiver, RawConn(node.addr) as rx, RawConn(node.addr) as tx:
        endpoint = receiver.register_reply()
        assert receiver.register_reply(endpoint) == endpoint  # idempotent for its owner
        # a second connection cannot take an endpoint that is in use
        rx.send(RequestHeader.chain(1, [Hop.local(FN_REGISTER_REPLY, endpoint)]).encode())
        h, _ = rx.read_response()
        assert h.status == Status.BAD_INPUT
        rx.send(RequestHeader.chain(2, [Hop.local(FN_REGISTER_REPLY, DEVICE_SELF)]).encode())
        h, _ = rx.read_response()
        assert h.status == Status.OK and h.detail != endpoint
        mine = h.detail
        tx.send(RequestHeader.chain(7, [Hop.local(ECHO)], 3, reply_device=mine).encode() + b"abc")
        tx.send(
            RequestHeader.chain(8, [Hop.local(ECHO), Hop.local(ECHO)], 2, reply_device=mine).encode() + b"hi"
        )
        got = {}
        for _ in range(2):
            h, p = rx.read_response()
            got[h.request_id] = (h.status, p)
        assert got == {7: (Status.OK, b"abc"), 8: (Status.OK, b"hi")}
        assert not tx.has_data(0.3), "the sending connection got an answer"


def test_an_endpoint_closed_while_its_request_runs_leaves_the_answer_to_the_sender(node: Node) -> None:
    """Where an answer goes is decided when it is written: the endpoint's connection closed
    while the slot's worker ran the request, so the answer comes back on the sending one."""
    with RawConn(node.addr) as rx, RawConn(node.addr) as tx:
        rx.send(RequestHeader.chain(1, [Hop.local(FN_REGISTER_REPLY, DEVICE_SELF)]).encode())
        h, _ = rx.read_response()
        assert h.status == Status.OK
        spin = [Hop.local(FunctionId.SPIN, 300_000)]  # 0.3 s, on the worker
        tx.send(RequestHeader.chain(5, spin, 4, reply_device=h.detail).encode() + b"late")
        time.sleep(0.1)
        rx.close()
        h, p = tx.read_response(timeout=5.0)
        assert (h.request_id, h.status, p) == (5, Status.OK, b"late")


def test_describe_says_what_the_node_serves(node: Node) -> None:
    with node.client() as c:
        d = c.describe()
    assert d["device"] == 0 and d["protocol"] == 1 and d["max_hops"] == 8
    assert [f["name"] for f in d["functions"]] == [f.name for f in FUNCTIONS]
    assert d["functions"][7]["output"] == "ragged<uint32,float32>"
    assert [s["slot"] for s in d["slots"]] == list(range(len(FUNCTIONS)))
    assert d["metrics"] == node.metrics
    assert d["peers"] == []
    with RawConn(node.addr) as raw:  # a describe with a payload is refused, the connection kept
        raw.send(RequestHeader.chain(5, [Hop.local(FN_DESCRIBE)], 2).encode() + b"no")
        assert raw.read_response()[0].status == Status.BAD_INPUT
        raw.send(RequestHeader.chain(6, [Hop.local(FN_DESCRIBE)]).encode())
        h, p = raw.read_response()
        assert h.status == Status.OK and json.loads(p)["device"] == 0
