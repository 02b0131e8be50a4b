//! The I/O thread: a thin mio shell around the [`Driver`]. It turns socket
//! readiness, worker completions and the clock into driver events and carries
//! out the driver's [`Io`]; every decision is the driver's. It sleeps only
//! after `spin` of idleness in polling and yielding modes (at once in
//! blocking mode).

use crate::clock::NodeClock;
use crate::conn_out::ConnOut;
use crate::driver::{Driver, Io, PeerConfig};
use crate::metrics::Metrics;
use crate::wake::IoWaker;
use crate::worker::{Done, Executor, SlotWorker, Work};
use crate::IoMode;
use crossbeam_channel::Receiver;
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use offrac_core::{ConnId, Room};
use offrac_proto::Status;
use rustc_hash::FxHashMap;
use slab::Slab;
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const LISTENER: Token = Token(usize::MAX - 1);
pub const WAKER: Token = Token(usize::MAX - 2);
/// Tokens of links to peers: `LINK_BASE + link`.
const LINK_BASE: usize = usize::MAX / 2;
const READ_CHUNK: usize = 64 * 1024;
/// Longest sleep: bounds how late a worker's `Answered` (sent without a wake-up) is seen.
const SLEEP_CAP: Duration = Duration::from_millis(50);
/// Poll mode: plain reads of the hot connection per idle round before epoll is asked again.
const HOT_SPINS: u32 = 32;

struct Conn {
    id: ConnId,
    out: Arc<ConnOut>,
    /// The peer sent its last byte: read to the end, no new event will come.
    hung_up: bool,
}

/// The connection of a link to a peer node.
struct LinkConn {
    out: Arc<ConnOut>,
    /// The non-blocking connect has completed.
    connected: bool,
}

/// Everything the reactor owns besides the driver.
pub struct Reactor {
    pub poll: Poll,
    pub listener: Option<TcpListener>,
    pub driver: Driver,
    pub workers: Vec<SlotWorker>,
    /// Per slot: the executor the I/O thread uses for inline runs.
    pub inline: Vec<Option<Executor>>,
    pub done_rx: Receiver<Done>,
    pub waker: Arc<IoWaker>,
    pub metrics: Arc<Metrics>,
    pub io_mode: IoMode,
    pub spin: Duration,
    /// Whether, inside `spin`, the thread may poll now (`spin_gate.rs`).
    spinner: crate::runnable::Spinner,
    pub shutdown: Arc<AtomicBool>,
    pub clock: NodeClock,
    conns: Slab<Conn>,
    keys: FxHashMap<ConnId, usize>,
    buf: Vec<u8>,
    /// Refusals that say something is wrong with a client or the node, logged
    /// at most once a second per status.
    errors: crate::ratelog::RateLog,
    /// The connection that sent the last bytes: in poll mode, an idle I/O
    /// thread spins on it with plain reads instead of an epoll round trip.
    hot: Option<ConnId>,
    /// When the last spin on the hot connection began its successful read.
    spin_found: Option<Instant>,
    links: Vec<Option<LinkConn>>,
    /// Member tables from the cluster store, and the static device table
    /// they add to (a static entry wins over the store's for its device).
    membership: Option<(Receiver<Vec<PeerConfig>>, Vec<PeerConfig>)>,
    /// The control plane (library, authentication, the slots' swap cells).
    control: Option<crate::control::ControlPlane>,
    /// Where uploads are compiled, started by the first one.
    compiles: Option<crate::compile::CompileThread>,
    /// Changes to the library other nodes made in the cluster store.
    store_events: Option<Receiver<crate::control::StoreEvent>>,
}

