//! `sigridhash` (id 9): TorchArrow's `sigrid_hash(x, salt, max_value)` of each
//! `uint32` id: `h = hash_128_to_64(salt, twang_mix64(x))` read as `int64`,
//! reduced by floor modulo into `[0, max_value)` (Python's `%`). `param`:
//! bits 0-31 `max_value` (1..=2^31, so results fit `uint32`), bits 32-63
//! `salt` (signed 32-bit, sign-extended to 64). Identical to TorchArrow's
//! output for these inputs (checked against its published test values).

use offrac_proto::{FunctionId, ParamField};

use super::hash::{hash_128_to_64, twang_mix64};
use super::map_u32;
use crate::elems::element_count;
use crate::{AccelError, Accelerator};

/// Largest `max_value`.
pub const SIGRID_MAX_VALUE: u64 = 1 << 31;

/// TorchArrow `sigrid_hash` of one value (`max_value` ≥ 1).
#[inline(always)]
pub fn sigrid_hash(x: i64, salt: i64, max_value: i64) -> i64 {
    let h = hash_128_to_64(salt as u64, twang_mix64(x as u64)) as i64;
    h.rem_euclid(max_value)
}

#[derive(Debug, Default, Clone, Copy)]
pub struct SigridHash;

fn field(i: usize) -> &'static ParamField {
    &FunctionId::SigridHash.spec().params[i]
}

impl Accelerator for SigridHash {
    fn function(&self) -> FunctionId {
        FunctionId::SigridHash
    }

    fn inline_max_bytes(&self) -> usize {
        16384
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        element_count(input, "uint32")?;
        let max_value = field(0).raw(param);
        if !(1..=SIGRID_MAX_VALUE).contains(&max_value) {
            return Err(AccelError::BadInput(format!(
                "max_value {max_value} outside 1..=2^31 (param bits 0-31)"
            )));
        }
        let salt = field(1).signed(param);
        let m = max_value as i64;
        map_u32(input, out, |x| sigrid_hash(i64::from(x), salt, m) as u32);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The values of TorchArrow's own test (`SigridHashTest.Val`): ids 1..=16,
    /// salt 0, max_value 100.
    #[test]
    fn matches_torcharrow_test_values() {
        let want = [60, 54, 54, 9, 4, 91, 11, 67, 79, 2, 25, 92, 98, 83, 66, 2];
        let got: Vec<i64> = (1..=16).map(|x| sigrid_hash(x, 0, 100)).collect();
        assert_eq!(got, want);
        let inp: Vec<u8> = (1u32..=16).flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        SigridHash.run(100, &inp, &mut out).unwrap();
        let w: Vec<i64> = out
            .chunks(4)
            .map(|c| i64::from(u32::from_le_bytes(c.try_into().unwrap())))
            .collect();
        assert_eq!(w, want);
    }

    #[test]
    fn salt_and_range() {
        let p = |max: u64, salt: i32| max | (u64::from(salt as u32) << 32);
        let inp: Vec<u8> = (0u32..1000).flat_map(|v| v.to_le_bytes()).collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        SigridHash.run(p(7, -5), &inp, &mut a).unwrap();
        SigridHash.run(p(7, 5), &inp, &mut b).unwrap();
        assert_ne!(a, b);
        assert!(a
            .chunks(4)
            .all(|c| u32::from_le_bytes(c.try_into().unwrap()) < 7));
        assert_eq!(
            sigrid_hash(3, -5, 7),
            (hash_128_to_64(-5i64 as u64, twang_mix64(3)) as i64).rem_euclid(7)
        );
        assert!(SigridHash.run(p(0, 0), &inp, &mut a).is_err());
        assert!(SigridHash
            .run(p(SIGRID_MAX_VALUE + 1, 0), &inp, &mut a)
            .is_err());
        assert!(SigridHash.run(p(SIGRID_MAX_VALUE, 0), &inp, &mut a).is_ok());
    }
}
