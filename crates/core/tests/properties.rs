//! Invariants of the engine under arbitrary segmentation, interleaving,
//! completions, closes and stalls.

use offrac_core::{Action, BufferPolicy, Engine, EngineConfig, Instant, SlotPolicy};
use offrac_proto::{RequestHeader, Status, HEADER_LEN, REQUEST_ID_NONE};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::Duration;

const CONNS: usize = 4;

#[derive(Debug, Clone)]
enum Op {
    Bytes {
        conn: usize,
        n: usize,
    },
    Done {
        slot: usize,
    },
    Tick {
        dt: u64,
    },
    Close {
        conn: usize,
    },
    /// SIGTERM: stop admitting.
    Shutdown,
    /// The shutdown grace period ended.
    Abort,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..CONNS, 1usize..3000).prop_map(|(conn, n)| Op::Bytes { conn, n }),
        3 => (0usize..4).prop_map(|slot| Op::Done { slot }),
        1 => (0u64..2_000_000).prop_map(|dt| Op::Tick { dt }),
        1 => (0..CONNS).prop_map(|conn| Op::Close { conn }),
        1 => prop_oneof![9 => Just(Op::Tick { dt: 0 }), 1 => Just(Op::Shutdown)],
        1 => prop_oneof![9 => Just(Op::Tick { dt: 0 }), 1 => Just(Op::Abort)],
    ]
}

/// (function, payload length) for each request of a connection.
fn requests() -> impl Strategy<Value = Vec<(u8, u32)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u8), Just(1), Just(2), Just(9)],
            0u32..2600,
        ),
        0..12,
    )
}

fn payload_of(id: u64, len: u32) -> Vec<u8> {
    (0..len)
        .map(|i| (id as u32).wrapping_mul(31).wrapping_add(i) as u8)
        .collect()
}

struct Harness {
    engine: Engine,
    now: u64,
    streams: Vec<Vec<u8>>,
    sent: Vec<usize>,
    closed: Vec<bool>,
    /// request id -> (conn, byte offset where the request ends in its stream, len)
    ids: HashMap<u64, (usize, usize, u32)>,
    running: Vec<Option<u64>>,
    outcomes: HashMap<u64, Vec<&'static str>>,
    replies: u64,
}

impl Harness {
    fn new(cfg: EngineConfig, reqs: Vec<Vec<(u8, u32)>>) -> Harness {
        Harness::with_owners(cfg, None, reqs)
    }

