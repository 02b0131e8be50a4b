//! `gemv` (id 18): `y = A·x` of an `m×n` row-major `float32` matrix `A` and
//! an `n`-vector `x`.
//!
//! Input is `A` then `x` (`m·n + n` float32, `m ≥ 1`); `param` = `n`
//! (`cols`, required). Output is `y`, `m` float32. Built for the distributed
//! vector-matrix multiply of ACCL+ §6 (`experiments/gemv`): each node keeps
//! its rows of `A` in a named buffer and multiplies the vector it is sent.
//!
//! Each `y[i]` is summed in eight lanes: lane `l` adds
//! `A[i][k]·x[k]` for `k ≡ l (mod 8)` in increasing `k` (separate multiply
//! and add, no FMA), then the lanes are added as `((l0+l4)+(l2+l6)) +
//! ((l1+l5)+(l3+l7))`. The order is fixed, so the result does not depend
//! on the CPU (nor on the AVX2 copy of the loop being picked at run time:
//! it has the same multiplies and adds, no FMA); it differs from a
//! sequential sum by rounding only.
//!
//! How it is computed (the order above is untouched by it): `A` is read
//! straight from the payload's little-endian bytes (only `x`, `n` floats,
//! is decoded), four rows at a time so that each block of eight `x`
//! elements is loaded once per four rows and the four rows' 32 lanes are
//! independent additions; the last `m mod 4` rows go one at a time.

use offrac_proto::FunctionId;

#[cfg(target_arch = "x86_64")]
use crate::elems::has_avx2;
use crate::elems::{decode_f32_into, ELEM};
use crate::{AccelError, Accelerator};

/// Lanes per row (the order in the module docs).
const LANES: usize = 8;
/// Bytes of one block of [`LANES`] matrix elements.
const BLOCK: usize = LANES * ELEM;
/// Rows summed together.
const ROWS: usize = 4;

/// Matrix-vector product. `param` = n (columns, ≥ 1).
#[derive(Debug, Default, Clone)]
pub struct Gemv {
    x: Vec<f32>,
}

impl Gemv {
    pub fn new() -> Gemv {
        Gemv::default()
    }
}

impl Accelerator for Gemv {
    fn function(&self) -> FunctionId {
        FunctionId::Gemv
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let (a, x) = input.split_at(matrix_bytes(param, input.len())?);
        self.multiply(a, x, out)
    }

    /// A kept matrix then the vector (a load hop's output): `A` is read in
    /// place from `head`. Split anywhere else, the parts are joined.
    fn run_parts(
        &mut self,
        param: u64,
        head: &[u8],
        tail: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), AccelError> {
        if matrix_bytes(param, head.len() + tail.len())? == head.len() {
            return self.multiply(head, tail, out);
        }
        crate::run_joined(self, param, head, tail, out)
    }
}

impl Gemv {
    /// `A·x` of the matrix bytes `a` and the vector bytes `x` (their
    /// sizes checked by [`matrix_bytes`]).
    fn multiply(&mut self, a: &[u8], x: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        decode_f32_into(x, &mut self.x)?;
        gemv_bytes(a, &self.x, out);
        Ok(())
    }
}

/// The bytes of `A` in an input of `len` bytes for `param` columns, or why
/// that input is refused (checked on the length alone, so a split input
/// gets the joined one's refusal).
fn matrix_bytes(param: u64, len: usize) -> Result<usize, AccelError> {
    let bad = |m: String| Err(AccelError::BadInput(m));
    if param == 0 {
        return bad("cols must be at least 1".into());
    }
    let words = len / ELEM;
    if !len.is_multiple_of(ELEM) {
        return bad(format!(
            "input of {len} bytes is not a whole number of float32"
        ));
    }
    let n = usize::try_from(param).unwrap_or(usize::MAX);
    if n >= words || !(words - n).is_multiple_of(n) {
        return bad(format!(
            "{words} float32 are not an m×{n} matrix (m ≥ 1) followed by a {n}-vector"
        ));
    }
    Ok((words - n) * ELEM)
}

/// Appends `A·x` to `out` as little-endian float32, `A` the row-major
/// little-endian bytes of an `m×x.len()` matrix (`a.len()` a multiple of
/// `4·x.len()`, `x` not empty; the caller checks).
fn gemv_bytes(a: &[u8], x: &[f32], out: &mut Vec<u8>) {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx2() {
            // SAFETY: the CPU supports AVX2 (checked just above).
            unsafe { gemv_bytes_avx2(a, x, out) };
            return;
        }
    }
    gemv_rows(a, x, out);
}

