"""The DLRM preprocessing operators (seed 001, Table I) served by a real node over loopback
TCP, each checked against a numpy reference on the 200 real Criteo rows in
``data/criteo-sample`` and on generated data (hypothesis), plus their bad-input answers."""

from __future__ import annotations

import datetime
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from offrac import BadInputError, Client, Step
from offrac.dlrm import (
    DENSE,
    SPARSE,
    CriteoBatch,
    CriteoShape,
    build_dictionary,
    hash_128_to_64,
    load_criteo,
    preprocess,
    preprocess_numpy,
    sigrid_hash,
)
from offrac.registry import CSR, Ragged

from conftest import Node

CRITEO = Path(__file__).resolve().parents[2] / "data" / "criteo-sample" / "criteo_sample.csv"
PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def criteo() -> CriteoBatch:
    return load_criteo(CRITEO)


def test_the_sample_is_the_documented_one(criteo: CriteoBatch) -> None:
    assert len(criteo) == 200 and int(criteo.label.sum()) == 49
    present = criteo.sparse[~criteo.sparse_missing]
    assert len(np.unique(present)) == 2265
    values, counts = np.unique(present, return_counts=True)
    assert (int(values[counts.argmax()]), int(counts.max())) == (0xA73EE510, 178)


def _combine(a: int, b: int) -> int:
    return int(hash_128_to_64(np.array([a], dtype=np.uint64), np.array([b], dtype=np.uint64))[0])


def _pairs(lists: list[list[int]]) -> list[tuple[list[int], list[int]]]:
    return list(zip(lists[0::2], lists[1::2], strict=True))


def _row_lists(batch: CriteoBatch) -> list[list[int]]:
    """Each Criteo row's present categorical ids, as an id list."""
    return [batch.sparse[i, ~batch.sparse_missing[i]].tolist() for i in range(len(batch))]


# -- per-operator checks against numpy references ---------------------------------------------


def test_mapid_maps_criteo_hashes_through_the_configured_dictionary(
    criteo: CriteoBatch, start_node: Callable[..., Node], tmp_path: Path
) -> None:
    keys = build_dictionary(criteo, min_count=3)
    assert 50 < len(keys) < 2265
    key_file = tmp_path / "keys.txt"
    key_file.write_text("# Criteo keys seen 3+ times\n" + "".join(f"{k:08x}\n" for k in keys))
    node = start_node(f'[functions.mapid]\ndictionary = "{key_file}"\n')
    index = {int(k): i for i, k in enumerate(keys)}
    ids = criteo.sparse[~criteo.sparse_missing]
    want = np.array([index.get(int(k), len(keys)) for k in ids], dtype=np.uint32)
    with node.client() as c:
        got = c.call("mapid", ids)
        assert got.dtype == np.uint32
        np.testing.assert_array_equal(got, want)
        assert c.describe()["functions"][6]["name"] == "mapid"
        with pytest.raises(BadInputError, match="multiple of 4"):
            c.call("mapid", b"\x01\x02\x03")


