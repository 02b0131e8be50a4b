//! What the driver needs from a node model: fragments in, answers and wake-ups out.

use crate::Nanos;

/// How a request attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Executed; `queue_ns` it waited complete before its slot started it.
    Done { queue_ns: Nanos },
    /// Refused for lack of room (BUSY): the client retries.
    Busy,
    /// Any other answer (should not happen in a well-formed run).
    Other(u16),
}

/// What a node model asks of the driver after an event.
#[derive(Default)]
pub struct Outbox {
    /// (attempt id, outcome), answered at the current time.
    pub answers: Vec<(u64, Outcome)>,
    /// (time, token): call [`Backend::wake`] with `token` at `time`.
    pub wakes: Vec<(Nanos, u64)>,
}

/// One fragment of a request attempt, as the driver sends it.
#[derive(Debug, Clone, Copy)]
pub struct Fragment {
    pub attempt: u64,
    pub client: usize,
    /// The client's connection (a client that aborts a request opens a new one).
    pub conn: u64,
    pub function: u8,
    /// Index of this fragment and the request's fragment count.
    pub index: u32,
    pub frags: u32,
}

pub trait Backend {
    fn fragment(&mut self, now: Nanos, frag: Fragment, out: &mut Outbox);
    fn wake(&mut self, now: Nanos, token: u64, out: &mut Outbox);
    /// The client reset `conn` mid-request (`--on-refusal abort`).
    fn reset(&mut self, now: Nanos, conn: u64, out: &mut Outbox);
    /// Per accelerator type: (µs spent executing, µs an instance was held, instances).
    fn utilization(&self) -> Vec<(f64, f64, usize)>;
}
