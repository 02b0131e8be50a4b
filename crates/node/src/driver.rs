//! Everything the node decides, as a sans-IO state machine: the connection
//! table, read fairness, backpressure, which slot runs a job where (on the
//! I/O thread or the slot's worker), lingering close, shutdown and its grace
//! period, and the order of answers. No sockets, threads or clock reads: the
//! shell (the mio reactor in `reactor.rs`, or the simulator's virtual world)
//! feeds events in with the current time — `handle_*(now, …)` — carries out
//! what [`Driver::poll_io`] returns and wakes the driver at
//! [`Driver::poll_timeout`].
//!
//! Answers owed: the engine counts the complete requests of a connection that
//! no slot has finished ([`Engine::held`]); the driver counts the jobs it has
//! handed out whose answer the shell has not yet written. A connection the
//! engine retires (a fatal header, a stall, shutdown) is half-closed only when
//! both are zero, so every request the node received whole is answered before
//! the close.

mod autoscale;
mod collective;
mod control;
mod hop;
mod links;
mod ops;

pub use autoscale::{AutoscaleSettings, AutoscaleStats};
pub use links::{LinkId, LinkState, LinkStats, PeerConfig, LINK_HELLO_ID};

use links::Link;
use offrac_core::{
    Action, ConnId, Engine, EngineConfig, Instant, Job, Payload, Room, Route, SlotId,
};
use offrac_proto::{RequestHeader, ResponseHeader};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// How one slot runs its function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotConfig {
    pub function: u8,
    /// Requests with a payload up to this many bytes run on the I/O thread
    /// (no hand-off to the worker); 0: always the worker.
    pub inline_max_bytes: usize,
}

/// The driver's own knobs (the engine's are in [`EngineConfig`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DriverConfig {
    /// One entry per engine slot, in slot order.
    pub slots: Vec<SlotConfig>,
    /// Unwritten output above this pauses reading a connection (a client that
    /// does not read its answers cannot make the node buffer without bound);
    /// reading resumes below half of it.
    pub pause_reading_above: usize,
    /// Reads of one connection per turn before the others get theirs.
    pub reads_per_turn: u32,
    /// How long a half-closed connection may linger for its peer to read the
    /// last answer and close.
    pub close_linger: Duration,
    /// After a shutdown request: how long queued work may still run. At its
    /// end every request still waiting is answered `SHUTTING_DOWN`.
    pub shutdown_grace: Duration,
    /// The device table: the peers chain hops can be forwarded to (the
    /// engine's `peers` must list the same devices).
    pub peers: Vec<PeerConfig>,
    /// A forwarded hop with no answer after this long is answered `TIMEOUT`.
    pub forward_timeout: Duration,
    /// Payload bytes forwarded on one link and not answered yet, above
    /// which another hop is refused `BUSY` (memory stays bounded when a
    /// peer is slow).
    pub link_max_bytes: usize,
    /// Largest response payload accepted from a peer (larger: the link is
    /// treated as broken).
    pub relay_max_payload: usize,
    /// Back-off before reopening a link that went down: doubles from the
    /// minimum up to the maximum, back to the minimum once it is up.
    pub reconnect_min: Duration,
    pub reconnect_max: Duration,
    /// Where the node serves its metrics, told to clients that describe it.
    pub metrics_addr: Option<String>,
    /// What each slot runs at start, when a saved assignment (the control
    /// plane's state directory) differs from `slots`; empty: `slots`' built-ins.
    pub targets: Vec<offrac_control::Target>,
    /// How long a swap waits for the slot's running request before rolling back.
    pub swap_drain_timeout: Duration,
    /// The autoscaler (`docs/control.md`); `None`: slots stay as configured.
    pub autoscale: Option<AutoscaleSettings>,
    /// Tenants' weights and quotas (`docs/control.md`, "Tenants").
    pub tenancy: offrac_core::Tenancy,
    /// Function ids served by tenants' modules at start (a saved assignment).
    pub owners: Vec<(u8, u16)>,
    /// Links to other nodes say the node's hello ([`Io::LinkHello`]) before
    /// any hop, and forwarded hops carry their origin tenant.
    pub link_hello: bool,
    /// Named slot arrangements a RESIZE moves the node to: the built-in of
    /// each slot (`docs/control.md`, "Resize").
    pub templates: Vec<(String, Vec<u8>)>,
    /// Collectives across the device table (`docs/collectives.md`).
    pub collectives: offrac_collective::Config,
    /// Bytes the node's named buffers may keep, over all tenants.
    pub named_buffer_bytes: u64,
}

