//! The look-through cache's decisions, sans-IO: client bytes and backend
//! bytes in, bytes for each out; time is passed in. The I/O driver
//! (`io.rs`) only moves bytes between sockets and these buffers.
//!
//! Each client connection has its own backend connection, so memcached sees
//! one client's requests in the order the client sent them and answers them
//! in that order; the node keeps a queue of answers per connection, in
//! request order, some ready (hits, the node's own errors) and some awaited
//! from the backend.
//!
//! Consistency (docs/inline.md): a key with a write in flight through the
//! node (from any client) is never served from the cache nor filled; every
//! write invalidates its key when forwarded and again when answered; a miss's
//! answer fills the cache only if no write to that key and no `flush_all`
//! was forwarded or answered while the miss was in flight.

use super::cache::{Cache, Item};
use super::inline::{Counter, Now};
use super::reply::{frame_len, parse_get, write_value, Frame, GetReply, ReplyError};
use super::text::{Key, Request, RequestParser};
use super::udp::{GetShape, Unit};
use slab::Slab;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

/// Answer to a request whose fate at the backend is unknown.
pub const BACKEND_DOWN: &[u8] = b"SERVER_ERROR backend unavailable\r\n";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Bytes of keys, values and per-item overhead the cache may hold.
    pub capacity_bytes: usize,
    /// The largest value accepted from a client or the backend.
    pub max_value_bytes: usize,
    /// The longest command line.
    pub max_line_bytes: usize,
    /// Requests one connection may have unanswered before the node stops reading it.
    pub max_pending: usize,
    /// Answer bytes one connection may have unread before the node stops reading it.
    pub max_out_bytes: usize,
    /// A backend answer not here this long fails the connection.
    pub backend_timeout: Duration,
    /// An item older than this is fetched again (None: kept until evicted or invalidated).
    pub max_age: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            capacity_bytes: 64 << 20,
            max_value_bytes: 1 << 20,
            max_line_bytes: 64 * 1024,
            max_pending: 1024,
            max_out_bytes: 4 << 20,
            backend_timeout: Duration::from_secs(5),
            max_age: None,
        }
    }
}

/// Counters, for tests and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub hits: u64,
    pub misses: u64,
    pub fills: u64,
    pub fills_refused: u64,
    pub invalidations: u64,
    pub backend_failures: u64,
    /// Requests sent again on a fresh backend connection after a reused one
    /// failed before any answer byte ([`Machine::backend_opened`]).
    pub backend_retries: u64,
}

#[derive(Debug, Default)]
struct KeyState {
    /// Writes to this key forwarded and not yet answered.
    writes: u32,
    /// Misses of this key in flight (the entry lives while either is non-zero).
    misses: u32,
    /// Bumped by every write forwarded or answered.
    epoch: u64,
}

struct Hit {
    flags: u32,
    cas: u64,
    data: Box<[u8]>,
}

enum Expect {
    Get {
        cas: bool,
        /// The keys asked, in order; hits already known.
        keys: Vec<(Key, Option<Hit>)>,
        /// The misses forwarded, with their key's epoch then.
        misses: Vec<(Key, u64)>,
        flush_epoch: u64,
    },
    Relay(Frame),
    Update {
        key: Key,
        noreply: bool,
    },
    Flush {
        noreply: bool,
        delay_s: u32,
    },
    Other {
        noreply: bool,
    },
}

enum Entry {
    /// An answer made (with its get's shape, for UDP framing).
    Ready(Vec<u8>, Option<GetShape>),
    Wait {
        expect: Expect,
        since: Instant,
    },
}

struct Conn {
    parser: RequestParser,
    /// Answers in request order; the front is always awaited (ready ones move out at once).
    queue: VecDeque<Entry>,
    backend_in: Vec<u8>,
    to_client: Vec<u8>,
    to_backend: Vec<u8>,
    client_gone: bool,
    /// Each answer's length (and a get's shape) as it goes out, for a UDP
    /// pseudo-connection (memcached frames a get's UDP answer by which of its
    /// keys were found, udp.rs); None for TCP clients.
    units: Option<Vec<Unit>>,
    /// The client half-closed: what it sent is answered, then the connection closes.
    eof: bool,
    /// No more requests are read: close once everything queued is answered.
    closing: bool,
    backend_dead: bool,
    /// Every byte given to the current backend connection, kept while that
    /// connection was a reused one (it served earlier requests and sat idle)
    /// and has answered nothing: if it fails now, memcached closed it before
    /// reading them, and they are sent again on a fresh one (once).
    replay: Option<Vec<u8>>,
    /// The retry was made (a connection retries once).
    retried: bool,
    /// The next backend connection must be a new one, not a reused one.
    fresh_backend: bool,
}

pub struct Machine {
    s: Settings,
    cache: Cache,
    keys: HashMap<Key, KeyState>,
    conns: Slab<Conn>,
    /// `flush_all`s forwarded and not yet answered.
    flushes: u32,
    flush_epoch: u64,
    no_fill_until: Option<Instant>,
    stats: Stats,
}

