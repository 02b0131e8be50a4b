//! `firstx` (id 10): each id list truncated to its first X ids (TorchArrow
//! `functional.firstx`). Ragged `uint32` in and out; `param` = X ≥ 1.

use offrac_proto::FunctionId;

use crate::ragged::{RaggedBuilder, RaggedView};
use crate::{AccelError, Accelerator};

#[derive(Debug, Default, Clone)]
pub struct FirstX {
    out: RaggedBuilder,
}

impl Accelerator for FirstX {
    fn function(&self) -> FunctionId {
        FunctionId::FirstX
    }

    fn inline_max_bytes(&self) -> usize {
        16384
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let v = RaggedView::parse(input, 1)?;
        if param == 0 {
            return Err(AccelError::BadInput("X (param) must be at least 1".into()));
        }
        let b = &mut self.out;
        b.clear();
        for r in 0..v.rows() {
            v.row_u32(0, r)
                .take(usize::try_from(param).unwrap_or(usize::MAX))
                .for_each(|id| b.push(id));
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
    fn truncates() {
        let inp = encode_id_lists(&[vec![1, 2, 3], vec![], vec![4], vec![5, 6]]);
        let mut out = Vec::new();
        FirstX::default().run(2, &inp, &mut out).unwrap();
        assert_eq!(
            decode_id_lists(&out).unwrap(),
            [vec![1, 2], vec![], vec![4], vec![5, 6]]
        );
        assert!(FirstX::default().run(0, &inp, &mut out).is_err());
        assert!(FirstX::default().run(1, &[1, 0, 0, 0], &mut out).is_err());
    }
}
