//! The JWT gate's decisions, sans-IO: client and backend bytes in, bytes
//! for each out; the time (monotonic and wall-clock) is passed in.
//!
//! Per client connection, requests are read in order and each gets exactly
//! one answer, in request order: a queue holds the node's own answers
//! (401s, errors) and the requests to forward. The backend gets one request
//! at a time on the connection's own backend connection, so the request in
//! flight is always at the front of the queue and its answer streams
//! straight to the client (bounded buffers both ways).

use super::request::{self, Auth, HeadError, RequestHead};
use super::response::{self, Chunks, Framing, ResponseError};
use super::token::{self, Policy};
use crate::attach::inline::{Counter, InlineMachine, Now};
use slab::Slab;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSettings {
    pub policy: Policy,
    /// The largest request head (and backend response head) accepted: 431 / 502 above.
    pub max_header_bytes: usize,
    /// The largest request body accepted: 413 above.
    pub max_body_bytes: usize,
    /// Requests one connection may have unanswered before the node stops reading it.
    pub max_pending: usize,
    /// Answer bytes one connection may have unread before the node stops
    /// reading its backend (and its requests).
    pub max_out_bytes: usize,
    /// A backend silent this long on a request in flight: 504 (or the
    /// client connection is closed if the answer had begun).
    pub backend_timeout: Duration,
    /// The `realm` in `WWW-Authenticate`.
    pub realm: String,
}

impl GateSettings {
    pub fn new(secret: Vec<u8>) -> Self {
        GateSettings {
            policy: Policy {
                secret,
                issuer: None,
                audience: None,
                leeway_s: 0,
                require_exp: true,
            },
            max_header_bytes: 16 * 1024,
            max_body_bytes: 1 << 20,
            max_pending: 64,
            max_out_bytes: 1 << 20,
            backend_timeout: Duration::from_secs(5),
            realm: "offrac".into(),
        }
    }
}

/// Counters, for tests and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Requests sent to the backend.
    pub forwarded: u64,
    /// Answered 401 at the node.
    pub unauthorized: u64,
    /// Answered 4xx at the node for malformed or oversized HTTP.
    pub bad_requests: u64,
    /// Answered 502/504 at the node.
    pub backend_errors: u64,
    /// Client connections closed mid-answer (the backend failed after its answer began).
    pub aborted: u64,
}

/// Where the body bytes of the request being read go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// Between requests.
    None,
    /// Into the request at the back of the queue.
    Forward(usize),
    /// Dropped (the request was answered at the node).
    Discard(usize),
}

enum Reading {
    /// The response head (interim ones are relayed as they come).
    Head,
    Length(u64),
    Chunked(Chunks),
    /// Until the backend closes; `rechunk`: relayed as chunks to an HTTP/1.1 client.
    UntilClose {
        rechunk: bool,
    },
}

struct Flight {
    reading: Reading,
    keep_alive: bool,
    is_head_method: bool,
    http10: bool,
    /// Bytes of the answer have reached the client: a failure now can only close it.
    begun: bool,
    backend_keep_alive: bool,
    /// Last bytes from the backend (or when the request was sent).
    since: Instant,
}

enum Entry {
    /// Answered by the node.
    Ready(Vec<u8>),
    /// To forward (complete once its whole body is read).
    Wait {
        bytes: Vec<u8>,
        complete: bool,
        keep_alive: bool,
        is_head_method: bool,
        http10: bool,
    },
    Flight(Flight),
}

struct Conn {
    inbuf: Vec<u8>,
    body: Body,
    queue: VecDeque<Entry>,
    /// Bytes of requests waiting to be forwarded.
    held: usize,
    backend_in: Vec<u8>,
    to_client: Vec<u8>,
    to_backend: Vec<u8>,
    /// No more requests will be read (the last one asked to close, the
    /// client shut its side, or the stream cannot be trusted any more).
    last_read: bool,
    client_gone: bool,
    /// Close now, answered or not (a backend answer broke off mid-way).
    abort: bool,
    reset_backend: bool,
}

