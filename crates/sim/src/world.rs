//! A virtual world around the node's own [`Driver`]: virtual sockets (byte
//! streams cut into seeded random segments, with a one-way link latency),
//! virtual slot workers (a hand-off latency, then a modelled execution time)
//! and a virtual clock. The driver is the one the node ships, so a node bug —
//! an answer lost on close, two answers to one request, a slow client holding
//! the pool — is a seeded, replayable failure here before it is a flaky one on
//! loopback. The shell logic mirrors `crates/node/src/reactor.rs`.

use crate::rng::Rng;
use crate::Nanos;
use offrac_core::{ConnId, EngineConfig, Instant, Job, Route, SlotId};
use offrac_node::{Driver, DriverConfig, DriverError, Io, LinkId};
use offrac_proto::{FunctionId, ResponseHeader, Status, HEADER_LEN};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Virtual time 0 as a wall clock (control envelopes carry wall-clock ms).
const SIM_EPOCH_MS: u64 = 1_764_000_000_000;

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
    /// Serialization time per byte on a link (0: infinite bandwidth; 0.08 is 100 Gb/s).
    pub ns_per_byte: f64,
    /// Probability that a segment is lost; TCP then delivers it (and, in
    /// order, everything behind it) one retransmission timeout later.
    pub loss: f64,
    pub rto_ns: Nanos,
    /// Hand-off from the I/O thread to a slot's worker thread.
    pub handoff_ns: Nanos,
    /// Time the node's I/O thread takes per write (a send on a core it
    /// shares with the other hosts): the writes of one turn leave one after
    /// another, so their order is when each reaches its peer (0: all at once).
    pub write_ns: Nanos,
    /// A swap's install step (instantiate and warm the new function): the
    /// node measures ~1 µs for a built-in and ~12 µs for a WebAssembly
    /// module (`docs/control.md`); OffRAC's Table 6 is 1.83–5.41 ms.
    pub install_ns: Nanos,
    pub exec: ExecModel,
    /// Bytes one read of the shell takes at most.
    pub read_chunk: usize,
    /// Client writes are cut into segments of 1..=max_segment bytes.
    pub max_segment: usize,
    /// Seeds the segmentation (and nothing else).
    pub seed: u64,
    /// Tenants' HMAC keys: the simulated control plane verifies hellos
    /// with them ([`World::hello_envelope`] signs one on the virtual clock).
    pub tenant_keys: HashMap<u16, Vec<u8>>,
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
            ns_per_byte: 0.0,
            loss: 0.0,
            rto_ns: 200_000_000,
            handoff_ns: 3_000,
            write_ns: 0,
            install_ns: 12_000,
            exec: ExecModel::default(),
            read_chunk: 64 * 1024,
            max_segment: 1500,
            seed,
            tenant_keys: HashMap::new(),
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

/// A virtual client connection: what it sent, what it got. A node's link
/// to a peer is a client of that peer whose answers go to the link's node.
#[derive(Debug, Default)]
pub struct Client {
    /// The node it is connected to.
    pub node: usize,
    conn: Option<ConnId>,
    /// `(node, link)`: this connection is that node's link to a peer.
    link: Option<(usize, LinkId)>,
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
    /// The most answer bytes the node had written that the client had not
    /// read, at any time: the node's output backlog (bounded by its
    /// `pause_reading_above` and what it had already admitted).
    pub peak_unread: usize,
    /// When the last segment sent reaches the node: a stream stays in order.
    last_arrival: Nanos,
    /// When the last bytes from the node reach the client (same reason).
    last_delivery: Nanos,
}

#[derive(Debug)]
enum Ev {
    Accept(usize),
    /// A segment reaches the client's node (`None`: the client's end of stream).
    Segment(usize, Option<Vec<u8>>),
    /// Bytes (`None`: end of stream) reach a client.
    ToClient(usize, Option<Vec<u8>>),
    /// A slot's function returns: slot free, then the answer is written.
    Finish {
        node: usize,
        slot: SlotId,
        job: Box<Job>,
        started: Nanos,
        route: Route,
    },
    Timer(usize),
    /// A swap's install step finished on (node, slot).
    Installed(usize, SlotId),
    /// A link's connect completed (`true`) or failed.
    LinkConnected(usize, LinkId, bool),
}

