//! The engine's oracle: a harness that feeds an [`Engine`] a sequence of
//! [`Op`]s on single-hop request streams it generated itself, and checks
//! after every step and at the end that the engine keeps its invariants —
//! every request leaves exactly once, with the outcome its function and size
//! allow; no buffer or queue over-fills; every refusal is counted; nothing is
//! left behind.
//!
//! Shared by the property tests (`tests/properties.rs`) and the fuzz target
//! (`fuzz/fuzz_targets/core_engine.rs`); built only with the `oracle`
//! feature. A broken invariant panics with a message naming it: this is a
//! test tool, not a production path.

use crate::{Action, BufferPolicy, Engine, EngineConfig, Instant, SlotPolicy};
use offrac_proto::{RequestHeader, Status, REQUEST_ID_NONE};
use std::collections::HashMap;
use std::time::Duration;

/// One event the driver could deliver to the engine.
#[derive(Debug, Clone)]
pub enum Op {
    /// Up to `n` more bytes of connection `conn`'s stream arrive.
    Bytes { conn: usize, n: usize },
    /// The job running on `slot` (if any) completes.
    Done { slot: usize },
    /// `dt` nanoseconds pass (plus the 1 µs every op adds).
    Tick { dt: u64 },
    /// The client closes connection `conn`.
    Close { conn: usize },
    /// SIGTERM: stop admitting.
    Shutdown,
    /// The shutdown grace period ended.
    Abort,
}

/// The payload of request `id`: a pattern the harness checks on dispatch.
pub fn payload_of(id: u64, len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (id as u32).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

/// A small configuration that makes every outcome reachable in a few
/// events: three 4 KiB buffers, 2 KiB payloads at most, slots hosting
/// functions 0, 1, 1 and 2, a 1 ms stall timeout.
pub fn small_config(policy: BufferPolicy, slot_policy: SlotPolicy, small: bool) -> EngineConfig {
    EngineConfig {
        buffers: 3,
        buffer_bytes: 4096,
        buffer_policy: policy,
        max_payload: 2048,
        small_request_max: if small { 600 } else { 0 },
        small_queue_bytes: 2048,
        slot_policy,
        slot_queue_bytes: 4096,
        stall_timeout: Duration::from_millis(1),
        reassembly_timeout: Duration::from_micros(1500),
        reassembly_min_rate: 0,
        slots: vec![0, 1, 1, 2],
        // One slot of function 1 holds a single waiting job: its overflow
        // stays in the pool or goes to the other slot.
        slot_queue_depths: vec![None, Some(1)],
        device_id: 0,
        peers: Vec::new(),
    }
}

/// Where a request sits in the harness's streams.
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    pub conn: usize,
    /// Byte offset where the request ends in its connection's stream.
    pub end: usize,
    pub function: u8,
    pub len: u32,
}

/// An engine, the streams of its connections, and everything it did.
pub struct Harness {
    pub engine: Engine,
    now: u64,
    pub streams: Vec<Vec<u8>>,
    /// Bytes of each stream delivered so far.
    pub sent: Vec<usize>,
    pub closed: Vec<bool>,
    /// Request id -> where it is.
    pub ids: HashMap<u64, Sent>,
    running: Vec<Option<u64>>,
    /// Request id -> what happened to it ("dispatched" or a status name).
    pub outcomes: HashMap<u64, Vec<&'static str>>,
    replies: u64,
}

impl Harness {
    /// `reqs[c]`: `(function, payload length)` of each request of connection `c`.
    pub fn new(cfg: EngineConfig, reqs: Vec<Vec<(u8, u32)>>) -> Harness {
        Harness::with_owners(cfg, None, reqs)
    }

