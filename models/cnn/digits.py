"""scikit-learn's bundled digits as CNN inputs, and the fixed train / held-out split.

Needs numpy and scikit-learn only (no download: the data ships inside scikit-learn). Shared by
train.py, bench_onnxruntime.py and the tests, so all of them see the same held-out images.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import reference as ref

SEED = 13
TEST_FRACTION = 0.2


def load() -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The 1,797 samples as (N, 64) grey levels 0..16 and their labels 0..9."""
    d = load_digits()
    return d.data.astype(np.int64), d.target.astype(np.int64)


def images(grey: npt.NDArray[np.int64]) -> npt.NDArray[np.uint16]:
    """(N, 64) grey levels -> (N, 64, 64, 3) uint16 images (reference.grey_to_image each)."""
    return np.stack([ref.grey_to_image(g) for g in grey])


def split(labels: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Stratified 80 / 20 split by label, seeded: (train indices, held-out indices)."""
    train_idx, test_idx = train_test_split(
        np.arange(len(labels)), test_size=TEST_FRACTION, stratify=labels, random_state=SEED
    )
    return np.asarray(train_idx, dtype=np.int64), np.asarray(test_idx, dtype=np.int64)


def held_out() -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The held-out images, their labels and their indices into the digits."""
    grey, labels = load()
    _, test_idx = split(labels)
    return images(grey[test_idx]), labels[test_idx], test_idx
