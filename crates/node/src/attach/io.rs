//! The attach listener's thin driver: one thread, one mio poll, every client
//! connection paired with its own backend connection. It moves bytes between
//! the sockets and the sans-IO [`Machine`] and passes the time in; nothing
//! here decides anything.

use super::machine::Machine;
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub const LISTENER: Token = Token(usize::MAX - 1);
pub const WAKER: Token = Token(usize::MAX - 2);
const READ_CHUNK: usize = 64 * 1024;
/// Reads from one client per turn of the loop, so a flooding client cannot starve the others.
const READS_PER_TURN: usize = 8;

struct Pair {
    client: Option<TcpStream>,
    backend: TcpStream,
    client_readable: bool,
    /// Registered for writability: only while bytes wait for room (an
    /// edge-triggered EPOLLOUT would otherwise wake the loop after every write).
    client_w: bool,
    backend_w: bool,
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

pub struct Driver {
    pub poll: Poll,
    pub listener: TcpListener,
    pub machine: Machine,
    pub backend: SocketAddr,
    pub max_connections: usize,
    pub stop: Arc<AtomicBool>,
    pairs: Vec<Option<Pair>>,
    open: usize,
    buf: Vec<u8>,
    /// Clients left with bytes to read when their turn ended: served next turn.
    again: Vec<usize>,
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

impl Driver {
    pub fn new(
        poll: Poll,
        listener: TcpListener,
        machine: Machine,
        backend: SocketAddr,
        max_connections: usize,
        stop: Arc<AtomicBool>,
    ) -> Self {
        Driver {
            poll,
            listener,
            machine,
            backend,
            max_connections,
            stop,
            pairs: Vec::new(),
            open: 0,
            buf: vec![0; READ_CHUNK],
            again: Vec::new(),
        }
    }