impl Machine {
    pub fn new(s: Settings) -> Self {
        Machine {
            cache: Cache::new(s.capacity_bytes),
            s,
            keys: HashMap::new(),
            conns: Slab::new(),
            flushes: 0,
            flush_epoch: 0,
            no_fill_until: None,
            stats: Stats::default(),
        }
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    pub fn cached_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Keys with writes or misses in flight (bounded by the requests in flight).
    pub fn tracked_keys(&self) -> usize {
        self.keys.len()
    }

    /// A new client connection (with its own backend connection).
    pub fn open(&mut self) -> usize {
        self.conns.insert(Conn {
            parser: RequestParser::new(self.s.max_line_bytes, self.s.max_value_bytes),
            queue: VecDeque::new(),
            backend_in: Vec::new(),
            to_client: Vec::new(),
            to_backend: Vec::new(),
            client_gone: false,
            units: None,
            eof: false,
            closing: false,
            backend_dead: false,
            replay: None,
            retried: false,
            fresh_backend: false,
        })
    }

    pub fn is_open(&self, id: usize) -> bool {
        self.conns.contains(id)
    }

    /// Whether the driver should read more from this client now.
    pub fn wants_client_input(&self, id: usize) -> bool {
        self.conns.get(id).is_some_and(|c| {
            !c.closing
                && !c.eof
                && !c.client_gone
                && c.queue.len() < self.s.max_pending
                && c.to_client.len() < self.s.max_out_bytes
                && c.parser.buffered() < c.parser.bound()
        })
    }

    /// Bytes to write to the client; the driver drains what it wrote.
    pub fn client_out(&mut self, id: usize) -> Option<&mut Vec<u8>> {
        self.conns.get_mut(id).map(|c| &mut c.to_client)
    }

    /// Bytes to write to the backend; the driver drains what it wrote.
    pub fn backend_out(&mut self, id: usize) -> Option<&mut Vec<u8>> {
        self.conns.get_mut(id).map(|c| &mut c.to_backend)
    }

    /// An answer from memcached is awaited (the queue's front is always one).
    pub fn awaits_backend(&self, id: usize) -> bool {
        self.conns
            .get(id)
            .is_some_and(|c| !c.backend_dead && !c.queue.is_empty())
    }

    /// Everything is answered (or the client is gone and nothing is awaited):
    /// the driver closes both sockets and calls `remove`.
    pub fn finished(&self, id: usize) -> bool {
        self.conns.get(id).is_none_or(|c| {
            (c.client_gone || c.closing)
                && c.queue.is_empty()
                && (c.client_gone || c.to_client.is_empty())
        })
    }

    pub fn client_input(&mut self, id: usize, bytes: &[u8], now: Instant) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if c.client_gone || c.closing {
            return;
        }
        c.parser.push(bytes);
        self.pump(id, now);
    }

    /// Parse and handle buffered requests while the connection is under its limits.
    pub fn resume(&mut self, id: usize, now: Instant) {
        self.pump(id, now);
    }

