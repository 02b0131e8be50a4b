//! The event loop: closed- or open-loop clients sending fragments to a node
//! model under virtual time. Events are ordered by (time, sequence number), so
//! a run is a pure function of its configuration and seed.

use crate::backend::{Backend, Fragment, Outbox, Outcome};
use crate::config::{NodeModel, SimConfig, SimError};
use crate::driven::Driven;
use crate::immediate::Immediate;
use crate::reassembled::Reassembled;
use crate::rng::Rng;
use crate::stats::{function_name, Group, Quantiles, Row, Summary};
use crate::Nanos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    /// The client begins its next (or retried) request.
    Start(usize),
    /// The client sends fragment `index` of its current attempt.
    Frag(usize, u32),
    /// The node model's own wake-up.
    Wake(u64),
}

/// One request attempt.
struct Attempt {
    client: usize,
    function: u8,
    frags: u32,
    size_class: usize,
    /// When the request's first attempt started (for end-to-end latency).
    origin: Nanos,
    start: Nanos,
}

#[derive(Default)]
struct Client {
    /// The attempt whose fragments are being sent.
    sending: Option<u64>,
    /// A start came while fragments were still going out: begin after the last.
    start_pending: bool,
    /// The request being tried (function, frags, size class, origin); kept across retries.
    current: Option<(u8, u32, usize, Nanos)>,
    /// Closed loop: requests completed. Open loop: requests sent.
    count: u64,
}

struct Sim<'a, B> {
    cfg: &'a SimConfig,
    node: B,
    rng: Rng,
    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Reverse<(Nanos, u64, Ev)>>,
    clients: Vec<Client>,
    attempts: Vec<Attempt>,
    mix: Vec<f64>,
    out: Outbox,
    /// all, then one per accelerator type, then one per size class.
    groups: Vec<Group>,
    events: u64,
    /// Time of the last answer: the end of the run (a stall timer may fire later).
    end: Nanos,
}

/// Run one simulation.
pub fn run(cfg: &SimConfig) -> Result<Summary, SimError> {
    cfg.validate()?;
    match &cfg.node {
        NodeModel::Reassembled(p) => Ok(Sim::new(cfg, Reassembled::new(cfg, p)?).run()),
        NodeModel::Immediate => Ok(Sim::new(cfg, Immediate::new(cfg)).run()),
        NodeModel::Driven { pool, handoff_ns } => {
            Ok(Sim::new(cfg, Driven::new(cfg, pool, *handoff_ns)?).run())
        }
    }
}