    pub fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        let mut touched = Vec::new();
        let mut last_tick = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            let wait = if self.again.is_empty() {
                Duration::from_millis(50)
            } else {
                Duration::ZERO
            };
            if let Err(e) = self.poll.poll(&mut events, Some(wait)) {
                if e.kind() == ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!(error = %e, "attach: poll failed; the listener stops");
                return;
            }
            let now = Instant::now();
            touched.clear();
            touched.append(&mut self.again);
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(now),
                    WAKER => {}
                    Token(t) => {
                        let id = t / 2;
                        if t % 2 == 0 {
                            if let Some(Some(p)) = self.pairs.get_mut(id) {
                                p.client_readable = true;
                            }
                        } else {
                            self.read_backend(id, now);
                        }
                        touched.push(id);
                    }
                }
            }
            if now.duration_since(last_tick) >= Duration::from_millis(10) {
                touched.extend(self.machine.tick(now));
                last_tick = now;
            }
            touched.sort_unstable();
            touched.dedup();
            for &id in &touched {
                self.service(id, now);
            }
        }
    }

    fn accept(&mut self, now: Instant) {
        loop {
            let (client, _) = match self.listener.accept() {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if would_block(&e) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "attach: accept failed");
                    return;
                }
            };
            if self.open >= self.max_connections {
                tracing::warn!(
                    max = self.max_connections,
                    "attach: connection limit reached; closing a new client"
                );
                continue;
            }
            if let Err(e) = self.pair(client, now) {
                tracing::warn!(error = %e, "attach: cannot set up a backend connection");
            }
        }
    }

    fn pair(&mut self, mut client: TcpStream, _now: Instant) -> std::io::Result<()> {
        let mut backend = TcpStream::connect(self.backend)?;
        let _ = client.set_nodelay(true);
        let _ = backend.set_nodelay(true);
        let id = self.machine.open();
        let both = Interest::READABLE | Interest::WRITABLE;
        let reg = self
            .poll
            .registry()
            .register(&mut client, Token(2 * id), both)
            .and_then(|()| {
                self.poll
                    .registry()
                    .register(&mut backend, Token(2 * id + 1), both)
            });
        if let Err(e) = reg {
            self.machine.remove(id, Instant::now());
            return Err(e);
        }
        if self.pairs.len() <= id {
            self.pairs.resize_with(id + 1, || None);
        }
        self.pairs[id] = Some(Pair {
            client: Some(client),
            backend,
            client_readable: true,
            client_w: false,
            backend_w: true,
        });
        self.open += 1;
        Ok(())
    }

    fn read_backend(&mut self, id: usize, now: Instant) {
        let Some(Some(p)) = self.pairs.get_mut(id) else {
            return;
        };
        loop {
            match p.backend.read(&mut self.buf) {
                Ok(0) => {
                    self.machine.backend_failed(id, now);
                    return;
                }
                Ok(n) => self.machine.backend_input(id, &self.buf[..n], now),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if would_block(&e) => return,
                Err(_) => {
                    self.machine.backend_failed(id, now);
                    return;
                }
            }
        }
    }

    /// Moves bytes for one pair until nothing more can move, then closes it if it is done.
    fn service(&mut self, id: usize, now: Instant) {
        let mut reads = 0;
        loop {
            let Some(Some(p)) = self.pairs.get_mut(id) else {
                return;
            };
            let mut progress = false;
            if let Some(out) = self.machine.backend_out(id) {
                if !out.is_empty() && !write_some(&mut p.backend, out) {
                    self.machine.backend_failed(id, now);
                    progress = true;
                }
            }
            if let (Some(c), Some(out)) = (p.client.as_mut(), self.machine.client_out(id)) {
                let before = out.len();
                if before > 0 {
                    if write_some(c, out) {
                        progress |= out.len() < before;
                    } else {
                        self.drop_client(id);
                        continue;
                    }
                }
            }
            self.machine.resume(id, now);
            let Some(Some(p)) = self.pairs.get_mut(id) else {
                return;
            };
            while p.client_readable && self.machine.wants_client_input(id) {
                if reads == READS_PER_TURN {
                    self.again.push(id);
                    break;
                }
                reads += 1;
                let Some(c) = p.client.as_mut() else { break };
                match c.read(&mut self.buf) {
                    Ok(0) => {
                        p.client_readable = false;
                        self.machine.client_closed(id);
                        progress = true;
                    }
                    Ok(n) => {
                        self.machine.client_input(id, &self.buf[..n], now);
                        progress = true;
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) if would_block(&e) => p.client_readable = false,
                    Err(_) => {
                        p.client_readable = false;
                        self.machine.client_closed(id);
                        progress = true;
                    }
                }
            }
            let pending_out = self.machine.client_out(id).is_some_and(|o| !o.is_empty())
                || self.machine.backend_out(id).is_some_and(|o| !o.is_empty());
            if !progress || !pending_out {
                break;
            }
        }
        if self.machine.finished(id) {
            self.close(id, now);
            return;
        }
        let want_b = self.machine.backend_out(id).is_some_and(|o| !o.is_empty());
        let want_c = self.machine.client_out(id).is_some_and(|o| !o.is_empty());
        if let Some(Some(p)) = self.pairs.get_mut(id) {
            interest(
                &self.poll,
                &mut p.backend,
                Token(2 * id + 1),
                &mut p.backend_w,
                want_b,
            );
            if let Some(c) = p.client.as_mut() {
                interest(&self.poll, c, Token(2 * id), &mut p.client_w, want_c);
            }
        }
    }

    fn drop_client(&mut self, id: usize) {
        if let Some(Some(p)) = self.pairs.get_mut(id) {
            if let Some(mut c) = p.client.take() {
                let _ = self.poll.registry().deregister(&mut c);
            }
            p.client_readable = false;
        }
        self.machine.client_closed(id);
    }

    fn close(&mut self, id: usize, now: Instant) {
        if let Some(slot) = self.pairs.get_mut(id) {
            if let Some(mut p) = slot.take() {
                if let Some(mut c) = p.client.take() {
                    let _ = self.poll.registry().deregister(&mut c);
                }
                let _ = self.poll.registry().deregister(&mut p.backend);
                self.open -= 1;
            }
        }
        self.machine.remove(id, now);
    }
}

/// Binds the listener and registers it and a waker with a fresh poll.
pub fn bind(addr: SocketAddr) -> std::io::Result<(Poll, TcpListener, Arc<Waker>)> {
    let poll = Poll::new()?;
    let mut listener = TcpListener::bind(addr)?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
    Ok((poll, listener, waker))
}
