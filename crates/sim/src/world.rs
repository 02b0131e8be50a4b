//! A virtual world around the node's own [`Driver`]: virtual sockets (byte
//! streams cut into seeded random segments, with a one-way link latency),
//! virtual slot workers (a hand-off latency, then a modelled execution time)
//! and a virtual clock. The driver is the one the node ships, so a node bug —
//! an answer lost on close, two answers to one request, a slow client holding
//! the pool — is a seeded, replayable failure here before it is a flaky one on
//! loopback. The shell logic mirrors `crates/node/src/reactor.rs`.

use crate::rng::Rng;
use crate::Nanos;
use offrac_core::{ConnId, EngineConfig, Instant, Job, SlotId};
use offrac_node::{Driver, DriverConfig, DriverError, Io};
use offrac_proto::{FunctionId, ResponseHeader, Status, HEADER_LEN};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// How long a job runs on its slot.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecModel {
    /// Fixed cost per job.
    pub base_ns: Nanos,
    /// Cost per payload KiB.
    pub per_kib_ns: Nanos,
    /// Functions (by id) that take this long instead, whatever their size.
    pub fixed: Vec<(u8, Nanos)>,
    /// Run the real built-in accelerator for the answer's payload (else an
    /// `OK` with an empty payload).
    pub real_results: bool,
    /// The design-study model (OffRAC Appendix B), used instead when set.
    pub per_fragment: Option<FragmentExec>,
}

/// Execution time as the simulator's workloads define it: a time per
/// fragment for each function (by id), plus a fixed overhead per job.
#[derive(Debug, Clone, PartialEq)]
pub struct FragmentExec {
    pub frag_bytes: usize,
    pub ns_per_frag: Vec<f64>,
    pub overhead_ns: f64,
}

impl Default for ExecModel {
    fn default() -> Self {
        ExecModel {
            base_ns: 2_000,
            per_kib_ns: 500,
            fixed: Vec::new(),
            real_results: true,
            per_fragment: None,
        }
    }
}

