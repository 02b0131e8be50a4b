//! `k` worker threads, each a mio event loop over the connections handed to
//! it round-robin by an accepting thread. A worker reads each connection's
//! bytes, cuts complete requests (64-byte header + `payload_len`) and passes
//! each to its [`Handler`], which appends the response to the output.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::{Events, Interest, Poll, Token, Waker};
use offrac_proto::HEADER_LEN;
use slab::Slab;

use crate::BenchError;

const WAKER: Token = Token(usize::MAX);
const READ_CHUNK: usize = 64 * 1024;
/// A request announcing more payload than this closes its connection.
const MAX_PAYLOAD: usize = 64 << 20;

/// How a worker waits for events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// Sleep in `epoll_wait` whenever there is nothing to do.
    Blocking,
    /// Busy-poll (`epoll_wait` with zero timeout) for `spin` after the last event.
    Poll { spin: Duration },
}

/// Answers complete requests.
pub trait Handler: Send {
    /// `request` is one header + payload; `first_byte` is when its first byte
    /// was read. Append the whole response (header + payload) to `out`.
    fn handle(&mut self, request: &[u8], first_byte: Instant, out: &mut Vec<u8>);
}

struct Conn {
    stream: TcpStream,
    inbuf: Vec<u8>,
    first_byte: Option<Instant>,
    out: Vec<u8>,
    /// Registered for WRITABLE too (output is waiting).
    want_write: bool,
}

struct Worker {
    tx: Sender<std::net::TcpStream>,
    waker: Arc<Waker>,
    thread: JoinHandle<()>,
}

/// A running baseline server.
pub struct ServerHandle {
    pub addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: JoinHandle<()>,
    workers: Vec<(Arc<Waker>, JoinHandle<()>)>,
}

impl ServerHandle {
    /// A server that is only an accepting thread (its connection threads
    /// watch `stop` themselves).
    pub(crate) fn from_acceptor(
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        acceptor: JoinHandle<()>,
    ) -> ServerHandle {
        ServerHandle {
            addr,
            stop,
            acceptor,
            workers: Vec::new(),
        }
    }

    /// Stop accepting, close every connection and join the threads.
    pub fn shutdown(self) {
        self.stop.store(true, Ordering::SeqCst);
        // Unblock the accepting thread.
        let _ = std::net::TcpStream::connect(self.addr);
        let _ = self.acceptor.join();
        for (w, t) in self.workers {
            let _ = w.wake();
            let _ = t.join();
        }
    }

    /// Block until the process is killed (for the CLI).
    pub fn wait(self) {
        let _ = self.acceptor.join();
    }
}

/// A listening socket on `listen` and the address it got.
pub(crate) fn bind(listen: &str) -> Result<(TcpListener, SocketAddr), BenchError> {
    let listener = TcpListener::bind(listen).map_err(|source| BenchError::Connect {
        addr: listen.to_string(),
        source,
    })?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Listen on `listen` and serve with `workers` threads, each with its own
/// handler from `make_handler`.
pub fn serve<H, F>(
    listen: &str,
    workers: usize,
    mode: IoMode,
    make_handler: F,
) -> Result<ServerHandle, BenchError>
where
    H: Handler + 'static,
    F: Fn() -> H,
{
    if workers == 0 {
        return Err(BenchError::Config("need at least one worker".into()));
    }
    let (listener, addr) = bind(listen)?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut ws = Vec::with_capacity(workers);
    for i in 0..workers {
        let poll = Poll::new()?;
        let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
        let (tx, rx) = channel();
        let handler = make_handler();
        let stop = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name(format!("bench-worker-{i}"))
            .spawn(move || worker_loop(poll, rx, handler, mode, &stop))?;
        ws.push(Worker { tx, waker, thread });
    }
    let senders: Vec<(Sender<std::net::TcpStream>, Arc<Waker>)> = ws
        .iter()
        .map(|w| (w.tx.clone(), Arc::clone(&w.waker)))
        .collect();
    let stop_a = Arc::clone(&stop);
    let acceptor = std::thread::Builder::new()
        .name("bench-accept".into())
        .spawn(move || accept_loop(listener, senders, &stop_a))?;
    Ok(ServerHandle {
        addr,
        stop,
        acceptor,
        workers: ws.into_iter().map(|w| (w.waker, w.thread)).collect(),
    })
}

fn accept_loop(
    listener: TcpListener,
    workers: Vec<(Sender<std::net::TcpStream>, Arc<Waker>)>,
    stop: &AtomicBool,
) {
    let mut next = 0;
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        let (tx, waker) = &workers[next % workers.len()];
        next += 1;
        if tx.send(stream).is_ok() {
            let _ = waker.wake();
        }
    }
}

