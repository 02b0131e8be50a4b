//! `minmax` (id 3): `(x − min) / (max − min)` element-wise over `float32`.
//!
//! - `min` / `max` are taken over the non-NaN values (like `np.nanmin` /
//!   `np.nanmax`); NaN inputs give NaN outputs.
//! - If `max == min`, or there is no non-NaN value, every non-NaN output is
//!   `0.0`.
//! - Any `±inf` input is rejected (`BadInput`, "infinite value at index i"):
//!   the range would be infinite.
//! - If `max − min` overflows `f32` (finite values of opposite sign near
//!   `±3.4e38`), the element-wise step is computed in `f64` and rounded, so
//!   the result is still in `[0, 1]`.
//!
//! Outputs of non-NaN inputs are in `[0, 1]`; the minimum maps to exactly
//! `0.0` and the maximum to exactly `1.0` (when `max > min`).

use offrac_proto::FunctionId;

#[cfg(target_arch = "x86_64")]
use crate::elems::has_avx2;
use crate::elems::{element_count, f32_le, load_block, map_f32, BLOCK, ELEM, LANES};
use crate::{AccelError, Accelerator};

/// Min-max normalisation of a `float32` array. `param` unused.
#[derive(Debug, Default, Clone, Copy)]
pub struct MinMax;

impl Accelerator for MinMax {
    fn function(&self) -> FunctionId {
        FunctionId::MinMax
    }

    /// ~0.2 µs at 4 KiB, linear (`make bench-kernels`).
    fn inline_max_bytes(&self) -> usize {
        32768
    }

    fn run(&mut self, _param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        element_count(input, "float32")?;
        let (lo, hi) = nan_min_max(input);
        if lo == f32::NEG_INFINITY || hi == f32::INFINITY {
            let i = input
                .chunks_exact(ELEM)
                .position(|c| f32_le(c).is_infinite())
                .unwrap_or(0);
            return Err(AccelError::BadInput(format!(
                "infinite value at index {i}: min-max range would be infinite"
            )));
        }
        normalise(input, out, lo, hi);
        Ok(())
    }
}

/// `(min, max)` over the non-NaN values of a float32 LE array: `(+inf,
/// -inf)` if there are none. An infinite input shows as `min == -inf` or
/// `max == +inf`.
///
/// `if v < m { v } else { m }` is false for NaN, so NaNs are skipped with no
/// extra test, and the lane-wise form compiles to `minps` / `maxps`.
fn nan_min_max(input: &[u8]) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { nan_min_max_avx2(input) };
        }
    }
    nan_min_max_generic(input)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn nan_min_max_avx2(input: &[u8]) -> (f32, f32) {
    nan_min_max_generic(input)
}

#[inline(always)]
fn nan_min_max_generic(input: &[u8]) -> (f32, f32) {
    let mut lo = [f32::INFINITY; LANES];
    let mut hi = [f32::NEG_INFINITY; LANES];
    let (blocks, tail) = input.as_chunks::<BLOCK>();
    for b in blocks {
        let x = load_block(b);
        for i in 0..LANES {
            lo[i] = if x[i] < lo[i] { x[i] } else { lo[i] };
            hi[i] = if x[i] > hi[i] { x[i] } else { hi[i] };
        }
    }
    let (mut l, mut h) = reduce(&lo, &hi);
    for c in tail.as_chunks::<ELEM>().0 {
        let v = f32::from_le_bytes(*c);
        l = if v < l { v } else { l };
        h = if v > h { v } else { h };
    }
    (l, h)
}

/// Folds the lane accumulators. Out of line on purpose: inlined, LLVM's SLP
/// vectoriser reshapes the hot loop around this reduction (lane reversals
/// and mask packing, ~4× slower) instead of emitting plain `minps`/`maxps`.
#[inline(never)]
fn reduce(lo: &[f32; LANES], hi: &[f32; LANES]) -> (f32, f32) {
    let (mut l, mut h) = (f32::INFINITY, f32::NEG_INFINITY);
    for (&a, &b) in lo.iter().zip(hi) {
        l = if a < l { a } else { l };
        h = if b > h { b } else { h };
    }
    (l, h)
}