/// The same loop compiled for AVX2 (wider vectors, the same operations in
/// the same order: no FMA).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn gemv_bytes_avx2(a: &[u8], x: &[f32], out: &mut Vec<u8>) {
    gemv_rows(a, x, out);
}

#[inline(always)]
fn gemv_rows(a: &[u8], x: &[f32], out: &mut Vec<u8>) {
    let row = x.len() * ELEM;
    let m = a.len() / row;
    out.reserve(m * ELEM);
    let (xb, xt) = x.as_chunks::<LANES>();
    let mut quads = a.chunks_exact(ROWS * row);
    for q in quads.by_ref() {
        let (r01, r23) = q.split_at(2 * row);
        let (r0, r1) = r01.split_at(row);
        let (r2, r3) = r23.split_at(row);
        for y in dot4([r0, r1, r2, r3], xb, xt) {
            out.extend_from_slice(&y.to_le_bytes());
        }
    }
    for r in quads.remainder().chunks_exact(row) {
        out.extend_from_slice(&dot1(r, xb, xt).to_le_bytes());
    }
}

/// Eight little-endian float32 from a block's bytes.
#[inline(always)]
fn load8(b: &[u8; BLOCK]) -> [f32; LANES] {
    let (w, _) = b.as_chunks::<ELEM>();
    std::array::from_fn(|l| f32::from_le_bytes(w[l]))
}

/// One little-endian float32 from a 4-byte chunk of a row's tail.
#[inline(always)]
fn elem(c: &[u8]) -> f32 {
    let mut b = [0u8; ELEM];
    b.copy_from_slice(&c[..ELEM]);
    f32::from_le_bytes(b)
}

/// The lanes' sum in the documented order.
#[inline(always)]
fn fold(l: [f32; LANES]) -> f32 {
    let [l0, l1, l2, l3, l4, l5, l6, l7] = l;
    ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
}

/// Four rows' dot products with `x` (its whole blocks `xb`, then its tail
/// `xt`), each in the documented lane order.
#[inline(always)]
fn dot4(rows: [&[u8]; ROWS], xb: &[[f32; LANES]], xt: &[f32]) -> [f32; ROWS] {
    let mut acc = [[0f32; LANES]; ROWS];
    let blocks = rows.map(|r| r.as_chunks::<BLOCK>());
    let (b0, b1, b2, b3) = (blocks[0].0, blocks[1].0, blocks[2].0, blocks[3].0);
    for ((((xv, a0), a1), a2), a3) in xb.iter().zip(b0).zip(b1).zip(b2).zip(b3) {
        for (acc, a) in acc.iter_mut().zip([a0, a1, a2, a3]) {
            let av = load8(a);
            for l in 0..LANES {
                acc[l] += av[l] * xv[l];
            }
        }
    }
    for (acc, (_, tail)) in acc.iter_mut().zip(blocks) {
        for (l, (c, xv)) in tail.chunks_exact(ELEM).zip(xt).enumerate() {
            acc[l] += elem(c) * xv;
        }
    }
    acc.map(fold)
}