fn worker_loop<H: Handler>(
    mut poll: Poll,
    rx: Receiver<std::net::TcpStream>,
    mut handler: H,
    mode: IoMode,
    stop: &AtomicBool,
) {
    let mut events = Events::with_capacity(256);
    let mut conns: Slab<Conn> = Slab::new();
    let mut buf = vec![0u8; READ_CHUNK];
    let mut last_work = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let timeout = match mode {
            IoMode::Poll { spin } if last_work.elapsed() < spin => Some(Duration::ZERO),
            _ => Some(Duration::from_millis(100)),
        };
        match poll.poll(&mut events, timeout) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => return,
        }
        for ev in events.iter() {
            last_work = Instant::now();
            match ev.token() {
                WAKER => {
                    while let Ok(s) = rx.try_recv() {
                        add_conn(&poll, &mut conns, s);
                    }
                }
                Token(key) => {
                    let Some(c) = conns.get_mut(key) else {
                        continue;
                    };
                    let alive = service(c, &mut handler, &mut buf, ev.is_writable())
                        && update_interest(&poll, c, key);
                    if !alive {
                        let mut c = conns.remove(key);
                        let _ = poll.registry().deregister(&mut c.stream);
                    }
                }
            }
        }
    }
}

fn add_conn(poll: &Poll, conns: &mut Slab<Conn>, s: std::net::TcpStream) {
    if s.set_nonblocking(true).is_err() {
        return;
    }
    let mut stream = TcpStream::from_std(s);
    let entry = conns.vacant_entry();
    if poll
        .registry()
        .register(&mut stream, Token(entry.key()), Interest::READABLE)
        .is_err()
    {
        return;
    }
    entry.insert(Conn {
        stream,
        inbuf: Vec::with_capacity(READ_CHUNK),
        first_byte: None,
        out: Vec::with_capacity(READ_CHUNK),
        want_write: false,
    });
}

/// Read everything available, answer complete requests, write what we can.
/// False when the connection is finished.
fn service<H: Handler>(c: &mut Conn, h: &mut H, buf: &mut [u8], writable: bool) -> bool {
    if writable && !flush(c) {
        return false;
    }
    loop {
        match c.stream.read(buf) {
            Ok(0) => return false,
            Ok(n) => {
                if c.first_byte.is_none() {
                    c.first_byte = Some(Instant::now());
                }
                c.inbuf.extend_from_slice(&buf[..n]);
                if !cut_requests(c, h) {
                    return false;
                }
                if n < buf.len() {
                    // Short read: the socket is (almost surely) drained; skip the EAGAIN read.
                    break;
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    flush(c)
}

/// Hand every complete request in `inbuf` to the handler. False on a
/// request too large to serve.
fn cut_requests<H: Handler>(c: &mut Conn, h: &mut H) -> bool {
    let mut pos = 0;
    while c.inbuf.len() - pos >= HEADER_LEN {
        let mut len = [0u8; 4];
        len.copy_from_slice(&c.inbuf[pos + 16..pos + 20]);
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_PAYLOAD {
            return false;
        }
        if c.inbuf.len() - pos < HEADER_LEN + len {
            break;
        }
        let first = c.first_byte.unwrap_or_else(Instant::now);
        h.handle(&c.inbuf[pos..pos + HEADER_LEN + len], first, &mut c.out);
        pos += HEADER_LEN + len;
        c.first_byte = (pos < c.inbuf.len()).then(Instant::now);
    }
    c.inbuf.drain(..pos);
    true
}

fn flush(c: &mut Conn) -> bool {
    let mut done = 0;
    while done < c.out.len() {
        match c.stream.write(&c.out[done..]) {
            Ok(0) => return false,
            Ok(n) => done += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    c.out.drain(..done);
    true
}

fn update_interest(poll: &Poll, c: &mut Conn, key: usize) -> bool {
    let want = !c.out.is_empty();
    if want == c.want_write {
        return true;
    }
    c.want_write = want;
    let interest = if want {
        Interest::READABLE | Interest::WRITABLE
    } else {
        Interest::READABLE
    };
    poll.registry()
        .reregister(&mut c.stream, Token(key), interest)
        .map_err(|_: io::Error| ())
        .is_ok()
}
