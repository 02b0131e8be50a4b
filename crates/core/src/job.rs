use crate::{nanos, ConnId, Instant};
use offrac_proto::RequestHeader;
use std::time::Duration;

/// A complete request on its way to, or in, a slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub conn: ConnId,
    pub header: RequestHeader,
    pub payload: Vec<u8>,
    /// When the first byte of the header arrived.
    pub first_byte_at: Instant,
    /// When the last byte arrived.
    pub complete_at: Instant,
    /// When the job left its slot queue for execution (`None` until dispatched).
    pub dispatched_at: Option<Instant>,
}

impl Job {
    /// Bytes this job is charged for in the pool and the queues: its payload.
    pub fn cost(&self) -> u64 {
        self.payload.len() as u64
    }

    pub fn function(&self) -> u8 {
        self.header.current_hop().function
    }

    pub fn reassembly(&self) -> Duration {
        self.complete_at.saturating_since(self.first_byte_at)
    }

    /// From complete to dispatched (zero while not dispatched).
    pub fn queue(&self) -> Duration {
        self.dispatched_at
            .map_or(Duration::ZERO, |d| d.saturating_since(self.complete_at))
    }

    /// [`Job::reassembly`] in nanoseconds, as responses carry it.
    pub fn reassembly_ns(&self) -> u64 {
        nanos(self.reassembly())
    }

    /// [`Job::queue`] in nanoseconds, as responses carry it.
    pub fn queue_ns(&self) -> u64 {
        nanos(self.queue())
    }
}
