//! `onehot` (id 15): each `uint32` id `v` → a row of C `float32`, 1.0 at
//! column `v` and 0.0 elsewhere (row-major, n × C). `param` = C,
//! 1..=`ONEHOT_MAX_CLASSES`; an id ≥ C is refused with its index (map raw
//! ids first, e.g. with `mapid`, whose out-of-vocabulary index is the
//! dictionary size: use C = size + 1).

use offrac_proto::FunctionId;

use super::u32_words;
use crate::{AccelError, Accelerator};

pub const ONEHOT_MAX_CLASSES: u64 = 65_536;
/// Largest output: 64 MiB.
pub const ONEHOT_MAX_OUTPUT_BYTES: usize = 64 << 20;

#[derive(Debug, Default, Clone, Copy)]
pub struct Onehot;

impl Accelerator for Onehot {
    fn function(&self) -> FunctionId {
        FunctionId::Onehot
    }

    fn inline_max_bytes(&self) -> usize {
        1024
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        let ids = u32_words(input)?;
        if !(1..=ONEHOT_MAX_CLASSES).contains(&param) {
            return Err(AccelError::BadInput(format!(
                "classes (param) = {param} outside 1..={ONEHOT_MAX_CLASSES}"
            )));
        }
        let c = param as usize;
        let bytes = ids.len() * c * 4;
        if bytes > ONEHOT_MAX_OUTPUT_BYTES {
            return Err(AccelError::BadInput(format!(
                "{} ids x {c} classes = {bytes} bytes, above the {ONEHOT_MAX_OUTPUT_BYTES}-byte limit",
                ids.len()
            )));
        }
        if let Some((i, v)) = u32_words(input)?
            .enumerate()
            .find(|&(_, v)| v as usize >= c)
        {
            return Err(AccelError::BadInput(format!(
                "id {v} at index {i} is not below classes = {c}"
            )));
        }
        let start = out.len();
        out.resize(start + bytes, 0);
        for (row, v) in out[start..].chunks_exact_mut(c * 4).zip(ids) {
            let at = v as usize * 4;
            row[at..at + 4].copy_from_slice(&1.0f32.to_le_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_refuses_out_of_range() {
        let inp: Vec<u8> = [2u32, 0].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        Onehot.run(3, &inp, &mut out).unwrap();
        let got: Vec<f32> = out
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [0.0, 0.0, 1.0, 1.0, 0.0, 0.0]);
        assert!(
            matches!(Onehot.run(2, &inp, &mut out), Err(AccelError::BadInput(m)) if m.contains("index 0"))
        );
        assert!(Onehot.run(0, &inp, &mut out).is_err());
    }
}
