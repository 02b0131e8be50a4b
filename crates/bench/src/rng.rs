//! Per-client seeds; the generator itself is the client crate's SplitMix64.

pub(crate) use offrac_client::rng::SplitMix64 as Rng;

/// Seed for client `i` of a run seeded with `seed`.
pub(crate) fn client_seed(seed: u64, i: usize) -> u64 {
    seed ^ (i as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F)
}
