//! Element-wise reduction of little-endian arrays in place.

use crate::wire::{Dtype, RedOp};

/// `acc[i] = acc[i] ⊕ src[i]`; both the same length, a multiple of 4.
/// Sums of int32 wrap; max of float32 propagates NaN (as numpy's `maximum`).
pub fn combine(dtype: Dtype, op: RedOp, acc: &mut [u8], src: &[u8]) {
    debug_assert_eq!(acc.len(), src.len());
    let pairs = acc.chunks_exact_mut(4).zip(src.chunks_exact(4));
    match dtype {
        Dtype::F32 => {
            for (a, b) in pairs {
                let r = f32_op(op, f32_of(a), f32_of(b));
                a.copy_from_slice(&r.to_le_bytes());
            }
        }
        Dtype::I32 => {
            for (a, b) in pairs {
                let r = i32_op(op, i32_of(a), i32_of(b));
                a.copy_from_slice(&r.to_le_bytes());
            }
        }
    }
}

/// `out[i] = a[i] ⊕ b[i]` (as [`combine`]): a reduction out of place, so
/// that `a` need not be copied into `out` first.
pub fn combine_into(dtype: Dtype, op: RedOp, out: &mut [u8], a: &[u8], b: &[u8]) {
    debug_assert_eq!(out.len(), a.len());
    debug_assert_eq!(out.len(), b.len());
    let triples = out
        .chunks_exact_mut(4)
        .zip(a.chunks_exact(4).zip(b.chunks_exact(4)));
    match dtype {
        Dtype::F32 => {
            for (o, (x, y)) in triples {
                o.copy_from_slice(&f32_op(op, f32_of(x), f32_of(y)).to_le_bytes());
            }
        }
        Dtype::I32 => {
            for (o, (x, y)) in triples {
                o.copy_from_slice(&i32_op(op, i32_of(x), i32_of(y)).to_le_bytes());
            }
        }
    }
}

fn f32_of(b: &[u8]) -> f32 {
    f32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn i32_of(b: &[u8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn f32_op(op: RedOp, x: f32, y: f32) -> f32 {
    match op {
        RedOp::Sum => x + y,
        RedOp::Max if x.is_nan() || y.is_nan() => f32::NAN,
        RedOp::Max => x.max(y),
        RedOp::None => y,
    }
}

fn i32_op(op: RedOp, x: i32, y: i32) -> i32 {
    match op {
        RedOp::Sum => x.wrapping_add(y),
        RedOp::Max => x.max(y),
        RedOp::None => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes<T: Copy>(v: &[T], f: fn(T) -> [u8; 4]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }

    #[test]
    fn sums_and_maxes() {
        let mut a = bytes(&[1i32, i32::MAX, -5], i32::to_le_bytes);
        combine(
            Dtype::I32,
            RedOp::Sum,
            &mut a,
            &bytes(&[2, 1, 5], i32::to_le_bytes),
        );
        assert_eq!(a, bytes(&[3, i32::MIN, 0], i32::to_le_bytes));
        let mut f = bytes(&[1.5f32, -2.0, f32::NAN], f32::to_le_bytes);
        combine(
            Dtype::F32,
            RedOp::Max,
            &mut f,
            &bytes(&[0.5f32, 3.0, 1.0], f32::to_le_bytes),
        );
        let out: Vec<f32> = f
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(out[..2], [1.5, 3.0]);
        assert!(out[2].is_nan());
    }

    #[test]
    fn out_of_place_matches_in_place() {
        let a = bytes(&[1.5f32, -2.0, f32::NAN, 7.0], f32::to_le_bytes);
        let b = bytes(&[0.5f32, 3.0, 1.0, -7.5], f32::to_le_bytes);
        for op in [RedOp::Sum, RedOp::Max] {
            let mut acc = a.clone();
            combine(Dtype::F32, op, &mut acc, &b);
            let mut out = vec![0u8; a.len()];
            combine_into(Dtype::F32, op, &mut out, &a, &b);
            assert_eq!(out, acc, "{op:?}");
        }
        let x = bytes(&[i32::MAX, -3, 9], i32::to_le_bytes);
        let y = bytes(&[1, 4, -20], i32::to_le_bytes);
        let mut out = vec![0u8; x.len()];
        combine_into(Dtype::I32, RedOp::Sum, &mut out, &x, &y);
        assert_eq!(out, bytes(&[i32::MIN, 1, -11], i32::to_le_bytes));
    }
}
