//! `mapid` (id 6): each 32-bit hashed id → its contiguous index in the
//! slot's dictionary; ids not in it → the dictionary's size (one
//! out-of-vocabulary index). `uint32[]` in, `uint32[]` out; `param` unused.

use std::sync::Arc;

use offrac_proto::FunctionId;

use super::map_u32;
use super::state::Dictionary;
use crate::elems::element_count;
use crate::{AccelError, Accelerator};

pub struct MapId {
    dictionary: Arc<Dictionary>,
}

impl MapId {
    pub fn new(dictionary: Arc<Dictionary>) -> MapId {
        MapId { dictionary }
    }
}

impl Accelerator for MapId {
    fn function(&self) -> FunctionId {
        FunctionId::MapId
    }

    /// A hash probe per id: ~1-2 ns each (`make bench-kernels`).
    fn inline_max_bytes(&self) -> usize {
        16384
    }

    fn run(&mut self, _param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        element_count(input, "uint32")?;
        let d = &*self.dictionary;
        map_u32(input, out, |k| d.lookup(k));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_known_and_unknown() {
        let mut m = MapId::new(Arc::new(Dictionary::from_keys([0xa73e_e510, 7, 9])));
        let inp: Vec<u8> = [9u32, 0xa73e_e510, 1, 7]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut out = Vec::new();
        m.run(0, &inp, &mut out).unwrap();
        let got: Vec<u32> = out
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, [2, 0, 3, 1]);
        assert!(m.run(0, &[1, 2, 3], &mut out).is_err());
        assert!(m.run(0, &[], &mut out).is_err());
    }
}
