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
    busy: bool,
}

impl SlotQueue {
    pub fn new(function: u8, capacity: u64) -> SlotQueue {
        SlotQueue {
            function,
            queue: VecDeque::new(),
            queued_bytes: 0,
            capacity,
            busy: false,
        }
    }

    pub fn has_room(&self, cost: u64) -> bool {
        self.queued_bytes + cost <= self.capacity
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