/// One row's dot product with `x`, in the documented lane order.
#[inline(always)]
fn dot1(row: &[u8], xb: &[[f32; LANES]], xt: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let (blocks, tail) = row.as_chunks::<BLOCK>();
    for (xv, a) in xb.iter().zip(blocks) {
        let av = load8(a);
        for l in 0..LANES {
            acc[l] += av[l] * xv[l];
        }
    }
    for (l, (c, xv)) in tail.chunks_exact(ELEM).zip(xt).enumerate() {
        acc[l] += elem(c) * xv;
    }
    fold(acc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// `A·x` through `run`, checked bit for bit against `run_parts` with
    /// `A` kept apart (read in place) and split elsewhere (joined).
    fn gemv(a: &[f32], x: &[f32]) -> Vec<f32> {
        let mut input = a.to_vec();
        input.extend_from_slice(x);
        let input = bytes(&input);
        let mut out = Vec::new();
        let n = x.len() as u64;
        Gemv::new().run(n, &input, &mut out).unwrap();
        let a_len = 4 * a.len();
        for at in [a_len, 0, input.len(), a_len / 2 + 1, a_len + 4] {
            let at = at.min(input.len());
            let (head, tail) = input.split_at(at);
            let mut parts = Vec::new();
            Gemv::new().run_parts(n, head, tail, &mut parts).unwrap();
            assert_eq!(parts, out, "split at {at}");
        }
        floats(&out)
    }

    /// The documented order, spelled out one element at a time.
    fn lane_order(row: &[f32], x: &[f32]) -> f32 {
        let mut l = [0f32; 8];
        for (k, (a, b)) in row.iter().zip(x).enumerate() {
            l[k % 8] += a * b;
        }
        ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]))
    }

    #[test]
    fn small_product_is_exact() {
        // A = [[1, 2, 3], [4, 5, 6]], x = [1, 0, -1] -> [-2, -2].
        let input = bytes(&[1., 2., 3., 4., 5., 6., 1., 0., -1.]);
        let mut out = Vec::new();
        Gemv::new().run(3, &input, &mut out).unwrap();
        assert_eq!(floats(&out), vec![-2., -2.]);
    }

    #[test]
    fn matches_a_sequential_sum_on_integers_and_keeps_the_lane_order() {
        // Small integers: every partial sum is exact, so any order agrees.
        let (m, n) = (5, 37);
        let a: Vec<f32> = (0..m * n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
        let x: Vec<f32> = (0..n).map(|i| ((i * 3) % 5) as f32 - 2.0).collect();
        let want: Vec<f32> = a
            .chunks(n)
            .map(|r| r.iter().zip(&x).map(|(p, q)| p * q).sum())
            .collect();
        assert_eq!(gemv(&a, &x), want);
        // The documented order, spelled out for one row of 9 columns: lane 0
        // holds r[0] + r[8], the lanes are added pairwise as documented. The
        // values make the order show: 1e8 + 1 rounds to 1e8 in float32, so
        // this order gives 0 where a sequential sum (or lanes paired as
        // (l0+l1), (l2+l3), ...) gives 2.
        let mut r = vec![0f32; 9];
        (r[0], r[1], r[4], r[5], r[8]) = (1e8, -1e8, 1.0, 1.0, 0.5);
        let mut l = [0f32; 8];
        for (k, v) in r.iter().enumerate() {
            l[k % 8] += v;
        }
        let want = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
        assert_eq!(want, 0.0);
        // As row 0 (of the four-row loop) and as a lone row (m = 1).
        let four: Vec<f32> = r.iter().cycle().take(4 * 9).copied().collect();
        let ones = vec![1.0f32; 9];
        for y in gemv(&four, &ones) {
            assert_eq!(y.to_bits(), want.to_bits());
        }
        assert_eq!(gemv(&r, &ones)[0].to_bits(), want.to_bits());
        // A sequential sum differs: the order is not that one.
        let seq: f32 = r.iter().sum();
        assert_ne!(seq.to_bits(), want.to_bits());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]
        /// Random shapes (m = 1, n below, at and past multiples of 8 and 16,
        /// rows past a multiple of 4): bit for bit the documented order, and
        /// within float32 rounding of a float64 reference.
        #[test]
        fn random_shapes_keep_the_order_and_the_value(
            (m, n, a, x) in (1usize..=11, 1usize..=70).prop_flat_map(|(m, n)| (
                Just(m),
                Just(n),
                prop::collection::vec(-100f32..100f32, m * n),
                prop::collection::vec(-100f32..100f32, n),
            )),
        ) {
            let y = gemv(&a, &x);
            prop_assert_eq!(y.len(), m);
            for (i, (row, yi)) in a.chunks(n).zip(&y).enumerate() {
                prop_assert_eq!(yi.to_bits(), lane_order(row, &x).to_bits(), "row {}", i);
                let exact: f64 = row.iter().zip(&x).map(|(p, q)| f64::from(*p) * f64::from(*q)).sum();
                let bound: f64 = row.iter().zip(&x).map(|(p, q)| f64::from(p.abs() * q.abs())).sum();
                // n + 2 roundings of at most 2^-24 of the partial sums' magnitudes.
                let tol = (n as f64 + 2.0) * bound * f64::from(f32::EPSILON);
                prop_assert!((f64::from(*yi) - exact).abs() <= tol, "row {}: {} vs {}", i, yi, exact);
            }
        }
    }

    #[test]
    fn bad_shapes_are_refused() {
        let mut g = Gemv::new();
        let mut out = Vec::new();
        let six = bytes(&[1.; 6]);
        for (param, input, why) in [
            (0, six.clone(), "cols must be at least 1"),
            (3, bytes(&[1.; 3]), "not an m×3 matrix"),
            (4, six.clone(), "not an m×4 matrix"),
            (3, vec![0; 7], "not a whole number"),
            (u64::MAX, six, "not an m×"),
        ] {
            let joined = g.run(param, &input, &mut out);
            match &joined {
                Err(AccelError::BadInput(m)) => assert!(m.contains(why), "{m}"),
                r => panic!("param {param}: {r:?}"),
            }
            // Split anywhere (the matrix kept apart): the same refusal.
            for at in 0..=input.len() {
                let (head, tail) = input.split_at(at);
                assert_eq!(g.run_parts(param, head, tail, &mut out), joined);
            }
        }
    }
}
