//! The blocking connection to one node.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use offrac_proto::{
    FunctionId, Hop, RequestHeader, ResponseError, ResponseHeader, Status, HEADER_LEN,
};

use crate::rng::SplitMix64;

/// Largest response payload [`Client`] accepts by default (1 GiB). A header
/// announcing more is treated as a protocol error rather than allocated.
pub const DEFAULT_MAX_RESPONSE_PAYLOAD: usize = 1 << 30;

/// Request ids chosen by [`Client::call`] have this bit set, so they do not
/// collide with small ids a caller picks for [`Client::send`].
const CALL_ID_BIT: u64 = 1 << 63;

/// Everything that can go wrong talking to a node.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("i/o error: {0}")]
    Io(#[from] io::Error),
    /// The node sent bytes that are not a valid response header.
    #[error("protocol error: {0}")]
    Protocol(#[from] ResponseError),
    /// A response header announced a payload larger than the client accepts.
    #[error("response payload of {len} bytes exceeds the client limit of {max}")]
    ResponseTooLarge { len: usize, max: usize },
    /// A request payload does not fit the 32-bit `payload_len` field.
    #[error("request payload of {0} bytes does not fit in a u32 length")]
    PayloadTooLarge(usize),
    /// The node answered with a status other than `OK`.
    #[error("{}", describe_status(*status, message, *detail, *request_id, *hop, *device))]
    Status {
        status: Status,
        /// The node's human-readable message (the response payload, lossily decoded).
        message: String,
        detail: u64,
        request_id: u64,
        /// The hop of the chain that failed (0 for a single call).
        hop: u8,
        /// The device that answered.
        device: u8,
    },
    /// A chain must have 1 to [`offrac_proto::MAX_HOPS`] hops.
    #[error("a chain has 1 to {max} hops, not {0}", max = offrac_proto::MAX_HOPS)]
    ChainLength(usize),
    /// A budget outside 1 µs..=16.8 s.
    #[error("a budget must be 1 µs to {max} µs, not {0:?}", max = offrac_proto::MAX_BUDGET_US)]
    Budget(Duration),
    /// The node closed the connection (possibly mid-response).
    #[error("connection closed by the node")]
    Closed,
    /// A load specification or report could not be built.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// "node answered BAD_INPUT at hop 1 (device 0): … (detail 3)": the request id
/// only when the caller chose it, hop and detail only when they say something.
fn describe_status(
    status: Status,
    message: &str,
    detail: u64,
    request_id: u64,
    hop: u8,
    device: u8,
) -> String {
    let mut s = format!("node answered {status}");
    if request_id & CALL_ID_BIT == 0 {
        s += &format!(" for request {request_id}");
    }
    if hop > 0 {
        s += &format!(" at hop {hop} (device {device})");
    }
    if !message.is_empty() {
        s += &format!(": {message}");
    }
    if detail != 0 {
        s += &format!(" (detail {detail})");
    }
    s
}

impl ClientError {
    /// The node's status, if this error is a non-OK response.
    pub fn status(&self) -> Option<Status> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the connection can no longer be used: transport errors,
    /// protocol errors, and the statuses after which the node always closes.
    /// `TIMEOUT` is not one of them: a budget, forward or reassembly timeout
    /// keeps the connection, and the close after a stall timeout shows as
    /// `Closed` on the next read (`docs/protocol.md`, "Status codes").
    pub fn is_connection_fatal(&self) -> bool {
        match self {
            ClientError::Status { status, .. } => {
                matches!(status, Status::UnsupportedVersion | Status::ShuttingDown)
            }
            ClientError::PayloadTooLarge(_)
            | ClientError::ChainLength(_)
            | ClientError::Budget(_)
            | ClientError::Config(_) => false,
            ClientError::Io(_)
            | ClientError::Protocol(_)
            | ClientError::ResponseTooLarge { .. }
            | ClientError::Closed => true,
        }
    }
}

/// A function id on the wire: a built-in [`FunctionId`] or any raw `u8`
/// (e.g. to exercise `UNKNOWN_FUNCTION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FunctionCode(pub u8);

impl From<FunctionId> for FunctionCode {
    fn from(f: FunctionId) -> FunctionCode {
        FunctionCode(f.id())
    }
}

impl From<u8> for FunctionCode {
    fn from(id: u8) -> FunctionCode {
        FunctionCode(id)
    }
}

/// A successful (`OK`) response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub header: ResponseHeader,
    pub payload: Vec<u8>,
}

/// How [`Client::call`] retries `BUSY`: the `k`-th retry (from 0) waits
/// `initial_backoff * 2^k` (capped at `max_backoff`), scaled by a uniform
/// factor in `[1 - jitter, 1 + jitter]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first attempt; 0 returns the first `BUSY` as an error.
    pub max_retries: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Relative jitter, clamped to `0.0..=1.0`.
    pub jitter: f64,
}

