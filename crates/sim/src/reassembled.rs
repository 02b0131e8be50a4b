//! The shipped datapath under virtual time: real request bytes into
//! `offrac_core::Engine`, one connection per client, slot completions
//! scheduled at dispatch time plus execution time.

use crate::backend::{Backend, Fragment, Outbox, Outcome};
use crate::config::{PoolModel, SimConfig, SimError};
use crate::Nanos;
use offrac_core::{Action, Engine, EngineConfig, Instant};
use offrac_proto::{RequestHeader, Status, HEADER_LEN};
use std::time::Duration;

/// The wake-up token of the engine's stall timer (slot ids are the other tokens).
const TIMER: u64 = u64::MAX;

pub struct Reassembled {
    engine: Engine,
    frag_bytes: usize,
    /// Header then zero payload: the first fragment is cut from here, the others from the tail.
    scratch: Vec<u8>,
    exec_ns_per_frag: Vec<f64>,
    overhead_ns: f64,
    /// The attempt each slot runs and how long it queued.
    running: Vec<Option<(u64, Nanos)>>,
    busy_ns: Vec<u64>,
    timer_at: Option<Nanos>,
}

impl Reassembled {
    pub fn new(cfg: &SimConfig, pool: &PoolModel) -> Result<Reassembled, SimError> {
        let ecfg = engine_config(cfg, pool);
        let slots = ecfg.slots.clone();
        let engine = if pool.per_function {
            let n = cfg.instances.len();
            let owners = (0..pool.buffers).map(|i| Some((i % n) as u8)).collect();
            Engine::with_buffer_owners(ecfg, owners)?
        } else {
            Engine::new(ecfg)?
        };
        Ok(Reassembled {
            engine,
            frag_bytes: cfg.frag_bytes as usize,
            scratch: vec![0; HEADER_LEN + cfg.frag_bytes as usize],
            exec_ns_per_frag: cfg.exec_us.iter().map(|us| us * 1000.0).collect(),
            overhead_ns: cfg.overhead_us * 1000.0,
            running: vec![None; slots.len()],
            busy_ns: vec![0; slots.len()],
            timer_at: None,
        })
    }

    fn actions(&mut self, now: Nanos, out: &mut Outbox) {
        while let Some(a) = self.engine.poll_action() {
            match a {
                Action::Dispatch { slot, job } => {
                    let frags = job.payload.len().div_ceil(self.frag_bytes).max(1);
                    let f = job.function() as usize;
                    let exec = (self.exec_ns_per_frag[f] * frags as f64 + self.overhead_ns).round()
                        as Nanos;
                    self.busy_ns[slot] += exec;
                    self.running[slot] = Some((job.header.request_id, job.queue_ns()));
                    out.wakes.push((now + exec, slot as u64));
                }
                Action::Reply { header, .. } => {
                    let outcome = match header.status {
                        Status::Busy => Outcome::Busy,
                        s => Outcome::Other(s.code()),
                    };
                    out.answers.push((header.request_id, outcome));
                }
                Action::Close { conn } => self.engine.handle_close(Instant::from_nanos(now), conn),
                // The design study has no peers, so no hop is ever forwarded.
                // Nor are named buffers (the engine's own results).
                Action::Forward { .. }
                | Action::Describe { .. }
                | Action::Control { .. }
                | Action::Result { .. }
                | Action::RefusedCollective { .. }
                | Action::CollectiveHop { .. } => {}
            }
        }
        if let Some(t) = self.engine.poll_timeout().map(Instant::as_nanos) {
            if self.timer_at.is_none_or(|armed| t < armed) {
                self.timer_at = Some(t);
                out.wakes.push((t, TIMER));
            }
        }
    }
}

impl Backend for Reassembled {
    fn fragment(&mut self, now: Nanos, frag: Fragment, out: &mut Outbox) {
        let fb = self.frag_bytes;
        if frag.index == 0 {
            let len = (frag.frags as usize * fb) as u32;
            let h = RequestHeader::single(frag.attempt, frag.function, 0, len);
            self.scratch[..HEADER_LEN].copy_from_slice(&h.encode());
            self.engine
                .handle_bytes(Instant::from_nanos(now), frag.conn, &self.scratch);
        } else {
            self.engine.handle_bytes(
                Instant::from_nanos(now),
                frag.conn,
                &self.scratch[HEADER_LEN..],
            );
        }
        self.actions(now, out);
    }

    fn wake(&mut self, now: Nanos, token: u64, out: &mut Outbox) {
        if token == TIMER {
            self.timer_at = None;
            self.engine.handle_timeout(Instant::from_nanos(now));
        } else {
            let slot = token as usize;
            if let Some((attempt, queue_ns)) = self.running[slot].take() {
                out.answers.push((attempt, Outcome::Done { queue_ns }));
                self.engine.handle_slot_done(Instant::from_nanos(now), slot);
            }
        }
        self.actions(now, out);
    }

    fn reset(&mut self, now: Nanos, conn: u64, out: &mut Outbox) {
        self.engine.handle_close(Instant::from_nanos(now), conn);
        self.actions(now, out);
    }

    fn utilization(&self) -> Vec<(f64, f64, usize)> {
        let mut u = vec![(0.0, 0.0, 0usize); self.exec_ns_per_frag.len()];
        for (slot, q) in self.engine.slots().iter().enumerate() {
            let e = &mut u[q.function as usize];
            let busy = self.busy_ns[slot] as f64 / 1000.0;
            // A slot fed complete requests is held only while it executes.
            e.0 += busy;
            e.1 += busy;
            e.2 += 1;
        }
        u
    }
}

/// The engine of a simulated node: the pool model in fragments, turned into bytes.
pub(crate) fn engine_config(cfg: &SimConfig, pool: &PoolModel) -> EngineConfig {
    let fb = u64::from(cfg.frag_bytes);
    let slots: Vec<u8> = cfg
        .instances
        .iter()
        .enumerate()
        .flat_map(|(f, &n)| std::iter::repeat_n(f as u8, n))
        .collect();
    let buffer_bytes = pool.buffer_frags * fb;
    EngineConfig {
        buffers: pool.buffers,
        buffer_bytes,
        buffer_policy: pool.policy,
        max_payload: buffer_bytes,
        small_request_max: if pool.small_queue {
            HEADER_LEN as u64 + fb
        } else {
            0
        },
        small_queue_bytes: (pool.small_queue_frags * fb).max(HEADER_LEN as u64 + fb),
        slot_policy: pool.selector,
        slot_queue_bytes: (pool.slot_queue_frags * fb).max(buffer_bytes),
        stall_timeout: Duration::from_secs(1),
        reassembly_timeout: Duration::from_secs(1),
        reassembly_min_rate: 0,
        slots,
        slot_queue_depths: Vec::new(),
        device_id: 0,
        peers: Vec::new(),
    }
}
