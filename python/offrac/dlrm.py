"""DLRM preprocessing with an offrac node: Criteo rows in, the tensors a DLRM consumes out.

- :func:`load_criteo` reads Criteo rows (the repo ships 200 real ones in
  ``data/criteo-sample/``); :class:`CriteoShape` fits a generator to them (missing-value rates,
  count distributions, hash frequencies) and draws any number of Criteo-shaped rows.
- :func:`preprocess` runs the job on a node; :func:`preprocess_numpy` runs the same steps in
  numpy. Dense: missing -> 0, negatives -> 0, then ``boxcox`` with lambda 0 on ``1 + x``
  (``ln(1 + x)``, the DLRM reference transform) chained in the node with ``minmax`` per
  column. Sparse: missing -> 0, then ``sigridhash`` per column (salt = column index,
  ``max_value`` = the embedding table size): the embedding-row index of every feature.
- :func:`build_dictionary` picks the MapId keys seen at least ``min_count`` times (seed 001
  keeps Criteo keys seen more than 1,000 times: a 128 KB table).
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from .client import Client

__all__ = [
    "DENSE",
    "SPARSE",
    "CriteoBatch",
    "CriteoShape",
    "Preprocessed",
    "build_dictionary",
    "hash_128_to_64",
    "load_criteo",
    "preprocess",
    "preprocess_numpy",
    "sigrid_hash",
    "twang_mix64",
]

#: Dense (integer count) and sparse (hashed categorical) columns of a Criteo row.
DENSE = 13
SPARSE = 26


@dataclass
class CriteoBatch:
    """Rows of Criteo: ``dense`` float32 (n, 13) with NaN where missing; ``sparse`` uint32
    (n, 26) with ``sparse_missing`` marking empty fields; ``label`` int8 (n,)."""

    label: npt.NDArray[np.int8]
    dense: npt.NDArray[np.float32]
    sparse: npt.NDArray[np.uint32]
    sparse_missing: npt.NDArray[np.bool_]

    def __len__(self) -> int:
        return len(self.label)


def load_criteo(path: str | Path) -> CriteoBatch:
    """Read a Criteo CSV with a header (``label,I1..I13,C1..C26``), as in ``data/criteo-sample``."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header, body = rows[0], rows[1:]
    if len(header) != 1 + DENSE + SPARSE or header[0] != "label":
        raise ValueError(f"{path}: not a Criteo CSV (header {header[:3]}...)")
    n = len(body)
    label = np.array([int(r[0]) for r in body], dtype=np.int8)
    dense = np.full((n, DENSE), np.nan, dtype=np.float32)
    sparse = np.zeros((n, SPARSE), dtype=np.uint32)
    missing = np.ones((n, SPARSE), dtype=bool)
    for i, r in enumerate(body):
        for j in range(DENSE):
            if r[1 + j]:
                dense[i, j] = float(r[1 + j])
        for j in range(SPARSE):
            v = r[1 + DENSE + j]
            if v:
                sparse[i, j] = int(v, 16)
                missing[i, j] = False
    return CriteoBatch(label, dense, sparse, missing)


@dataclass
class CriteoShape:
    """A Criteo-shaped row generator fitted to real rows: per column its missing rate; dense
    values drawn from the column's observed values; sparse ids drawn from the column's observed
    hashes with their observed frequencies, or (with the Good-Turing probability of an unseen
    key, singletons / count) a fresh random hash — a long Zipf-like tail as in Criteo."""

    dense_missing: npt.NDArray[np.float64]
    dense_values: list[npt.NDArray[np.float32]]
    sparse_missing: npt.NDArray[np.float64]
    sparse_keys: list[npt.NDArray[np.uint32]]
    sparse_probs: list[npt.NDArray[np.float64]]
    sparse_unseen: npt.NDArray[np.float64]
    click_rate: float

    @classmethod
    def fit(cls, batch: CriteoBatch) -> CriteoShape:
        dense_missing = np.isnan(batch.dense).mean(axis=0)
        dense_values = [batch.dense[~np.isnan(batch.dense[:, j]), j] for j in range(DENSE)]
        keys, probs, unseen = [], [], []
        for j in range(SPARSE):
            present = batch.sparse[~batch.sparse_missing[:, j], j]
            counts = Counter(present.tolist())
            k = np.array(list(counts.keys()), dtype=np.uint32)
            c = np.array(list(counts.values()), dtype=np.float64)
            keys.append(k)
            probs.append(c / c.sum() if c.size else c)
            singletons = float((c == 1).sum())
            unseen.append(singletons / max(c.sum(), 1.0))
        return cls(
            dense_missing=dense_missing,
            dense_values=dense_values,
            sparse_missing=batch.sparse_missing.mean(axis=0),
            sparse_keys=keys,
            sparse_probs=probs,
            sparse_unseen=np.array(unseen),
            click_rate=float(batch.label.mean()),
        )

    def sample(self, n: int, seed: int = 0) -> CriteoBatch:
        rng = np.random.default_rng(seed)
        dense = np.full((n, DENSE), np.nan, dtype=np.float32)
        for j in range(DENSE):
            have = rng.random(n) >= self.dense_missing[j]
            vals = self.dense_values[j]
            if vals.size:
                dense[have, j] = rng.choice(vals, size=int(have.sum()))
        sparse = np.zeros((n, SPARSE), dtype=np.uint32)
        missing = np.zeros((n, SPARSE), dtype=bool)
        for j in range(SPARSE):
            missing[:, j] = rng.random(n) < self.sparse_missing[j]
            fresh = rng.random(n) < self.sparse_unseen[j]
            if self.sparse_keys[j].size:
                sparse[:, j] = rng.choice(self.sparse_keys[j], size=n, p=self.sparse_probs[j])
            sparse[fresh, j] = rng.integers(0, 1 << 32, size=int(fresh.sum()), dtype=np.uint64).astype(
                np.uint32
            )
            sparse[missing[:, j], j] = 0
        label = (rng.random(n) < self.click_rate).astype(np.int8)
        return CriteoBatch(label, dense, sparse, missing)


