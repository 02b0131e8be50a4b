//! The attach listener's thin driver: one or more event loops (threads),
//! each with its own mio poll, sharing one machine behind a lock. Loop 0
//! accepts and hands new connections round-robin to the loops; each client
//! connection is paired with one backend connection at a time (opened when
//! the machine has bytes for the backend) and served by one loop for its
//! whole life. The loops move bytes between the sockets and the
//! [`InlineMachine`] and pass the time in; nothing here decides anything.
//! Every machine call is made under the lock and no socket call is, so the
//! machine sees one sequence of calls, as a single loop could have made them.

use super::inline::{Counter, InlineMachine, Now};
use super::udp::{self, UdpTable, MAX_ANSWER_BYTES};
use mio::net::{TcpListener, TcpStream, UdpSocket};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::runnable::Spinner;
use crate::spin_gate::SpinWhen;

pub const LISTENER: Token = Token(usize::MAX - 1);
pub const WAKER: Token = Token(usize::MAX - 2);
pub const UDP: Token = Token(usize::MAX - 3);
/// Datagrams read per turn of the loop, so UDP cannot starve the TCP clients.
const DATAGRAMS_PER_TURN: usize = 64;
const READ_CHUNK: usize = 64 * 1024;
/// Reads from one connection per turn of the loop, so a flooding client
/// (or backend) cannot starve the others.
const READS_PER_TURN: usize = 8;
const TICK: Duration = Duration::from_millis(10);

struct Pair {
    client: Option<TcpStream>,
    backend: Option<TcpStream>,
    client_readable: bool,
    backend_readable: bool,
    /// The peer closed or the socket failed (sticky): read on until the read
    /// says so, since no further edge will come.
    client_hup: bool,
    backend_hup: bool,
    /// Registered for writability: only while bytes wait for room (an
    /// edge-triggered EPOLLOUT would otherwise wake the loop after every write).
    client_w: bool,
    backend_w: bool,
    /// A UDP request's pseudo-connection (no client socket): where its answer goes.
    udp: Option<UdpReq>,
    /// The backend owed an answer when the pair was last served (counted in `Driver::awaiting`).
    awaits: bool,
    /// A UDP request's new backend connection, not yet seen to work (a
    /// write taken or bytes read): counted a connect once it does, a
    /// failed connect if it fails or is closed first.
    connecting: bool,
}

struct UdpReq {
    peer: SocketAddr,
    request_id: u16,
    /// The answer so far, taken out of the machine as it is made.
    answer: Vec<u8>,
    /// The answer went over `MAX_ANSWER_BYTES` (its bytes are dropped).
    overflow: bool,
    /// The machine's units of the answer (how memcached would cut it into messages).
    units: Vec<udp::Unit>,
}

/// Idle backend connections a loop keeps for its UDP requests: a miss or an
/// update takes one (or connects when none is idle) and gives it back when
/// its request is answered; more than this many idle ones are closed.
pub const UDP_POOL_IDLE: usize = 16;

/// A loop's UDP socket (when the address also serves UDP: every loop has
/// one, bound with `SO_REUSEPORT` to the same address, and the kernel
/// spreads the datagrams over them by source address and port) and the idle
/// backend connections of the loop's UDP requests (the table of requests in
/// flight is in the shared state, where /metrics reads its counters).
pub struct UdpSide {
    pub socket: UdpSocket,
    pool: Vec<TcpStream>,
}

/// Asks for writability exactly while `want` (bytes are waiting).
fn interest(poll: &Poll, s: &mut TcpStream, token: Token, registered: &mut bool, want: bool) {
    if *registered != want {
        let i = if want {
            Interest::READABLE | Interest::WRITABLE
        } else {
            Interest::READABLE
        };
        if poll.registry().reregister(s, token, i).is_ok() {
            *registered = want;
        }
    }
}

/// The machine of one attached address and what its loops share.
pub struct Shared<M> {
    state: Mutex<State<M>>,
    /// One per loop, to wake it when another loop hands it work.
    wakers: Vec<Arc<Waker>>,
    /// Times a loop slept inside its spin window: more threads were runnable
    /// than the machine has CPUs (`spin_when = "cpu_idle"`).
    spin_refused: AtomicU64,
    /// Readings of the runnable threads the loops' spin gates took.
    spin_readings: AtomicU64,
}

struct State<M> {
    machine: M,
    /// The loop serving each connection id.
    owner: Vec<usize>,
    /// Connections accepted by loop 0 for each loop, not yet taken up.
    handed: Vec<Vec<(usize, TcpStream)>>,
    /// Connections a timeout changed, for each loop to service.
    ticked: Vec<Vec<usize>>,
    last_tick: Option<Instant>,
    /// Client connections open over all loops.
    open: usize,
    /// The loop the next accepted connection goes to.
    next: usize,
    /// The UDP requests in flight (when the address serves UDP).
    udp: Option<UdpTable>,
}

