//! `logit` (id 2): `ln(x / (1 − x))` element-wise over a `float32` array.
//!
//! Edge cases follow numpy float32 `np.log(x / (1 - x))`: `x = 0` (or `-0`)
//! gives `-inf`, `x = 1` gives `+inf`, `x < 0`, `x > 1`, `±inf` and NaN give
//! NaN.
//!
//! Accuracy: each element is computed in `f64` and rounded once to `f32`.
//! `1 − x` is exact for every float32 `x`. Both `x` and `1 − x` are split
//! into exponent and mantissa by bit manipulation, so that
//! `x / (1 − x) = 2ᵏ·a/b` with `z = a/b ∈ [√½, √2)` (one compare-and-double
//! picks the binade, no division), and `ln z = 2·atanh(s)`,
//! `s = (a − b)/(a + b)` (the only division; `a ± b` are exact), is an odd
//! series to `s¹⁵` (|s| ≤ 0.1716, truncation < 4·10⁻¹⁴ relative). The `f64`
//! result is within ~10⁻¹³ relative of the exact value, so the output is the correctly
//! rounded `f32` except, rarely, when the exact value lies within ~10⁻¹³ of
//! a rounding boundary: the documented tolerance is **≤ 1 ulp** of
//! `(ln_f64(x / (1 − x))) as f32`, and in practice (tests below) it is 0 ulp
//! for essentially all inputs. This is *more* accurate than numpy's float32
//! evaluation near `x = 0.5`, where the float32 ratio loses all relative
//! precision of the (tiny) result.
//!
//! The kernel has no branches or calls, so it vectorises (SSE2 baseline:
//! two `f64` lanes; on x86-64 CPUs with AVX2 a copy compiled for AVX2 is
//! picked at run time: four lanes). Both copies give bit-identical results.

use offrac_proto::FunctionId;

#[cfg(target_arch = "x86_64")]
use crate::elems::has_avx2;
use std::f64::consts::{LN_2, SQRT_2};

use crate::elems::{element_count, map_f32};
use crate::{AccelError, Accelerator};

/// Element-wise logit of a `float32` array. `param` unused.
#[derive(Debug, Default, Clone, Copy)]
pub struct Logit;

impl Accelerator for Logit {
    fn function(&self) -> FunctionId {
        FunctionId::Logit
    }

    /// ~2 µs at 4 KiB, linear (`make bench-kernels`).
    fn inline_max_bytes(&self) -> usize {
        8192
    }

    fn run(&mut self, _param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        element_count(input, "float32")?;
        logit_bytes(input, out);
        Ok(())
    }
}

fn logit_bytes(input: &[u8], out: &mut Vec<u8>) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { logit_bytes_avx2(input, out) };
            return;
        }
    }
    map_f32(input, out, logit);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn logit_bytes_avx2(input: &[u8], out: &mut Vec<u8>) {
    map_f32(input, out, logit);
}