def build_dictionary(batch: CriteoBatch, min_count: int) -> npt.NDArray[np.uint32]:
    """The hashes seen at least ``min_count`` times over all sparse columns, most frequent
    first (ties by value): a MapId key list (write one hex key per line for
    ``[functions.mapid] dictionary``)."""
    counts = Counter(batch.sparse[~batch.sparse_missing].tolist())
    keys = sorted((k for k, c in counts.items() if c >= min_count), key=lambda k: (-counts[k], k))
    return np.array(keys, dtype=np.uint32)


# -- folly's hashes, vectorised (TorchArrow's sigrid_hash is built from them) ------------------

_M64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def twang_mix64(key: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """folly ``twang_mix64`` element-wise (uint64 arithmetic wraps)."""
    k = key.astype(np.uint64)
    with np.errstate(over="ignore"):
        k = (~k) + (k << np.uint64(21))
        k = k ^ (k >> np.uint64(24))
        k = k + (k << np.uint64(3)) + (k << np.uint64(8))
        k = k ^ (k >> np.uint64(14))
        k = k + (k << np.uint64(2)) + (k << np.uint64(4))
        k = k ^ (k >> np.uint64(28))
        k = k + (k << np.uint64(31))
    return k & _M64


def hash_128_to_64(upper: npt.NDArray[np.uint64], lower: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """folly ``hash_128_to_64(upper, lower)`` element-wise."""
    mul = np.uint64(0x9DDF_EA08_EB38_2D69)
    with np.errstate(over="ignore"):
        a = (lower ^ upper) * mul
        a = a ^ (a >> np.uint64(47))
        b = (upper ^ a) * mul
        b = b ^ (b >> np.uint64(47))
        return b * mul


def sigrid_hash(ids: npt.ArrayLike, salt: int, max_value: int) -> npt.NDArray[np.int64]:
    """TorchArrow ``sigrid_hash(ids, salt, max_value)``: the int64 of
    ``hash_128_to_64(salt, twang_mix64(id))``, floor-modulo ``max_value``."""
    x = np.asarray(ids).astype(np.int64).astype(np.uint64)
    salt_u = np.full(x.shape, salt, dtype=np.int64).astype(np.uint64)
    h = hash_128_to_64(salt_u, twang_mix64(x)).view(np.int64)
    return np.mod(h, np.int64(max_value))


# -- the preprocessing job -----------------------------------------------------------------------


@dataclass
class Preprocessed:
    """What a DLRM consumes: ``dense`` float32 (n, 13) in [0, 1]; ``sparse`` uint32 (n, 26)
    embedding-row indices (column j < ``table_sizes[j]``); ``label`` (n,)."""

    dense: npt.NDArray[np.float32]
    sparse: npt.NDArray[np.uint32]
    label: npt.NDArray[np.int8]


def _dense_input(batch: CriteoBatch) -> npt.NDArray[np.float32]:
    """Missing -> 0, negatives -> 0, plus one: the input of ln(1 + x)."""
    d = np.nan_to_num(batch.dense, nan=0.0)
    return (np.maximum(d, 0.0) + 1.0).astype(np.float32)


def _sparse_input(batch: CriteoBatch) -> npt.NDArray[np.uint32]:
    return np.where(batch.sparse_missing, np.uint32(0), batch.sparse).astype(np.uint32)


def _minmax(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    lo, hi = np.nanmin(x), np.nanmax(x)
    if not hi > lo:
        return np.zeros_like(x)
    return ((x - lo) / (hi - lo)).astype(np.float32)


def preprocess_numpy(batch: CriteoBatch, table_sizes: Iterable[int]) -> Preprocessed:
    """The job in numpy: the same steps and edge cases as :func:`preprocess`."""
    sizes = list(table_sizes)
    x = _dense_input(batch)
    logged = np.log(x.astype(np.float64)).astype(np.float32)
    dense = np.stack([_minmax(logged[:, j]) for j in range(DENSE)], axis=1)
    ids = _sparse_input(batch)
    sparse = np.stack([sigrid_hash(ids[:, j], j, sizes[j]).astype(np.uint32) for j in range(SPARSE)], axis=1)
    return Preprocessed(dense.astype(np.float32), sparse, batch.label.copy())


def preprocess(client: Client, batch: CriteoBatch, table_sizes: Iterable[int]) -> Preprocessed:
    """The job on a node: 13 two-hop requests (``boxcox`` lambda 0 then ``minmax``, one
    column each) and 26 ``sigridhash`` requests, all in flight at once on one connection."""
    from .client import Step

    sizes = list(table_sizes)
    if len(sizes) != SPARSE:
        raise ValueError(f"give {SPARSE} table sizes, got {len(sizes)}")
    x = _dense_input(batch)
    ids = _sparse_input(batch)
    dense_futs = [
        client.submit_chain([Step("boxcox", lmbda=0.0), "minmax"], np.ascontiguousarray(x[:, j]))
        for j in range(DENSE)
    ]
    sparse_futs = [
        client.submit("sigridhash", np.ascontiguousarray(ids[:, j]), max_value=sizes[j], salt=j)
        for j in range(SPARSE)
    ]
    dense = np.stack([f.result() for f in dense_futs], axis=1).astype(np.float32)
    sparse = np.stack([f.result() for f in sparse_futs], axis=1).astype(np.uint32)
    return Preprocessed(dense, sparse, batch.label.copy())