impl<M> Shared<M> {
    pub fn new(machine: M, wakers: Vec<Arc<Waker>>) -> Self {
        let loops = wakers.len();
        Shared {
            state: Mutex::new(State {
                machine,
                owner: Vec::new(),
                handed: (0..loops).map(|_| Vec::new()).collect(),
                ticked: (0..loops).map(|_| Vec::new()).collect(),
                last_tick: None,
                open: 0,
                next: 0,
                udp: None,
            }),
            wakers,
            spin_refused: AtomicU64::new(0),
            spin_readings: AtomicU64::new(0),
        }
    }

    /// The lock (a loop that panicked holding it leaves a machine whose every
    /// call still answers; the others go on).
    fn lock(&self) -> MutexGuard<'_, State<M>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn loops(&self) -> usize {
        self.wakers.len()
    }

    /// The address serves UDP: requests in flight are held here (at most
    /// `max_requests`), each loop reading its own socket.
    pub fn serve_udp(&self, max_requests: usize) {
        let mut t = UdpTable::new(max_requests);
        t.per_loop = vec![0; self.loops()];
        self.lock().udp = Some(t);
    }
}

impl<M: InlineMachine> Shared<M> {
    /// The address's counters for /metrics: the machine's, the client
    /// connections open, and the UDP side's when it serves UDP.
    pub fn counters(&self) -> Vec<Counter> {
        let g = self.lock();
        let mut c = g.machine.counters();
        c.push(Counter::gauge(
            "offrac_attach_loops",
            "Event loops serving the address (loops, or by default one per CPU the node may use, at most 4).",
            self.loops() as u64,
        ));
        c.push(Counter::gauge(
            "offrac_attach_connections",
            "Client connections open (TCP).",
            g.open as u64,
        ));
        c.push(Counter::total(
            "offrac_attach_spin_refused_total",
            "Times a loop slept inside its spin window because more threads were runnable than the machine has CPUs (spin_when = \"cpu_idle\").",
            self.spin_refused.load(Ordering::Relaxed),
        ));
        c.push(Counter::total(
            "offrac_attach_spin_readings_total",
            "Readings of the machine's runnable threads taken by the loops' spin gate (spin_when = \"cpu_idle\"; ~2 us each).",
            self.spin_readings.load(Ordering::Relaxed),
        ));
        if let Some(t) = &g.udp {
            c.extend(udp::counters(&t.stats, t.in_flight(), &t.per_loop));
        }
        c
    }
}

/// What every loop of an address is told.
#[derive(Debug, Clone, Copy)]
pub struct LoopSettings {
    pub backend: SocketAddr,
    pub max_connections: usize,
    /// After a turn that had work, poll without sleeping for this long before
    /// blocking (0: never): the next message is seen without a wake-up, at
    /// the price of a busy CPU meanwhile.
    pub spin: Duration,
    /// While the backend owes an answer on one of the loop's connections
    /// (the machine says so), poll without sleeping for up to this long
    /// after the turn that forwarded or read (0: never): a miss's answer is
    /// then seen without a wake-up, and an idle or all-hits loop never spins.
    pub backend_spin: Duration,
    /// When the loop may spin inside those windows (`spin_gate.rs`).
    pub spin_when: SpinWhen,
}

pub struct Driver<M> {
    poll: Poll,
    /// Loop 0's: it accepts for all loops.
    listener: Option<TcpListener>,
    shared: Arc<Shared<M>>,
    /// This loop's index.
    me: usize,
    backend: SocketAddr,
    max_connections: usize,
    spin: Duration,
    backend_spin: Duration,
    spinner: Spinner,
    /// This loop's pairs the backend owes an answer (as of their last service).
    awaiting: usize,
    stop: Arc<AtomicBool>,
    pairs: Vec<Option<Pair>>,
    buf: Vec<u8>,
    /// Connections left with bytes to read when their turn ended: served next turn.
    again: Vec<usize>,
    udp: Option<UdpSide>,
    /// Datagrams may be left unread (the turn's budget ran out).
    udp_again: bool,
}

fn would_block(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::NotConnected)
}

/// Writes what it can of `out`; false if the socket failed.
fn write_some(s: &mut TcpStream, out: &mut Vec<u8>) -> bool {
    let mut done = 0;
    while done < out.len() {
        match s.write(&out[done..]) {
            Ok(0) => return false,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if would_block(&e) => break,
            Err(_) => return false,
        }
    }
    out.drain(..done);
    true
}

/// What one read of a socket gave.
enum Got {
    Bytes(usize),
    Eof,
    Failed,
    Empty,
}

