//! The third node model: the node's own driver (`offrac_node::Driver`) in the
//! virtual [`World`], fed by the simulator's clients. Beside the core-only
//! model it adds what the node decides around the engine — read turns,
//! lingering close, the hand-off to a slot's worker thread (a latency the
//! core-only model does not have) — so a design study can see them.

use crate::backend::{Backend, Fragment, Outbox, Outcome};
use crate::config::{PoolModel, SimConfig, SimError};
use crate::reassembled::engine_config;
use crate::world::{FragmentExec, World, WorldConfig};
use crate::Nanos;
use offrac_node::SlotConfig;
use offrac_proto::{RequestHeader, Status, HEADER_LEN};
use std::collections::HashMap;

pub struct Driven {
    world: World,
    frag_bytes: usize,
    scratch: Vec<u8>,
    /// A wake-up is queued with the simulator for this time.
    armed: Option<Nanos>,
    functions: usize,
    /// The world's client for each simulator connection.
    clients: HashMap<u64, usize>,
}

impl Driven {
    pub fn new(cfg: &SimConfig, pool: &PoolModel, handoff_ns: Nanos) -> Result<Driven, SimError> {
        let engine = engine_config(cfg, pool);
        let mut wc = WorldConfig::new(engine, cfg.seed);
        // The simulator's fragments are its segments; no network latency, as
        // in the core-only model, so the two differ only by the node's driver.
        wc.link_ns = 0;
        wc.max_segment = usize::MAX;
        wc.handoff_ns = handoff_ns;
        wc.driver.slots = wc
            .engine
            .slots
            .iter()
            .map(|&f| SlotConfig {
                function: f,
                inline_max_bytes: 0,
            })
            .collect();
        wc.exec.real_results = false;
        wc.exec.per_fragment = Some(FragmentExec {
            frag_bytes: cfg.frag_bytes as usize,
            ns_per_frag: cfg.exec_us.iter().map(|us| us * 1000.0).collect(),
            overhead_ns: cfg.overhead_us * 1000.0,
        });
        if pool.per_function {
            return Err(SimError::Unsupported(
                "per-function buffers with the driver model",
            ));
        }
        let world = World::new(wc).map_err(|e| SimError::Driver(e.to_string()))?;
        Ok(Driven {
            clients: HashMap::new(),
            world,
            frag_bytes: cfg.frag_bytes as usize,
            scratch: vec![0; HEADER_LEN + cfg.frag_bytes as usize],
            armed: None,
            functions: cfg.exec_us.len(),
        })
    }

    fn settle(&mut self, now: Nanos, out: &mut Outbox) {
        self.world.run_until(now);
        for c in 0..self.world.clients.len() {
            for r in self.world.drain_answers(c) {
                let outcome = match r.header.status {
                    Status::Ok => Outcome::Done {
                        queue_ns: r.header.queue_ns,
                    },
                    Status::Busy => Outcome::Busy,
                    s => Outcome::Other(s.code()),
                };
                out.answers.push((r.header.request_id, outcome));
            }
        }
        self.world.clear_log();
        if let Some(t) = self.world.next_event() {
            if self.armed.is_none_or(|a| t < a || a <= now) {
                self.armed = Some(t);
                out.wakes.push((t, 0));
            }
        }
    }
}

impl Backend for Driven {
    fn fragment(&mut self, now: Nanos, frag: Fragment, out: &mut Outbox) {
        self.world.run_until(now);
        let world = &mut self.world;
        let client = *self
            .clients
            .entry(frag.conn)
            .or_insert_with(|| world.connect());
        let fb = self.frag_bytes;
        if frag.index == 0 {
            let len = (frag.frags as usize * fb) as u32;
            let h = RequestHeader::single(frag.attempt, frag.function, 0, len);
            self.scratch[..HEADER_LEN].copy_from_slice(&h.encode());
            self.world.send(client, &self.scratch);
        } else {
            let payload = self.scratch[HEADER_LEN..].to_vec();
            self.world.send(client, &payload);
        }
        self.settle(now, out);
    }

    fn wake(&mut self, now: Nanos, _token: u64, out: &mut Outbox) {
        if self.armed.is_some_and(|a| a <= now) {
            self.armed = None;
        }
        self.settle(now, out);
    }

    fn reset(&mut self, now: Nanos, conn: u64, out: &mut Outbox) {
        if let Some(client) = self.clients.remove(&conn) {
            self.world.run_until(now);
            self.world.close(client);
        }
        self.settle(now, out);
    }

    fn utilization(&self) -> Vec<(f64, f64, usize)> {
        let mut u = vec![(0.0, 0.0, 0usize); self.functions];
        let slots = &self.world.cfg.engine.slots;
        for (slot, &f) in slots.iter().enumerate() {
            let busy = self.world.node(0).busy_ns[slot] as f64 / 1000.0;
            let e = &mut u[f as usize];
            e.0 += busy;
            e.1 += busy;
            e.2 += 1;
        }
        u
    }
}
