//! The I/O thread: accepts connections, feeds their bytes to the engine,
//! carries out the engine's actions, and sleeps only after `spin_us` of
//! idleness in polling mode (at once in blocking mode).

use crate::conn_out::{ConnOut, PAUSE_READING_ABOVE};
use crate::metrics::Metrics;
use crate::wake::IoWaker;
use crate::worker::{Executor, SlotWorker, Work};
use crate::IoMode;
use crossbeam_channel::Receiver;
use mio::net::{TcpListener, TcpStream};
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use offrac_core::{Action, ConnId, Engine};
use slab::Slab;
use std::collections::VecDeque;
use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const LISTENER: Token = Token(usize::MAX - 1);
pub const WAKER: Token = Token(usize::MAX - 2);
const READ_CHUNK: usize = 64 * 1024;
/// Reads from one connection per turn, so one flooding client cannot starve the rest.
const READS_PER_TURN: usize = 8;
/// How long a connection closed for an error may linger to let its last answer reach the client.
const CLOSE_LINGER: Duration = Duration::from_secs(2);
/// How long shutdown waits for held requests to be answered and flushed.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A slot's function run on the I/O thread for requests up to `max_bytes`.
pub struct InlineSlot {
    pub max_bytes: usize,
    pub executor: Executor,
}

struct Conn {
    id: ConnId,
    out: Arc<ConnOut>,
    /// Output backlog is high: stop reading until it drains.
    paused: bool,
    /// Closing after an error: its last answer is being flushed, input is discarded.
    closing_since: Option<Instant>,
}

pub struct Server {
    pub poll: Poll,
    pub listener: Option<TcpListener>,
    pub engine: Engine,
    pub workers: Vec<SlotWorker>,
    pub inline: Vec<Option<InlineSlot>>,
    pub done_rx: Receiver<usize>,
    pub waker: Arc<IoWaker>,
    pub metrics: Arc<Metrics>,
    pub io_mode: IoMode,
    pub spin: Duration,
    pub shutdown: Arc<AtomicBool>,
    pub clock: Instant,
    conns: Slab<Conn>,
    generation: u64,
    more_to_read: VecDeque<usize>,
    buf: Vec<u8>,
}