/// One node of the world: the node's own driver and its slots.
pub struct SimNode {
    pub cfg: WorldConfig,
    driver: Driver,
    /// Connection -> client.
    by_conn: HashMap<ConnId, usize>,
    timer_at: Option<Nanos>,
    /// Killed: it neither reads, runs nor answers, and refuses connects.
    down: bool,
    /// When the driver reported it had finished a shutdown.
    pub finished_at: Option<Nanos>,
    /// Per slot: virtual time spent executing.
    pub busy_ns: Vec<Nanos>,
    /// Per function: (virtual execution time, runs), published to the
    /// driver as its `T_acc` estimates as the node's workers would.
    acc: std::collections::BTreeMap<u8, (f64, u64)>,
    /// Verifies control envelopes (hellos) on the virtual wall clock.
    auth: offrac_control::Authenticator,
    /// Per slot: runs in flight, and whether a swap's install is under way.
    /// A swap must never install while its slot runs, nor a job be run by
    /// a slot being installed (the job would meet the new function): checked.
    running: Vec<u32>,
    installing: Vec<bool>,
    /// Until when the I/O thread is busy with the writes it issued (`write_ns`).
    io_free: Nanos,
    /// Writes the I/O thread issued (answers to clients, messages on links).
    writes: u64,
}

impl SimNode {
    fn new(cfg: WorldConfig) -> Result<SimNode, DriverError> {
        Ok(SimNode {
            driver: Driver::new(cfg.engine.clone(), cfg.driver.clone())?,
            busy_ns: vec![0; cfg.engine.slots.len()],
            running: vec![0; cfg.engine.slots.len()],
            installing: vec![false; cfg.engine.slots.len()],
            acc: Default::default(),
            auth: offrac_control::Authenticator::new(cfg.tenant_keys.clone(), 30_000),
            cfg,
            by_conn: HashMap::new(),
            timer_at: None,
            down: false,
            finished_at: None,
            io_free: 0,
            writes: 0,
        })
    }

    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// Writes this node's I/O thread issued so far (answers and link messages).
    pub fn writes(&self) -> u64 {
        self.writes
    }
}

/// The address of node `i` in a device table of the world.
pub fn node_addr(i: usize) -> String {
    format!("sim:{i}")
}

pub struct World {
    /// The world's shared knobs (latencies, segmentation, seed): node 0's.
    pub cfg: WorldConfig,
    nodes: Vec<SimNode>,
    now: Nanos,
    seq: u64,
    heap: BinaryHeap<Reverse<(Nanos, u64)>>,
    events: HashMap<u64, Ev>,
    pub clients: Vec<Client>,
    /// (node, link) -> the client that is that link.
    link_clients: HashMap<(usize, LinkId), usize>,
    rng: Rng,
    /// Every answer a node wrote, in order: (client, request id, status).
    pub log: Vec<(usize, u64, Status)>,
}

impl World {
    /// One node.
    pub fn new(cfg: WorldConfig) -> Result<World, DriverError> {
        World::cluster(vec![cfg])
    }

    /// Several nodes; node `i` is reached at [`node_addr`]`(i)` by the
    /// device tables. Latencies, segmentation and the seed are node 0's.
    pub fn cluster(cfgs: Vec<WorldConfig>) -> Result<World, DriverError> {
        let nodes = cfgs
            .into_iter()
            .map(SimNode::new)
            .collect::<Result<Vec<_>, _>>()?;
        let cfg = nodes[0].cfg.clone();
        let mut w = World {
            rng: Rng::new(cfg.seed),
            cfg,
            nodes,
            now: 1,
            seq: 0,
            heap: BinaryHeap::new(),
            events: HashMap::new(),
            clients: Vec::new(),
            link_clients: HashMap::new(),
            log: Vec::new(),
        };
        for n in 0..w.nodes.len() {
            w.apply(n); // the links' first connects
        }
        Ok(w)
    }