fn read_once(s: &mut TcpStream, buf: &mut [u8]) -> Got {
    loop {
        return match s.read(buf) {
            Ok(0) => Got::Eof,
            Ok(n) => Got::Bytes(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if would_block(&e) => Got::Empty,
            Err(_) => Got::Failed,
        };
    }
}

/// What writing a connection's waiting bytes did.
#[derive(PartialEq, Eq)]
enum Flushed {
    Nothing,
    Wrote,
    Partial,
    Failed,
}

fn out_of<M: InlineMachine>(m: &mut M, id: usize, backend: bool) -> Option<&mut Vec<u8>> {
    if backend {
        m.backend_out(id)
    } else {
        m.client_out(id)
    }
}

impl<M: InlineMachine> Driver<M> {
    pub fn new(
        poll: Poll,
        listener: Option<TcpListener>,
        shared: Arc<Shared<M>>,
        me: usize,
        settings: LoopSettings,
        stop: Arc<AtomicBool>,
        udp: Option<UdpSide>,
    ) -> Self {
        Driver {
            poll,
            listener,
            shared,
            me,
            backend: settings.backend,
            max_connections: settings.max_connections,
            spin: settings.spin,
            backend_spin: settings.backend_spin,
            spinner: Spinner::new(settings.spin_when),
            awaiting: 0,
            stop,
            pairs: Vec::new(),
            buf: vec![0; READ_CHUNK],
            again: Vec::new(),
            udp,
            udp_again: false,
        }
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut touched = Vec::new();
        let mut wake = Vec::new();
        let mut spin_until: Option<Instant> = None;
        let mut backend_spin_until: Option<Instant> = None;
        while !self.stop.load(Ordering::SeqCst) {
            let spinning = {
                let until = |t: Option<Instant>| t.is_some_and(|t| Instant::now() < t);
                let window = until(spin_until) || (self.awaiting > 0 && until(backend_spin_until));
                // Asked only when the loop would otherwise sleep.
                window && self.again.is_empty() && !self.udp_again && self.may_spin()
            };
            let wait = if self.again.is_empty() && !spinning && !self.udp_again {
                Duration::from_millis(50)
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(error = %e, "attach: poll failed; the loop stops");
                return;
            }
            if spinning && events.is_empty() && self.again.is_empty() && !self.udp_again {
                std::hint::spin_loop();
                continue;
            }
            let now = Now::read();
            if !self.spin.is_zero() && !events.is_empty() {
                spin_until = Some(now.mono + self.spin);
            }
            touched.clear();
            touched.append(&mut self.again);
            if self.udp_again {
                self.receive(now, &mut touched);
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(now),
                    WAKER => {}
                    UDP => self.receive(now, &mut touched),
                    Token(t) => {
                        let id = t / 2;
                        let hup = ev.is_read_closed() || ev.is_error();
                        if let Some(Some(p)) = self.pairs.get_mut(id) {
                            if t % 2 == 0 {
                                p.client_readable = true;
                                p.client_hup |= hup;
                            } else {
                                p.backend_readable = true;
                                p.backend_hup |= hup;
                            }
                        }
                        touched.push(id);
                    }
                }
            }
            let handed = {
                let mut g = self.shared.lock();
                let st = &mut *g;
                touched.append(&mut st.ticked[self.me]);
                if st
                    .last_tick
                    .is_none_or(|t| now.mono.saturating_duration_since(t) >= TICK)
                {
                    st.last_tick = Some(now.mono);
                    for id in st.machine.tick(now) {
                        let owner = st.owner.get(id).copied().unwrap_or(self.me);
                        if owner == self.me {
                            touched.push(id);
                        } else {
                            st.ticked[owner].push(id);
                            wake.push(owner);
                        }
                    }
                }
                std::mem::take(&mut st.handed[self.me])
            };
            for owner in wake.drain(..) {
                let _ = self.shared.wakers[owner].wake();
            }
            for (id, client) in handed {
                self.adopt(id, client, now);
            }
            touched.sort_unstable();
            touched.dedup();
            for &id in &touched {
                self.service(id, now);
            }
            if !self.backend_spin.is_zero() && self.note_awaiting(&touched) {
                backend_spin_until = Some(now.mono + self.backend_spin);
            }
        }
    }

    /// Asks the spin gate, adding its refusals to the address's counter.
    fn may_spin(&mut self) -> bool {
        let ok = self.spinner.may_spin();
        let readings = self.spinner.take_readings();
        if readings > 0 {
            self.shared
                .spin_readings
                .fetch_add(readings, Ordering::Relaxed);
        }
        if !ok {
            let refused = self.spinner.take_refused();
            self.shared
                .spin_refused
                .fetch_add(refused, Ordering::Relaxed);
        }
        ok
    }

    /// Updates `awaiting` for the connections just served; true if one of
    /// them waits for the backend.
    fn note_awaiting(&mut self, served: &[usize]) -> bool {
        let g = self.shared.lock();
        let mut any = false;
        for &id in served {
            let Some(Some(p)) = self.pairs.get_mut(id) else {
                continue;
            };
            let waits = p.backend.is_some() && g.machine.awaits_backend(id);
            any |= waits;
            if p.awaits != waits {
                p.awaits = waits;
                if waits {
                    self.awaiting += 1;
                } else {
                    self.awaiting -= 1;
                }
            }
        }
        any
    }

    /// Loop 0 accepts and deals the connections out round-robin.
    fn accept(&mut self, now: Now) {
        loop {
            let got = match &self.listener {
                Some(l) => l.accept(),
                None => return,
            };
            let (client, _) = match got {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "attach: accept failed");
                    return;
                }
            };
            let _ = client.set_nodelay(true);
            let loops = self.shared.loops();
            let (id, to) = {
                let mut g = self.shared.lock();
                if g.open >= self.max_connections {
                    tracing::warn!(
                        max = self.max_connections,
                        "attach: connection limit reached; closing a new client"
                    );
                    continue;
                }
                g.open += 1;
                let to = g.next % loops;
                g.next = (g.next + 1) % loops;
                let id = g.machine.open();
                if g.owner.len() <= id {
                    g.owner.resize(id + 1, 0);
                }
                g.owner[id] = to;
                (id, to)
            };
            if to == self.me {
                self.adopt(id, client, now);
            } else {
                self.shared.lock().handed[to].push((id, client));
                let _ = self.shared.wakers[to].wake();
            }
        }
    }

    /// Takes up a connection accepted for this loop.
    fn adopt(&mut self, id: usize, mut client: TcpStream, now: Now) {
        let both = Interest::READABLE | Interest::WRITABLE;
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut client, Token(2 * id), both)
        {
            tracing::warn!(error = %e, "attach: cannot register a client");
            let mut g = self.shared.lock();
            g.machine.remove(id, now);
            g.open -= 1;
            return;
        }
        if self.pairs.len() <= id {
            self.pairs.resize_with(id + 1, || None);
        }
        self.pairs[id] = Some(Pair {
            client: Some(client),
            backend: None,
            client_readable: true,
            backend_readable: false,
            client_hup: false,
            backend_hup: false,
            client_w: true,
            backend_w: false,
            udp: None,
            awaits: false,
            connecting: false,
        });
    }

    /// Opens the pair's backend connection (non-blocking; a refusal shows up
    /// as a failed read or write). False if it could not even start.
    fn connect_backend(&mut self, id: usize) -> bool {
        let Some(Some(p)) = self.pairs.get_mut(id) else {
            return false;
        };
        // A retry (the machine's decision) goes on a new connection.
        let fresh = self.shared.lock().machine.wants_fresh_backend(id);
        let pooled = match (&p.udp, self.udp.as_mut()) {
            (Some(_), Some(side)) if !fresh => take_pooled(side, &self.shared, &mut self.buf),
            _ => None,
        };
        let reused = pooled.is_some();
        let is_udp = p.udp.is_some();
        let b = match pooled {
            Some(b) => Ok(b),
            None => TcpStream::connect(self.backend),
        };
        let Ok(mut b) = b else {
            if is_udp {
                self.count_connect(false);
            }
            return false;
        };
        let _ = b.set_nodelay(true);
        let both = Interest::READABLE | Interest::WRITABLE;
        if self
            .poll
            .registry()
            .register(&mut b, Token(2 * id + 1), both)
            .is_err()
        {
            if is_udp && !reused {
                self.count_connect(false);
            }
            return false;
        }
        p.backend = Some(b);
        p.backend_readable = true;
        p.backend_hup = false;
        p.backend_w = true;
        p.connecting = is_udp && !reused;
        self.shared.lock().machine.backend_opened(id, reused);
        true
    }

    /// A UDP request's new backend connection worked (`ok`) or failed.
    fn count_connect(&self, ok: bool) {
        if let Some(t) = self.shared.lock().udp.as_mut() {
            if ok {
                t.stats.backend_connects += 1;
            } else {
                t.stats.backend_connect_failures += 1;
            }
        }
    }

    /// The pair's new backend connection is seen to work (a write taken, bytes read).
    fn connected(&mut self, id: usize) {
        if let Some(Some(p)) = self.pairs.get_mut(id) {
            if std::mem::take(&mut p.connecting) {
                self.count_connect(true);
            }
        }
    }

    fn drop_backend(&mut self, id: usize) {
        if let Some(Some(p)) = self.pairs.get_mut(id) {
            if let Some(mut b) = p.backend.take() {
                let _ = self.poll.registry().deregister(&mut b);
            }
            p.backend_readable = false;
            p.backend_w = false;
            if std::mem::take(&mut p.connecting) {
                self.count_connect(false);
            }
        }
    }

    /// Writes what waits for the pair's backend (or client). The bytes are
    /// taken out of the machine under the lock, written without it, and what
    /// did not go is put back in front of anything the machine added meanwhile.
    fn flush(&mut self, id: usize, backend: bool) -> Flushed {
        let Some(Some(p)) = self.pairs.get_mut(id) else {
            return Flushed::Nothing;
        };
        let Some(s) = (if backend {
            p.backend.as_mut()
        } else {
            p.client.as_mut()
        }) else {
            return Flushed::Nothing;
        };
        let mut out = match out_of(&mut self.shared.lock().machine, id, backend) {
            Some(o) if !o.is_empty() => std::mem::take(o),
            _ => return Flushed::Nothing,
        };
        let before = out.len();
        let ok = write_some(s, &mut out);
        let after = out.len();
        if let Some(o) = out_of(&mut self.shared.lock().machine, id, backend) {
            out.extend_from_slice(o);
            *o = out;
        }
        if !ok {
            Flushed::Failed
        } else if after == 0 {
            Flushed::Wrote
        } else if after < before {
            Flushed::Partial
        } else {
            Flushed::Nothing
        }
    }

    /// Moves bytes for one pair until nothing more can move, then closes it if it is done.
    fn service(&mut self, id: usize, now: Now) {
        let mut reads = 0;
        loop {
            if !matches!(self.pairs.get(id), Some(Some(_))) {
                return;
            }
            let mut progress = self.take_udp_answer(id);
            let (reset, to_backend) = {
                let mut g = self.shared.lock();
                let reset = g.machine.take_backend_reset(id);
                let to_backend = g.machine.backend_out(id).is_some_and(|o| !o.is_empty());
                (reset, to_backend)
            };
            if reset {
                self.drop_backend(id);
            }
            let has_backend = matches!(self.pairs.get(id), Some(Some(p)) if p.backend.is_some());
            if to_backend && !has_backend && !self.connect_backend(id) {
                self.shared.lock().machine.backend_failed(id, now);
                progress = true;
            }
            match self.flush(id, true) {
                Flushed::Failed => {
                    self.drop_backend(id);
                    self.shared.lock().machine.backend_failed(id, now);
                    progress = true;
                }
                Flushed::Wrote | Flushed::Partial => self.connected(id),
                Flushed::Nothing => {}
            }
            match self.flush(id, false) {
                Flushed::Failed => {
                    self.drop_client(id);
                    continue;
                }
                Flushed::Wrote | Flushed::Partial => progress = true,
                Flushed::Nothing => {}
            }
            self.shared.lock().machine.resume(id, now);
            // The backend first: its answers free room the client's requests wait for.
            while reads < READS_PER_TURN && self.shared.lock().machine.wants_backend_input(id) {
                let Some(Some(p)) = self.pairs.get_mut(id) else {
                    return;
                };
                let Some(b) = p.backend.as_mut().filter(|_| p.backend_readable) else {
                    break;
                };
                reads += 1;
                match read_once(b, &mut self.buf) {
                    Got::Bytes(n) => {
                        let confirmed = std::mem::take(&mut p.connecting);
                        // A short read emptied the socket: the next bytes
                        // bring a new edge, so no read to see it is empty.
                        p.backend_readable = n == self.buf.len() || p.backend_hup;
                        self.shared
                            .lock()
                            .machine
                            .backend_input(id, &self.buf[..n], now);
                        if confirmed {
                            self.count_connect(true);
                        }
                        progress = true;
                    }
                    Got::Empty => p.backend_readable = false,
                    Got::Eof => {
                        self.drop_backend(id);
                        self.shared.lock().machine.backend_eof(id, now);
                        progress = true;
                    }
                    Got::Failed => {
                        self.drop_backend(id);
                        self.shared.lock().machine.backend_failed(id, now);
                        progress = true;
                    }
                }
            }
            while reads < READS_PER_TURN && self.shared.lock().machine.wants_client_input(id) {
                let Some(Some(p)) = self.pairs.get_mut(id) else {
                    return;
                };
                let Some(c) = p.client.as_mut().filter(|_| p.client_readable) else {
                    break;
                };
                reads += 1;
                match read_once(c, &mut self.buf) {
                    Got::Bytes(n) => {
                        p.client_readable = n == self.buf.len() || p.client_hup;
                        let mut g = self.shared.lock();
                        g.machine.client_input(id, &self.buf[..n], now);
                        progress = true;
                    }
                    Got::Empty => p.client_readable = false,
                    Got::Eof => {
                        p.client_readable = false;
                        self.shared.lock().machine.client_eof(id, now);
                        progress = true;
                    }
                    Got::Failed => {
                        p.client_readable = false;
                        self.shared.lock().machine.client_closed(id);
                        progress = true;
                    }
                }
            }
            if reads >= READS_PER_TURN {
                // The last reads may have made output no write has tried: a
                // writable edge comes only after a write that would block.
                if self.readable_left(id) || self.output_waits(id) {
                    self.again.push(id);
                }
                break;
            }
            if !progress {
                break;
            }
        }
        self.take_udp_answer(id);
        let (finished, want_b, want_c) = {
            let mut g = self.shared.lock();
            let finished = g.machine.finished(id);
            let want_b = g.machine.backend_out(id).is_some_and(|o| !o.is_empty());
            let want_c = g.machine.client_out(id).is_some_and(|o| !o.is_empty());
            (finished, want_b, want_c)
        };
        if finished {
            self.close(id, now);
            return;
        }
        if let Some(Some(p)) = self.pairs.get_mut(id) {
            match p.backend.as_mut() {
                Some(b) => interest(&self.poll, b, Token(2 * id + 1), &mut p.backend_w, want_b),
                // Bytes for a backend not connected yet: no socket event will
                // ever call for the turn that connects it, so take it now.
                None if want_b => self.again.push(id),
                None => {}
            }
            if let Some(c) = p.client.as_mut() {
                interest(&self.poll, c, Token(2 * id), &mut p.client_w, want_c);
            }
        }
    }

    /// Whether the pair still has unread bytes the machine wants.
    fn readable_left(&self, id: usize) -> bool {
        let Some(Some(p)) = self.pairs.get(id) else {
            return false;
        };
        let g = self.shared.lock();
        (p.client_readable && p.client.is_some() && g.machine.wants_client_input(id))
            || (p.backend_readable && p.backend.is_some() && g.machine.wants_backend_input(id))
    }

    /// Whether bytes wait to be written to the pair's client or backend.
    fn output_waits(&mut self, id: usize) -> bool {
        let Some(Some(p)) = self.pairs.get(id) else {
            return false;
        };
        let (client, backend) = (p.client.is_some(), p.backend.is_some());
        let mut g = self.shared.lock();
        (client && g.machine.client_out(id).is_some_and(|o| !o.is_empty()))
            || (backend && g.machine.backend_out(id).is_some_and(|o| !o.is_empty()))
    }

    fn drop_client(&mut self, id: usize) {
        if let Some(Some(p)) = self.pairs.get_mut(id) {
            if let Some(mut c) = p.client.take() {
                let _ = self.poll.registry().deregister(&mut c);
            }
            p.client_readable = false;
        }
        self.shared.lock().machine.client_closed(id);
    }

    fn close(&mut self, id: usize, now: Now) {
        let mut was_open = false;
        if let Some(mut p) = self.pairs.get_mut(id).and_then(Option::take) {
            if p.awaits {
                self.awaiting -= 1;
            }
            // Pseudo-connections count against the UDP cap, not `max_connections`.
            was_open = p.udp.is_none();
            if let Some(mut c) = p.client.take() {
                let _ = self.poll.registry().deregister(&mut c);
            }
            if std::mem::take(&mut p.connecting) {
                self.count_connect(false);
            }
            if let Some(mut b) = p.backend.take() {
                let _ = self.poll.registry().deregister(&mut b);
                let clean = p.udp.is_some()
                    && !p.backend_hup
                    && !self.shared.lock().machine.take_backend_reset(id);
                // A UDP request answered in full leaves its backend connection idle: pooled.
                if let Some(side) = self.udp.as_mut().filter(|_| clean) {
                    if side.pool.len() < UDP_POOL_IDLE {
                        side.pool.push(b);
                    }
                }
            }
            if let Some(r) = p.udp.take() {
                self.send_udp_answer(r);
            }
        }
        let mut g = self.shared.lock();
        if was_open {
            g.open -= 1;
        }
        g.machine.remove(id, now);
    }
}