    /// The client closed its sending side: the whole requests it sent are
    /// answered (as memcached answers them), a cut-off one is dropped, then
    /// the connection closes.
    pub fn client_eof(&mut self, id: usize, now: Instant) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        c.eof = true;
        self.pump(id, now);
    }

    /// The client closed (or reset) its connection: its answers are dropped,
    /// but writes it sent are followed to their answers before the backend
    /// connection closes, so their keys are invalidated after memcached applied them.
    pub fn client_closed(&mut self, id: usize) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        c.client_gone = true;
        c.to_client = Vec::new();
        c.parser = RequestParser::new(0, 0);
        c.queue.retain(|e| matches!(e, Entry::Wait { .. }));
    }

    pub fn backend_input(&mut self, id: usize, bytes: &[u8], now: Instant) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if c.backend_dead {
            return;
        }
        if !bytes.is_empty() {
            // memcached answered on this connection: a failure from now on is not retried.
            c.replay = None;
        }
        c.backend_in.extend_from_slice(bytes);
        loop {
            let c = &mut self.conns[id];
            if c.backend_in.is_empty() {
                break;
            }
            let frame = match c.queue.front() {
                Some(Entry::Wait {
                    expect: Expect::Get { .. },
                    ..
                }) => None,
                Some(Entry::Wait {
                    expect: Expect::Relay(f),
                    ..
                }) => Some(*f),
                Some(Entry::Wait { .. }) => Some(Frame::Line),
                // memcached said something nobody asked for.
                _ => {
                    self.fail(id, now);
                    return;
                }
            };
            let parsed = match frame {
                None => parse_get(&c.backend_in, self.s.max_value_bytes)
                    .map(|r| r.map(|(n, reply)| (n, Some(reply)))),
                Some(f) => frame_len(&c.backend_in, f).map(|r| r.map(|n| (n, None))),
            };
            let done = match parsed {
                Ok(d) => d,
                Err(e) => {
                    self.backend_error(id, e, now);
                    return;
                }
            };
            let Some((n, get)) = done else { break };
            let Some(Entry::Wait { expect, .. }) = c.queue.pop_front() else {
                unreachable!("front checked above")
            };
            let raw: Vec<u8> = c.backend_in.drain(..n).collect();
            let (answer, shape) = self.complete(expect, raw, get, now);
            let c = &mut self.conns[id];
            Self::emit(c, &answer, shape);
            Self::flush_ready(c);
        }
    }

    fn backend_error(&mut self, id: usize, e: ReplyError, now: Instant) {
        tracing::warn!(error = %e, "attach: backend answer not understood; failing the connection");
        self.fail(id, now);
    }

    /// The backend connection failed or closed: every awaited answer becomes
    /// `SERVER_ERROR backend unavailable` (in order), then the client is closed;
    /// unless the connection was a reused one that answered nothing, which
    /// memcached closed while it sat idle (a restart, its idle timeout) and
    /// the requests never reached: they are then sent again, once, on a
    /// fresh connection. (A memcached that applied a request and died before
    /// the first byte of its answer would see it twice; see docs/inline.md.)
    pub fn backend_failed(&mut self, id: usize, now: Instant) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if !c.backend_dead && !c.retried {
            if let Some(again) = c.replay.take() {
                c.retried = true;
                c.fresh_backend = true;
                c.backend_in = Vec::new();
                // The unwritten rest of `to_backend` is a suffix of `again`.
                c.to_backend = again;
                self.stats.backend_retries += 1;
                return;
            }
        }
        self.fail(id, now);
    }

    /// The driver gave this connection a backend connection: a `reused` one
    /// (idle in a pool after serving earlier requests) may have been closed
    /// by memcached meanwhile, so what is sent on it is kept until it
    /// answers, for one retry ([`Self::backend_failed`]).
    pub fn backend_opened(&mut self, id: usize, reused: bool) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        c.fresh_backend = false;
        c.replay = (reused && !c.retried).then(|| c.to_backend.clone());
    }

    /// The next backend connection must be a new one (a retry).
    pub fn wants_fresh_backend(&self, id: usize) -> bool {
        self.conns.get(id).is_some_and(|c| c.fresh_backend)
    }

    /// Fails connections whose oldest awaited answer is older than the backend timeout.
    /// Returns the connections changed.
    pub fn tick(&mut self, now: Instant) -> Vec<usize> {
        let late: Vec<usize> = self
            .conns
            .iter()
            .filter(|(_, c)| {
                matches!(c.queue.front(), Some(Entry::Wait { since, .. })
                    if now.saturating_duration_since(*since) >= self.s.backend_timeout)
            })
            .map(|(id, _)| id)
            .collect();
        for &id in &late {
            self.fail(id, now);
        }
        late
    }

    /// Forget a finished connection (or one the driver gives up on).
    pub fn remove(&mut self, id: usize, now: Instant) {
        if !self.conns.contains(id) {
            return;
        }
        let c = self.conns.remove(id);
        for e in c.queue {
            if let Entry::Wait { expect, .. } = e {
                self.release(expect, now);
            }
        }
    }

    fn fail(&mut self, id: usize, now: Instant) {
        let Some(c) = self.conns.get_mut(id) else {
            return;
        };
        if c.backend_dead {
            return;
        }
        self.stats.backend_failures += 1;
        c.backend_dead = true;
        c.replay = None;
        c.closing = true;
        c.backend_in = Vec::new();
        c.to_backend = Vec::new();
        let queue = std::mem::take(&mut c.queue);
        let mut answers = Vec::with_capacity(queue.len());
        for e in queue {
            match e {
                Entry::Ready(b, shape) => answers.push(Entry::Ready(b, shape)),
                Entry::Wait { expect, .. } => {
                    let quiet = matches!(
                        expect,
                        Expect::Update { noreply: true, .. }
                            | Expect::Flush { noreply: true, .. }
                            | Expect::Other { noreply: true }
                    );
                    self.release(expect, now);
                    if !quiet {
                        answers.push(Entry::Ready(BACKEND_DOWN.to_vec(), None));
                    }
                }
            }
        }
        let c = &mut self.conns[id];
        c.queue = answers.into();
        if c.client_gone {
            c.queue.clear();
        }
        Self::flush_ready(c);
    }

    /// Undo what an awaited request holds, its fate unknown: a write may
    /// have happened, so its key is invalidated as if it had.
    fn release(&mut self, expect: Expect, now: Instant) {
        match expect {
            Expect::Get { misses, .. } => {
                for (k, _) in misses {
                    self.miss_done(&k);
                }
            }
            Expect::Update { key, .. } => self.write_done(&key),
            Expect::Flush { delay_s, .. } => self.flush_done(delay_s, now),
            Expect::Relay(_) | Expect::Other { .. } => {}
        }
    }

    fn flush_ready(c: &mut Conn) {
        while let Some(Entry::Ready(..)) = c.queue.front() {
            if let Some(Entry::Ready(b, shape)) = c.queue.pop_front() {
                Self::emit(c, &b, shape);
            }
        }
    }

    /// One answer goes out to the client (noted as a unit for UDP).
    fn emit(c: &mut Conn, bytes: &[u8], get: Option<GetShape>) {
        if c.client_gone || bytes.is_empty() {
            return;
        }
        c.to_client.extend_from_slice(bytes);
        if let Some(u) = c.units.as_mut() {
            u.push(Unit {
                len: bytes.len(),
                get,
            });
        }
    }

    fn push_ready(c: &mut Conn, bytes: &[u8]) {
        if c.queue.is_empty() {
            Self::emit(c, bytes, None);
        } else {
            c.queue.push_back(Entry::Ready(bytes.to_vec(), None));
        }
    }

    /// Note each answer of this connection as a [`Unit`] from now on (a UDP
    /// pseudo-connection: its answer is framed by them).
    pub fn track_units(&mut self, id: usize) {
        if let Some(c) = self.conns.get_mut(id) {
            c.units.get_or_insert_with(Vec::new);
        }
    }

    /// The answers' units noted since the last call (in output order).
    pub fn take_units(&mut self, id: usize) -> Vec<Unit> {
        self.conns
            .get_mut(id)
            .and_then(|c| c.units.as_mut())
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn pump(&mut self, id: usize, now: Instant) {
        loop {
            let Some(c) = self.conns.get_mut(id) else {
                return;
            };
            if c.closing
                || c.client_gone
                || c.queue.len() >= self.s.max_pending
                || c.to_client.len() >= self.s.max_out_bytes
            {
                return;
            }
            let Some(req) = c.parser.next_request() else {
                c.closing |= c.eof;
                return;
            };
            self.handle(id, req, now);
        }
    }

    fn fills_allowed(&self, now: Instant) -> bool {
        self.flushes == 0 && self.no_fill_until.is_none_or(|t| now >= t)
    }

    fn servable(&self, key: &[u8], now: Instant) -> bool {
        self.fills_allowed(now) && self.keys.get(key).is_none_or(|s| s.writes == 0)
    }

    fn fresh(max_age: Option<Duration>, item: &Item, now: Instant) -> bool {
        max_age.is_none_or(|age| now.saturating_duration_since(item.filled) < age)
    }

    /// The cached item for a hit, if the key may be served now.
    fn lookup(&mut self, key: &[u8], now: Instant) -> bool {
        if !self.servable(key, now) {
            return false;
        }
        let fresh = match self.cache.get(key) {
            None => return false,
            Some(item) => Self::fresh(self.s.max_age, item, now),
        };
        if !fresh {
            self.cache.remove(key);
        }
        fresh
    }

    fn begin_write(&mut self, key: &Key) {
        let st = self.keys.entry(key.clone()).or_default();
        st.writes += 1;
        st.epoch += 1;
        self.cache.remove(key);
        self.stats.invalidations += 1;
    }

    fn write_done(&mut self, key: &[u8]) {
        if let Some(st) = self.keys.get_mut(key) {
            st.writes = st.writes.saturating_sub(1);
            st.epoch += 1;
            if st.writes == 0 && st.misses == 0 {
                self.keys.remove(key);
            }
        }
        self.cache.remove(key);
    }

    fn miss_done(&mut self, key: &[u8]) {
        if let Some(st) = self.keys.get_mut(key) {
            st.misses = st.misses.saturating_sub(1);
            if st.writes == 0 && st.misses == 0 {
                self.keys.remove(key);
            }
        }
    }

    fn flush_done(&mut self, delay_s: u32, now: Instant) {
        self.flushes = self.flushes.saturating_sub(1);
        self.flush_epoch += 1;
        self.cache.clear();
        if delay_s > 0 {
            // Items stored before the flush time become invalid then: fill
            // nothing until a second after it (memcached's clock ticks in seconds).
            let until = now + Duration::from_secs(u64::from(delay_s) + 1);
            self.no_fill_until = Some(self.no_fill_until.map_or(until, |t| t.max(until)));
        }
    }

    fn forward(&mut self, id: usize, bytes: &[&[u8]], expect: Expect, now: Instant) {
        let c = &mut self.conns[id];
        for b in bytes {
            c.to_backend.extend_from_slice(b);
            if let Some(r) = c.replay.as_mut() {
                r.extend_from_slice(b);
            }
        }
        c.queue.push_back(Entry::Wait { expect, since: now });
    }

    fn handle(&mut self, id: usize, req: Request, now: Instant) {
        match req {
            Request::Get { keys, cas } => self.get(id, keys, cas, now),
            Request::Gat { line } => self.forward(id, &[&line], Expect::Relay(Frame::Get), now),
            Request::Store {
                key,
                line,
                data,
                noreply,
            } => {
                self.begin_write(&key);
                self.forward(id, &[&line, &data], Expect::Update { key, noreply }, now);
            }
            Request::Update { key, line, noreply } => {
                self.begin_write(&key);
                self.forward(id, &[&line], Expect::Update { key, noreply }, now);
            }
            Request::FlushAll {
                line,
                noreply,
                delay_s,
            } => {
                self.flushes += 1;
                self.flush_epoch += 1;
                self.cache.clear();
                self.forward(id, &[&line], Expect::Flush { noreply, delay_s }, now);
            }
            Request::Stats { line } => self.forward(id, &[&line], Expect::Relay(Frame::Stats), now),
            Request::Other { line, noreply } => {
                self.forward(id, &[&line], Expect::Other { noreply }, now)
            }
            Request::Quit => self.conns[id].closing = true,
            Request::Reply(msg) => Self::push_ready(&mut self.conns[id], msg),
            Request::Fatal(msg) => {
                let c = &mut self.conns[id];
                Self::push_ready(c, msg);
                c.closing = true;
            }
        }
    }

    fn get(&mut self, id: usize, keys: Vec<Key>, cas: bool, now: Instant) {
        let hit: Vec<bool> = keys.iter().map(|k| self.lookup(k, now)).collect();
        let n_hits = hit.iter().filter(|&&h| h).count() as u64;
        self.stats.hits += n_hits;
        self.stats.misses += keys.len() as u64 - n_hits;
        if n_hits == keys.len() as u64 {
            // All hits: the answer is written now (or queued behind awaited ones).
            let mut out = Vec::new();
            for k in &keys {
                if let Some(item) = self.cache.get(k) {
                    write_value(&mut out, k, item.flags, &item.data, cas.then_some(item.cas));
                }
            }
            out.extend_from_slice(b"END\r\n");
            let shape = GetShape {
                keys: keys.len(),
                first_found: true,
                last_found: true,
            };
            let c = &mut self.conns[id];
            if c.queue.is_empty() {
                Self::emit(c, &out, Some(shape));
            } else {
                c.queue.push_back(Entry::Ready(out, Some(shape)));
            }
            return;
        }
        let mut line = b"gets".to_vec();
        let mut misses = Vec::new();
        let mut asked = Vec::with_capacity(keys.len());
        for (k, h) in keys.into_iter().zip(hit) {
            let known = if h {
                self.cache.get(&k).map(|i| Hit {
                    flags: i.flags,
                    cas: i.cas,
                    data: i.data.clone(),
                })
            } else {
                None
            };
            if known.is_none() {
                line.push(b' ');
                line.extend_from_slice(&k);
                let st = self.keys.entry(k.clone()).or_default();
                st.misses += 1;
                misses.push((k.clone(), st.epoch));
            }
            asked.push((k, known));
        }
        line.extend_from_slice(b"\r\n");
        let expect = Expect::Get {
            cas,
            keys: asked,
            misses,
            flush_epoch: self.flush_epoch,
        };
        self.forward(id, &[&line], expect, now);
    }

    /// The answer to an awaited request, from the backend's `raw` answer.
    fn complete(
        &mut self,
        expect: Expect,
        raw: Vec<u8>,
        get: Option<GetReply>,
        now: Instant,
    ) -> (Vec<u8>, Option<GetShape>) {
        let answer = match expect {
            Expect::Get {
                cas,
                keys,
                misses,
                flush_epoch,
            } => {
                let items = match get {
                    Some(GetReply::Items(items)) => items,
                    _ => {
                        // An error line instead of items: relayed.
                        for (k, _) in misses {
                            self.miss_done(&k);
                        }
                        return (raw, None);
                    }
                };
                let mut out = Vec::with_capacity(raw.len() + 64);
                let mut found = Vec::with_capacity(keys.len());
                for (k, known) in &keys {
                    match known {
                        Some(h) => {
                            found.push(true);
                            write_value(&mut out, k, h.flags, &h.data, cas.then_some(h.cas))
                        }
                        None => {
                            let it = items.iter().find(|it| it.key == *k);
                            found.push(it.is_some());
                            if let Some(it) = it {
                                write_value(
                                    &mut out,
                                    k,
                                    it.flags,
                                    &it.data,
                                    if cas { it.cas } else { None },
                                );
                            }
                        }
                    }
                }
                out.extend_from_slice(b"END\r\n");
                let shape = GetShape {
                    keys: keys.len(),
                    first_found: found.first().copied().unwrap_or(false),
                    last_found: found.last().copied().unwrap_or(false),
                };
                let flushed = flush_epoch != self.flush_epoch || !self.fills_allowed(now);
                for (k, epoch) in misses {
                    let ok = !flushed
                        && self
                            .keys
                            .get(&k)
                            .is_some_and(|st| st.epoch == epoch && st.writes == 0);
                    if let Some(it) = items.iter().find(|it| it.key == k) {
                        match (ok, it.cas) {
                            (true, Some(cas)) => {
                                self.stats.fills += 1;
                                self.cache.insert(
                                    k.clone(),
                                    Item {
                                        flags: it.flags,
                                        cas,
                                        data: it.data.clone(),
                                        filled: now,
                                    },
                                );
                            }
                            _ => self.stats.fills_refused += 1,
                        }
                    }
                    self.miss_done(&k);
                }
                return (out, Some(shape));
            }
            Expect::Relay(_) => raw,
            Expect::Update { key, noreply } => {
                self.write_done(&key);
                if noreply {
                    Vec::new()
                } else {
                    raw
                }
            }
            Expect::Flush { noreply, delay_s } => {
                self.flush_done(delay_s, now);
                if noreply {
                    Vec::new()
                } else {
                    raw
                }
            }
            Expect::Other { noreply } => {
                if noreply {
                    Vec::new()
                } else {
                    raw
                }
            }
        };
        (answer, None)
    }
}

