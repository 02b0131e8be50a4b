//! `boxcox` (id 16): the Box-Cox transform of each positive `float32`:
//! `(x^λ − 1) / λ`, or `ln x` for λ = 0, computed in `f64` as
//! `expm1(λ·ln x) / λ` (scipy `special.boxcox`) and rounded once to
//! `float32`. `param` bits 0-31: λ as `float32` bits (finite). Values ≤ 0,
//! NaN and infinities are refused with their index.
//!
//! For λ = 0 (the DLRM `log` transform) `ln` is our own branch-free `f64`
//! logarithm ([`ln_f64`]: exponent and mantissa split, `2·atanh` series,
//! within 2e-15 relative of the platform's), so the kernel vectorises; other
//! λ use the platform's `ln` and `expm1`.

use std::f64::consts::{LN_2, SQRT_2};

use offrac_proto::FunctionId;

#[cfg(target_arch = "x86_64")]
use crate::elems::has_avx2;
use crate::elems::{element_count, map_f32, ELEM};
use crate::{AccelError, Accelerator};

/// Natural logarithm of a positive, finite, normal `f64` (every positive
/// finite `float32` is one), without branches: `x = 2^e·m`, `m` brought into
/// `[√½, √2)`, `ln m = 2·atanh(s)`, `s = (m − 1)/(m + 1)`, `|s| ≤ 0.1716`,
/// series to `s^17`.
#[inline(always)]
pub fn ln_f64(x: f64) -> f64 {
    const MANT: u64 = 0x000f_ffff_ffff_ffff;
    const ONE: u64 = 0x3ff0_0000_0000_0000;
    const MAGIC: u64 = 0x4330_0000_0000_0000; // 2^52: exact small integers by bits
    let b = x.to_bits();
    let m = f64::from_bits((b & MANT) | ONE);
    let e = f64::from_bits((b >> 52) | MAGIC) - f64::from_bits(1023 | MAGIC);
    let up = m >= SQRT_2;
    let m = if up { 0.5 * m } else { m };
    let e = if up { e + 1.0 } else { e };
    // m − 1 and m + 1 are exact for float32 inputs (24-bit mantissas).
    let s = (m - 1.0) / (m + 1.0);
    let w = s * s;
    let p = w
        * (1.0 / 3.0
            + w * (1.0 / 5.0
                + w * (1.0 / 7.0
                    + w * (1.0 / 9.0
                        + w * (1.0 / 11.0
                            + w * (1.0 / 13.0 + w * (1.0 / 15.0 + w * (1.0 / 17.0))))))));
    e * LN_2 + (2.0 * s + 2.0 * s * p)
}

fn log_bytes(input: &[u8], out: &mut Vec<u8>) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { log_bytes_avx2(input, out) };
            return;
        }
    }
    map_f32(input, out, |x| ln_f64(f64::from(x)) as f32);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn log_bytes_avx2(input: &[u8], out: &mut Vec<u8>) {
    map_f32(input, out, |x| ln_f64(f64::from(x)) as f32);
}

#[derive(Debug, Default, Clone, Copy)]
pub struct BoxCox;

/// Box-Cox of one positive value in `f64` (the kernel rounds it to `f32`):
/// our vectorisable [`ln_f64`] for λ = 0; the platform's `ln` and `expm1`
/// otherwise (a scalar `expm1` per element is the cost either way, and the
/// platform's `ln` is the faster scalar).
pub fn boxcox(x: f64, lambda: f64) -> f64 {
    if lambda == 0.0 {
        ln_f64(x)
    } else {
        (lambda * x.ln()).exp_m1() / lambda
    }
}

impl Accelerator for BoxCox {
    fn function(&self) -> FunctionId {
        FunctionId::BoxCox
    }

    fn inline_max_bytes(&self) -> usize {
        4096
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        element_count(input, "float32")?;
        let lambda = f32::from_bits(param as u32);
        if param >> 32 != 0 || !lambda.is_finite() {
            return Err(AccelError::BadInput(format!(
                "lambda (param bits 0-31 as float32) = {lambda} must be finite, bits 32-63 zero"
            )));
        }
        let words = input.as_chunks::<ELEM>().0;
        if let Some(i) = words.iter().position(|w| {
            let x = f32::from_le_bytes(*w);
            !(x > 0.0 && x.is_finite())
        }) {
            return Err(AccelError::BadInput(format!(
                "value {} at index {i}: Box-Cox needs finite x > 0",
                f32::from_le_bytes(words[i])
            )));
        }
        if lambda == 0.0 {
            log_bytes(input, out);
        } else {
            let l = f64::from(lambda);
            map_f32(input, out, |x| boxcox(f64::from(x), l) as f32);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(xs: &[f32], lambda: f32) -> Result<Vec<f32>, AccelError> {
        let inp: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        BoxCox.run(u64::from(lambda.to_bits()), &inp, &mut out)?;
        Ok(out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }

    #[test]
    fn values() {
        let e = std::f32::consts::E; // a little below e
        assert_eq!(
            run(&[1.0, e], 0.0).unwrap(),
            [0.0, f64::from(e).ln() as f32]
        );
        assert_eq!(run(&[4.0], 0.5).unwrap(), [2.0]); // (2 - 1) / 0.5
        assert_eq!(run(&[3.0], 1.0).unwrap(), [2.0]);
        assert!(
            matches!(run(&[1.0, 0.0], 1.0), Err(AccelError::BadInput(m)) if m.contains("index 1"))
        );
        assert!(run(&[1.0], f32::NAN).is_err());
        assert!(run(&[-1.0], 1.0).is_err());
    }

    /// Our logarithm against the platform's over every binade of `f32`:
    /// within 2e-15 relative, and the rounded `f32` results agree with the
    /// platform's rounded results (at most 1 ulp apart, rarely at all).
    #[test]
    fn ln_matches_the_platform() {
        let (mut worst, mut off) = (0f64, 0usize);
        let xs: Vec<f32> = (1u32..0x7f80_0000)
            .step_by(4_093)
            .map(f32::from_bits)
            .collect();
        for &x in &xs {
            let (ours, std) = (ln_f64(f64::from(x)), f64::from(x).ln());
            let rel = if std == 0.0 {
                ours.abs()
            } else {
                ((ours - std) / std).abs()
            };
            worst = worst.max(rel);
            let (a, b) = (ours as f32, std as f32);
            assert!(
                (a.to_bits() as i64 - b.to_bits() as i64).abs() <= 1,
                "x = {x:e}"
            );
            off += usize::from(a != b);
        }
        assert!(worst < 2e-15, "worst relative error {worst:e}");
        assert!(
            off * 10_000 < xs.len(),
            "{off} of {} differ after rounding",
            xs.len()
        );
        assert_eq!(ln_f64(1.0), 0.0);
    }

    #[test]
    fn dispatched_and_portable_logs_agree() {
        let xs: Vec<f32> = (0u32..5_000)
            .map(|i| f32::from_bits(0x0080_0000 + i * 400_009))
            .collect();
        let inp: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        log_bytes(&inp, &mut a);
        map_f32(&inp, &mut b, |x| ln_f64(f64::from(x)) as f32);
        assert!(a == b);
    }
}