impl<'a, B: Backend> Sim<'a, B> {
    fn new(cfg: &'a SimConfig, node: B) -> Sim<'a, B> {
        let mut acc = 0.0;
        let mix = cfg
            .mix
            .iter()
            .map(|w| {
                acc += w.max(0.0);
                acc
            })
            .collect();
        let ngroups = 1 + cfg.mix.len() + cfg.sizes.frags.len();
        Sim {
            cfg,
            node,
            rng: Rng::new(cfg.seed),
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            clients: (0..cfg.clients).map(|_| Client::default()).collect(),
            attempts: Vec::new(),
            mix,
            out: Outbox::default(),
            groups: vec![Group::default(); ngroups],
            events: 0,
            end: 0,
        }
    }

    fn at(&mut self, t: Nanos, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    fn run(mut self) -> Summary {
        for c in 0..self.cfg.clients {
            // Clients start spread over one inter-fragment gap, not in lock-step.
            let t = self.cfg.gap.sample(&mut self.rng);
            self.at(t, Ev::Start(c));
        }
        while let Some(Reverse((t, _, ev))) = self.heap.pop() {
            self.now = t;
            self.events += 1;
            match ev {
                Ev::Start(c) => self.start(c),
                Ev::Frag(c, i) => self.send(c, i),
                Ev::Wake(token) => self.node.wake(t, token, &mut self.out),
            }
            self.settle();
        }
        self.summary()
    }

    fn start(&mut self, c: usize) {
        let cfg = self.cfg;
        let client = &mut self.clients[c];
        if client.sending.is_some() {
            client.start_pending = true;
            return;
        }
        let (function, frags, size_class, origin) = match client.current {
            Some(cur) if !cfg.open_loop => cur,
            _ => {
                let f = self.rng.pick(&self.mix) as u8;
                let k = self.rng.pick_size(&cfg.sizes);
                let cur = (f, cfg.sizes.frags[k], k, self.now);
                self.clients[c].current = Some(cur);
                cur
            }
        };
        let id = self.attempts.len() as u64;
        self.attempts.push(Attempt {
            client: c,
            function,
            frags,
            size_class,
            origin,
            start: self.now,
        });
        let client = &mut self.clients[c];
        client.sending = Some(id);
        if cfg.open_loop {
            client.count += 1;
        }
        for g in self.group_ids(id as usize) {
            self.groups[g].attempts += 1;
        }
        self.send(c, 0);
    }

    fn send(&mut self, c: usize, index: u32) {
        let Some(id) = self.clients[c].sending else {
            return;
        };
        let a = &self.attempts[id as usize];
        let frag = Fragment {
            attempt: id,
            client: c,
            function: a.function,
            index,
            frags: a.frags,
        };
        self.node.fragment(self.now, frag, &mut self.out);
        if index + 1 < frag.frags {
            let t = self.now + self.cfg.gap.sample(&mut self.rng);
            self.at(t, Ev::Frag(c, index + 1));
            return;
        }
        let client = &mut self.clients[c];
        client.sending = None;
        if self.cfg.open_loop {
            if client.count < self.cfg.requests {
                let t = self.now + self.cfg.think.sample(&mut self.rng);
                self.at(t, Ev::Start(c));
            }
        } else if std::mem::take(&mut client.start_pending) {
            self.at(self.now, Ev::Start(c));
        }
    }

    /// Act on what the node answered and asked for.
    fn settle(&mut self) {
        for (t, token) in std::mem::take(&mut self.out.wakes) {
            self.at(t, Ev::Wake(token));
        }
        let answers = std::mem::take(&mut self.out.answers);
        for &(id, outcome) in &answers {
            self.answer(id, outcome);
        }
        self.out.answers = answers;
        self.out.answers.clear();
    }

    fn answer(&mut self, id: u64, outcome: Outcome) {
        let Some(a) = self.attempts.get(id as usize) else {
            return;
        };
        let (c, origin, start) = (a.client, a.origin, a.start);
        let now = self.now;
        self.end = now;
        for g in self.group_ids(id as usize) {
            let g = &mut self.groups[g];
            match outcome {
                Outcome::Done { queue_ns } => {
                    g.completed += 1;
                    g.latency.push(now - start);
                    g.e2e.push(now - origin);
                    g.queue.push(queue_ns);
                }
                Outcome::Busy => g.drops += 1,
                Outcome::Other(_) => g.other += 1,
            }
        }
        if self.cfg.open_loop {
            return;
        }
        let client = &mut self.clients[c];
        match outcome {
            Outcome::Done { .. } => {
                client.current = None;
                client.count += 1;
                if client.count < self.cfg.requests {
                    let t = now + self.cfg.think.sample(&mut self.rng);
                    self.at(t, Ev::Start(c));
                }
            }
            Outcome::Busy => {
                let t = now + self.cfg.retry.sample(&mut self.rng);
                self.at(t, Ev::Start(c));
            }
            // Not retried: the request is given up.
            Outcome::Other(_) => {
                client.current = None;
                client.count += 1;
                if client.count < self.cfg.requests {
                    self.at(now, Ev::Start(c));
                }
            }
        }
    }

    fn group_ids(&self, id: usize) -> [usize; 3] {
        let a = &self.attempts[id];
        let nf = self.cfg.mix.len();
        [0, 1 + a.function as usize, 1 + nf + a.size_class]
    }

    fn summary(mut self) -> Summary {
        let util = self.node.utilization();
        let sim_us = self.end as f64 / 1000.0;
        let nf = self.cfg.mix.len();
        let mut names = vec!["all".to_string()];
        names.extend((0..nf).map(function_name));
        names.extend(self.cfg.sizes.frags.iter().map(|k| format!("size{k}")));
        let total = util
            .iter()
            .fold((0.0, 0.0, 0), |a, u| (a.0 + u.0, a.1 + u.1, a.2 + u.2));
        let rows = names
            .into_iter()
            .zip(self.groups.iter_mut())
            .enumerate()
            .map(|(i, (group, g))| {
                let (busy, held, n) = match i {
                    0 => total,
                    i if i <= nf => util[i - 1],
                    _ => (0.0, 0.0, 0),
                };
                let e2e = Quantiles::of(&mut g.e2e);
                Row {
                    group,
                    attempts: g.attempts,
                    drops: g.drops,
                    other: g.other,
                    completed: g.completed,
                    latency: Quantiles::of(&mut g.latency),
                    e2e_mean_us: e2e.mean,
                    queue: Quantiles::of(&mut g.queue),
                    util_busy: if n > 0 && sim_us > 0.0 {
                        busy / (n as f64 * sim_us)
                    } else {
                        0.0
                    },
                    util_held: if held > 0.0 { busy / held } else { 0.0 },
                }
            })
            .collect();
        let completed = self.groups[0].completed;
        Summary {
            seed: self.cfg.seed,
            rows,
            sim_ns: self.end,
            events: self.events,
            throughput_rps: if self.end > 0 {
                completed as f64 / (self.end as f64 / 1e9)
            } else {
                0.0
            },
        }
    }
}

impl Rng {
    fn pick_size(&mut self, sizes: &crate::spec::SizeDist) -> usize {
        let k = sizes.sample(self);
        sizes.frags.iter().position(|&f| f == k).unwrap_or(0)
    }
}
