"""``offrac serve --datapath rtl``: the Verilated RTL request path serving real clients.

The same calls go to a software node and to an RTL node; the answers must be the same: the
Python client's arrays and bytes, and on a raw socket the response bytes themselves (all but
the node timings, bytes 24..48, which the software gives in nanoseconds and the RTL in cycles,
and likewise the queue and exec fields of a TRACE answer's per-hop timings block).
Skipped, with the reason, only when the binary was built without the ``rtl`` feature.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from offrac import BadInputError, Client, encode_request
from offrac.dlrm import DENSE, load_criteo

from conftest import REPO, Node


@pytest.fixture(scope="module")
def rtl(node_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    try:
        n = Node(node_bin, tmp_path_factory.mktemp("rtl"), extra=["--datapath", "rtl"])
    except RuntimeError as e:
        if "without the `rtl` feature" in str(e):
            pytest.skip(
                "this offrac was built without the `rtl` feature (Verilator): "
                "cargo build --release --workspace --bins --examples --features offrac-cli/rtl"
            )
        raise
    yield n
    assert n.alive(), n.stderr_tail()
    assert n.stop() == 0, n.stderr_tail()


def builtin_keys() -> list[int]:
    """The node's built-in MapId keys, from the software (the accel_oracle example)."""
    oracle = REPO / "target" / "release" / "examples" / "accel_oracle"
    out = subprocess.run([str(oracle), "builtin-state"], capture_output=True, text=True, check=True)
    state: dict[str, list[int]] = json.loads(out.stdout)
    keys = [int(k) for k in state["dictionary"]]
    assert len(keys) == 32768
    return keys


