//! The reassembly pool: B buffers of S bytes, agnostic to client and function
//! (OffRAC §3.2). A buffer reassembles one request at a time and holds the
//! complete ones until they move on to a slot queue.
//!
//! A pool may instead be partitioned by function (the per-accelerator
//! buffers OffRAC §3.2 argues against): each buffer then only admits requests
//! for its owner function. The node never ships it; the simulator compares it.

use crate::{BufferPolicy, Job};
use std::collections::VecDeque;

pub type BufferId = usize;

#[derive(Debug, Clone)]
struct Buffer {
    /// Bytes reserved: complete requests held plus the whole of the one reassembling.
    used: u64,
    reassembling: bool,
    ready: VecDeque<Job>,
}

#[derive(Debug, Clone)]
pub struct ReassemblyPool {
    buffers: Vec<Buffer>,
    capacity: u64,
    policy: BufferPolicy,
    /// Owner function of each buffer (`None`: any); empty for a shared pool.
    owners: Vec<Option<u8>>,
    /// Round-robin cursor: one for a shared pool, one per function when partitioned,
    /// so each function's turn order is that of its own buffers.
    next: Vec<usize>,
}

impl ReassemblyPool {
    pub fn new(count: usize, capacity: u64, policy: BufferPolicy) -> ReassemblyPool {
        let b = Buffer {
            used: 0,
            reassembling: false,
            ready: VecDeque::new(),
        };
        ReassemblyPool {
            buffers: vec![b; count],
            capacity,
            policy,
            owners: Vec::new(),
            next: vec![0],
        }
    }

    /// A pool whose buffer `i` admits only requests for `owners[i]` (`None`: any function).
    pub fn partitioned(
        capacity: u64,
        policy: BufferPolicy,
        owners: Vec<Option<u8>>,
    ) -> ReassemblyPool {
        let mut p = ReassemblyPool::new(owners.len(), capacity, policy);
        p.owners = owners;
        p.next = vec![0; 256];
        p
    }

    /// The function buffer `id` is reserved for, if the pool is partitioned.
    pub fn owner(&self, id: BufferId) -> Option<u8> {
        self.owners.get(id).copied().flatten()
    }

    /// Buffer `id` may ever hold a request for `function`.
    pub fn hosts(&self, id: BufferId, function: u8) -> bool {
        self.owners
            .get(id)
            .is_none_or(|o| o.is_none_or(|f| f == function))
    }

    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// Eligible: not mid-request, and room for the whole request.
    pub fn is_eligible(&self, id: BufferId, size: u64) -> bool {
        let b = &self.buffers[id];
        !b.reassembling && self.capacity - b.used >= size
    }

    /// Admit a request of `size` bytes by the pool's policy, reserving the room.
    /// In a partitioned pool only buffers shared by every function qualify.
    pub fn admit(&mut self, size: u64) -> Option<BufferId> {
        self.admit_for(size, None)
    }

    /// Admit a request of `size` bytes for `function`: the policy runs over the
    /// buffers that host it (all of them in a shared pool).
    pub fn admit_for(&mut self, size: u64, function: Option<u8>) -> Option<BufferId> {
        let n = self.buffers.len();
        let hosts = |p: &ReassemblyPool, i: usize| match function {
            Some(f) => p.hosts(i, f),
            None => p.owners.get(i).is_none_or(Option::is_none),
        };
        let cursor = if self.owners.is_empty() {
            0
        } else {
            function.map_or(0, usize::from)
        };
        let start = self.next[cursor];
        let chosen = match self.policy {
            BufferPolicy::NaiveRr => {
                // The turn goes to the next buffer hosting this function, eligible or not.
                let i = (0..n).map(|k| (start + k) % n).find(|&i| hosts(self, i))?;
                self.next[cursor] = (i + 1) % n;
                self.is_eligible(i, size).then_some(i)
            }
            BufferPolicy::EligibleRr => {
                let found = (0..n)
                    .map(|k| (start + k) % n)
                    .find(|&i| hosts(self, i) && self.is_eligible(i, size));
                if let Some(i) = found {
                    self.next[cursor] = (i + 1) % n;
                }
                found
            }
            BufferPolicy::Jsb => (0..n)
                .filter(|&i| hosts(self, i) && self.is_eligible(i, size))
                .min_by_key(|&i| (self.buffers[i].used, i)),
        }?;
        let b = &mut self.buffers[chosen];
        b.used += size;
        b.reassembling = true;
        Some(chosen)
    }

    /// The request reassembling in `id` is complete.
    pub fn finish(&mut self, id: BufferId, job: Job) {
        let b = &mut self.buffers[id];
        debug_assert!(b.reassembling);
        b.reassembling = false;
        b.ready.push_back(job);
    }

