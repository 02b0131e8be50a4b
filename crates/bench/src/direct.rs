//! A closed-loop caller whose answers come back on another connection:
//! requests go to the chain's entry node, answers are written by the node
//! that ends the chain to a direct reply endpoint this caller registered
//! there (seed 001's "reply device"). An error the entry node answers
//! itself still comes back on the sending connection, so both are watched.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use offrac_proto::{Status, DEVICE_SELF, FN_REGISTER_REPLY};

use crate::{BenchError, Caller, MixItem, Outcome, WireConn};

pub struct DirectCaller {
    tx: WireConn,
    rx: WireConn,
    busy_poll: bool,
    timeout: Option<Duration>,
}

impl DirectCaller {
    /// `tx` sends (its chain already set); `rx` is a fresh connection to the
    /// node that ends the chain, registered here as a reply endpoint.
    pub fn new(
        mut tx: WireConn,
        mut rx: WireConn,
        busy_poll: bool,
        timeout: Option<Duration>,
    ) -> Result<DirectCaller, BenchError> {
        rx.send(u64::MAX, FN_REGISTER_REPLY, DEVICE_SELF as u64, &[])?;
        let h = rx.recv()?;
        if h.status != Status::Ok {
            return Err(BenchError::Config(format!(
                "cannot register a reply endpoint: {} ({})",
                h.status.name(),
                String::from_utf8_lossy(rx.payload())
            )));
        }
        tx.set_direct_reply(Some(h.detail as u8));
        Ok(DirectCaller {
            tx,
            rx,
            busy_poll,
            timeout,
        })
    }

    /// Which of (`rx`, `tx`) has bytes to read, waiting up to the timeout.
    fn wait(&mut self) -> Result<(bool, bool), BenchError> {
        if self.busy_poll {
            let end = self.timeout.map(|t| Instant::now() + t);
            loop {
                let r = self.rx.wait_readable(Duration::ZERO)?;
                let t = self.tx.wait_readable(Duration::ZERO)?;
                if r || t || end.is_some_and(|e| Instant::now() >= e) {
                    return Ok((r, t));
                }
                std::hint::spin_loop();
            }
        }
        let mut fds = [
            libc::pollfd {
                fd: self.rx.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.tx.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = self
            .timeout
            .map_or(-1, |t| t.as_millis().clamp(1, i32::MAX as u128) as i32);
        loop {
            // SAFETY: `fds` is a valid array of two pollfd for the call's duration.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
            if n >= 0 {
                return Ok((fds[0].revents != 0, fds[1].revents != 0));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e.into());
            }
        }
    }
}

impl Caller for DirectCaller {
    fn call(&mut self, id: u64, item: &MixItem, payload: &[u8]) -> Result<Outcome, BenchError> {
        let last_fragment = self.tx.send(id, item.wire_id, item.param, payload)?;
        loop {
            let (on_rx, on_tx) = self.wait()?;
            if !on_rx && !on_tx {
                return Err(io::Error::from(io::ErrorKind::TimedOut).into());
            }
            for conn in [&mut self.rx, &mut self.tx]
                .into_iter()
                .zip([on_rx, on_tx])
                .filter_map(|(c, ready)| ready.then_some(c))
            {
                let header = conn.recv()?;
                // A stale answer (to a request given up on earlier) is skipped.
                if header.request_id == id {
                    return Ok(Outcome {
                        header,
                        response_bytes: conn.payload().len(),
                        last_fragment,
                    });
                }
            }
        }
    }
}