/// `ln(x / (1 − x))` with numpy float32 edge-case semantics (module docs).
#[inline(always)]
pub fn logit(x: f32) -> f32 {
    const MANT: u64 = 0x000f_ffff_ffff_ffff;
    const ONE: u64 = 0x3ff0_0000_0000_0000; // bits of 1.0
    const MAGIC: u64 = 0x4330_0000_0000_0000; // bits of 2^52
    let x = f64::from(x);
    let y = 1.0 - x; // exact for every float32 x
                     // x = 2^ex·mx, y = 2^ey·my with mx, my ∈ [1, 2) (both are normal f64
                     // for x ∈ (0, 1); other x give garbage here, replaced below).
    let (xb, yb) = (x.to_bits(), y.to_bits());
    let mx = f64::from_bits((xb & MANT) | ONE);
    let my = f64::from_bits((yb & MANT) | ONE);
    // ex − ey as an exact f64 (the 2^52 trick vectorises on plain SSE2).
    let e = f64::from_bits((xb >> 52) | MAGIC) - f64::from_bits((yb >> 52) | MAGIC);
    // Bring z = a/b into [√½, √2): one binade up or down if needed.
    let up = mx >= SQRT_2 * my;
    let down = mx * SQRT_2 < my;
    let a = if down { 2.0 * mx } else { mx };
    let b = if up { 2.0 * my } else { my };
    let k = e + if up { 1.0 } else { 0.0 } - if down { 1.0 } else { 0.0 };
    // ln z = 2·atanh(s), s = (z − 1)/(z + 1) = (a − b)/(a + b); a ± b are
    // exact (24-bit mantissas), so s carries a single rounding.
    let s = (a - b) / (a + b);
    let w = s * s;
    let p = w
        * (1.0 / 3.0
            + w * (1.0 / 5.0
                + w * (1.0 / 7.0
                    + w * (1.0 / 9.0 + w * (1.0 / 11.0 + w * (1.0 / 13.0 + w * (1.0 / 15.0)))))));
    let r = k * LN_2 + (2.0 * s + 2.0 * s * p);
    // Special values, selected without branches: x = ±0 → -inf; x = 1 →
    // +inf; x < 0, x > 1, ±inf, NaN → NaN.
    let r = if x == 0.0 { f64::NEG_INFINITY } else { r };
    let r = if y == 0.0 { f64::INFINITY } else { r };
    let r = if x >= 0.0 && y >= 0.0 { r } else { f64::NAN };
    r as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elems::{decode_f32_into, encode_f32};
    use proptest::prelude::*;

    /// The documented reference: f64 log of the f64 ratio, rounded to f32.
    fn reference(x: f32) -> f32 {
        let x = f64::from(x);
        (x / (1.0 - x)).ln() as f32
    }

    /// Distance in units in the last place between two finite f32 of the
    /// same sign (or ±0).
    fn ulps(a: f32, b: f32) -> u32 {
        let key = |v: f32| {
            let i = v.to_bits() as i32;
            if i < 0 {
                i32::MIN.wrapping_sub(i) as i64
            } else {
                i as i64
            }
        };
        (key(a) - key(b)).unsigned_abs() as u32
    }

    fn run(xs: &[f32]) -> Vec<f32> {
        let mut inp = Vec::new();
        encode_f32(xs, &mut inp);
        let mut out = Vec::new();
        Logit.run(0, &inp, &mut out).unwrap();
        let mut ys = Vec::new();
        decode_f32_into(&out, &mut ys).unwrap();
        ys
    }

    #[test]
    fn edge_cases_match_numpy() {
        let xs = [
            0.0,
            -0.0,
            1.0,
            -1e-30,
            1.0000001,
            2.0,
            -3.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            0.5,
        ];
        let ys = run(&xs);
        assert_eq!(ys[0], f32::NEG_INFINITY);
        assert_eq!(ys[1], f32::NEG_INFINITY);
        assert_eq!(ys[2], f32::INFINITY);
        for (i, y) in ys[3..10].iter().enumerate() {
            assert!(y.is_nan(), "x = {} gave {y}", xs[3 + i]);
        }
        assert_eq!(ys[10], 0.0);
    }

    #[test]
    fn values_near_0_and_1() {
        let xs = [
            1e-38,
            f32::MIN_POSITIVE,
            f32::from_bits(1), // smallest subnormal
            1e-45,
            1e-7,
            1.0 - f32::EPSILON / 2.0, // 1 - 2^-24, largest below 1
            1.0 - f32::EPSILON,
            0.5 + f32::EPSILON / 2.0,
            0.5 - f32::EPSILON / 4.0,
        ];
        let ys = run(&xs);
        for (&x, &y) in xs.iter().zip(&ys) {
            assert_eq!(y, reference(x), "x = {x:e}");
        }
        assert_eq!(ys[5], 16_777_215f32.ln()); // ln(2^24 - 1)
        assert!((ys[2] - (-103.27893)).abs() < 1e-4, "{}", ys[2]);
    }

    #[test]
    fn symmetric() {
        for x in [0.125f32, 0.25, 0.375, 0.4375, 0.3] {
            if f64::from(1.0 - x) != 1.0 - f64::from(x) {
                continue; // 1 - x not exact in f32: not a symmetric pair
            }
            let ys = run(&[x, 1.0 - x]);
            assert_eq!(ys[0], -ys[1], "x = {x}");
        }
    }

    #[test]
    fn rejects_bad_lengths() {
        let mut out = Vec::new();
        assert!(matches!(
            Logit.run(0, &[], &mut out),
            Err(AccelError::BadInput(_))
        ));
        assert!(matches!(
            Logit.run(0, &[0; 6], &mut out),
            Err(AccelError::BadInput(_))
        ));
        assert!(out.is_empty());
    }

    /// Every float32 in (0, 1) at a stride, across all binades: ≤ 1 ulp, and
    /// (stronger, as measured) almost always exactly the reference.
    #[test]
    fn sweep_whole_open_interval() {
        let one = 1f32.to_bits();
        let xs: Vec<f32> = (1..one).step_by(997).map(f32::from_bits).collect();
        // Plus the top binade [0.5, 1) densely (where 1 - x matters).
        let half = 0.5f32.to_bits();
        let xs: Vec<f32> = xs
            .into_iter()
            .chain((half..one).step_by(61).map(f32::from_bits))
            .collect();
        let ys = run(&xs);
        let mut inexact = 0usize;
        for (&x, &y) in xs.iter().zip(&ys) {
            let want = reference(x);
            let d = ulps(y, want);
            assert!(d <= 1, "x = {x:e}: got {y:e}, want {want:e} ({d} ulp)");
            inexact += usize::from(d != 0);
        }
        assert!(
            inexact * 100_000 < xs.len(),
            "{inexact} of {} off by one ulp",
            xs.len()
        );
    }

    /// The run-time-selected (AVX2) copy and the portable (SSE2 baseline)
    /// copy give identical bytes.
    #[test]
    fn portable_and_dispatched_paths_agree() {
        let xs: Vec<f32> = (0u32..20_000)
            .map(|i| f32::from_bits(i.wrapping_mul(214_749) ^ (i << 7)))
            .chain([0.0, -0.0, 1.0, 0.5, f32::NAN, f32::INFINITY])
            .collect();
        let mut inp = Vec::new();
        encode_f32(&xs, &mut inp);
        let (mut a, mut b) = (Vec::new(), Vec::new());
        logit_bytes(&inp, &mut a);
        map_f32(&inp, &mut b, logit);
        assert_eq!(a.len(), inp.len());
        assert!(a == b, "dispatched and portable logit differ");
    }

    /// All 1 065 353 215 float32 in (0, 1). Slow in debug builds; run with
    /// `cargo test --release -p offrac-accel -- --ignored exhaustive`.
    #[test]
    #[ignore]
    fn exhaustive_unit_interval() {
        let mut xs = Vec::with_capacity(1 << 20);
        let (mut inexact, mut worst) = (0u64, 0u32);
        let mut bits = 1u32;
        let one = 1f32.to_bits();
        while bits < one {
            xs.clear();
            xs.extend((bits..one.min(bits + (1 << 20))).map(f32::from_bits));
            bits += xs.len() as u32;
            for (&x, &y) in xs.iter().zip(&run(&xs)) {
                let d = ulps(y, reference(x));
                inexact += u64::from(d != 0);
                worst = worst.max(d);
            }
        }
        eprintln!("exhaustive: {inexact} results differ from the reference, max {worst} ulp");
        assert!(worst <= 1);
    }

    proptest! {
        #[test]
        fn within_one_ulp_of_f64_reference(bits in 1u32..0x3f80_0000) {
            let x = f32::from_bits(bits);
            let y = run(&[x])[0];
            prop_assert!(ulps(y, reference(x)) <= 1, "x = {:e}: {:e} vs {:e}", x, y, reference(x));
        }

        #[test]
        fn outside_unit_interval_is_nan(x in prop::num::f32::ANY) {
            let y = run(&[x])[0];
            if (0.0..=1.0).contains(&x) {
                prop_assert!(!y.is_nan());
            } else {
                prop_assert!(y.is_nan());
            }
        }
    }
}
