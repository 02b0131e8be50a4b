"""A model of the min-max built-in (crates/accel/src/minmax.rs) in numpy float32, for the element unit's
testbench (one element with any lo / hi; the accelerator's bench asks the software itself, accel_oracle).

It follows the Rust code step by step, because the rounding and the sign of a zero depend on it:
min/max per lane of 16 over whole 64-byte blocks, then the lanes folded in order, then the tail
elements one by one (`if v < m { v } else { m }`, so NaN is skipped and the first of -0.0 / +0.0
stays); then `(x - lo) / range` in float32, or in float64 rounded to float32 when `hi - lo`
overflows, or the zero-range rule.
"""

from __future__ import annotations

import random
import struct

import numpy as np

LANES = 16
F32 = np.float32
STATUS_OK = 0
STATUS_TOO_LARGE = 3
STATUS_BAD_INPUT = 5


def f32(bits: int) -> np.float32:
    return np.frombuffer(struct.pack("<I", bits), dtype=F32)[0]


def bits(x: np.float32) -> int:
    return (
        struct.unpack("<I", struct.pack("<f", x))[0]
        if not np.isnan(x)
        else int(np.float32(x).view(np.uint32))
    )


def nan_min_max(xs: np.ndarray) -> tuple[np.float32, np.float32]:
    """`nan_min_max_generic`: lanes over whole blocks, their fold, then the tail."""
    lo = [F32(np.inf)] * LANES
    hi = [F32(-np.inf)] * LANES
    whole = len(xs) // LANES * LANES
    for i in range(whole):
        v, j = xs[i], i % LANES
        lo[j] = v if v < lo[j] else lo[j]
        hi[j] = v if v > hi[j] else hi[j]
    lo_f, hi_f = F32(np.inf), F32(-np.inf)
    for a, b in zip(lo, hi, strict=True):
        lo_f = a if a < lo_f else lo_f
        hi_f = b if b > hi_f else hi_f
    for v in xs[whole:]:
        lo_f = v if v < lo_f else lo_f
        hi_f = v if v > hi_f else hi_f
    return lo_f, hi_f


def normalise(xs: np.ndarray, lo: np.float32, hi: np.float32) -> np.ndarray:
    """`normalise_generic` on float32 arrays (element-wise, so the same for a single element)."""
    xs = np.asarray(xs, dtype=F32)
    with np.errstate(all="ignore"):
        if hi > lo:
            rng = F32(hi - lo)
            if np.isfinite(rng):
                return (xs - lo) / rng
            return ((xs.astype(np.float64) - np.float64(lo)) / (np.float64(hi) - np.float64(lo))).astype(F32)
        # `if x.is_nan() { x + 0.0 } else { 0.0 }`: the shipping build folds `x + 0.0` of a NaN to x,
        # so a signalling NaN is not quieted on this path (accel_oracle shows it)
        return np.where(np.isnan(xs), xs, F32(0.0)).astype(F32)


# ---- random inputs -----------------------------------------------------------


def random_finite(rng: random.Random, style: str) -> int:
    """float32 bits of a finite value drawn in one of several styles."""
    if style == "bits":  # any finite bit pattern: every exponent, subnormals
        while True:
            b = rng.getrandbits(32)
            if (b >> 23) & 0xFF != 0xFF:
                return b
    if style == "sub":  # subnormals and zeros
        return rng.getrandbits(1) << 31 | rng.choice([0, 1, 2, rng.getrandbits(23), rng.getrandbits(4)])
    if style == "huge":  # near the top of the range, both signs: hi - lo overflows
        return rng.getrandbits(1) << 31 | rng.randint(0xFD, 0xFE) << 23 | rng.getrandbits(23)
    if style == "close":  # one binade: cancellation in x - lo
        return 0x3F800000 | rng.getrandbits(rng.choice([1, 3, 8, 23]))
    # "unit": ordinary data
    return bits(F32(rng.uniform(-1e3, 1e3)))


STYLES = ("bits", "sub", "huge", "close", "unit")


def random_nan(rng: random.Random) -> int:
    """A NaN, quiet or signalling, with a random payload and sign."""
    return rng.getrandbits(1) << 31 | 0xFF << 23 | rng.choice([0x400000, 1, rng.getrandbits(23) | 1])


def random_array(rng: random.Random, n: int) -> np.ndarray:
    """n float32 values of one or two styles, some NaN, some edge values."""
    styles = [rng.choice(STYLES), rng.choice(STYLES)]
    p_nan = rng.choice([0.0, 0.0, 0.1, 0.5, 1.0])
    out = []
    for _ in range(n):
        r = rng.random()
        if r < p_nan:
            out.append(random_nan(rng))
        elif r < p_nan + 0.05:
            out.append(rng.choice([0, 0x80000000, 1, 0x80000001, 0x7F7FFFFF, 0xFF7FFFFF]))
        else:
            out.append(random_finite(rng, rng.choice(styles)))
    return np.array(out, dtype=np.uint32).view(F32)
