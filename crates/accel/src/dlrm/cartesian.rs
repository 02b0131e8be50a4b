//! `cartesian` (id 12): the crossed ids of two id lists per row. Rows come
//! in pairs (2i, 2i+1); output row i holds, for each `a` of row 2i and then
//! each `b` of row 2i+1 (a-major), the id `hash_128_to_64(a, b) mod 2^32`
//! (folly's hash; feed it to `sigridhash` to bound the range). Ragged
//! `uint32` in and out; at most `CARTESIAN_MAX_IDS` ids out.

use offrac_proto::FunctionId;

use super::hash::hash_128_to_64;
use crate::ragged::{RaggedBuilder, RaggedView};
use crate::{AccelError, Accelerator};

/// Largest result (ids): 16 MiB of output.
pub const CARTESIAN_MAX_IDS: usize = 1 << 22;

#[derive(Debug, Default, Clone)]
pub struct Cartesian {
    out: RaggedBuilder,
}

impl Accelerator for Cartesian {
    fn function(&self) -> FunctionId {
        FunctionId::Cartesian
    }

    fn inline_max_bytes(&self) -> usize {
        4096
    }

    fn run(&mut self, _param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let v = RaggedView::parse_pairs(input)?;
        let mut total = 0usize;
        for r in (0..v.rows()).step_by(2) {
            total = total.saturating_add(
                v.row_u32(0, r)
                    .len()
                    .saturating_mul(v.row_u32(0, r + 1).len()),
            );
            if total > CARTESIAN_MAX_IDS {
                return Err(AccelError::BadInput(format!(
                    "the product up to row pair {} has more than {CARTESIAN_MAX_IDS} ids",
                    r / 2
                )));
            }
        }
        let b = &mut self.out;
        b.clear();
        for r in (0..v.rows()).step_by(2) {
            for a in v.row_u32(0, r) {
                for c in v.row_u32(0, r + 1) {
                    b.push(hash_128_to_64(u64::from(a), u64::from(c)) as u32);
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
    use crate::ragged::{decode_id_lists, encode_id_lists};

    #[test]
    fn crosses_pairs() {
        let inp = encode_id_lists(&[vec![1, 2], vec![10, 20, 30], vec![], vec![4]]);
        let mut out = Vec::new();
        Cartesian::default().run(0, &inp, &mut out).unwrap();
        let rows = decode_id_lists(&out).unwrap();
        let h = |a: u64, b: u64| hash_128_to_64(a, b) as u32;
        assert_eq!(
            rows,
            [
                vec![h(1, 10), h(1, 20), h(1, 30), h(2, 10), h(2, 20), h(2, 30)],
                vec![]
            ]
        );
    }

    #[test]
    fn refuses_huge_products() {
        let big: Vec<u32> = (0..3000).collect();
        let inp = encode_id_lists(&[big.clone(), big]);
        assert!(
            matches!(Cartesian::default().run(0, &inp, &mut Vec::new()), Err(AccelError::BadInput(m)) if m.contains("row pair 0"))
        );
    }
}
