"""Control requests from the Python client against a real node: upload a module, swap a slot
to it and back, list, unload; forged and replayed requests refused (``docs/control.md``)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from offrac import (
    FN_CONTROL,
    BadInputError,
    BusyError,
    FuelExhaustedError,
    Status,
    TrappedError,
    UnauthorizedError,
    UnknownFunctionError,
    error_for_response,
)
from offrac.control import OP_LIST, encode_envelope

from conftest import Node

KEY = bytes.fromhex("000102030405060708090a0b0c0d0e0f")

# Echo plus ``param`` per byte (crates/control/wat/add.wat), assembled: no wasm toolchain needed.
ADD_WASM = Path(__file__).resolve().parents[2] / "crates" / "control" / "wat"

CONFIG = f"""
[metrics]
listen = ""
[[slots]]
function = "echo"
[[slots]]
function = "echo"
[control]
fuel = 5000000
[[control.tenants]]
id = 3
key = "{KEY.hex()}"
"""


def _module(node: Node, name: str) -> bytes:
    """Assemble a WebAssembly text file with the node binary's own ``ctl`` tooling."""
    out = node.workdir / f"{name}.wasm"
    subprocess.run(
        [node.args[0], "ctl", "wat2wasm", str(ADD_WASM / f"{name}.wat"), str(out)],
        check=True,
        capture_output=True,
    )
    return out.read_bytes()


def test_upload_swap_call_and_back(start_node: Callable[..., Node]) -> None:
    node = start_node(CONFIG)
    # A tenant's modules are its own: the data connection says hello as tenant 3.
    with node.client(tenant=3, key=KEY) as c:
        ctl = c.control(tenant=3, key=KEY)
        digest = ctl.upload(_module(node, "add"))
        assert len(digest) == 64
        report = ctl.swap(1, wasm=digest, function=140)
        assert report["slot"] == 1 and report["target"]["digest"] == digest
        header, payload = c.call_raw(140, b"\x01\x02", 5)
        assert header.status == Status.OK and payload == b"\x06\x07"
        listing = ctl.list()
        assert [m["digest"] for m in listing["modules"]] == [digest]
        assert listing["slots"][1]["function"] == 140
        # Another tenant's connection, and an anonymous one, do not see function 140.
        with node.client() as anonymous:
            assert anonymous.call_raw(140, b"\x01", 5)[0].status == Status.UNKNOWN_FUNCTION
        with pytest.raises(BadInputError):
            ctl.unload(digest)  # in use
        ctl.swap(1, builtin="echo")
        ctl.unload(digest)
        with pytest.raises(UnknownFunctionError):
            ctl.swap(1, wasm=digest, function=140)


def test_misbehaving_module_statuses(start_node: Callable[..., Node]) -> None:
    node = start_node(CONFIG)
    with node.client(tenant=3, key=KEY) as c:
        ctl = c.control(tenant=3, key=KEY)
        digest = ctl.upload(_module(node, "bad"))
        ctl.swap(0, wasm=digest, function=141)
        for param, exc in ((1, FuelExhaustedError), (2, TrappedError)):
            header, payload = c.call_raw(141, b"x", param)
            with pytest.raises(exc):
                raise error_for_response(header, payload)
        header, payload = c.call_raw(141, b"ok", 0)
        assert header.status == Status.OK and payload == b"ok"


def test_forged_and_replayed_requests_are_unauthorized(start_node: Callable[..., Node]) -> None:
    node = start_node(CONFIG)
    with node.client() as c:
        with pytest.raises(UnauthorizedError):
            c.control(tenant=3, key=b"wrong key, sixteen").list()
        with pytest.raises(UnauthorizedError):
            c.control(tenant=4, key=KEY).list()
        env = encode_envelope(
            OP_LIST, b"", tenant=3, timestamp_ms=time.time_ns() // 1_000_000, nonce=9, key=KEY
        )
        assert c.call_raw(FN_CONTROL, env)[0].status == Status.OK
        assert c.call_raw(FN_CONTROL, env)[0].status == Status.UNAUTHORIZED