impl DriverConfig {
    pub fn new(slots: Vec<SlotConfig>) -> DriverConfig {
        DriverConfig {
            slots,
            pause_reading_above: 4 << 20,
            reads_per_turn: 8,
            close_linger: Duration::from_secs(2),
            shutdown_grace: Duration::from_secs(10),
            peers: Vec::new(),
            forward_timeout: Duration::from_secs(10),
            link_max_bytes: 64 << 20,
            relay_max_payload: 256 << 20,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            metrics_addr: None,
            targets: Vec::new(),
            swap_drain_timeout: Duration::from_secs(1),
            autoscale: None,
            tenancy: offrac_core::Tenancy::default(),
            owners: Vec::new(),
            link_hello: false,
            templates: Vec::new(),
            collectives: offrac_collective::Config::default(),
            named_buffer_bytes: offrac_core::DEFAULT_BUFFER_BUDGET,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Engine(#[from] offrac_core::ConfigError),
    #[error("{driver} slot configurations for {engine} engine slots")]
    SlotMismatch { driver: usize, engine: usize },
    #[error("the driver's device table and the engine's peers differ")]
    PeerMismatch,
    #[error("device {0} appears twice in the device table")]
    DuplicatePeer(u8),
    #[error("autoscale: {0}")]
    Autoscale(String),
}

/// What the driver asks its shell to do.
// `Run` carries the job by value: boxing it would cost an allocation per
// request on the hot path to save copying a few hundred bytes.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Io {
    /// Run `job` on `slot`: at once on this thread (`inline`) or on the slot's
    /// worker. When the function returns, report [`Driver::handle_slot_free`]
    /// *before* writing the answer (the answer may prompt the client's next
    /// request, which must find the slot free), then write the answer (built
    /// with [`ResponseHeader::answer`]) and report [`Driver::handle_answered`].
    /// If it succeeded and was not the chain's last hop, write nothing:
    /// advance the job ([`Job::advance`]) and report [`Driver::handle_hop_done`].
    /// The answer goes to `route.to`; when `route.receipt` names a
    /// connection (the node that forwarded the hop here), write it the
    /// answer's receipt ([`ResponseHeader::receipt_of`]) after the answer.
    Run {
        slot: SlotId,
        job: Job,
        inline: bool,
        route: Route,
    },
    /// Write this whole message (header, then payload) on `conn`.
    Send {
        conn: ConnId,
        header: ResponseHeader,
        payload: Vec<u8>,
    },
    /// [`Io::Send`] of an answer whose payload starts with a kept buffer's
    /// bytes (a load as a chain's last hop): written from the buffer itself,
    /// then the job's own bytes, not joined first.
    SendShared {
        conn: ConnId,
        header: ResponseHeader,
        payload: Payload,
    },
    /// Half-close `conn` once its queued output is written; go on reading
    /// (and discarding) until the peer closes or the linger ends.
    ShutWrite { conn: ConnId },
    /// Forget `conn`: shut it both ways. No more events are expected for it.
    Drop { conn: ConnId },
    /// Stop accepting connections.
    StopAccepting,
    /// Open the connection of `link` to `addr`; report
    /// [`Driver::handle_link_up`] once it is connected or
    /// [`Driver::handle_link_down`] if it fails. Its bytes go to
    /// [`Driver::handle_link_bytes`]; an end of stream or error is
    /// [`Driver::handle_link_down`].
    Connect { link: LinkId, addr: String },
    /// Write the node's hello on `link` (just opened) as request id
    /// [`LINK_HELLO_ID`]: a control request signed with the node key
    /// (`docs/protocol.md`, "Node links"). Its answer is
    /// [`Driver::handle_link_bytes`]'s; nothing else is sent on the link
    /// before an `OK` one.
    LinkHello { link: LinkId },
    /// Write this request (header, then head, payload and tail) on `link`.
    /// `head` and `tail`: bytes shared with a buffer that stays (the kept
    /// buffer a load hop's output starts with; a collective's segment of
    /// its work buffer), written from where they are; empty for most
    /// requests.
    SendLink {
        link: LinkId,
        header: RequestHeader,
        head: bytes::Bytes,
        payload: Vec<u8>,
        tail: bytes::Bytes,
    },
    /// Close the connection of `link` (it is reopened with a new `Connect`).
    CloseLink { link: LinkId },
    /// A complete control request (`docs/control.md`): authenticate and
    /// answer it — then [`Driver::handle_control_answered`] — or pass an
    /// authenticated swap to [`Driver::handle_swap`].
    Control { job: Job },
    /// A swap's install step: make `target` the function of `slot` (paused
    /// and idle), then report [`Driver::handle_installed`]; on failure
    /// change nothing.
    Install {
        slot: SlotId,
        target: offrac_control::Target,
    },
    /// The slot assignment changed: keep it for a restart.
    SaveSlots {
        targets: Vec<offrac_control::Target>,
    },
    /// A forced unload's slots are swapped out (`swapped`: their swap
    /// reports): remove module `digest` from the library for `tenant` and
    /// answer the control request `header` of `conn` — then
    /// [`Driver::handle_control_answered`].
    RemoveModule {
        conn: ConnId,
        header: RequestHeader,
        digest: offrac_control::Digest,
        tenant: u16,
        swapped: serde_json::Value,
    },
}

#[derive(Debug, Default)]
struct Conn {
    /// Output the shell has not written yet, as last reported.
    backlog: usize,
    /// Not read while the backlog is high.
    paused: bool,
    /// Readable while paused: give it a turn on resume.
    read_pending: bool,
    /// In the read queue.
    queued: bool,
    /// Jobs handed to the shell whose answer is not written yet.
    answering: u32,
    /// The engine retired it: half-close once everything owed is written.
    closing: bool,
    /// Half-closed at this time.
    shut_at: Option<Instant>,
}

struct Shutdown {
    grace_end: Instant,
    aborted: bool,
    /// Twice the grace period has passed: whatever is left is given up.
    expired: bool,
}

pub struct Driver {
    engine: Engine,
    /// The node's live T_oh / T_acc, as last published (describe answers).
    estimates: crate::provision::Estimates,
    cfg: DriverConfig,
    conns: FxHashMap<ConnId, Conn>,
    read_queue: VecDeque<ConnId>,
    lingering: BinaryHeap<Reverse<(Instant, ConnId)>>,
    /// Retired connections not yet half-closed (few: checked after each event).
    closing: Vec<ConnId>,
    out: VecDeque<Io>,
    shutdown: Option<Shutdown>,
    /// Per slot: the inline limit (copied out of `cfg` for the hot path).
    inline_max: Vec<usize>,
    links: Vec<Link>,
    link_of: Box<[Option<LinkId>; 256]>,
    forward_deadlines: BinaryHeap<Reverse<(Instant, LinkId, u64)>>,
    link_stats: LinkStats,
    /// The swap controller (`driver/control.rs`) and the control requests
    /// waiting for a swap's outcome.
    swaps: offrac_control::SwapController,
    swap_waiters: FxHashMap<u64, control::Waiter>,
    next_swap_token: u64,
    /// Per slot: requests its last swap handed to a replica / refused.
    swap_counts: Vec<(u64, u64)>,
    /// Forced unloads and replicates waiting for their swaps (`driver/ops.rs`),
    /// by their first swap token.
    batches: std::collections::BTreeMap<u64, ops::Pending>,
    /// The autoscaler (`driver/autoscale.rs`), when configured.
    autoscale: Option<autoscale::AutoscaleState>,
    /// Collectives (`driver/collective.rs`) and the calls waiting for them.
    collectives: offrac_collective::Collectives,
    calls: collective::Calls,
}

impl Driver {
    pub fn new(engine: EngineConfig, cfg: DriverConfig) -> Result<Driver, DriverError> {
        if cfg.slots.len() != engine.slots.len() {
            return Err(DriverError::SlotMismatch {
                driver: cfg.slots.len(),
                engine: engine.slots.len(),
            });
        }
        let mut link_of = Box::new([None; 256]);
        for (i, p) in cfg.peers.iter().enumerate() {
            if link_of[p.device as usize].replace(i).is_some() {
                return Err(DriverError::DuplicatePeer(p.device));
            }
        }
        let mut listed: Vec<u8> = cfg.peers.iter().map(|p| p.device).collect();
        let mut peers = engine.peers.clone();
        listed.sort_unstable();
        peers.sort_unstable();
        if listed != peers {
            return Err(DriverError::PeerMismatch);
        }
        let links: Vec<Link> = cfg
            .peers
            .iter()
            .map(|p| Link::new(p, cfg.reconnect_min))
            .collect();
        let out: VecDeque<Io> = links
            .iter()
            .enumerate()
            .map(|(i, l)| l.connect_io(i))
            .collect();
        let mut engine = Engine::new(engine)?;
        let autoscale = match &cfg.autoscale {
            Some(a) => {
                let functions: Vec<u8> = cfg.slots.iter().map(|s| s.function).collect();
                let state = autoscale::AutoscaleState::new(a, &functions)
                    .map_err(DriverError::Autoscale)?;
                // Spare slots serve nothing until a replica is loaded.
                for slot in state.spare_slots() {
                    engine.pause_slot(Instant::from_nanos(0), slot);
                }
                Some(state)
            }
            None => None,
        };
        engine.set_tenancy(cfg.tenancy.clone());
        engine.buffers_mut().set_budget(cfg.named_buffer_bytes);
        for &(f, t) in &cfg.owners {
            engine.set_owner(f, Some(t));
        }
        let collectives = collective::machine(engine.config().device_id, cfg.collectives.clone());
        let targets = if cfg.targets.len() == cfg.slots.len() {
            cfg.targets.clone()
        } else {
            cfg.slots
                .iter()
                .map(|s| offrac_control::Target::Builtin(s.function))
                .collect()
        };
        Ok(Driver {
            swaps: control::controller(targets, cfg.swap_drain_timeout),
            swap_waiters: FxHashMap::default(),
            next_swap_token: 0,
            swap_counts: vec![(0, 0); cfg.slots.len()],
            batches: Default::default(),
            autoscale,
            collectives,
            calls: collective::Calls::default(),
            estimates: Default::default(),
            link_stats: LinkStats {
                connects: links.len() as u64,
                ..LinkStats::default()
            },
            links,
            link_of,
            forward_deadlines: BinaryHeap::new(),
            inline_max: cfg.slots.iter().map(|s| s.inline_max_bytes).collect(),
            engine,
            cfg,
            conns: FxHashMap::default(),
            read_queue: VecDeque::new(),
            lingering: BinaryHeap::new(),
            closing: Vec::new(),
            out,
            shutdown: None,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn config(&self) -> &DriverConfig {
        &self.cfg
    }

    /// Open connections, whether or not they have sent anything.
    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// A connection was accepted; its handle names it from now on.
    pub fn handle_accept(&mut self, now: Instant) -> ConnId {
        let id = self.engine.open(now);
        self.conns.insert(id, Conn::default());
        id
    }

    /// `conn` has bytes (or an end of stream) to read. `hung_up`: the peer
    /// sent its last byte.
    pub fn handle_readable(&mut self, now: Instant, conn: ConnId, hung_up: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.paused {
            if hung_up {
                // Not reading it for now, but a peer that hung up will never
                // read its answers either: let it go.
                self.drop_conn(now, conn);
            } else {
                c.read_pending = true;
            }
            return;
        }
        if !c.queued {
            c.queued = true;
            self.read_queue.push_back(conn);
        }
    }

    /// The next connection to read and how many reads it may do this turn.
    /// The shell reads until the socket is drained or the budget is spent,
    /// feeding [`Driver::handle_bytes`], then calls [`Driver::handle_read_turn_end`].
    pub fn poll_read(&mut self) -> Option<(ConnId, u32)> {
        while let Some(conn) = self.read_queue.pop_front() {
            if let Some(c) = self.conns.get_mut(&conn) {
                c.queued = false;
                if !c.paused {
                    return Some((conn, self.cfg.reads_per_turn));
                }
                c.read_pending = true;
            }
        }
        None
    }

    /// Connections waiting for a read turn (a shell gives at most this many
    /// turns per loop, so epoll is polled between rounds).
    pub fn pending_reads(&self) -> usize {
        self.read_queue.len()
    }

    /// Whether the shell should go on reading `conn` in this turn.
    pub fn wants_read(&self, conn: ConnId) -> bool {
        self.conns.get(&conn).is_some_and(|c| !c.paused)
    }

    /// The read turn of `conn` ended; `more`: the budget ran out before the
    /// socket was drained, so it goes to the back of the queue.
    pub fn handle_read_turn_end(&mut self, now: Instant, conn: ConnId, more: bool) {
        if more {
            self.handle_readable(now, conn, false);
        }
    }

    /// Bytes read from `conn`.
    pub fn handle_bytes(&mut self, now: Instant, conn: ConnId, data: &[u8]) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        if c.closing {
            return; // retired: discarded while lingering
        }
        self.engine.handle_bytes(now, conn, data);
        self.pump(now);
    }

    /// Where the next bytes of `conn` go while it is inside a request's
    /// payload, for the shell to read straight into (no copy): the payload's
    /// reassembly buffer ([`Engine::payload_room`]), or, for a collective's
    /// data segment, its place in the work buffer (a posted receive,
    /// `docs/collectives.md`, "Posted receives"); then
    /// [`Driver::handle_payload_read`]. `None`: read into a buffer and call
    /// [`Driver::handle_bytes`].
    pub fn payload_room(&mut self, now: Instant, conn: ConnId) -> Option<Room<'_>> {
        if self.conns.get(&conn).is_none_or(|c| c.closing) {
            return None;
        }
        if let Some(post) = self.collective_post(now, conn) {
            return self.collectives.posted_room(post);
        }
        self.engine
            .payload_room(conn)
            .map(|(payload, need)| Room::Spare(payload, need))
    }

    /// `n` bytes of `conn` read into the room [`Driver::payload_room`] gave
    /// (a spare room's vector already grown by them).
    pub fn handle_payload_read(&mut self, now: Instant, conn: ConnId, n: usize) {
        match self.open_post(conn) {
            Some(post) => {
                self.collectives.posted_read(post, n);
                self.engine.handle_diverted_read(now, conn, n);
            }
            None => self.engine.handle_payload_read(now, conn, n),
        }
        self.pump(now);
    }

    /// The peer closed its side (end of stream) or the connection broke: it
    /// is gone, with whatever it had half sent.
    pub fn handle_hangup(&mut self, now: Instant, conn: ConnId) {
        self.drop_conn(now, conn);
    }

    /// The shell's unwritten output for `conn` is now `backlog` bytes.
    pub fn handle_backlog(&mut self, now: Instant, conn: ConnId, backlog: usize) {
        let above = self.cfg.pause_reading_above;
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.backlog = backlog;
        if !c.paused && backlog > above && !c.closing {
            c.paused = true;
            self.engine.set_reading(now, conn, false);
        } else if c.paused && backlog < above / 2 {
            c.paused = false;
            self.engine.set_reading(now, conn, true);
            if std::mem::take(&mut c.read_pending) {
                self.handle_readable(now, conn, false);
            }
        }
        self.maybe_shut(now, conn);
    }

    /// `slot`'s function returned (its answer is about to be written).
    pub fn handle_slot_free(&mut self, now: Instant, slot: SlotId) {
        self.engine.handle_slot_done(now, slot);
        self.pump(now);
        self.swap_slot_freed(now, slot);
    }

    /// `slot`'s function returned after running `exec_ns` (as measured
    /// around the call): the cost its tenant is charged in the slot's DRR.
    pub fn handle_slot_finished(&mut self, now: Instant, slot: SlotId, exec_ns: u64) {
        self.engine.handle_slot_finished(now, slot, Some(exec_ns));
        self.pump(now);
        self.swap_slot_freed(now, slot);
    }

    /// `slot` ran a hop of `job`'s chain and the chain goes on: `job` has
    /// been advanced to its next hop ([`Job::advance`]); nothing was written.
    pub fn handle_hop_done(&mut self, now: Instant, slot: SlotId, job: Job) {
        if let Some(c) = self.conns.get_mut(&job.conn) {
            c.answering -= 1;
        }
        self.engine.handle_hop_done(now, slot, job);
        self.pump(now);
        self.swap_slot_freed(now, slot);
    }

    /// The answer to a job of `conn` has been written (or dropped: the
    /// connection was gone).
    pub fn handle_answered(&mut self, now: Instant, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.answering -= 1;
            self.maybe_shut(now, conn);
        }
    }

    /// Stop accepting and admitting; held work runs for up to the grace period.
    pub fn handle_shutdown(&mut self, now: Instant) {
        if self.shutdown.is_some() {
            return;
        }
        self.shutdown = Some(Shutdown {
            grace_end: now + self.cfg.shutdown_grace,
            aborted: false,
            expired: false,
        });
        self.out.push_back(Io::StopAccepting);
        self.engine.begin_shutdown(now);
        self.pump(now);
    }

    /// Time passed: engine timeouts, lingering connections, the grace period.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.engine.poll_timeout().is_some_and(|t| t <= now) {
            self.engine.handle_timeout(now);
            self.pump(now);
        }
        self.link_timeouts(now);
        self.swap_timeouts(now);
        self.autoscale_tick(now);
        if self.collectives.poll_timeout().is_some_and(|t| t <= now) {
            self.collectives.handle_timeout(now);
            self.collective_outs(now);
        }
        while let Some(&Reverse((t, conn))) = self.lingering.peek() {
            if t > now {
                break;
            }
            self.lingering.pop();
            self.drop_conn(now, conn);
        }
        if let Some(s) = &mut self.shutdown {
            if s.aborted && s.grace_end + self.cfg.shutdown_grace <= now {
                s.expired = true;
            }
            if !s.aborted && s.grace_end <= now {
                s.aborted = true;
                self.engine.abort_queued(now);
                self.abort_waiting_links(now);
                self.pump(now);
            }
        }
    }