def test_echo_topk_mapid_same_as_software(node: Node, rtl: Node) -> None:
    rng = np.random.default_rng(20261126)
    keys = np.array(builtin_keys(), dtype=np.uint32)
    with Client(node.address) as sw, Client(rtl.address) as hw:
        for size in [1, 63, 64, 65, 1000, 4096, 16384, int(rng.integers(1, 16384))]:
            data = rng.bytes(size)
            assert hw.call("echo", data) == sw.call("echo", data) == data, size
        assert hw.call("echo", b"") == sw.call("echo", b"") == b""
        for n, k in [(1, 1), (16, 16), (17, 3), (100, 64), (1000, 10), (4096, 64), (50, 500)]:
            x = rng.integers(-(2**31), 2**31, size=n, dtype=np.int32)
            if n == 16:
                x = rng.integers(-3, 3, size=n, dtype=np.int32)  # duplicates
            want = sw.call("topk", x, k=k)
            np.testing.assert_array_equal(hw.call("topk", x, k=k), want, err_msg=f"{n} {k}")
        for n in [1, 16, 17, 1000, 3000]:
            ids = rng.choice(keys, size=n)
            misses = rng.integers(0, 2**32, size=n // 4 + 1, dtype=np.uint32)
            ids = np.concatenate([ids, misses]).astype(np.uint32)
            got = hw.call("mapid", ids)
            np.testing.assert_array_equal(got, sw.call("mapid", ids), err_msg=str(n))
            assert int(np.count_nonzero(got == 32768)) >= 1  # some misses among them
        # the same refusals
        for bad in ([1, 2, 3], 0), (b"", 1), (b"\x01\x00\x00\x00\x02\x00", 1):
            with pytest.raises(BadInputError):
                sw.call("topk", bad[0], k=bad[1])
            with pytest.raises(BadInputError):
                hw.call("topk", bad[0], k=bad[1])


def read_response(s: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        b = b""
        while len(b) < n:
            chunk = s.recv(n - len(b))
            assert chunk, "connection closed"
            b += chunk
        return b

    head = exactly(64)
    (plen,) = struct.unpack_from("<I", head, 16)
    return head + exactly(plen)


def test_response_bytes_same_as_software(node: Node, rtl: Node) -> None:
    """Byte for byte on a raw socket, timings aside; requests pipelined, bytes sent in odd pieces."""
    rng = np.random.default_rng(7)
    ints = rng.integers(-1000, 1000, size=500, dtype=np.int32).tobytes()
    reqs = [
        encode_request(1, 0, rng.bytes(777), tenant=9),
        encode_request(2, 1, ints, param=20, tenant=9),
        encode_request(3, 6, rng.integers(0, 2**32, size=300, dtype=np.uint32).tobytes(), tenant=9),
        encode_request(4, 0, b"", tenant=9),
    ]
    answers: list[list[bytes]] = []
    for n in (node, rtl):
        with socket.create_connection(n.addr, timeout=30) as s:
            wire = b"".join(reqs)
            for i in range(0, len(wire), 97):
                s.sendall(wire[i : i + 97])
            got = sorted((read_response(s) for _ in reqs), key=lambda b: b[8:16])
        answers.append(got)
    for sw, hw in zip(*answers, strict=True):
        assert len(sw) == len(hw)
        assert sw[:24] == hw[:24], (sw[:24].hex(), hw[:24].hex())
        assert sw[48:] == hw[48:]
        assert struct.unpack_from("<Q", hw, 24)[0] > 0  # reassembly, in cycles


def test_connections_reused(node: Node, rtl: Node) -> None:
    """More clients one after another than the RTL has connection indices (32), some closing in
    the middle of a request: each index is given back (those left mid-request once the RTL has
    taken their close) and every later client is served."""
    for i in range(40):
        with socket.create_connection(rtl.addr, timeout=30) as s:
            if i % 5 == 4:
                s.sendall(encode_request(i, 0, b"x" * 100)[:80])  # gone mid-request
                continue
            s.sendall(encode_request(i, 0, b"abc"))
            r = read_response(s)
            assert r[64:] == b"abc" and struct.unpack_from("<Q", r, 8)[0] == i
    ids = np.arange(0, 2**32, 2**32 // 700, dtype=np.uint32)
    with Client(node.address) as sw, Client(rtl.address) as hw:
        np.testing.assert_array_equal(hw.call("mapid", ids), sw.call("mapid", ids))
        keys = np.array(builtin_keys()[:500], dtype=np.uint32)
        want = sw.call("mapid", keys)
        assert int(np.count_nonzero(want < 32768)) == 500  # all hits
        np.testing.assert_array_equal(hw.call("mapid", keys), want)


def test_close_mid_request_frees_the_pool(node: Node, rtl: Node) -> None:
    """While one client stays connected, 40 clients (more than the RTL's 16 reassembly buffers and 32
    connection indices) each send a header and half of its payload, or part of a header, and
    disconnect: the RTL is told each close and frees the partial request's buffer (the core's
    handle_close), so no buffer or index leaks; a full-size call then succeeds on the client that
    stayed and on a new one."""
    rng = np.random.default_rng(12)
    with Client(rtl.address, busy_retries=0) as keeper:
        assert keeper.call("echo", b"hello") == b"hello"
        for i in range(40):
            wire = encode_request(1000 + i, 0, rng.bytes(12000))
            cut = 40 if i % 4 == 3 else 64 + 6000  # part of the header, else half the payload
            with socket.create_connection(rtl.addr, timeout=30) as s:
                s.sendall(wire[:cut])
            # the next client comes only once this one is gone (the RTL holds its partial request)
            time.sleep(0.02)
        time.sleep(0.3)
        big = rng.bytes(16384)
        assert keeper.call("echo", big) == big  # not BUSY: a buffer is free
        with Client(rtl.address, busy_retries=0) as late, Client(node.address) as sw:
            x = rng.integers(-1000, 1000, size=4096, dtype=np.int32)
            assert late.call("echo", big) == big
            np.testing.assert_array_equal(late.call("topk", x, k=8), sw.call("topk", x, k=8))


HOSTED = {0, 1, 3, 6, 7, 8}  # echo, top-k, min-max, MapId, SparseTransform, Bucketize: the RTL top's
CRITEO = REPO / "data" / "criteo-sample" / "criteo_sample.csv"


def same_answer(sw: bytes, hw: bytes, what: str) -> None:
    """The same response but the timings (bytes 24..48) and, on an error, the message text the RTL
    does not send."""
    assert len(sw) >= 64 and len(hw) >= 64, what
    same = [*range(16), 20, 21, 22, 23]  # all but payload_len
    assert [hw[i] for i in same] == [sw[i] for i in same], (what, sw[:24].hex(), hw[:24].hex())
    assert hw[48:64] == sw[48:64], (what, "detail")
    if struct.unpack_from("<H", sw, 4)[0] == 0:
        assert hw[16:20] == sw[16:20] and hw[64:] == sw[64:], what
    else:
        assert struct.unpack_from("<I", hw, 16)[0] == 0 and len(hw) == 64, what


def test_dlrm_functions_same_as_software(node: Node, rtl: Node) -> None:
    """Min-max (3), SparseTransform (7) and Bucketize (8, the node's built-in border set, loaded
    through the RTL's configuration stream) on the real Criteo rows of data/criteo-sample: the same
    response bytes from both nodes, and the same arrays through the client."""
    criteo = load_criteo(CRITEO)
    dense = np.nan_to_num(criteo.dense, nan=0.0).astype(np.float32)
    counts = criteo.dense[~np.isnan(criteo.dense)].astype(np.float32)
    seed = np.array([0, 4.2, 0, -0.0, 7.1], dtype=np.float32)
    calls: list[tuple[str, int, int, bytes]] = [
        ("minmax one row", 3, 0, dense[0].tobytes()),
        ("minmax all rows", 3, 0, dense.tobytes()),
        ("minmax with NaN", 3, 0, criteo.dense[:20].astype(np.float32).tobytes()),
        ("minmax empty", 3, 0, b""),
        ("minmax ragged", 3, 0, dense[0].tobytes()[:-1]),
        ("sparse rows", 7, DENSE, dense.tobytes()),
        ("sparse one row", 7, 0, dense[:40].tobytes()),
        ("sparse seed 001", 7, 0, seed.tobytes()),
        ("sparse not rows", 7, 12, dense[:3].tobytes()),
        ("sparse empty", 7, DENSE, b""),
        ("bucketize counts", 8, 0, counts.tobytes()),
        ("bucketize with NaN", 8, 0, criteo.dense[:20].astype(np.float32).tobytes()),
        ("bucketize set 1", 8, 1, counts[:100].tobytes()),
        ("bucketize ragged", 8, 0, counts[:10].tobytes()[:-2]),
    ]
    for what, fn, param, payload in calls:
        wire = encode_request(len(what), fn, payload, param=param, tenant=3)
        same_answer(exchange(node.addr, wire), exchange(rtl.addr, wire), what)
    with Client(node.address) as sw, Client(rtl.address) as hw:
        np.testing.assert_array_equal(hw.call("minmax", dense[:50]), sw.call("minmax", dense[:50]))
        a, b = hw.call("sparsetransform", dense, cols=DENSE), sw.call("sparsetransform", dense, cols=DENSE)
        np.testing.assert_array_equal(a.offsets, b.offsets)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.values, b.values)
        np.testing.assert_array_equal(hw.call("bucketize", counts), sw.call("bucketize", counts))
        with pytest.raises(BadInputError):
            hw.call("bucketize", counts, set=1)


HEADER_VECTORS: list[dict[str, Any]] = json.loads((REPO / "docs" / "vectors" / "headers.json").read_text())[
    "requests"
]

VECTOR_IDS = [str(v.get("note", i)) for i, v in enumerate(HEADER_VECTORS)]


def exchange(addr: tuple[str, int], wire: bytes) -> bytes:
    """One request on a fresh connection: its whole answer, or what came before the node closed."""
    with socket.create_connection(addr, timeout=30) as s:
        s.sendall(wire)
        got = b""
        # header, the per-hop timings block when flagged HOP_TIMES, then payload_len bytes
        while len(got) < 64 or len(got) < 64 + 64 * (got[3] & 1) + struct.unpack_from("<I", got, 16)[0]:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            got += chunk
        return got


@pytest.mark.parametrize("vec", HEADER_VECTORS, ids=VECTOR_IDS)
def test_header_vectors_answered_as_by_software(node: Node, rtl: Node, vec: dict[str, Any]) -> None:
    """Every request vector of docs/vectors/headers.json, valid or not, sent to both nodes with its
    payload: the same status, request id, hop index and detail, and for OK the same payload.

    Documented differences: refusals from the RTL carry no message text (payload_len 0), and a
    function the RTL does not host at hop 0 is refused ``UNKNOWN_FUNCTION`` naming it. A TRACE
    request's per-hop timings block: the same flags, length and per record the same device and
    ``ran`` bytes (and zero records alike); its queue and exec fields are timings (cycles in the
    RTL, docs/rtl.md), compared as present (exec non-zero) where a hop ran."""
    raw = bytes.fromhex(vec["hex"])
    fields = vec["fields"]
    size = fields["payload_len"] if vec["valid"] and fields["payload_len"] <= 1 << 16 else 0
    payload = np.random.default_rng(size).integers(-(2**20), 2**20, size=(size + 3) // 4, dtype=np.int32)
    wire = raw + payload.tobytes()[:size]
    hw = exchange(rtl.addr, wire)
    assert len(hw) >= 64, f"the RTL node closed without an answer: {hw!r}"
    first = fields["hops"][0]
    if vec["valid"] and first["device"] == 255 and first["function"] not in HOSTED:
        status, detail = struct.unpack_from("<H", hw, 4)[0], struct.unpack_from("<Q", hw, 48)[0]
        assert (status, hw[6], detail) == (2, 0, first["function"]), hw[:64].hex()
        return
    sw = exchange(node.addr, wire)
    same = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 20, 21, 22, 23)  # all but payload_len
    assert [hw[i] for i in same] == [sw[i] for i in same], (sw[:24].hex(), hw[:24].hex())
    assert hw[48:64] == sw[48:64], "detail"
    if sw[3] & 1:  # HOP_TIMES (the same in both: byte 3 is compared above)
        assert fields["flags"] & 2, "a per-hop timings block for a request not flagged TRACE"
        sw_block, hw_block = sw[64:128], hw[64:128]
        for i in range(8):
            s_rec, h_rec = sw_block[8 * i : 8 * i + 8], hw_block[8 * i : 8 * i + 8]
            assert h_rec[:2] == s_rec[:2], (i, sw_block.hex(), hw_block.hex())  # device, ran
            if s_rec[1]:
                assert struct.unpack_from("<I", h_rec, 4)[0] > 0, (i, hw_block.hex())  # exec
            else:
                assert h_rec == s_rec == bytes(8), (i, sw_block.hex(), hw_block.hex())
        assert any(sw_block[8 * i + 1] for i in range(8)), "no hop ran"
        sw, hw = sw[:64] + sw[128:], hw[:64] + hw[128:]
    elif fields["flags"] & 2 and vec["valid"]:
        assert struct.unpack_from("<H", sw, 4)[0] != 0, "a hop's answer to TRACE without its block"
    if struct.unpack_from("<H", sw, 4)[0] == 0:
        assert hw[64:] == sw[64:]
    else:
        assert struct.unpack_from("<I", hw, 16)[0] == 0 and len(hw) == 64


def test_traced_chain_reports_each_hop_as_the_software_does(node: Node, rtl: Node) -> None:
    """A TRACE chain of three local hops (min-max, echo, Bucketize) through the client: the same
    result from both nodes, and the same per-hop block structure (which device ran which hop); the
    RTL's exec fields are cycles, each at least one, adding up to the header's exec."""
    criteo = load_criteo(CRITEO)
    x = np.nan_to_num(criteo.dense[:8], nan=0.0).astype(np.float32).ravel()
    got: list[tuple[Any, Any]] = []
    for n in (node, rtl):
        with Client(n.address, timeout=30, trace=True) as c:
            got.append(c.call_chain(["minmax", "echo", "bucketize"], x, return_info=True))
    (sw_out, sw_info), (hw_out, hw_info) = got
    np.testing.assert_array_equal(hw_out, sw_out)
    assert sw_info.hop_times is not None and hw_info.hop_times is not None
    ran = [(h.device, h.ran) for h in hw_info.hop_times]
    assert ran == [(h.device, h.ran) for h in sw_info.hop_times] == [(0, True)] * 3 + [(0, False)] * 5
    assert all(h.exec_ns >= 1 for h in hw_info.hop_times[:3])
    assert sum(h.exec_ns for h in hw_info.hop_times) == hw_info.exec_ns


RTL_MAX_PAYLOAD = (
    2 * 1024 * 1024
)  # the Verilated instance's MAX_PAYLOAD: the software node's default max_payload
RTL_SLOTS = "".join(
    f'[[slots]]\nfunction = "{f}"\n'
    for f in ("echo", "topk", "minmax", "mapid", "sparsetransform", "bucketize")
)


def test_payloads_up_to_the_software_default_max_payload(node: Node, rtl: Node) -> None:
    """Payloads past the old 16 KiB up to exactly the default max_payload (2 MiB) answered as the
    software answers them, and one byte more refused TOO_LARGE with the maximum as detail by both."""
    rng = np.random.default_rng(2)
    with Client(node.address, timeout=120) as sw, Client(rtl.address, timeout=120) as hw:
        for size in [16385, 65536 + 3, 1 << 20, RTL_MAX_PAYLOAD]:
            data = rng.bytes(size)
            assert hw.call("echo", data) == data, size
        x = rng.standard_normal(RTL_MAX_PAYLOAD // 4).astype(np.float32)
        np.testing.assert_array_equal(hw.call("minmax", x), sw.call("minmax", x))
        ids = rng.integers(0, 2**32, size=(1 << 18) + 5, dtype=np.uint32)
        np.testing.assert_array_equal(hw.call("mapid", ids), sw.call("mapid", ids))
        x = rng.integers(-(2**31), 2**31, size=RTL_MAX_PAYLOAD // 4, dtype=np.int32)
        np.testing.assert_array_equal(hw.call("topk", x, k=64), sw.call("topk", x, k=64))
    # one byte over: the header alone is enough for both to refuse it
    for size in (RTL_MAX_PAYLOAD + 1, 2**32 - 1):
        wire = encode_request(77, 0, b"", tenant=5)
        wire = wire[:16] + struct.pack("<I", size) + wire[20:]
        sw_ans, hw_ans = exchange(node.addr, wire), exchange(rtl.addr, wire)
        same_answer(sw_ans, hw_ans, f"too large {size}")
        assert struct.unpack_from("<H", hw_ans, 4)[0] == 3  # TOO_LARGE
        assert struct.unpack_from("<Q", hw_ans, 48)[0] == RTL_MAX_PAYLOAD


def test_config_state_loaded_into_the_rtl(node_bin: Path, start_node: Any, tmp_path: Path) -> None:
    """``--datapath rtl --config FILE``: the file's MapId dictionary (a key file, repeats and all)
    and its Bucketize border sets, unlike the built-in ones, loaded through the RTL's configuration
    ports; the same answers as a software node started with the same file."""
    rng = np.random.default_rng(99)
    keys = rng.integers(0, 2**32, size=3000, dtype=np.uint32)
    keys[100:110] = keys[:10]  # repeats keep their first index
    (tmp_path / "keys.txt").write_text("".join(f"{int(k):08x}\n" for k in keys))
    borders = [
        [-1.5, 0.0, 2.0, 3.25, 1000.0],
        [float(b) for b in np.linspace(-50, 50, 32, dtype=np.float32)],
        [7.0],
    ]
    config = (
        RTL_SLOTS
        + f'[functions.mapid]\ndictionary = "{tmp_path / "keys.txt"}"\n'
        + f"[functions.bucketize]\nborders = {json.dumps(borders)}\n"
    )
    sw = start_node(config)
    hw = Node(node_bin, tmp_path / "rtl", config=config, extra=["--datapath", "rtl"])
    try:
        ids = np.concatenate([rng.choice(keys, size=2000), rng.integers(0, 2**32, size=500, dtype=np.uint32)])
        ids = ids.astype(np.uint32)
        x = np.concatenate(
            [rng.uniform(-60, 60, size=3000), [-1.5, 0.0, -0.0, 2.0, 1000.0, 1e9, -np.inf, np.inf, 7.0]]
        ).astype(np.float32)
        with Client(sw.address) as s, Client(hw.address) as h:
            want = s.call("mapid", ids)
            assert int(want.max()) == len(set(keys.tolist()))  # the file's D, not 32768
            np.testing.assert_array_equal(h.call("mapid", ids), want)
            for b in range(3):
                want = s.call("bucketize", x, set=b)
                np.testing.assert_array_equal(h.call("bucketize", x, set=b), want, err_msg=str(b))
            with pytest.raises(BadInputError):
                s.call("bucketize", x, set=3)
            with pytest.raises(BadInputError):
                h.call("bucketize", x, set=3)
        for param in (0, 1, 3):
            wire = encode_request(param, 8, x[:40].tobytes(), param=param, tenant=4)
            same_answer(exchange(sw.addr, wire), exchange(hw.addr, wire), f"set {param}")
    finally:
        assert hw.alive(), hw.stderr_tail()
        assert hw.stop() == 0, hw.stderr_tail()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "[functions.mapid]\nkeys = [{}]\n".format(", ".join(str(i) for i in range(32769))),
            "[functions.mapid] dictionary = 32769 distinct keys",
        ),
        ("[functions.bucketize]\nborders = [[1.0], [2.0], [3.0], [4.0], [5.0]]\n", "BUCKET_SETS_MAX 4"),
        (f"[functions.bucketize]\nborders = [{list(range(33))}]\n", "border set 0 = 33 borders"),
        ('[[slots]]\nfunction = "logit"\n', '[[slots]] function = "logit" (2)'),
        ("max_payload = 16384\n", "max_payload = 16384"),
        ("[pool]\nbuffers = 17\n", "[pool] buffers = 17"),
        ("device_id = 3\n", "device_id = 3"),
        # the instance has two top-k slots and one MapId slot (SLOT_FUNCS)
        (
            '[[slots]]\nfunction = "topk"\n' * 2,
            '[[slots]] function = "topk" 3 times: the instance has 2 topk slots',
        ),
        (
            '[[slots]]\nfunction = "mapid"\n',
            '[[slots]] function = "mapid" 2 times: the instance has 1 mapid slot',
        ),
    ],
)
def test_config_the_rtl_cannot_host_is_refused(
    node_bin: Path, tmp_path: Path, extra: str, message: str
) -> None:
    """A dictionary larger than MapId's table, more border sets or borders than Bucketize holds, a
    function the RTL lacks, a payload limit or pool past its parameters: refused at start, before
    it listens, with a message naming the setting and the limit."""
    top_level = extra.startswith(("max_payload", "device_id"))  # keys before the first table
    config = extra + RTL_SLOTS if top_level else RTL_SLOTS + extra
    with pytest.raises(RuntimeError) as e:
        Node(node_bin, tmp_path, config=config, extra=["--datapath", "rtl"])
    if "without the `rtl` feature" in str(e.value):
        pytest.skip("built without the `rtl` feature")
    assert message in str(e.value), str(e.value)
    assert "--datapath rtl cannot host" in str(e.value)


RTL_TOPK_K_MAX = 256  # the Verilated instance's TOPK_K_MAX (was 64)


def test_topk_past_64(node: Node, rtl: Node) -> None:
    """Top-k with K past the old 64 up to the instance's TOPK_K_MAX, bit for bit with the software
    kernel (random, ascending, duplicates, the int32 extremes; K at n and past it); min(K, n) past
    TOPK_K_MAX is UNSUPPORTED naming the limit (the software has none), K past it with fewer
    elements is answered."""
    rng = np.random.default_rng(65)
    with Client(node.address) as sw, Client(rtl.address) as hw:
        for n, k in [(5000, 65), (5000, 100), (5000, RTL_TOPK_K_MAX), (256, 256), (200, 1000), (3000, 255)]:
            x = rng.integers(-(2**31), 2**31, size=n, dtype=np.int32)
            if k == 100:
                x = np.sort(x)  # ascending: every element enters the array
            if k == 255:
                x = rng.choice(np.array([-(2**31), -1, 0, 7, 2**31 - 1], dtype=np.int32), size=n)
            np.testing.assert_array_equal(
                hw.call("topk", x, k=k), sw.call("topk", x, k=k), err_msg=f"{n} {k}"
            )
    x = rng.integers(-1000, 1000, size=RTL_TOPK_K_MAX + 1, dtype=np.int32)
    wire = encode_request(5, 1, x.tobytes(), param=RTL_TOPK_K_MAX + 1, tenant=2)
    hw_ans = exchange(rtl.addr, wire)
    assert struct.unpack_from("<H", hw_ans, 4)[0] == 10, hw_ans[:64].hex()  # UNSUPPORTED
    assert struct.unpack_from("<Q", hw_ans, 48)[0] == RTL_TOPK_K_MAX
    assert struct.unpack_from("<H", exchange(node.addr, wire), 4)[0] == 0  # the software answers it


def slot_hops(n: Node) -> list[int]:
    """Stop the node; the hops each of the instance's slots started, from its last log line."""
    assert n.alive(), n.stderr_tail()
    assert n.stop() == 0, n.stderr_tail()
    text = n.stderr_path.read_text()
    m = re.search(r"slot_hops=\[([0-9, ]*)\]", text)
    assert m is not None, text[-2000:]
    return [int(v) for v in m.group(1).split(",")]


def concurrent_topk(n: Node, sw: Node, clients: int, calls: int) -> None:
    """`clients` threads, each its own connection, `calls` top-k calls of 16 KiB each; every answer
    as the software node's."""
    rng = np.random.default_rng(12)
    xs = [rng.integers(-(2**31), 2**31, size=4096, dtype=np.int32) for _ in range(clients * calls)]
    with Client(sw.address) as s:
        want = [s.call("topk", x, k=64) for x in xs]

    def run(c: int) -> None:
        with Client(n.address, timeout=120) as h:
            for i in range(c * calls, (c + 1) * calls):
                np.testing.assert_array_equal(h.call("topk", xs[i], k=64), want[i], err_msg=str(i))

    with ThreadPoolExecutor(clients) as ex:
        for f in [ex.submit(run, c) for c in range(clients)]:
            f.result()


def test_two_topk_slots_both_run(node: Node, node_bin: Path, tmp_path: Path) -> None:
    """A node configured with two top-k slots maps them onto the instance's two top-k slots (the slot
    mask): four concurrent clients of top-k are answered as the software answers them and both slots
    run (the driver's per-slot hop counts); with one top-k slot only slot 0 runs, the spare stays
    idle."""
    for topk_slots in (1, 2):
        config = RTL_SLOTS + '[[slots]]\nfunction = "topk"\n' * (topk_slots - 1)
        hw = Node(node_bin, tmp_path / f"rtl{topk_slots}", config=config, extra=["--datapath", "rtl"])
        try:
            concurrent_topk(hw, node, clients=4, calls=6)
        finally:
            hops = slot_hops(hw)
        # SLOT_FUNCS: top-k, top-k, echo, echo, min-max, MapId, SparseTransform, Bucketize
        assert len(hops) == 8, hops
        assert hops[0] + hops[1] == 24, hops
        if topk_slots == 1:
            assert hops[1] == 0, hops
        else:
            assert hops[0] > 0 and hops[1] > 0, hops
        assert hops[3] == 0, hops  # the second echo slot is not configured


@pytest.mark.parametrize("policy", ["rr", "jsq"])
def test_selector_policy_from_the_config(node: Node, node_bin: Path, tmp_path: Path, policy: str) -> None:
    """The node file's `[selector] policy` reaches the RTL's selector (cfg_slot_policy, at reset): with
    two top-k slots and one client calling top-k one call at a time (each answered before the next),
    RR alternates the slots (its turn moves past the chosen one), while JSQ always finds both queues
    empty and both slots idle and picks the lowest index, slot 0; the answers as the software's."""
    config = f'[selector]\npolicy = "{policy}"\n' + RTL_SLOTS + '[[slots]]\nfunction = "topk"\n'
    hw = Node(node_bin, tmp_path / f"rtl-{policy}", config=config, extra=["--datapath", "rtl"])
    try:
        concurrent_topk(hw, node, clients=1, calls=6)
    finally:
        hops = slot_hops(hw)
    # SLOT_FUNCS: top-k, top-k, echo, echo, min-max, MapId, SparseTransform, Bucketize
    assert hops[:2] == ([3, 3] if policy == "rr" else [6, 0]), hops
