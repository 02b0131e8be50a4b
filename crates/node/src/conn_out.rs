//! The write side of a connection, shared by the I/O thread (refusals,
//! flushing) and the slot workers (results), so a result goes straight to
//! the socket from the thread that computed it.

use bytes::Bytes;
use mio::net::TcpStream;
use std::collections::VecDeque;
use std::io::{IoSlice, Write};
use std::sync::Mutex;

/// Most buffers handed to one vectored write.
const MAX_SLICES: usize = 16;

pub struct ConnOut {
    pub stream: TcpStream,
    state: Mutex<OutState>,
}

#[derive(Default)]
struct OutState {
    /// Bytes the socket has not taken yet, in order: whole buffers, the
    /// first `sent` bytes of the front one already written. A payload the
    /// socket does not take at once is kept as it came (moved, not copied).
    pending: VecDeque<Bytes>,
    sent: usize,
    /// Bytes in `pending`, `sent` included.
    queued: usize,
    closed: bool,
    /// Half-close the socket as soon as the backlog is written.
    shut_when_flushed: bool,
}

impl OutState {
    fn backlog(&self) -> usize {
        self.queued - self.sent
    }

    fn push(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.queued += bytes.len();
            self.pending.push_back(bytes);
        }
    }

    /// Keep what of `part` the socket did not take, `skip` being the bytes
    /// it took from this part on; `skip` then counts from the next part.
    fn keep_unsent(&mut self, skip: &mut usize, part: Bytes) {
        if *skip < part.len() {
            self.push(part.slice(*skip..));
        }
        *skip = skip.saturating_sub(part.len());
    }

    /// The socket took `n` more bytes.
    fn consume(&mut self, mut n: usize) {
        while n > 0 {
            let Some(front) = self.pending.front() else {
                break;
            };
            let left = front.len() - self.sent;
            if n < left {
                self.sent += n;
                return;
            }
            n -= left;
            self.queued -= front.len();
            self.sent = 0;
            self.pending.pop_front();
        }
    }

    /// The peer is gone: nothing more can be delivered, drop what was pending.
    fn die(&mut self) {
        self.closed = true;
        self.pending = VecDeque::new();
        self.sent = 0;
        self.queued = 0;
    }
}

impl ConnOut {
    pub fn new(stream: TcpStream) -> ConnOut {
        ConnOut {
            stream,
            state: Mutex::new(OutState::default()),
        }
    }

