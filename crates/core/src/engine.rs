//! The engine: parses each connection's byte stream into requests, admits
//! them (small-request queue or reassembly pool), moves complete requests to
//! slot queues and tells the driver what to do.

use crate::connection::{Connection, Peek, Rx, COLLECTIVE_HEAD_LEN};
use crate::{
    Buffers, EngineConfig, EngineStats, Instant, Job, Payload, ReassemblyPool, Selector, SlotId,
    SlotQueue, Tenancy, TenantKey, TenantUsage,
};
use offrac_proto::{
    decode_buffer_param, BufferOp, HeaderError, RequestHeader, ResponseHeader, Status, DEVICE_SELF,
    EXT_LEN, FLAG_HOP_EXT, FN_BUFFER, FN_COLLECTIVE, FN_CONTROL, FN_DESCRIBE, FN_REGISTER_REPLY,
    HEADER_LEN, REQUEST_ID_NONE, VERSION,
};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

/// Functions the driver answers itself (control requests, collectives):
/// reassembled like any request, never run by a slot.
fn node_function(f: u8) -> bool {
    f == FN_CONTROL || f == FN_COLLECTIVE
}

/// The driver's name for a connection.
pub type ConnId = u64;

/// What the engine asks its driver to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Run `job` on `slot`; call [`Engine::handle_slot_done`] when it finishes.
    Dispatch { slot: SlotId, job: Job },
    /// Send this response (header, then `message` as the payload) on `conn`.
    Reply {
        conn: ConnId,
        header: ResponseHeader,
        message: String,
    },
    /// The engine has retired `conn`: nothing more is read from it (later
    /// bytes are ignored). The driver closes it once every answer the engine
    /// still owes it ([`Engine::held`]) and everything queued for it has been
    /// written, then reports the end with [`Engine::handle_close`].
    Close { conn: ConnId },
    /// Answer the describe request `header` on `conn` (the node's driver
    /// knows what to say).
    Describe { conn: ConnId, header: RequestHeader },
    /// Send `job` to the device of its current hop ([`Job::function`]'s
    /// device, one of the configured peers). The engine no longer holds it:
    /// its answer — the one relayed back, or an error if the hop cannot be
    /// reached — is the driver's to give. A load's output is still two parts
    /// (the kept buffer, shared, then the job's own bytes), not joined.
    Forward { job: Job },
    /// A complete control request (function [`FN_CONTROL`]) or collective
    /// (function [`FN_COLLECTIVE`]): the driver's control plane or its
    /// collectives answer it. The engine no longer holds it.
    Control { job: Job },
    /// Send this answer (header, then `payload`) on `conn`: the result of a
    /// chain whose last hop the engine ran itself (a named buffer's hop).
    /// A load's answer is the kept buffer, shared, then the job's own bytes:
    /// the driver writes both parts as they are (no join).
    Result {
        conn: ConnId,
        header: ResponseHeader,
        payload: Payload,
    },
    /// The engine refused a collective request (function [`FN_COLLECTIVE`]
    /// for this node) before the driver saw it — beyond `max_payload`, over
    /// a tenant's quota, no reassembly buffer free, not complete within its
    /// reassembly deadline — and has answered it `status`; `head` is the
    /// first [`COLLECTIVE_HEAD_LEN`] bytes of its payload (the collective
    /// descriptor), so the driver can tell the other members of a refused
    /// call's collective (`docs/collectives.md`, "Failures and deadlines").
    /// Nothing is owed for it: the request is answered.
    RefusedCollective {
        head: Box<[u8; COLLECTIVE_HEAD_LEN]>,
        status: Status,
        message: String,
    },
    /// Run the collective of `job`'s current hop (a hop for function
    /// [`FN_COLLECTIVE`] in a chain of two or more hops, `docs/protocol.md`,
    /// "Collective hops") with the hop's input, its payload; report its end
    /// with [`Engine::handle_collective_hop_done`]. The job holds no slot
    /// meanwhile, but the engine still owes its request an answer.
    CollectiveHop { job: Job },
}

/// Where an answer goes ([`Engine::answer_route`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// The connection the answer is written to.
    pub to: ConnId,
    /// The request id the answer carries there: the caller's own, also on
    /// a hop that reached this node under a link's id.
    pub request_id: u64,
    /// The forwarding node that sent the request, owed a receipt because
    /// the answer went to a direct reply endpoint instead of to it.
    pub receipt: Option<ConnId>,
}

/// A connection registered as a reply endpoint, and the tenant it
/// registered with (direct replies are delivered only to their own tenant).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Endpoint {
    conn: ConnId,
    tenant: u16,
}

pub struct Engine {
    cfg: EngineConfig,
    pool: ReassemblyPool,
    small: VecDeque<Job>,
    small_bytes: u64,
    /// Chain hops waiting for a slot of their next function (bounded by
    /// `slot_queue_bytes`, so any hop that fits a slot can wait here).
    chained: VecDeque<Job>,
    chained_bytes: u64,
    slots: Vec<SlotQueue>,
    selector: Selector,
    /// Connection ids are the driver's, not an attacker's choice, so a fast
    /// non-keyed hash is safe here (and a lookup happens on every segment).
    conns: FxHashMap<ConnId, Connection>,
    next_conn: ConnId,
    /// The connection and tenant of the job each slot is running, and when
    /// it was dispatched (its cost, if the driver does not measure one).
    running: Vec<Option<(ConnId, TenantKey, Instant)>>,
    timers: BinaryHeap<Reverse<(Instant, ConnId)>>,
    actions: VecDeque<Action>,
    stats: EngineStats,
    shutting_down: bool,
    drain_from: usize,
    /// Reply endpoints: the connection registered under each id.
    reply_endpoints: Box<[Option<Endpoint>; 256]>,
    /// Slots being reconfigured: not chosen for new requests.
    paused: Vec<bool>,
    /// Tenants' weights and quotas, and what each holds now.
    tenancy: Tenancy,
    usage: FxHashMap<TenantKey, TenantUsage>,
    /// The tenant owning each function id (a tenant's WebAssembly module);
    /// `None`: shared (the built-ins), callable by everyone.
    owners: Box<[Option<u16>; 256]>,
    /// Named buffers kept on the node (`crate::Buffers`).
    buffers: Buffers,
    /// A buffer hop queued its chain's next hop during this drain pass.
    requeued: bool,
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> Result<Engine, crate::ConfigError> {
        Engine::build(cfg, None)
    }

    /// An engine whose buffer `i` admits only requests for `owners[i]` (`None`:
    /// any function): the per-accelerator buffers of OffRAC §3.2, kept for the
    /// simulator to compare against the shared pool.
    pub fn with_buffer_owners(
        cfg: EngineConfig,
        owners: Vec<Option<u8>>,
    ) -> Result<Engine, crate::ConfigError> {
        use crate::ConfigError;
        if owners.len() != cfg.buffers {
            return Err(ConfigError::OwnersMismatch {
                owners: owners.len(),
                buffers: cfg.buffers,
            });
        }
        if let Some(&f) = cfg
            .slots
            .iter()
            .find(|&&f| !owners.iter().any(|o| o.is_none_or(|g| g == f)))
        {
            return Err(ConfigError::NoBufferForFunction(f));
        }
        Engine::build(cfg, Some(owners))
    }