    /// The request reassembling in `id` was abandoned: release its reservation.
    pub fn abort(&mut self, id: BufferId, size: u64) {
        let b = &mut self.buffers[id];
        debug_assert!(b.reassembling);
        b.reassembling = false;
        b.used -= size;
    }

    /// Complete requests held by buffer `id`, oldest first.
    pub fn ready(&self, id: BufferId) -> &VecDeque<Job> {
        &self.buffers[id].ready
    }

    /// Take the `index`-th complete request out of buffer `id`, freeing its room.
    pub fn take(&mut self, id: BufferId, index: usize) -> Option<Job> {
        let b = &mut self.buffers[id];
        let job = b.ready.remove(index)?;
        b.used -= job.cost();
        Some(job)
    }

    pub fn used(&self, id: BufferId) -> u64 {
        self.buffers[id].used
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn is_reassembling(&self, id: BufferId) -> bool {
        self.buffers[id].reassembling
    }

    /// Requests held complete across all buffers.
    pub fn ready_count(&self) -> usize {
        self.buffers.iter().map(|b| b.ready.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eligible_rr_skips_a_buffer_mid_request() {
        let mut p = ReassemblyPool::new(3, 100, BufferPolicy::EligibleRr);
        assert_eq!(p.admit(10), Some(0));
        assert_eq!(p.admit(10), Some(1));
        assert_eq!(p.admit(10), Some(2));
        // All three mid-request: nothing is eligible.
        assert_eq!(p.admit(10), None);
        p.abort(1, 10);
        assert_eq!(p.admit(10), Some(1));
    }

    #[test]
    fn naive_rr_refuses_when_its_turn_is_ineligible() {
        let mut p = ReassemblyPool::new(2, 100, BufferPolicy::NaiveRr);
        assert_eq!(p.admit(10), Some(0));
        p.abort(0, 10);
        assert_eq!(p.admit(10), Some(1)); // turn 1, eligible
        assert_eq!(p.admit(10), Some(0)); // turn 0, eligible
        assert_eq!(p.admit(10), None); // turn 1 is mid-request: refused though 0... is also busy
        p.abort(1, 10);
        assert_eq!(p.admit(10), None); // turn 0 is mid-request, although 1 is free
    }

    #[test]
    fn jsb_joins_the_emptiest_eligible_buffer() {
        let mut p = ReassemblyPool::new(3, 100, BufferPolicy::Jsb);
        let job = |n: usize| {
            let h = offrac_proto::RequestHeader::single(0, 0, 0, n as u32);
            Job::new(
                0,
                h,
                vec![0; n],
                crate::Instant::default(),
                crate::Instant::default(),
            )
        };
        assert_eq!(p.admit(50), Some(0));
        p.finish(0, job(50));
        assert_eq!(p.admit(30), Some(1));
        p.finish(1, job(30));
        assert_eq!(p.admit(10), Some(2));
        p.finish(2, job(10));
        // used: 50, 30, 10 -> the next joins buffer 2.
        assert_eq!(p.admit(60), Some(2));
        // A request needing 60 fits only where 60 bytes are free: buffer 1 (70 free), 2 is mid-request.
        assert_eq!(p.admit(60), Some(1));
        assert_eq!(p.admit(60), None);
    }

    #[test]
    fn a_partitioned_pool_admits_only_into_the_owners_buffers() {
        for policy in [
            BufferPolicy::NaiveRr,
            BufferPolicy::EligibleRr,
            BufferPolicy::Jsb,
        ] {
            let mut p = ReassemblyPool::partitioned(100, policy, vec![Some(0), Some(1), None]);
            assert_eq!(p.admit_for(10, Some(1)), Some(1), "{policy:?}");
            // Function 1's own buffer is mid-request: only the shared one is left.
            assert_eq!(p.admit_for(10, Some(1)), Some(2), "{policy:?}");
            assert_eq!(p.admit_for(10, Some(1)), None, "{policy:?}");
            assert_eq!(p.admit_for(10, Some(0)), Some(0), "{policy:?}");
            assert_eq!(p.admit_for(10, Some(2)), None, "{policy:?}");
            p.abort(2, 10);
            assert_eq!(p.admit(10), Some(2), "{policy:?}");
        }
    }

    #[test]
    fn a_buffer_without_room_is_ineligible() {
        let mut p = ReassemblyPool::new(1, 100, BufferPolicy::EligibleRr);
        assert_eq!(p.admit(101), None);
        assert_eq!(p.admit(100), Some(0));
    }
}
