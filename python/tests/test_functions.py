"""Every built-in function on the real node against a numpy reference, including edge cases."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from offrac import BadInputError, Client, ResponseHeader, Status

from conftest import Node

SIZES = [1, 2, 7, 255, 256, 1000, 1024, 4096, 12345]
I32 = np.iinfo(np.int32)


@pytest.fixture(scope="module")
def rng() -> np.random.Generator:
    return np.random.default_rng(20240611)


@pytest.fixture(scope="module")
def mc(node: Node) -> Iterator[Client]:
    """One client for the module (the node fixture is module-scoped too)."""
    with node.client(busy_retries=20) as c:
        yield c


# ----------------------------------------------------------------------------- echo / spin


@pytest.mark.parametrize("size", [0, 1, 3, 256, 1024, 1500, 4096, 65537, 200_000])
def test_echo(mc: Client, size: int, rng: np.random.Generator) -> None:
    data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
    out, info = mc.call("echo", data, return_info=True)
    assert out == data
    assert isinstance(info, ResponseHeader)
    assert info.status == Status.OK and info.payload_len == size


def test_echo_header_fields(mc: Client) -> None:
    fut = mc.submit("echo", b"abc", tenant=0xBEEF, return_info=True)
    out, info = fut.result(10)
    assert out == b"abc"
    assert info.request_id == fut.request_id
    assert info.tenant == 0xBEEF
    assert info.hop_index == 0
    assert info.detail == 0


@pytest.mark.parametrize("size", [0, 1, 4097])
def test_spin_zero_echoes(mc: Client, size: int) -> None:
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert mc.call("spin", data, us=0) == data


def test_spin_takes_its_time(mc: Client) -> None:
    t0 = time.monotonic()
    out, info = mc.call("spin", b"xyz", us=20_000, return_info=True)
    elapsed = time.monotonic() - t0
    assert out == b"xyz"
    assert elapsed >= 0.019
    assert info.exec_ns >= 19_000_000, info
    assert info.exec_ns < 5_000_000_000


def test_spin_limit(mc: Client) -> None:
    with pytest.raises(BadInputError) as e:
        mc.call("spin", b"", us=1_000_001)
    assert e.value.status == Status.BAD_INPUT
    with pytest.raises(BadInputError):
        mc.call("spin", b"", us=2**64 - 1)


# ----------------------------------------------------------------------------- topk


def topk_ref(x: npt.NDArray[np.int32], k: int) -> npt.NDArray[np.int32]:
    return np.sort(x)[::-1][: min(k, x.size)]


@pytest.mark.parametrize("n", SIZES)
def test_topk(mc: Client, n: int, rng: np.random.Generator) -> None:
    x = rng.integers(I32.min, I32.max, n, dtype=np.int32, endpoint=True)
    for k in sorted({1, 3, 16, n, n + 5}):
        out = mc.call("topk", x, k=k)
        assert isinstance(out, np.ndarray) and out.dtype == np.int32
        np.testing.assert_array_equal(out, topk_ref(x, k), err_msg=f"n={n} k={k}")


def test_topk_duplicates_and_extremes(mc: Client, rng: np.random.Generator) -> None:
    x = rng.integers(-3, 3, 1001).astype(np.int32)
    x[[5, 500]] = I32.max
    x[[7, 900]] = I32.min
    for k in (1, 2, 3, 10, 1001, 5000):
        np.testing.assert_array_equal(mc.call("topk", x, k=k), topk_ref(x, k))
    allsame = np.full(300, -7, dtype=np.int32)
    np.testing.assert_array_equal(mc.call("topk", allsame, k=4), np.full(4, -7, dtype=np.int32))
    # K larger than any array: min(K, n)
    np.testing.assert_array_equal(mc.call("topk", x, k=2**64 - 1), topk_ref(x, x.size))


def test_topk_from_lists_and_bytes(mc: Client) -> None:
    np.testing.assert_array_equal(mc.call("topk", [5, 1, 9, 3], k=2), [9, 5])
    raw = np.array([4, -4, 8], dtype="<i4").tobytes()
    np.testing.assert_array_equal(mc.call("topk", raw, k=3), [8, 4, -4])


def test_topk_bad_input(mc: Client) -> None:
    with pytest.raises(BadInputError):
        mc.call("topk", [1, 2, 3], k=0)
    with pytest.raises(BadInputError):
        mc.call("topk", b"", k=1)
    with pytest.raises(BadInputError):
        mc.call("topk", b"\x01\x00\x00\x00\x02\x00", k=1)
    # the connection is still fine after the refusals
    np.testing.assert_array_equal(mc.call("topk", [1, 2, 3], k=1), [3])


# ----------------------------------------------------------------------------- logit


def logit_ref(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    with np.errstate(divide="ignore", invalid="ignore"):
        x64 = x.astype(np.float64)
        return np.log(x64 / (1.0 - x64)).astype(np.float32)


def assert_logit(out: npt.NDArray[np.float32], x: npt.NDArray[np.float32]) -> None:
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == x.shape
    ref = logit_ref(x)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6, equal_nan=True)
    # docs/accelerators.md: within 1 ulp of the f64 computation rounded to f32
    finite = np.isfinite(ref)
    np.testing.assert_array_max_ulp(out[finite], ref[finite], maxulp=1)


@pytest.mark.parametrize("n", SIZES)
def test_logit(mc: Client, n: int, rng: np.random.Generator) -> None:
    x = rng.uniform(1e-6, 1 - 1e-6, n).astype(np.float32)
    assert_logit(mc.call("logit", x), x)


def test_logit_edges(mc: Client) -> None:
    x = np.array(
        [0.0, -0.0, 1.0, 0.5, -0.5, 1.5, np.nan, np.inf, -np.inf, 1e-30, 1e-45, 0.99999994, 0.25],
        dtype=np.float32,
    )
    out = mc.call("logit", x)
    assert_logit(out, x)
    assert out[0] == -np.inf and out[2] == np.inf and out[3] == 0.0
    assert np.isnan(out[4]) and np.isnan(out[5]) and np.isnan(out[6])


def test_logit_bad_input(mc: Client) -> None:
    with pytest.raises(BadInputError):
        mc.call("logit", b"")
    for length in (1, 2, 3, 5, 4097):
        with pytest.raises(BadInputError):
            mc.call("logit", bytes(length))


# ----------------------------------------------------------------------------- minmax


def minmax_ref(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo, hi = np.nanmin(x), np.nanmax(x)
    if hi == lo:
        return np.where(np.isnan(x), np.float32(np.nan), np.float32(0.0)).astype(np.float32)
    x64 = x.astype(np.float64)
    return ((x64 - float(lo)) / (float(hi) - float(lo))).astype(np.float32)


def assert_minmax(out: npt.NDArray[np.float32], x: npt.NDArray[np.float32]) -> None:
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == x.shape
    np.testing.assert_allclose(out, minmax_ref(x), rtol=1e-6, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("n", SIZES)
def test_minmax(mc: Client, n: int, rng: np.random.Generator) -> None:
    x = rng.normal(3.0, 100.0, n).astype(np.float32)
    out = mc.call("minmax", x)
    assert_minmax(out, x)
    if n > 1:  # exact endpoints: a true division, not a multiply by the reciprocal
        assert out[np.argmin(x)] == 0.0 and out[np.argmax(x)] == 1.0
    assert ((out >= 0) & (out <= 1)).all()


def test_minmax_edges(mc: Client) -> None:
    # NaN is ignored for min/max and stays NaN
    x = np.array([np.nan, 2.0, -2.0, np.nan, 0.0, 1.0], dtype=np.float32)
    out = mc.call("minmax", x)
    assert_minmax(out, x)
    assert np.isnan(out[0]) and np.isnan(out[3]) and out[1] == 1.0 and out[2] == 0.0
    # zero range -> 0.0 (single element, constant array, constant with NaN)
    assert mc.call("minmax", np.array([42.0], dtype=np.float32)).tolist() == [0.0]
    np.testing.assert_array_equal(
        mc.call("minmax", np.full(513, -3.5, np.float32)), np.zeros(513, np.float32)
    )
    out = mc.call("minmax", np.array([7.0, np.nan, 7.0], dtype=np.float32))
    assert out[0] == 0.0 and np.isnan(out[1]) and out[2] == 0.0
    # large ranges, including one where max - min overflows float32
    for vals in ([-1e38, 0.0, 1e38, 5e37], [-3e38, 0.0, 3e38, 1.5e38]):
        x = np.array(vals, dtype=np.float32)
        out = mc.call("minmax", x)
        assert_minmax(out, x)
        assert out[0] == 0.0 and out[2] == 1.0


@pytest.mark.parametrize("bad", [np.inf, -np.inf])
def test_minmax_infinity_is_bad_input(mc: Client, bad: float) -> None:
    with pytest.raises(BadInputError):
        mc.call("minmax", np.array([1.0, bad, 2.0], dtype=np.float32))


def test_minmax_all_nan(mc: Client) -> None:
    x = np.full(5, np.nan, dtype=np.float32)
    assert np.isnan(mc.call("minmax", x)).all()


def test_minmax_bad_input(mc: Client) -> None:
    with pytest.raises(BadInputError):
        mc.call("minmax", b"")
    with pytest.raises(BadInputError):
        mc.call("minmax", bytes(6))


# ----------------------------------------------------------------------------- matmul


def assert_matmul(
    out: npt.NDArray[np.float32], a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]
) -> None:
    n = a.shape[0]
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (n, n)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5 * n)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 16, 33, 64, 128])
def test_matmul(mc: Client, n: int, rng: np.random.Generator) -> None:
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    assert_matmul(mc.call("matmul", (a, b)), a, b)


def textbook_matmul_f32(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``s = 0; for k: s += a[i][k] * b[k][j]`` in float32 with separate multiply and add."""
    s = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    for k in range(a.shape[1]):
        s = s + np.outer(a[:, k], b[k, :]).astype(np.float32)
    return s


