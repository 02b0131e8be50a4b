//! The DLRM preprocessing operators of seed 001 (Table I), one per file, and
//! the state their slots hold (`state`). Exact semantics:
//! `docs/accelerators.md`.

pub mod hash;
pub mod state;

mod boxcox;
mod bucketize;
mod cartesian;
mod firstx;
mod idlist;
mod localhour;
mod mapid;
mod ngram;
mod onehot;
mod sigrid;
mod sparse;

pub use boxcox::BoxCox;
pub use bucketize::Bucketize;
pub use cartesian::{Cartesian, CARTESIAN_MAX_IDS};
pub use firstx::FirstX;
pub use idlist::IdListTransform;
pub use localhour::{GetLocalHour, MAX_UTC_OFFSET_S};
pub use mapid::MapId;
pub use ngram::{NGram, NGRAM_MAX_N};
pub use onehot::{Onehot, ONEHOT_MAX_CLASSES, ONEHOT_MAX_OUTPUT_BYTES};
pub use sigrid::{sigrid_hash, SigridHash, SIGRID_MAX_VALUE};
pub use sparse::SparseTransform;

use crate::elems::{element_count, ELEM};
use crate::AccelError;

/// The `u32` elements of an array payload (validated: non-empty, whole words).
pub(crate) fn u32_words(
    input: &[u8],
) -> Result<impl ExactSizeIterator<Item = u32> + '_, AccelError> {
    element_count(input, "uint32")?;
    Ok(input
        .as_chunks::<ELEM>()
        .0
        .iter()
        .map(|w| u32::from_le_bytes(*w)))
}

/// Appends the `u32` produced for each input word.
#[inline(always)]
pub(crate) fn map_u32(input: &[u8], out: &mut Vec<u8>, f: impl Fn(u32) -> u32) {
    let start = out.len();
    out.resize(start + input.len() / ELEM * ELEM, 0);
    let (src, _) = input.as_chunks::<ELEM>();
    let (dst, _) = out[start..].as_chunks_mut::<ELEM>();
    for (d, s) in dst.iter_mut().zip(src) {
        *d = f(u32::from_le_bytes(*s)).to_le_bytes();
    }
}