/// The driver's view: memcached's connection is one for the client's whole
/// life, so its closing (or failing) fails the client connection.
impl super::inline::InlineMachine for Machine {
    fn open(&mut self) -> usize {
        Machine::open(self)
    }
    fn wants_client_input(&self, id: usize) -> bool {
        Machine::wants_client_input(self, id)
    }
    fn wants_backend_input(&self, _id: usize) -> bool {
        true
    }
    fn client_input(&mut self, id: usize, bytes: &[u8], now: Now) {
        Machine::client_input(self, id, bytes, now.mono)
    }
    fn client_eof(&mut self, id: usize, now: Now) {
        Machine::client_eof(self, id, now.mono)
    }
    fn client_closed(&mut self, id: usize) {
        Machine::client_closed(self, id)
    }
    fn backend_input(&mut self, id: usize, bytes: &[u8], now: Now) {
        Machine::backend_input(self, id, bytes, now.mono)
    }
    fn backend_eof(&mut self, id: usize, now: Now) {
        Machine::backend_failed(self, id, now.mono)
    }
    fn backend_failed(&mut self, id: usize, now: Now) {
        Machine::backend_failed(self, id, now.mono)
    }
    fn backend_opened(&mut self, id: usize, reused: bool) {
        Machine::backend_opened(self, id, reused)
    }
    fn wants_fresh_backend(&self, id: usize) -> bool {
        Machine::wants_fresh_backend(self, id)
    }
    fn take_backend_reset(&mut self, _id: usize) -> bool {
        false
    }
    fn resume(&mut self, id: usize, now: Now) {
        Machine::resume(self, id, now.mono)
    }
    fn client_out(&mut self, id: usize) -> Option<&mut Vec<u8>> {
        Machine::client_out(self, id)
    }
    fn backend_out(&mut self, id: usize) -> Option<&mut Vec<u8>> {
        Machine::backend_out(self, id)
    }
    fn finished(&self, id: usize) -> bool {
        Machine::finished(self, id)
    }
    fn tick(&mut self, now: Now) -> Vec<usize> {
        Machine::tick(self, now.mono)
    }
    fn remove(&mut self, id: usize, now: Now) {
        Machine::remove(self, id, now.mono)
    }
    fn counters(&self) -> Vec<Counter> {
        let s = self.stats;
        vec![
            Counter::total(
                "offrac_attach_cache_hits_total",
                "Keys answered from the cache.",
                s.hits,
            ),
            Counter::total(
                "offrac_attach_cache_misses_total",
                "Keys fetched from memcached.",
                s.misses,
            ),
            Counter::total(
                "offrac_attach_cache_fills_total",
                "Items put into the cache.",
                s.fills,
            ),
            Counter::total(
                "offrac_attach_cache_fills_refused_total",
                "Fetched items not cached (a write raced them, too large, or a flush).",
                s.fills_refused,
            ),
            Counter::total(
                "offrac_attach_cache_invalidations_total",
                "Cached items dropped by a write through the node.",
                s.invalidations,
            ),
            Counter::total(
                "offrac_attach_backend_failures_total",
                "Backend connections that failed or timed out with requests in flight.",
                s.backend_failures,
            ),
            Counter::total(
                "offrac_attach_backend_retries_total",
                "Requests sent again on a fresh backend connection after a reused one closed unanswered.",
                s.backend_retries,
            ),
            Counter::gauge(
                "offrac_attach_cache_bytes",
                "Bytes held by the cache.",
                self.cache.bytes() as u64,
            ),
        ]
    }

