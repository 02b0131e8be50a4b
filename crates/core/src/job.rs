use crate::{nanos, ConnId, Instant, Payload};
use offrac_proto::{HopTime, RequestHeader, ResponseHeader, MAX_HOPS};
use std::time::Duration;

/// A complete request on its way to, or in, a slot.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub conn: ConnId,
    /// The tenant it is charged to: its connection's at admission.
    pub tenant: crate::TenantKey,
    pub header: RequestHeader,
    /// Flat, except while a local slot's function is to read a kept
    /// buffer in place (after a load hop).
    pub payload: Payload,
    /// When the first byte of the header arrived.
    pub first_byte_at: Instant,
    /// When the current hop became ready to queue: the last byte's arrival
    /// for the first hop, the end of the hop before for a chain's later hop.
    pub complete_at: Instant,
    /// When the request's last byte arrived on this node (a chain's later
    /// hops keep it: their answer's reassembly is the request's, not
    /// stretched over the earlier hops' queueing and execution, which
    /// `queue_ns` and `exec_ns` count).
    pub reassembled_at: Instant,
    /// When the job left its slot queue for execution (`None` until dispatched).
    pub dispatched_at: Option<Instant>,
    /// Queueing and execution of the chain's earlier hops on this node, which
    /// the final answer's timings include.
    pub earlier_queue_ns: u64,
    pub earlier_exec_ns: u64,
    /// The request's budget runs out here (from its header's `budget_us`,
    /// counted from the first byte): a hop not started by then is not run.
    pub deadline: Option<Instant>,
    /// What each hop run so far cost (for answers with per-hop timings).
    pub times: [HopTime; MAX_HOPS],
    /// Bytes of the request's payload that follow `payload` but are not in
    /// it: the driver read them straight into a place of its own (a
    /// collective's posted receive, [`crate::Engine::handle_diverted_read`]).
    pub diverted: u64,
}

impl Job {
    /// A request that has just become complete.
    pub fn new(
        conn: ConnId,
        header: RequestHeader,
        payload: Vec<u8>,
        first_byte_at: Instant,
        complete_at: Instant,
    ) -> Job {
        Job {
            conn,
            tenant: None,
            header,
            payload: payload.into(),
            first_byte_at,
            complete_at,
            reassembled_at: complete_at,
            dispatched_at: None,
            earlier_queue_ns: 0,
            earlier_exec_ns: 0,
            deadline: (header.budget_us > 0)
                .then(|| first_byte_at + Duration::from_micros(header.budget_us as u64)),
            times: [HopTime::default(); MAX_HOPS],
            diverted: 0,
        }
    }

    /// The hop that just ran is the chain's last: its result is the answer.
    pub fn is_last_hop(&self) -> bool {
        self.header.hop_index + 1 >= self.header.hop_count
    }

    /// The hop that just ran returned `output` at `now` after queueing
    /// `queue_ns` and running `exec_ns`: make the job the chain's next hop,
    /// with `output` as its payload (moved, not copied). Returns the old
    /// payload so the caller can reuse its allocation.
    pub fn advance(
        &mut self,
        output: impl Into<Payload>,
        now: Instant,
        queue_ns: u64,
        exec_ns: u64,
        device: u8,
    ) -> Payload {
        self.times[self.header.hop_index as usize % MAX_HOPS] = HopTime {
            device,
            ran: true,
            queue_ns,
            exec_ns,
        };
        self.header.hop_index += 1;
        self.earlier_queue_ns = self.earlier_queue_ns.saturating_add(queue_ns);
        self.earlier_exec_ns = self.earlier_exec_ns.saturating_add(exec_ns);
        self.complete_at = now;
        self.dispatched_at = None;
        std::mem::replace(&mut self.payload, output.into())
    }

    /// Its budget has run out at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|d| now > d)
    }

    /// Time the answer `h` of the hop that just ran on `device` after
    /// queueing `queue_ns` and running `exec_ns`: the sums over the chain's
    /// hops, and per hop when the request asked for it.
    pub fn time_answer(&self, h: &mut ResponseHeader, device: u8, queue_ns: u64, exec_ns: u64) {
        h.reassembly_ns = self.reassembly_ns();
        h.queue_ns = self.earlier_queue_ns + queue_ns;
        h.exec_ns = self.earlier_exec_ns + exec_ns;
        if self.header.traced() {
            let mut times = self.times;
            times[self.header.hop_index as usize % MAX_HOPS] = HopTime {
                device,
                ran: true,
                queue_ns,
                exec_ns,
            };
            h.hop_times = Some(times);
        }
    }

    /// Bytes this job is charged for in the pool and the queues: its payload.
    pub fn cost(&self) -> u64 {
        self.payload.len() as u64 + self.diverted
    }

    pub fn function(&self) -> u8 {
        self.header.current_hop().function
    }

    /// First byte to last byte on this node, whichever hop is current.
    pub fn reassembly(&self) -> Duration {
        self.reassembled_at.saturating_since(self.first_byte_at)
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