    fn build(
        cfg: EngineConfig,
        owners: Option<Vec<Option<u8>>>,
    ) -> Result<Engine, crate::ConfigError> {
        cfg.validate()?;
        let pool = match owners {
            Some(o) => ReassemblyPool::partitioned(cfg.buffer_bytes, cfg.buffer_policy, o),
            None => ReassemblyPool::new(cfg.buffers, cfg.buffer_bytes, cfg.buffer_policy),
        };
        let slots: Vec<SlotQueue> = cfg
            .slots
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                let depth = cfg.slot_queue_depths.get(i).copied().flatten();
                SlotQueue::with_depth(f, cfg.slot_queue_bytes, depth)
            })
            .collect();
        Ok(Engine {
            pool,
            selector: Selector::new(&slots, cfg.slot_policy),
            slots,
            small: VecDeque::new(),
            small_bytes: 0,
            chained: VecDeque::new(),
            chained_bytes: 0,
            conns: FxHashMap::default(),
            next_conn: 0,
            running: vec![None; cfg.slots.len()],
            timers: BinaryHeap::new(),
            actions: VecDeque::new(),
            stats: EngineStats::default(),
            shutting_down: false,
            drain_from: 0,
            reply_endpoints: Box::new([None; 256]),
            paused: vec![false; cfg.slots.len()],
            tenancy: Tenancy::default(),
            usage: FxHashMap::default(),
            owners: Box::new([None; 256]),
            buffers: Buffers::new(crate::DEFAULT_BUFFER_BUDGET),
            requeued: false,
            cfg,
        })
    }

    /// The node's named buffers.
    pub fn buffers(&self) -> &Buffers {
        &self.buffers
    }

    /// The node's named buffers, for the driver's collectives.
    pub fn buffers_mut(&mut self) -> &mut Buffers {
        &mut self.buffers
    }

    /// The budget a tenant's named buffers may keep, if it has one.
    pub fn buffer_budget_of(&self, tenant: TenantKey) -> Option<u64> {
        self.tenancy.policy(tenant).max_buffer_bytes
    }

    /// The node's tenants: weights, quotas, whether anonymous connections
    /// are served.
    pub fn set_tenancy(&mut self, tenancy: Tenancy) {
        for s in &mut self.slots {
            s.set_quantum(tenancy.quantum_ns);
        }
        self.tenancy = tenancy;
    }

    pub fn tenancy(&self) -> &Tenancy {
        &self.tenancy
    }

    /// An authenticated hello on `conn` named `tenant`: its requests from now
    /// on are that tenant's. A connection belongs to one tenant: `false`
    /// (and nothing changes) if it already said another one, or is unknown.
    pub fn attribute(&mut self, conn: ConnId, tenant: u16) -> bool {
        match self.conns.get_mut(&conn) {
            Some(c) if c.tenant.is_none_or(|t| t == tenant) => {
                c.tenant = Some(tenant);
                true
            }
            _ => false,
        }
    }

    /// An authenticated hello of another node on `conn`: its requests are
    /// hops forwarded by that node, each its origin tenant's (the header's
    /// `tenant`; [`offrac_proto::TENANT_NODE`]: an anonymous origin).
    /// `false` (and nothing changes) if the connection belongs to a tenant.
    pub fn attribute_peer(&mut self, conn: ConnId) -> bool {
        match self.conns.get_mut(&conn) {
            Some(c) if c.tenant.is_none() => {
                c.peer = true;
                true
            }
            _ => false,
        }
    }

    /// The tenant a request `h` on `conn` is charged to and restricted as.
    fn request_tenant(&self, conn: ConnId, h: &RequestHeader) -> (TenantKey, bool) {
        match self.conns.get(&conn) {
            Some(c) if c.peer => (
                (h.tenant != offrac_proto::TENANT_NODE).then_some(h.tenant),
                true,
            ),
            c => (c.and_then(|c| c.tenant), false),
        }
    }

    /// The tenant `conn` is attributed to (`None`: anonymous or unknown).
    pub fn tenant_of(&self, conn: ConnId) -> TenantKey {
        self.conns.get(&conn).and_then(|c| c.tenant)
    }

    /// `function` is `tenant`'s own (a module it swapped in; only its
    /// connections see it), or shared (`None`).
    pub fn set_owner(&mut self, function: u8, tenant: Option<u16>) {
        self.owners[function as usize] = tenant;
    }

    pub fn owner(&self, function: u8) -> Option<u16> {
        self.owners[function as usize]
    }

    /// What `tenant` holds now.
    pub fn usage(&self, tenant: TenantKey) -> TenantUsage {
        self.usage.get(&tenant).copied().unwrap_or_default()
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The device table changed: hops to `peers` are forwarded from now on,
    /// hops to any other device are answered `UNREACHABLE` at admission.
    pub fn set_peers(&mut self, peers: Vec<u8>) {
        self.cfg.peers = peers;
    }

    /// A new connection; its handle is never reused.
    pub fn open(&mut self, now: Instant) -> ConnId {
        // Skip ids a driver already used implicitly through `handle_bytes`.
        while self.conns.contains_key(&self.next_conn) {
            self.next_conn += 1;
        }
        let id = self.next_conn;
        self.next_conn += 1;
        self.conns.insert(id, Connection::new(now));
        id
    }

    /// Answers the engine still owes `conn`: its complete requests not yet
    /// finished by a slot.
    pub fn held(&self, conn: ConnId) -> u32 {
        self.conns.get(&conn).map_or(0, |c| c.held)
    }

    /// Bytes arrived on `conn` at `now` (an id not seen before is opened implicitly).
    pub fn handle_bytes(&mut self, now: Instant, conn: ConnId, mut data: &[u8]) {
        let c = self
            .conns
            .entry(conn)
            .or_insert_with(|| Connection::new(now));
        if data.is_empty() {
            return;
        }
        c.last_progress = now;
        let mut rx = std::mem::replace(&mut c.rx, Rx::Closed);
        while !data.is_empty() {
            rx = self.feed(now, conn, rx, &mut data);
        }
        self.fed(now, conn, rx);
    }

    /// The payload `conn` is reading, while it still needs bytes, and how
    /// many: a shell may append up to that many bytes of the connection's
    /// stream straight to it (a read into its spare capacity) and then call
    /// [`Engine::handle_payload_read`]. Those bytes are not copied again, as
    /// [`Engine::handle_bytes`] copies its slice into the payload. `None`
    /// when the connection is not in a payload (a header, a refused
    /// request's bytes to skip, …): read into a buffer and hand it to
    /// [`Engine::handle_bytes`].
    pub fn payload_room(&mut self, conn: ConnId) -> Option<(&mut Vec<u8>, usize)> {
        match self.conns.get_mut(&conn).map(|c| &mut c.rx) {
            Some(Rx::Payload {
                header,
                payload,
                diverted: 0,
                ..
            }) => {
                let need = (header.payload_len as usize).saturating_sub(payload.len());
                (need > 0).then_some((payload, need))
            }
            _ => None,
        }
    }

    /// The request `conn` is reading the payload of, while it still needs
    /// bytes: its header, the payload bytes in so far, and how many bytes
    /// followed them elsewhere ([`Engine::handle_diverted_read`]). For a
    /// driver that decides from a payload's first bytes (a collective's
    /// descriptor) where the rest goes.
    pub fn payload_in(&self, conn: ConnId) -> Option<(&RequestHeader, &[u8], usize)> {
        let rx = &self.conns.get(&conn)?.rx;
        match rx {
            Rx::Payload {
                header,
                payload,
                diverted,
                ..
            } if rx.payload_left() > Some(0) => Some((header, payload.as_slice(), *diverted)),
            _ => None,
        }
    }

    /// `n` more bytes of the payload `conn` is reading arrived at `now`,
    /// read by the driver straight into a place of its own (a collective's
    /// posted receive) rather than into the payload: counted, not kept.
    /// From the first such read on, every byte of the payload goes there
    /// ([`Engine::payload_room`] says `None`); the request completes as
    /// usual, its [`Job::diverted`] saying how many bytes went elsewhere.
    pub fn handle_diverted_read(&mut self, now: Instant, conn: ConnId, n: usize) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let n = n.min(c.rx.payload_left().unwrap_or(0));
        let Rx::Payload { diverted, .. } = &mut c.rx else {
            return;
        };
        if n == 0 {
            return;
        }
        *diverted += n;
        c.last_progress = now;
        self.stats.payload_bytes_direct += n as u64;
        self.stats.payload_bytes_diverted += n as u64;
        let rx = std::mem::replace(&mut c.rx, Rx::Closed);
        let rx = self.feed(now, conn, rx, &mut &[][..]);
        self.fed(now, conn, rx);
    }

    /// The rest of the payload `conn` is reading has nowhere to go (the
    /// driver's place for it went away, e.g. its collective ended): the
    /// request is dropped unanswered and the rest of its payload skipped.
    pub fn discard_payload(&mut self, now: Instant, conn: ConnId) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let Some(remaining) = c.rx.payload_left() else {
            return;
        };
        let rx = std::mem::replace(&mut c.rx, discard(remaining as u64, now));
        self.collect(rx);
    }

    /// `n` bytes arrived on `conn` at `now`, appended by the shell to the
    /// payload [`Engine::payload_room`] gave (at most the bytes it needed).
    pub fn handle_payload_read(&mut self, now: Instant, conn: ConnId, n: usize) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if n == 0 {
            return;
        }
        c.last_progress = now;
        self.stats.payload_bytes_direct += n as u64;
        let rx = std::mem::replace(&mut c.rx, Rx::Closed);
        // No bytes to feed: the payload state only checks whether it is whole.
        let rx = match rx {
            rx @ Rx::Payload { .. } => self.feed(now, conn, rx, &mut &[][..]),
            other => other,
        };
        self.fed(now, conn, rx);
    }

    /// The end of a read: `rx` is the connection's state after it.
    fn fed(&mut self, now: Instant, conn: ConnId, rx: Rx) {
        let c = self.conns.get_mut(&conn).expect("connection present");
        c.rx = rx;
        if c.is_partial() && !c.timer_armed {
            if let Some(due) = due(&self.cfg, c) {
                c.timer_armed = true;
                self.timers.push(Reverse((due, conn)));
            }
        }
        self.drain(now);
    }

    /// The driver stops (`false`) or resumes reading `conn` (its client does
    /// not read its answers). While paused, a partial request is not a stall
    /// — the node chose not to read — but its reassembly deadline still runs.
    pub fn set_reading(&mut self, now: Instant, conn: ConnId, reading: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.paused = !reading;
        if reading {
            c.last_progress = now;
        }
        if c.is_partial() && !c.timer_armed {
            if let Some(due) = due(&self.cfg, c) {
                c.timer_armed = true;
                self.timers.push(Reverse((due, conn)));
            }
        }
    }

    /// The connection is gone: collect its partial request, if any, and
    /// forget it as a reply endpoint.
    pub fn handle_close(&mut self, _now: Instant, conn: ConnId) {
        if let Some(c) = self.conns.remove(&conn) {
            let msg = "its caller's connection closed before the call was complete";
            self.refused_partial(&c.rx, Status::Unreachable, msg);
            self.collect(c.rx);
        }
        for e in self.reply_endpoints.iter_mut() {
            if e.is_some_and(|e| e.conn == conn) {
                *e = None;
            }
        }
    }

    /// Where the answer to request `h`, received on `conn`, goes: its reply
    /// endpoint if it names one that is registered, else `conn`. A direct
    /// reply goes to its endpoint only if the endpoint was registered with
    /// the request's tenant (another tenant's endpoint of the same id is not
    /// its caller); otherwise back to the sender, which relays it on
    /// towards the caller. A forwarding node that sent it gets a receipt.
    pub fn answer_route(&self, conn: ConnId, h: &RequestHeader) -> Route {
        let back = Route {
            to: conn,
            request_id: h.request_id,
            receipt: None,
        };
        if h.reply_device == DEVICE_SELF {
            return back;
        }
        let endpoint = self.reply_endpoints[h.reply_device as usize];
        if !h.direct_reply() {
            return endpoint.map_or(back, |e| Route { to: e.conn, ..back });
        }
        match endpoint {
            Some(e) if e.tenant == h.tenant && e.conn != conn => Route {
                to: e.conn,
                request_id: h.caller_id(),
                receipt: h.forwarded().then_some(conn),
            },
            _ => back,
        }
    }

    /// `slot` finished the job it was dispatched (its answer is the driver's
    /// to write). Its tenant is charged the time since dispatch.
    pub fn handle_slot_done(&mut self, now: Instant, slot: SlotId) {
        self.handle_slot_finished(now, slot, None);
    }

    /// `slot` finished the job it was dispatched, which ran for `exec_ns`
    /// as the worker measured it (`None`: the time since dispatch): that
    /// is what its tenant is charged in the slot's DRR.
    pub fn handle_slot_finished(&mut self, now: Instant, slot: SlotId, exec_ns: Option<u64>) {
        let running = self.running[slot].take();
        let cost = exec_ns.unwrap_or_else(|| {
            running.map_or(0, |(_, _, at)| crate::nanos(now.saturating_since(at)))
        });
        let was_busy = self.slots[slot].finish_charged(cost);
        debug_assert!(was_busy, "slot {slot} was not busy");
        if let Some((conn, tenant, _)) = running {
            self.settle(conn, tenant);
        }
        self.stats.completed += 1;
        self.start(now, slot);
        self.drain(now);
    }

    /// `slot` ran one hop of a chain that goes on: `job` has been advanced
    /// ([`Job::advance`]) to its next hop, which is queued to a slot hosting
    /// that function (handed over, not copied). The request stays held: its
    /// answer is still owed.
    pub fn handle_hop_done(&mut self, now: Instant, slot: SlotId, job: Job) {
        // The hop that ran is the one before the job's current hop.
        let ran = job.header.hop_index.wrapping_sub(1) as usize % offrac_proto::MAX_HOPS;
        let exec_ns = job.times[ran].exec_ns;
        let was_busy = self.slots[slot].finish_charged(exec_ns);
        debug_assert!(was_busy, "slot {slot} was not busy");
        self.running[slot] = None;
        self.stats.hops += 1;
        self.route(job);
        self.start(now, slot);
        self.drain(now);
    }

    /// Time passed: answer `TIMEOUT` for requests past the reassembly deadline
    /// (the connection stays: the rest of that request is discarded) and
    /// collect connections stalled mid-request past the stall timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(&Reverse((deadline, conn))) = self.timers.peek() {
            if deadline > now {
                break;
            }
            self.timers.pop();
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            if !c.is_partial() {
                c.timer_armed = false;
                continue;
            }
            if let Rx::Payload {
                first_byte_at,
                header,
                payload,
                diverted,
                ..
            } = &c.rx
            {
                let received = payload.len() + diverted;
                if reassembly_deadline(&self.cfg, *first_byte_at, received) <= now {
                    let remaining = header.payload_len as u64 - received as u64;
                    let rx = std::mem::replace(&mut c.rx, Rx::Discard { remaining });
                    match due(&self.cfg, c) {
                        Some(due) => self.timers.push(Reverse((due, conn))),
                        None => c.timer_armed = false,
                    }
                    let msg = "request not complete within the reassembly timeout";
                    if let Rx::Payload { header, .. } = &rx {
                        let h = *header;
                        self.reply_to(conn, &h, Status::Timeout, 0, msg);
                    }
                    self.refused_partial(&rx, Status::Timeout, msg);
                    self.collect(rx);
                    continue;
                }
            }
            match due(&self.cfg, c) {
                Some(due) if due > now => {
                    self.timers.push(Reverse((due, conn)));
                    continue;
                }
                // Not reading it is the driver's choice, not a stall.
                None => {
                    c.timer_armed = false;
                    continue;
                }
                Some(_) => {}
            }
            c.timer_armed = false;
            let msg = "request stalled past the stall timeout";
            self.retire(conn, Status::Timeout, msg);
        }
    }

    /// Stop admitting: refuse new requests and partial ones; complete ones still run.
    /// A request partway through its payload is answered `SHUTTING_DOWN` at
    /// once and the rest of it discarded, so the requests behind it on the
    /// connection are read and answered too; one partway through its header
    /// cannot be skipped, so its connection is retired.
    pub fn begin_shutdown(&mut self, _now: Instant) {
        self.shutting_down = true;
        let mut partial: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, c)| c.is_partial())
            .map(|(&k, _)| k)
            .collect();
        partial.sort_unstable();
        let msg = "node is shutting down";
        for conn in partial {
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            match &c.rx {
                Rx::Payload {
                    header,
                    payload,
                    diverted,
                    ..
                } => {
                    let remaining = header.payload_len as u64 - (payload.len() + diverted) as u64;
                    let rx = std::mem::replace(&mut c.rx, Rx::Discard { remaining });
                    if let Rx::Payload { header, .. } = &rx {
                        let h = *header;
                        self.reply_to(conn, &h, Status::ShuttingDown, 0, msg);
                    }
                    self.collect(rx);
                }
                Rx::Ext { header, have, .. } => {
                    let h = *header;
                    let remaining = (EXT_LEN - have) as u64 + h.payload_len as u64;
                    c.rx = Rx::Discard { remaining };
                    self.reply_to(conn, &h, Status::ShuttingDown, 0, msg);
                }
                // Already answered: the rest is read and dropped.
                Rx::Discard { .. } | Rx::Peek(_) => {}
                _ => self.retire(conn, Status::ShuttingDown, msg),
            }
        }
    }

    /// The grace period is over: answer `SHUTTING_DOWN` to every complete
    /// request still waiting (small queue, buffers, slot queues). Running ones
    /// finish and are answered as usual.
    pub fn abort_queued(&mut self, _now: Instant) {
        let mut waiting: Vec<Job> = self.chained.drain(..).collect();
        self.chained_bytes = 0;
        waiting.extend(self.small.drain(..));
        self.small_bytes = 0;
        for b in 0..self.pool.len() {
            while let Some(job) = self.take_pool(b, 0) {
                waiting.push(job);
            }
        }
        for slot in &mut self.slots {
            waiting.extend(slot.drain());
        }
        self.stats.aborted += waiting.len() as u64;
        for job in waiting {
            self.reply_to(
                job.conn,
                &job.header,
                Status::ShuttingDown,
                0,
                "node is shutting down: the grace period ended before this request ran",
            );
            self.settle(job.conn, job.tenant);
        }
    }

    /// Nothing admitted is waiting or running.
    pub fn is_idle(&self) -> bool {
        self.small.is_empty()
            && self.chained.is_empty()
            && self.pool.ready_count() == 0
            && self.slots.iter().all(|s| !s.is_busy() && s.depth() == 0)
    }

    /// The next thing to do, if any.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When [`Engine::handle_timeout`] next has work (may be early, never late).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    pub fn stats(&self) -> &EngineStats {
        &self.stats
    }

    pub fn slots(&self) -> &[SlotQueue] {
        &self.slots
    }

    pub fn pool(&self) -> &ReassemblyPool {
        &self.pool
    }

    /// Requests and payload bytes waiting in the small-request queue.
    pub fn small_queue(&self) -> (usize, u64) {
        (self.small.len(), self.small_bytes)
    }

    pub fn connections(&self) -> usize {
        self.conns.len()
    }

    /// Advance `rx` over the front of `data`.
    fn feed(&mut self, now: Instant, conn: ConnId, rx: Rx, data: &mut &[u8]) -> Rx {
        match rx {
            Rx::Header {
                mut bytes,
                have,
                first_byte_at,
            } => {
                let first_byte_at = if have == 0 { now } else { first_byte_at };
                let n = (HEADER_LEN - have).min(data.len());
                bytes[have..have + n].copy_from_slice(&data[..n]);
                *data = &data[n..];
                if have + n < HEADER_LEN {
                    return Rx::Header {
                        bytes,
                        have: have + n,
                        first_byte_at,
                    };
                }
                self.on_header(now, conn, &bytes, first_byte_at, data)
            }
            Rx::Ext {
                header,
                mut bytes,
                have,
                first_byte_at,
            } => {
                let n = (EXT_LEN - have).min(data.len());
                bytes[have..have + n].copy_from_slice(&data[..n]);
                *data = &data[n..];
                if have + n < EXT_LEN {
                    return Rx::Ext {
                        header,
                        bytes,
                        have: have + n,
                        first_byte_at,
                    };
                }
                let mut h = header;
                match h.decode_ext(&bytes) {
                    Ok(()) => self.admit(now, conn, h, first_byte_at, data),
                    Err(e) => {
                        let msg = format!("hop extension: {e}");
                        self.reply_to(conn, &header, Status::Malformed, 0, &msg);
                        discard(header.payload_len as u64, now)
                    }
                }
            }
            Rx::Payload {
                header,
                mut payload,
                buffer,
                first_byte_at,
                tenant,
                diverted,
            } => {
                let need = header.payload_len as usize - payload.len() - diverted;
                if diverted > 0 && !data.is_empty() {
                    // After a diversion every byte goes to the driver's
                    // place: bytes handed here lost theirs, and the request
                    // its body. Dropped; the rest is skipped.
                    let rx = Rx::Payload {
                        header,
                        payload,
                        buffer,
                        first_byte_at,
                        tenant,
                        diverted,
                    };
                    self.collect(rx);
                    return discard(need as u64, now);
                }
                let n = need.min(data.len());
                payload.extend_from_slice(&data[..n]);
                self.stats.payload_bytes_copied += n as u64;
                *data = &data[n..];
                if n < need {
                    return Rx::Payload {
                        header,
                        payload,
                        buffer,
                        first_byte_at,
                        tenant,
                        diverted,
                    };
                }
                let mut job = Job::new(conn, header, payload, first_byte_at, now);
                job.tenant = tenant;
                job.diverted = diverted as u64;
                self.pool.finish(buffer, job);
                self.hold(conn);
                Rx::idle(now)
            }
            Rx::Peek(mut p) => {
                let n = (COLLECTIVE_HEAD_LEN - p.have).min(data.len());
                p.head[p.have..p.have + n].copy_from_slice(&data[..n]);
                *data = &data[n..];
                p.have += n;
                if p.have < COLLECTIVE_HEAD_LEN {
                    return Rx::Peek(p);
                }
                let Peek {
                    head,
                    rest,
                    status,
                    message,
                    ..
                } = *p;
                self.actions.push_back(Action::RefusedCollective {
                    head: Box::new(head),
                    status,
                    message,
                });
                discard(rest, now)
            }
            Rx::Discard { remaining } => {
                let n = remaining.min(data.len() as u64);
                *data = &data[n as usize..];
                if n < remaining {
                    Rx::Discard {
                        remaining: remaining - n,
                    }
                } else {
                    Rx::idle(now)
                }
            }
            Rx::Closed => {
                *data = &[];
                Rx::Closed
            }
        }
    }

    /// A whole header has arrived; `rest` is what followed it in the same segment.
    fn on_header(
        &mut self,
        now: Instant,
        conn: ConnId,
        bytes: &[u8; HEADER_LEN],
        first_byte_at: Instant,
        rest: &mut &[u8],
    ) -> Rx {
        self.stats.requests += 1;
        let h = match RequestHeader::decode(bytes) {
            Ok(h) => h,
            Err(e) => return self.refuse_header(conn, bytes, e),
        };
        if h.has_ext() {
            // Hops 4..8 follow in a second 64-byte beat; decide once it is here.
            let rx = Rx::Ext {
                header: h,
                bytes: [0; EXT_LEN],
                have: 0,
                first_byte_at,
            };
            return if rest.is_empty() {
                rx
            } else {
                self.feed(now, conn, rx, rest)
            };
        }
        self.admit(now, conn, h, first_byte_at, rest)
    }

    /// A whole header (with its extension, if any) has been decoded: refuse
    /// it, or admit it to the small queue or a reassembly buffer.
    fn admit(
        &mut self,
        now: Instant,
        conn: ConnId,
        h: RequestHeader,
        first_byte_at: Instant,
        rest: &mut &[u8],
    ) -> Rx {
        let len = h.payload_len as u64;
        let refuse = |engine: &mut Engine, status: Status, detail: u64, msg: &str| {
            engine.reply_to(conn, &h, status, detail, msg);
            discard(len, now)
        };
        let hop = h.current_hop();
        // Past authentication and the chain's checks: a refused collective
        // keeps its descriptor for the driver (its other ranks are told).
        let refuse_call =
            |engine: &mut Engine, rest: &mut &[u8], status: Status, detail: u64, msg: &str| {
                engine.reply_to(conn, &h, status, detail, msg);
                if hop.function == FN_COLLECTIVE
                    && h.hop_count == 1
                    && engine.is_local(hop.device)
                    && len >= COLLECTIVE_HEAD_LEN as u64
                {
                    let peek = Peek {
                        head: [0; COLLECTIVE_HEAD_LEN],
                        have: 0,
                        rest: len - COLLECTIVE_HEAD_LEN as u64,
                        status,
                        message: msg.to_string(),
                    };
                    engine.feed(now, conn, Rx::Peek(Box::new(peek)), rest)
                } else {
                    discard(len, now)
                }
            };
        if self.shutting_down {
            return refuse(self, Status::ShuttingDown, 0, "node is shutting down");
        }
        let (tenant, peer) = self.request_tenant(conn, &h);
        // A control request authenticates itself (the hello is one).
        if hop.function != FN_CONTROL {
            if !peer
                && h.flags & offrac_proto::FLAG_FORWARDED != 0
                && self.tenancy.authenticated_links
            {
                let msg = "a forwarded hop from a connection that did not say a node's hello";
                return refuse(self, Status::Unauthorized, 0, msg);
            }
            match tenant {
                Some(t) if !peer && h.tenant != t => {
                    let msg = format!(
                        "the request says tenant {}, its connection's hello said tenant {t}",
                        h.tenant
                    );
                    return refuse(self, Status::Unauthorized, 0, &msg);
                }
                None if self.tenancy.refuse_anonymous => {
                    let msg =
                        "this node refuses anonymous requests: send an authenticated hello first";
                    return refuse(self, Status::Unauthorized, 0, msg);
                }
                _ => {}
            }
        }
        if hop.function == FN_REGISTER_REPLY {
            return self.register_reply(now, conn, &h);
        }
        if hop.function == FN_DESCRIBE {
            if h.hop_count != 1 || len != 0 {
                let msg = "a describe request is a single hop with no payload";
                return refuse(self, Status::BadInput, 0, msg);
            }
            self.actions.push_back(Action::Describe { conn, header: h });
            return discard(len, now);
        }
        // A direct reply's endpoint may be on another node of the chain.
        if h.reply_device != DEVICE_SELF
            && !h.direct_reply()
            && self.reply_endpoints[h.reply_device as usize].is_none()
        {
            let rd = h.reply_device;
            self.reply(
                conn,
                Status::Unreachable,
                h.request_id,
                h.tenant,
                rd as u64,
                &format!("reply endpoint {rd} is not registered on this node"),
            );
            return discard(len, now);
        }
        if let Err(e) = self.check_chain(&h, tenant) {
            let mut at = h;
            at.hop_index = e.hop;
            self.reply_to(conn, &at, e.status, e.detail, &e.message);
            return discard(len, now);
        }
        if len > self.cfg.max_payload {
            let msg = format!(
                "payload of {len} bytes exceeds the maximum of {}",
                self.cfg.max_payload
            );
            return refuse_call(self, rest, Status::TooLarge, self.cfg.max_payload, &msg);
        }
        let policy = self.tenancy.policy(tenant);
        let used = self.usage(tenant);
        if let Some(max) = policy.max_inflight.filter(|&m| used.inflight >= m) {
            let msg = format!("the tenant has {max} requests in flight, its quota; retry");
            return refuse_call(self, rest, Status::QuotaExceeded, max as u64, &msg);
        }
        let arrived_whole = rest.len() as u64 >= len;
        let small = HEADER_LEN as u64 + len <= self.cfg.small_request_max;
        if arrived_whole && small && self.small_bytes + len <= self.cfg.small_queue_bytes {
            let (payload, tail) = rest.split_at(len as usize);
            *rest = tail;
            let mut job = Job::new(conn, h, payload.to_vec(), first_byte_at, now);
            self.stats.payload_bytes_copied += len;
            job.tenant = tenant;
            self.small_bytes += len;
            self.small.push_back(job);
            self.usage.entry(tenant).or_default().inflight += 1;
            self.hold(conn);
            self.stats.admitted += 1;
            self.stats.admitted_small += 1;
            return Rx::idle(now);
        }
        if let Some(max) = policy.max_pool_bytes.filter(|&m| used.pool_bytes + len > m) {
            let msg = format!(
                "the tenant holds {} reassembly bytes; {len} more would pass its quota of {max}; retry",
                used.pool_bytes
            );
            return refuse_call(self, rest, Status::QuotaExceeded, max, &msg);
        }
        let Some(buffer) = self.pool.admit_for(len, Some(hop.function)) else {
            return refuse_call(
                self,
                rest,
                Status::Busy,
                0,
                "no eligible reassembly buffer; retry",
            );
        };
        self.stats.admitted += 1;
        let u = self.usage.entry(tenant).or_default();
        u.inflight += 1;
        u.pool_bytes += len;
        if len == 0 {
            let mut job = Job::new(conn, h, Vec::new(), first_byte_at, now);
            job.tenant = tenant;
            self.pool.finish(buffer, job);
            self.hold(conn);
            return Rx::idle(now);
        }
        Rx::Payload {
            header: h,
            payload: Vec::with_capacity(len as usize),
            buffer,
            first_byte_at,
            tenant,
            diverted: 0,
        }
    }

    /// A `FN_REGISTER_REPLY` request: make `conn` the reply endpoint asked
    /// for (or any free one) and answer `OK` with its id in `detail`.
    fn register_reply(&mut self, now: Instant, conn: ConnId, h: &RequestHeader) -> Rx {
        let len = h.payload_len as u64;
        let taken = |e: &Engine, id: u8| {
            id == DEVICE_SELF
                || id == e.cfg.device_id
                || e.cfg.peers.contains(&id)
                || e.reply_endpoints[id as usize].is_some_and(|e| e.conn != conn)
        };
        let wanted = h.current_hop().param;
        let id = if h.hop_count != 1 || len != 0 {
            Err("a registration is a single hop with no payload".to_string())
        } else if wanted == DEVICE_SELF as u64 {
            (0..=254u8)
                .find(|&i| !taken(self, i))
                .ok_or_else(|| "every reply endpoint id is in use".to_string())
        } else if wanted > 254 || taken(self, wanted as u8) {
            Err(format!(
                "endpoint {wanted} is not free: a device id, another connection's endpoint, or not 0..=254"
            ))
        } else {
            Ok(wanted as u8)
        };
        match id {
            Ok(id) => {
                self.reply_endpoints[id as usize] = Some(Endpoint {
                    conn,
                    tenant: h.tenant,
                });
                let mut header = ResponseHeader::answer(h, Status::Ok, self.cfg.device_id, 0);
                header.detail = id as u64;
                self.actions.push_back(Action::Reply {
                    conn,
                    header,
                    message: String::new(),
                });
            }
            Err(msg) => self.reply_to(conn, h, Status::BadInput, 0, &msg),
        }
        discard(len, now)
    }

    /// Every hop this node will run before the chain leaves it must be one
    /// it can run: checked at admission, so a request is not half run
    /// before a hop fails for want of a slot.
    fn check_chain(&self, h: &RequestHeader, tenant: TenantKey) -> Result<(), HopError> {
        for i in h.hop_index..h.hop_count {
            let hop = h.hops[i as usize];
            if !self.is_local(hop.device) {
                if self.cfg.peers.contains(&hop.device) {
                    return Ok(()); // the next device checks the rest
                }
                return Err(HopError {
                    hop: i,
                    status: Status::Unreachable,
                    detail: hop.device as u64,
                    message: format!(
                        "hop {i} runs on device {}, which is not in this node's device table",
                        hop.device
                    ),
                });
            }
            if hop.function == FN_COLLECTIVE && h.hop_count > 1 {
                // A collective hop: the driver runs it (its descriptor is
                // the named buffer in `param`, read when the hop starts).
                continue;
            }
            if node_function(hop.function) {
                if h.hop_count != 1 {
                    return Err(HopError {
                        hop: i,
                        status: Status::BadInput,
                        detail: 0,
                        message: "a control request is a single hop".into(),
                    });
                }
                return Ok(());
            }
            if hop.function == FN_BUFFER {
                if let Err(e) = decode_buffer_param(hop.param) {
                    return Err(HopError {
                        hop: i,
                        status: Status::BadInput,
                        detail: 0,
                        message: format!("hop {i}: {e}"),
                    });
                }
                continue;
            }
            // Another tenant's module is not there for this one.
            let hidden = self.owners[hop.function as usize].is_some_and(|o| tenant != Some(o));
            if hidden || self.selector.hosts(hop.function).is_empty() {
                if !hidden && self.reconfiguring(hop.function) {
                    return Err(HopError {
                        hop: i,
                        status: Status::Busy,
                        detail: 0,
                        message: format!(
                            "every slot of function {} is being reconfigured; retry",
                            hop.function
                        ),
                    });
                }
                return Err(HopError {
                    hop: i,
                    status: Status::UnknownFunction,
                    detail: hop.function as u64,
                    message: format!("no slot hosts function {} (hop {i})", hop.function),
                });
            }
        }
        Ok(())
    }

    fn is_local(&self, device: u8) -> bool {
        device == DEVICE_SELF || device == self.cfg.device_id
    }

    /// The job's current hop is this node's (else it is forwarded once complete).
    fn runs_here(&self, job: &Job) -> bool {
        self.is_local(job.header.current_hop().device)
    }

    /// Queue a chain's next hop, or forward it if it runs elsewhere
    /// (admission checked the chain, so only room can be missing; an output
    /// larger than any request may be is refused).
    fn route(&mut self, job: Job) {
        let cost = job.cost();
        let hop = job.header.current_hop();
        if !self.is_local(hop.device) {
            return self.forward(job);
        }
        let refusal = if cost > self.cfg.max_payload {
            let max = self.cfg.max_payload;
            Some((
                Status::TooLarge,
                max,
                format!(
                    "hop {} input of {cost} bytes exceeds the maximum of {max}",
                    job.header.hop_index
                ),
            ))
        } else if self.chained_bytes + cost > self.cfg.slot_queue_bytes {
            let msg = format!(
                "no room to queue hop {} (function {}); retry",
                job.header.hop_index, hop.function
            );
            Some((Status::Busy, 0, msg))
        } else {
            None
        };
        match refusal {
            Some((status, detail, msg)) => {
                self.reply_to(job.conn, &job.header, status, detail, &msg);
                self.settle(job.conn, job.tenant);
            }
            None => {
                self.chained_bytes += cost;
                self.chained.push_back(job);
            }
        }
    }

    /// Hand `job` to the driver for its hop's device; the engine's part of
    /// its answer is done.
    fn forward(&mut self, job: Job) {
        // A load's output stays two parts: the driver writes the kept buffer
        // as it is.
        self.settle(job.conn, job.tenant);
        self.stats.forwarded += 1;
        self.actions.push_back(Action::Forward { job });
    }

    /// A complete request the slots do not run: forwarded, or a control
    /// request for the driver.
    fn leave(&mut self, mut job: Job) {
        if node_function(job.function()) && self.runs_here(&job) {
            self.flatten(&mut job);
            self.settle(job.conn, job.tenant);
            self.actions.push_back(Action::Control { job });
        } else {
            self.forward(job);
        }
    }

    /// Some slot that hosted `function` is paused for a swap.
    fn reconfiguring(&self, function: u8) -> bool {
        self.slots
            .iter()
            .zip(&self.paused)
            .any(|(s, &p)| p && s.function == function)
    }

    fn rebuild_selector(&mut self) {
        self.selector = Selector::with_mask(&self.slots, &self.paused, self.cfg.slot_policy);
    }

    /// Stop choosing `slot` for new requests (the first steps of a swap,
    /// `docs/control.md`). Its running request, if any, finishes.
    pub fn pause_slot(&mut self, _now: Instant, slot: SlotId) {
        if let Some(p) = self.paused.get_mut(slot) {
            *p = true;
            self.rebuild_selector();
        }
    }

    /// Empty a paused slot's queue: its requests go to the other slots of
    /// its function (`to_replica`), or are answered `BUSY`. Returns how
    /// many were handed on and how many refused.
    pub fn hand_off(&mut self, now: Instant, slot: SlotId, to_replica: bool) -> (u64, u64) {
        let Some(q) = self.slots.get_mut(slot) else {
            return (0, 0);
        };
        let jobs = q.drain();
        let (mut handed, mut refused) = (0, 0);
        // Last first: pushed to the front, they keep their order.
        for job in jobs.into_iter().rev() {
            if to_replica && !self.selector.hosts(job.function()).is_empty() {
                // Already counted against a slot queue's bound: kept ahead
                // of newer work, beyond the chained queue's own bound.
                self.chained_bytes += job.cost();
                self.chained.push_front(job);
                handed += 1;
            } else {
                let msg = format!("slot {slot} is being reconfigured; retry");
                self.reply_to(job.conn, &job.header, Status::Busy, 0, &msg);
                self.settle(job.conn, job.tenant);
                refused += 1;
            }
        }
        self.drain(now);
        (handed, refused)
    }

    /// `slot` serves `function` from now on (the end of a swap, or its
    /// roll-back). Requests still waiting for a function no slot hosts any
    /// more are answered `UNKNOWN_FUNCTION`.
    pub fn resume_slot(&mut self, now: Instant, slot: SlotId, function: u8) {
        if slot >= self.slots.len() {
            return;
        }
        self.slots[slot].function = function;
        self.cfg.slots[slot] = function;
        self.paused[slot] = false;
        self.rebuild_selector();
        self.orphans();
        self.drain(now);
    }

    /// Whether `slot` is paused for a swap.
    pub fn is_paused(&self, slot: SlotId) -> bool {
        self.paused.get(slot).copied().unwrap_or(false)
    }

    /// Answer the waiting requests whose function lost its last slot.
    fn orphans(&mut self) {
        let gone = |e: &Engine, job: &Job| {
            let f = job.function();
            e.runs_here(job)
                && !node_function(f)
                && e.selector.hosts(f).is_empty()
                && !e.reconfiguring(f)
        };
        let mut lost = Vec::new();
        let mut i = 0;
        while i < self.small.len() {
            if gone(self, &self.small[i]) {
                let job = self.small.remove(i).expect("index in range");
                self.small_bytes -= job.cost();
                lost.push(job);
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.chained.len() {
            if gone(self, &self.chained[i]) {
                let job = self.chained.remove(i).expect("index in range");
                self.chained_bytes -= job.cost();
                lost.push(job);
            } else {
                i += 1;
            }
        }
        for b in 0..self.pool.len() {
            let mut i = 0;
            while let Some(job) = self.pool.ready(b).get(i) {
                if gone(self, job) {
                    lost.push(self.take_pool(b, i).expect("index in range"));
                } else {
                    i += 1;
                }
            }
        }
        for job in lost {
            let f = job.function();
            let msg = format!("function {f} is no longer hosted by any slot (swapped out)");
            self.reply_to(
                job.conn,
                &job.header,
                Status::UnknownFunction,
                f as u64,
                &msg,
            );
            self.settle(job.conn, job.tenant);
        }
    }

    fn refuse_header(&mut self, conn: ConnId, bytes: &[u8; HEADER_LEN], e: HeaderError) -> Rx {
        let id = RequestHeader::peek_request_id(bytes);
        let msg = e.to_string();
        match e {
            // The stream cannot be trusted past this header: answer, then stop
            // reading. Requests already admitted are still answered first.
            HeaderError::BadMagic(_) => {
                self.reply(conn, Status::Malformed, REQUEST_ID_NONE, 0, 0, &msg)
            }
            HeaderError::BadVersion { .. } => self.reply(
                conn,
                Status::UnsupportedVersion,
                id,
                0,
                VERSION as u64,
                &msg,
            ),
            _ => {
                self.reply(conn, Status::Malformed, id, 0, 0, &msg);
                // The flag says a hop extension follows, whatever else is wrong.
                let ext = if bytes[3] & FLAG_HOP_EXT != 0 {
                    EXT_LEN as u64
                } else {
                    0
                };
                let len = u32::from_le_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]) as u64;
                return discard(ext + len, Instant::default());
            }
        }
        self.actions.push_back(Action::Close { conn });
        Rx::Closed
    }

    /// Stop reading `conn`: answer its partial request (if any) with `status`,
    /// free what it held, and ask the driver to close it. A request already
    /// answered (one being discarded) gets no second answer.
    fn retire(&mut self, conn: ConnId, status: Status, msg: &str) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let rx = std::mem::replace(&mut c.rx, Rx::Closed);
        let id = match &rx {
            Rx::Payload { header, .. } | Rx::Ext { header, .. } => {
                Some((header.request_id, header.tenant))
            }
            Rx::Header { bytes, have, .. } if *have >= 16 => {
                Some((RequestHeader::peek_request_id(bytes), 0))
            }
            Rx::Header { have, .. } if *have > 0 => Some((REQUEST_ID_NONE, 0)),
            _ => None,
        };
        if let Some((id, tenant)) = id {
            self.reply(conn, status, id, tenant, 0, msg);
        }
        self.refused_partial(&rx, status, msg);
        self.collect(rx);
        self.actions.push_back(Action::Close { conn });
    }

    /// One answer the engine owed `conn` (for `tenant`) has been given.
    fn settle(&mut self, conn: ConnId, tenant: TenantKey) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.held -= 1;
        }
        self.release(tenant, 1, 0);
    }

    /// `tenant` no longer holds `requests` in flight and `bytes` of the pool.
    fn release(&mut self, tenant: TenantKey, requests: u32, bytes: u64) {
        if let Some(u) = self.usage.get_mut(&tenant) {
            u.inflight = u.inflight.saturating_sub(requests);
            u.pool_bytes = u.pool_bytes.saturating_sub(bytes);
            if *u == TenantUsage::default() {
                self.usage.remove(&tenant);
            }
        }
    }

    /// Take a complete job out of reassembly buffer `b`: its tenant's pool
    /// bytes are free again.
    fn take_pool(&mut self, b: usize, i: usize) -> Option<Job> {
        let job = self.pool.take(b, i)?;
        self.release(job.tenant, 0, job.cost());
        Some(job)
    }

    /// A complete request from `conn` was admitted: the engine owes it an answer.
    fn hold(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.held += 1;
        }
    }

    fn reply_to(
        &mut self,
        conn: ConnId,
        h: &RequestHeader,
        status: Status,
        detail: u64,
        msg: &str,
    ) {
        let route = self.answer_route(conn, h);
        let mut header = ResponseHeader::answer(h, status, self.cfg.device_id, msg.len() as u32);
        header.detail = detail;

        let code = status.code();
        *self
            .stats
            .refusals_by_function
            .entry((h.current_hop().function, code))
            .or_default() += 1;
        let by_tenant = &mut self.stats.refusals_by_tenant;
        if by_tenant.len() < EngineStats::MAX_TENANT_SERIES
            || by_tenant.contains_key(&(h.tenant, code))
        {
            *by_tenant.entry((h.tenant, code)).or_default() += 1;
        } else {
            self.stats.refusals_tenant_overflow += 1;
        }
        let receipt = ResponseHeader::receipt_of(&header);
        header.request_id = route.request_id;
        self.push_reply(route.to, header, msg);
        if let Some(sender) = route.receipt {
            self.actions.push_back(Action::Reply {
                conn: sender,
                header: receipt,
                message: String::new(),
            });
        }
    }

    /// A reply with no decodable request header behind it.
    fn reply(
        &mut self,
        conn: ConnId,
        status: Status,
        request_id: u64,
        tenant: u16,
        detail: u64,
        msg: &str,
    ) {
        let mut header = ResponseHeader::new(status, request_id, msg.len() as u32);
        header.tenant = tenant;
        header.detail = detail;
        header.device = self.cfg.device_id;
        self.push_reply(conn, header, msg);
    }

    fn push_reply(&mut self, conn: ConnId, header: ResponseHeader, msg: &str) {
        self.stats.refusals[header.status.code() as usize] += 1;
        self.actions.push_back(Action::Reply {
            conn,
            header,
            message: msg.to_owned(),
        });
    }

    /// A partial request given up (`status`): if it is a collective for this
    /// node whose descriptor is in, the driver is told
    /// ([`Action::RefusedCollective`]).
    fn refused_partial(&mut self, rx: &Rx, status: Status, msg: &str) {
        let Rx::Payload {
            header, payload, ..
        } = rx
        else {
            return;
        };
        let hop = header.current_hop();
        if hop.function != FN_COLLECTIVE || header.hop_count != 1 || !self.is_local(hop.device) {
            return;
        }
        if let Some(head) = payload.first_chunk::<COLLECTIVE_HEAD_LEN>() {
            self.actions.push_back(Action::RefusedCollective {
                head: Box::new(*head),
                status,
                message: msg.to_string(),
            });
        }
    }

    /// Release whatever a receive state held.
    fn collect(&mut self, rx: Rx) {
        if let Rx::Payload {
            header,
            buffer,
            tenant,
            ..
        } = rx
        {
            self.pool.abort(buffer, header.payload_len as u64);
            self.release(tenant, 1, header.payload_len as u64);
            self.stats.collected += 1;
        }
    }

    /// Move complete requests from the small queue, then the buffers, to slot queues.
    /// Within a source a request whose slots are all full is skipped, not waited on,
    /// so one backed-up function cannot block the others.
    fn drain(&mut self, now: Instant) {
        // A buffer hop run on the way may queue its chain's next hop behind
        // the pass over the chained queue: pass again until none does.
        loop {
            self.requeued = false;
            self.drain_once(now);
            if !self.requeued {
                return;
            }
        }
    }

    fn drain_once(&mut self, now: Instant) {
        // (function, tenant) pairs whose slots have no room this pass.
        let mut blocked: Vec<(u8, TenantKey)> = Vec::new();
        // Chains first: their requests were admitted earliest.
        let mut i = 0;
        while i < self.chained.len() {
            let (f, cost) = (self.chained[i].function(), self.chained[i].cost());
            if f == FN_BUFFER {
                let job = self.chained.remove(i).expect("index in range");
                self.chained_bytes -= cost;
                self.run_buffer_hop(now, job);
                continue;
            }
            if f == FN_COLLECTIVE {
                let job = self.chained.remove(i).expect("index in range");
                self.chained_bytes -= cost;
                self.start_collective_hop(now, job);
                continue;
            }
            match self.pick(&mut blocked, f, self.chained[i].tenant, cost) {
                Some(slot) => {
                    let job = self.chained.remove(i).expect("index in range");
                    self.chained_bytes -= cost;
                    self.enqueue(now, slot, job);
                }
                None => i += 1,
            }
        }
        let mut i = 0;
        while i < self.small.len() {
            let (f, cost) = (self.small[i].function(), self.small[i].cost());
            if f == FN_BUFFER && self.runs_here(&self.small[i]) {
                let job = self.small.remove(i).expect("index in range");
                self.small_bytes -= cost;
                self.run_buffer_hop(now, job);
                continue;
            }
            if self.is_collective_hop(&self.small[i]) {
                let job = self.small.remove(i).expect("index in range");
                self.small_bytes -= cost;
                self.start_collective_hop(now, job);
                continue;
            }
            if !self.runs_here(&self.small[i]) || node_function(f) {
                let job = self.small.remove(i).expect("index in range");
                self.small_bytes -= cost;
                self.leave(job);
                continue;
            }
            match self.pick(&mut blocked, f, self.small[i].tenant, cost) {
                Some(slot) => {
                    let job = self.small.remove(i).expect("index in range");
                    self.small_bytes -= cost;
                    self.enqueue(now, slot, job);
                }
                None => i += 1,
            }
        }
        let n = self.pool.len();
        for k in 0..n {
            let b = (self.drain_from + k) % n;
            let mut i = 0;
            while let Some(job) = self.pool.ready(b).get(i) {
                let (f, cost, tenant) = (job.function(), job.cost(), job.tenant);
                if f == FN_BUFFER && self.runs_here(job) {
                    let job = self.take_pool(b, i).expect("index in range");
                    self.run_buffer_hop(now, job);
                    continue;
                }
                if self.is_collective_hop(job) {
                    let job = self.take_pool(b, i).expect("index in range");
                    self.start_collective_hop(now, job);
                    continue;
                }
                if !self.runs_here(job) || node_function(f) {
                    let job = self.take_pool(b, i).expect("index in range");
                    self.leave(job);
                    continue;
                }
                match self.pick(&mut blocked, f, tenant, cost) {
                    Some(slot) => {
                        let job = self.take_pool(b, i).expect("index in range");
                        self.enqueue(now, slot, job);
                    }
                    None => i += 1,
                }
            }
        }
        self.drain_from = (self.drain_from + 1) % n;
    }

    fn pick(
        &mut self,
        blocked: &mut Vec<(u8, TenantKey)>,
        f: u8,
        tenant: TenantKey,
        cost: u64,
    ) -> Option<SlotId> {
        if blocked.contains(&(f, tenant)) {
            return None;
        }
        let slot = self.selector.pick_for(f, tenant, cost, &self.slots);
        if slot.is_none() {
            blocked.push((f, tenant));
        }
        slot
    }

    fn enqueue(&mut self, now: Instant, slot: SlotId, job: Job) {
        let weight = self.tenancy.policy(job.tenant).weight;
        self.slots[slot].push_weighted(job, weight);
        self.start(now, slot);
    }

    fn start(&mut self, now: Instant, slot: SlotId) {
        while let Some(mut job) = self.slots[slot].start_next() {
            if job.expired(now) {
                // Out of budget: not run; the slot takes the next one.
                self.slots[slot].finish();
                self.expire(job);
                continue;
            }
            job.dispatched_at = Some(now);
            self.running[slot] = Some((job.conn, job.tenant, now));
            self.stats.dispatched += 1;
            self.actions.push_back(Action::Dispatch { slot, job });
            return;
        }
    }

    /// Run a named buffer's hop (`docs/protocol.md`, "Named buffers") at
    /// once, on the engine's own state: the chain goes on with its output,
    /// or its answer is that output. The job is held, as a slot's would be.
    fn run_buffer_hop(&mut self, now: Instant, mut job: Job) {
        if job.expired(now) {
            return self.expire(job);
        }
        let hop = job.header.current_hop();
        let device = self.cfg.device_id;
        let (op, name) = match decode_buffer_param(hop.param) {
            Ok(p) => p,
            Err(e) => {
                // Admission checked the hops up to the first remote one only.
                let msg = format!("hop {}: {e}", job.header.hop_index);
                self.reply_to(job.conn, &job.header, Status::BadInput, 0, &msg);
                return self.settle(job.conn, job.tenant);
            }
        };
        let tenant = job.tenant;
        let budget = self.tenancy.policy(tenant).max_buffer_bytes;
        let output = match op {
            BufferOp::Put => {
                let data = self.take_flat(&mut job);
                self.buffers
                    .put(tenant, name, data, budget)
                    .map(|()| Payload::default())
            }
            BufferOp::Tee => {
                let data = self.take_flat(&mut job);
                self.stats.buffer_bytes_copied += data.len() as u64;
                self.buffers
                    .put(tenant, name, data.clone(), budget)
                    .map(|()| Payload::from(data))
            }
            // The kept buffer is shared, not copied: a local slot's function
            // reads it in place; any other next step joins it once.
            BufferOp::Get => {
                let own = self.take_flat(&mut job);
                self.buffers
                    .get_shared(tenant, name)
                    .map(|kept| Payload::joined(kept, own))
            }
            BufferOp::Drop => self
                .buffers
                .remove(tenant, name)
                .map(|_| Payload::default()),
            BufferOp::Create => {
                let data = self.take_flat(&mut job);
                self.buffers
                    .create(tenant, name, data, budget)
                    .map(|()| Payload::default())
            }
        };
        self.stats.buffer_hops += 1;
        let output = match output {
            Ok(o) => o,
            Err(e) => {
                let msg = format!("hop {}: {e}", job.header.hop_index);
                self.reply_to(job.conn, &job.header, e.status(), e.detail(), &msg);
                return self.settle(job.conn, job.tenant);
            }
        };
        let queue_ns = crate::nanos(now.saturating_since(job.complete_at));
        if !job.is_last_hop() {
            job.advance(output, now, queue_ns, 0, device);
            self.stats.hops += 1;
            self.requeued = true;
            return self.route(job);
        }
        self.answer_result(job, output, queue_ns, 0);
    }

    /// `payload`'s bytes as one `Vec`, counting the kept bytes joined.
    fn flat(&mut self, payload: Payload) -> Vec<u8> {
        self.stats.buffer_bytes_copied += payload.shared_len() as u64;
        payload.into_flat()
    }

    /// Take `job`'s payload as one `Vec` (joined if need be, counted).
    fn take_flat(&mut self, job: &mut Job) -> Vec<u8> {
        let payload = std::mem::take(&mut job.payload);
        self.flat(payload)
    }

    /// Make `job`'s payload flat in place for a step other than a local
    /// slot's run (counted when that joins a kept buffer).
    fn flatten(&mut self, job: &mut Job) {
        self.stats.buffer_bytes_copied += job.payload.shared_len() as u64;
        job.payload.flatten();
    }

    /// The chain's last hop, run by the engine or the driver (a buffer's or
    /// a collective's), returned `output`: that is the answer.
    fn answer_result(&mut self, job: Job, output: Payload, queue_ns: u64, exec_ns: u64) {
        let device = self.cfg.device_id;
        let mut header =
            ResponseHeader::answer(&job.header, Status::Ok, device, output.len() as u32);
        job.time_answer(&mut header, device, queue_ns, exec_ns);
        let route = self.answer_route(job.conn, &job.header);
        let receipt = ResponseHeader::receipt_of(&header);
        header.request_id = route.request_id;
        self.actions.push_back(Action::Result {
            conn: route.to,
            header,
            payload: output,
        });
        if let Some(sender) = route.receipt {
            self.actions.push_back(Action::Reply {
                conn: sender,
                header: receipt,
                message: String::new(),
            });
        }
        self.stats.completed += 1;
        self.settle(job.conn, job.tenant);
    }

    /// A job whose current hop is a collective hop of a chain on this node.
    fn is_collective_hop(&self, job: &Job) -> bool {
        job.function() == FN_COLLECTIVE && job.header.hop_count > 1 && self.runs_here(job)
    }

    /// Hand a collective hop to the driver (its budget checked first, like
    /// any hop's start). It waits for its collective holding no slot.
    fn start_collective_hop(&mut self, now: Instant, mut job: Job) {
        if job.expired(now) {
            return self.expire(job);
        }
        self.flatten(&mut job);
        job.dispatched_at = Some(now);
        self.stats.collective_hops += 1;
        self.actions.push_back(Action::CollectiveHop { job });
    }

    /// The collective of `job`'s current hop ([`Action::CollectiveHop`])
    /// ended at `now`: with this rank's output, which the chain goes on
    /// with (or which is the answer, at its last hop), or with a failure
    /// (`status`, `detail`, message), which is the chain's one answer. Its
    /// time from the hand-off is the hop's `exec_ns`.
    pub fn handle_collective_hop_done(
        &mut self,
        now: Instant,
        mut job: Job,
        result: Result<Vec<u8>, (Status, u64, String)>,
    ) {
        let queue_ns = job.queue_ns();
        let exec_ns = job
            .dispatched_at
            .map_or(0, |d| crate::nanos(now.saturating_since(d)));
        match result {
            Err((status, detail, msg)) => {
                let msg = format!("hop {}: {msg}", job.header.hop_index);
                self.reply_to(job.conn, &job.header, status, detail, &msg);
                self.settle(job.conn, job.tenant);
            }
            Ok(output) if !job.is_last_hop() => {
                let device = self.cfg.device_id;
                job.advance(output, now, queue_ns, exec_ns, device);
                self.stats.hops += 1;
                self.route(job);
            }
            Ok(output) => self.answer_result(job, Payload::from(output), queue_ns, exec_ns),
        }
        self.drain(now);
    }

    /// Answer `TIMEOUT` for a job whose budget ran out before its hop started.
    fn expire(&mut self, job: Job) {
        self.stats.expired += 1;
        let msg = format!(
            "the request's budget of {} µs ran out before hop {} started",
            job.header.budget_us, job.header.hop_index
        );
        self.reply_to(job.conn, &job.header, Status::Timeout, 0, &msg);
        self.settle(job.conn, job.tenant);
    }
}

