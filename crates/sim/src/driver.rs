//! The event loop: closed- or open-loop clients sending fragments to a node
//! model under virtual time. Events are ordered by (time, sequence number), so
//! a run is a pure function of its configuration and seed.

use crate::backend::{Backend, Fragment, Outbox, Outcome};
use crate::config::{NodeModel, OnRefusal, SimConfig, SimError};
use crate::driven::Driven;
use crate::immediate::Immediate;
use crate::reassembled::Reassembled;
use crate::rng::Rng;
use crate::stats::{function_name, Group, Quantiles, Row, Summary};
use crate::Nanos;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Debug, Clone, Copy)]
enum Ev {
    /// The client begins its next (or retried) request.
    Start(usize),
    /// The client sends fragment `index` of attempt `id` (skipped if that
    /// attempt was aborted meanwhile).
    Frag(usize, u64, u32),
    /// The node model's own wake-up.
    Wake(u64),
}

/// An event in the heap, ordered by (time, sequence number) packed into one
/// integer: one comparison per heap step.
struct Timed {
    key: u128,
    ev: Ev,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Timed) -> bool {
        self.key == other.key
    }
}
impl Eq for Timed {}
impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Timed) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timed {
    fn cmp(&self, other: &Timed) -> std::cmp::Ordering {
        self.key.cmp(&other.key)
    }
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
    /// Connections this client has reset (`--on-refusal abort`).
    resets: u64,
    /// Draws this client's (function, size) sequence.
    workload: Option<Rng>,
}

struct Sim<'a, B> {
    cfg: &'a SimConfig,
    node: B,
    rng: Rng,
    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Reverse<Timed>>,
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
        let (nf, ns) = (cfg.mix.len(), cfg.sizes.frags.len());
        let ngroups = 1 + nf + ns + nf * ns;
        let wseed = cfg.workload_seed.unwrap_or(cfg.seed);
        Sim {
            cfg,
            node,
            rng: Rng::new(cfg.seed),
            now: 0,
            seq: 0,
            heap: BinaryHeap::new(),
            // One workload stream per client, so that its requests do not
            // depend on how the clients' timings interleave.
            clients: (0..cfg.clients)
                .map(|c| Client {
                    workload: Some(Rng::new(
                        wseed ^ (c as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F),
                    )),
                    ..Client::default()
                })
                .collect(),
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
        self.heap.push(Reverse(Timed {
            key: (u128::from(t) << 64) | u128::from(self.seq),
            ev,
        }));
    }

    fn run(mut self) -> Summary {
        for c in 0..self.cfg.clients {
            // Clients start spread over one inter-fragment gap, not in lock-step
            // (unless asked to start together).
            let t = if self.cfg.start_together {
                0
            } else {
                self.cfg.gap.sample(&mut self.rng)
            };
            self.at(t, Ev::Start(c));
        }
        while let Some(Reverse(Timed { key, ev })) = self.heap.pop() {
            let t = (key >> 64) as Nanos;
            self.now = t;
            self.events += 1;
            match ev {
                Ev::Start(c) => self.start(c),
                Ev::Frag(c, id, i) => {
                    if self.clients[c].sending == Some(id) {
                        self.send(c, i);
                    }
                }
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
                let mut w = self.clients[c]
                    .workload
                    .take()
                    .expect("client has a workload");
                let f = w.pick(&self.mix) as u8;
                let k = w.pick_size(&cfg.sizes);
                self.clients[c].workload = Some(w);
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
            conn: conn_id(c, self.clients[c].resets),
            function: a.function,
            index,
            frags: a.frags,
        };
        self.node.fragment(self.now, frag, &mut self.out);
        if index + 1 < frag.frags {
            let t = self.now + self.cfg.gap.sample(&mut self.rng);
            self.at(t, Ev::Frag(c, id, index + 1));
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
        loop {
            let mut wakes = std::mem::take(&mut self.out.wakes);
            for &(t, token) in &wakes {
                self.at(t, Ev::Wake(token));
            }
            wakes.clear();
            self.out.wakes = wakes;
            if self.out.answers.is_empty() {
                return;
            }
            // Buffers are reused: this runs after every event.
            let mut batch = std::mem::take(&mut self.out.answers);
            for &(id, outcome) in &batch {
                self.answer(id, outcome);
            }
            batch.clear();
            // Handling an answer may reset a connection, which may answer more.
            let fresh = std::mem::replace(&mut self.out.answers, batch);
            self.out.answers.extend(fresh);
        }
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
            if outcome == Outcome::Busy {
                self.abort_if_sending(c, id);
            }
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
                self.abort_if_sending(c, id);
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

    /// `--on-refusal abort`: a client still sending the refused attempt stops
    /// and resets its connection (the next attempt goes on a new one).
    fn abort_if_sending(&mut self, c: usize, id: u64) {
        if self.cfg.on_refusal != OnRefusal::Abort || self.clients[c].sending != Some(id) {
            return;
        }
        let client = &mut self.clients[c];
        client.sending = None;
        let conn = conn_id(c, client.resets);
        client.resets += 1;
        let pending = std::mem::take(&mut client.start_pending);
        self.node.reset(self.now, conn, &mut self.out);
        if pending {
            self.at(self.now, Ev::Start(c));
        }
    }

    fn group_ids(&self, id: usize) -> [usize; 4] {
        let a = &self.attempts[id];
        let (nf, ns) = (self.cfg.mix.len(), self.cfg.sizes.frags.len());
        let f = a.function as usize;
        [
            0,
            1 + f,
            1 + nf + a.size_class,
            1 + nf + ns + f * ns + a.size_class,
        ]
    }

    fn summary(mut self) -> Summary {
        let util = self.node.utilization();
        let sim_us = self.end as f64 / 1000.0;
        let nf = self.cfg.mix.len();
        let mut names = vec!["all".to_string()];
        names.extend((0..nf).map(function_name));
        names.extend(self.cfg.sizes.frags.iter().map(|k| format!("size{k}")));
        for f in 0..nf {
            for k in &self.cfg.sizes.frags {
                names.push(format!("{}/size{k}", function_name(f)));
            }
        }
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

/// The connection id of client `c` after `resets` resets.
fn conn_id(c: usize, resets: u64) -> u64 {
    (resets << 32) | c as u64
}
