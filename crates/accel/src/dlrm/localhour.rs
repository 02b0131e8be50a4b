//! `getlocalhour` (id 14): the local hour of day (0-23) of each `uint32` unix
//! timestamp (seconds): `floor(((t + offset) mod 86400) / 3600)` with the
//! modulo taken as Euclidean. `param` bits 0-31: the UTC offset in seconds,
//! signed, |offset| ≤ `MAX_UTC_OFFSET_S` (±18 h).

use offrac_proto::FunctionId;

use super::map_u32;
use crate::elems::element_count;
use crate::{AccelError, Accelerator};

pub const MAX_UTC_OFFSET_S: i64 = 18 * 3600;

#[derive(Debug, Default, Clone, Copy)]
pub struct GetLocalHour;

impl Accelerator for GetLocalHour {
    fn function(&self) -> FunctionId {
        FunctionId::GetLocalHour
    }

    fn inline_max_bytes(&self) -> usize {
        16384
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        element_count(input, "uint32")?;
        let offset = FunctionId::GetLocalHour.spec().params[0].signed(param);
        if param >> 32 != 0 {
            return Err(AccelError::BadInput(format!(
                "param {param:#x}: utc_offset_s is bits 0-31 (a signed 32-bit value); bits 32-63 must be 0"
            )));
        }
        if offset.abs() > MAX_UTC_OFFSET_S {
            return Err(AccelError::BadInput(format!(
                "utc_offset_s {offset} outside ±{MAX_UTC_OFFSET_S}"
            )));
        }
        map_u32(input, out, |t| {
            ((i64::from(t) + offset).rem_euclid(86_400) / 3600) as u32
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ts: &[u32], offset: i32) -> Result<Vec<u32>, AccelError> {
        let inp: Vec<u8> = ts.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut out = Vec::new();
        GetLocalHour.run(u64::from(offset as u32), &inp, &mut out)?;
        Ok(out
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }

    #[test]
    fn hours() {
        // 2026-11-25 09:39:29 UTC = 1795599569.
        assert_eq!(
            run(&[1_795_599_569, 0, 3599, 3600, 86_399], 0).unwrap(),
            [9, 0, 0, 1, 23]
        );
        assert_eq!(run(&[0], -3600).unwrap(), [23]);
        assert_eq!(run(&[1_795_599_569], 5 * 3600 + 1800).unwrap(), [15]);
        assert!(run(&[0], 18 * 3600 + 1).is_err());
        assert!(run(&[0], -18 * 3600).is_ok());
    }
}