impl ExecModel {
    fn time(&self, job: &Job) -> Nanos {
        let f = job.function();
        if let Some(m) = &self.per_fragment {
            let frags = job.payload.len().div_ceil(m.frag_bytes).max(1) as f64;
            let per = m.ns_per_frag.get(f as usize).copied().unwrap_or(0.0);
            return (per * frags + m.overhead_ns).round() as Nanos;
        }
        if let Some(&(_, t)) = self.fixed.iter().find(|(g, _)| *g == f) {
            return t;
        }
        self.base_ns + self.per_kib_ns * job.payload.len() as u64 / 1024
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct WorldConfig {
    pub engine: EngineConfig,
    pub driver: DriverConfig,
    /// One-way latency of every virtual link.
    pub link_ns: Nanos,
    /// Hand-off from the I/O thread to a slot's worker thread.
    pub handoff_ns: Nanos,
    pub exec: ExecModel,
    /// Bytes one read of the shell takes at most.
    pub read_chunk: usize,
    /// Client writes are cut into segments of 1..=max_segment bytes.
    pub max_segment: usize,
    /// Seeds the segmentation (and nothing else).
    pub seed: u64,
}

impl WorldConfig {
    /// The node's defaults, with every slot as the node would configure it.
    pub fn new(engine: EngineConfig, seed: u64) -> WorldConfig {
        let slots = engine
            .slots
            .iter()
            .map(|&f| offrac_node::SlotConfig {
                function: f,
                inline_max_bytes: FunctionId::from_id(f)
                    .map_or(0, |f| offrac_accel::builtin(f).inline_max_bytes()),
            })
            .collect();
        WorldConfig {
            engine,
            driver: DriverConfig::new(slots),
            link_ns: 5_000,
            handoff_ns: 3_000,
            exec: ExecModel::default(),
            read_chunk: 64 * 1024,
            max_segment: 1500,
            seed,
        }
    }
}

/// One answer as a client received it.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub at: Nanos,
    pub header: ResponseHeader,
    pub payload: Vec<u8>,
}

/// A virtual client connection: what it sent, what it got.
#[derive(Debug, Default)]
pub struct Client {
    conn: Option<ConnId>,
    /// Bytes in flight to the node, delivered in order.
    to_node: Vec<u8>,
    /// The client sent its end of stream.
    eof_sent: bool,
    /// Bytes from the node not yet parsed into answers.
    from_node: Vec<u8>,
    pub answers: Vec<Received>,
    /// The node half-closed (end of stream after the answers) at this time.
    pub eof_at: Option<Nanos>,
    /// The node dropped the connection at this time.
    pub dropped_at: Option<Nanos>,
    /// Whether the client reads its answers (a client that does not lets the
    /// node's output backlog grow).
    pub reading: bool,
    unread: usize,
    /// When the last segment sent reaches the node: a stream stays in order.
    last_arrival: Nanos,
}

#[derive(Debug)]
enum Ev {
    Accept(usize),
    /// A segment reaches the node (`None`: the client's end of stream).
    Segment(usize, Option<Vec<u8>>),
    /// Bytes (`None`: end of stream) reach a client.
    ToClient(usize, Option<Vec<u8>>),
    /// A slot's function returns: slot free, then the answer is written.
    Finish {
        slot: SlotId,
        job: Job,
        started: Nanos,
    },
    Timer,
}

pub struct World {
    pub cfg: WorldConfig,
    driver: Driver,
    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Reverse<(Nanos, u64)>>,
    events: HashMap<u64, Ev>,
    pub clients: Vec<Client>,
    by_conn: HashMap<ConnId, usize>,
    rng: Rng,
    timer_at: Option<Nanos>,
    /// Every answer the node wrote, in order: (client, request id, status).
    pub log: Vec<(usize, u64, Status)>,
    /// When the driver reported it had finished a shutdown.
    pub finished_at: Option<Nanos>,
    /// Per slot: virtual time spent executing.
    pub busy_ns: Vec<Nanos>,
}

impl World {
    pub fn new(cfg: WorldConfig) -> Result<World, DriverError> {
        let driver = Driver::new(cfg.engine.clone(), cfg.driver.clone())?;
        let busy_ns = vec![0; cfg.engine.slots.len()];
        Ok(World {
            busy_ns,
            rng: Rng::new(cfg.seed),
            cfg,
            driver,
            now: 1,
            seq: 0,
            heap: BinaryHeap::new(),
            events: HashMap::new(),
            clients: Vec::new(),
            by_conn: HashMap::new(),
            timer_at: None,
            log: Vec::new(),
            finished_at: None,
        })
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Now, on the core's clock.
    fn instant(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    fn at(&mut self, t: Nanos, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq)));
        self.events.insert(self.seq, ev);
    }

    /// A new client; it is accepted one link latency later.
    pub fn connect(&mut self) -> usize {
        let c = self.clients.len();
        self.clients.push(Client {
            reading: true,
            ..Client::default()
        });
        self.at(self.now + self.cfg.link_ns, Ev::Accept(c));
        c
    }

    /// The client writes `bytes` now; they arrive as seeded random segments.
    pub fn send(&mut self, client: usize, bytes: &[u8]) {
        let mut rest = bytes;
        let mut t = (self.now + self.cfg.link_ns).max(self.clients[client].last_arrival);
        while !rest.is_empty() {
            let n = 1 + (self.rng.next_u64() as usize) % self.cfg.max_segment.max(1);
            let (seg, tail) = rest.split_at(n.min(rest.len()));
            self.at(t, Ev::Segment(client, Some(seg.to_vec())));
            rest = tail;
            t += self.rng.next_u64() % 200;
        }
        self.clients[client].last_arrival = t;
    }

    /// The client sends its end of stream.
    pub fn close(&mut self, client: usize) {
        let t = (self.now + self.cfg.link_ns).max(self.clients[client].last_arrival);
        self.at(t, Ev::Segment(client, None));
    }

    /// The client stops (or resumes) reading its answers.
    pub fn set_reading(&mut self, client: usize, reading: bool) {
        let c = &mut self.clients[client];
        c.reading = reading;
        if reading {
            c.unread = 0;
            if let Some(conn) = c.conn {
                self.driver.handle_backlog(self.instant(), conn, 0);
                // A resumed connection is queued for reading, as the reactor would.
                self.read_turns();
            }
        }
    }

    /// SIGTERM.
    pub fn shutdown(&mut self) {
        self.driver.handle_shutdown(self.instant());
        self.apply();
    }

