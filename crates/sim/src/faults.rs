//! Random faults against the node's driver: well-behaved clients beside
//! clients that stall, send garbage, hang up or stop reading, with or
//! without a shutdown, all under virtual time. Every choice comes from a
//! caller's source of numbers — a seeded generator in the tests
//! (`tests/node_driver.rs`), the fuzzer's input in the fuzz target
//! (`fuzz/fuzz_targets/node_driver.rs`) — so both check the same
//! properties:
//!
//! - nothing is answered twice, or for a request never sent;
//! - no answer follows the node's close;
//! - every request a well-behaved client sent gets exactly one answer;
//! - the node's unread output to a client stays within
//!   [`backlog_bound`] (memory is bounded);
//! - without a shutdown the engine ends idle with every buffer free; with
//!   one, the shutdown finishes.
//!
//! A broken property panics with a message naming it (a test tool).

use crate::world::{World, WorldConfig};
use offrac_core::EngineConfig;
use offrac_proto::{FunctionId, RequestHeader, REQUEST_ID_NONE};
use std::collections::HashSet;
use std::time::Duration;

const MS: u64 = 1_000_000;
const ECHO: u8 = FunctionId::Echo as u8;
const TOPK: u8 = FunctionId::TopK as u8;
const SPIN: u8 = FunctionId::Spin as u8;

/// What a client does besides sending requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    WellBehaved,
    /// Stops half-way through a request and sends nothing more.
    Staller,
    /// Sends a 64-byte header of garbage, then nothing.
    Garbage,
    /// Closes its side.
    HangsUp,
    /// Stops reading its answers for a while.
    StopsReading,
}

const KINDS: [Kind; 5] = [
    Kind::WellBehaved,
    Kind::Staller,
    Kind::Garbage,
    Kind::HangsUp,
    Kind::StopsReading,
];

/// What one scenario did, for the caller to report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub kinds: Vec<Kind>,
    /// Requests sent (whole or in part) and answers received, all clients.
    pub requests: usize,
    pub answers: usize,
    pub shutdown: bool,
    /// The largest unread output of any client.
    pub peak_unread: usize,
}

/// The node's unread output to one client that the driver may reach when
/// the client's requests name only `functions`: the pause threshold, plus
/// the answers to everything the engine may have admitted when reading
/// stopped (its buffers, the small-request queue and the queues of the
/// slots hosting those functions; each answer at most twice its payload
/// with header and timings), plus one largest answer.
pub fn backlog_bound(engine: &EngineConfig, pause_reading_above: usize, functions: &[u8]) -> usize {
    let slots = engine
        .slots
        .iter()
        .filter(|f| functions.contains(f))
        .count() as u64;
    let held = engine.buffers as u64 * engine.buffer_bytes
        + slots * engine.slot_queue_bytes
        + engine.small_queue_bytes;
    pause_reading_above + 2 * held as usize + engine.max_payload as usize + 4096
}

fn request(id: u64, function: u8, param: u64, payload: &[u8]) -> Vec<u8> {
    let mut b = RequestHeader::single(id, function, param, payload.len() as u32)
        .encode()
        .to_vec();
    b.extend_from_slice(payload);
    b
}

