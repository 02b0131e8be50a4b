//! One connection speaking the offrac wire format, able to split a request
//! into several writes ("fragments") with a busy-waited gap between them.

use std::io::{self, Read};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use offrac_proto::{Hop, RequestHeader, ResponseHeader, HEADER_LEN};

use crate::{BenchError, MixItem};

/// What a call returned: the response header (status and the server's own
/// timing), its payload size, and when the request's last fragment left.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub header: ResponseHeader,
    pub response_bytes: usize,
    pub last_fragment: Instant,
}

/// Anything the closed loop can drive: one request, one answer.
pub trait Caller: Send {
    fn call(&mut self, id: u64, item: &MixItem, payload: &[u8]) -> Result<Outcome, BenchError>;
}

/// A TCP connection to a node or a baseline speaking the same framing.
#[derive(Debug)]
pub struct WireConn {
    stream: TcpStream,
    busy_poll: bool,
    fragments: usize,
    gap: Duration,
    timeout: Option<Duration>,
    rx: Vec<u8>,
    /// The chain every request runs instead of its mix item's single
    /// function (empty: the single function on the node addressed).
    chain: Vec<Hop>,
    /// Answers go to this direct reply endpoint (flags bit 2).
    direct_reply: Option<u8>,
    /// The tenant id requests carry (the connection's after a hello).
    tenant: u16,
}

impl WireConn {
    /// Connect with `TCP_NODELAY` (each fragment leaves as its own segment).
    pub fn connect(addr: &str, busy_poll: bool) -> Result<WireConn, BenchError> {
        let stream = TcpStream::connect(addr).map_err(|source| BenchError::Connect {
            addr: addr.to_string(),
            source,
        })?;
        stream.set_nodelay(true)?;
        stream.set_nonblocking(busy_poll)?;
        Ok(WireConn {
            stream,
            busy_poll,
            fragments: 1,
            gap: Duration::ZERO,
            timeout: None,
            rx: Vec::new(),
            chain: Vec::new(),
            direct_reply: None,
            tenant: 0,
        })
    }

