//! One bounded queue of complete requests per slot (OffRAC §3.6).

use crate::Job;
use std::collections::VecDeque;

pub type SlotId = usize;

#[derive(Debug, Clone)]
pub struct SlotQueue {
    pub function: u8,
    queue: VecDeque<Job>,
    queued_bytes: u64,
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
            queue: VecDeque::new(),
            queued_bytes: 0,
            capacity,
            max_depth: max_depth.unwrap_or(usize::MAX).max(1),
            busy: false,
        }
    }

    pub fn has_room(&self, cost: u64) -> bool {
        self.queued_bytes + cost <= self.capacity && self.queue.len() < self.max_depth
    }

    pub fn push(&mut self, job: Job) {
        self.queued_bytes += job.cost();
        self.queue.push_back(job);
    }

    /// Start the next job if the slot is idle.
    pub fn start_next(&mut self) -> Option<Job> {
        if self.busy {
            return None;
        }
        let job = self.queue.pop_front()?;
        self.queued_bytes -= job.cost();
        self.busy = true;
        Some(job)
    }

    pub fn finish(&mut self) -> bool {
        std::mem::replace(&mut self.busy, false)
    }

    pub fn is_busy(&self) -> bool {
        self.busy
    }

    pub fn depth(&self) -> usize {
        self.queue.len()
    }

    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Empty the queue (shutdown), returning what was waiting.
    pub fn drain(&mut self) -> Vec<Job> {
        self.queued_bytes = 0;
        self.queue.drain(..).collect()
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