def test_envelopes_match_the_vectors() -> None:
    """``encode_envelope`` against ``docs/vectors/control.json`` (no node needed)."""
    import json

    path = Path(__file__).resolve().parents[2] / "docs" / "vectors" / "control.json"
    vectors = json.loads(path.read_text())["vectors"]
    ops = {
        "upload": 1,
        "swap": 2,
        "list": 3,
        "unload": 4,
        "hello": 5,
        "replicate": 6,
        "shrink": 7,
        "resize": 8,
    }
    checked = 0
    for v in vectors:
        if not (v["valid"] and v["mac_ok"]):
            continue
        op = v["op"]
        kind = op["kind"]
        if kind in ("list", "hello"):
            body = b""
        elif kind == "upload":
            body = bytes.fromhex(op["module"])
        elif kind == "unload":
            body = bytes.fromhex(op["digest"]) + (b"\x01" if op.get("force") else b"")
        elif kind == "resize":
            body = op["name"].encode()
        elif kind == "shrink":
            body = op["keep"].to_bytes(2, "little") + bytes([op["function"], 0])
        else:
            first = op["n"] if kind == "replicate" else op["slot"]
            body = first.to_bytes(2, "little") + bytes([op["function"], 0 if op["wasm"] is None else 1])
            if op["wasm"] is not None:
                body += bytes.fromhex(op["wasm"])
        env = encode_envelope(
            ops[kind],
            body,
            tenant=v["tenant"],
            timestamp_ms=v["timestamp_ms"],
            nonce=v["nonce"],
            key=bytes.fromhex(v["key"]),
        )
        assert env.hex() == v["envelope"], v["note"]
        checked += 1
    assert checked == 13


SPARE_CONFIG = f"""
[metrics]
listen = ""
[[slots]]
function = "echo"
[[slots]]
function = "echo"
spare = true
[[slots]]
function = "echo"
spare = true
[autoscale]
period_ms = 1000
grow_periods = 1000000
shrink_periods = 1000000
[control]
fuel = 5000000
[[control.tenants]]
id = 3
key = "{KEY.hex()}"
"""


TEMPLATE_CONFIG = (
    CONFIG
    + """
[[control.templates]]
name = "sorting"
slots = ["topk", "minmax"]
"""
)


def test_resize_to_a_template(start_node: Callable[..., Node]) -> None:
    """RESIZE moves the slots to a configured template; an unknown one is BAD_INPUT."""
    node = start_node(TEMPLATE_CONFIG)
    with node.client() as c:
        ctl = c.control(tenant=3, key=KEY)
        answer = ctl.resize("sorting")
        assert answer["template"] == "sorting" and answer["slots"] == [0, 1]
        assert [s["name"] for s in ctl.list()["slots"]] == ["topk", "minmax"]
        with pytest.raises(BadInputError):
            ctl.resize("nope")
        with pytest.raises(ValueError):
            ctl.resize("")


def test_replicate_into_spares_and_forced_unload(start_node: Callable[..., Node]) -> None:
    """REPLICATE loads into spare slots, all or nothing; a forced UNLOAD swaps the module out
    of its slot (back to spare) and removes it; SHRINK gives replicas back to spare."""
    node = start_node(SPARE_CONFIG)
    with node.client(tenant=3, key=KEY) as c:
        ctl = c.control(tenant=3, key=KEY)
        digest = ctl.upload(_module(node, "add"))
        answer = ctl.replicate(1, wasm=digest, function=140)
        assert answer["slots"] == [1] and answer["function"] == 140
        header, payload = c.call_raw(140, b"\x01", 2)
        assert header.status == Status.OK and payload == b"\x03"
        with pytest.raises(BusyError) as busy:
            ctl.replicate(2, builtin="minmax")  # one spare left: nothing happens
        assert busy.value.detail == 1
        with pytest.raises(BadInputError):
            ctl.unload(digest)  # in use, no force
        report = ctl.unload(digest, force=True)
        assert report is not None and len(report["swapped_out"]) == 1
        assert report["swapped_out"][0]["target"]["name"] == "echo"
        assert c.call_raw(140, b"\x01", 2)[0].status == Status.UNKNOWN_FUNCTION
        assert ctl.list()["modules"] == []
        assert ctl.replicate(2, builtin="minmax")["slots"] == [1, 2]
        assert ctl.shrink("minmax", keep=1)["slots"] == [2]
        assert ctl.shrink("minmax")["slots"] == [1]
        assert ctl.replicate(2, builtin="topk")["slots"] == [1, 2]
        with pytest.raises(ValueError):
            ctl.replicate(0, builtin="echo")