    /// Attribute the connection to `tenant` with an authenticated hello
    /// signed with `key` (`docs/protocol.md`, "Tenants"); waits for the answer.
    pub fn hello(&mut self, tenant: u16, key: &[u8]) -> Result<(), BenchError> {
        use offrac_control::wire;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        // Unique per tenant within the window: the clock's nanoseconds.
        let env = wire::encode(
            tenant,
            now.as_millis() as u64,
            now.as_nanos() as u64,
            &wire::Op::Hello,
            key,
        );
        let h = RequestHeader::single(u64::MAX - 1, wire::FN_CONTROL, 0, env.len() as u32);
        let mut h = h;
        h.tenant = tenant;
        offrac_client::write_all_vectored(&mut self.stream, &h.encode(), &env)?;
        let answer = loop {
            match self.recv() {
                Ok(a) => break a,
                Err(BenchError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if answer.status != offrac_proto::Status::Ok {
            return Err(BenchError::Config(format!(
                "hello as tenant {tenant} refused: {} ({})",
                answer.status,
                String::from_utf8_lossy(self.payload())
            )));
        }
        self.tenant = tenant;
        Ok(())
    }

    /// Have every request's answer written to direct reply endpoint
    /// `endpoint` by the node that ends its chain (`None`: back here).
    pub fn set_direct_reply(&mut self, endpoint: Option<u8>) {
        self.direct_reply = endpoint;
    }

    /// Split every request into `fragments` writes, `gap` apart.
    pub fn set_fragments(&mut self, fragments: usize, gap: Duration) {
        self.fragments = fragments.max(1);
        self.gap = gap;
    }

    /// Send every request as this chain (1..=8 hops; empty: the mix item's
    /// function alone). The payload is still the mix item's.
    pub fn set_chain(&mut self, hops: &[Hop]) -> Result<(), BenchError> {
        if hops.len() > offrac_proto::MAX_HOPS {
            return Err(BenchError::Config(format!(
                "a chain has at most {} hops, not {}",
                offrac_proto::MAX_HOPS,
                hops.len()
            )));
        }
        self.chain = hops.to_vec();
        Ok(())
    }

    /// Give up on a response after `timeout` (`None`: wait for ever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), BenchError> {
        self.timeout = timeout.filter(|t| !t.is_zero());
        if !self.busy_poll {
            self.stream.set_read_timeout(self.timeout)?;
        }
        Ok(())
    }

    /// A second handle on the same socket (for a separate reader thread).
    pub fn try_clone(&self) -> Result<WireConn, BenchError> {
        Ok(WireConn {
            stream: self.stream.try_clone()?,
            busy_poll: self.busy_poll,
            fragments: self.fragments,
            gap: self.gap,
            timeout: self.timeout,
            rx: Vec::new(),
            chain: self.chain.clone(),
            direct_reply: self.direct_reply,
            tenant: self.tenant,
        })
    }

    /// Write one request; returns when its last fragment was handed to the kernel.
    pub fn send(
        &mut self,
        id: u64,
        function: u8,
        param: u64,
        payload: &[u8],
    ) -> Result<Instant, BenchError> {
        let len = u32::try_from(payload.len())
            .map_err(|_| BenchError::Config(format!("payload of {} bytes", payload.len())))?;
        let mut h = if self.chain.is_empty() {
            RequestHeader::single(id, function, param, len)
        } else {
            RequestHeader::chain(id, &self.chain, len).expect("length checked by set_chain")
        };
        h.tenant = self.tenant;
        if let Some(e) = self.direct_reply {
            h.reply_device = e;
            h.flags |= offrac_proto::FLAG_DIRECT_REPLY;
        }
        let wire = h.encode_wire();
        let header = &wire[..h.wire_len()];
        let n = self.fragments;
        if n == 1 {
            offrac_client::write_all_vectored(&mut self.stream, header, payload)?;
            return Ok(Instant::now());
        }
        // Fragment i carries payload[cut(i)..cut(i+1)]; the header rides in the first.
        let cut = |i: usize| payload.len() * i / n;
        for i in 0..n {
            if i > 0 && !self.gap.is_zero() {
                spin_for(self.gap);
            }
            let part = &payload[cut(i)..cut(i + 1)];
            if i == 0 {
                offrac_client::write_all_vectored(&mut self.stream, header, part)?;
            } else if !part.is_empty() {
                offrac_client::write_all_vectored(&mut self.stream, &[], part)?;
            }
        }
        Ok(Instant::now())
    }

    /// Read the next response; its payload stays in [`WireConn::payload`].
    pub fn recv(&mut self) -> Result<ResponseHeader, BenchError> {
        let mut hb = [0u8; HEADER_LEN];
        self.read_full_header(&mut hb)?;
        let header = ResponseHeader::decode(&hb)?;
        let len = header.payload_len as usize;
        let mut rx = std::mem::take(&mut self.rx);
        rx.resize(len, 0);
        let r = self.read_full(&mut rx);
        self.rx = rx;
        r?;
        Ok(header)
    }

    /// Wait up to `timeout` for response bytes to arrive; `Ok(false)` if none
    /// did. Lets a reader check for other work without losing a half-read response.
    pub fn wait_readable(&mut self, timeout: Duration) -> Result<bool, BenchError> {
        let mut b = [0u8; 1];
        if self.busy_poll {
            let end = Instant::now() + timeout;
            loop {
                match self.stream.peek(&mut b) {
                    Ok(0) => return Err(BenchError::Closed),
                    Ok(_) => return Ok(true),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        if Instant::now() >= end {
                            return Ok(false);
                        }
                        std::hint::spin_loop();
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_micros(1))))?;
        let r = match self.stream.peek(&mut b) {
            Ok(0) => Err(BenchError::Closed),
            Ok(_) => Ok(true),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        };
        self.stream.set_read_timeout(self.timeout)?;
        r
    }

    /// The payload of the last response [`WireConn::recv`] returned.
    pub fn payload(&self) -> &[u8] {
        &self.rx
    }

    fn read_full_header(&mut self, buf: &mut [u8; HEADER_LEN]) -> Result<(), BenchError> {
        self.read_full(buf)
    }

    fn read_full(&mut self, buf: &mut [u8]) -> Result<(), BenchError> {
        let deadline = self.timeout.map(|t| Instant::now() + t);
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(BenchError::Closed),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.busy_poll => {
                    if deadline.is_some_and(|d| Instant::now() > d) {
                        return Err(io::Error::from(io::ErrorKind::TimedOut).into());
                    }
                    std::hint::spin_loop();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

impl std::os::fd::AsRawFd for WireConn {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.stream.as_raw_fd()
    }
}

impl Caller for WireConn {
    fn call(&mut self, id: u64, item: &MixItem, payload: &[u8]) -> Result<Outcome, BenchError> {
        let last_fragment = self.send(id, item.wire_id, item.param, payload)?;
        loop {
            let header = self.recv()?;
            // A stale answer (to a request given up on earlier) is skipped.
            if header.request_id == id {
                return Ok(Outcome {
                    header,
                    response_bytes: self.rx.len(),
                    last_fragment,
                });
            }
        }
    }
}

/// Sleep until close to `t`, then spin to it (a sleep alone overshoots by tens of µs).
pub(crate) fn wait_until(t: Instant) {
    let now = Instant::now();
    if t > now + Duration::from_micros(200) {
        std::thread::sleep(t - now - Duration::from_micros(100));
    }
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

/// Busy-wait (a sleep would oversleep by tens of µs).
pub(crate) fn spin_for(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::hint::spin_loop();
    }
}
