//! State a slot holds for its function, configured per node
//! (`[functions.mapid]`, `[functions.bucketize]` in the node's TOML) and
//! shared by every slot and instance of the function on that node, so
//! replicas answer alike.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::hash::twang_mix64;

/// Keys in the built-in MapId dictionary: 32,768 four-byte keys, the 128 KB
/// table of seed 001 §IV-B.
pub const DEFAULT_DICTIONARY_KEYS: usize = 32_768;

/// The `i`-th key of the built-in dictionary: the low 32 bits of
/// `twang_mix64(i)` (synthetic, spread like hashed ids; configure a real one
/// with `dictionary = FILE`).
pub fn default_dictionary_key(i: u64) -> u32 {
    twang_mix64(i) as u32
}

/// MapId's dictionary: each key's index is its position in the key list
/// (a repeated key keeps its first index); ids not in it map to
/// `missing()` = the number of distinct keys (the out-of-vocabulary row).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Dictionary {
    map: FxHashMap<u32, u32>,
}

impl Dictionary {
    pub fn from_keys(keys: impl IntoIterator<Item = u32>) -> Dictionary {
        let mut map = FxHashMap::default();
        for k in keys {
            let next = map.len() as u32;
            map.entry(k).or_insert(next);
        }
        Dictionary { map }
    }

    /// The built-in dictionary (`DEFAULT_DICTIONARY_KEYS` synthetic keys).
    pub fn builtin() -> Dictionary {
        Dictionary::from_keys((0..DEFAULT_DICTIONARY_KEYS as u64).map(default_dictionary_key))
    }

    /// Distinct keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The distinct keys in index order: `from_keys` of them gives this
    /// dictionary again (what a hardware table is loaded with).
    pub fn keys(&self) -> Vec<u32> {
        let mut keys = vec![0u32; self.map.len()];
        for (&k, &i) in &self.map {
            keys[i as usize] = k;
        }
        keys
    }

    /// The index ids outside the dictionary map to.
    pub fn missing(&self) -> u32 {
        self.map.len() as u32
    }

    #[inline(always)]
    pub fn lookup(&self, key: u32) -> u32 {
        self.map.get(&key).copied().unwrap_or(self.map.len() as u32)
    }
}

/// The built-in Bucketize border set 0: 0 and the powers of two 1..=2^20,
/// log-scale borders for count features like Criteo's.
pub fn default_borders() -> Vec<f32> {
    std::iter::once(0.0)
        .chain((0..=20).map(|e| (1u32 << e) as f32))
        .collect()
}

/// What the node's configuration gives its functions.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionState {
    pub dictionary: Arc<Dictionary>,
    /// Bucketize border sets, each finite and strictly ascending; the
    /// request parameter picks one.
    pub borders: Arc<Vec<Vec<f32>>>,
}

impl Default for FunctionState {
    fn default() -> FunctionState {
        FunctionState {
            dictionary: Arc::new(Dictionary::builtin()),
            borders: Arc::new(vec![default_borders()]),
        }
    }
}

/// Why a border set is unusable (config validation).
pub fn check_borders(set: &[f32]) -> Result<(), String> {
    if set.is_empty() {
        return Err("a border set needs at least one border".into());
    }
    if let Some(i) = set.iter().position(|b| !b.is_finite()) {
        return Err(format!("border {i} ({}) is not finite", set[i]));
    }
    if let Some(i) = set.windows(2).position(|w| w[1] <= w[0]) {
        return Err(format!(
            "borders must be strictly ascending: border {} ({}) follows {}",
            i + 1,
            set[i + 1],
            set[i]
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_dictionary_is_the_papers_size() {
        let d = Dictionary::builtin();
        // The 32,768 low halves happen not to collide: ids outside map to 32768.
        assert_eq!(d.len(), DEFAULT_DICTIONARY_KEYS);
        assert_eq!(d.lookup(default_dictionary_key(0)), 0);
        assert_eq!(d.missing(), d.len() as u32);
    }

    #[test]
    fn first_occurrence_wins() {
        let d = Dictionary::from_keys([5, 9, 5, 7]);
        assert_eq!(
            (d.lookup(5), d.lookup(9), d.lookup(7), d.lookup(1)),
            (0, 1, 2, 3)
        );
    }

    #[test]
    fn borders_are_checked() {
        assert!(check_borders(&default_borders()).is_ok());
        assert!(check_borders(&[]).is_err());
        assert!(check_borders(&[1.0, 1.0])
            .unwrap_err()
            .contains("border 1 (1) follows 1"));
        assert!(check_borders(&[f32::NAN]).is_err());
    }
}
