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
                let x = f32::from_le_bytes([a[0], a[1], a[2], a[3]]);
                let y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let r = match op {
                    RedOp::Sum => x + y,
                    RedOp::Max if x.is_nan() || y.is_nan() => f32::NAN,
                    RedOp::Max => x.max(y),
                    RedOp::None => y,
                };
                a.copy_from_slice(&r.to_le_bytes());
            }
        }
        Dtype::I32 => {
            for (a, b) in pairs {
                let x = i32::from_le_bytes([a[0], a[1], a[2], a[3]]);
                let y = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                let r = match op {
                    RedOp::Sum => x.wrapping_add(y),
                    RedOp::Max => x.max(y),
                    RedOp::None => y,
                };
                a.copy_from_slice(&r.to_le_bytes());
            }
        }
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
}