impl RetryPolicy {
    /// No retries: `BUSY` is returned to the caller at once.
    pub const NONE: RetryPolicy = RetryPolicy {
        max_retries: 0,
        initial_backoff: Duration::from_micros(100),
        max_backoff: Duration::from_millis(100),
        jitter: 0.2,
    };

    /// The default policy with `max_retries` retries.
    pub fn with_max_retries(max_retries: u32) -> RetryPolicy {
        RetryPolicy {
            max_retries,
            ..RetryPolicy::default()
        }
    }

    /// Back-off before retry number `retry` (0-based), jittered by `rng`.
    fn backoff(&self, retry: u32, rng: &mut SplitMix64) -> Duration {
        let base = self
            .initial_backoff
            .saturating_mul(1u32 << retry.min(31))
            .min(self.max_backoff);
        let jitter = self.jitter.clamp(0.0, 1.0);
        let factor = 1.0 - jitter + 2.0 * jitter * rng.next_f64();
        base.mul_f64(factor)
    }
}

impl Default for RetryPolicy {
    /// 8 retries starting at 80–120 µs, doubling, capped at 100 ms.
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_retries: 8,
            ..RetryPolicy::NONE
        }
    }
}

/// A blocking connection to a node. Not thread-safe by design: use one client
/// per thread (as [`crate::demo`] does).
#[derive(Debug)]
pub struct Client {
    stream: TcpStream,
    retry: RetryPolicy,
    max_response_payload: usize,
    next_call_id: u64,
    /// Responses read by `call` while waiting for its own; handed out by `recv`.
    stashed: VecDeque<(ResponseHeader, Vec<u8>)>,
    busy_retries: u64,
    rng: SplitMix64,
    /// Spin on a non-blocking socket instead of sleeping in the kernel.
    busy_poll: bool,
    read_timeout: Option<Duration>,
    /// Budget each request carries, µs (0: none).
    budget_us: u32,
    /// Reply endpoint each request names (`DEVICE_SELF`: this connection).
    reply_device: u8,
    /// Ask for per-hop timings in every answer.
    trace: bool,
    direct_reply: bool,
    /// Tenant id every request carries (its connection's after a hello).
    tenant: u16,
}

impl Client {
    /// Connect to `addr` (`host:port`) with `TCP_NODELAY` and the default
    /// [`RetryPolicy`].
    pub fn connect(addr: &str) -> Result<Client, ClientError> {
        Client::from_stream(TcpStream::connect(addr)?)
    }