    pub fn now(&self) -> Nanos {
        self.now
    }

    /// Now, on the core's clock.
    fn instant(&self) -> Instant {
        Instant::from_nanos(self.now)
    }

    /// Node 0's driver.
    pub fn driver(&self) -> &Driver {
        &self.nodes[0].driver
    }

    pub fn node(&self, i: usize) -> &SimNode {
        &self.nodes[i]
    }

    fn at(&mut self, t: Nanos, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq)));
        self.events.insert(self.seq, ev);
    }

    /// A new client of node 0; it is accepted one link latency later.
    pub fn connect(&mut self) -> usize {
        self.connect_to(0)
    }

    /// A new client of `node`; it is accepted one link latency later.
    pub fn connect_to(&mut self, node: usize) -> usize {
        let c = self.clients.len();
        self.clients.push(Client {
            node,
            reading: true,
            ..Client::default()
        });
        self.at(self.now + self.cfg.link_ns, Ev::Accept(c));
        c
    }

    /// The client writes `bytes` now; they arrive as seeded random segments.
    pub fn send(&mut self, client: usize, bytes: &[u8]) {
        self.send_from(self.now, client, bytes);
    }

    /// `bytes` leave at `from` (now, or later when the node's writes queue).
    fn send_from(&mut self, from: Nanos, client: usize, bytes: &[u8]) {
        let mut rest = bytes;
        let mut t = (from + self.cfg.link_ns).max(self.clients[client].last_arrival);
        while !rest.is_empty() {
            let n = 1 + (self.rng.next_u64() as usize) % self.cfg.max_segment.max(1);
            let (seg, tail) = rest.split_at(n.min(rest.len()));
            t += self.wire_delay(seg.len());
            self.at(t, Ev::Segment(client, Some(seg.to_vec())));
            rest = tail;
            t += self.rng.next_u64() % 200;
        }
        self.clients[client].last_arrival = t;
    }

    /// Time a segment of `len` bytes adds on the wire: its serialization, and
    /// a retransmission timeout if it is lost.
    fn wire_delay(&mut self, len: usize) -> Nanos {
        let mut d = (len as f64 * self.cfg.ns_per_byte).round() as Nanos;
        if self.cfg.loss > 0.0 {
            let u = (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            if u < self.cfg.loss {
                d += self.cfg.rto_ns;
            }
        }
        d
    }

    /// When bytes (or an end of stream) written by a node now reach client
    /// `c`, in order after what was written before.
    fn delivery_time(&mut self, c: usize, len: usize) -> Nanos {
        self.delivery_time_from(self.now, c, len)
    }

    fn delivery_time_from(&mut self, from: Nanos, c: usize, len: usize) -> Nanos {
        let t = (from + self.cfg.link_ns).max(self.clients[c].last_delivery) + self.wire_delay(len);
        self.clients[c].last_delivery = t;
        t
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
        let node = c.node;
        if reading {
            c.unread = 0;
            if let Some(conn) = c.conn {
                let now = self.instant();
                self.nodes[node].driver.handle_backlog(now, conn, 0);
                // A resumed connection is queued for reading, as the reactor would.
                self.read_turns(node);
            }
        }
    }

    /// SIGTERM to node 0.
    pub fn shutdown(&mut self) {
        let now = self.instant();
        self.nodes[0].driver.handle_shutdown(now);
        self.apply(0);
    }

    /// `kill -9` of `node`: its connections break (their peers see a reset
    /// one link latency later), it runs and answers nothing more, and
    /// connects to it fail until [`World::restart`].
    pub fn kill(&mut self, node: usize) {
        self.nodes[node].down = true;
        self.nodes[node].by_conn.clear();
        for c in 0..self.clients.len() {
            if self.clients[c].node == node && self.clients[c].conn.take().is_some() {
                let t = self.delivery_time(c, 0);
                self.at(t, Ev::ToClient(c, None));
                self.clients[c].dropped_at.get_or_insert(t);
            }
            // Its own links to peers break too: each peer sees the hang-up,
            // and what it still writes there never reaches the restarted node.
            if let Some((n, link)) = self.clients[c].link {
                if n == node {
                    self.link_clients.remove(&(n, link));
                    self.clients[c].link = None;
                    self.close(c);
                }
            }
        }
    }

    /// `node`'s device table changes to `peers` (as a cluster store would tell it).
    pub fn set_peers(&mut self, node: usize, peers: Vec<offrac_node::PeerConfig>) {
        let now = self.instant();
        self.nodes[node].driver.handle_peers(now, peers);
        self.apply(node);
    }

    /// `node` was killed and not restarted.
    pub fn is_down(&self, node: usize) -> bool {
        self.nodes[node].down
    }

    /// Start a killed node afresh (a new driver, nothing remembered).
    pub fn restart(&mut self, node: usize) -> Result<(), DriverError> {
        let cfg = self.nodes[node].cfg.clone();
        self.nodes[node] = SimNode::new(cfg)?;
        self.apply(node);
        Ok(())
    }

    /// Run every event up to and including `t`; the clock ends at `t`.
    pub fn run_until(&mut self, t: Nanos) {
        // Calls made between runs (a shutdown, say) may have moved the driver's timer.
        self.arm_timers();
        while let Some(&Reverse((when, seq))) = self.heap.peek() {
            if when > t {
                break;
            }
            self.heap.pop();
            self.now = self.now.max(when);
            if let Some(ev) = self.events.remove(&seq) {
                self.handle(ev);
            }
            self.arm_timers();
            let now = self.instant();
            for n in &mut self.nodes {
                if n.finished_at.is_none() && !n.down && n.driver.is_finished(now) {
                    n.finished_at = Some(self.now);
                }
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

    fn arm_timers(&mut self) {
        for i in 0..self.nodes.len() {
            let n = &self.nodes[i];
            if n.down {
                continue;
            }
            if let Some(t) = n.driver.poll_timeout().map(Instant::as_nanos) {
                if n.timer_at.is_none_or(|armed| t < armed) {
                    self.nodes[i].timer_at = Some(t);
                    self.at(t.max(self.now), Ev::Timer(i));
                }
            }
        }
    }

    fn handle(&mut self, ev: Ev) {
        let now = self.instant();
        match ev {
            Ev::Accept(c) => {
                let node = self.clients[c].node;
                if self.nodes[node].down {
                    return self.refused(c);
                }
                let conn = self.nodes[node].driver.handle_accept(now);
                self.clients[c].conn = Some(conn);
                self.nodes[node].by_conn.insert(conn, c);
                // Bytes that raced ahead of the accept wait for it.
                if !self.clients[c].to_node.is_empty() || self.clients[c].eof_sent {
                    let eof = self.clients[c].eof_sent;
                    self.nodes[node].driver.handle_readable(now, conn, eof);
                    self.read_turns(node);
                }
            }
            Ev::Segment(c, seg) => {
                let client = &mut self.clients[c];
                match seg {
                    Some(bytes) => client.to_node.extend_from_slice(&bytes),
                    None => client.eof_sent = true,
                }
                let (eof, node) = (client.eof_sent, client.node);
                if let Some(conn) = client.conn {
                    self.nodes[node].driver.handle_readable(now, conn, eof);
                    self.read_turns(node);
                }
            }
            Ev::ToClient(c, bytes) => self.deliver(c, bytes),
            Ev::Finish {
                node,
                slot,
                job,
                started,
                route,
            } => {
                if !self.nodes[node].down {
                    let n = &mut self.nodes[node];
                    n.running[slot] = n.running[slot].saturating_sub(1);
                    self.finish(node, slot, *job, started, route);
                }
            }
            Ev::Timer(node) => {
                self.nodes[node].timer_at = None;
                if !self.nodes[node].down {
                    let n = &mut self.nodes[node];
                    let estimates = offrac_node::provision::Estimates {
                        acc: n
                            .acc
                            .iter()
                            .map(
                                |(&function, &(sum, runs))| offrac_node::provision::AccEstimate {
                                    function,
                                    size_class: 0,
                                    t_acc_ns: sum / runs as f64,
                                    runs,
                                },
                            )
                            .collect(),
                        ..Default::default()
                    };
                    n.driver.handle_estimates(estimates);
                    n.driver.handle_timeout(now);
                    self.apply(node);
                }
            }
            Ev::Installed(node, slot) => {
                if !self.nodes[node].down {
                    self.nodes[node].installing[slot] = false;
                    self.nodes[node].driver.handle_installed(now, slot, Ok(()));
                    self.apply(node);
                }
            }
            Ev::LinkConnected(node, link, ok) => {
                if self.nodes[node].down {
                    return;
                }
                if ok {
                    self.nodes[node].driver.handle_link_up(now, link);
                } else {
                    self.nodes[node].driver.handle_link_down(now, link);
                }
                self.apply(node);
            }
        }
        for n in 0..self.nodes.len() {
            self.apply(n);
        }
    }

    /// A connect to a node that is down: a link learns it failed.
    fn refused(&mut self, c: usize) {
        self.clients[c].dropped_at.get_or_insert(self.now);
        if let Some((node, link)) = self.clients[c].link {
            self.link_clients.remove(&(node, link));
            self.at(
                self.now + self.cfg.link_ns,
                Ev::LinkConnected(node, link, false),
            );
        }
    }

    /// The reactor's read turns, over the virtual sockets.
    fn read_turns(&mut self, node: usize) {
        self.apply(node);
        let turns = self.nodes[node].driver.pending_reads();
        for _ in 0..turns {
            let Some((conn, budget)) = self.nodes[node].driver.poll_read() else {
                break;
            };
            let Some(&c) = self.nodes[node].by_conn.get(&conn) else {
                continue;
            };
            let mut more = true;
            for _ in 0..budget {
                let now = self.instant();
                let client = &mut self.clients[c];
                if client.to_node.is_empty() {
                    more = false;
                    if client.eof_sent {
                        self.nodes[node].driver.handle_hangup(now, conn);
                    }
                    break;
                }
                let n = client.to_node.len().min(self.cfg.read_chunk);
                let driver = &mut self.nodes[node].driver;
                // As the reactor: straight into the payload being read, or
                // a collective segment's place (a posted receive), when the
                // driver gives room; else into a buffer to parse.
                match driver.payload_room(now, conn) {
                    Some(room) if !room.is_empty() => {
                        let want = room.len().min(n);
                        let chunk: Vec<u8> = client.to_node.drain(..want).collect();
                        let got = room.fill_from(&chunk);
                        driver.handle_payload_read(now, conn, got);
                    }
                    _ => {
                        let chunk: Vec<u8> = client.to_node.drain(..n).collect();
                        driver.handle_bytes(now, conn, &chunk);
                    }
                }
                self.apply(node);
                if !self.nodes[node].driver.wants_read(conn) {
                    more = false;
                    break;
                }
            }
            let now = self.instant();
            self.nodes[node]
                .driver
                .handle_read_turn_end(now, conn, more);
            self.apply(node);
        }
    }

    /// The virtual wall clock of control envelopes, in ms.
    pub fn wall_ms(&self) -> u64 {
        SIM_EPOCH_MS + self.now / 1_000_000
    }

    /// A HELLO envelope of `tenant`, signed with `key` now (nonce `nonce`).
    pub fn hello_envelope(&self, tenant: u16, key: &[u8], nonce: u64) -> Vec<u8> {
        self.control_envelope(tenant, key, nonce, &offrac_control::Op::Hello)
    }

    /// A control envelope of `tenant` for `op`, signed with `key` now.
    pub fn control_envelope(
        &self,
        tenant: u16,
        key: &[u8],
        nonce: u64,
        op: &offrac_control::Op,
    ) -> Vec<u8> {
        offrac_control::wire::encode(tenant, self.wall_ms(), nonce, op, key)
    }

    /// The shell's control plane, reduced to what simulated clients send:
    /// an authenticated hello, or a swap (for the driver's controller, with
    /// no check of the module: the simulator has no library); anything else
    /// is answered `UNSUPPORTED`.
    fn control(&mut self, node: usize, job: Job) {
        use offrac_control::{Envelope, Op};
        let now = self.instant();
        let wall = self.wall_ms();
        let payload = job.payload.bytes();
        let verdict = match Envelope::decode(&payload) {
            Err(e) => Err((Status::Malformed, e.to_string())),
            Ok(env) => match self.nodes[node].auth.verify(wall, &env, &payload) {
                Err(e) => Err((Status::Unauthorized, e.to_string())),
                Ok(()) => match env.op {
                    Op::Hello
                    | Op::Swap { .. }
                    | Op::Replicate { .. }
                    | Op::Shrink { .. }
                    | Op::Resize(_)
                    | Op::Unload { force: true, .. } => Ok((env.tenant, env.op)),
                    _ => Err((
                        Status::Unsupported,
                        "the simulator runs hellos, swaps, replicates, shrinks, resizes and forced unloads only"
                            .into(),
                    )),
                },
            },
        };
        let driver = &mut self.nodes[node].driver;
        match verdict {
            Ok((tenant, Op::Swap { slot, target })) => {
                driver.handle_swap(now, job.conn, job.header, slot as usize, target, tenant)
            }
            Ok((tenant, Op::Replicate { n, target })) => {
                driver.handle_replicate(now, job.conn, job.header, target, n as usize, tenant)
            }
            Ok((tenant, Op::Resize(name))) => {
                driver.handle_resize(now, job.conn, job.header, &name, tenant)
            }
            Ok((tenant, Op::Shrink { keep, function })) => {
                driver.handle_shrink(now, job.conn, job.header, function, keep as usize, tenant)
            }
            Ok((tenant, Op::Unload { digest, .. })) => {
                driver.handle_unload(now, job.conn, job.header, digest, tenant)
            }
            Ok((tenant, _)) => driver.handle_hello(now, job.conn, job.header, tenant),
            Err((status, msg)) => {
                let h = ResponseHeader::answer(
                    &job.header,
                    status,
                    self.nodes[node].cfg.engine.device_id,
                    msg.len() as u32,
                );
                self.write(node, job.conn, &h, msg.as_bytes());
                self.nodes[node]
                    .driver
                    .handle_control_answered(now, job.conn);
            }
        }
    }

    fn apply(&mut self, node: usize) {
        while let Some(io) = self.nodes[node].driver.poll_io() {
            match io {
                Io::Run {
                    slot,
                    job,
                    inline,
                    route,
                } => {
                    let n = &mut self.nodes[node];
                    assert!(
                        !n.installing[slot],
                        "node {node}: a job of function {} was dispatched to slot {slot} while its swap installs",
                        job.function()
                    );
                    n.running[slot] += 1;
                    let started = if inline {
                        self.now
                    } else {
                        self.now + n.cfg.handoff_ns
                    };
                    let exec = n.cfg.exec.time(&job);
                    n.busy_ns[slot] += exec;
                    let a = n.acc.entry(job.function()).or_default();
                    a.0 += exec as f64;
                    a.1 += 1;
                    let done = started + exec;
                    self.at(
                        done,
                        Ev::Finish {
                            node,
                            slot,
                            job: Box::new(job),
                            started,
                            route,
                        },
                    );
                }
                Io::Send {
                    conn,
                    header,
                    payload,
                } => self.write(node, conn, &header, &payload),
                // The simulated wire carries bytes: the parts are sent in order.
                Io::SendShared {
                    conn,
                    header,
                    payload,
                } => self.write(node, conn, &header, &payload.bytes()),
                Io::ShutWrite { conn } => {
                    if let Some(&c) = self.nodes[node].by_conn.get(&conn) {
                        let t = self.delivery_time(c, 0);
                        self.at(t, Ev::ToClient(c, None));
                    }
                }
                Io::Drop { conn } => {
                    if let Some(c) = self.nodes[node].by_conn.remove(&conn) {
                        let client = &mut self.clients[c];
                        client.dropped_at.get_or_insert(self.now);
                        client.conn = None;
                        if client.link.is_some() {
                            let t = self.delivery_time(c, 0);
                            self.at(t, Ev::ToClient(c, None));
                        }
                    }
                }
                Io::StopAccepting => {}
                Io::Control { job } => self.control(node, job),
                // A swap's install (the autoscaler's or a client's) takes `install_ns`.
                Io::SaveSlots { .. } => {}
                // Simulated nodes have no node key: their links say no hello.
                Io::LinkHello { .. } => {}
                // The simulator has no library: the module is simply gone.
                Io::RemoveModule {
                    conn,
                    header,
                    digest,
                    swapped,
                    ..
                } => {
                    let body = format!(
                        r#"{{"digest":"{}","swapped_out":{swapped}}}"#,
                        offrac_control::hex_digest(&digest)
                    );
                    let h = ResponseHeader::answer(
                        &header,
                        Status::Ok,
                        self.nodes[node].cfg.engine.device_id,
                        body.len() as u32,
                    );
                    self.write(node, conn, &h, body.as_bytes());
                    let now = self.instant();
                    self.nodes[node].driver.handle_control_answered(now, conn);
                }
                Io::Install { slot, .. } => {
                    let n = &mut self.nodes[node];
                    assert_eq!(
                        n.running[slot], 0,
                        "node {node}: slot {slot} is installed while it runs a job"
                    );
                    n.installing[slot] = true;
                    let t = self.now + self.nodes[node].cfg.install_ns;
                    self.at(t, Ev::Installed(node, slot));
                }
                Io::Connect { link, addr } => {
                    let peer = addr
                        .strip_prefix("sim:")
                        .and_then(|i| i.parse::<usize>().ok())
                        .filter(|&i| i < self.nodes.len() && !self.nodes[i].down);
                    match peer {
                        Some(p) => {
                            let c = self.connect_to(p);
                            self.clients[c].link = Some((node, link));
                            self.link_clients.insert((node, link), c);
                            // Connected once the peer has accepted (a round trip).
                            let t = self.now + 2 * self.cfg.link_ns;
                            self.at(t, Ev::LinkConnected(node, link, true));
                        }
                        None => {
                            let t = self.now + self.cfg.link_ns;
                            self.at(t, Ev::LinkConnected(node, link, false));
                        }
                    }
                }
                Io::SendLink {
                    link,
                    header,
                    head,
                    payload,
                    tail,
                } => {
                    if let Some(&c) = self.link_clients.get(&(node, link)) {
                        let mut bytes = header.encode_wire()[..header.wire_len()].to_vec();
                        bytes.extend_from_slice(&head);
                        bytes.extend_from_slice(&payload);
                        bytes.extend_from_slice(&tail);
                        let from = self.write_done(node);
                        self.send_from(from, c, &bytes);
                    }
                }
                Io::CloseLink { link } => {
                    if let Some(c) = self.link_clients.remove(&(node, link)) {
                        self.clients[c].link = None;
                        self.close(c);
                    }
                }
            }
        }
    }

    /// A slot's function returned: hand a chain on to its next hop, or free
    /// the slot, then write the answer.
    fn finish(&mut self, node: usize, slot: SlotId, mut job: Job, started: Nanos, route: Route) {
        let (status, payload) = self.result(node, &job);
        let queue_ns = Instant::from_nanos(started)
            .saturating_since(job.complete_at)
            .as_nanos() as u64;
        let exec_ns = self.now - started;
        let now = self.instant();
        if status == Status::Ok && !job.is_last_hop() {
            let device = self.nodes[node].cfg.engine.device_id;
            job.advance(payload, now, queue_ns, exec_ns, device);
            self.nodes[node].driver.handle_hop_done(now, slot, job);
            self.apply(node);
            return;
        }
        self.nodes[node]
            .driver
            .handle_slot_finished(now, slot, exec_ns);
        self.apply(node);
        let conn = job.conn;
        let mut h = ResponseHeader::answer(
            &job.header,
            status,
            self.nodes[node].cfg.engine.device_id,
            payload.len() as u32,
        );
        job.time_answer(
            &mut h,
            self.nodes[node].cfg.engine.device_id,
            queue_ns,
            exec_ns,
        );
        // As the node's executor: an endpoint closed since dispatch leaves
        // the answer to the sender, and no receipt.
        let open = self.nodes[node].by_conn.contains_key(&route.to);
        if open {
            let receipt = ResponseHeader::receipt_of(&h);
            h.request_id = route.request_id;
            self.write(node, route.to, &h, &payload);
            if let Some(sender) = route.receipt {
                self.write(node, sender, &receipt, &[]);
            }
        } else {
            self.write(node, conn, &h, &payload);
        }
        self.nodes[node].driver.handle_answered(now, conn);
        self.apply(node);
    }

    fn result(&self, node: usize, job: &Job) -> (Status, Vec<u8>) {
        if !self.nodes[node].cfg.exec.real_results {
            // Timing only: a chain's hops pass their input on unchanged.
            let next = if job.is_last_hop() {
                Vec::new()
            } else {
                job.payload.bytes().into_owned()
            };
            return (Status::Ok, next);
        }
        let Some(f) = FunctionId::from_id(job.function()) else {
            return (Status::Internal, b"no such function".to_vec());
        };
        let mut out = Vec::new();
        // As a node's slot runs it: a load hop's kept buffer apart.
        let (head, tail) = job.payload.parts();
        match offrac_accel::builtin(f).run_parts(
            job.header.current_hop().param,
            head,
            tail,
            &mut out,
        ) {
            Ok(()) => (Status::Ok, out),
            Err(e) => (e.status(), e.message().as_bytes().to_vec()),
        }
    }

    fn write(&mut self, node: usize, conn: ConnId, h: &ResponseHeader, payload: &[u8]) {
        let Some(&c) = self.nodes[node].by_conn.get(&conn) else {
            return; // gone: the answer is dropped with the connection
        };
        self.log.push((c, h.request_id, h.status));
        let mut bytes = h.encode_wire()[..h.wire_len()].to_vec();
        bytes.extend_from_slice(payload);
        let client = &mut self.clients[c];
        if !client.reading {
            client.unread += bytes.len();
            client.peak_unread = client.peak_unread.max(client.unread);
            let unread = client.unread;
            let now = self.instant();
            self.nodes[node].driver.handle_backlog(now, conn, unread);
        }
        let from = self.write_done(node);
        let t = self.delivery_time_from(from, c, bytes.len());
        self.at(t, Ev::ToClient(c, Some(bytes)));
    }

    /// When a write `node` issues now has left (`write_ns` after the
    /// writes before it).
    fn write_done(&mut self, node: usize) -> Nanos {
        let n = &mut self.nodes[node];
        n.writes += 1;
        if n.cfg.write_ns == 0 {
            return self.now;
        }
        n.io_free = n.io_free.max(self.now) + n.cfg.write_ns;
        n.io_free
    }

    fn deliver(&mut self, c: usize, bytes: Option<Vec<u8>>) {
        let now = self.now;
        if let Some((node, link)) = self.clients[c].link {
            // A link: the answers are its node's to read.
            if self.nodes[node].down {
                return;
            }
            let t = self.instant();
            match bytes {
                Some(b) => self.nodes[node].driver.handle_link_bytes(t, link, &b),
                None => {
                    self.link_clients.remove(&(node, link));
                    self.clients[c].link = None;
                    self.nodes[node].driver.handle_link_down(t, link);
                }
            }
            return self.apply(node);
        }
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
                    let mut h = ResponseHeader::decode(&hb).expect("the node writes valid headers");
                    let head = if h.has_hop_times() {
                        HEADER_LEN + offrac_proto::HOP_TIMES_LEN
                    } else {
                        HEADER_LEN
                    };
                    let end = head + h.payload_len as usize;
                    if client.from_node.len() < end {
                        break;
                    }
                    if head > HEADER_LEN {
                        let mut t = [0u8; offrac_proto::HOP_TIMES_LEN];
                        t.copy_from_slice(&client.from_node[HEADER_LEN..head]);
                        h.decode_hop_times(&t);
                    }
                    let payload = client.from_node[head..end].to_vec();
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
