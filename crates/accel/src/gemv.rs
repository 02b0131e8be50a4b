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
//! on the CPU; it differs from a sequential sum by rounding only.

use offrac_proto::FunctionId;

use crate::elems::{decode_f32_into, encode_f32, ELEM};
use crate::{AccelError, Accelerator};

/// Matrix-vector product. `param` = n (columns, ≥ 1).
#[derive(Debug, Default, Clone)]
pub struct Gemv {
    ax: Vec<f32>,
    y: Vec<f32>,
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
        let bad = |m: String| Err(AccelError::BadInput(m));
        if param == 0 {
            return bad("cols must be at least 1".into());
        }
        let words = input.len() / ELEM;
        if !input.len().is_multiple_of(ELEM) {
            return bad(format!(
                "input of {} bytes is not a whole number of float32",
                input.len()
            ));
        }
        let n = usize::try_from(param).unwrap_or(usize::MAX);
        if n >= words || !(words - n).is_multiple_of(n) {
            return bad(format!(
                "{words} float32 are not an m×{n} matrix (m ≥ 1) followed by a {n}-vector"
            ));
        }
        decode_f32_into(input, &mut self.ax)?;
        let (a, x) = self.ax.split_at(words - n);
        self.y.clear();
        self.y.extend(a.chunks_exact(n).map(|row| dot(row, x)));
        encode_f32(&self.y, out);
        Ok(())
    }
}

/// The dot product of `a` and `b` (same length) in the lane order above.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ar, br) = (ac.remainder(), bc.remainder());
    for (ca, cb) in ac.zip(bc) {
        for l in 0..8 {
            lanes[l] += ca[l] * cb[l];
        }
    }
    for (l, (x, y)) in ar.iter().zip(br).enumerate() {
        lanes[l] += x * y;
    }
    let [l0, l1, l2, l3, l4, l5, l6, l7] = lanes;
    ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn floats(b: &[u8]) -> Vec<f32> {
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
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
        let mut input = a.clone();
        input.extend_from_slice(&x);
        let mut out = Vec::new();
        Gemv::new().run(n as u64, &bytes(&input), &mut out).unwrap();
        let want: Vec<f32> = a
            .chunks(n)
            .map(|r| r.iter().zip(&x).map(|(p, q)| p * q).sum())
            .collect();
        assert_eq!(floats(&out), want);
        // The documented order, spelled out for one row of 9 columns.
        let r: Vec<f32> = (0..9).map(|i| 1.0 + i as f32 * 1e-3).collect();
        let ones = vec![1.0f32; 9];
        let mut l = [0f32; 8];
        for (k, v) in r.iter().enumerate() {
            l[k % 8] += v;
        }
        let want = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
        assert_eq!(dot(&r, &ones).to_bits(), want.to_bits());
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
            match g.run(param, &input, &mut out) {
                Err(AccelError::BadInput(m)) => assert!(m.contains(why), "{m}"),
                r => panic!("param {param}: {r:?}"),
            }
        }
    }
}