    /// Connect with a connect timeout (to the first address `addr` resolves to
    /// that accepts).
    pub fn connect_timeout(addr: &str, timeout: Duration) -> Result<Client, ClientError> {
        use std::net::ToSocketAddrs;
        let mut last = None;
        for sa in addr.to_socket_addrs()? {
            match TcpStream::connect_timeout(&sa, timeout) {
                Ok(s) => return Client::from_stream(s),
                Err(e) => last = Some(e),
            }
        }
        Err(ClientError::Io(last.unwrap_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{addr}: no addresses"))
        })))
    }

    /// Wrap an already-connected stream (sets `TCP_NODELAY`).
    pub fn from_stream(stream: TcpStream) -> Result<Client, ClientError> {
        stream.set_nodelay(true)?;
        Ok(Client {
            stream,
            retry: RetryPolicy::default(),
            max_response_payload: DEFAULT_MAX_RESPONSE_PAYLOAD,
            next_call_id: 0,
            stashed: VecDeque::new(),
            busy_retries: 0,
            rng: SplitMix64::from_entropy(),
            busy_poll: false,
            read_timeout: None,
            budget_us: 0,
            reply_device: offrac_proto::DEVICE_SELF,
            trace: false,
            direct_reply: false,
            tenant: 0,
        })
    }

    /// The tenant id requests carry from now on.
    pub fn set_tenant(&mut self, tenant: u16) {
        self.tenant = tenant;
    }

    pub fn tenant(&self) -> u16 {
        self.tenant
    }

    /// Attribute this connection to `tenant` with an authenticated hello
    /// (`docs/protocol.md`, "Tenants"): `envelope` is the HELLO control
    /// envelope signed with the tenant's key (`offrac_control::wire::encode`).
    /// Waits for the node's answer; requests then carry `tenant`.
    pub fn hello(&mut self, tenant: u16, envelope: &[u8]) -> Result<(), ClientError> {
        let saved = std::mem::replace(&mut self.retry, RetryPolicy::with_max_retries(0));
        self.tenant = tenant;
        let r = self.call(offrac_proto::FN_CONTROL, 0, envelope);
        self.retry = saved;
        r.map(|_| ())
    }

    /// Builder form of [`Client::set_retry_policy`].
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Client {
        self.retry = policy;
        self
    }

    pub fn set_retry_policy(&mut self, policy: RetryPolicy) {
        self.retry = policy;
    }

    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// Seed the back-off jitter generator (for reproducible runs).
    pub fn set_jitter_seed(&mut self, seed: u64) {
        self.rng = SplitMix64::new(seed);
    }

    /// Largest response payload accepted before failing with
    /// [`ClientError::ResponseTooLarge`].
    pub fn set_max_response_payload(&mut self, max: usize) {
        self.max_response_payload = max;
    }

    /// Read timeout for responses; on expiry `recv`/`call` fail with
    /// `ClientError::Io` (kind `WouldBlock` or `TimedOut`), and the
    /// connection should be dropped since a response may be half read.
    /// Give every request sent from now on a time budget: a hop the node
    /// (or any node down the chain) has not started within it is not run and
    /// answered `TIMEOUT` naming the hop. `None`: no budget. The budget is
    /// counted from the request's first byte reaching the node, in µs, up to
    /// [`offrac_proto::MAX_BUDGET_US`] (about 16.8 s).
    pub fn set_budget(&mut self, budget: Option<Duration>) -> Result<(), ClientError> {
        self.budget_us = match budget {
            None => 0,
            Some(d) => match u32::try_from(d.as_micros()) {
                Ok(us) if (1..=offrac_proto::MAX_BUDGET_US).contains(&us) => us,
                _ => return Err(ClientError::Budget(d)),
            },
        };
        Ok(())
    }

    /// Ask the node what it serves (functions, slots, peers, metrics
    /// address; `docs/protocol.md`, "Describe"). Also a ping.
    pub fn describe(&mut self) -> Result<serde_json::Value, ClientError> {
        let hop = Hop::local(offrac_proto::FN_DESCRIBE, 0);
        let r = self.call_chain(&[hop], &[])?;
        serde_json::from_slice(&r.payload)
            .map_err(|e| ClientError::Config(format!("the node's description is not JSON: {e}")))
    }

    /// Ask for per-hop timings (`ResponseHeader::hop_times`) in the answers
    /// to requests sent from now on.
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// Make this connection a reply endpoint on its node: answers to
    /// requests that name it (see [`Client::set_reply_device`]), sent on any
    /// connection to this node, arrive here; read them with [`Client::recv`].
    /// `wanted`: an endpoint id (0..=254), or `None` for any free one.
    /// Returns the id.
    pub fn register_reply(&mut self, wanted: Option<u8>) -> Result<u8, ClientError> {
        let param = wanted.map_or(offrac_proto::DEVICE_SELF as u64, u64::from);
        let hop = Hop::local(offrac_proto::FN_REGISTER_REPLY, param);
        let r = self.call_chain(&[hop], &[])?;
        u8::try_from(r.header.detail)
            .map_err(|_| ClientError::Config(format!("node gave endpoint {}", r.header.detail)))
    }

    /// Send requests whose answers go to reply endpoint `endpoint` (`None`:
    /// back on this connection). The endpoint must be registered on the
    /// node this client talks to; use [`Client::send`] / [`Client::send_chain`]
    /// (a `call` would wait here for an answer that goes elsewhere).
    pub fn set_reply_device(&mut self, endpoint: Option<u8>) {
        self.reply_device = endpoint.unwrap_or(offrac_proto::DEVICE_SELF);
        self.direct_reply = false;
    }

    /// Send requests whose answer the node that produces it writes to
    /// direct reply endpoint `endpoint` itself (flags bit 2, `None`: back on
    /// this connection). Register the endpoint, with this client's tenant,
    /// on the node(s) where chains end ([`Client::register_reply`] on a
    /// client of that node) and read the answers there with [`Client::recv`];
    /// an answer no node on the path can deliver comes back here. See
    /// "Direct replies" in `docs/protocol.md` for the one case of a second
    /// answer (a link failing mid-chain).
    pub fn set_direct_reply(&mut self, endpoint: Option<u8>) {
        self.set_reply_device(endpoint);
        self.direct_reply = endpoint.is_some();
    }

    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ClientError> {
        self.stream.set_read_timeout(timeout)?;
        self.read_timeout = timeout;
        Ok(())
    }

    /// Busy-poll the socket for responses instead of sleeping in the kernel:
    /// saves the wake-up on every response (tens of µs on a loaded machine)
    /// at the cost of a core spinning while a call is outstanding.
    pub fn set_busy_poll(&mut self, on: bool) -> Result<(), ClientError> {
        self.stream.set_nonblocking(on)?;
        self.busy_poll = on;
        Ok(())
    }

    /// Total `BUSY` responses that `call` retried on this connection.
    pub fn busy_retries(&self) -> u64 {
        self.busy_retries
    }

    pub fn peer_addr(&self) -> Result<SocketAddr, ClientError> {
        Ok(self.stream.peer_addr()?)
    }

    pub fn local_addr(&self) -> Result<SocketAddr, ClientError> {
        Ok(self.stream.local_addr()?)
    }

    /// Call `function` with `param` and `payload` and wait for its answer,
    /// retrying `BUSY` per the [`RetryPolicy`]. A non-`OK` status is returned
    /// as [`ClientError::Status`]. Responses to requests pipelined earlier with
    /// [`Client::send`] that arrive meanwhile are kept for [`Client::recv`].
    pub fn call(
        &mut self,
        function: impl Into<FunctionCode>,
        param: u64,
        payload: &[u8],
    ) -> Result<Reply, ClientError> {
        self.call_chain(&[Hop::local(function.into().0, param)], payload)
    }

    /// Run the functions of `hops` one after another on `payload` (each
    /// hop's output is the next one's input) and wait for the last one's
    /// result, like [`Client::call`]. A failure names its hop and device in
    /// [`ClientError::Status`].
    pub fn call_chain(&mut self, hops: &[Hop], payload: &[u8]) -> Result<Reply, ClientError> {
        let mut retry = 0u32;
        loop {
            let request_id = CALL_ID_BIT | self.next_call_id;
            self.next_call_id = (self.next_call_id + 1) & !CALL_ID_BIT;
            self.send_chain(request_id, hops, payload)?;
            let (header, payload) = loop {
                let (h, p) = self.read_response()?;
                if h.request_id == request_id {
                    break (h, p);
                }
                self.stashed.push_back((h, p));
            };
            match header.status {
                Status::Ok => return Ok(Reply { header, payload }),
                Status::Busy if retry < self.retry.max_retries => {
                    let wait = self.retry.backoff(retry, &mut self.rng);
                    retry += 1;
                    self.busy_retries += 1;
                    std::thread::sleep(wait);
                }
                status => {
                    return Err(ClientError::Status {
                        status,
                        message: String::from_utf8_lossy(&payload).into_owned(),
                        detail: header.detail,
                        request_id,
                        hop: header.hop_index,
                        device: header.device,
                    })
                }
            }
        }
    }

    /// Write one request without waiting for its answer (pipelining). The
    /// header and payload go out in one vectored write. Pair with
    /// [`Client::recv`]; ids with the top bit set are used by `call`.
    pub fn send(
        &mut self,
        request_id: u64,
        function: impl Into<FunctionCode>,
        param: u64,
        payload: &[u8],
    ) -> Result<(), ClientError> {
        self.send_chain(request_id, &[Hop::local(function.into().0, param)], payload)
    }

    /// [`Client::send`] for a chain of hops.
    pub fn send_chain(
        &mut self,
        request_id: u64,
        hops: &[Hop],
        payload: &[u8],
    ) -> Result<(), ClientError> {
        let len = u32::try_from(payload.len())
            .map_err(|_| ClientError::PayloadTooLarge(payload.len()))?;
        let mut h = RequestHeader::chain(request_id, hops, len)
            .ok_or(ClientError::ChainLength(hops.len()))?;
        h.budget_us = self.budget_us;
        h.reply_device = self.reply_device;
        h.tenant = self.tenant;
        if self.trace {
            h.flags |= offrac_proto::FLAG_TRACE;
        }
        if self.direct_reply {
            h.flags |= offrac_proto::FLAG_DIRECT_REPLY;
        }
        // The header, and the hop extension for chains of more than four hops.
        let wire = h.encode_wire();
        write_all_vectored(&mut self.stream, &wire[..h.wire_len()], payload)?;
        Ok(())
    }

    /// Next response, in arrival order, whatever its status (match it to a
    /// request by `header.request_id`). Responses `call` read on the way to
    /// its own come first.
    pub fn recv(&mut self) -> Result<(ResponseHeader, Vec<u8>), ClientError> {
        if let Some(r) = self.stashed.pop_front() {
            return Ok(r);
        }
        self.read_response()
    }

    fn read_response(&mut self) -> Result<(ResponseHeader, Vec<u8>), ClientError> {
        let mut buf = [0u8; HEADER_LEN];
        self.read_exact(&mut buf)?;
        let mut header = ResponseHeader::decode(&buf)?;
        if header.has_hop_times() {
            let mut times = [0u8; offrac_proto::HOP_TIMES_LEN];
            self.read_exact(&mut times)?;
            header.decode_hop_times(&times);
        }
        let len = header.payload_len as usize;
        if len > self.max_response_payload {
            return Err(ClientError::ResponseTooLarge {
                len,
                max: self.max_response_payload,
            });
        }
        let mut payload = vec![0u8; len];
        self.read_exact(&mut payload)?;
        Ok((header, payload))
    }

    fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), ClientError> {
        if !self.busy_poll {
            return read_exact(&mut self.stream, buf);
        }
        let deadline = self.read_timeout.map(|t| std::time::Instant::now() + t);
        let mut got = 0;
        while got < buf.len() {
            match self.stream.read(&mut buf[got..]) {
                Ok(0) => return Err(ClientError::Closed),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if deadline.is_some_and(|d| std::time::Instant::now() > d) {
                        return Err(ClientError::Io(io::Error::from(io::ErrorKind::TimedOut)));
                    }
                    std::hint::spin_loop();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ClientError::Io(e)),
            }
        }
        Ok(())
    }
}