impl<M: InlineMachine> Driver<M> {
    /// Reads datagrams (at most a turn's budget): each admitted one becomes a
    /// pseudo-connection of the machine, served by this loop like a client
    /// that sent the request and half-closed; dropped ones are counted.
    fn receive(&mut self, now: Now, touched: &mut Vec<usize>) {
        self.udp_again = false;
        for _ in 0..DATAGRAMS_PER_TURN {
            let Some(side) = self.udp.as_mut() else {
                return;
            };
            let (n, peer) = match side.socket.recv_from(&mut self.buf) {
                Ok(got) => got,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => return,
                Err(e) => {
                    // An ICMP error of an earlier send, say: not this socket's end.
                    tracing::debug!(error = %e, "attach: UDP receive failed");
                    continue;
                }
            };
            let mut g = self.shared.lock();
            let st = &mut *g;
            let Some(table) = st.udp.as_mut() else {
                return;
            };
            let admitted = match table.admit(peer, &self.buf[..n]) {
                Ok(a) => {
                    table.admitted_on(self.me);
                    a
                }
                Err(why) => {
                    tracing::debug!(%peer, %why, stats = ?table.stats, "attach: UDP datagram dropped");
                    continue;
                }
            };
            let (request_id, payload) = (admitted.request_id, admitted.payload);
            let id = {
                let id = udp::open_request(&mut st.machine, payload, now);
                if st.owner.len() <= id {
                    st.owner.resize(id + 1, 0);
                }
                st.owner[id] = self.me;
                id
            };
            drop(g);
            if self.pairs.len() <= id {
                self.pairs.resize_with(id + 1, || None);
            }
            self.pairs[id] = Some(Pair {
                client: None,
                backend: None,
                client_readable: false,
                backend_readable: false,
                client_hup: false,
                backend_hup: false,
                client_w: false,
                backend_w: false,
                udp: Some(UdpReq {
                    peer,
                    request_id,
                    answer: Vec::new(),
                    overflow: false,
                    units: Vec::new(),
                }),
                awaits: false,
                connecting: false,
            });
            touched.push(id);
        }
        self.udp_again = true;
    }

