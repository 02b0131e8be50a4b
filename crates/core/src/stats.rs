use offrac_proto::Status;
use std::collections::BTreeMap;

/// Counters the engine keeps; the node exports them as metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Requests whose header was parsed.
    pub requests: u64,
    /// Requests admitted to the pool or the small-request queue.
    pub admitted: u64,
    /// Admitted through the small-request queue.
    pub admitted_small: u64,
    /// Dispatched to a slot.
    pub dispatched: u64,
    /// Admitted, then answered `SHUTTING_DOWN` when the grace period ended.
    pub aborted: u64,
    /// Answered `TIMEOUT` because their budget ran out before a hop started.
    pub expired: u64,
    /// Chain hops run that handed their output on to a next hop.
    pub hops: u64,
    /// Handed to the driver to forward to another device (at a hop whose
    /// device is a peer).
    pub forwarded: u64,
    /// Finished by their slot (the driver writes their answers), or by a
    /// named buffer's hop the engine ran as the chain's last.
    pub completed: u64,
    /// Named buffers' hops run by the engine (any position in a chain,
    /// refused ones included).
    pub buffer_hops: u64,
    /// Collective hops of chains handed to the driver
    /// ([`crate::Action::CollectiveHop`]).
    pub collective_hops: u64,
    /// Admitted but collected before completion (connection closed or stalled).
    pub collected: u64,
    /// Payload bytes of admitted requests the engine copied into their
    /// reassembly buffer from the slices given to [`crate::Engine::handle_bytes`].
    pub payload_bytes_copied: u64,
    /// Payload bytes the shell read straight into the reassembly buffer
    /// ([`crate::Engine::payload_room`]) or into the driver's own place for
    /// them ([`crate::Engine::handle_diverted_read`]): not copied in user space.
    pub payload_bytes_direct: u64,
    /// Of those, the bytes read into the driver's own place (a collective's
    /// posted receive): not in the request's payload at all.
    pub payload_bytes_diverted: u64,
    /// Bytes of kept named buffers the engine copied into jobs' payloads
    /// (a load's kept buffer joined with the job's own bytes), and payload
    /// bytes a tee copied into a buffer.
    pub buffer_bytes_copied: u64,
    /// Replies the engine produced itself, indexed by status code. With
    /// `completed`, every answer a parsed request got.
    pub refusals: [u64; Status::ALL.len()],
    /// The same refusals of requests whose header was read, by (function id,
    /// status code) and by (tenant, status code).
    pub refusals_by_function: BTreeMap<(u8, u16), u64>,
    pub refusals_by_tenant: BTreeMap<(u16, u16), u64>,
    /// Tenant refusals past [`EngineStats::MAX_TENANT_SERIES`] series (a
    /// client chooses its tenant id: the map must stay bounded).
    pub refusals_tenant_overflow: u64,
}

impl EngineStats {
    pub const MAX_TENANT_SERIES: usize = 1024;

    pub fn refused(&self, s: Status) -> u64 {
        self.refusals[s.code() as usize]
    }
}