    /// Send one whole message (header then payload). Never blocks: what the
    /// socket does not take now is kept and flushed on the next writable event.
    /// Messages are never interleaved because the lock is held throughout.
    pub fn send(&self, header: &[u8], payload: &[u8]) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut skip) = self.write_first(&mut st, &[header, payload]) else {
            return;
        };
        for part in [header, payload] {
            if skip < part.len() {
                st.push(Bytes::copy_from_slice(&part[skip..]));
            }
            skip = skip.saturating_sub(part.len());
        }
    }

    /// [`ConnOut::send`] of a payload the caller gives away: what the socket
    /// does not take at once is kept as it is, not copied (a large answer or
    /// a collective's segment is written from its own buffer).
    pub fn send_owned(&self, header: &[u8], payload: Vec<u8>) {
        self.send_parts(header, Bytes::new(), payload, Bytes::new());
    }

    /// One message of up to three payload parts, in order: `head`, a slice
    /// of a shared buffer (a kept named buffer an answer or a forwarded hop
    /// starts with), `payload`, given away, and `tail`, another shared slice
    /// (a collective's segment of its work buffer); any may be empty. All go
    /// in one vectored write, and what the socket does not take at once is
    /// kept as it is (slices of the shared buffers, the payload moved), not
    /// copied.
    pub fn send_parts(&self, header: &[u8], head: Bytes, payload: Vec<u8>, tail: Bytes) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let Some(mut skip) = self.write_first(&mut st, &[header, &head, &payload, &tail]) else {
            return;
        };
        if skip < header.len() {
            st.push(Bytes::copy_from_slice(&header[skip..]));
        }
        skip = skip.saturating_sub(header.len());
        st.keep_unsent(&mut skip, head);
        let len = payload.len();
        if skip < len {
            st.push(Bytes::from(payload).slice(skip..));
        }
        skip = skip.saturating_sub(len);
        st.keep_unsent(&mut skip, tail);
    }

    /// Write what the socket takes now if nothing is pending before it:
    /// the bytes written (0 behind a backlog), None if the connection is
    /// closed or found broken.
    fn write_first<const N: usize>(&self, st: &mut OutState, parts: &[&[u8]; N]) -> Option<usize> {
        if st.closed {
            return None;
        }
        if st.backlog() > 0 {
            return Some(0);
        }
        match self.write_now(parts) {
            Ok(n) => Some(n),
            Err(()) => {
                st.die();
                None
            }
        }
    }

    /// Write as much of the parts, in order, as the socket takes now; `Err`
    /// if the connection is broken.
    fn write_now<const N: usize>(&self, parts: &[&[u8]; N]) -> Result<usize, ()> {
        let mut done = 0;
        let total: usize = parts.iter().map(|p| p.len()).sum();
        while done < total {
            let mut slices = [IoSlice::new(&[]); N];
            let mut k = 0;
            let mut skip = done;
            for part in parts {
                if skip >= part.len() {
                    skip -= part.len();
                    continue;
                }
                slices[k] = IoSlice::new(&part[skip..]);
                skip = 0;
                k += 1;
            }
            match (&self.stream).write_vectored(&slices[..k]) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return Err(()),
            }
        }
        Ok(done)
    }

    /// Flush what is pending; returns the bytes still pending (0 once the
    /// connection is found broken: see [`ConnOut::is_closed`]).
    pub fn flush(&self) -> usize {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while st.backlog() > 0 && !st.closed {
            let res = {
                let mut slices = [IoSlice::new(&[]); MAX_SLICES];
                let mut k = 0;
                for (i, b) in st.pending.iter().take(MAX_SLICES).enumerate() {
                    slices[i] = IoSlice::new(if i == 0 { &b[st.sent..] } else { b });
                    k = i + 1;
                }
                (&self.stream).write_vectored(&slices[..k])
            };
            match res {
                Ok(0) => break,
                Ok(n) => st.consume(n),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    st.die();
                    break;
                }
            }
        }
        if st.backlog() == 0 && std::mem::take(&mut st.shut_when_flushed) {
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
        }
        st.backlog()
    }

    pub fn backlog(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .backlog()
    }

    /// Half-close the write side once everything pending is written (at
    /// once if nothing is).
    pub fn shut_write_when_flushed(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.closed {
            return;
        }
        if st.backlog() == 0 {
            let _ = self.stream.shutdown(std::net::Shutdown::Write);
        } else {
            st.shut_when_flushed = true;
        }
    }

    /// No more output is accepted; the socket is shut down both ways.
    pub fn close(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.die();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::net::{TcpListener, TcpStream as StdStream};

    /// Messages larger than the socket takes at once, given away, borrowed,
    /// with a shared tail and with a shared head, interleaved with flushes while the reader drains: the
    /// reader gets every byte once, in order, and the backlog ends at 0.
    #[test]
    fn large_messages_arrive_whole_and_in_order() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let client = StdStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        server.set_nonblocking(true).expect("nonblocking");
        let out = ConnOut::new(TcpStream::from_std(server));
        let mut want = Vec::new();
        for i in 0..8u8 {
            let header = [i; 8];
            let payload: Vec<u8> = (0..(3 << 20) + usize::from(i))
                .map(|k| (k % 251) as u8 ^ i)
                .collect();
            want.extend_from_slice(&header);
            want.extend_from_slice(&payload);
            match i % 4 {
                0 => out.send_owned(&header, payload),
                1 => out.send(&header, &payload),
                2 => {
                    // A descriptor, then a slice of a shared buffer.
                    let shared = Bytes::from(payload);
                    let head = shared[..64].to_vec();
                    out.send_parts(&header, Bytes::new(), head, shared.slice(64..));
                }
                _ => {
                    // A kept buffer's bytes, then the job's own.
                    let split = payload.len() - 100;
                    let shared = Bytes::from(payload);
                    let own = shared[split..].to_vec();
                    out.send_parts(&header, shared.slice(..split), own, Bytes::new());
                }
            }
        }
        assert!(
            out.backlog() > 0,
            "the socket cannot have taken 24 MiB at once"
        );
        let total = want.len();
        let reader = std::thread::spawn(move || {
            let mut got = vec![0u8; total];
            let mut client = client;
            client.read_exact(&mut got).expect("read");
            got
        });
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while out.flush() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "backlog never drained"
            );
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        assert_eq!(out.backlog(), 0);
        let got = reader.join().expect("reader");
        assert!(got == want, "bytes differ from what was sent");
    }
}