    fn awaits_backend(&self, id: usize) -> bool {
        Machine::awaits_backend(self, id)
    }
    fn track_units(&mut self, id: usize) {
        Machine::track_units(self, id)
    }
    fn take_units(&mut self, id: usize) -> Vec<Unit> {
        Machine::take_units(self, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::reply::parse_get;
    use proptest::prelude::*;

    /// A stand-in memcached for the sans-IO tests: one FIFO per connection.
    #[derive(Default)]
    struct Backend {
        store: HashMap<Vec<u8>, (u32, Vec<u8>, u64)>,
        cas: u64,
        /// Value written -> the order memcached applied it in (its CAS unique).
        applied: HashMap<Vec<u8>, u64>,
        parsers: HashMap<usize, RequestParser>,
        /// Answers produced, not yet delivered to the machine.
        outbox: HashMap<usize, Vec<u8>>,
    }

    impl Backend {
        /// Runs at most one request of `id` that the node has sent.
        fn step(&mut self, m: &mut Machine, id: usize) -> bool {
            let sent = std::mem::take(m.backend_out(id).unwrap());
            let p = self
                .parsers
                .entry(id)
                .or_insert_with(|| RequestParser::new(1 << 16, 1 << 20));
            p.push(&sent);
            let Some(req) = p.next_request() else {
                return false;
            };
            let out = self.outbox.entry(id).or_default();
            match req {
                Request::Get { keys, .. } => {
                    for k in keys {
                        if let Some((f, v, c)) = self.store.get(&*k) {
                            write_value(out, &k, *f, v, Some(*c));
                        }
                    }
                    out.extend_from_slice(b"END\r\n");
                }
                Request::Store {
                    key, data, line, ..
                } => {
                    self.cas += 1;
                    let flags = line.split(|&b| b == b' ').nth(2).unwrap();
                    let flags = std::str::from_utf8(flags).unwrap().parse().unwrap();
                    let value = data[..data.len() - 2].to_vec();
                    self.applied.insert(value.clone(), self.cas);
                    self.store.insert(key.to_vec(), (flags, value, self.cas));
                    out.extend_from_slice(b"STORED\r\n");
                }
                Request::Update { key, .. } => {
                    let found = self.store.remove(&*key).is_some();
                    out.extend_from_slice(if found {
                        b"DELETED\r\n"
                    } else {
                        b"NOT_FOUND\r\n"
                    });
                }
                Request::FlushAll { .. } => {
                    self.store.clear();
                    out.extend_from_slice(b"OK\r\n");
                }
                other => panic!("backend got {other:?}"),
            }
            true
        }

        fn deliver(&mut self, m: &mut Machine, id: usize, now: Instant) {
            if let Some(b) = self.outbox.remove(&id) {
                m.backend_input(id, &b, now);
            }
            // As the driver does after every event.
            m.resume(id, now);
        }

        fn settle(&mut self, m: &mut Machine, ids: &[usize], now: Instant) {
            loop {
                let mut any = false;
                for &id in ids {
                    while self.step(m, id) {
                        any = true;
                    }
                    if self.outbox.contains_key(&id) {
                        self.deliver(m, id, now);
                        any = true;
                    }
                }
                if !any {
                    return;
                }
            }
        }
    }

    fn take(m: &mut Machine, id: usize) -> Vec<u8> {
        std::mem::take(m.client_out(id).unwrap())
    }

    fn small() -> Settings {
        Settings {
            capacity_bytes: 1 << 20,
            max_pending: 8,
            ..Settings::default()
        }
    }

    /// A reused backend connection (a pool's) that fails before answering
    /// anything had been closed by memcached while idle: the requests go
    /// again, once, on a fresh connection, and each is answered once. A
    /// connection that answered a byte, a new one, or the retry's own
    /// failure, gives `SERVER_ERROR` as before.
    #[test]
    fn a_reused_connection_that_fails_unanswered_is_retried_once_on_a_fresh_one() {
        let now = Instant::now();
        let mut m = Machine::new(small());
        let c = m.open();
        m.client_input(c, b"get k\r\nset j 0 0 1\r\nx\r\n", now);
        m.backend_opened(c, true);
        // Part written, part still waiting, when the connection fails.
        let sent = std::mem::take(m.backend_out(c).unwrap());
        assert_eq!(sent, b"gets k\r\nset j 0 0 1\r\nx\r\n");
        m.backend_out(c).unwrap().extend_from_slice(&sent[8..]);
        m.backend_failed(c, now);
        assert_eq!(take(&mut m, c), b"", "nothing answered yet");
        assert!(m.wants_fresh_backend(c));
        assert!(m.awaits_backend(c));
        assert_eq!(m.backend_out(c).unwrap().as_slice(), &sent[..]);
        m.backend_opened(c, false);
        assert!(!m.wants_fresh_backend(c));
        std::mem::take(m.backend_out(c).unwrap());
        m.backend_input(c, b"VALUE k 0 1 5\r\nv\r\nEND\r\nSTORED\r\n", now);
        assert_eq!(take(&mut m, c), b"VALUE k 0 1\r\nv\r\nEND\r\nSTORED\r\n");
        assert_eq!(m.stats().backend_retries, 1);
        assert_eq!(m.stats().backend_failures, 0);
        // The retry's own failure is not retried again.
        m.client_input(c, b"get a\r\n", now);
        m.backend_failed(c, now);
        assert_eq!(take(&mut m, c), BACKEND_DOWN);
        assert_eq!(m.stats().backend_retries, 1);

        // A reused connection that answered a byte: its failure is not retried.
        let d = m.open();
        m.backend_opened(d, true);
        m.client_input(d, b"get a\r\nget b\r\n", now);
        m.backend_input(d, b"VAL", now);
        m.backend_failed(d, now);
        assert_eq!(take(&mut m, d), [BACKEND_DOWN, BACKEND_DOWN].concat());
        // A new connection's failure is not retried.
        let e = m.open();
        m.client_input(e, b"get a\r\n", now);
        m.backend_opened(e, false);
        m.backend_failed(e, now);
        assert_eq!(take(&mut m, e), BACKEND_DOWN);
        // Nor a timeout on a reused one (memcached silent, not gone).
        let f = m.open();
        m.client_input(f, b"get a\r\n", now);
        m.backend_opened(f, true);
        m.tick(now + Duration::from_secs(10));
        assert_eq!(take(&mut m, f), BACKEND_DOWN);
        assert_eq!(m.stats().backend_retries, 1);
    }

    /// The driver polls for memcached's answer only while the machine says
    /// one is owed: after a forwarded miss, not after a hit, and not once the
    /// answer is in or the backend has failed.
    #[test]
    fn an_answer_is_awaited_only_while_memcached_owes_one() {
        let now = Instant::now();
        let (mut m, mut b) = (Machine::new(small()), Backend::default());
        let c = m.open();
        assert!(!m.awaits_backend(c));
        m.client_input(c, b"get k\r\n", now);
        assert!(m.awaits_backend(c), "a miss is forwarded");
        b.settle(&mut m, &[c], now);
        assert!(!m.awaits_backend(c), "the miss is answered");
        m.client_input(c, b"set k 0 0 2\r\nhi\r\n", now);
        b.settle(&mut m, &[c], now);
        m.client_input(c, b"get k\r\n", now);
        b.settle(&mut m, &[c], now);
        take(&mut m, c);
        m.client_input(c, b"get k\r\n", now);
        assert_eq!(take(&mut m, c), b"VALUE k 0 2\r\nhi\r\nEND\r\n");
        assert!(!m.awaits_backend(c), "a hit owes nothing");
        m.client_input(c, b"get nope\r\n", now);
        assert!(m.awaits_backend(c));
        m.backend_failed(c, now);
        assert!(!m.awaits_backend(c), "a dead backend owes nothing");
        assert!(
            !m.awaits_backend(c + 1),
            "an unknown connection owes nothing"
        );
    }

    #[test]
    fn a_filled_key_is_served_without_the_backend() {
        let now = Instant::now();
        let (mut m, mut b) = (Machine::new(small()), Backend::default());
        let c = m.open();
        m.client_input(c, b"set k 5 0 2\r\nhi\r\nget k\r\n", now);
        b.settle(&mut m, &[c], now);
        assert_eq!(take(&mut m, c), b"STORED\r\nVALUE k 5 2\r\nhi\r\nEND\r\n");
        // A read sent behind a write of its key does not fill (the write's
        // answer bumps the key's epoch); a later one does.
        assert_eq!(m.stats().fills, 0);
        m.client_input(c, b"set k 0 0 2\r\nhi\r\n", now);
        b.settle(&mut m, &[c], now);
        m.client_input(c, b"get k\r\n", now);
        b.settle(&mut m, &[c], now);
        take(&mut m, c);
        assert_eq!(m.stats().fills, 1);
        m.client_input(c, b"gets k nope k\r\n", now);
        assert!(
            m.backend_out(c).unwrap().starts_with(b"gets nope"),
            "only the miss is forwarded"
        );
        b.settle(&mut m, &[c], now);
        let want = b"VALUE k 0 2 2\r\nhi\r\nVALUE k 0 2 2\r\nhi\r\nEND\r\n";
        assert_eq!(
            take(&mut m, c),
            want,
            "merged in key order; flags as stored"
        );
        m.client_input(c, b"get k\r\n", now);
        assert!(m.backend_out(c).unwrap().is_empty());
        assert_eq!(take(&mut m, c), b"VALUE k 0 2\r\nhi\r\nEND\r\n");
        assert_eq!(m.stats().hits, 3);
        assert_eq!(m.tracked_keys(), 0);
    }

    /// A client that sends and half-closes (`printf 'get k\r\n' | nc -N`)
    /// gets its answers, hits and misses, in order, then the close; a request
    /// cut off by the end is dropped. Before, the end of stream dropped them.
    #[test]
    fn a_client_that_half_closes_gets_what_it_asked_then_the_close() {
        let now = Instant::now();
        let (mut m, mut b) = (Machine::new(small()), Backend::default());
        let c = m.open();
        m.client_input(c, b"set k 0 0 2\r\nhi\r\n", now);
        b.settle(&mut m, &[c], now);
        m.client_input(c, b"get k\r\n", now);
        b.settle(&mut m, &[c], now);
        take(&mut m, c);
        m.client_input(c, b"get nope\r\nget k\r\nget k", now);
        m.client_eof(c, now);
        assert!(!m.wants_client_input(c));
        assert!(!m.finished(c), "a miss is awaited");
        b.settle(&mut m, &[c], now);
        assert_eq!(take(&mut m, c), b"END\r\nVALUE k 0 2\r\nhi\r\nEND\r\n");
        assert!(m.finished(c));
    }

    #[test]
    fn a_miss_that_raced_a_write_does_not_fill() {
        let now = Instant::now();
        let (mut m, mut b) = (Machine::new(small()), Backend::default());
        let (r, w) = (m.open(), m.open());
        m.client_input(w, b"set k 0 0 3\r\nold\r\n", now);
        b.settle(&mut m, &[w], now);
        // The reader's miss reaches memcached before the write, its answer after.
        m.client_input(r, b"get k\r\n", now);
        assert!(b.step(&mut m, r));
        m.client_input(w, b"set k 0 0 3\r\nnew\r\n", now);
        b.settle(&mut m, &[w], now);
        assert_eq!(take(&mut m, w), b"STORED\r\nSTORED\r\n");
        b.deliver(&mut m, r, now);
        assert_eq!(take(&mut m, r), b"VALUE k 0 3\r\nold\r\nEND\r\n");
        assert_eq!(m.stats().fills, 0, "the old value must not be cached");
        m.client_input(w, b"get k\r\n", now);
        b.settle(&mut m, &[w], now);
        assert_eq!(take(&mut m, w), b"VALUE k 0 3\r\nnew\r\nEND\r\n");
    }

    #[test]
    fn a_key_with_a_write_in_flight_is_not_served() {
        let now = Instant::now();
        let (mut m, mut b) = (Machine::new(small()), Backend::default());
        let c = m.open();
        m.client_input(c, b"set k 0 0 1\r\na\r\n", now);
        b.settle(&mut m, &[c], now);
        m.client_input(c, b"get k\r\n", now);
        b.settle(&mut m, &[c], now);
        take(&mut m, c);
        assert_eq!(m.stats().fills, 1, "k is cached");
        // Pipelined write then read of a cached key: the read waits its turn at memcached.
        m.client_input(c, b"set k 0 0 1 noreply\r\nb\r\nget k\r\n", now);
        assert!(take(&mut m, c).is_empty());
        b.settle(&mut m, &[c], now);
        assert_eq!(
            take(&mut m, c),
            b"VALUE k 0 1\r\nb\r\nEND\r\n",
            "noreply's STORED swallowed"
        );
    }

    #[test]
    fn a_failed_backend_answers_each_request_once_and_releases_keys() {
        let now = Instant::now();
        let mut m = Machine::new(small());
        let c = m.open();
        m.client_input(
            c,
            b"get a\r\nbogus\r\nset k 0 0 1 noreply\r\nx\r\ndelete k\r\n",
            now,
        );
        assert_eq!(m.tracked_keys(), 2);
        m.backend_failed(c, now);
        let down = String::from_utf8_lossy(BACKEND_DOWN);
        assert_eq!(
            String::from_utf8(take(&mut m, c)).unwrap(),
            format!("{down}ERROR\r\n{down}")
        );
        assert!(m.finished(c));
        assert_eq!(m.tracked_keys(), 0);
        m.remove(c, now);
    }

    #[test]
    fn a_silent_backend_times_out() {
        let now = Instant::now();
        let mut m = Machine::new(small());
        let c = m.open();
        m.client_input(c, b"get a\r\n", now);
        assert!(m.tick(now + Duration::from_secs(1)).is_empty());
        assert_eq!(m.tick(now + Duration::from_secs(6)), vec![c]);
        assert_eq!(take(&mut m, c), BACKEND_DOWN);
    }

    #[test]
    fn a_client_gone_mid_write_keeps_the_key_unservable_until_answered() {
        let now = Instant::now();
        let (mut m, mut b) = (Machine::new(small()), Backend::default());
        let (c, w) = (m.open(), m.open());
        m.client_input(w, b"set k 0 0 1\r\nx\r\n", now);
        m.client_closed(w);
        assert!(!m.finished(w));
        m.client_input(c, b"get k\r\n", now);
        assert_eq!(m.stats().hits, 0);
        b.settle(&mut m, &[w, c], now);
        assert!(m.finished(w));
        m.remove(w, now);
        assert_eq!(take(&mut m, c), b"VALUE k 0 1\r\nx\r\nEND\r\n");
    }

    #[test]
    fn a_client_that_does_not_read_is_paused() {
        let now = Instant::now();
        let mut m = Machine::new(small());
        let c = m.open();
        m.client_input(c, &b"get a\r\n".repeat(100), now);
        assert!(!m.wants_client_input(c));
        assert_eq!(m.backend_out(c).unwrap().len(), 8 * b"gets a\r\n".len());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(usize, usize),
        Get(usize, usize),
        Flush(usize),
        Backend(usize),
        Deliver(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Weighted so that races (a read answered after a write on another
        // connection was) come up often; flushes rarely.
        prop_oneof![
            2 => (0..3usize, 0..2usize).prop_map(|(c, k)| Op::Set(c, k)),
            3 => (0..3usize, 0..2usize).prop_map(|(c, k)| Op::Get(c, k)),
            1 => (0..3usize).prop_map(Op::Flush),
            4 => (0..3usize).prop_map(Op::Backend),
            4 => (0..3usize).prop_map(Op::Deliver),
        ]
    }

    #[derive(Debug)]
    enum Asked {
        Set(usize, u64),
        /// The newest write of the key acknowledged to anyone when the read was sent.
        /// And this connection's latest write of the key sent before the read (answered
        /// before it, in order, so its place in memcached's order is known by then).
        Get(u64, Option<u64>),
        Flush,
    }
    // Reading nothing is right once a flush_all may have run first (it races
    // writes acknowledged on other connections); reading an older value never is.

    /// Concurrent writers and readers under one interleaving of the
    /// backend's work: a read sent after a write was acknowledged (to any
    /// client) returns that write or a newer one.
    fn run_ops(ops: Vec<Op>) -> Result<(), TestCaseError> {
        let now = Instant::now();
        let (mut m, mut b) = (Machine::new(small()), Backend::default());
        let ids: Vec<usize> = (0..3).map(|_| m.open()).collect();
        let mut asked: Vec<VecDeque<Asked>> = (0..3).map(|_| VecDeque::new()).collect();
        let mut got: Vec<Vec<u8>> = vec![Vec::new(); 3];
        let mut version = 0u64;
        // Per key: the newest version acknowledged (0: none, or flushed).
        let mut acked = [0u64; 2];
        // Per connection and key: its latest write sent.
        let mut own = [[None::<u64>; 2]; 3];
        let mut flushed = false;
        // Versions are in memcached's order of applying them (CAS uniques).
        let mut check = |c: usize,
                         m: &mut Machine,
                         b: &Backend,
                         asked: &mut Vec<VecDeque<Asked>>,
                         acked: &mut [u64; 2],
                         flushed: bool|
         -> Result<(), TestCaseError> {
            got[c].extend(take(m, ids[c]));
            while let Some(front) = asked[c].front() {
                let n = match front {
                    Asked::Set(k, v) => {
                        let Some(n) = frame_len(&got[c], Frame::Line).unwrap() else {
                            break;
                        };
                        prop_assert_eq!(&got[c][..n], b"STORED\r\n");
                        acked[*k] = acked[*k].max(b.applied[v.to_string().as_bytes()]);
                        n
                    }
                    Asked::Flush => {
                        let Some(n) = frame_len(&got[c], Frame::Line).unwrap() else {
                            break;
                        };
                        *acked = [0, 0];
                        n
                    }
                    Asked::Get(floor, own) => {
                        let floor =
                            (*floor).max(own.map_or(0, |v| b.applied[v.to_string().as_bytes()]));
                        let floor = &floor;
                        let Some((n, r)) = parse_get(&got[c], 1 << 20).unwrap() else {
                            break;
                        };
                        let GetReply::Items(items) = r else {
                            panic!("error answer")
                        };
                        let seen = items.first().map_or(0, |i| i.cas.unwrap());
                        prop_assert!(
                            seen >= *floor || (seen == 0 && flushed),
                            "read {} after {} was acknowledged",
                            seen,
                            floor
                        );
                        n
                    }
                };
                got[c].drain(..n);
                asked[c].pop_front();
            }
            Ok(())
        };
        for o in ops {
            match o {
                Op::Set(c, k) => {
                    version += 1;
                    let v = version.to_string();
                    let req = format!("set k{k} 0 0 {}\r\n{v}\r\n", v.len());
                    m.client_input(ids[c], req.as_bytes(), now);
                    asked[c].push_back(Asked::Set(k, version));
                    own[c][k] = Some(version);
                }
                Op::Get(c, k) => {
                    m.client_input(ids[c], format!("gets k{k}\r\n").as_bytes(), now);
                    asked[c].push_back(Asked::Get(acked[k], own[c][k]));
                }
                Op::Flush(c) => {
                    m.client_input(ids[c], b"flush_all\r\n", now);
                    flushed = true;
                    asked[c].push_back(Asked::Flush);
                }
                Op::Backend(c) => {
                    b.step(&mut m, ids[c]);
                }
                Op::Deliver(c) => b.deliver(&mut m, ids[c], now),
            }
            for c in 0..3 {
                check(c, &mut m, &b, &mut asked, &mut acked, flushed)?;
            }
        }
        b.settle(&mut m, &ids, now);
        for c in 0..3 {
            check(c, &mut m, &b, &mut asked, &mut acked, flushed)?;
            prop_assert!(asked[c].is_empty());
        }
        prop_assert_eq!(m.tracked_keys(), 0);
        Ok(())
    }

    #[test]
    fn a_stale_fill_is_caught_by_the_checker() {
        use Op::*;
        // Set and read k0 (fills nothing: the read is a miss that follows the
        // write), miss again on another connection, answered before a newer
        // write lands and is acknowledged; then a third reader.
        let ops = vec![
            Set(0, 0),
            Backend(0),
            Deliver(0),
            Get(1, 0),
            Backend(1),
            Set(2, 0),
            Backend(2),
            Deliver(2),
            Deliver(1),
            Get(0, 0),
            Backend(0),
            Deliver(0),
        ];
        run_ops(ops).unwrap();
    }

    proptest! {
        // The default 256 cases rarely meet the race that
        // a_stale_fill_is_caught_by_the_checker spells out; 4096 find a
        // broken fill rule in well under a second.
        #![proptest_config(ProptestConfig::with_cases(4096))]
        #[test]
        fn reads_never_go_back_past_an_acknowledged_write(ops in prop::collection::vec(op(), 1..120)) {
            run_ops(ops)?;
        }
    }
}
