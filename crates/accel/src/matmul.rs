//! `matmul` (id 4): `A·B` of two `n×n` row-major `float32` matrices.
//!
//! Input is `A` then `B` (`2·n²` float32). `param` = `n`, or 0 to infer `n`
//! from the length; `n ≤ MATMUL_MAX_N`. Output is `C = A·B`, `n×n`
//! row-major float32.
//!
//! Loop order is i-k-j (for each row `i` of `C`, add `A[i][k] · B[k][..]`
//! for `k = 0..n`), register-tiled: a tile of `R` rows × `W` columns of `C`
//! is accumulated in registers over all `k`, then stored. Every `C[i][j]` is
//! summed as `((0 + A[i][0]·B[0][j]) + A[i][1]·B[1][j]) + …` in increasing
//! `k`, with separate multiply and add (no FMA contraction), so the result
//! is bit-identical to the textbook triple loop, whatever the SIMD width.

use offrac_proto::FunctionId;

#[cfg(target_arch = "x86_64")]
use crate::elems::has_avx2;
use crate::elems::{decode_f32_into, encode_f32, ELEM};
use crate::{AccelError, Accelerator};

/// Largest accepted matrix side: 512 (input 2 MiB, output 1 MiB).
pub const MATMUL_MAX_N: usize = 512;

/// Square matrix product. `param` = n (0 = infer).
#[derive(Debug, Default, Clone)]
pub struct MatMul {
    ab: Vec<f32>,
    c: Vec<f32>,
}

impl MatMul {
    pub fn new() -> MatMul {
        MatMul::default()
    }
}

impl Accelerator for MatMul {
    fn function(&self) -> FunctionId {
        FunctionId::MatMul
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let n = side(param, input.len())?;
        decode_f32_into(input, &mut self.ab)?;
        let (a, b) = self.ab.split_at(n * n);
        self.c.clear();
        self.c.resize(n * n, 0.0);
        matmul(a, b, &mut self.c, n);
        encode_f32(&self.c, out);
        Ok(())
    }
}

/// The matrix side `n` for `param` and a payload of `len` bytes.
fn side(param: u64, len: usize) -> Result<usize, AccelError> {
    let bad = |m: String| Err(AccelError::BadInput(m));
    if len == 0 {
        return bad("empty input: expected two n×n float32 matrices".into());
    }
    if param > MATMUL_MAX_N as u64 {
        return bad(format!("n = {param} exceeds the maximum {MATMUL_MAX_N}"));
    }
    let n = if param == 0 {
        let n = (len / (2 * ELEM)).isqrt();
        if 2 * n * n * ELEM != len {
            return bad(format!(
                "input length {len} bytes is not 2·n·n·4 for any n (two n×n float32 matrices)"
            ));
        }
        if n > MATMUL_MAX_N {
            return bad(format!("n = {n} exceeds the maximum {MATMUL_MAX_N}"));
        }
        n
    } else {
        let n = param as usize; // ≤ 512
        if 2 * n * n * ELEM != len {
            return bad(format!(
                "n = {n} needs {} bytes (two n×n float32 matrices), got {len}",
                2 * n * n * ELEM
            ));
        }
        n
    };
    Ok(n)
}

/// `c = a · b` for `n×n` row-major matrices (`c` zeroed on entry is not
/// required: every element is overwritten).
pub(crate) fn matmul(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { matmul_avx2(a, b, c, n) };
            return;
        }
    }
    matmul_generic(a, b, c, n);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn matmul_avx2(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    matmul_generic(a, b, c, n);
}

/// Rows per register tile.
const R: usize = 4;
/// Columns per register tile.
const W: usize = 16;

#[inline(always)]
fn matmul_generic(a: &[f32], b: &[f32], c: &mut [f32], n: usize) {
    let (a, b, c) = (&a[..n * n], &b[..n * n], &mut c[..n * n]);
    let full_rows = n - n % R;
    let full_cols = n - n % W;
    let mut i = 0;
    while i < full_rows {
        let mut j = 0;
        while j < full_cols {
            tile::<R, W>(a, b, c, n, i, j);
            j += W;
        }
        while j < n {
            tile::<R, 1>(a, b, c, n, i, j);
            j += 1;
        }
        i += R;
    }
    while i < n {
        let mut j = 0;
        while j < full_cols {
            tile::<1, W>(a, b, c, n, i, j);
            j += W;
        }
        while j < n {
            tile::<1, 1>(a, b, c, n, i, j);
            j += 1;
        }
        i += 1;
    }
}