    /// Moves a UDP pseudo-connection's answer bytes out of the machine (so it
    /// never pauses on unread output); true if there were any.
    fn take_udp_answer(&mut self, id: usize) -> bool {
        let Some(Some(Pair { udp: Some(r), .. })) = self.pairs.get_mut(id) else {
            return false;
        };
        let mut g = self.shared.lock();
        let units = g.machine.take_units(id);
        let Some(out) = g.machine.client_out(id).filter(|o| !o.is_empty()) else {
            return false;
        };
        if r.overflow || r.answer.len() + out.len() > MAX_ANSWER_BYTES {
            r.overflow = true;
            r.answer = Vec::new();
            r.units = Vec::new();
            out.clear();
        } else {
            r.answer.append(out);
            r.units.extend(units);
        }
        true
    }

    fn send_udp_answer(&mut self, r: UdpReq) {
        let Some(side) = self.udp.as_mut() else {
            return;
        };
        let answer = (!r.overflow).then_some(&r.answer[..]);
        let datagrams = match self.shared.lock().udp.as_mut() {
            Some(t) => {
                t.done(r.peer, r.request_id);
                t.answer(r.request_id, answer, &r.units)
            }
            None => return,
        };
        let (mut sent, mut failed) = (0, 0);
        for d in datagrams {
            match side.socket.send_to(&d, r.peer) {
                Ok(_) => sent += 1,
                Err(e) => {
                    failed += 1;
                    tracing::debug!(peer = %r.peer, error = %e, "attach: UDP answer datagram lost");
                }
            }
        }
        if let Some(t) = self.shared.lock().udp.as_mut() {
            t.stats.datagrams_sent += sent;
            t.stats.send_failed += failed;
        }
    }
}