    /// `owners`: a per-function partition of the buffers (`None`: the shared pool).
    /// Panics if the configuration is invalid.
    pub fn with_owners(
        cfg: EngineConfig,
        owners: Option<Vec<Option<u8>>>,
        reqs: Vec<Vec<(u8, u32)>>,
    ) -> Harness {
        let mut ids = HashMap::new();
        let mut streams = Vec::new();
        for (conn, list) in reqs.iter().enumerate() {
            let mut s = Vec::new();
            for (k, &(function, len)) in list.iter().enumerate() {
                let id = (conn as u64 + 1) << 32 | (k as u64 + 1);
                s.extend_from_slice(&RequestHeader::single(id, function, 0, len).encode());
                s.extend_from_slice(&payload_of(id, len));
                ids.insert(
                    id,
                    Sent {
                        conn,
                        end: s.len(),
                        function,
                        len,
                    },
                );
            }
            streams.push(s);
        }
        let slots = cfg.slots.len();
        let engine = match owners {
            Some(o) => Engine::with_buffer_owners(cfg, o),
            None => Engine::new(cfg),
        };
        Harness {
            engine: engine.unwrap_or_else(|e| panic!("invalid harness configuration: {e}")),
            now: 1,
            sent: vec![0; streams.len()],
            closed: vec![false; streams.len()],
            streams,
            ids,
            running: vec![None; slots],
            outcomes: HashMap::new(),
            replies: 0,
        }
    }

    /// Deliver one event, carry out what the engine asks, check the bounds.
    /// Out-of-range connections and slots are ignored.
    pub fn apply(&mut self, op: &Op) {
        self.now += 1000;
        match *op {
            Op::Bytes { conn, n } => {
                if conn >= self.streams.len() || self.closed[conn] {
                    return;
                }
                let s = self.sent[conn];
                let end = s.saturating_add(n).min(self.streams[conn].len());
                let chunk = self.streams[conn][s..end].to_vec();
                self.sent[conn] = end;
                self.engine
                    .handle_bytes(Instant::from_nanos(self.now), conn as u64, &chunk);
            }
            Op::Done { slot } => {
                if slot < self.running.len() && self.running[slot].take().is_some() {
                    self.engine
                        .handle_slot_done(Instant::from_nanos(self.now), slot);
                }
            }
            Op::Tick { dt } => {
                self.now = self.now.saturating_add(dt);
                self.engine.handle_timeout(Instant::from_nanos(self.now));
            }
            Op::Close { conn } => {
                if conn >= self.streams.len() {
                    return;
                }
                self.closed[conn] = true;
                self.engine
                    .handle_close(Instant::from_nanos(self.now), conn as u64);
            }
            Op::Shutdown => self.engine.begin_shutdown(Instant::from_nanos(self.now)),
            Op::Abort => self.engine.abort_queued(Instant::from_nanos(self.now)),
        }
        self.drain_actions();
        self.check_bounds();
    }

    fn drain_actions(&mut self) {
        while let Some(a) = self.engine.poll_action() {
            match a {
                Action::Dispatch { slot, job } => {
                    assert!(
                        self.running[slot].is_none(),
                        "slot {slot} double-dispatched"
                    );
                    let id = job.header.request_id;
                    let Some(sent) = self.ids.get(&id) else {
                        panic!("dispatched {id:#x}, never sent");
                    };
                    assert_eq!(
                        job.payload.bytes()[..],
                        payload_of(id, sent.len)[..],
                        "payload of {id} altered"
                    );
                    assert_eq!(
                        self.engine.slots()[slot].function,
                        job.function(),
                        "wrong slot"
                    );
                    assert!(
                        Some(job.first_byte_at) <= Some(job.complete_at)
                            && Some(job.complete_at) <= job.dispatched_at
                    );
                    self.running[slot] = Some(id);
                    self.outcomes.entry(id).or_default().push("dispatched");
                }
                Action::Reply { header, .. } => {
                    self.replies += 1;
                    let name = header.status.name();
                    // Every answer names a request this harness sent, or no
                    // request at all (a stall before the id had arrived).
                    assert!(
                        self.ids.contains_key(&header.request_id)
                            || (header.request_id == REQUEST_ID_NONE
                                && matches!(header.status, Status::Timeout | Status::ShuttingDown)),
                        "reply {name} for unknown id {:#x}",
                        header.request_id
                    );
                    self.outcomes
                        .entry(header.request_id)
                        .or_default()
                        .push(name);
                }
                Action::Close { conn } => {
                    self.closed[conn as usize] = true;
                    self.engine
                        .handle_close(Instant::from_nanos(self.now), conn);
                }
                Action::Forward { .. } => panic!("no peers are configured: nothing is forwarded"),
                Action::Describe { .. } => panic!("the generated requests never ask to describe"),
                Action::Control { .. } => panic!("the generated requests never ask for control"),
                Action::Result { .. } => panic!("the generated requests never name a buffer"),
                Action::RefusedCollective { .. } | Action::CollectiveHop { .. } => {
                    panic!("the generated requests never call a collective")
                }
            }
        }
    }