    /// `owners`: a per-function partition of the buffers (`None`: the shared pool).
    fn with_owners(
        cfg: EngineConfig,
        owners: Option<Vec<Option<u8>>>,
        reqs: Vec<Vec<(u8, u32)>>,
    ) -> Harness {
        let mut ids = HashMap::new();
        let mut streams = Vec::new();
        for (conn, list) in reqs.iter().enumerate() {
            let mut s = Vec::new();
            for (k, &(f, len)) in list.iter().enumerate() {
                let id = (conn as u64 + 1) << 32 | (k as u64 + 1);
                s.extend_from_slice(&RequestHeader::single(id, f, 0, len).encode());
                s.extend_from_slice(&payload_of(id, len));
                ids.insert(id, (conn, s.len(), len));
            }
            streams.push(s);
        }
        let slots = cfg.slots.len();
        Harness {
            engine: match owners {
                Some(o) => Engine::with_buffer_owners(cfg, o).unwrap(),
                None => Engine::new(cfg).unwrap(),
            },
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

    fn apply(&mut self, op: &Op) {
        self.now += 1000;
        match *op {
            Op::Bytes { conn, n } => {
                if self.closed[conn] {
                    return;
                }
                let s = self.sent[conn];
                let end = (s + n).min(self.streams[conn].len());
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
                self.now += dt;
                self.engine.handle_timeout(Instant::from_nanos(self.now));
            }
            Op::Close { conn } => {
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
                    let (_, _, len) = self.ids[&id];
                    assert_eq!(job.payload, payload_of(id, len), "payload of {id} altered");
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
    fn finish(&mut self) {
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
        assert!(self.engine.is_idle());
    }
}

fn config(policy: BufferPolicy, slot_policy: SlotPolicy, small: bool) -> EngineConfig {
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
        slots: vec![0, 1, 1, 2],
        device_id: 0,
        peers: Vec::new(),
    }
}

fn policies() -> impl Strategy<Value = (BufferPolicy, SlotPolicy, bool)> {
    (
        prop_oneof![
            Just(BufferPolicy::NaiveRr),
            Just(BufferPolicy::EligibleRr),
            Just(BufferPolicy::Jsb)
        ],
        prop_oneof![Just(SlotPolicy::Rr), Just(SlotPolicy::Jsq)],
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_request_leaves_exactly_once(
        (bp, sp, small) in policies(),
        owners in prop_oneof![
            Just(None),
            Just(Some(vec![Some(0u8), Some(1), Some(2)])),
            Just(Some(vec![Some(1u8), None, Some(0)])),
        ],
        reqs in prop::collection::vec(requests(), CONNS),
        ops in prop::collection::vec(op(), 0..120),
    ) {
        let mut h = Harness::with_owners(config(bp, sp, small), owners, reqs);
        for op in &ops {
            h.apply(op);
        }
        h.finish();
        let st = h.engine.stats().clone();
        // Everything admitted was dispatched or collected, nothing is left behind.
        prop_assert_eq!(st.admitted, st.dispatched + st.collected + st.aborted);
        prop_assert_eq!(st.dispatched, st.completed);
        for (&id, &(conn, end, len)) in &h.ids {
            let out = h.outcomes.get(&id).cloned().unwrap_or_default();
            prop_assert!(out.len() <= 1, "request {} left {:?}", id, out);
            let fully_sent = h.sent[conn] >= end;
            if !h.closed[conn] {
                prop_assert!(fully_sent);
                prop_assert_eq!(out.len(), 1, "request {} on an open connection got {:?}", id, out);
                let f = h.streams[conn][end - len as usize - HEADER_LEN + 24];
                if out[0] == Status::ShuttingDown.name() {
                    // Refused or aborted by a shutdown: any request may get this.
                } else if f == 9 {
                    prop_assert_eq!(out[0], Status::UnknownFunction.name());
                } else if len as u64 > 2048 {
                    prop_assert_eq!(out[0], Status::TooLarge.name());
                } else {
                    let ok = ["dispatched", Status::Busy.name(), Status::Timeout.name(), Status::ShuttingDown.name()];
                    prop_assert!(ok.contains(&out[0]), "{:?}", out);
                }
            }
        }
        // Every answer owed to an open connection was given.
        for conn in 0..CONNS {
            if !h.closed[conn] {
                prop_assert_eq!(h.engine.held(conn as u64), 0);
            }
        }
    }

    #[test]
    fn segmentation_does_not_change_outcomes(reqs in requests(), cuts in prop::collection::vec(1usize..200, 1..50)) {
        // With slots always drained and room for everything, the result of a
        // stream is the same however it is cut.
        let cfg = EngineConfig { buffers: 64, buffer_bytes: 1 << 16, max_payload: 2048, small_queue_bytes: 1 << 16,
            slot_queue_bytes: 1 << 20, slots: vec![0, 1, 2], ..EngineConfig::default() };
        let mut one = Harness::new(cfg.clone(), vec![reqs.clone()]);
        one.finish();
        let mut cut = Harness::new(cfg, vec![reqs]);
        let mut k = 0;
        while cut.sent[0] < cut.streams[0].len() {
            cut.apply(&Op::Bytes { conn: 0, n: cuts[k % cuts.len()] });
            k += 1;
        }
        cut.finish();
        prop_assert_eq!(one.outcomes, cut.outcomes);
    }
}

#[test]
fn refusals_are_counted_per_function_and_per_tenant_within_a_bound() {
    let mut e = Engine::new(EngineConfig {
        slots: vec![0],
        ..EngineConfig::default()
    })
    .unwrap();
    let mut bytes = Vec::new();
    for t in 0..1100u16 {
        let mut h = RequestHeader::single(u64::from(t), 9, 0, 0);
        h.tenant = t;
        bytes.extend_from_slice(&h.encode());
    }
    e.handle_bytes(Instant::from_nanos(1), 1, &bytes);
    let st = e.stats();
    let code = Status::UnknownFunction.code();
    assert_eq!(st.refusals_by_function.get(&(9, code)), Some(&1100));
    assert_eq!(
        st.refusals_by_tenant.len(),
        offrac_core::EngineStats::MAX_TENANT_SERIES
    );
    assert_eq!(st.refusals_by_tenant.get(&(5, code)), Some(&1));
    assert_eq!(st.refusals_tenant_overflow, 1100 - 1024);
}