/// An idle pooled backend connection for a UDP request, if one is still
/// good: one that reads anything (memcached closed it, as on a restart, or
/// sent bytes nobody asked for) is dropped and the next one tried. (One
/// memcached closes just after this look fails unanswered, and the machine
/// has its requests sent again on a new connection.)
fn take_pooled<M>(side: &mut UdpSide, shared: &Shared<M>, buf: &mut [u8]) -> Option<TcpStream> {
    let mut stale = 0;
    let got = loop {
        let Some(mut b) = side.pool.pop() else {
            break None;
        };
        match read_once(&mut b, buf) {
            Got::Empty => break Some(b),
            _ => stale += 1,
        }
    };
    if let Some(t) = shared.lock().udp.as_mut() {
        t.stats.backend_stale += stale;
        if got.is_some() {
            t.stats.backend_reused += 1;
        }
    }
    got
}

/// Binds a loop's UDP socket of an address that also serves UDP; with
/// `reuse_port` (several loops) with `SO_REUSEPORT`, so every loop binds the
/// same address and the kernel spreads datagrams over the sockets by
/// 4-tuple (one client socket always reaches the same loop).
pub fn bind_udp(poll: &Poll, addr: SocketAddr, reuse_port: bool) -> std::io::Result<UdpSide> {
    let mut socket = UdpSocket::from_std(udp_socket(addr, reuse_port)?);
    poll.registry()
        .register(&mut socket, UDP, Interest::READABLE)?;
    Ok(UdpSide {
        socket,
        pool: Vec::new(),
    })
}