def test_mapid_builtin_dictionary_is_the_papers_size(client: Client) -> None:
    # The built-in keys are the low halves of twang_mix64(i), i < 32768.
    from offrac.dlrm import twang_mix64

    keys = (twang_mix64(np.arange(32768, dtype=np.uint64)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    first = {}
    for k in keys.tolist():
        first.setdefault(k, len(first))
    got = client.call("mapid", keys[:1000])
    np.testing.assert_array_equal(got, [first[k] for k in keys[:1000].tolist()])
    assert client.call("mapid", np.array([12345], dtype=np.uint32))[0] in (len(first), first.get(12345))


def test_sparsetransform_gives_the_csr_of_criteo_dense_rows(criteo: CriteoBatch, client: Client) -> None:
    dense = np.nan_to_num(criteo.dense, nan=0.0).astype(np.float32)
    csr = client.call("sparsetransform", dense, cols=DENSE)
    assert isinstance(csr, CSR) and len(csr) == len(criteo)
    rows, cols = np.nonzero(dense)
    np.testing.assert_array_equal(
        np.diff(csr.offsets.astype(np.int64)), np.bincount(rows, minlength=len(criteo))
    )
    np.testing.assert_array_equal(csr.indices, cols)
    np.testing.assert_array_equal(csr.values, dense[rows, cols])
    np.testing.assert_array_equal(csr.to_dense(DENSE), dense)
    # One row by default; the paper's example.
    one = client.call("sparsetransform", np.array([0, 4.2, 0, -0.0, 7.1], dtype=np.float32))
    assert one.indices.tolist() == [1, 4] and one.values.tolist() == np.float32([4.2, 7.1]).tolist()
    with pytest.raises(BadInputError, match="not whole rows of cols = 12"):
        client.call("sparsetransform", dense, cols=12)


@PROPS
@given(st.integers(1, 40), st.integers(1, 20), st.floats(0, 1), st.integers(0, 2**31))
def test_sparsetransform_round_trips_random_matrices(
    client: Client, rows: int, cols: int, density: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((rows, cols)).astype(np.float32)
    m[rng.random((rows, cols)) >= density] = 0.0
    csr = client.call("sparsetransform", m, cols=cols)
    np.testing.assert_array_equal(csr.to_dense(cols), m)
    assert int(csr.offsets[-1]) == int(np.count_nonzero(m))


def test_bucketize_matches_searchsorted_on_criteo_counts(
    criteo: CriteoBatch, start_node: Callable[..., Node]
) -> None:
    counts = criteo.dense[~np.isnan(criteo.dense)]
    default = np.array([0.0] + [2.0**e for e in range(21)], dtype=np.float32)
    own = [-1.0, 0.0, 5.5, 100.0, 1e4]
    node = start_node(f"[functions.bucketize]\nborders = [{default.tolist()}, {own}]\n")
    with node.client() as c:
        np.testing.assert_array_equal(
            c.call("bucketize", counts), np.searchsorted(default, counts, side="left")
        )
        np.testing.assert_array_equal(
            c.call("bucketize", counts, set=1), np.searchsorted(np.float32(own), counts, side="left")
        )
        # TorchArrow's docstring example.
        example = c.call("bucketize", [1, 2, 3, 5, 8, 10, 11], set=1)
        assert example.tolist() == np.searchsorted(np.float32(own), [1, 2, 3, 5, 8, 10, 11]).tolist()
        with pytest.raises(BadInputError, match="border set 2 is not configured"):
            c.call("bucketize", counts, set=2)
        with pytest.raises(BadInputError, match="NaN at index 1"):
            c.call("bucketize", [1.0, np.nan])


def test_sigridhash_is_torcharrows(criteo: CriteoBatch, client: Client) -> None:
    # The values of TorchArrow's own test: ids 1..16, salt 0, max_value 100.
    want = [60, 54, 54, 9, 4, 91, 11, 67, 79, 2, 25, 92, 98, 83, 66, 2]
    assert sigrid_hash(np.arange(1, 17), 0, 100).tolist() == want
    assert client.call("sigridhash", np.arange(1, 17), max_value=100).tolist() == want
    for j, (salt, size) in enumerate([(0, 1000), (-7, 2**31), (2**31 - 1, 1), (123, 10_000_019)]):
        ids = criteo.sparse[:, j]
        got = client.call("sigridhash", ids, max_value=size, salt=salt)
        np.testing.assert_array_equal(got, sigrid_hash(ids, salt, size))
    with pytest.raises(BadInputError, match="max_value 0 outside"):
        client.call("sigridhash", [1], param=0)
    r = subprocess.run(
        [*_cli(client), "sigridhash", "--data", "1,2,0x3", "--set", "max_value=100"], capture_output=True
    )
    assert r.returncode == 0 and r.stdout.decode().strip() == "60,54,54", r.stderr


def _lists(draw_rows: int, seed: int, vocab: int = 16) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab, size=rng.integers(0, 9)).tolist() for _ in range(draw_rows)]


def test_firstx_truncates_criteo_id_lists(criteo: CriteoBatch, client: Client) -> None:
    lists = _row_lists(criteo)
    for x in (1, 5, 26, 100):
        got = client.call("firstx", lists, x=x)
        assert isinstance(got, Ragged) and got.tolist() == [r[:x] for r in lists]
    with pytest.raises(BadInputError, match="at least 1"):
        client.call("firstx", lists, param=0)


def test_idlisttransform_intersects_pairs_of_lists(criteo: CriteoBatch, client: Client) -> None:
    lists = _row_lists(criteo) + _lists(40, 1) + [list(range(100)), list(range(50, 60)) * 2]
    got = client.call("idlisttransform", lists)
    want = [[v for v in a if v in set(b)] for a, b in _pairs(lists)]
    assert got.tolist() == want
    assert sum(map(len, want[:100])) > 0, "Criteo neighbours share some ids"
    with pytest.raises(BadInputError, match="even row count"):
        client.call("idlisttransform", lists[:3])


def test_cartesian_crosses_pairs_of_lists(criteo: CriteoBatch, client: Client) -> None:
    lists = [r[:4] for r in _row_lists(criteo)]
    got = client.call("cartesian", lists)
    want = [[_combine(x, y) & 0xFFFFFFFF for x in a for y in b] for a, b in _pairs(lists)]
    assert got.tolist() == want


def test_ngram_hashes_consecutive_ids(criteo: CriteoBatch, client: Client) -> None:
    lists = _row_lists(criteo)[:50] + _lists(20, 2)
    assert client.call("ngram", lists, n=1).tolist() == lists
    for n in (2, 3):
        want = []
        for r in lists:
            grams = []
            for i in range(len(r) - n + 1):
                h = r[i]
                for v in r[i + 1 : i + n]:
                    h = _combine(h, v)
                grams.append(h & 0xFFFFFFFF)
            want.append(grams)
        assert client.call("ngram", lists, n=n).tolist() == want
    with pytest.raises(BadInputError, match=r"outside 1\.\.=16"):
        client.call("ngram", lists, n=17)


@PROPS
@given(st.lists(st.lists(st.integers(0, 2**32 - 1), max_size=12), max_size=30), st.integers(1, 16))
def test_id_list_operators_keep_their_laws(client: Client, lists: list[list[int]], x: int) -> None:
    assert client.call("firstx", lists, x=x).tolist() == [r[:x] for r in lists]
    assert client.call("ngram", lists, n=1).tolist() == lists
    grams = client.call("ngram", lists, n=x)
    assert [len(g) for g in grams.tolist()] == [max(len(r) - x + 1, 0) for r in lists]
    even = lists[: len(lists) // 2 * 2]
    inter = client.call("idlisttransform", even).tolist()
    for (a, b), got in zip(_pairs(even), inter, strict=True):
        assert got == [v for v in a if v in b]


def test_getlocalhour_matches_datetime(client: Client) -> None:
    rng = np.random.default_rng(3)
    ts = np.concatenate([[0, 3599, 3600, 86399, 2**32 - 1], rng.integers(0, 2**32, 500)]).astype(np.uint32)
    for offset in (0, 3600, -3600, 5 * 3600 + 1800, -18 * 3600, 18 * 3600):
        tz = datetime.timezone(datetime.timedelta(seconds=offset))
        want = [datetime.datetime.fromtimestamp(int(t), tz).hour for t in ts]
        assert client.call("getlocalhour", ts, utc_offset_s=offset).tolist() == want
    with pytest.raises(BadInputError, match="outside"):
        client.call("getlocalhour", ts, utc_offset_s=18 * 3600 + 1)


def test_onehot_matches_an_identity_matrix(client: Client) -> None:
    ids = np.array([0, 3, 9, 3], dtype=np.uint32)
    got = client.call("onehot", ids, classes=10)
    np.testing.assert_array_equal(got.reshape(4, 10), np.eye(10, dtype=np.float32)[ids])
    with pytest.raises(BadInputError, match="id 9 at index 2 is not below classes = 9"):
        client.call("onehot", ids, classes=9)


def test_boxcox_matches_scipy_style_numpy(criteo: CriteoBatch, client: Client) -> None:
    x = (np.maximum(np.nan_to_num(criteo.dense, nan=0.0), 0) + 1).ravel().astype(np.float32)
    for lmbda in (0.0, 0.5, -1.0, 2.0, 0.1):
        got = client.call("boxcox", x, lmbda=lmbda)
        x64, l64 = x.astype(np.float64), float(np.float32(lmbda))
        want = np.log(x64) if lmbda == 0 else np.expm1(l64 * np.log(x64)) / l64
        np.testing.assert_allclose(got, want.astype(np.float32), rtol=2e-7, atol=0)
    with pytest.raises(BadInputError, match=r"value 0 at index 2: Box-Cox needs finite x > 0"):
        client.call("boxcox", [1.0, 2.0, 0.0], lmbda=1.0)
    with pytest.raises(BadInputError, match="must be finite"):
        client.call("boxcox", [1.0], param=0x7FC00000)


# -- chains, the preprocessing job, the CLI ------------------------------------------------------


def test_mapid_then_sparsetransform_chain_in_one_request(criteo: CriteoBatch, client: Client) -> None:
    """Seed 001 Fig. 6's pipeline: MapId's ids go on as 4-byte elements; zeros drop out."""
    ids = criteo.sparse[:10].ravel()
    mapped = client.call("mapid", ids)
    csr = client.call_chain(["mapid", Step("sparsetransform", cols=SPARSE)], ids)
    want = mapped.reshape(10, SPARSE).view(np.float32)
    np.testing.assert_array_equal(csr.to_dense(SPARSE).view(np.uint32), want.view(np.uint32) * (want != 0))


def test_preprocessing_job_matches_numpy_on_real_and_generated_rows(
    criteo: CriteoBatch, client: Client
) -> None:
    sizes = [1000 + 97 * j for j in range(SPARSE)]
    for batch in (criteo, CriteoShape.fit(criteo).sample(3000, seed=5)):
        got = preprocess(client, batch, sizes)
        want = preprocess_numpy(batch, sizes)
        np.testing.assert_array_equal(got.sparse, want.sparse)
        np.testing.assert_allclose(got.dense, want.dense, rtol=0, atol=2e-7)
        assert got.dense.shape == (len(batch), DENSE) and (got.dense >= 0).all() and (got.dense <= 1).all()
        assert all((got.sparse[:, j] < sizes[j]).all() for j in range(SPARSE))


def test_generator_keeps_the_samples_shape(criteo: CriteoBatch) -> None:
    shape = CriteoShape.fit(criteo)
    big = shape.sample(20_000, seed=1)
    np.testing.assert_allclose(
        np.isnan(big.dense).mean(axis=0), np.isnan(criteo.dense).mean(axis=0), atol=0.02
    )
    np.testing.assert_allclose(big.sparse_missing.mean(axis=0), criteo.sparse_missing.mean(axis=0), atol=0.02)
    # Hash frequencies stay heavy-headed: the most common C9 key keeps its share.
    share = (big.sparse[:, 8] == 0xA73EE510).mean()
    assert abs(share - (criteo.sparse[:, 8] == 0xA73EE510).mean()) < 0.03
    # ...with a long tail of keys never seen in the sample.
    assert len(np.unique(big.sparse[:, 2])) > 2 * len(np.unique(criteo.sparse[:, 2]))


def _cli(client: Client) -> Sequence[str]:
    import os

    binary = os.environ.get("OFFRAC_BIN", "target/release/offrac")
    host, port = client.address
    return [binary, "call", "--addr", f"{host}:{port}"]


def test_cli_speaks_every_layout(client: Client) -> None:
    def call(*args: str) -> str:
        r = subprocess.run([*_cli(client), *args], capture_output=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return r.stdout.decode().strip()

    assert call("firstx", "--data", "1,2,3;;0x10", "-p", "2") == "1,2;;16"
    assert call("sparsetransform", "--data", "0,4.5,0,7") == "1:4.5,3:7"
    assert call("idlisttransform", "--data", "3,1,2;2,3") == "3,2"
    r = subprocess.run([*_cli(client), "ngram", "--data", "1,2"], capture_output=True, timeout=30)
    assert r.returncode != 0 and b"ngram needs n" in r.stderr
    r = subprocess.run([*_cli(client), "sigridhash", "--data", "1", "--set", "salt=1"], capture_output=True)
    assert r.returncode != 0 and b"sigridhash needs max_value" in r.stderr, r.stderr
    r = subprocess.run(
        [*_cli(client), "sigridhash", "--data", "1", "--set", "max_value=-1"], capture_output=True
    )
    assert r.returncode != 0 and b"does not fit max_value" in r.stderr, r.stderr


def test_provision_sizes_slots_from_the_nodes_live_figures(start_node: Callable[..., Node]) -> None:
    import json
    import math
    import os

    node = start_node()
    binary = os.environ.get("OFFRAC_BIN", "target/release/offrac")
    prov = [binary, "provision", "--addr", node.address, "--size", "1024", "--target-gbps", "10"]
    r = subprocess.run([*prov, "--function", "mapid"], capture_output=True, timeout=30)
    assert r.returncode != 0 and b"no overhead figure yet" in r.stderr, r.stderr
    ids = np.arange(256, dtype=np.uint32)
    with node.client() as c:
        for _ in range(600):
            c.call("mapid", ids)
        # The figures reach describe answers within 50 ms (docs/protocol.md, "Describe").
        time.sleep(0.1)
        d = c.describe()["provisioning"]
    assert d["t_oh_ns"] is not None and d["t_oh_ns"] > 0
    (acc,) = [a for a in d["t_acc"] if a["name"] == "mapid"]
    assert acc["size_class"] == 1024 and acc["runs"] == 600 and acc["t_acc_ns"] > 0
    r = subprocess.run([*prov, "--function", "mapid", "--json"], capture_output=True, timeout=30)
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)
    want = math.ceil(10e9 / 8 * (row["t_oh_ns"] + row["t_acc_ns"]) * 1e-9 / 1024)
    assert row["function"] == "mapid" and row["slots"] == want
    r = subprocess.run([*prov, "--function", "logit"], capture_output=True, timeout=30)
    assert r.returncode != 0 and b"no execution figure for logit at 1024 bytes" in r.stderr


def test_per_tensor_operators_take_mini_batches_of_hundreds_of_kib(
    criteo: CriteoBatch, client: Client
) -> None:
    """§III-D: per-tensor operators run on whole mini-batches that the node reassembles."""
    big = CriteoShape.fit(criteo).sample(131_072 // SPARSE + 1, seed=9)
    ids = big.sparse.ravel()[:131_072]  # 512 KiB
    np.testing.assert_array_equal(
        client.call("sigridhash", ids, max_value=1_000_003, salt=-1), sigrid_hash(ids, -1, 1_000_003)
    )
    x = np.random.default_rng(4).standard_normal(65_536).astype(np.float32)  # 256 KiB
    got = client.call("minmax", x)
    np.testing.assert_allclose(got, (x - x.min()) / (x.max() - x.min()), rtol=0, atol=1e-6)
    lists = _lists(30_000, 7)
    assert client.call("firstx", lists, x=3).tolist() == [r[:3] for r in lists]


def test_logit_and_onehot_on_criteo_derived_and_generated_inputs(criteo: CriteoBatch, client: Client) -> None:
    """The remaining Table I rows on real and generated inputs: Logit of click-rate-like values
    made from Criteo counts, Onehot of MapId-style contiguous ids."""
    for batch in (criteo, CriteoShape.fit(criteo).sample(2000, seed=11)):
        counts = np.nan_to_num(batch.dense, nan=0.0).astype(np.float64)
        p = ((np.maximum(counts, 0) + 1) / (np.maximum(counts, 0).max(axis=0) + 2)).astype(np.float32).ravel()
        assert ((p > 0) & (p < 1)).all()
        want = np.log(p.astype(np.float64) / (1 - p.astype(np.float64))).astype(np.float32)
        got = client.call("logit", p)
        ulps = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))
        assert ulps.max() <= 1, f"logit off by {ulps.max()} ulp"
        ids = (batch.sparse[:, 5] % 37).astype(np.uint32)
        np.testing.assert_array_equal(
            client.call("onehot", ids, classes=37).reshape(-1, 37), np.eye(37, dtype=np.float32)[ids]
        )