@pytest.mark.parametrize("n", [1, 5, 31, 64])
def test_matmul_bit_identical_to_textbook_loop(mc: Client, n: int, rng: np.random.Generator) -> None:
    a = rng.normal(size=(n, n)).astype(np.float32)
    b = rng.normal(size=(n, n)).astype(np.float32)
    np.testing.assert_array_equal(mc.call("matmul", (a, b)), textbook_matmul_f32(a, b))


def test_matmul_concatenated_and_inferred(mc: Client, rng: np.random.Generator) -> None:
    n = 9
    a = rng.normal(size=(n, n)).astype(np.float32)
    b = rng.normal(size=(n, n)).astype(np.float32)
    both = np.concatenate([a.ravel(), b.ravel()])
    assert_matmul(mc.call("matmul", both), a, b)  # n = 0: node infers
    assert_matmul(mc.call("matmul", both, n=n), a, b)
    assert_matmul(mc.call("matmul", both.tobytes()), a, b)
    ident = np.eye(n, dtype=np.float32)
    np.testing.assert_array_equal(mc.call("matmul", (a, ident)), a)


def test_matmul_bad_input(mc: Client) -> None:
    two = np.ones(8, np.float32)  # two 2 x 2 matrices
    with pytest.raises(BadInputError):
        mc.call("matmul", two, n=3)  # wrong n
    with pytest.raises(BadInputError):
        mc.call("matmul", np.ones(6, np.float32))  # not 2 n^2 floats
    with pytest.raises(BadInputError):
        mc.call("matmul", b"")
    with pytest.raises(BadInputError):
        mc.call("matmul", bytes(34))  # not a multiple of 4
    np.testing.assert_array_equal(mc.call("matmul", two), np.full((2, 2), 2.0, np.float32))