/// Why a hop of a chain cannot run here.
struct HopError {
    hop: u8,
    status: Status,
    detail: u64,
    message: String,
}

fn discard(len: u64, now: Instant) -> Rx {
    if len == 0 {
        Rx::idle(now)
    } else {
        Rx::Discard { remaining: len }
    }
}

/// When a request whose first byte came at `first` and of whose payload
/// `received` bytes are in is answered `TIMEOUT`: `reassembly_timeout`
/// after its first byte, plus what the received bytes earn at
/// `reassembly_min_rate` (a large request arriving steadily keeps its
/// buffer; a trickle earns next to nothing).
fn reassembly_deadline(cfg: &EngineConfig, first: Instant, received: usize) -> Instant {
    let credit = match cfg.reassembly_min_rate {
        0 => Duration::ZERO,
        rate => {
            let ns = received as u128 * 1_000_000_000 / rate as u128;
            Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
        }
    };
    first + cfg.reassembly_timeout + credit
}

/// When a partial request on `c` next needs looking at: its stall deadline
/// (none while the driver is not reading it), or its reassembly deadline if
/// that comes first.
fn due(cfg: &EngineConfig, c: &Connection) -> Option<Instant> {
    let stall = (!c.paused).then(|| c.last_progress + cfg.stall_timeout);
    let reassembly = match &c.rx {
        Rx::Payload {
            first_byte_at,
            payload,
            diverted,
            ..
        } => Some(reassembly_deadline(
            cfg,
            *first_byte_at,
            payload.len() + diverted,
        )),
        _ => None,
    };
    match (stall, reassembly) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}
