//! Fig. 4's baseline, which the node never ships: each fragment goes straight
//! to an accelerator instance. The instance is held from a request's first
//! fragment until it has processed the last, idling while fragments are in
//! flight; a request finding every instance of its type held is refused.

use crate::backend::{Backend, Fragment, Outbox, Outcome};
use crate::config::SimConfig;
use crate::Nanos;

struct Instance {
    function: u8,
    /// The attempt holding this instance.
    holder: Option<u64>,
    held_since: Nanos,
    /// When the fragments fed so far are processed.
    free_at: Nanos,
    busy_ns: u64,
    held_ns: u64,
}

pub struct Immediate {
    instances: Vec<Instance>,
    exec_ns_per_frag: Vec<f64>,
    overhead_ns: f64,
    /// The instance each client's current attempt holds (None: refused).
    feeding: Vec<Option<usize>>,
    next: Vec<usize>,
}

impl Immediate {
    pub fn new(cfg: &SimConfig) -> Immediate {
        let instances = cfg
            .instances
            .iter()
            .enumerate()
            .flat_map(|(f, &n)| std::iter::repeat_n(f as u8, n))
            .map(|function| Instance {
                function,
                holder: None,
                held_since: 0,
                free_at: 0,
                busy_ns: 0,
                held_ns: 0,
            })
            .collect();
        Immediate {
            instances,
            exec_ns_per_frag: cfg.exec_us.iter().map(|us| us * 1000.0).collect(),
            overhead_ns: cfg.overhead_us * 1000.0,
            feeding: vec![None; cfg.clients],
            next: vec![0; cfg.exec_us.len()],
        }
    }
}

impl Backend for Immediate {
    fn fragment(&mut self, now: Nanos, frag: Fragment, out: &mut Outbox) {
        let f = frag.function as usize;
        if frag.index == 0 {
            // Round robin over the free instances of this type.
            let n = self.instances.len();
            let start = self.next[f];
            let free = (0..n).map(|k| (start + k) % n).find(|&i| {
                self.instances[i].function == frag.function && self.instances[i].holder.is_none()
            });
            self.feeding[frag.client] = free;
            let Some(i) = free else {
                out.answers.push((frag.attempt, Outcome::Busy));
                return;
            };
            self.next[f] = (i + 1) % n;
            let inst = &mut self.instances[i];
            inst.holder = Some(frag.attempt);
            inst.held_since = now;
            inst.free_at = now + self.overhead_ns.round() as Nanos;
            inst.busy_ns += self.overhead_ns.round() as Nanos;
        }
        let Some(i) = self.feeding[frag.client] else {
            return; // the rest of a refused request is discarded
        };
        let inst = &mut self.instances[i];
        let t = self.exec_ns_per_frag[f].round() as Nanos;
        inst.free_at = inst.free_at.max(now) + t;
        inst.busy_ns += t;
        if frag.index + 1 == frag.frags {
            out.wakes.push((inst.free_at, i as u64));
        }
    }

    fn wake(&mut self, now: Nanos, token: u64, out: &mut Outbox) {
        let inst = &mut self.instances[token as usize];
        if let Some(attempt) = inst.holder.take() {
            inst.held_ns += now - inst.held_since;
            out.answers.push((attempt, Outcome::Done { queue_ns: 0 }));
        }
    }

    /// A refused request held nothing here: its later fragments simply never come.
    fn reset(&mut self, _now: Nanos, _conn: u64, _out: &mut Outbox) {}

    fn utilization(&self) -> Vec<(f64, f64, usize)> {
        let mut u = vec![(0.0, 0.0, 0usize); self.exec_ns_per_frag.len()];
        for inst in &self.instances {
            let e = &mut u[inst.function as usize];
            e.0 += inst.busy_ns as f64 / 1000.0;
            e.1 += inst.held_ns as f64 / 1000.0;
            e.2 += 1;
        }
        u
    }
}