/// `C[i0..i0+RR][j0..j0+WW] = A[i0..i0+RR][..] · B[..][j0..j0+WW]`, the
/// accumulators held in registers across the whole `k` loop.
#[inline(always)]
fn tile<const RR: usize, const WW: usize>(
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    n: usize,
    i0: usize,
    j0: usize,
) {
    let mut acc = [[0f32; WW]; RR];
    let a_rows: [&[f32]; RR] = std::array::from_fn(|r| &a[(i0 + r) * n..(i0 + r + 1) * n]);
    for (k, b_row) in b.chunks_exact(n).enumerate() {
        let bv: &[f32; WW] = match b_row[j0..].first_chunk::<WW>() {
            Some(v) => v,
            None => return, // unreachable: j0 + WW ≤ n
        };
        for (acc_r, a_row) in acc.iter_mut().zip(a_rows.iter()) {
            let av = a_row[k];
            for (s, &bj) in acc_r.iter_mut().zip(bv.iter()) {
                *s += av * bj;
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        let row = (i0 + r) * n + j0;
        c[row..row + WW].copy_from_slice(acc_r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn naive(a: &[f32], b: &[f32], n: usize) -> Vec<f32> {
        let mut c = vec![0f32; n * n];
        for i in 0..n {
            for j in 0..n {
                let mut s = 0f32;
                for k in 0..n {
                    s += a[i * n + k] * b[k * n + j];
                }
                c[i * n + j] = s;
            }
        }
        c
    }

    fn run(param: u64, a: &[f32], b: &[f32]) -> Result<Vec<f32>, AccelError> {
        let mut inp = Vec::new();
        encode_f32(a, &mut inp);
        encode_f32(b, &mut inp);
        let mut out = Vec::new();
        MatMul::new().run(param, &inp, &mut out)?;
        let mut c = Vec::new();
        decode_f32_into(&out, &mut c)?;
        Ok(c)
    }

    #[test]
    fn two_by_two() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        assert_eq!(run(2, &a, &b).unwrap(), [19.0, 22.0, 43.0, 50.0]);
        assert_eq!(run(0, &a, &b).unwrap(), [19.0, 22.0, 43.0, 50.0]);
        assert_eq!(run(0, &[3.0], &[-2.0]).unwrap(), [-6.0]);
    }

    #[test]
    fn identity() {
        for n in [1usize, 3, 4, 5, 16, 17, 21, 33] {
            let a: Vec<f32> = (0..n * n).map(|x| x as f32 * 0.5 - 7.0).collect();
            let id: Vec<f32> = (0..n * n)
                .map(|x| f32::from(u8::from(x % (n + 1) == 0)))
                .collect();
            assert_eq!(run(0, &a, &id).unwrap(), a, "n = {n}");
            assert_eq!(run(n as u64, &id, &a).unwrap(), a, "n = {n}");
        }
    }

    #[test]
    fn length_checks() {
        let e = |param: u64, len: usize| {
            let mut out = Vec::new();
            let r = MatMul::new().run(param, &vec![0u8; len], &mut out);
            assert!(out.is_empty());
            match r {
                Err(AccelError::BadInput(m)) => m,
                other => panic!("param {param}, len {len}: {other:?}"),
            }
        };
        assert!(e(0, 0).contains("empty"));
        assert!(e(0, 4).contains("2·n·n·4"));
        assert!(e(0, 24).contains("2·n·n·4")); // 6 floats: n² = 3
        assert!(e(0, 9).contains("2·n·n·4"));
        assert!(e(2, 16).contains("needs 32 bytes"));
        assert!(e(1, 9).contains("needs 8 bytes"));
        assert!(e(513, 2 * 513 * 513 * 4).contains("maximum 512"));
        assert!(e(0, 2 * 513 * 513 * 4).contains("maximum 512"));
        assert!(e(u64::MAX, 8).contains("maximum 512"));
    }

    #[test]
    fn largest_accepted() {
        let n = MATMUL_MAX_N;
        let a = vec![1.0f32; n * n];
        let c = run(0, &a, &a).unwrap();
        assert_eq!(c.len(), n * n);
        assert!(c.iter().all(|&x| x == n as f32));
    }

    /// The run-time-selected (AVX2) copy and the portable (SSE2 baseline)
    /// copy give identical bits.
    #[test]
    fn portable_and_dispatched_paths_agree() {
        for n in [1usize, 7, 16, 37, 64] {
            let a: Vec<f32> = (0..n * n)
                .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
                .collect();
            let b: Vec<f32> = (0..n * n)
                .map(|i| ((i * 104_729) % 997) as f32 / 91.0 - 5.0)
                .collect();
            let (mut c1, mut c2) = (vec![0f32; n * n], vec![0f32; n * n]);
            matmul(&a, &b, &mut c1, n);
            matmul_generic(&a, &b, &mut c2, n);
            assert!(
                c1.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()),
                "n = {n}"
            );
            assert_eq!(c1, naive(&a, &b, n));
        }
    }

    #[test]
    fn special_values_propagate() {
        let c = run(0, &[f32::NAN, 0.0, 0.0, 1.0], &[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert!(c[0].is_nan() && c[1].is_nan());
        assert_eq!(&c[2..], [3.0, 4.0]);
    }

    proptest! {
        /// Bit-identical to the naive triple loop (same summation order, no
        /// FMA), which is stronger than any tolerance.
        #[test]
        fn equals_naive_triple_loop(
            (n, a, b) in (1usize..40).prop_flat_map(|n| (
                Just(n),
                prop::collection::vec(-100f32..100.0, n * n),
                prop::collection::vec(-100f32..100.0, n * n),
            )),
            infer in any::<bool>(),
        ) {
            let c = run(if infer { 0 } else { n as u64 }, &a, &b).unwrap();
            let want = naive(&a, &b, n);
            for (x, y) in c.iter().zip(&want) {
                prop_assert_eq!(x.to_bits(), y.to_bits());
            }
            // And within a loose relative tolerance of an f64 evaluation.
            for i in 0..n {
                for j in 0..n {
                    let (mut s, mut m) = (0f64, 0f64);
                    for k in 0..n {
                        let p = f64::from(a[i * n + k]) * f64::from(b[k * n + j]);
                        s += p;
                        m += p.abs();
                    }
                    prop_assert!((f64::from(c[i * n + j]) - s).abs() <= 1e-5 * m + 1e-30);
                }
            }
        }
    }
}
