//! The attach listener's thin driver: one thread, one mio poll, every client
//! connection paired with one backend connection at a time (opened when the
//! machine has bytes for the backend). It moves bytes between the sockets and
//! an [`InlineMachine`] and passes the time in; nothing here decides anything.

use super::inline::{InlineMachine, Now};
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
/// Reads from one connection per turn of the loop, so a flooding client
/// (or backend) cannot starve the others.
const READS_PER_TURN: usize = 8;

struct Pair {
    client: Option<TcpStream>,
    backend: Option<TcpStream>,
    client_readable: bool,
    backend_readable: bool,
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

pub struct Driver<M> {
    pub poll: Poll,
    pub listener: TcpListener,
    pub machine: M,
    pub backend: SocketAddr,
    pub max_connections: usize,
    pub stop: Arc<AtomicBool>,
    pairs: Vec<Option<Pair>>,
    open: usize,
    buf: Vec<u8>,
    /// Connections left with bytes to read when their turn ended: served next turn.
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

impl<M: InlineMachine> Driver<M> {
    pub fn new(
        poll: Poll,
        listener: TcpListener,
        machine: M,
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
            let now = Now::read();
            touched.clear();
            touched.append(&mut self.again);
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept(),
                    WAKER => {}
                    Token(t) => {
                        let id = t / 2;
                        if let Some(Some(p)) = self.pairs.get_mut(id) {
                            if t % 2 == 0 {
                                p.client_readable = true;
                            } else {
                                p.backend_readable = true;
                            }
                        }
                        touched.push(id);
                    }
                }
            }
            if now.mono.duration_since(last_tick) >= Duration::from_millis(10) {
                touched.extend(self.machine.tick(now));
                last_tick = now.mono;
            }
            touched.sort_unstable();
            touched.dedup();
            for &id in &touched {
                self.service(id, now);
            }
        }
    }

    fn accept(&mut self) {
        loop {
            let (mut client, _) = match self.listener.accept() {
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
            let _ = client.set_nodelay(true);
            let id = self.machine.open();
            let both = Interest::READABLE | Interest::WRITABLE;
            if let Err(e) = self
                .poll
                .registry()
                .register(&mut client, Token(2 * id), both)
            {
                tracing::warn!(error = %e, "attach: cannot register a client");
                self.machine.remove(id, Now::read());
                continue;
            }
            if self.pairs.len() <= id {
                self.pairs.resize_with(id + 1, || None);
            }
            self.pairs[id] = Some(Pair {
                client: Some(client),
                backend: None,
                client_readable: true,
                backend_readable: false,
                client_w: true,
                backend_w: false,
            });
            self.open += 1;
        }
    }

    /// Opens the pair's backend connection (non-blocking; a refusal shows up
    /// as a failed read or write). False if it could not even start.
    fn connect_backend(&mut self, id: usize) -> bool {
        let Some(Some(p)) = self.pairs.get_mut(id) else {
            return false;
        };
        let Ok(mut b) = TcpStream::connect(self.backend) else {
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
            return false;
        }
        p.backend = Some(b);
        p.backend_readable = true;
        p.backend_w = true;
        true
    }

    fn drop_backend(&mut self, id: usize) {
        if let Some(Some(p)) = self.pairs.get_mut(id) {
            if let Some(mut b) = p.backend.take() {
                let _ = self.poll.registry().deregister(&mut b);
            }
            p.backend_readable = false;
            p.backend_w = false;
        }
    }

    /// Moves bytes for one pair until nothing more can move, then closes it if it is done.
    fn service(&mut self, id: usize, now: Now) {
        let mut reads = 0;
        loop {
            if !matches!(self.pairs.get(id), Some(Some(_))) {
                return;
            }
            let mut progress = false;
            if self.machine.take_backend_reset(id) {
                self.drop_backend(id);
            }
            let to_backend = self.machine.backend_out(id).is_some_and(|o| !o.is_empty());
            let has_backend = matches!(self.pairs.get(id), Some(Some(p)) if p.backend.is_some());
            if to_backend && !has_backend && !self.connect_backend(id) {
                self.machine.backend_failed(id, now);
                progress = true;
            }
            let Some(Some(p)) = self.pairs.get_mut(id) else {
                return;
            };
            if let (Some(b), Some(out)) = (p.backend.as_mut(), self.machine.backend_out(id)) {
                if !out.is_empty() && !write_some(b, out) {
                    self.drop_backend(id);
                    self.machine.backend_failed(id, now);
                    progress = true;
                }
            }
            let Some(Some(p)) = self.pairs.get_mut(id) else {
                return;
            };
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
            // The backend first: its answers free room the client's requests wait for.
            while reads < READS_PER_TURN && self.machine.wants_backend_input(id) {
                let Some(Some(p)) = self.pairs.get_mut(id) else {
                    return;
                };
                let Some(b) = p.backend.as_mut().filter(|_| p.backend_readable) else {
                    break;
                };
                reads += 1;
                match read_once(b, &mut self.buf) {
                    Got::Bytes(n) => {
                        self.machine.backend_input(id, &self.buf[..n], now);
                        progress = true;
                    }
                    Got::Empty => p.backend_readable = false,
                    Got::Eof => {
                        self.drop_backend(id);
                        self.machine.backend_eof(id, now);
                        progress = true;
                    }
                    Got::Failed => {
                        self.drop_backend(id);
                        self.machine.backend_failed(id, now);
                        progress = true;
                    }
                }
            }
            while reads < READS_PER_TURN && self.machine.wants_client_input(id) {
                let Some(Some(p)) = self.pairs.get_mut(id) else {
                    return;
                };
                let Some(c) = p.client.as_mut().filter(|_| p.client_readable) else {
                    break;
                };
                reads += 1;
                match read_once(c, &mut self.buf) {
                    Got::Bytes(n) => {
                        self.machine.client_input(id, &self.buf[..n], now);
                        progress = true;
                    }
                    Got::Empty => p.client_readable = false,
                    Got::Eof => {
                        p.client_readable = false;
                        self.machine.client_eof(id, now);
                        progress = true;
                    }
                    Got::Failed => {
                        p.client_readable = false;
                        self.machine.client_closed(id);
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
        if self.machine.finished(id) {
            self.close(id, now);
            return;
        }
        let want_b = self.machine.backend_out(id).is_some_and(|o| !o.is_empty());
        let want_c = self.machine.client_out(id).is_some_and(|o| !o.is_empty());
        if let Some(Some(p)) = self.pairs.get_mut(id) {
            if let Some(b) = p.backend.as_mut() {
                interest(&self.poll, b, Token(2 * id + 1), &mut p.backend_w, want_b);
            }
            if let Some(c) = p.client.as_mut() {
                interest(&self.poll, c, Token(2 * id), &mut p.client_w, want_c);
            }
        }
    }

    /// Whether the pair still has unread bytes the machine wants.
    fn readable_left(&self, id: usize) -> bool {
        matches!(self.pairs.get(id), Some(Some(p))
            if (p.client_readable && p.client.is_some() && self.machine.wants_client_input(id))
                || (p.backend_readable && p.backend.is_some() && self.machine.wants_backend_input(id)))
    }

    /// Whether bytes wait to be written to the pair's client or backend.
    fn output_waits(&mut self, id: usize) -> bool {
        let Some(Some(p)) = self.pairs.get(id) else {
            return false;
        };
        let (client, backend) = (p.client.is_some(), p.backend.is_some());
        (client && self.machine.client_out(id).is_some_and(|o| !o.is_empty()))
            || (backend && self.machine.backend_out(id).is_some_and(|o| !o.is_empty()))
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

    fn close(&mut self, id: usize, now: Now) {
        if let Some(slot) = self.pairs.get_mut(id) {
            if let Some(mut p) = slot.take() {
                if let Some(mut c) = p.client.take() {
                    let _ = self.poll.registry().deregister(&mut c);
                }
                if let Some(mut b) = p.backend.take() {
                    let _ = self.poll.registry().deregister(&mut b);
                }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::AsRawFd;

    /// Echoes what a client sends, reading until `limit` bytes wait unsent.
    struct EchoUpTo {
        out: Vec<u8>,
        limit: usize,
    }

    impl InlineMachine for EchoUpTo {
        fn open(&mut self) -> usize {
            0
        }
        fn wants_client_input(&self, _: usize) -> bool {
            self.out.len() < self.limit
        }
        fn wants_backend_input(&self, _: usize) -> bool {
            false
        }
        fn client_input(&mut self, _: usize, bytes: &[u8], _: Now) {
            self.out.extend_from_slice(bytes);
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
            Some(&mut self.out)
        }
        fn backend_out(&mut self, _: usize) -> Option<&mut Vec<u8>> {
            None
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
    #[test]
    fn output_made_by_the_last_read_of_a_turn_is_written() {
        let (poll, listener, _waker) = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        // Room for the whole input in the accepted socket, so the driver's
        // first turn finds all of it readable at once.
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
        let input: Vec<u8> = (0..READS_PER_TURN * READ_CHUNK).map(|i| i as u8).collect();
        let mut client = std::net::TcpStream::connect(addr).unwrap();
        client.write_all(&input).unwrap();
        // Let the bytes land before the driver looks.
        std::thread::sleep(Duration::from_millis(100));
        let stop = Arc::new(AtomicBool::new(false));
        let machine = EchoUpTo {
            out: Vec::new(),
            limit: input.len(),
        };
        let backend = "127.0.0.1:9".parse().unwrap();
        let driver = Driver::new(poll, listener, machine, backend, 4, stop.clone());
        let thread = std::thread::spawn(move || driver.run());
        client
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        let mut back = vec![0; input.len()];
        let got = client.read_exact(&mut back);
        stop.store(true, Ordering::SeqCst);
        thread.join().unwrap();
        got.expect("the echo of the whole input within 3 s");
        assert!(back == input);
    }
}