impl Reactor {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        poll: Poll,
        listener: TcpListener,
        driver: Driver,
        workers: Vec<SlotWorker>,
        inline: Vec<Option<Executor>>,
        done_rx: Receiver<Done>,
        waker: Arc<IoWaker>,
        metrics: Arc<Metrics>,
        io_mode: IoMode,
        spin: Duration,
        spin_when: crate::spin_gate::SpinWhen,
        shutdown: Arc<AtomicBool>,
        clock: NodeClock,
    ) -> Reactor {
        Reactor {
            poll,
            listener: Some(listener),
            driver,
            workers,
            inline,
            done_rx,
            waker,
            metrics,
            io_mode,
            spin,
            spinner: crate::runnable::Spinner::new(spin_when),
            shutdown,
            clock,
            conns: Slab::new(),
            keys: FxHashMap::default(),
            buf: vec![0; READ_CHUNK],
            hot: None,
            spin_found: None,
            links: Vec::new(),
            membership: None,
            control: None,
            compiles: None,
            store_events: None,
            errors: crate::ratelog::RateLog::new(Status::ALL.len(), Duration::from_secs(1)),
        }
    }

    /// Serve control requests with `plane` (without one they are answered
    /// `UNSUPPORTED`).
    pub fn set_control(&mut self, plane: crate::control::ControlPlane) {
        self.control = Some(plane);
    }

    /// A control request: answered here, or a swap for the driver.
    fn control(&mut self, job: offrac_core::Job) {
        use crate::control::Handled;
        let conn = job.conn;
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let handled = match &mut self.control {
            None => Handled::Answer(
                Status::Unsupported,
                0,
                b"this node has no control plane".to_vec(),
            ),
            Some(cp) => {
                let slots = self.driver.slot_targets();
                let driver = &self.driver;
                cp.handle(
                    wall_ms,
                    &job,
                    &slots,
                    |d| driver.module_in_use(d),
                    |f| driver.function_owner(f),
                )
            }
        };
        match handled {
            Handled::Answer(status, detail, payload) => {
                self.answer_control(conn, &job.header, status, detail, &payload);
            }
            Handled::Compile(upload) => self.compile(conn, job.header, upload),
            Handled::Swap {
                slot,
                target,
                tenant,
            } => {
                let now = self.clock.now();
                self.driver
                    .handle_swap(now, conn, job.header, slot, target, tenant);
            }
            Handled::Hello { tenant } => {
                let now = self.clock.now();
                self.driver.handle_hello(now, conn, job.header, tenant);
            }
            Handled::PeerHello => {
                let now = self.clock.now();
                self.driver.handle_peer_hello(now, conn, job.header);
            }
            Handled::Unload { digest, tenant } => {
                let now = self.clock.now();
                self.driver
                    .handle_unload(now, conn, job.header, digest, tenant);
            }
            Handled::Resize { name, tenant } => {
                let now = self.clock.now();
                self.driver
                    .handle_resize(now, conn, job.header, &name, tenant);
            }
            Handled::Shrink {
                function,
                keep,
                tenant,
            } => {
                let now = self.clock.now();
                self.driver
                    .handle_shrink(now, conn, job.header, function, keep, tenant);
            }
            Handled::Replicate { target, n, tenant } => {
                let now = self.clock.now();
                self.driver
                    .handle_replicate(now, conn, job.header, target, n, tenant);
            }
        }
    }

    /// Answer a control request the shell handled itself.
    fn answer_control(
        &mut self,
        conn: ConnId,
        header: &offrac_proto::RequestHeader,
        status: Status,
        detail: u64,
        payload: &[u8],
    ) {
        let mut h = offrac_proto::ResponseHeader::answer(
            header,
            status,
            self.driver.engine().config().device_id,
            payload.len() as u32,
        );
        h.detail = detail;
        if let Some(out) = self.out_of(conn) {
            out.send(&h.encode_wire()[..h.wire_len()], payload);
        }
        self.driver.handle_control_answered(self.clock.now(), conn);
        self.report_backlog(conn);
    }

    /// Hand an upload to the compile thread (started on first use); it is
    /// answered when the compile comes back ([`Reactor::drain_compiles`]).
    fn compile(
        &mut self,
        conn: ConnId,
        header: offrac_proto::RequestHeader,
        upload: crate::control::Upload,
    ) {
        use crate::compile::{Asker, CompileThread};
        if self.compiles.is_none() {
            match CompileThread::spawn(self.waker.clone()) {
                Ok(t) => self.compiles = Some(t),
                Err(e) => tracing::error!(error = %e, "cannot start the compile thread"),
            }
        }
        let (tenant, size) = (upload.tenant, upload.size());
        let asker = Asker { conn, header };
        if !self
            .compiles
            .as_ref()
            .is_some_and(|t| t.submit(asker, upload))
        {
            let failed = Err(offrac_control::LibraryError::Invalid(
                "the node cannot compile modules now".into(),
            ));
            if let Some(cp) = &mut self.control {
                let (status, detail, body) = cp.finish_upload(tenant, size, failed);
                self.answer_control(conn, &header, status, detail, &body);
            }
        }
    }

    /// Answer the uploads whose compile finished.
    fn drain_compiles(&mut self) -> bool {
        let mut any = false;
        while let Some(c) = self.compiles.as_ref().and_then(|t| t.try_recv()) {
            any = true;
            let Some(cp) = &mut self.control else {
                continue;
            };
            let (status, detail, body) = cp.finish_upload(c.tenant, c.size, c.result);
            self.answer_control(c.asker.conn, &c.asker.header, status, detail, &body);
        }
        if any {
            self.apply();
        }
        any
    }

    /// Take changes to the library from the cluster store as they come.
    pub fn set_store_events(&mut self, rx: Receiver<crate::control::StoreEvent>) {
        self.store_events = Some(rx);
    }

    /// Apply the library's changes seen in the cluster store.
    fn drain_store(&mut self) -> bool {
        let (Some(rx), Some(cp)) = (&self.store_events, &mut self.control) else {
            return false;
        };
        let mut any = false;
        for ev in rx.try_iter() {
            any = true;
            let driver = &self.driver;
            cp.handle_store_event(ev, |d| driver.module_in_use(d));
        }
        any
    }

    /// Take device tables from a cluster store as they come.
    pub fn set_membership(&mut self, rx: Receiver<Vec<PeerConfig>>, static_peers: Vec<PeerConfig>) {
        self.membership = Some((rx, static_peers));
    }

    /// The newest member table, merged with the static one, to the driver.
    fn drain_membership(&mut self) -> bool {
        let Some((rx, fixed)) = &self.membership else {
            return false;
        };
        let Some(members) = rx.try_iter().last() else {
            return false;
        };
        let mut peers = fixed.clone();
        peers.extend(
            members
                .into_iter()
                .filter(|m| !fixed.iter().any(|f| f.device == m.device)),
        );
        self.driver.handle_peers(self.clock.now(), peers);
        self.apply();
        true
    }

    pub fn run(mut self) -> std::io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut last_work = Instant::now();
        let mut last_publish = Instant::now();
        loop {
            if !self.driver.is_shutting_down() && self.shutdown.load(Ordering::SeqCst) {
                tracing::info!("shutting down: refusing new requests, finishing held ones");
                self.driver.handle_shutdown(self.clock.now());
                self.apply();
            }
            if self.driver.is_finished(self.clock.now()) {
                break;
            }
            // Busy time (iterations that did something, minus sleeping in
            // poll) is the I/O thread's per-request overhead, T_oh.
            let top = Instant::now();
            let mut work = self.drain_completions();
            work |= self.drain_compiles();
            work |= self.drain_membership();
            work |= self.drain_store();
            work |= self.read_turns();
            // The gate is asked only when the thread would otherwise sleep.
            let spinning = self.io_mode != IoMode::Blocking
                && last_work.elapsed() < self.spin
                && (work || self.spinner.may_spin());
            if spinning && !work {
                if self.io_mode == IoMode::Yield {
                    // Give the core to whoever waits for it (on shared cores,
                    // the peer this node waits for), then poll again.
                    std::thread::yield_now();
                } else {
                    work |= self.spin_hot();
                }
            }
            let found = self.spin_found.take().unwrap_or(top);
            let before_poll = if work {
                found.elapsed()
            } else {
                Duration::ZERO
            };
            let timeout = if work || spinning {
                Some(Duration::ZERO)
            } else {
                // Going idle: publish first, so a scrape after a burst sees all of it.
                if last_publish.elapsed() > Duration::from_millis(1) {
                    last_publish = Instant::now();
                    self.publish();
                }
                self.prepare_sleep()
            };
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            self.waker.woke_up();
            let woke = Instant::now();
            // Completions first: a slot freed before its answer went out must be
            // seen free by the request that answer prompted (read below).
            work |= self.drain_completions();
            for ev in events.iter() {
                work = true;
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(key) if key >= LINK_BASE => self.link_event(key - LINK_BASE, ev),
                    Token(key) => {
                        let Some(c) = self.conns.get_mut(key) else {
                            continue;
                        };
                        let id = c.id;
                        let now = self.clock.now();
                        if ev.is_error() {
                            // Reset or otherwise broken: nothing can be delivered any more.
                            self.driver.handle_hangup(now, id);
                            continue;
                        }
                        if ev.is_writable() {
                            let left = c.out.flush();
                            if c.out.is_closed() {
                                self.driver.handle_hangup(now, id);
                                continue;
                            }
                            self.driver.handle_backlog(now, id, left);
                        }
                        if ev.is_readable() || ev.is_read_closed() {
                            c.hung_up |= ev.is_read_closed();
                            self.driver.handle_readable(now, id, ev.is_read_closed());
                        }
                    }
                }
            }
            self.apply();
            work |= self.read_turns();
            let now = self.clock.now();
            if self.driver.poll_timeout().is_some_and(|t| t <= now) {
                self.driver.handle_timeout(now);
                self.apply();
            }
            if work {
                last_work = Instant::now();
                let busy = before_poll + last_work.saturating_duration_since(woke);
                self.metrics
                    .provision
                    .record_io_busy(busy.as_nanos() as u64);
            }
            if last_publish.elapsed() > SLEEP_CAP {
                last_publish = Instant::now();
                self.publish();
            }
        }
        self.publish();
        for c in self.conns.drain() {
            c.out.close();
        }
        for l in self.links.drain(..).flatten() {
            l.out.close();
        }
        for w in self.workers.drain(..) {
            drop(w.tx);
            let _ = w.thread.join();
        }
        Ok(())
    }

    /// Announce sleep, then re-check inputs the workers may have added meanwhile.
    fn prepare_sleep(&self) -> Option<Duration> {
        self.waker.going_to_sleep();
        let members = self
            .membership
            .as_ref()
            .is_some_and(|(rx, _)| !rx.is_empty());
        let compiled = self.compiles.as_ref().is_some_and(|t| t.has_finished());
        let stored = self.store_events.as_ref().is_some_and(|rx| !rx.is_empty());
        if !self.done_rx.is_empty()
            || members
            || compiled
            || stored
            || self.shutdown.load(Ordering::SeqCst)
        {
            return Some(Duration::ZERO);
        }
        let until_timer = self
            .driver
            .poll_timeout()
            .map(|t| t.saturating_since(self.clock.now()));
        Some(until_timer.map_or(SLEEP_CAP, |d| d.min(SLEEP_CAP)))
    }

    fn drain_completions(&mut self) -> bool {
        let mut any = false;
        while let Ok(done) = self.done_rx.try_recv() {
            any = true;
            let now = self.clock.now();
            match done {
                Done::SlotFree(slot, exec_ns) => {
                    self.driver.handle_slot_finished(now, slot, exec_ns)
                }
                Done::Hop(slot, job) => self.driver.handle_hop_done(now, slot, *job),
                Done::Answered(conn) => {
                    self.driver.handle_answered(now, conn);
                    self.report_backlog(conn);
                }
            }
        }
        if any {
            self.apply();
        }
        any
    }

    fn accept(&mut self) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((stream, _peer)) => self.add_conn(stream),
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    // e.g. out of file descriptors: keep serving the connections we have.
                    tracing::warn!(error = %e, "accept failed");
                    return;
                }
            }
        }
    }

    fn add_conn(&mut self, mut stream: TcpStream) {
        let _ = stream.set_nodelay(true);
        let entry = self.conns.vacant_entry();
        let key = entry.key();
        if let Err(e) = self.poll.registry().register(
            &mut stream,
            Token(key),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!(error = %e, "cannot register connection");
            return;
        }
        let id = self.driver.handle_accept(self.clock.now());
        entry.insert(Conn {
            id,
            out: Arc::new(ConnOut::new(stream)),
            hung_up: false,
        });
        self.keys.insert(id, key);
        tracing::debug!(conn = id, "connection opened");
    }

    fn out_of(&self, id: ConnId) -> Option<&Arc<ConnOut>> {
        self.keys.get(&id).map(|&k| &self.conns[k].out)
    }

    fn report_backlog(&mut self, id: ConnId) {
        if let Some(left) = self.out_of(id).map(|o| o.backlog()) {
            self.driver.handle_backlog(self.clock.now(), id, left);
        }
    }

    /// Poll mode with nothing to do: read the hot connection directly, a few
    /// times, the way a thread per connection would spin on `recv`. The
    /// next request of a client in a request-response loop is then read one
    /// system call after it lands, not after an `epoll_wait` and a `read`.
    /// Gives up at once when a worker has finished something; other
    /// connections are seen by the epoll round right after.
    fn spin_hot(&mut self) -> bool {
        let Some(id) = self.hot else {
            return false;
        };
        let Some(&key) = self.keys.get(&id) else {
            self.hot = None;
            return false;
        };
        if !self.driver.wants_read(id) || self.conns[key].hung_up {
            return false;
        }
        let out = self.conns[key].out.clone();
        let mut buf = std::mem::take(&mut self.buf);
        let mut got = false;
        for _ in 0..HOT_SPINS {
            // Busy time starts when something arrives, not while waiting for it.
            self.spin_found = Some(Instant::now());
            match read_conn(&mut self.driver, &self.clock, id, &out.stream, &mut buf) {
                Ok(ReadOf::End) => {
                    self.driver.handle_hangup(self.clock.now(), id);
                    got = true;
                }
                Ok(ReadOf::Bytes { full }) => {
                    if full {
                        // More may be waiting: a regular read turn follows.
                        self.driver.handle_readable(self.clock.now(), id, false);
                    }
                    got = true;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if self.done_rx.is_empty() {
                        continue;
                    }
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.driver.handle_hangup(self.clock.now(), id);
                    got = true;
                }
            }
            break;
        }
        self.buf = buf;
        if got {
            self.apply();
            self.report_backlog(id);
        }
        got
    }

    /// Give each connection the driver queued for reading one turn.
    fn read_turns(&mut self) -> bool {
        let turns = self.driver.pending_reads();
        let mut buf = std::mem::take(&mut self.buf);
        for _ in 0..turns {
            let Some((id, budget)) = self.driver.poll_read() else {
                break;
            };
            let Some(&key) = self.keys.get(&id) else {
                continue;
            };
            let (out, hung_up) = (self.conns[key].out.clone(), self.conns[key].hung_up);
            let mut more = true;
            let mut reads = 0;
            while reads < budget {
                match read_conn(&mut self.driver, &self.clock, id, &out.stream, &mut buf) {
                    Ok(ReadOf::End) => {
                        self.driver.handle_hangup(self.clock.now(), id);
                        more = false;
                        break;
                    }
                    Ok(ReadOf::Bytes { full }) => {
                        reads += 1;
                        self.hot = Some(id);
                        self.apply();
                        self.report_backlog(id);
                        if !self.driver.wants_read(id) {
                            more = false;
                            break;
                        }
                        // A short read drained the socket: new bytes raise a new
                        // (edge-triggered) event. After a hang-up none comes: read on.
                        if !full && !hung_up {
                            more = false;
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {
                        more = false;
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => {
                        self.driver.handle_hangup(self.clock.now(), id);
                        more = false;
                        break;
                    }
                }
            }
            self.driver.handle_read_turn_end(self.clock.now(), id, more);
            self.apply();
        }
        self.buf = buf;
        turns > 0
    }

    /// Log refusals that point at a broken client or a hostile one (not BUSY
    /// or UNKNOWN_FUNCTION, which are ordinary answers), rate-limited.
    fn log_refusal(&mut self, conn: ConnId, h: &offrac_proto::ResponseHeader, message: &[u8]) {
        let worth = matches!(
            h.status,
            Status::Malformed | Status::UnsupportedVersion | Status::Timeout | Status::Internal
        );
        if !worth {
            return;
        }
        if let Some(held_back) = self.errors.admit(h.status.code() as usize, Instant::now()) {
            tracing::warn!(
                conn,
                status = h.status.name(),
                message = %String::from_utf8_lossy(message),
                similar_held_back = held_back,
                "request refused"
            );
        }
    }

    /// Readiness of a link: its connect completing, answers to read, room to write.
    fn link_event(&mut self, link: usize, ev: &mio::event::Event) {
        let Some(Some(l)) = self.links.get_mut(link) else {
            return;
        };
        let now = self.clock.now();
        if !l.connected {
            // A non-blocking connect ends with the socket writable (or an error).
            let done = match l.out.stream.take_error() {
                Ok(None) => match l.out.stream.peer_addr() {
                    Ok(_) => Some(true),
                    Err(e) if e.kind() == ErrorKind::NotConnected && !ev.is_error() => None,
                    Err(_) => Some(false),
                },
                _ => Some(false),
            };
            match done {
                None => return,
                Some(false) => {
                    self.driver.handle_link_down(now, link);
                    self.apply();
                    return;
                }
                Some(true) => {
                    l.connected = true;
                    let _ = l.out.stream.set_nodelay(true);
                    tracing::debug!(link, "link up");
                    self.driver.handle_link_up(now, link);
                    self.apply();
                }
            }
        }
        let Some(Some(l)) = self.links.get(link) else {
            return;
        };
        let out = l.out.clone();
        if ev.is_writable() {
            out.flush();
            if out.is_closed() {
                self.driver.handle_link_down(self.clock.now(), link);
                self.apply();
                return;
            }
        }
        if !(ev.is_readable() || ev.is_read_closed() || ev.is_error()) {
            return;
        }
        let mut buf = std::mem::take(&mut self.buf);
        loop {
            match (&out.stream).read(&mut buf) {
                Ok(0) => {
                    self.driver.handle_link_down(self.clock.now(), link);
                    break;
                }
                Ok(n) => self
                    .driver
                    .handle_link_bytes(self.clock.now(), link, &buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.driver.handle_link_down(self.clock.now(), link);
                    break;
                }
            }
        }
        self.buf = buf;
        self.apply();
    }

    /// Start a non-blocking connect for `link`.
    fn connect_link(&mut self, link: usize, addr: &str) {
        use std::net::ToSocketAddrs;
        if self.links.len() <= link {
            self.links.resize_with(link + 1, || None);
        }
        let stream = addr
            .to_socket_addrs()
            .and_then(|mut a| {
                a.next()
                    .ok_or_else(|| std::io::Error::new(ErrorKind::NotFound, "no address"))
            })
            .and_then(TcpStream::connect);
        let registered = stream.and_then(|mut s| {
            self.poll.registry().register(
                &mut s,
                Token(LINK_BASE + link),
                Interest::READABLE | Interest::WRITABLE,
            )?;
            Ok(s)
        });
        match registered {
            Ok(s) => {
                self.links[link] = Some(LinkConn {
                    out: Arc::new(ConnOut::new(s)),
                    connected: false,
                });
            }
            Err(e) => {
                tracing::warn!(link, addr, error = %e, "cannot connect to peer");
                self.driver.handle_link_down(self.clock.now(), link);
            }
        }
    }

    /// Copy the engine's counters to the metrics and the live provisioning
    /// figures to the driver (for describe answers).
    fn publish(&mut self) {
        self.metrics.publish(&self.driver);
        self.metrics.io_spin_refused.fetch_add(
            self.spinner.take_refused(),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.metrics.io_spin_readings.fetch_add(
            self.spinner.take_readings(),
            std::sync::atomic::Ordering::Relaxed,
        );
        self.driver
            .handle_estimates(self.metrics.provision.estimates());
    }

    /// Carry out what the driver decided.
    fn apply(&mut self) {
        while let Some(io) = self.driver.poll_io() {
            match io {
                Io::Run {
                    slot,
                    job,
                    inline,
                    route,
                } => {
                    let conn = job.conn;
                    let work = Work {
                        sender: self.out_of(conn).cloned(),
                        endpoint: (route.to != conn)
                            .then(|| self.out_of(route.to).cloned())
                            .flatten(),
                        endpoint_id: route.request_id,
                        receipt: route.receipt.is_some(),
                        job,
                    };
                    match (&mut self.inline[slot], inline) {
                        // Short enough to run here: no thread hand-off, no wake-up.
                        // Nothing is read before the slot is freed below.
                        (Some(exec), true) => {
                            let mut ran_ns = 0;
                            let next = exec.execute(work, |ns| ran_ns = ns);
                            let now = self.clock.now();
                            match next {
                                Some(job) => self.driver.handle_hop_done(now, slot, job),
                                None => {
                                    self.driver.handle_slot_finished(now, slot, ran_ns);
                                    self.driver.handle_answered(now, conn);
                                    self.report_backlog(route.to);
                                }
                            }
                        }
                        // Workers never exit while the reactor runs, so a send cannot fail here.
                        _ => drop(self.workers[slot].tx.send(work)),
                    }
                }
                Io::Send {
                    conn,
                    header,
                    payload,
                } => {
                    self.log_refusal(conn, &header, &payload);
                    if let Some(out) = self.out_of(conn) {
                        out.send_owned(&header.encode_wire()[..header.wire_len()], payload);
                        self.report_backlog(conn);
                    }
                }
                Io::SendShared {
                    conn,
                    header,
                    payload,
                } => {
                    if let Some(out) = self.out_of(conn) {
                        let (head, own) = payload.into_parts();
                        let wire = header.encode_wire();
                        out.send_parts(&wire[..header.wire_len()], head, own, bytes::Bytes::new());
                        self.report_backlog(conn);
                    }
                }
                Io::ShutWrite { conn } => {
                    if let Some(out) = self.out_of(conn) {
                        out.shut_write_when_flushed();
                    }
                }
                Io::Drop { conn } => {
                    if let Some(key) = self.keys.remove(&conn) {
                        let c = self.conns.remove(key);
                        let fd = c.out.stream.as_raw_fd();
                        let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
                        c.out.close();
                        tracing::debug!(conn, "connection closed");
                    }
                }
                Io::Connect { link, addr } => self.connect_link(link, &addr),
                Io::LinkHello { link } => {
                    let device = self.driver.engine().config().device_id;
                    let wall_ms = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_millis() as u64)
                        .unwrap_or(0);
                    let hello = self
                        .control
                        .as_mut()
                        .and_then(|cp| cp.link_hello(wall_ms, device));
                    match (hello, self.links.get(link)) {
                        (Some(payload), Some(Some(l))) => {
                            let mut header = offrac_proto::RequestHeader::single(
                                crate::driver::LINK_HELLO_ID,
                                offrac_proto::FN_CONTROL,
                                0,
                                payload.len() as u32,
                            );
                            header.tenant = offrac_proto::TENANT_NODE;
                            let wire = header.encode_wire();
                            l.out.send(&wire[..header.wire_len()], &payload);
                        }
                        _ => {
                            tracing::error!(link, "cannot say the node's hello on a link");
                            self.driver.handle_link_down(self.clock.now(), link);
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
                    if let Some(Some(l)) = self.links.get(link) {
                        let wire = header.encode_wire();
                        l.out
                            .send_parts(&wire[..header.wire_len()], head, payload, tail);
                    }
                }
                Io::CloseLink { link } => {
                    if let Some(l) = self.links.get_mut(link).and_then(Option::take) {
                        let fd = l.out.stream.as_raw_fd();
                        let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
                        l.out.close();
                        tracing::debug!(link, "link closed");
                    }
                }
                Io::Control { job } => self.control(job),
                Io::Install { slot, target } => {
                    let r = match &mut self.control {
                        Some(cp) => cp.install(slot, target),
                        None => Err("this node has no control plane".into()),
                    };
                    if let Err(e) = &r {
                        tracing::warn!(slot, error = %e, "swap install failed; rolled back");
                    }
                    self.driver.handle_installed(self.clock.now(), slot, r);
                }
                Io::RemoveModule {
                    conn,
                    header,
                    digest,
                    tenant,
                    swapped,
                } => {
                    let in_use = self.driver.module_in_use(&digest);
                    let (status, detail, body) = match &mut self.control {
                        Some(cp) => cp.finish_unload(&digest, tenant, swapped, in_use),
                        None => (Status::Unsupported, 0, Vec::new()),
                    };
                    self.answer_control(conn, &header, status, detail, &body);
                }
                Io::SaveSlots { targets } => {
                    if let Some(cp) = &self.control {
                        let driver = &self.driver;
                        cp.save_targets(&targets, |f| driver.function_owner(f));
                    }
                }
                Io::StopAccepting => {
                    if let Some(mut l) = self.listener.take() {
                        let _ = self.poll.registry().deregister(&mut l);
                    }
                }
            }
        }
    }
}

/// What one read of a client connection gave.
enum ReadOf {
    /// Bytes, handed to the driver; `full`: the read filled what it asked
    /// for, so more may be waiting.
    Bytes { full: bool },
    /// The end of the stream.
    End,
}

/// One read of connection `id`: straight into the payload the engine is
/// reassembling when it is in one (the kernel's copy is the only one,
/// `docs/collectives.md`, "Large messages"), else into `buf`, handed to the
/// driver to parse.
fn read_conn(
    driver: &mut Driver,
    clock: &NodeClock,
    id: ConnId,
    stream: &TcpStream,
    buf: &mut [u8],
) -> std::io::Result<ReadOf> {
    match driver.payload_room(clock.now(), id) {
        Some(Room::Spare(payload, need)) => {
            let spare = payload.spare_capacity_mut();
            let want = need.min(spare.len());
            if want > 0 {
                // SAFETY: `spare` is `want` or more writable bytes of the
                // vector's allocation; `read` writes at most `want` of them
                // and says how many, and only those become part of it.
                let rc = unsafe { libc::read(stream.as_raw_fd(), spare.as_mut_ptr().cast(), want) };
                if rc < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = rc as usize;
                if n == 0 {
                    return Ok(ReadOf::End);
                }
                // SAFETY: the first `n` spare bytes were just written by `read`.
                unsafe { payload.set_len(payload.len() + n) };
                driver.handle_payload_read(clock.now(), id, n);
                return Ok(ReadOf::Bytes { full: n == want });
            }
        }
        // A segment's place in a collective's work buffer (a posted receive).
        Some(Room::Slice(place)) if !place.is_empty() => {
            let want = place.len();
            let n = (&*stream).read(place)?;
            if n == 0 {
                return Ok(ReadOf::End);
            }
            driver.handle_payload_read(clock.now(), id, n);
            return Ok(ReadOf::Bytes { full: n == want });
        }
        _ => {}
    }
    let n = (&*stream).read(buf)?;
    if n == 0 {
        return Ok(ReadOf::End);
    }
    driver.handle_bytes(clock.now(), id, &buf[..n]);
    Ok(ReadOf::Bytes {
        full: n == buf.len(),
    })
}