    fn check_bounds(&self) {
        let pool = self.engine.pool();
        for b in 0..pool.len() {
            assert!(pool.used(b) <= pool.capacity(), "buffer {b} over-filled");
            if let Some(f) = pool.owner(b) {
                assert!(
                    pool.ready(b).iter().all(|j| j.function() == f),
                    "buffer {b} reserved for {f} holds another function"
                );
            }
        }
        let cfg = self.engine.config();
        for s in self.engine.slots() {
            assert!(s.queued_bytes() <= cfg.slot_queue_bytes);
        }
        assert!(self.engine.small_queue().1 <= cfg.small_queue_bytes);
        let st = self.engine.stats();
        assert_eq!(
            st.refusals.iter().sum::<u64>(),
            self.replies,
            "a refusal was not reported"
        );
    }

    /// Send everything left, then run every slot until the engine is idle.
    pub fn finish(&mut self) {
        for conn in 0..self.streams.len() {
            let n = self.streams[conn].len();
            self.apply(&Op::Bytes { conn, n });
        }
        for _ in 0..10_000 {
            if self.engine.is_idle() && self.running.iter().all(Option::is_none) {
                break;
            }
            for slot in 0..self.running.len() {
                self.apply(&Op::Done { slot });
            }
        }
        assert!(self.engine.is_idle(), "the engine is not idle after finish");
    }

    /// After [`Harness::finish`]: every request left at most once, every
    /// request on a connection still open left exactly once with an outcome
    /// its function and length allow, the engine's counters balance and it
    /// holds nothing for an open connection.
    pub fn check_outcomes(&self) {
        let st = self.engine.stats();
        // Everything admitted was dispatched or collected, nothing is left behind.
        assert_eq!(
            st.admitted,
            st.dispatched + st.collected + st.aborted,
            "admitted ≠ dispatched + collected + aborted"
        );
        assert_eq!(st.dispatched, st.completed, "dispatched ≠ completed");
        let cfg = self.engine.config();
        for (&id, sent) in &self.ids {
            let out = self.outcomes.get(&id).cloned().unwrap_or_default();
            assert!(out.len() <= 1, "request {id:#x} left {out:?}");
            if self.closed[sent.conn] {
                continue;
            }
            assert!(self.sent[sent.conn] >= sent.end, "an open stream not sent");
            assert_eq!(
                out.len(),
                1,
                "request {id:#x} on an open connection got {out:?}"
            );
            if out[0] == Status::ShuttingDown.name() {
                // Refused or aborted by a shutdown: any request may get this.
            } else if !cfg.slots.contains(&sent.function) {
                assert_eq!(out[0], Status::UnknownFunction.name(), "{id:#x}");
            } else if u64::from(sent.len) > cfg.max_payload {
                assert_eq!(out[0], Status::TooLarge.name(), "{id:#x}");
            } else {
                let ok = [
                    "dispatched",
                    Status::Busy.name(),
                    Status::Timeout.name(),
                    Status::ShuttingDown.name(),
                ];
                assert!(ok.contains(&out[0]), "{id:#x}: {out:?}");
            }
        }
        // Every answer owed to an open connection was given.
        for conn in 0..self.streams.len() {
            if !self.closed[conn] {
                assert_eq!(self.engine.held(conn as u64), 0, "conn {conn} still held");
            }
        }
    }
}
