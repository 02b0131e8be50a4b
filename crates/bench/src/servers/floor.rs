//! The real transport floor: one thread per connection spinning on a
//! non-blocking `recv`, no epoll, no shared state — what a kernel-TCP server
//! can do at best for one client at a time. It answers like [`RawEcho`], so
//! `bench load` drives it unchanged. It burns a core per connection: a floor
//! for latency, not a server design (with more connections than cores it
//! collapses, which the many-client runs show).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use offrac_proto::HEADER_LEN;

use super::evloop::{bind, Handler, ServerHandle};
use super::raw::RawEcho;
use crate::BenchError;

const READ_CHUNK: usize = 64 * 1024;
/// A request announcing more payload than this closes its connection.
const MAX_PAYLOAD: usize = 64 << 20;

/// Listen on `listen`; every accepted connection gets its own spinning thread.
pub fn serve_floor(listen: &str) -> Result<ServerHandle, BenchError> {
    let (listener, addr) = bind(listen)?;
    let stop = Arc::new(AtomicBool::new(false));
    let stop_a = Arc::clone(&stop);
    let acceptor = std::thread::Builder::new()
        .name("floor-accept".into())
        .spawn(move || {
            for stream in listener.incoming() {
                if stop_a.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let stop = Arc::clone(&stop_a);
                let _ = std::thread::Builder::new()
                    .name("floor-conn".into())
                    .spawn(move || serve_conn(stream, &stop));
            }
        })?;
    Ok(ServerHandle::from_acceptor(addr, stop, acceptor))
}

fn serve_conn(stream: TcpStream, stop: &AtomicBool) {
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let _ = stream.set_nodelay(true);
    let mut echo = RawEcho;
    let mut chunk = vec![0u8; READ_CHUNK];
    let (mut inbuf, mut out) = (Vec::new(), Vec::new());
    let mut idle: u32 = 0;
    loop {
        match (&stream).read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => {
                idle = 0;
                inbuf.extend_from_slice(&chunk[..n]);
                let mut used = 0;
                while inbuf.len() - used >= HEADER_LEN {
                    let h = &inbuf[used..];
                    let len = u32::from_le_bytes([h[16], h[17], h[18], h[19]]) as usize;
                    if len > MAX_PAYLOAD {
                        return;
                    }
                    if h.len() < HEADER_LEN + len {
                        break;
                    }
                    echo.handle(&h[..HEADER_LEN + len], Instant::now(), &mut out);
                    used += HEADER_LEN + len;
                }
                inbuf.drain(..used);
                if !write_all_spinning(&stream, &out) {
                    return;
                }
                out.clear();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                idle = idle.wrapping_add(1);
                // Look at the stop flag now and then, not on every spin.
                if idle.is_multiple_of(4096) && stop.load(Ordering::Relaxed) {
                    return;
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn write_all_spinning(mut stream: &TcpStream, mut buf: &[u8]) -> bool {
    while !buf.is_empty() {
        match stream.write(buf) {
            Ok(0) => return false,
            Ok(n) => buf = &buf[n..],
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                std::hint::spin_loop()
            }
            Err(_) => return false,
        }
    }
    true
}