    /// Run every event up to and including `t`; the clock ends at `t`.
    pub fn run_until(&mut self, t: Nanos) {
        // Calls made between runs (a shutdown, say) may have moved the driver's timer.
        self.arm_timer();
        while let Some(&Reverse((when, seq))) = self.heap.peek() {
            if when > t {
                break;
            }
            self.heap.pop();
            self.now = self.now.max(when);
            if let Some(ev) = self.events.remove(&seq) {
                self.handle(ev);
            }
            self.arm_timer();
            if self.finished_at.is_none() && self.driver.is_finished(self.instant()) {
                self.finished_at = Some(self.now);
            }
        }
        self.now = self.now.max(t);
    }

    /// Run until nothing is left to happen but timers further than `horizon` away.
    pub fn run_for(&mut self, horizon: Nanos) {
        let end = self.now + horizon;
        self.run_until(end);
    }

    /// The time of the next event, if any.
    pub fn next_event(&self) -> Option<Nanos> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    fn arm_timer(&mut self) {
        if let Some(t) = self.driver.poll_timeout().map(Instant::as_nanos) {
            if self.timer_at.is_none_or(|armed| t < armed) {
                self.timer_at = Some(t);
                self.at(t.max(self.now), Ev::Timer);
            }
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::Accept(c) => {
                let conn = self.driver.handle_accept(self.instant());
                self.clients[c].conn = Some(conn);
                self.by_conn.insert(conn, c);
                // Bytes that raced ahead of the accept wait for it.
                if !self.clients[c].to_node.is_empty() || self.clients[c].eof_sent {
                    let eof = self.clients[c].eof_sent;
                    self.driver.handle_readable(self.instant(), conn, eof);
                    self.read_turns();
                }
            }
            Ev::Segment(c, seg) => {
                let client = &mut self.clients[c];
                match seg {
                    Some(bytes) => client.to_node.extend_from_slice(&bytes),
                    None => client.eof_sent = true,
                }
                let eof = client.eof_sent;
                if let Some(conn) = client.conn {
                    self.driver.handle_readable(self.instant(), conn, eof);
                    self.read_turns();
                }
            }
            Ev::ToClient(c, bytes) => self.deliver(c, bytes),
            Ev::Finish { slot, job, started } => self.finish(slot, job, started),
            Ev::Timer => {
                self.timer_at = None;
                self.driver.handle_timeout(self.instant());
                self.apply();
            }
        }
        self.apply();
    }

    /// The reactor's read turns, over the virtual sockets.
    fn read_turns(&mut self) {
        self.apply();
        let turns = self.driver.pending_reads();
        for _ in 0..turns {
            let Some((conn, budget)) = self.driver.poll_read() else {
                break;
            };
            let Some(&c) = self.by_conn.get(&conn) else {
                continue;
            };
            let mut more = true;
            for _ in 0..budget {
                let client = &mut self.clients[c];
                if client.to_node.is_empty() {
                    more = false;
                    if client.eof_sent {
                        self.driver.handle_hangup(self.instant(), conn);
                    }
                    break;
                }
                let n = client.to_node.len().min(self.cfg.read_chunk);
                let chunk: Vec<u8> = client.to_node.drain(..n).collect();
                self.driver.handle_bytes(self.instant(), conn, &chunk);
                self.apply();
                if !self.driver.wants_read(conn) {
                    more = false;
                    break;
                }
            }
            self.driver.handle_read_turn_end(self.instant(), conn, more);
            self.apply();
        }
    }

    fn apply(&mut self) {
        while let Some(io) = self.driver.poll_io() {
            match io {
                Io::Run { slot, job, inline } => {
                    let started = if inline {
                        self.now
                    } else {
                        self.now + self.cfg.handoff_ns
                    };
                    let exec = self.cfg.exec.time(&job);
                    self.busy_ns[slot] += exec;
                    let done = started + exec;
                    self.at(done, Ev::Finish { slot, job, started });
                }
                Io::Send {
                    conn,
                    header,
                    payload,
                } => self.write(conn, &header, &payload),
                Io::ShutWrite { conn } => {
                    if let Some(&c) = self.by_conn.get(&conn) {
                        self.at(self.now + self.cfg.link_ns, Ev::ToClient(c, None));
                    }
                }
                Io::Drop { conn } => {
                    if let Some(c) = self.by_conn.remove(&conn) {
                        let client = &mut self.clients[c];
                        client.dropped_at.get_or_insert(self.now);
                        client.conn = None;
                    }
                }
                Io::StopAccepting => {}
            }
        }
    }