/// A non-blocking UDP socket bound to `addr`, `SO_REUSEPORT` set first when asked.
fn udp_socket(addr: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::UdpSocket> {
    use std::os::fd::FromRawFd;
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    let kind = libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: plain socket(2); the fd is checked and owned below.
    let fd = unsafe { libc::socket(domain, kind, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket nobody else owns; closed on drop.
    let socket = unsafe { std::net::UdpSocket::from_raw_fd(fd) };
    if reuse_port {
        let one: libc::c_int = 1;
        // SAFETY: a valid socket and a c_int option value of the stated size.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_REUSEPORT,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // SAFETY: zeroed sockaddr structs are valid; the fields are filled below.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in.
            let sin = unsafe {
                &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    // SAFETY: `storage` holds a sockaddr of `len` bytes.
    let rc = unsafe {
        libc::bind(
            fd,
            (&storage as *const libc::sockaddr_storage).cast(),
            len as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(socket)
}

/// A fresh poll with a waker registered.
pub fn poll_with_waker() -> std::io::Result<(Poll, Arc<Waker>)> {
    let poll = Poll::new()?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    Ok((poll, waker))
}

/// Binds the listener and registers it and a waker with a fresh poll.
pub fn bind(addr: SocketAddr) -> std::io::Result<(Poll, TcpListener, Arc<Waker>)> {
    let (poll, waker) = poll_with_waker()?;
    let mut listener = TcpListener::bind(addr)?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    Ok((poll, listener, waker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    /// Echoes what a client sends, reading until `limit` bytes wait unsent;
    /// or, with `forward`, reads `limit` bytes (one request) and only then
    /// sends them all to the backend.
    struct EchoUpTo {
        out: Vec<u8>,
        limit: usize,
        forward: bool,
        received: usize,
        to_backend: Vec<u8>,
    }

    impl EchoUpTo {
        fn new(limit: usize, forward: bool) -> Self {
            EchoUpTo {
                out: Vec::new(),
                limit,
                forward,
                received: 0,
                to_backend: Vec::new(),
            }
        }
    }

    impl InlineMachine for EchoUpTo {
        fn open(&mut self) -> usize {
            0
        }
        fn wants_client_input(&self, _: usize) -> bool {
            if self.forward {
                self.received < self.limit
            } else {
                self.out.len() < self.limit
            }
        }
        fn wants_backend_input(&self, _: usize) -> bool {
            false
        }
        fn client_input(&mut self, _: usize, bytes: &[u8], _: Now) {
            self.received += bytes.len();
            self.out.extend_from_slice(bytes);
            if self.forward && self.received >= self.limit {
                self.to_backend.append(&mut self.out);
            }
        }
        fn client_eof(&mut self, _: usize, _: Now) {}
        fn client_closed(&mut self, _: usize) {}
        fn backend_input(&mut self, _: usize, _: &[u8], _: Now) {}
        fn backend_eof(&mut self, _: usize, _: Now) {}
        fn backend_failed(&mut self, _: usize, _: Now) {}
        fn take_backend_reset(&mut self, _: usize) -> bool {
            false
        }
        fn resume(&mut self, _: usize, _: Now) {}
        fn client_out(&mut self, _: usize) -> Option<&mut Vec<u8>> {
            (!self.forward).then_some(&mut self.out)
        }
        fn backend_out(&mut self, _: usize) -> Option<&mut Vec<u8>> {
            self.forward.then_some(&mut self.to_backend)
        }
        fn finished(&self, _: usize) -> bool {
            false
        }
        fn tick(&mut self, _: Now) -> Vec<usize> {
            Vec::new()
        }
        fn remove(&mut self, _: usize, _: Now) {}
    }

    /// The read budget of a turn runs out on the very read that fills the
    /// machine's output: that output must still go out, though no writable
    /// edge is pending (the client socket was writable all along). Before
    /// the fix the answer stayed unsent for ever (seen as a 30 s hang of a
    /// 1 MiB answer through the JWT gate under load).
    /// Starts a driver over `machine` once the client's whole `input` sits
    /// in the accepted socket (room for all of it), so the driver's first
    /// turn reads `READS_PER_TURN` full chunks and its read budget runs out on
    /// the very read that completes the input. Returns the client and what
    /// stops the driver.
    fn drive_after_input_landed(
        machine: EchoUpTo,
        input: &[u8],
        backend: SocketAddr,
    ) -> (std::net::TcpStream, impl FnOnce()) {
        let (poll, listener, waker) = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let room: libc::c_int = 4 << 20;
        // SAFETY: a valid socket and a c_int option value of the stated size.
        let rc = unsafe {
            libc::setsockopt(
                listener.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&room as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0);
        let addr = listener.local_addr().unwrap();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(input).unwrap();
        // Let the bytes land before the driver looks.
        std::thread::sleep(Duration::from_millis(100));
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Shared::new(machine, vec![waker]));
        let settings = LoopSettings {
            backend,
            max_connections: 4,
            spin: Duration::ZERO,
            backend_spin: Duration::ZERO,
            spin_when: SpinWhen::Always,
        };
        let driver = Driver::new(
            poll,
            Some(listener),
            shared,
            0,
            settings,
            stop.clone(),
            None,
        );
        let thread = std::thread::spawn(move || driver.run());
        let finish = move || {
            stop.store(true, Ordering::SeqCst);
            thread.join().unwrap();
        };
        (client, finish)
    }

    fn input() -> Vec<u8> {
        (0..READS_PER_TURN * READ_CHUNK).map(|i| i as u8).collect()
    }

    /// The read budget of a turn runs out on the very read that fills the
    /// machine's output: that output must still go out, though no writable
    /// edge is pending (the client socket was writable all along). Before
    /// the fix the answer stayed unsent for ever (seen as a 30 s hang of a
    /// 1 MiB answer through the JWT gate under load).
    #[test]
    fn output_made_by_the_last_read_of_a_turn_is_written() {
        let input = input();
        let machine = EchoUpTo::new(input.len(), false);
        let (mut client, finish) =
            drive_after_input_landed(machine, &input, "127.0.0.1:9".parse().unwrap());
        client
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut back = vec![0; input.len()];
        let got = client.read_exact(&mut back);
        finish();
        got.expect("the echo of the whole input within 3 s");
        assert!(back == input);
    }

    /// The same budget running out on the read that completes a request
    /// bound for a backend not connected yet: the backend must still be
    /// connected and sent the request. Before the fix nothing was pending on
    /// any socket, so the pair waited for ever (seen in CI as a 504 from the
    /// JWT gate's 5 s backend timeout on a 1 MiB POST, about 1 in 100 under
    /// load).
    #[test]
    fn a_request_completed_by_the_last_read_of_a_turn_reaches_the_backend() {
        let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let input = input();
        let machine = EchoUpTo::new(input.len(), true);
        let (_client, finish) =
            drive_after_input_landed(machine, &input, backend.local_addr().unwrap());
        backend.set_nonblocking(true).unwrap();
        let deadline = Instant::now() + Duration::from_secs(3);
        let accepted = loop {
            match backend.accept() {
                Ok((s, _)) => break Some(s),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break None,
            }
        };
        let got = accepted.map(|mut s| {
            s.set_nonblocking(false).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
            let mut sent = vec![0; input.len()];
            s.read_exact(&mut sent).map(|()| sent)
        });
        finish();
        let sent = got
            .expect("the backend connected within 3 s")
            .expect("the whole request at the backend within 3 s");
        assert!(sent == input);
    }
}
