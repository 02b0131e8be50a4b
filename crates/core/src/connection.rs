//! Per-connection receive state: where the next byte of the stream goes.

use crate::{BufferId, Instant, TenantKey};
use offrac_proto::{RequestHeader, Status, EXT_LEN, HEADER_LEN};

#[derive(Debug)]
pub(crate) enum Rx {
    /// Reading a header; `have` bytes so far.
    Header {
        bytes: [u8; HEADER_LEN],
        have: usize,
        first_byte_at: Instant,
    },
    /// Reading the hop extension of a decoded header flagged with one.
    Ext {
        header: RequestHeader,
        bytes: [u8; EXT_LEN],
        have: usize,
        first_byte_at: Instant,
    },
    /// Reading the payload of an admitted request into its buffer.
    Payload {
        header: RequestHeader,
        payload: Vec<u8>,
        buffer: BufferId,
        first_byte_at: Instant,
        /// Charged to this tenant (its connection's at admission).
        tenant: TenantKey,
        /// Payload bytes the driver read straight into a place of its own
        /// (a collective's posted receive, [`crate::Engine::handle_diverted_read`]):
        /// they follow `payload` and are not in it.
        diverted: usize,
    },
    /// Skipping the payload of a refused request.
    Discard { remaining: u64 },
    /// Skipping the payload of a refused collective request, its first
    /// [`COLLECTIVE_HEAD_LEN`] bytes (the collective descriptor) kept for the
    /// driver ([`crate::Action::RefusedCollective`]).
    Peek(Box<Peek>),
    /// Nothing more is read from this connection.
    Closed,
}

/// How many payload bytes of a refused collective request are kept: its
/// 64-byte collective descriptor (`docs/collectives.md`, "Failures and
/// deadlines").
pub const COLLECTIVE_HEAD_LEN: usize = 64;

/// A refused collective request whose descriptor is being read.
#[derive(Debug)]
pub(crate) struct Peek {
    pub head: [u8; COLLECTIVE_HEAD_LEN],
    pub have: usize,
    /// Payload bytes after the head, to skip.
    pub rest: u64,
    pub status: Status,
    pub message: String,
}

#[derive(Debug)]
pub(crate) struct Connection {
    pub rx: Rx,
    /// Last time a byte arrived; drives stall collection.
    pub last_progress: Instant,
    /// A stall deadline for this connection sits in the timer heap.
    pub timer_armed: bool,
    /// Complete requests admitted from this connection and not yet finished
    /// by their slot (or answered otherwise): answers the node still owes.
    pub held: u32,
    /// The driver is not reading it (backpressure): no stall is counted.
    pub paused: bool,
    /// Set by an authenticated hello; `None`: anonymous.
    pub tenant: TenantKey,
    /// An authenticated link from another node: each request's header
    /// `tenant` is its origin's tenant.
    pub peer: bool,
}

impl Connection {
    pub fn new(now: Instant) -> Connection {
        Connection {
            rx: Rx::idle(now),
            last_progress: now,
            timer_armed: false,
            held: 0,
            paused: false,
            tenant: None,
            peer: false,
        }
    }

    /// Mid-request: a stall here holds resources and is collected.
    pub fn is_partial(&self) -> bool {
        match &self.rx {
            Rx::Header { have, .. } => *have > 0,
            Rx::Ext { .. } | Rx::Payload { .. } | Rx::Discard { .. } | Rx::Peek(_) => true,
            Rx::Closed => false,
        }
    }
}

impl Rx {
    pub fn idle(now: Instant) -> Rx {
        Rx::Header {
            bytes: [0; HEADER_LEN],
            have: 0,
            first_byte_at: now,
        }
    }

    /// Bytes of the payload being read still to come, in it or diverted
    /// (None: no payload is being read).
    pub fn payload_left(&self) -> Option<usize> {
        match self {
            Rx::Payload {
                header,
                payload,
                diverted,
                ..
            } => Some((header.payload_len as usize).saturating_sub(payload.len() + diverted)),
            _ => None,
        }
    }
}