/// Run one scenario. `seed` cuts the byte streams into segments of up to a
/// drawn size, at least `min_segment` (1-byte segments make a scenario of
/// millions of events: the fuzz target, which would favour them, asks for
/// more); `next(m)` draws each choice, a number below `m` (any number is
/// accepted and reduced). Panics when a property above breaks.
pub fn run_scenario(seed: u64, min_segment: usize, next: &mut dyn FnMut(u64) -> u64) -> Outcome {
    let mut next = move |m: u64| next(m) % m.max(1);
    let shutdown_at = (next(3) == 0).then(|| next(30) * MS);
    let mut cfg = WorldConfig::new(EngineConfig::default(), seed);
    cfg.engine.buffers = 1 + next(3) as usize;
    cfg.engine.buffer_bytes = 16 * 1024;
    cfg.engine.max_payload = 16 * 1024;
    cfg.engine.slot_queue_bytes = 32 * 1024;
    cfg.engine.small_queue_bytes = 4 * 1024;
    cfg.engine.stall_timeout = Duration::from_millis(5);
    cfg.engine.reassembly_timeout = Duration::from_millis(8);
    cfg.driver.shutdown_grace = Duration::from_millis(3);
    cfg.driver.pause_reading_above = 8 * 1024;
    cfg.exec.fixed = vec![(SPIN, 300_000)];
    cfg.max_segment = min_segment.max(1 + next(3000) as usize);
    let bound = backlog_bound(
        &cfg.engine,
        cfg.driver.pause_reading_above,
        &[ECHO, TOPK, SPIN],
    );
    let mut w = World::new(cfg).unwrap_or_else(|e| panic!("invalid configuration: {e}"));
    let kinds: Vec<Kind> = (0..1 + next(6))
        .map(|_| KINDS[next(KINDS.len() as u64) as usize])
        .collect();
    let clients: Vec<usize> = kinds.iter().map(|_| w.connect()).collect();
    let mut sent: Vec<Vec<u64>> = vec![Vec::new(); clients.len()];
    let mut shut = false;
    for step in 0..40u64 {
        if let Some(t) = shutdown_at {
            if !shut && w.now() >= t {
                w.shutdown();
                shut = true;
            }
        }
        for (i, &c) in clients.iter().enumerate() {
            let id = step * 100 + i as u64;
            let len = match next(10) {
                0 => 20_000, // TOO_LARGE
                1..=3 => next(12_000) as usize,
                _ => next(1_000) as usize,
            };
            let f = [ECHO, ECHO, TOPK, SPIN][next(4) as usize];
            let payload = vec![(id % 251) as u8; len & !3];
            match (kinds[i], step) {
                (Kind::Staller, 20) => {
                    let mut b = request(id, f, 1, &payload);
                    b.truncate(b.len() / 2);
                    w.send(c, &b);
                    sent[i].push(id);
                }
                (Kind::Staller, s) if s > 20 => {}
                (Kind::Garbage, 15) => w.send(c, &[0xEE; 64]),
                (Kind::Garbage, s) if s > 15 => {}
                (Kind::HangsUp, 25) => w.close(c),
                (Kind::HangsUp, s) if s > 25 => {}
                (Kind::StopsReading, 5) => w.set_reading(c, false),
                (Kind::StopsReading, 30) => w.set_reading(c, true),
                _ => {
                    w.send(c, &request(id, f, 1, &payload));
                    sent[i].push(id);
                }
            }
        }
        w.run_for(next(2 * MS));
    }
    if shutdown_at.is_some() && !shut {
        w.shutdown();
        shut = true;
    }
    w.run_for(500 * MS);
    let mut answers = 0;
    let mut peak_unread = 0;
    for (i, &c) in clients.iter().enumerate() {
        let cl = &w.clients[c];
        let kind = kinds[i];
        let mut seen = HashSet::new();
        answers += cl.answers.len();
        peak_unread = peak_unread.max(cl.peak_unread);
        assert!(
            cl.peak_unread <= bound,
            "client {i} ({kind:?}): {} bytes of output unread, above the bound {bound}",
            cl.peak_unread
        );
        for a in &cl.answers {
            let id = a.header.request_id;
            assert!(
                id == REQUEST_ID_NONE || sent[i].contains(&id),
                "client {i} ({kind:?}) got an answer for {id}, never sent"
            );
            assert!(
                id == REQUEST_ID_NONE || seen.insert(id),
                "client {i} ({kind:?}): two answers for {id}: {:?}",
                w.answers_to(c, id)
            );
            if let Some(eof) = cl.eof_at {
                assert!(a.at <= eof, "client {i}: an answer after the close");
            }
        }
        if matches!(kind, Kind::WellBehaved | Kind::StopsReading) {
            for id in &sent[i] {
                assert_eq!(
                    w.answers_to(c, *id).len(),
                    1,
                    "client {i} ({kind:?}): request {id} unanswered (shutdown {shutdown_at:?}); \
                     node closed at {:?}, dropped at {:?}, answered {:?}",
                    cl.eof_at,
                    cl.dropped_at,
                    cl.answers
                        .iter()
                        .map(|a| (a.header.request_id, a.header.status.name()))
                        .collect::<Vec<_>>()
                );
            }
        }
    }
    if !shut {
        assert!(w.driver().engine().is_idle(), "work left behind");
        let pool = w.driver().engine().pool();
        assert!(
            (0..pool.len()).all(|b| pool.used(b) == 0),
            "a buffer never freed"
        );
    } else {
        assert!(
            w.node(0).finished_at.is_some(),
            "the shutdown never finished: now {} finished-now {} timeout {:?} next event {:?}",
            w.now(),
            w.driver()
                .is_finished(offrac_core::Instant::from_nanos(w.now())),
            w.driver().poll_timeout(),
            w.next_event()
        );
    }
    Outcome {
        kinds,
        requests: sent.iter().map(Vec::len).sum(),
        answers,
        shutdown: shut,
        peak_unread,
    }
}