    /// The next thing to do, if any.
    pub fn poll_io(&mut self) -> Option<Io> {
        self.out.pop_front()
    }

    /// When [`Driver::handle_timeout`] next has work (may be early, never late).
    pub fn poll_timeout(&self) -> Option<Instant> {
        // The end of the grace period, then the hard end at twice it.
        let grace = self
            .shutdown
            .as_ref()
            .and_then(|s| match (s.aborted, s.expired) {
                (false, _) => Some(s.grace_end),
                (true, false) => Some(s.grace_end + self.cfg.shutdown_grace),
                (true, true) => None,
            });
        let linger = self.lingering.peek().map(|Reverse((t, _))| *t);
        [
            self.engine.poll_timeout(),
            grace,
            linger,
            self.link_timeout(),
            self.swap_timeout(),
            self.autoscale_timeout(),
            self.collectives.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// A shutdown was asked for and everything is answered and written (or,
    /// past twice the grace period, whatever is left is given up).
    pub fn is_finished(&self, now: Instant) -> bool {
        let Some(s) = &self.shutdown else {
            return false;
        };
        let quiet = self.engine.is_idle()
            && self.calls.hops.is_empty()
            && self
                .conns
                .values()
                .all(|c| c.answering == 0 && c.backlog == 0);
        quiet || s.expired || now >= s.grace_end + self.cfg.shutdown_grace
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_some()
    }

    /// Takes the node's latest provisioning figures (measured by its
    /// threads), for describe answers and the autoscaler.
    pub fn handle_estimates(&mut self, estimates: crate::provision::Estimates) {
        self.estimates = estimates;
    }

    fn provisioning_json(&self) -> serde_json::Value {
        let e = &self.estimates;
        let acc: Vec<serde_json::Value> = e
            .acc
            .iter()
            .map(|a| {
                serde_json::json!({
                    "function": a.function,
                    "name": offrac_proto::FunctionId::from_id(a.function).map(|f| f.name()),
                    "size_class": a.size_class,
                    "t_acc_ns": a.t_acc_ns.round(),
                    "runs": a.runs,
                })
            })
            .collect();
        serde_json::json!({
            "t_oh_ns": e.t_oh_ns.map(f64::round),
            "t_oh_io_ns": e.t_oh_io_ns.map(f64::round),
            "t_oh_slot_ns": e.t_oh_slot_ns.map(f64::round),
            "t_acc": acc,
        })
    }

    /// The answer to a describe request: what this node serves, as JSON
    /// (`docs/protocol.md`, "Describe").
    pub fn describe(&self) -> String {
        let e = self.engine.config();
        let name = |f: u8| offrac_proto::FunctionId::from_id(f).map(|f| f.name());
        let slots: Vec<serde_json::Value> = self
            .engine
            .slots()
            .iter()
            .enumerate()
            .map(|(i, q)| {
                serde_json::json!({
                    "slot": i,
                    "function": q.function,
                    "name": name(q.function),
                    "queue_depth": q.depth(),
                    "busy": q.is_busy(),
                })
            })
            .collect();
        let mut functions: Vec<u8> = e.slots.clone();
        functions.sort_unstable();
        functions.dedup();
        let functions: Vec<serde_json::Value> = functions
            .iter()
            .map(|&f| {
                let hosted: Vec<usize> = (0..e.slots.len()).filter(|&i| e.slots[i] == f).collect();
                let spec = offrac_proto::FunctionId::from_id(f).map(|f| f.spec());
                serde_json::json!({
                    "id": f,
                    "name": name(f),
                    "slots": hosted,
                    "input": spec.map(|s| s.input.describe()),
                    "output": spec.map(|s| s.output.describe()),
                })
            })
            .collect();
        let peers: Vec<serde_json::Value> = self
            .links
            .iter()
            .filter(|l| l.is_listed())
            .map(|l| serde_json::json!({ "device": l.device(), "addr": l.addr(), "up": l.is_up() }))
            .collect();
        serde_json::json!({
            "protocol": offrac_proto::VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            "device": e.device_id,
            "max_payload": e.max_payload,
            "max_hops": offrac_proto::MAX_HOPS,
            "functions": functions,
            "slots": slots,
            "peers": peers,
            "metrics": self.cfg.metrics_addr,
            "connections": self.conns.len(),
            "provisioning": self.provisioning_json(),
            "shutting_down": self.shutdown.is_some(),
            "autoscale": self.autoscale_json(),
        })
        .to_string()
    }

    /// Turn the engine's actions into I/O.
    fn pump(&mut self, now: Instant) {
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Dispatch { slot, job } => {
                    let Some(c) = self.conns.get_mut(&job.conn) else {
                        // Nobody to answer: skip the work, free the slot.
                        self.engine.handle_slot_done(now, slot);
                        continue;
                    };
                    c.answering += 1;
                    if let Some(a) = &mut self.autoscale {
                        a.count(job.function());
                    }
                    let inline = job.payload.len() <= self.inline_max[slot];
                    let route = self.engine.answer_route(job.conn, &job.header);
                    self.out.push_back(Io::Run {
                        slot,
                        job,
                        inline,
                        route,
                    });
                }
                Action::Reply {
                    conn,
                    header,
                    message,
                } => {
                    if self.conns.contains_key(&conn) {
                        self.out.push_back(Io::Send {
                            conn,
                            header,
                            payload: message.into_bytes(),
                        });
                    }
                }
                Action::Result {
                    conn,
                    header,
                    payload,
                } => {
                    if self.conns.contains_key(&conn) {
                        self.out.push_back(if payload.shared_len() == 0 {
                            Io::Send {
                                conn,
                                header,
                                payload: payload.into_flat(),
                            }
                        } else {
                            Io::SendShared {
                                conn,
                                header,
                                payload,
                            }
                        });
                    }
                }
                Action::Forward { job } => self.forward(now, job),
                Action::Control { job } if job.function() == offrac_proto::FN_COLLECTIVE => {
                    self.collective_request(now, job);
                }
                Action::RefusedCollective {
                    head,
                    status,
                    message,
                } => self.refused_collective(now, &head, status, &message),
                Action::CollectiveHop { job } => self.collective_hop(now, job),
                Action::Control { job } => {
                    if let Some(c) = self.conns.get_mut(&job.conn) {
                        c.answering += 1;
                        self.out.push_back(Io::Control { job });
                    }
                }
                Action::Describe { conn, header } => {
                    if self.conns.contains_key(&conn) {
                        let payload = self.describe().into_bytes();
                        let header = ResponseHeader::answer(
                            &header,
                            offrac_proto::Status::Ok,
                            self.engine.config().device_id,
                            payload.len() as u32,
                        );
                        self.out.push_back(Io::Send {
                            conn,
                            header,
                            payload,
                        });
                    }
                }
                Action::Close { conn } => {
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.closing = true;
                        self.closing.push(conn);
                        // Keep reading (and discarding) so the kernel does not
                        // reset the connection before the peer reads its answers.
                        if std::mem::take(&mut c.paused) {
                            self.engine.set_reading(now, conn, true);
                        }
                        if std::mem::take(&mut c.read_pending) {
                            self.handle_readable(now, conn, false);
                        }
                    }
                }
            }
        }
        // Retired connections whose last answers just went out.
        if !self.closing.is_empty() {
            for conn in std::mem::take(&mut self.closing) {
                self.maybe_shut(now, conn);
                if self.conns.get(&conn).is_some_and(|c| c.shut_at.is_none()) {
                    self.closing.push(conn);
                }
            }
        }
    }

    /// Half-close a retired connection once nothing more is owed to it.
    fn maybe_shut(&mut self, now: Instant, conn: ConnId) {
        let held = self.engine.held(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.closing && c.shut_at.is_none() && c.answering == 0 && held == 0 {
            c.shut_at = Some(now);
            self.out.push_back(Io::ShutWrite { conn });
            self.lingering
                .push(Reverse((now + self.cfg.close_linger, conn)));
        }
    }

    fn drop_conn(&mut self, now: Instant, conn: ConnId) {
        if self.conns.remove(&conn).is_some() {
            self.cancel_posts(now, conn, None);
            self.engine.handle_close(now, conn);
            self.out.push_back(Io::Drop { conn });
            self.pump(now);
        }
    }
}