fn read_exact(stream: &mut TcpStream, buf: &mut [u8]) -> Result<(), ClientError> {
    stream.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            ClientError::Closed
        } else {
            ClientError::Io(e)
        }
    })
}

/// Write `head` then `body` with as few `writev` calls as the kernel allows
/// (one in the common case), so a small request leaves in one segment. On a
/// non-blocking socket (busy-poll mode) it spins while the send buffer is full.
pub fn write_all_vectored(stream: &mut TcpStream, head: &[u8], body: &[u8]) -> io::Result<()> {
    let mut slices = [IoSlice::new(head), IoSlice::new(body)];
    // Only non-empty slices, so the loop ends exactly when everything is out.
    let mut bufs: &mut [IoSlice<'_>] = match (head.is_empty(), body.is_empty()) {
        (false, false) => &mut slices,
        (false, true) => &mut slices[..1],
        (true, false) => &mut slices[1..],
        (true, true) => return Ok(()),
    };
    while !bufs.is_empty() {
        match stream.write_vectored(bufs) {
            Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
            Ok(n) => IoSlice::advance_slices(&mut bufs, n),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_statuses_that_always_close_are_fatal() {
        let err = |status| ClientError::Status {
            status,
            message: String::new(),
            detail: 0,
            request_id: 1,
            hop: 0,
            device: 0,
        };
        assert!(err(Status::ShuttingDown).is_connection_fatal());
        assert!(err(Status::UnsupportedVersion).is_connection_fatal());
        // Budget, forward and reassembly timeouts keep the connection.
        assert!(!err(Status::Timeout).is_connection_fatal());
        assert!(!err(Status::Busy).is_connection_fatal());
    }

    #[test]
    fn backoff_starts_at_80_to_120_us_and_doubles() {
        let p = RetryPolicy::default();
        let mut rng = SplitMix64::new(1);
        for _ in 0..1000 {
            let b0 = p.backoff(0, &mut rng);
            assert!(
                b0 >= Duration::from_micros(80) && b0 <= Duration::from_micros(120),
                "{b0:?}"
            );
            let b3 = p.backoff(3, &mut rng);
            assert!(
                b3 >= Duration::from_micros(640) && b3 <= Duration::from_micros(960),
                "{b3:?}"
            );
        }
        // Capped, and no overflow for absurd retry numbers.
        let b = p.backoff(200, &mut rng);
        assert!(b <= Duration::from_millis(120), "{b:?}");
    }
}
