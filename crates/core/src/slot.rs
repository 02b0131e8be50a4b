//! One bounded queue of complete requests per slot (OffRAC §3.6), one FIFO
//! per tenant inside it, served by deficit round robin ([`crate::Drr`]).

use crate::{Drr, Job, TenantKey};
use rustc_hash::FxHashMap;

pub type SlotId = usize;

#[derive(Debug, Clone)]
pub struct SlotQueue {
    pub function: u8,
    queue: Drr<Job>,
    queued_bytes: u64,
    /// Per tenant: its bytes waiting. Each tenant has the whole bound to
    /// itself, so a flooding tenant cannot keep another out of the slot.
    bytes_of: FxHashMap<TenantKey, u64>,
    /// The tenant of the running job (charged when it finishes).
    running: Option<TenantKey>,
    capacity: u64,
    /// Most jobs waiting (not counting the running one).
    max_depth: usize,
    busy: bool,
}

impl SlotQueue {
    pub fn new(function: u8, capacity: u64) -> SlotQueue {
        SlotQueue::with_depth(function, capacity, None)
    }

    /// A queue also bounded to `max_depth` waiting jobs (at least 1).
    pub fn with_depth(function: u8, capacity: u64, max_depth: Option<usize>) -> SlotQueue {
        SlotQueue {
            function,
            queue: Drr::new(crate::Tenancy::default().quantum_ns),
            queued_bytes: 0,
            bytes_of: FxHashMap::default(),
            running: None,
            capacity,
            max_depth: max_depth.unwrap_or(usize::MAX).max(1),
            busy: false,
        }
    }

    /// Room for an anonymous job of `cost` bytes.
    pub fn has_room(&self, cost: u64) -> bool {
        self.has_room_for(None, cost)
    }

    /// Room for a job of `tenant` of `cost` bytes: bounded per tenant.
    pub fn has_room_for(&self, tenant: TenantKey, cost: u64) -> bool {
        let bytes = self.bytes_of.get(&tenant).copied().unwrap_or(0);
        bytes + cost <= self.capacity && self.queue.depth_of(tenant) < self.max_depth
    }

    /// Queue an anonymous job (weight 1).
    pub fn push(&mut self, job: Job) {
        self.push_weighted(job, 1);
    }

    /// Queue `job` for its tenant ([`Job::tenant`]), whose DRR weight is `weight`.
    pub fn push_weighted(&mut self, job: Job, weight: u32) {
        self.queued_bytes += job.cost();
        *self.bytes_of.entry(job.tenant).or_default() += job.cost();
        self.queue.push(job.tenant, weight, job);
    }

    /// The DRR credit per round of a weight-1 tenant (nanoseconds).
    pub fn set_quantum(&mut self, quantum_ns: u64) {
        self.queue.set_quantum(quantum_ns);
    }

    /// Start the next job (by DRR among tenants) if the slot is idle.
    pub fn start_next(&mut self) -> Option<Job> {
        if self.busy {
            return None;
        }
        let (tenant, job) = self.queue.pop()?;
        self.queued_bytes -= job.cost();
        self.unqueue(tenant, job.cost());
        self.busy = true;
        self.running = Some(tenant);
        Some(job)
    }

    fn unqueue(&mut self, tenant: TenantKey, cost: u64) {
        if let Some(b) = self.bytes_of.get_mut(&tenant) {
            *b -= cost;
            if *b == 0 {
                self.bytes_of.remove(&tenant);
            }
        }
    }

    /// The running job finished; `cost` (its execution time, ns) is charged
    /// to its tenant. Returns whether the slot was busy.
    pub fn finish_charged(&mut self, cost: u64) -> bool {
        if let Some(t) = self.running.take() {
            self.queue.charge(t, cost);
        }
        std::mem::replace(&mut self.busy, false)
    }

    /// The running job finished or was not run; nothing is charged.
    pub fn finish(&mut self) -> bool {
        self.finish_charged(0)
    }

    /// The deficit of `tenant` in this slot's DRR.
    pub fn deficit(&self, tenant: TenantKey) -> i64 {
        self.queue.deficit(tenant)
    }

    pub fn is_busy(&self) -> bool {
        self.busy
    }

    pub fn depth(&self) -> usize {
        self.queue.len()
    }

    /// Jobs `tenant` has waiting.
    pub fn depth_of(&self, tenant: TenantKey) -> usize {
        self.queue.depth_of(tenant)
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Empty the queue (shutdown), returning what was waiting.
    pub fn drain(&mut self) -> Vec<Job> {
        self.queued_bytes = 0;
        self.bytes_of.clear();
        self.queue.drain()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_bounds_waiting_jobs_not_the_running_one() {
        let q = SlotQueue::with_depth(17, 1 << 20, Some(2));
        assert_eq!(q.max_depth, 2);
        assert!(q.has_room(24_576));
        let unbounded = SlotQueue::new(0, 100);
        assert!(unbounded.has_room(100) && !unbounded.has_room(101));
        // Depth 0 would refuse every job forever: it means 1.
        assert_eq!(SlotQueue::with_depth(0, 100, Some(0)).max_depth, 1);
    }
}
