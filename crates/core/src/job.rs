use crate::{ConnId, Nanos};
use offrac_proto::RequestHeader;

/// A complete request on its way to, or in, a slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub conn: ConnId,
    pub header: RequestHeader,
    pub payload: Vec<u8>,
    /// When the first byte of the header arrived.
    pub first_byte_at: Nanos,
    /// When the last byte arrived.
    pub complete_at: Nanos,
    /// When the job left its slot queue for execution (set at dispatch).
    pub dispatched_at: Nanos,
}

impl Job {
    /// Bytes this job is charged for in the pool and the queues: its payload.
    pub fn cost(&self) -> u64 {
        self.payload.len() as u64
    }

    pub fn function(&self) -> u8 {
        self.header.current_hop().function
    }

    pub fn reassembly_ns(&self) -> u64 {
        self.complete_at.saturating_sub(self.first_byte_at)
    }

    pub fn queue_ns(&self) -> u64 {
        self.dispatched_at.saturating_sub(self.complete_at)
    }
}