/// `out = (x - lo) / range` (f32), or the f64 variant when `range`
/// overflowed, or the zero-range rule when `!(hi > lo)`.
fn normalise(input: &[u8], out: &mut Vec<u8>, lo: f32, hi: f32) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { normalise_avx2(input, out, lo, hi) };
            return;
        }
    }
    normalise_generic(input, out, lo, hi);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn normalise_avx2(input: &[u8], out: &mut Vec<u8>, lo: f32, hi: f32) {
    normalise_generic(input, out, lo, hi);
}

#[inline(always)]
fn normalise_generic(input: &[u8], out: &mut Vec<u8>, lo: f32, hi: f32) {
    if hi > lo {
        let range = hi - lo;
        if range.is_finite() {
            map_f32(input, out, |x| (x - lo) / range);
        } else {
            let (lo, range) = (f64::from(lo), f64::from(hi) - f64::from(lo));
            map_f32(input, out, |x| ((f64::from(x) - lo) / range) as f32);
        }
    } else {
        // Zero range, or all NaN (then lo = +inf > hi = -inf).
        map_f32(input, out, |x| if x.is_nan() { x + 0.0 } else { 0.0 });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elems::{decode_f32_into, encode_f32};
    use proptest::prelude::*;

    fn run(xs: &[f32]) -> Result<Vec<f32>, AccelError> {
        let mut inp = Vec::new();
        encode_f32(xs, &mut inp);
        let mut out = Vec::new();
        MinMax.run(0, &inp, &mut out)?;
        let mut ys = Vec::new();
        decode_f32_into(&out, &mut ys)?;
        Ok(ys)
    }

    #[test]
    fn basic() {
        assert_eq!(run(&[1.0, 3.0, 2.0, 5.0]).unwrap(), [0.0, 0.5, 0.25, 1.0]);
        assert_eq!(run(&[-2.0, 2.0]).unwrap(), [0.0, 1.0]);
    }

    #[test]
    fn nans_are_skipped_and_propagate() {
        let ys = run(&[f32::NAN, 4.0, 0.0, f32::NAN, 2.0]).unwrap();
        assert!(ys[0].is_nan() && ys[3].is_nan());
        assert_eq!(&ys[1..3], [1.0, 0.0]);
        assert_eq!(ys[4], 0.5);
        // NaN in every position of a block, and in the tail.
        let mut xs: Vec<f32> = (0..40).map(|i| i as f32).collect();
        xs[0] = f32::NAN;
        xs[39] = f32::NAN;
        let ys = run(&xs).unwrap();
        assert!(ys[0].is_nan() && ys[39].is_nan());
        assert_eq!(ys[1], 0.0);
        assert_eq!(ys[38], 1.0);
    }

    #[test]
    fn zero_range_gives_zeros() {
        assert_eq!(run(&[7.5; 20]).unwrap(), vec![0.0; 20]);
        assert_eq!(run(&[-1.0]).unwrap(), [0.0]);
        let ys = run(&[3.0, f32::NAN, 3.0]).unwrap();
        assert_eq!((ys[0], ys[2]), (0.0, 0.0));
        assert!(ys[1].is_nan());
        assert!(run(&[0.0, -0.0]).unwrap().iter().all(|&y| y == 0.0));
    }

    #[test]
    fn all_nan_gives_nans() {
        let ys = run(&[f32::NAN; 18]).unwrap();
        assert_eq!(ys.len(), 18);
        assert!(ys.iter().all(|y| y.is_nan()));
    }

    #[test]
    fn infinities_are_rejected_with_their_index() {
        for (xs, i) in [
            (vec![1.0, f32::INFINITY], 1),
            (vec![f32::NEG_INFINITY], 0),
            (
                (0..40)
                    .map(|i| if i == 33 { f32::NEG_INFINITY } else { 1.0 })
                    .collect(),
                33,
            ),
            (
                vec![f32::NAN, f32::NAN, f32::INFINITY, f32::NEG_INFINITY],
                2,
            ),
        ] {
            let e = run(&xs).unwrap_err();
            assert!(
                matches!(&e, AccelError::BadInput(m) if m.contains(&format!("infinite value at index {i}:"))),
                "{e}"
            );
        }
    }

    #[test]
    fn overflowing_range_still_maps_into_unit_interval() {
        let ys = run(&[-f32::MAX, 0.0, f32::MAX, f32::MAX / 2.0]).unwrap();
        assert_eq!(ys, [0.0, 0.5, 1.0, 0.75]);
    }

    #[test]
    fn subnormal_range() {
        let t = f32::from_bits(1);
        assert_eq!(run(&[0.0, t, 2.0 * t]).unwrap(), [0.0, 0.5, 1.0]);
    }

    /// The run-time-selected (AVX2) copies and the portable (SSE2 baseline)
    /// copies give identical results.
    #[test]
    fn portable_and_dispatched_paths_agree() {
        let xs: Vec<f32> = (0u32..5_003)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 8) as f32 - 8e6)
            .map(|x| if x > 8.3e6 { f32::NAN } else { x })
            .collect();
        let mut inp = Vec::new();
        encode_f32(&xs, &mut inp);
        for len in [inp.len(), 4, 60, 64, 68, 4 * 17] {
            let inp = &inp[..len];
            let mm = nan_min_max(inp);
            assert_eq!(mm, nan_min_max_generic(inp), "len {len}");
            let (mut a, mut b) = (Vec::new(), Vec::new());
            normalise(inp, &mut a, mm.0, mm.1);
            normalise_generic(inp, &mut b, mm.0, mm.1);
            assert!(a == b, "len {len}");
        }
    }

    #[test]
    fn rejects_bad_lengths() {
        assert!(matches!(run(&[]), Err(AccelError::BadInput(_))));
        let mut out = Vec::new();
        assert!(matches!(
            MinMax.run(0, &[0; 5], &mut out),
            Err(AccelError::BadInput(_))
        ));
    }

    proptest! {
        #[test]
        fn outputs_in_unit_interval_hitting_0_and_1(
            xs in prop::collection::vec(
                prop::num::f32::NORMAL | prop::num::f32::SUBNORMAL | prop::num::f32::ZERO,
                1..300,
            ),
        ) {
            let ys = run(&xs).unwrap();
            prop_assert_eq!(ys.len(), xs.len());
            let lo = xs.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = xs.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            for (&x, &y) in xs.iter().zip(&ys) {
                prop_assert!((0.0..=1.0).contains(&y), "x = {} -> {}", x, y);
                if hi > lo {
                    if x == lo { prop_assert_eq!(y, 0.0); }
                    if x == hi { prop_assert_eq!(y, 1.0); }
                    // Monotone: agrees with an f64 evaluation.
                    let want = (f64::from(x) - f64::from(lo)) / (f64::from(hi) - f64::from(lo));
                    prop_assert!((f64::from(y) - want).abs() <= 1e-6, "{} vs {}", y, want);
                } else {
                    prop_assert_eq!(y, 0.0);
                }
            }
        }

        #[test]
        fn nan_positions_are_preserved(
            xs in prop::collection::vec(prop::option::weighted(0.8, -1e6f32..1e6), 1..100),
        ) {
            let xs: Vec<f32> = xs.into_iter().map(|o| o.unwrap_or(f32::NAN)).collect();
            let ys = run(&xs).unwrap();
            for (&x, &y) in xs.iter().zip(&ys) {
                prop_assert_eq!(x.is_nan(), y.is_nan());
                if !y.is_nan() { prop_assert!((0.0..=1.0).contains(&y)); }
            }
        }
    }
}
