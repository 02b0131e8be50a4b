//! The two integer hashes of folly (`folly/hash/Hash.h`) that TorchArrow's
//! `sigrid_hash` is built from, so our ids match Meta's preprocessing stack
//! bit for bit. Also used to combine ids (Cartesian, NGram).

/// Thomas Wang's 64-bit integer mix (folly `twang_mix64`).
#[inline(always)]
pub fn twang_mix64(key: u64) -> u64 {
    let mut k = (!key).wrapping_add(key << 21);
    k ^= k >> 24;
    k = k.wrapping_add(k << 3).wrapping_add(k << 8);
    k ^= k >> 14;
    k = k.wrapping_add(k << 2).wrapping_add(k << 4);
    k ^= k >> 28;
    k.wrapping_add(k << 31)
}

/// Murmur-inspired 128 → 64 bit hash (folly `hash_128_to_64(upper, lower)`).
#[inline(always)]
pub fn hash_128_to_64(upper: u64, lower: u64) -> u64 {
    const K_MUL: u64 = 0x9ddf_ea08_eb38_2d69;
    let mut a = (lower ^ upper).wrapping_mul(K_MUL);
    a ^= a >> 47;
    let mut b = (upper ^ a).wrapping_mul(K_MUL);
    b ^= b >> 47;
    b.wrapping_mul(K_MUL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_is_a_bijection_on_a_sample() {
        let mut seen: Vec<u64> = (0..10_000u64).map(twang_mix64).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), 10_000);
        // ~key + (key << 21) at 0 is !0 = u64::MAX, then mixed: never 0.
        assert_ne!(twang_mix64(0), 0);
    }

    #[test]
    fn combine_depends_on_order() {
        assert_ne!(hash_128_to_64(1, 2), hash_128_to_64(2, 1));
        assert_eq!(hash_128_to_64(0, 0), 0);
    }
}
