//! The write side of a connection, shared by the I/O thread (refusals,
//! flushing) and the slot workers (results), so a result goes straight to
//! the socket from the thread that computed it.

use mio::net::TcpStream;
use std::io::{IoSlice, Write};
use std::sync::Mutex;

pub struct ConnOut {
    pub stream: TcpStream,
    state: Mutex<OutState>,
}

#[derive(Default)]
struct OutState {
    /// Bytes the socket has not taken yet, in order.
    pending: Vec<u8>,
    sent: usize,
    closed: bool,
    /// Half-close the socket as soon as the backlog is written.
    shut_when_flushed: bool,
}

impl OutState {
    fn backlog(&self) -> usize {
        self.pending.len() - self.sent
    }

    /// The peer is gone: nothing more can be delivered, drop what was pending.
    fn die(&mut self) {
        self.closed = true;
        self.pending = Vec::new();
        self.sent = 0;
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
        if st.closed {
            return;
        }
        let mut skip = 0;
        if st.backlog() == 0 {
            match self.write_now(header, payload) {
                Ok(n) => skip = n,
                Err(()) => return st.die(),
            }
        }
        let total = header.len() + payload.len();
        if skip < total {
            if skip < header.len() {
                st.pending.extend_from_slice(&header[skip..]);
                st.pending.extend_from_slice(payload);
            } else {
                st.pending
                    .extend_from_slice(&payload[skip - header.len()..]);
            }
        }
    }

    /// Write as much of header+payload as the socket takes now; `Err` if the
    /// connection is broken.
    fn write_now(&self, header: &[u8], payload: &[u8]) -> Result<usize, ()> {
        let mut done = 0;
        let total = header.len() + payload.len();
        while done < total {
            let slices: [IoSlice; 2] = if done < header.len() {
                [IoSlice::new(&header[done..]), IoSlice::new(payload)]
            } else {
                [
                    IoSlice::new(&payload[done - header.len()..]),
                    IoSlice::new(&[]),
                ]
            };
            match (&self.stream).write_vectored(&slices) {
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
            let from = st.sent;
            match (&self.stream).write(&st.pending[from..]) {
                Ok(0) => break,
                Ok(n) => st.sent += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    st.die();
                    break;
                }
            }
        }
        if st.backlog() == 0 {
            st.pending.clear();
            st.sent = 0;
            if std::mem::take(&mut st.shut_when_flushed) {
                let _ = self.stream.shutdown(std::net::Shutdown::Write);
            }
        } else if st.sent > (1 << 20) {
            let sent = st.sent;
            st.pending.drain(..sent);
            st.sent = 0;
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
        st.closed = true;
        st.pending = Vec::new();
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).closed
    }
}
