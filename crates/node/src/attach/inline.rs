//! What the attach driver (`io.rs`) needs from an attached function's
//! sans-IO machine. Every attached function (the memcached cache, the JWT
//! gate) implements it, so one driver moves the bytes for all of them.

use std::borrow::Cow;
use std::time::{Duration, Instant};

/// The time passed into a machine: monotonic for timeouts, wall-clock
/// (since the Unix epoch) for what carries dates, such as a token's `exp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    pub mono: Instant,
    pub unix: Duration,
}

impl Now {
    /// Read both clocks (drivers only; machines are handed a `Now`).
    pub fn read() -> Now {
        Now {
            mono: Instant::now(),
            unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default(),
        }
    }
}

/// One sample for /metrics: `offrac_attach_*` names, labelled there with the
/// attached address and function (and `label`, when set, such as a drop reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counter {
    pub name: &'static str,
    pub help: &'static str,
    /// A gauge (a level) rather than a counter (a running total).
    pub gauge: bool,
    pub label: Option<(&'static str, Cow<'static, str>)>,
    pub value: u64,
}

impl Counter {
    pub fn total(name: &'static str, help: &'static str, value: u64) -> Counter {
        Counter {
            name,
            help,
            gauge: false,
            label: None,
            value,
        }
    }

    pub fn gauge(name: &'static str, help: &'static str, value: u64) -> Counter {
        Counter {
            gauge: true,
            ..Counter::total(name, help, value)
        }
    }

    pub fn with(self, key: &'static str, value: impl Into<Cow<'static, str>>) -> Counter {
        Counter {
            label: Some((key, value.into())),
            ..self
        }
    }
}

/// A sans-IO machine for the connections of one attached address. Each
/// client connection has one backend connection at a time, which the
/// driver opens when the machine has bytes for it and no socket is open.
pub trait InlineMachine {
    /// A new client connection; its id names it in every other call.
    fn open(&mut self) -> usize;
    /// Whether the driver should read more from this client now.
    fn wants_client_input(&self, id: usize) -> bool;
    /// Whether the driver should read more from the backend now.
    fn wants_backend_input(&self, id: usize) -> bool;
    fn client_input(&mut self, id: usize, bytes: &[u8], now: Now);
    /// The client closed its sending side (read returned 0).
    fn client_eof(&mut self, id: usize, now: Now);
    /// The client connection failed (reset, or a write failed): nothing more reaches it.
    fn client_closed(&mut self, id: usize);
    fn backend_input(&mut self, id: usize, bytes: &[u8], now: Now);
    /// The backend closed its connection (read returned 0); the driver has dropped it.
    fn backend_eof(&mut self, id: usize, now: Now);
    /// Connecting to, reading from or writing to the backend failed; the driver has dropped it.
    fn backend_failed(&mut self, id: usize, now: Now);
    /// The driver gave `id` a backend connection: `reused` when it was an
    /// idle one that served earlier requests (a pool's), false when new.
    fn backend_opened(&mut self, _id: usize, _reused: bool) {}
    /// The next backend connection of `id` must be a new one (not a pool's).
    fn wants_fresh_backend(&self, _id: usize) -> bool {
        false
    }
    /// The machine wants the backend connection dropped now (taken once).
    fn take_backend_reset(&mut self, id: usize) -> bool;
    /// Handle buffered input again (called after the driver drained output).
    fn resume(&mut self, id: usize, now: Now);
    /// Bytes to write to the client; the driver drains what it wrote.
    fn client_out(&mut self, id: usize) -> Option<&mut Vec<u8>>;
    /// Bytes to write to the backend; the driver drains what it wrote.
    fn backend_out(&mut self, id: usize) -> Option<&mut Vec<u8>>;
    /// The connection is done: the driver closes both sockets and calls `remove`.
    fn finished(&self, id: usize) -> bool;
    /// Timeouts; returns the connections changed.
    fn tick(&mut self, now: Now) -> Vec<usize>;
    fn remove(&mut self, id: usize, now: Now);
    /// The machine's counters, for /metrics.
    fn counters(&self) -> Vec<Counter> {
        Vec::new()
    }

    /// Note each answer of `id` as a [`super::udp::Unit`] from now on (a UDP
    /// pseudo-connection, framed by them); machines that do not say leave
    /// the UDP side to cut the answer stream itself.
    fn track_units(&mut self, _id: usize) {}
    /// The units noted since the last call, in output order.
    fn take_units(&mut self, _id: usize) -> Vec<super::udp::Unit> {
        Vec::new()
    }

    /// An answer is owed by the backend on this connection (a request was
    /// forwarded and its answer is not all in): the driver may poll for it a
    /// little while instead of sleeping. False for machines that do not say.
    fn awaits_backend(&self, _id: usize) -> bool {
        false
    }
}
