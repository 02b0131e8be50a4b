//! `sparsetransform` (id 7): dense `float32` rows → CSR. Input: `rows × cols`
//! elements, row-major (`param` = cols; 0: the whole payload is one row).
//! Output: the ragged layout with two arrays — the column index (`uint32`)
//! and the value (`float32`) of every element `!= 0.0` (so `±0` are dropped,
//! NaN and infinities kept), in row then column order.

use offrac_proto::FunctionId;

use crate::elems::{element_count, ELEM};
use crate::ragged::RaggedBuilder;
use crate::{AccelError, Accelerator};

#[derive(Debug, Default, Clone)]
pub struct SparseTransform {
    csr: RaggedBuilder,
}

impl Accelerator for SparseTransform {
    fn function(&self) -> FunctionId {
        FunctionId::SparseTransform
    }

    fn inline_max_bytes(&self) -> usize {
        16384
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let n = element_count(input, "float32")?;
        let cols = if param == 0 { n as u64 } else { param };
        if !(n as u64).is_multiple_of(cols) {
            return Err(AccelError::BadInput(format!(
                "{n} elements are not whole rows of cols = {cols}"
            )));
        }
        let cols = cols as usize; // ≤ n
        let b = &mut self.csr;
        b.clear();
        for row in input.as_chunks::<ELEM>().0.chunks_exact(cols) {
            for (c, w) in row.iter().enumerate() {
                if f32::from_le_bytes(*w) != 0.0 {
                    b.push2(c as u32, u32::from_le_bytes(*w));
                }
            }
            b.end_row()?;
        }
        b.finish(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(out: &[u8]) -> Vec<u32> {
        out.chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn papers_example() {
        // [0, 4.2, 0, 0, 7.1] -> values {4.2, 7.1}, indices {1, 4}.
        let inp: Vec<u8> = [0.0f32, 4.2, 0.0, -0.0, 7.1]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        SparseTransform::default().run(0, &inp, &mut out).unwrap();
        assert_eq!(
            words(&out),
            [1, 0, 2, 1, 4, 4.2f32.to_bits(), 7.1f32.to_bits()]
        );
    }

    #[test]
    fn rows_and_errors() {
        let inp: Vec<u8> = [1.0f32, 0.0, 0.0, 0.0, f32::NAN, 2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        let mut s = SparseTransform::default();
        s.run(2, &inp, &mut out).unwrap();
        let w = words(&out);
        assert_eq!(&w[..4 + 1], [3, 0, 1, 1, 3]);
        assert_eq!(&w[5..8], [0, 0, 1]);
        assert!(f32::from_bits(w[9]).is_nan());
        assert!(
            matches!(s.run(4, &inp, &mut Vec::new()), Err(AccelError::BadInput(m)) if m.contains("cols = 4"))
        );
        assert!(s.run(0, &[], &mut Vec::new()).is_err());
    }
}
