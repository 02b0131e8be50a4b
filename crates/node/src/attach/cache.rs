//! The byte-bounded item store of the look-through cache: CLOCK replacement
//! (one reference bit per item, a hand sweeping the slots), O(1) hits.

use super::text::Key;
use std::collections::HashMap;
use std::time::Instant;

/// What the cache holds per key: memcached's flags, CAS unique and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub flags: u32,
    pub cas: u64,
    pub data: Box<[u8]>,
    /// When the node filled it (for `max_age_ms`).
    pub filled: Instant,
}

/// Bytes charged per item beyond its key and value (the slot, the map entry).
pub const OVERHEAD: usize = 96;

struct Slot {
    key: Key,
    item: Item,
    referenced: bool,
}

pub struct Cache {
    map: HashMap<Key, usize>,
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    hand: usize,
    bytes: usize,
    capacity: usize,
}

fn charge(key: &[u8], item: &Item) -> usize {
    key.len() + item.data.len() + OVERHEAD
}

impl Cache {
    pub fn new(capacity: usize) -> Self {
        Cache {
            map: HashMap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            hand: 0,
            bytes: 0,
            capacity,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The item under `key`, marked recently used.
    pub fn get(&mut self, key: &[u8]) -> Option<&Item> {
        let &i = self.map.get(key)?;
        let slot = self.slots[i].as_mut()?;
        slot.referenced = true;
        Some(&slot.item)
    }

    pub fn remove(&mut self, key: &[u8]) {
        if let Some(i) = self.map.remove(key) {
            if let Some(s) = self.slots[i].take() {
                self.bytes -= charge(&s.key, &s.item);
            }
            self.free.push(i);
        }
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.slots.clear();
        self.free.clear();
        self.hand = 0;
        self.bytes = 0;
    }

    /// Stores `item`, evicting until it fits; an item larger than an eighth
    /// of the capacity is not kept (it would flush the rest for one key).
    pub fn insert(&mut self, key: Key, item: Item) {
        self.remove(&key);
        let c = charge(&key, &item);
        if c > self.capacity / 8 {
            return;
        }
        while self.bytes + c > self.capacity {
            self.evict_one();
        }
        let slot = Slot {
            key: key.clone(),
            item,
            referenced: false,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.bytes += c;
        self.map.insert(key, i);
    }

    fn evict_one(&mut self) {
        // Two sweeps at most: the first clears every reference bit.
        for _ in 0..2 * self.slots.len() + 1 {
            if self.slots.is_empty() {
                return;
            }
            self.hand = (self.hand + 1) % self.slots.len();
            let victim = match &mut self.slots[self.hand] {
                Some(s) if s.referenced => {
                    s.referenced = false;
                    None
                }
                Some(s) => Some(s.key.clone()),
                None => None,
            };
            if let Some(k) = victim {
                self.remove(&k);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(n: usize) -> Item {
        Item {
            flags: 0,
            cas: 1,
            data: vec![7; n].into(),
            filled: Instant::now(),
        }
    }

    #[test]
    fn bytes_stay_bounded_and_hot_items_survive() {
        let cap = 100 * (OVERHEAD + 20);
        let mut c = Cache::new(cap);
        c.insert(Key::from(&b"hot"[..]), item(16));
        for i in 0..10_000u32 {
            assert!(c.get(b"hot").is_some(), "hot evicted at {i}");
            c.insert(format!("k{i}").into_bytes().into(), item(16));
            assert!(c.bytes() <= cap);
        }
        assert!(c.len() > 50);
        c.insert(Key::from(&b"big"[..]), item(cap));
        assert!(c.get(b"big").is_none());
        c.remove(b"hot");
        assert!(c.get(b"hot").is_none());
        c.clear();
        assert_eq!((c.len(), c.bytes()), (0, 0));
    }
}
