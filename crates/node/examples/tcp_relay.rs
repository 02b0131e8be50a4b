//! A minimal TCP relay: the floor any inline proxy (an attached function,
//! `docs/inline.md`) is measured against. Each accepted client gets its own
//! connection to the backend and bytes are copied both ways as they come:
//! nothing is parsed, cached or queued beyond what a socket refuses.
//!
//! ```text
//! tcp_relay --listen 127.0.0.1:0 --backend 127.0.0.1:11211 [--mode epoll|spin]
//! ```
//! Prints `listening ADDR` once bound. `epoll` (default): one thread, one
//! edge-triggered epoll loop that sleeps when idle, as the node's attach loop
//! does by default. `spin`: a thread per client that polls both of its
//! sockets without ever sleeping (a wake-up never stands between a byte's
//! arrival and its relay: the lower bound on a shared machine, at the price
//! of a busy core per client).

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;

const LISTENER: Token = Token(usize::MAX);
const CHUNK: usize = 64 * 1024;
/// At most this many bytes wait for a side that does not take them.
const LIMIT: usize = 1 << 20;

struct Args {
    listen: SocketAddr,
    backend: SocketAddr,
    spin: bool,
}

fn parse() -> Result<Args, String> {
    let (mut listen, mut backend, mut spin) = (None, None, false);
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let addr = |v: &str| {
            v.parse::<SocketAddr>()
                .map_err(|e| format!("{flag} {v}: {e}"))
        };
        match flag.as_str() {
            "--listen" => listen = Some(addr(&v)?),
            "--backend" => backend = Some(addr(&v)?),
            "--mode" => {
                spin = match v.as_str() {
                    "epoll" => false,
                    "spin" => true,
                    _ => return Err(format!("--mode {v}: epoll or spin")),
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(Args {
        listen: listen.ok_or("--listen HOST:PORT is required")?,
        backend: backend.ok_or("--backend HOST:PORT is required")?,
        spin,
    })
}

fn main() {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tcp_relay: {e}");
            std::process::exit(2);
        }
    };
    let run = if args.spin { spin } else { epoll };
    if let Err(e) = run(&args) {
        eprintln!("tcp_relay: {e}");
        std::process::exit(1);
    }
}

fn announce(addr: SocketAddr) {
    println!("listening {addr}");
    let _ = io::stdout().flush();
}

fn spin(args: &Args) -> io::Result<()> {
    let listener = std::net::TcpListener::bind(args.listen)?;
    announce(listener.local_addr()?);
    for client in listener.incoming() {
        let client = client?;
        let backend = args.backend;
        std::thread::spawn(move || -> io::Result<()> {
            let side = |s: std::net::TcpStream| -> io::Result<Side> {
                s.set_nodelay(true)?;
                s.set_nonblocking(true)?;
                Ok(Side {
                    sock: TcpStream::from_std(s),
                    pending: Vec::new(),
                    held: false,
                })
            };
            let mut pair = [side(client)?, side(std::net::TcpStream::connect(backend)?)?];
            let mut buf = vec![0u8; CHUNK];
            // Never sleeps; ends when either side closes or fails (both are then dropped).
            while step(&mut pair, 0, &mut buf).is_ok() && step(&mut pair, 1, &mut buf).is_ok() {}
            Ok(())
        });
    }
    Ok(())
}

/// One side of a relayed pair: its socket, the bytes waiting to be written
/// to it (what it refused so far), and whether reading it was stopped
/// because its peer holds `LIMIT` bytes it has not taken.
struct Side {
    sock: TcpStream,
    pending: Vec<u8>,
    held: bool,
}

impl Side {
    /// Write as much of `pending` as the socket takes.
    fn flush(&mut self) -> io::Result<()> {
        while !self.pending.is_empty() {
            match self.sock.write(&self.pending) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Pairs are keyed by `token / 2`; the client is the even token, the
/// backend the odd one.
fn epoll(args: &Args) -> io::Result<()> {
    let mut poll = Poll::new()?;
    let mut listener = TcpListener::bind(args.listen)?;
    announce(listener.local_addr()?);
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut pairs: HashMap<usize, [Side; 2]> = HashMap::new();
    let mut next = 0usize;
    let mut events = Events::with_capacity(256);
    let mut buf = vec![0u8; CHUNK];
    loop {
        if let Err(e) = poll.poll(&mut events, None) {
            if e.kind() == ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((client, _)) = listener.accept() {
                    // A blocking connect: the backend is local and the floor has no need to hide it.
                    let server = match std::net::TcpStream::connect(args.backend) {
                        Ok(s) => s,
                        Err(e) => {
                            eprintln!("tcp_relay: backend {}: {e}", args.backend);
                            continue; // the client is dropped: it sees its connection close
                        }
                    };
                    server.set_nonblocking(true)?;
                    let server = TcpStream::from_std(server);
                    let mut pair = [client, server].map(|sock| Side {
                        sock,
                        pending: Vec::new(),
                        held: false,
                    });
                    for (i, side) in pair.iter_mut().enumerate() {
                        side.sock.set_nodelay(true)?;
                        poll.registry().register(
                            &mut side.sock,
                            Token(2 * next + i),
                            Interest::READABLE | Interest::WRITABLE,
                        )?;
                    }
                    pairs.insert(next, pair);
                    next += 1;
                }
                continue;
            }
            let (id, me) = (ev.token().0 / 2, ev.token().0 % 2);
            let Some(pair) = pairs.get_mut(&id) else {
                continue;
            };
            if step(pair, me, &mut buf).is_err() {
                for side in pairs.remove(&id).into_iter().flatten() {
                    let mut sock = side.sock;
                    let _ = poll.registry().deregister(&mut sock);
                }
            }
        }
    }
}

/// Socket `me` of `pair` had an event: flush what waits for either side,
/// then move what `me` has to the other. An error ends the pair (end of
/// stream included).
fn step(pair: &mut [Side; 2], me: usize, buf: &mut [u8]) -> io::Result<()> {
    let (a, b) = pair.split_at_mut(1);
    let (mine, other) = if me == 0 {
        (&mut a[0], &mut b[0])
    } else {
        (&mut b[0], &mut a[0])
    };
    mine.flush()?;
    other.flush()?;
    pump(mine, other, buf)?;
    if other.held {
        // `mine` took bytes: the reading of `other` that was stopped for it
        // resumes (its socket brings no new edge).
        pump(other, mine, buf)?;
    }
    Ok(())
}

/// Read `from` into `to` until `from` is empty or `to` holds `LIMIT`
/// bytes it has not taken yet (then `to`'s next writable edge resumes it).
fn pump(from: &mut Side, to: &mut Side, buf: &mut [u8]) -> io::Result<()> {
    from.held = false;
    while to.pending.len() < LIMIT {
        match from.sock.read(buf) {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                to.pending.extend_from_slice(&buf[..n]);
                to.flush()?;
                if n < buf.len() {
                    // A short read emptied the socket (the next bytes bring a new
                    // edge): no read that would only say EAGAIN, as in the node.
                    return Ok(());
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    from.held = true;
    Ok(())
}