impl Server {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        poll: Poll,
        listener: TcpListener,
        engine: Engine,
        workers: Vec<SlotWorker>,
        inline: Vec<Option<InlineSlot>>,
        done_rx: Receiver<usize>,
        waker: Arc<IoWaker>,
        metrics: Arc<Metrics>,
        io_mode: IoMode,
        spin: Duration,
        shutdown: Arc<AtomicBool>,
        clock: Instant,
    ) -> Server {
        Server {
            poll,
            listener: Some(listener),
            engine,
            workers,
            inline,
            done_rx,
            waker,
            metrics,
            io_mode,
            spin,
            shutdown,
            clock,
            conns: Slab::new(),
            generation: 0,
            more_to_read: VecDeque::new(),
            buf: vec![0; READ_CHUNK],
        }
    }

    fn now(&self) -> u64 {
        self.clock.elapsed().as_nanos() as u64 + 1
    }

    pub fn run(mut self) -> std::io::Result<()> {
        let mut events = Events::with_capacity(1024);
        let mut last_work = Instant::now();
        let mut last_publish = Instant::now();
        let mut shutdown_started: Option<Instant> = None;
        loop {
            if shutdown_started.is_none() && self.shutdown.load(Ordering::SeqCst) {
                shutdown_started = Some(Instant::now());
                self.begin_shutdown();
            }
            if let Some(t) = shutdown_started {
                let flushed = self.conns.iter().all(|(_, c)| c.out.backlog() == 0);
                if (self.engine.is_idle() && flushed) || t.elapsed() > SHUTDOWN_GRACE {
                    break;
                }
            }
            let mut work = self.drain_completions();
            work |= self.read_more();
            let spinning = self.io_mode == IoMode::Poll && last_work.elapsed() < self.spin;
            let timeout = if work || spinning {
                Some(Duration::ZERO)
            } else {
                // Going idle: publish first, so a scrape after a burst sees all of it.
                if last_publish.elapsed() > Duration::from_millis(1) {
                    last_publish = Instant::now();
                    self.metrics.publish(&self.engine);
                }
                self.prepare_sleep()
            };
            match self.poll.poll(&mut events, timeout) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            self.waker.woke_up();
            // Completions first: a slot freed before its answer went out must be
            // seen free by the request that answer prompted (read below).
            work |= self.drain_completions();
            for ev in events.iter() {
                work = true;
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(key) => {
                        if ev.is_error() {
                            // Reset or otherwise broken: nothing can be delivered any more.
                            self.finalize(key);
                            continue;
                        }
                        if ev.is_writable() {
                            self.flush(key);
                        }
                        if ev.is_readable() || ev.is_read_closed() {
                            self.read(key, ev.is_read_closed());
                        }
                    }
                }
            }
            let now = self.now();
            if self.engine.poll_timeout().is_some_and(|t| t <= now) {
                self.engine.handle_timeout(now);
                self.apply_actions();
            }
            if work {
                last_work = Instant::now();
            }
            if last_publish.elapsed() > Duration::from_millis(50) {
                last_publish = Instant::now();
                self.metrics.publish(&self.engine);
                self.reap_lingering();
            }
        }
        self.metrics.publish(&self.engine);
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for key in keys {
            self.finalize(key);
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
        if !self.done_rx.is_empty() || self.shutdown.load(Ordering::SeqCst) {
            return Some(Duration::ZERO);
        }
        let cap = Duration::from_millis(50);
        let until_timer = self
            .engine
            .poll_timeout()
            .map(|t| Duration::from_nanos(t.saturating_sub(self.now())));
        Some(until_timer.map_or(cap, |d| d.min(cap)))
    }

    fn drain_completions(&mut self) -> bool {
        let mut any = false;
        while let Ok(slot) = self.done_rx.try_recv() {
            any = true;
            let now = self.now();
            self.engine.handle_slot_done(now, slot);
        }
        if any {
            self.apply_actions();
        }
        any
    }

    fn accept(&mut self) {
        loop {
            let Some(listener) = &self.listener else {
                return;
            };
            match listener.accept() {
                Ok((stream, peer)) => self.add_conn(stream, peer),
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

    fn add_conn(&mut self, mut stream: TcpStream, peer: std::net::SocketAddr) {
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
        self.generation += 1;
        let id = (self.generation << 32) | key as u64;
        entry.insert(Conn {
            id,
            out: Arc::new(ConnOut::new(stream)),
            paused: false,
            closing_since: None,
        });
        tracing::debug!(conn = id, %peer, "connection opened");
    }

    fn key_of(&self, id: ConnId) -> Option<usize> {
        let key = (id & 0xffff_ffff) as usize;
        self.conns.get(key).filter(|c| c.id == id).map(|_| key)
    }

    /// Read what the connection has; `hung_up`: the peer sent its last byte.
    fn read(&mut self, key: usize, hung_up: bool) {
        let Some(c) = self.conns.get(key) else { return };
        if c.paused {
            // Not reading this one for now, but a client that hung up will
            // never read its answers either: let it go.
            if hung_up {
                self.finalize(key);
            }
            return;
        }
        let (id, out, closing) = (c.id, c.out.clone(), c.closing_since.is_some());
        let mut buf = std::mem::take(&mut self.buf);
        for turn in 0.. {
            if turn == READS_PER_TURN {
                self.more_to_read.push_back(key);
                break;
            }
            match (&out.stream).read(&mut buf) {
                Ok(0) => {
                    self.finalize(key);
                    break;
                }
                Ok(_) if closing => continue,
                Ok(n) => {
                    let now = self.now();
                    self.engine.handle_bytes(now, id, &buf[..n]);
                    self.apply_actions();
                    let Some(c) = self
                        .conns
                        .get_mut(key)
                        .filter(|c| c.id == id && c.closing_since.is_none())
                    else {
                        break;
                    };
                    if out.backlog() > PAUSE_READING_ABOVE {
                        c.paused = true;
                        break;
                    }
                    // A short read drained the socket: new bytes will raise a new
                    // (edge-triggered) event, so skip the read that would only say
                    // WouldBlock, and let the other connections have their turn.
                    // After a hang-up no new event comes: read on to the end.
                    if n < buf.len() && !hung_up {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => {
                    self.finalize(key);
                    break;
                }
            }
        }
        self.buf = buf;
    }

    /// Connections that hit their per-turn read budget get another turn.
    fn read_more(&mut self) -> bool {
        let n = self.more_to_read.len();
        for _ in 0..n {
            if let Some(key) = self.more_to_read.pop_front() {
                self.read(key, false);
            }
        }
        n > 0
    }

    fn flush(&mut self, key: usize) {
        let Some(c) = self.conns.get_mut(key) else {
            return;
        };
        let left = c.out.flush();
        if c.out.is_closed() {
            self.finalize(key);
            return;
        }
        if c.closing_since.is_some() && left == 0 {
            let _ = c.out.stream.shutdown(std::net::Shutdown::Write);
        }
        if c.paused && left < PAUSE_READING_ABOVE / 2 {
            c.paused = false;
            self.more_to_read.push_back(key);
        }
    }

    fn apply_actions(&mut self) {
        while let Some(action) = self.engine.poll_action() {
            match action {
                Action::Dispatch { slot, job } => {
                    let out = self.key_of(job.conn).map(|k| self.conns[k].out.clone());
                    let work = Work { job, out };
                    match &mut self.inline[slot] {
                        // Short enough to run here: no thread hand-off, no wake-up.
                        Some(inl) if work.job.payload.len() <= inl.max_bytes => {
                            // The engine frees the slot right after, before reading more.
                            inl.executor.execute(work, || {});
                            let now = self.now();
                            self.engine.handle_slot_done(now, slot);
                        }
                        // Workers never exit while the server runs, so a send cannot fail here.
                        _ => drop(self.workers[slot].tx.send(work)),
                    }
                }
                Action::Reply {
                    conn,
                    header,
                    message,
                } => {
                    if let Some(k) = self.key_of(conn) {
                        self.conns[k].out.send(&header.encode(), message.as_bytes());
                    }
                }
                Action::Close { conn } => {
                    if let Some(k) = self.key_of(conn) {
                        let now = self.now();
                        self.engine.handle_close(now, conn);
                        let c = &mut self.conns[k];
                        c.closing_since = Some(Instant::now());
                        c.paused = false;
                        // Half-close once the last answer is out; keep reading (and
                        // discarding) so the kernel does not reset the connection
                        // before the client has read that answer.
                        if c.out.flush() == 0 {
                            let _ = c.out.stream.shutdown(std::net::Shutdown::Write);
                        }
                    }
                }
            }
        }
    }

    /// Forget a connection: the engine collects its partial request.
    fn finalize(&mut self, key: usize) {
        let Some(c) = self.conns.try_remove(key) else {
            return;
        };
        let now = self.now();
        self.engine.handle_close(now, c.id);
        self.apply_actions();
        let fd = c.out.stream.as_raw_fd();
        let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
        c.out.close();
        tracing::debug!(conn = c.id, "connection closed");
    }

    fn reap_lingering(&mut self) {
        let stale: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| c.closing_since.is_some_and(|t| t.elapsed() > CLOSE_LINGER))
            .map(|(k, _)| k)
            .collect();
        for key in stale {
            self.finalize(key);
        }
    }

    fn begin_shutdown(&mut self) {
        tracing::info!("shutting down: refusing new requests, finishing held ones");
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        let now = self.now();
        self.engine.begin_shutdown(now);
        self.apply_actions();
    }
}
