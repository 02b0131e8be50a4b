//! `bucketize` (id 8): each `float32` value → the number of borders strictly
//! below it (numpy `searchsorted(borders, x, side="left")`, TorchArrow
//! `functional.bucketize`). Borders: the slot's border set `param`
//! (`[functions.bucketize]`); NaN is refused with its index.

use std::sync::Arc;

use offrac_proto::FunctionId;

use crate::elems::{element_count, ELEM};
use crate::{AccelError, Accelerator};

/// Border sets up to this long are counted linearly (compares that
/// vectorise, no mispredicted branches); longer ones binary-searched.
const LINEAR_MAX: usize = 64;

pub struct Bucketize {
    sets: Arc<Vec<Vec<f32>>>,
}

impl Bucketize {
    pub fn new(sets: Arc<Vec<Vec<f32>>>) -> Bucketize {
        Bucketize { sets }
    }
}

impl Accelerator for Bucketize {
    fn function(&self) -> FunctionId {
        FunctionId::Bucketize
    }

    fn inline_max_bytes(&self) -> usize {
        16384
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        element_count(input, "float32")?;
        let Some(borders) = usize::try_from(param).ok().and_then(|i| self.sets.get(i)) else {
            return Err(AccelError::BadInput(format!(
                "border set {param} is not configured (this node has {})",
                self.sets.len()
            )));
        };
        let words = input.as_chunks::<ELEM>().0;
        if let Some(i) = words.iter().position(|w| f32::from_le_bytes(*w).is_nan()) {
            return Err(AccelError::BadInput(format!(
                "NaN at index {i} has no bucket"
            )));
        }
        out.reserve(input.len());
        let small = borders.len() <= LINEAR_MAX;
        for w in words {
            let x = f32::from_le_bytes(*w);
            let b = if small {
                // Branch-free count; vectorises (borders are sorted, so it
                // equals the binary search's answer).
                borders.iter().map(|&b| u32::from(b < x)).sum::<u32>()
            } else {
                borders.partition_point(|&b| b < x) as u32
            };
            out.extend_from_slice(&b.to_le_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torcharrow_docstring_example() {
        // functional.bucketize([1, 2, 3, 5, 8, 10, 11], [2, 5, 10]) = [0, 0, 1, 1, 2, 2, 3]
        let mut b = Bucketize::new(Arc::new(vec![vec![2.0, 5.0, 10.0]]));
        let inp: Vec<u8> = [1.0f32, 2.0, 3.0, 5.0, 8.0, 10.0, 11.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        b.run(0, &inp, &mut out).unwrap();
        let got: Vec<u32> = out
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [0, 0, 1, 1, 2, 2, 3]);
        assert!(
            matches!(b.run(1, &inp, &mut out), Err(AccelError::BadInput(m)) if m.contains("border set 1"))
        );
        let nan: Vec<u8> = [1.0f32, f32::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert!(
            matches!(b.run(0, &nan, &mut out), Err(AccelError::BadInput(m)) if m.contains("index 1"))
        );
    }

    #[test]
    fn linear_count_and_binary_search_agree() {
        let short: Vec<f32> = (0..LINEAR_MAX).map(|i| i as f32 * 1.5 - 10.0).collect();
        let long: Vec<f32> = (0..LINEAR_MAX * 3).map(|i| i as f32 * 0.5 - 10.0).collect();
        let mut b = Bucketize::new(Arc::new(vec![short.clone(), long.clone()]));
        let xs: Vec<f32> = (0..2000)
            .map(|i| i as f32 * 0.07 - 20.0)
            .chain([-0.0, 0.0, f32::INFINITY, f32::NEG_INFINITY])
            .collect();
        let inp: Vec<u8> = xs.iter().flat_map(|v| v.to_le_bytes()).collect();
        for (set, borders) in [short, long].iter().enumerate() {
            let mut out = Vec::new();
            b.run(set as u64, &inp, &mut out).unwrap();
            for (x, c) in xs.iter().zip(out.chunks(4)) {
                let got = u32::from_le_bytes(c.try_into().unwrap()) as usize;
                assert_eq!(got, borders.partition_point(|b| b < x), "x = {x}");
            }
        }
    }
}