pub struct Gate {
    s: GateSettings,
    conns: Slab<Conn>,
    stats: GateStats,
}

/// An answer made by the node.
fn answer(
    status: u16,
    reason: &str,
    extra: &str,
    body: &str,
    head_only: bool,
    close: bool,
    http10_keep_alive: bool,
) -> Vec<u8> {
    let conn = if close {
        "Connection: close\r\n"
    } else if http10_keep_alive {
        "Connection: keep-alive\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         Content-Length: {}\r\n{extra}{conn}\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

impl Gate {
    pub fn new(s: GateSettings) -> Self {
        Gate {
            s,
            conns: Slab::new(),
            stats: GateStats::default(),
        }
    }

    pub fn stats(&self) -> GateStats {
        self.stats
    }

    fn flush_ready(c: &mut Conn) {
        while let Some(Entry::Ready(_)) = c.queue.front() {
            if let Some(Entry::Ready(b)) = c.queue.pop_front() {
                c.to_client.extend_from_slice(&b);
            }
        }
    }

    /// Why the token is refused, or None if it passes.
    fn refuse(&self, auth: &Auth, now: Now) -> Option<String> {
        match auth {
            Auth::Missing => Some(format!("Bearer realm=\"{}\"", self.s.realm)),
            Auth::Other => Some(format!(
                "Bearer realm=\"{}\", error=\"invalid_request\", \
                 error_description=\"expected Authorization: Bearer <token>\"",
                self.s.realm
            )),
            Auth::Bearer(t) => token::verify(&self.s.policy, t, now.unix.as_secs_f64())
                .err()
                .map(|e| {
                    format!(
                        "Bearer realm=\"{}\", error=\"invalid_token\", error_description=\"{e}\"",
                        self.s.realm
                    )
                }),
        }
    }

    /// Reads requests from the connection's buffered input while it is under its limits.
    fn read_requests(&mut self, id: usize, now: Now) {
        loop {
            let max_held = self.s.max_header_bytes + self.s.max_body_bytes;
            let Some(c) = self.conns.get_mut(id) else {
                return;
            };
            if c.client_gone || c.abort {
                return;
            }
            match c.body {
                Body::Forward(left) | Body::Discard(left) => {
                    let n = left.min(c.inbuf.len());
                    if n == 0 && left > 0 {
                        return;
                    }
                    let left = left - n;
                    if let Body::Forward(_) = c.body {
                        if let Some(Entry::Wait {
                            bytes, complete, ..
                        }) = c.queue.back_mut()
                        {
                            bytes.extend_from_slice(&c.inbuf[..n]);
                            c.held += n;
                            *complete = left == 0;
                        }
                        c.body = if left == 0 {
                            Body::None
                        } else {
                            Body::Forward(left)
                        };
                    } else {
                        c.body = if left == 0 {
                            Body::None
                        } else {
                            Body::Discard(left)
                        };
                    }
                    c.inbuf.drain(..n);
                    continue;
                }
                Body::None => {}
            }
            if c.last_read
                || c.inbuf.is_empty()
                || c.queue.len() >= self.s.max_pending
                || c.to_client.len() >= self.s.max_out_bytes
                || c.held >= max_held
            {
                return;
            }
            let head =
                match request::parse(&c.inbuf, self.s.max_header_bytes, self.s.max_body_bytes) {
                    Ok(None) => return,
                    Ok(Some(h)) => h,
                    Err(e) => {
                        self.refuse_stream(id, e);
                        return;
                    }
                };
            self.take_request(id, head, now);
        }
    }

    /// A request the node cannot frame: answered, then the connection closes.
    fn refuse_stream(&mut self, id: usize, e: HeadError) {
        self.stats.bad_requests += 1;
        let c = &mut self.conns[id];
        let (status, reason) = e.status();
        let body = format!("{e}\n");
        c.queue.push_back(Entry::Ready(answer(
            status, reason, "", &body, false, true, false,
        )));
        c.inbuf = Vec::new();
        c.last_read = true;
        Self::flush_ready(c);
    }

    fn take_request(&mut self, id: usize, head: RequestHead, now: Now) {
        let refused = self.refuse(&head.auth, now);
        let c = &mut self.conns[id];
        c.inbuf.drain(..head.len);
        if !head.keep_alive {
            c.last_read = true;
        }
        match refused {
            None => {
                if head.expect_continue {
                    c.queue
                        .push_back(Entry::Ready(b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()));
                }
                c.held += head.forward.len();
                c.queue.push_back(Entry::Wait {
                    bytes: head.forward,
                    complete: head.body_len == 0,
                    keep_alive: head.keep_alive,
                    is_head_method: head.is_head_method,
                    http10: head.http10,
                });
                if head.body_len > 0 {
                    c.body = Body::Forward(head.body_len);
                }
            }
            Some(challenge) => {
                self.stats.unauthorized += 1;
                // A client waiting for 100-continue will not send its body:
                // the stream's framing is lost, so the connection closes.
                if head.expect_continue {
                    c.last_read = true;
                }
                let close = !head.keep_alive || head.expect_continue;
                let extra = format!("WWW-Authenticate: {challenge}\r\n");
                let bytes = answer(
                    401,
                    "Unauthorized",
                    &extra,
                    "401 Unauthorized: a valid bearer token is required\n",
                    head.is_head_method,
                    close,
                    head.http10 && head.keep_alive,
                );
                c.queue.push_back(Entry::Ready(bytes));
                if head.body_len > 0 && !head.expect_continue {
                    c.body = Body::Discard(head.body_len);
                }
            }
        }
        Self::flush_ready(c);
    }

    /// Sends the front request to the backend if it is complete and nothing is in flight.
    fn forward(&mut self, id: usize, now: Now) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if c.client_gone || c.abort {
            return;
        }
        let Some(Entry::Wait { complete: true, .. }) = c.queue.front() else {
            return;
        };
        let Some(Entry::Wait {
            bytes,
            keep_alive,
            is_head_method,
            http10,
            ..
        }) = c.queue.pop_front()
        else {
            return;
        };
        c.held -= bytes.len();
        self.stats.forwarded += 1;
        c.to_backend.extend_from_slice(&bytes);
        c.backend_in.clear();
        c.queue.push_front(Entry::Flight(Flight {
            reading: Reading::Head,
            keep_alive,
            is_head_method,
            http10,
            begun: false,
            backend_keep_alive: true,
            since: now.mono,
        }));
    }

    /// The front request is answered by the node instead of the backend.
    fn fail_flight(&mut self, id: usize, status: u16, reason: &str) {
        let c = &mut self.conns[id];
        c.to_backend.clear();
        c.backend_in.clear();
        c.reset_backend = true;
        let Some(Entry::Flight(f)) = c.queue.front() else {
            return;
        };
        if f.begun {
            // Part of the answer is out: closing is the only honest end.
            self.stats.aborted += 1;
            c.abort = true;
            return;
        }
        self.stats.backend_errors += 1;
        let close = !f.keep_alive;
        let body = format!("{status} {reason}: the backend did not answer\n");
        let bytes = answer(
            status,
            reason,
            "",
            &body,
            f.is_head_method,
            close,
            f.http10 && f.keep_alive,
        );
        c.queue.pop_front();
        c.to_client.extend_from_slice(&bytes);
        Self::flush_ready(c);
    }

    /// Moves what the backend sent into the client's answer.
    fn relay(&mut self, id: usize, now: Now) -> Result<(), ResponseError> {
        let max_head = self.s.max_header_bytes;
        loop {
            let c = &mut self.conns[id];
            let Some(Entry::Flight(f)) = c.queue.front_mut() else {
                if !c.backend_in.is_empty() {
                    // Bytes nobody asked for: this backend connection is not trusted again.
                    c.backend_in.clear();
                    c.reset_backend = true;
                }
                return Ok(());
            };
            if c.backend_in.is_empty() {
                return Ok(());
            }
            f.since = now.mono;
            let done = match &mut f.reading {
                Reading::Head => {
                    let Some(h) = response::parse(&c.backend_in, max_head, f.is_head_method)?
                    else {
                        return Ok(());
                    };
                    c.backend_in.drain(..h.len);
                    if h.interim {
                        if !f.http10 {
                            c.to_client.extend_from_slice(&h.head);
                            c.to_client.extend_from_slice(b"\r\n");
                            f.begun = true;
                        }
                        continue;
                    }
                    f.backend_keep_alive = h.backend_keep_alive;
                    let rechunk =
                        h.framing == Framing::UntilClose && !f.http10 && !h.has_transfer_encoding;
                    let close_client =
                        !f.keep_alive || (h.framing == Framing::UntilClose && !rechunk);
                    c.to_client.extend_from_slice(&h.head);
                    if rechunk {
                        c.to_client
                            .extend_from_slice(b"Transfer-Encoding: chunked\r\n");
                    }
                    if close_client {
                        c.to_client.extend_from_slice(b"Connection: close\r\n");
                        c.last_read = true;
                    } else if f.http10 {
                        c.to_client.extend_from_slice(b"Connection: keep-alive\r\n");
                    }
                    c.to_client.extend_from_slice(b"\r\n");
                    f.begun = true;
                    f.reading = match h.framing {
                        Framing::Empty => Reading::Length(0),
                        Framing::Length(n) => Reading::Length(n),
                        Framing::Chunked => Reading::Chunked(Chunks::default()),
                        Framing::UntilClose => Reading::UntilClose { rechunk },
                    };
                    matches!(f.reading, Reading::Length(0))
                }
                Reading::Length(left) => {
                    let n = (*left).min(c.backend_in.len() as u64) as usize;
                    c.to_client.extend(c.backend_in.drain(..n));
                    *left -= n as u64;
                    *left == 0
                }
                Reading::Chunked(chunks) => {
                    let n = chunks.scan(&c.backend_in, max_head)?;
                    c.to_client.extend(c.backend_in.drain(..n));
                    if *chunks != Chunks::Done {
                        return Ok(());
                    }
                    true
                }
                Reading::UntilClose { rechunk } => {
                    let bytes = std::mem::take(&mut c.backend_in);
                    if *rechunk {
                        c.to_client
                            .extend_from_slice(format!("{:x}\r\n", bytes.len()).as_bytes());
                        c.to_client.extend_from_slice(&bytes);
                        c.to_client.extend_from_slice(b"\r\n");
                    } else {
                        c.to_client.extend_from_slice(&bytes);
                    }
                    false
                }
            };
            if done {
                let backend_keep_alive = f.backend_keep_alive;
                c.queue.pop_front();
                if !backend_keep_alive || !c.backend_in.is_empty() {
                    // Closing (or saying more than it was asked): the next
                    // request goes on a new connection.
                    c.backend_in.clear();
                    c.reset_backend = true;
                }
                Self::flush_ready(c);
                self.forward(id, now);
            }
        }
    }

    fn after_backend(&mut self, id: usize, now: Now) {
        if let Err(e) = self.relay(id, now) {
            tracing::warn!(error = %e, "jwt gate: backend answer not understood");
            self.fail_flight(id, 502, "Bad Gateway");
        }
        self.pump(id, now);
    }

    fn pump(&mut self, id: usize, now: Now) {
        self.read_requests(id, now);
        self.forward(id, now);
    }
}

impl InlineMachine for Gate {
    fn open(&mut self) -> usize {
        self.conns.insert(Conn {
            inbuf: Vec::new(),
            body: Body::None,
            queue: VecDeque::new(),
            held: 0,
            backend_in: Vec::new(),
            to_client: Vec::new(),
            to_backend: Vec::new(),
            last_read: false,
            client_gone: false,
            abort: false,
            reset_backend: false,
        })
    }

    fn wants_client_input(&self, id: usize) -> bool {
        self.conns.get(id).is_some_and(|c| {
            let reading_body = !matches!(c.body, Body::None);
            !c.client_gone
                && !c.abort
                && (reading_body
                    || (!c.last_read
                        && c.queue.len() < self.s.max_pending
                        && c.to_client.len() < self.s.max_out_bytes
                        && c.held < self.s.max_header_bytes + self.s.max_body_bytes
                        && c.inbuf.len() <= self.s.max_header_bytes))
        })
    }

    fn wants_backend_input(&self, id: usize) -> bool {
        // Not once the connection is to be dropped: its close must not be
        // taken for a failure of the request sent next.
        self.conns
            .get(id)
            .is_some_and(|c| !c.reset_backend && c.to_client.len() < self.s.max_out_bytes)
    }

    fn client_input(&mut self, id: usize, bytes: &[u8], now: Now) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if c.client_gone || (c.last_read && matches!(c.body, Body::None)) {
            return;
        }
        c.inbuf.extend_from_slice(bytes);
        self.pump(id, now);
    }

    fn client_eof(&mut self, id: usize, now: Now) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        c.last_read = true;
        c.inbuf = Vec::new();
        match c.body {
            Body::None => {}
            Body::Discard(_) => c.body = Body::None,
            Body::Forward(_) => {
                // A request cut off mid-body: never forwarded; answered 400.
                c.body = Body::None;
                if let Some(Entry::Wait { bytes, .. }) = c.queue.pop_back() {
                    c.held -= bytes.len();
                }
                self.refuse_stream(id, HeadError::Bad("the body ended early"));
            }
        }
        self.pump(id, now);
    }

    fn client_closed(&mut self, id: usize) {
        if let Some(c) = self.conns.get_mut(id) {
            c.client_gone = true;
            c.to_client = Vec::new();
            c.inbuf = Vec::new();
        }
    }

    fn backend_input(&mut self, id: usize, bytes: &[u8], now: Now) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if c.client_gone || c.abort {
            return;
        }
        c.backend_in.extend_from_slice(bytes);
        self.after_backend(id, now);
    }

    fn backend_eof(&mut self, id: usize, now: Now) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        c.reset_backend = false;
        match c.queue.front_mut() {
            Some(Entry::Flight(f)) => {
                if let Reading::UntilClose { rechunk } = f.reading {
                    if rechunk {
                        c.to_client.extend_from_slice(b"0\r\n\r\n");
                    }
                    c.queue.pop_front();
                    Self::flush_ready(c);
                    self.forward(id, now);
                } else {
                    self.fail_flight(id, 502, "Bad Gateway");
                    self.conns[id].reset_backend = false;
                }
            }
            _ => c.backend_in.clear(),
        }
        self.pump(id, now);
    }

    fn backend_failed(&mut self, id: usize, now: Now) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if matches!(c.queue.front(), Some(Entry::Flight(_))) {
            self.fail_flight(id, 502, "Bad Gateway");
        }
        let c = &mut self.conns[id];
        c.reset_backend = false;
        c.to_backend.clear();
        c.backend_in.clear();
        self.pump(id, now);
    }

    fn take_backend_reset(&mut self, id: usize) -> bool {
        self.conns
            .get_mut(id)
            .is_some_and(|c| std::mem::take(&mut c.reset_backend))
    }

    fn resume(&mut self, id: usize, now: Now) {
        if let Some(c) = self.conns.get(id) {
            if !c.backend_in.is_empty() && c.to_client.len() < self.s.max_out_bytes {
                self.after_backend(id, now);
                return;
            }
        }
        self.pump(id, now);
    }

    fn client_out(&mut self, id: usize) -> Option<&mut Vec<u8>> {
        self.conns.get_mut(id).map(|c| &mut c.to_client)
    }

    fn backend_out(&mut self, id: usize) -> Option<&mut Vec<u8>> {
        self.conns.get_mut(id).map(|c| &mut c.to_backend)
    }

    fn finished(&self, id: usize) -> bool {
        self.conns.get(id).is_none_or(|c| {
            c.client_gone
                || c.abort
                || (c.last_read
                    && matches!(c.body, Body::None)
                    && c.queue.is_empty()
                    && c.to_client.is_empty())
        })
    }

    fn tick(&mut self, now: Now) -> Vec<usize> {
        let late: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                matches!(c.queue.front(), Some(Entry::Flight(f))
                    if now.mono.saturating_duration_since(f.since) >= self.s.backend_timeout)
            })
            .map(|(id, _)| id)
            .collect();
        for &id in &late {
            self.fail_flight(id, 504, "Gateway Timeout");
            self.pump(id, now);
        }
        late
    }

    fn remove(&mut self, id: usize, _now: Now) {
        if self.conns.contains(id) {
            self.conns.remove(id);
        }
    }

    /// A request is at the backend and its answer is not all relayed (the
    /// front of the queue is in flight): the driver may poll for it
    /// (`backend_spin_us`) instead of sleeping.
    fn awaits_backend(&self, id: usize) -> bool {
        self.conns.get(id).is_some_and(|c| {
            !c.client_gone && !c.abort && matches!(c.queue.front(), Some(Entry::Flight(_)))
        })
    }

    fn counters(&self) -> Vec<Counter> {
        let s = self.stats;
        vec![
            Counter::total(
                "offrac_attach_jwt_forwarded_total",
                "Requests sent to the backend.",
                s.forwarded,
            ),
            Counter::total(
                "offrac_attach_jwt_unauthorized_total",
                "Requests answered 401 at the node.",
                s.unauthorized,
            ),
            Counter::total(
                "offrac_attach_jwt_bad_requests_total",
                "Requests answered 4xx at the node (malformed or oversized HTTP).",
                s.bad_requests,
            ),
            Counter::total(
                "offrac_attach_jwt_backend_errors_total",
                "Requests answered 502/504 at the node.",
                s.backend_errors,
            ),
            Counter::total(
                "offrac_attach_jwt_aborted_total",
                "Client connections closed mid-answer.",
                s.aborted,
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::http::token::sign;
    use serde_json::json;

    const KEY: &[u8] = b"gate test key";

    fn at(secs: u64) -> Now {
        Now {
            mono: Instant::now() + Duration::from_secs(secs),
            unix: Duration::from_secs(1_700_000_000 + secs),
        }
    }

    fn gate() -> Gate {
        let mut s = GateSettings::new(KEY.to_vec());
        s.max_out_bytes = 4096;
        Gate::new(s)
    }

    fn tok() -> String {
        sign(
            KEY,
            &json!({"alg": "HS256"}),
            &json!({"exp": 1_700_000_100}),
        )
    }

    fn get(path: &str, token: Option<&str>) -> String {
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        format!("GET {path} HTTP/1.1\r\nHost: h\r\n{auth}\r\n")
    }

    fn take(v: Option<&mut Vec<u8>>) -> String {
        String::from_utf8(std::mem::take(v.unwrap())).unwrap()
    }

    fn ok(body: &str) -> String {
        format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    fn statuses(s: &str) -> Vec<&str> {
        s.match_indices("HTTP/1.1 ")
            .map(|(i, _)| &s[i + 9..i + 12])
            .collect()
    }

    #[test]
    fn pipelined_requests_are_answered_once_each_in_order() {
        let t = tok();
        let script = [
            get("/a", Some(&t)),
            get("/b", None),
            get("/c", Some(&t)),
            get("/d", Some("x.y.z")),
        ]
        .concat();
        // Any split of the client's bytes gives the same exchange.
        for split in [1, 7, script.len()] {
            let mut g = gate();
            let c = g.open();
            let now = at(0);
            for piece in script.as_bytes().chunks(split) {
                g.client_input(c, piece, now);
            }
            let sent = take(g.backend_out(c));
            assert!(sent.starts_with("GET /a HTTP/1.1\r\n"), "{sent}");
            assert!(!sent.contains("/c"), "one request at the backend at a time");
            assert_eq!(
                take(g.client_out(c)),
                "",
                "the 401 waits behind /a's answer"
            );
            g.backend_input(c, ok("A").as_bytes(), now);
            let out = take(g.client_out(c));
            assert_eq!(statuses(&out), ["200", "401"]);
            assert!(out.contains("A"));
            assert!(take(g.backend_out(c)).starts_with("GET /c "));
            g.backend_input(c, ok("C").as_bytes(), now);
            let out = take(g.client_out(c));
            assert_eq!(statuses(&out), ["200", "401"]);
            assert!(out.contains("error=\"invalid_token\""));
            assert_eq!(
                g.stats(),
                GateStats {
                    forwarded: 2,
                    unauthorized: 2,
                    ..GateStats::default()
                }
            );
            assert!(!g.finished(c));
            g.client_eof(c, now);
            assert!(g.finished(c));
        }
    }

    /// An answer is owed only while a request is at the backend: not for a
    /// refused token, not once the answer is relayed or the backend failed.
    #[test]
    fn an_answer_is_awaited_only_while_the_backend_owes_one() {
        let t = tok();
        let mut g = gate();
        let c = g.open();
        let now = at(0);
        assert!(!g.awaits_backend(c));
        g.client_input(c, get("/no", None).as_bytes(), now);
        assert!(!g.awaits_backend(c), "a 401 is the node's own");
        assert_eq!(statuses(&take(g.client_out(c))), ["401"]);
        g.client_input(c, get("/a", Some(&t)).as_bytes(), now);
        assert!(g.awaits_backend(c), "forwarded");
        take(g.backend_out(c));
        let answer = ok("AB");
        g.backend_input(c, &answer.as_bytes()[..answer.len() - 1], now);
        assert!(g.awaits_backend(c), "half the answer is in");
        g.backend_input(c, &answer.as_bytes()[answer.len() - 1..], now);
        assert!(!g.awaits_backend(c), "the answer is in");
        g.client_input(c, get("/b", Some(&t)).as_bytes(), now);
        assert!(g.awaits_backend(c));
        g.backend_failed(c, now);
        assert!(!g.awaits_backend(c), "a failed backend owes nothing");
        assert!(
            !g.awaits_backend(c + 1),
            "an unknown connection owes nothing"
        );
    }

    #[test]
    fn a_body_is_forwarded_whole_after_100_continue() {
        let mut g = gate();
        let c = g.open();
        let now = at(0);
        let head = format!(
            "POST /p HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {}\r\nExpect: 100-continue\r\nContent-Length: 6\r\n\r\n",
            tok()
        );
        g.client_input(c, head.as_bytes(), now);
        assert_eq!(take(g.client_out(c)), "HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(take(g.backend_out(c)), "", "not before the body is whole");
        g.client_input(c, b"abc", now);
        g.client_input(c, b"def", now);
        let sent = take(g.backend_out(c));
        assert!(sent.ends_with("Content-Length: 6\r\n\r\nabcdef"), "{sent}");
        assert!(!sent.to_lowercase().contains("expect"));
        // Refused with Expect: 401 and close (the client will not send the body).
        let c2 = g.open();
        g.client_input(
            c2,
            b"POST / HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n",
            now,
        );
        let out = take(g.client_out(c2));
        assert!(out.starts_with("HTTP/1.1 401") && out.contains("Connection: close"));
        assert!(g.finished(c2));
    }

    #[test]
    fn backend_failures_answer_502_or_504_once_and_the_connection_goes_on() {
        let t = tok();
        let mut g = gate();
        let c = g.open();
        let now = at(0);
        g.client_input(
            c,
            [get("/a", Some(&t)), get("/b", Some(&t))]
                .concat()
                .as_bytes(),
            now,
        );
        take(g.backend_out(c));
        g.backend_failed(c, now);
        assert_eq!(statuses(&take(g.client_out(c))), ["502"]);
        // /b went out on the next connection; it is silent: 504 and that connection dropped.
        assert!(take(g.backend_out(c)).starts_with("GET /b "));
        assert!(g.tick(at(4)).is_empty());
        assert_eq!(g.tick(at(6)), vec![c]);
        assert_eq!(statuses(&take(g.client_out(c))), ["504"]);
        assert!(g.take_backend_reset(c));
        // The backend closes after its head was relayed: the client is closed, not answered twice.
        g.client_input(c, get("/c", Some(&t)).as_bytes(), now);
        take(g.backend_out(c));
        g.backend_input(c, b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", now);
        assert!(take(g.client_out(c)).ends_with("abc"));
        g.backend_eof(c, now);
        assert!(g.finished(c));
        assert_eq!(g.stats().backend_errors, 2);
        assert_eq!(g.stats().aborted, 1);
    }

    #[test]
    fn an_http10_backend_gets_a_fresh_connection_per_request() {
        let t = tok();
        let mut g = gate();
        let c = g.open();
        let now = at(0);
        g.client_input(
            c,
            [get("/a", Some(&t)), get("/b", Some(&t))]
                .concat()
                .as_bytes(),
            now,
        );
        take(g.backend_out(c));
        g.backend_input(c, b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nA", now);
        let out = take(g.client_out(c));
        assert!(
            out.starts_with("HTTP/1.1 200 OK\r\n") && !out.contains("Connection"),
            "{out}"
        );
        assert!(
            !g.wants_backend_input(c),
            "the old connection's close is not read"
        );
        assert!(g.take_backend_reset(c));
        assert!(take(g.backend_out(c)).starts_with("GET /b "));
        // A body ended by close goes to an HTTP/1.1 client as chunks.
        g.backend_input(c, b"HTTP/1.0 200 OK\r\n\r\nxyz", now);
        g.backend_eof(c, now);
        let out = take(g.client_out(c));
        assert!(
            out.contains("Transfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n"),
            "{out}"
        );
        assert!(!g.finished(c));
    }

    #[test]
    fn a_client_that_does_not_read_stops_the_backend_being_read() {
        let mut g = gate();
        let c = g.open();
        let now = at(0);
        g.client_input(c, get("/big", Some(&tok())).as_bytes(), now);
        take(g.backend_out(c));
        g.backend_input(c, b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n", now);
        g.backend_input(c, &[b'x'; 5000], now);
        assert!(!g.wants_backend_input(c));
        assert!(!g.wants_client_input(c));
        let out = take(g.client_out(c));
        assert!(out.len() > 5000);
        assert!(g.wants_backend_input(c));
    }

    #[test]
    fn bad_http_is_answered_then_closed() {
        let mut g = gate();
        let c = g.open();
        let now = at(0);
        g.client_input(c, b"GET / HTTP/1.1\r\nHost: h\r\n\r\nNOT HTTP\r\n\r\n", now);
        let out = take(g.client_out(c));
        assert_eq!(statuses(&out), ["401", "400"]);
        assert!(
            out.contains("Connection: close") && out.contains("malformed request"),
            "{out}"
        );
        assert!(g.finished(c));
        // A client that half-closes mid-body: 400, nothing forwarded.
        let c = g.open();
        let head = format!(
            "POST / HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer {}\r\nContent-Length: 9\r\n\r\nabc",
            tok()
        );
        g.client_input(c, head.as_bytes(), now);
        g.client_eof(c, now);
        assert_eq!(statuses(&take(g.client_out(c))), ["400"]);
        assert_eq!(take(g.backend_out(c)), "");
        assert!(g.finished(c));
        assert_eq!(g.stats().forwarded, 0);
    }
}
