"""The header codec against docs/vectors/headers.json (byte for byte), plus codec edge cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offrac import (
    FUNCTION_IDS,
    HEADER_LEN,
    REQUEST_MAGIC,
    RESPONSE_MAGIC,
    VERSION,
    FunctionId,
    HeaderError,
    Hop,
    RequestHeader,
    ResponseHeader,
    Status,
    encode_request,
    function_id,
)
from offrac.protocol import HEADER_ERROR_KINDS
from offrac.registry import FUNCTIONS

REPO = Path(__file__).resolve().parents[2]
VECTORS = json.loads((REPO / "docs" / "vectors" / "headers.json").read_text())

VALID = [v for v in VECTORS["requests"] if v["valid"]]
INVALID = [v for v in VECTORS["requests"] if not v["valid"]]
RESPONSES = VECTORS["responses"]


def _ids(vs: list[dict[str, Any]]) -> list[str]:
    return [v["note"] for v in vs]


def _request_from_fields(f: dict[str, Any]) -> RequestHeader:
    return RequestHeader(
        request_id=f["request_id"],
        payload_len=f["payload_len"],
        tenant=f["tenant"],
        hop_count=f["hop_count"],
        hop_index=f["hop_index"],
        reply_device=f["reply_device"],
        flags=f["flags"],
        budget_us=f["budget_us"],
        hops=tuple(Hop(h["function"], h["device"], h["param"]) for h in f["hops"]),
        origin_id=f.get("origin_id", 0),
    )


def test_vector_file_is_nontrivial() -> None:
    assert len(VALID) >= 4
    assert len(INVALID) >= 7
    assert len(RESPONSES) >= 4
    # every error kind used by the vectors is one the codec knows
    assert {v["error"] for v in INVALID} <= set(HEADER_ERROR_KINDS)


@pytest.mark.parametrize("vec", VALID, ids=_ids(VALID))
def test_request_encode_matches_vector(vec: dict[str, Any]) -> None:
    encoded = _request_from_fields(vec["fields"]).encode()
    assert len(encoded) in (HEADER_LEN, 2 * HEADER_LEN)  # 128 with the hop extension
    assert encoded.hex() == vec["hex"]


@pytest.mark.parametrize("vec", VALID, ids=_ids(VALID))
def test_request_decode_matches_vector(vec: dict[str, Any]) -> None:
    decoded = RequestHeader.decode(bytes.fromhex(vec["hex"]))
    assert decoded == _request_from_fields(vec["fields"])
    # and it round-trips
    assert decoded.encode().hex() == vec["hex"]


@pytest.mark.parametrize("vec", INVALID, ids=_ids(INVALID))
def test_invalid_request_raises_named_kind(vec: dict[str, Any]) -> None:
    raw = bytes.fromhex(vec["hex"])
    with pytest.raises(HeaderError) as info:
        RequestHeader.decode(raw)
    assert info.value.kind == vec["error"]
    assert info.value.fatal == (vec["error"] in ("BadMagic", "BadVersion"))
    if vec["error"] != "BadMagic":
        # the id is at a fixed offset and still reported (the node echoes it)
        assert info.value.request_id == vec["fields"]["request_id"]


@pytest.mark.parametrize("vec", INVALID, ids=_ids(INVALID))
def test_invalid_fields_encode_to_vector_bytes(vec: dict[str, Any]) -> None:
    """encode() writes the fields it is given, so invalid headers can be built for fault tests.

    Magic and version are constants of the encoder: for those vectors every other byte must match.
    """
    encoded = _request_from_fields(vec["fields"]).encode()
    expected = bytes.fromhex(vec["hex"])
    if vec["error"] == "BadMagic":
        assert encoded[2:] == expected[2:] and encoded[:2] != expected[:2]
    elif vec["error"] == "BadVersion":
        assert encoded[:2] + encoded[3:] == expected[:2] + expected[3:] and encoded[2] != expected[2]
    elif vec["error"] == "ReservedBytes" and len(expected) > HEADER_LEN:
        # the encoder always zeroes the extension's reserved bytes (offsets 40..64 of it)
        assert encoded[: HEADER_LEN + 40] == expected[: HEADER_LEN + 40] and encoded != expected
    else:
        assert encoded == expected


@pytest.mark.parametrize("vec", RESPONSES, ids=_ids(RESPONSES))
def test_response_decode_matches_vector(vec: dict[str, Any]) -> None:
    h = ResponseHeader.decode(bytes.fromhex(vec["hex"]))
    f = vec["fields"]
    assert isinstance(h.status, Status)
    assert int(h.status) == f["status"]
    for name in (
        "hop_index",
        "device",
        "request_id",
        "payload_len",
        "tenant",
        "reassembly_ns",
        "queue_ns",
        "exec_ns",
        "detail",
    ):
        assert getattr(h, name) == f[name], name


@pytest.mark.parametrize("vec", RESPONSES, ids=_ids(RESPONSES))
def test_response_encode_matches_vector(vec: dict[str, Any]) -> None:
    f = dict(vec["fields"])
    f["status"] = Status(f["status"])
    assert ResponseHeader(**f).encode().hex() == vec["hex"]


def test_magic_bytes_on_the_wire() -> None:
    req = RequestHeader.single(1, FunctionId.ECHO).encode()
    assert req[:2] == b"QO" and REQUEST_MAGIC == 0x4F51
    resp = ResponseHeader(Status.OK).encode()
    assert resp[:2] == b"RS" and RESPONSE_MAGIC == 0x5352
    assert req[2] == resp[2] == VERSION == 1


def _patched(offset: int, value: bytes) -> bytes:
    b = bytearray(RequestHeader.single(42, FunctionId.TOPK, 3, 12).encode())
    b[offset : offset + len(value)] = value
    return bytes(b)


@pytest.mark.parametrize(("offset", "budget"), [(21, 1), (22, 256), (23, 65536)])
def test_budget_is_a_24_bit_little_endian_field(offset: int, budget: int) -> None:
    assert RequestHeader.decode(_patched(offset, b"\x01")).budget_us == budget


def test_budget_out_of_range_is_refused_by_the_encoder() -> None:
    with pytest.raises(ValueError):
        RequestHeader(budget_us=1 << 24).encode()


def test_validation_order_follows_the_node() -> None:
    # bad magic wins over everything, bad version over the rest, flags before hop count
    with pytest.raises(HeaderError, match="BadMagic"):
        RequestHeader.decode(_patched(0, b"\0\0\x07\x01"))
    with pytest.raises(HeaderError) as info:
        RequestHeader.decode(_patched(2, b"\x07\x01\x00\x00\x00"))
    assert info.value.kind == "BadVersion"
    with pytest.raises(HeaderError) as info:
        RequestHeader.decode(_patched(3, b"\x80\x00\x00\x09"))
    assert info.value.kind == "ReservedFlags"


@pytest.mark.parametrize("hop", [1, 2, 3])
def test_unused_hop_any_nonzero_byte(hop: int) -> None:
    for field_off in range(10):
        with pytest.raises(HeaderError) as info:
            RequestHeader.decode(_patched(24 + 10 * hop + field_off, b"\x01"))
        assert info.value.kind == "UnusedHop"


def test_short_header_rejected() -> None:
    with pytest.raises(HeaderError) as info:
        RequestHeader.decode(b"\0" * 63)
    assert info.value.kind == "ShortHeader"
    with pytest.raises(HeaderError):
        ResponseHeader.decode(b"\0" * 65)


def test_response_decode_errors() -> None:
    good = bytearray(ResponseHeader(Status.OK, request_id=5).encode())
    bad_magic = bytearray(good)
    bad_magic[0] = 0x51
    with pytest.raises(HeaderError, match="BadMagic"):
        ResponseHeader.decode(bad_magic)
    bad_version = bytearray(good)
    bad_version[2] = 2
    with pytest.raises(HeaderError, match="BadVersion"):
        ResponseHeader.decode(bad_version)
    bad_status = bytearray(good)
    bad_status[4] = 18
    with pytest.raises(HeaderError) as info:
        ResponseHeader.decode(bad_status)
    assert info.value.kind == "UnknownStatus"


def test_encode_range_checks() -> None:
    with pytest.raises(ValueError):
        RequestHeader(request_id=2**64).encode()
    with pytest.raises(ValueError):
        RequestHeader(payload_len=-1).encode()
    with pytest.raises(ValueError):
        RequestHeader(tenant=1 << 16).encode()
    with pytest.raises(ValueError):
        Hop(256, 0, 0).encode()
    with pytest.raises(TypeError):
        RequestHeader(request_id=1.5).encode()  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        RequestHeader(hops=(Hop(),) * 9)


def test_encode_request_single_hop() -> None:
    wire = encode_request(7, FunctionId.TOPK, b"\x01\x00\x00\x00" * 3, param=2, tenant=9)
    h = RequestHeader.decode(wire[:HEADER_LEN])
    assert wire[HEADER_LEN:] == b"\x01\x00\x00\x00" * 3
    assert (h.request_id, h.payload_len, h.tenant, h.hop_count, h.hop_index) == (7, 12, 9, 1, 0)
    assert h.current_hop == Hop(1, 0xFF, 2)
    assert h.reply_device == 0xFF


def test_status_and_function_tables() -> None:
    assert [s.name for s in Status] == [
        "OK",
        "BUSY",
        "UNKNOWN_FUNCTION",
        "TOO_LARGE",
        "MALFORMED",
        "BAD_INPUT",
        "INTERNAL",
        "UNSUPPORTED_VERSION",
        "TIMEOUT",
        "SHUTTING_DOWN",
        "UNSUPPORTED",
        "UNREACHABLE",
        "UNAUTHORIZED",
        "TRAPPED",
        "FUEL_EXHAUSTED",
        "QUOTA_EXCEEDED",
        "UNKNOWN_BUFFER",
        "BUFFER_EXISTS",
    ]
    assert [int(s) for s in Status] == list(range(18))
    assert list(FUNCTION_IDS.items())[:6] == [
        ("echo", 0),
        ("topk", 1),
        ("logit", 2),
        ("minmax", 3),
        ("matmul", 4),
        ("spin", 5),
    ]
    assert {f.name: f.id for f in FUNCTIONS} == FUNCTION_IDS
    assert function_id("TopK") == 1
    assert function_id(200) == 200
    with pytest.raises(ValueError):
        function_id("nope")
    with pytest.raises(ValueError):
        function_id(256)
    assert Status.SHUTTING_DOWN.closes_connection and not Status.BUSY.closes_connection
    # A budget, forward or reassembly TIMEOUT keeps the connection; only a stall closes it.
    assert not Status.TIMEOUT.closes_connection


@settings(max_examples=300, deadline=None)
@given(
    request_id=st.integers(0, 2**64 - 1),
    hops=st.lists(
        st.builds(Hop, st.integers(0, 255), st.integers(0, 255), st.integers(0, 2**64 - 1)),
        min_size=1,
        max_size=8,
    ),
    payload_len=st.integers(0, 2**32 - 1),
    tenant=st.integers(0, 2**16 - 1),
    reply_device=st.integers(0, 255),
    budget_us=st.integers(0, 2**24 - 1),
    trace=st.booleans(),
)
def test_the_clients_header_shortcut_encodes_exactly_the_header(
    request_id: int,
    hops: list[Hop],
    payload_len: int,
    tenant: int,
    reply_device: int,
    budget_us: int,
    trace: bool,
) -> None:
    args = (request_id, hops, payload_len, tenant, reply_device)
    want = RequestHeader.chain(*args, budget_us=budget_us, trace=trace).encode()
    assert RequestHeader.encode_chain(*args, budget_us=budget_us, trace=trace) == want


def test_the_header_shortcut_names_bad_fields() -> None:
    with pytest.raises(ValueError, match="tenant"):
        RequestHeader.encode_chain(1, [Hop.local(0)], 0, 70_000)
    with pytest.raises(ValueError, match="budget_us"):
        RequestHeader.encode_chain(1, [Hop.local(0)], budget_us=-1)
    with pytest.raises(ValueError, match="1 to 8 hops"):
        RequestHeader.encode_chain(1, [Hop.local(0)] * 9)
