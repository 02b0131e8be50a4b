//! Maps a function to the slots hosting it and picks one (OffRAC §3.6).

use crate::{SlotId, SlotPolicy, SlotQueue, TenantKey};

#[derive(Debug, Clone)]
pub struct Selector {
    hosts: Vec<Vec<SlotId>>,
    next: Vec<usize>,
    policy: SlotPolicy,
}

impl Selector {
    pub fn new(slots: &[SlotQueue], policy: SlotPolicy) -> Selector {
        let mut hosts = vec![Vec::new(); 256];
        for (i, s) in slots.iter().enumerate() {
            hosts[s.function as usize].push(i);
        }
        Selector {
            hosts,
            next: vec![0; 256],
            policy,
        }
    }

    /// A selector that never picks the slots `masked` marks (paused for a swap).
    pub fn with_mask(slots: &[SlotQueue], masked: &[bool], policy: SlotPolicy) -> Selector {
        let mut hosts = vec![Vec::new(); 256];
        for (i, s) in slots.iter().enumerate() {
            if !masked.get(i).copied().unwrap_or(false) {
                hosts[s.function as usize].push(i);
            }
        }
        Selector {
            hosts,
            next: vec![0; 256],
            policy,
        }
    }

    pub fn hosts(&self, function: u8) -> &[SlotId] {
        &self.hosts[function as usize]
    }

    /// A slot hosting `function` whose queue has room for `cost` bytes.
    pub fn pick(&mut self, function: u8, cost: u64, slots: &[SlotQueue]) -> Option<SlotId> {
        self.pick_for(function, None, cost, slots)
    }

    /// A slot hosting `function` whose queue has room for `cost` bytes of `tenant`.
    pub fn pick_for(
        &mut self,
        function: u8,
        tenant: TenantKey,
        cost: u64,
        slots: &[SlotQueue],
    ) -> Option<SlotId> {
        let hosts = &self.hosts[function as usize];
        let n = hosts.len();
        match self.policy {
            SlotPolicy::Rr => {
                let start = self.next[function as usize];
                let k =
                    (0..n).find(|&k| slots[hosts[(start + k) % n]].has_room_for(tenant, cost))?;
                self.next[function as usize] = (start + k + 1) % n;
                Some(hosts[(start + k) % n])
            }
            SlotPolicy::Jsq => hosts
                .iter()
                .copied()
                .filter(|&s| slots[s].has_room_for(tenant, cost))
                .min_by_key(|&s| (slots[s].queued_bytes(), slots[s].is_busy(), s)),
        }
    }
}
