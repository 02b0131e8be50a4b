//! `idlisttransform` (id 11): the intersection of two id lists per row. The
//! input's rows come in pairs (rows 2i and 2i+1); output row i holds the ids
//! of row 2i that also occur in row 2i+1, in row 2i's order, repeats kept.
//! Ragged `uint32` in and out; an odd row count is refused.

use offrac_proto::FunctionId;

use crate::ragged::{RaggedBuilder, RaggedView};
use crate::{AccelError, Accelerator};

/// Second lists up to this long are scanned; longer ones sorted and
/// binary-searched.
const SCAN_MAX: usize = 16;

#[derive(Debug, Default, Clone)]
pub struct IdListTransform {
    out: RaggedBuilder,
    sorted: Vec<u32>,
}

impl Accelerator for IdListTransform {
    fn function(&self) -> FunctionId {
        FunctionId::IdListTransform
    }

    fn inline_max_bytes(&self) -> usize {
        16384
    }

    fn run(&mut self, _param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let v = RaggedView::parse_pairs(input)?;
        let (b, sorted) = (&mut self.out, &mut self.sorted);
        b.clear();
        for r in (0..v.rows()).step_by(2) {
            sorted.clear();
            sorted.extend(v.row_u32(0, r + 1));
            if sorted.len() > SCAN_MAX {
                sorted.sort_unstable();
                v.row_u32(0, r)
                    .filter(|id| sorted.binary_search(id).is_ok())
                    .for_each(|id| b.push(id));
            } else {
                v.row_u32(0, r)
                    .filter(|id| sorted.contains(id))
                    .for_each(|id| b.push(id));
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
    use crate::ragged::{decode_id_lists, encode_id_lists};

    #[test]
    fn intersects_pairs() {
        let long: Vec<u32> = (0..100).rev().collect();
        let inp = encode_id_lists(&[
            vec![3, 1, 2, 3],
            vec![3, 2],
            vec![5],
            vec![],
            vec![7, 200, 50],
            long,
        ]);
        let mut out = Vec::new();
        IdListTransform::default().run(0, &inp, &mut out).unwrap();
        assert_eq!(
            decode_id_lists(&out).unwrap(),
            [vec![3, 2, 3], vec![], vec![7, 50]]
        );
        let odd = encode_id_lists(&[vec![1]]);
        assert!(
            matches!(IdListTransform::default().run(0, &odd, &mut out), Err(AccelError::BadInput(m)) if m.contains("even"))
        );
    }
}