    /// A slot's function returned: hand a chain on to its next hop, or free
    /// the slot, then write the answer.
    fn finish(&mut self, slot: SlotId, mut job: Job, started: Nanos) {
        let (status, payload) = self.result(&job);
        let queue_ns = Instant::from_nanos(started)
            .saturating_since(job.complete_at)
            .as_nanos() as u64;
        let exec_ns = self.now - started;
        if status == Status::Ok && !job.is_last_hop() {
            job.advance(payload, self.instant(), queue_ns, exec_ns);
            self.driver.handle_hop_done(self.instant(), slot, job);
            self.apply();
            return;
        }
        self.driver.handle_slot_free(self.instant(), slot);
        self.apply();
        let conn = job.conn;
        let mut h = ResponseHeader::answer(
            &job.header,
            status,
            self.cfg.engine.device_id,
            payload.len() as u32,
        );
        h.reassembly_ns = job.reassembly_ns();
        h.queue_ns = job.earlier_queue_ns + queue_ns;
        h.exec_ns = job.earlier_exec_ns + exec_ns;
        self.write(conn, &h, &payload);
        self.driver.handle_answered(self.instant(), conn);
        self.apply();
    }

    fn result(&self, job: &Job) -> (Status, Vec<u8>) {
        if !self.cfg.exec.real_results {
            // Timing only: a chain's hops pass their input on unchanged.
            let next = if job.is_last_hop() {
                Vec::new()
            } else {
                job.payload.clone()
            };
            return (Status::Ok, next);
        }
        let Some(f) = FunctionId::from_id(job.function()) else {
            return (Status::Internal, b"no such function".to_vec());
        };
        let mut out = Vec::new();
        match offrac_accel::builtin(f).run(job.header.current_hop().param, &job.payload, &mut out) {
            Ok(()) => (Status::Ok, out),
            Err(e) => (e.status(), e.message().as_bytes().to_vec()),
        }
    }

    fn write(&mut self, conn: ConnId, h: &ResponseHeader, payload: &[u8]) {
        let Some(&c) = self.by_conn.get(&conn) else {
            return; // gone: the answer is dropped with the connection
        };
        self.log.push((c, h.request_id, h.status));
        let mut bytes = h.encode().to_vec();
        bytes.extend_from_slice(payload);
        let client = &mut self.clients[c];
        if !client.reading {
            client.unread += bytes.len();
            let unread = client.unread;
            self.driver.handle_backlog(self.instant(), conn, unread);
        }
        self.at(self.now + self.cfg.link_ns, Ev::ToClient(c, Some(bytes)));
    }

    fn deliver(&mut self, c: usize, bytes: Option<Vec<u8>>) {
        let now = self.now;
        let client = &mut self.clients[c];
        match bytes {
            None => {
                client.eof_at.get_or_insert(now);
            }
            Some(b) => {
                client.from_node.extend_from_slice(&b);
                while client.from_node.len() >= HEADER_LEN {
                    let mut hb = [0u8; HEADER_LEN];
                    hb.copy_from_slice(&client.from_node[..HEADER_LEN]);
                    let h = ResponseHeader::decode(&hb).expect("the node writes valid headers");
                    let end = HEADER_LEN + h.payload_len as usize;
                    if client.from_node.len() < end {
                        break;
                    }
                    let payload = client.from_node[HEADER_LEN..end].to_vec();
                    client.from_node.drain(..end);
                    client.answers.push(Received {
                        at: now,
                        header: h,
                        payload,
                    });
                }
            }
        }
    }

    /// Take the answers `client` has received so far (long runs keep memory flat).
    pub fn drain_answers(&mut self, client: usize) -> Vec<Received> {
        std::mem::take(&mut self.clients[client].answers)
    }

    /// Forget the answer log (long runs keep memory flat).
    pub fn clear_log(&mut self) {
        self.log.clear();
    }

    /// The answers `client` received for `request_id`.
    pub fn answers_to(&self, client: usize, request_id: u64) -> Vec<&Received> {
        self.clients[client]
            .answers
            .iter()
            .filter(|r| r.header.request_id == request_id)
            .collect()
    }
}
