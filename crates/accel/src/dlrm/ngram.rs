//! `ngram` (id 13): the n-grams of consecutive ids in each list, each hashed
//! to one id: `h = a₀; h = hash_128_to_64(h, aⱼ)` for the following ids,
//! then `h mod 2^32` (so n = 1 returns the ids unchanged). A list of L ids
//! gives `max(L − n + 1, 0)` grams. Ragged `uint32` in and out; `param` =
//! n, 1..=`NGRAM_MAX_N`.

use offrac_proto::FunctionId;

use super::hash::hash_128_to_64;
use crate::ragged::{RaggedBuilder, RaggedView};
use crate::{AccelError, Accelerator};

pub const NGRAM_MAX_N: u64 = 16;

#[derive(Debug, Default, Clone)]
pub struct NGram {
    out: RaggedBuilder,
    row: Vec<u32>,
}

impl Accelerator for NGram {
    fn function(&self) -> FunctionId {
        FunctionId::NGram
    }

    fn inline_max_bytes(&self) -> usize {
        8192
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let v = RaggedView::parse(input, 1)?;
        if !(1..=NGRAM_MAX_N).contains(&param) {
            return Err(AccelError::BadInput(format!(
                "n (param) = {param} outside 1..={NGRAM_MAX_N}"
            )));
        }
        let n = param as usize;
        let (b, row) = (&mut self.out, &mut self.row);
        b.clear();
        for r in 0..v.rows() {
            row.clear();
            row.extend(v.row_u32(0, r));
            for w in row.windows(n) {
                let h = w[1..]
                    .iter()
                    .fold(u64::from(w[0]), |h, &x| hash_128_to_64(h, u64::from(x)));
                b.push(h as u32);
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
    fn grams() {
        let inp = encode_id_lists(&[vec![1, 2, 3], vec![4], vec![]]);
        let mut out = Vec::new();
        let mut g = NGram::default();
        g.run(1, &inp, &mut out).unwrap();
        assert_eq!(
            decode_id_lists(&out).unwrap(),
            [vec![1, 2, 3], vec![4], vec![]]
        );
        out.clear();
        g.run(2, &inp, &mut out).unwrap();
        let h = |a: u64, b: u64| hash_128_to_64(a, b);
        assert_eq!(
            decode_id_lists(&out).unwrap(),
            [vec![h(1, 2) as u32, h(2, 3) as u32], vec![], vec![]]
        );
        out.clear();
        g.run(3, &inp, &mut out).unwrap();
        assert_eq!(decode_id_lists(&out).unwrap()[0], [h(h(1, 2), 3) as u32]);
        assert!(g.run(0, &inp, &mut out).is_err());
        assert!(g.run(17, &inp, &mut out).is_err());
    }
}
