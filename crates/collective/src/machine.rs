//! The collectives of one node as a sans-IO state machine: calls from local
//! clients and messages from the other ranks' nodes go in with the current
//! time; messages to send and answers to give come out of [`Collectives::poll`];
//! [`Collectives::poll_timeout`] says when time matters next. No sockets,
//! threads or clock reads.
//!
//! A collective runs its rank's [`Plan`] step by step: on entering a step it
//! sends its transfers — at once if they are small (eager: the receiver
//! keeps what comes before its own call), else only after the receiver said
//! `Ready` for that step (rendezvous: large data is never held for a
//! collective not called yet; a receiver says it one step ahead, on
//! entering the step before) — and
//! it leaves the step when every receive of the step is complete. Any
//! failure (a mismatched call, a peer that went down or refused a message,
//! the deadline) ends the collective with an error at this rank and an
//! `Abort` to every other member, so no rank waits for one that gave up.

use crate::plan::{self, Combine, Plan, Thresholds};
use crate::reduce::{combine, combine_into};
use crate::wire::{take_message_flags, Algorithm, Descriptor, Kind, Members, WireError};
use crate::DESCRIPTOR_LEN;
use bytes::Bytes;
use offrac_core::{Instant, Room};
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The driver's handle for a call, given back with its answer.
pub type CallId = u64;

/// A collective: its tag within its communicator.
pub type Key = (u64, Members);

/// A posted receive: a data segment read straight into its place in the
/// work buffer ([`Collectives::post`]).
pub type PostId = u64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub thresholds: Thresholds,
    /// Transfers up to this many bytes are sent eagerly; larger ones wait
    /// for the receiver's `Ready` (rendezvous).
    pub eager_max_bytes: usize,
    /// Largest data segment in one message (it goes through the receiver's
    /// reassembly pool: keep it at most the pool's buffer size).
    pub segment_bytes: usize,
    /// Deadline of a call that names none, and the longest one allowed.
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// Eager data held for collectives this node has not been called for yet.
    pub early_max_bytes: usize,
    /// How long such data (and the memory of a finished tag) is kept.
    pub early_ttl: Duration,
    /// Largest work buffer of one collective.
    pub max_work_bytes: usize,
    /// The node's driver asks a peer to answer every `ack_window`-th message
    /// it sends on a link (the others are answered only if refused), and
    /// keeps a record of at most this many unanswered messages per link
    /// (plus those sent while an asked-for answer travels). 1: every message
    /// is answered.
    pub ack_window: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            thresholds: Thresholds::default(),
            eager_max_bytes: 64 << 10,
            segment_bytes: 1 << 20,
            default_timeout: Duration::from_secs(10),
            max_timeout: Duration::from_secs(300),
            early_max_bytes: 64 << 20,
            early_ttl: Duration::from_secs(30),
            max_work_bytes: 1 << 30,
            ack_window: 16,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailKind {
    /// A bad or mismatched call (status `BAD_INPUT`).
    BadInput,
    /// A member is not in the device table, or its link went down (`UNREACHABLE`).
    Unreachable,
    /// The deadline passed (`TIMEOUT`).
    Timeout,
    /// Too large for this node (`TOO_LARGE`).
    TooLarge,
    /// No room for early data, or the tag is busy (`BUSY`).
    Busy,
}

impl FailKind {
    fn code(self) -> u32 {
        match self {
            FailKind::BadInput => 1,
            FailKind::Unreachable => 2,
            FailKind::Timeout => 3,
            FailKind::TooLarge => 4,
            FailKind::Busy => 5,
        }
    }
    fn from_code(c: u32) -> FailKind {
        match c {
            2 => FailKind::Unreachable,
            3 => FailKind::Timeout,
            4 => FailKind::TooLarge,
            5 => FailKind::Busy,
            _ => FailKind::BadInput,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailKind,
    /// The device the failure is about, if one.
    pub device: Option<u8>,
    pub message: String,
}

impl Failure {
    fn new(kind: FailKind, device: Option<u8>, message: String) -> Failure {
        Failure {
            kind,
            device,
            message,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// Send `message` then `tail` (a descriptor and its body) to `device`
    /// as one request for function 251; if the device cannot take it,
    /// report [`Collectives::handle_send_failed`] with `key`. `tail` is a
    /// data segment shared with the buffer it comes from (the work buffer
    /// or a named input), not copied: write it after `message` (e.g. with a
    /// vectored write). Empty when the body is in `message`.
    Send {
        device: u8,
        key: Key,
        message: Vec<u8>,
        tail: Bytes,
    },
    /// The answer to a call: this rank's output, or why it failed. The
    /// output may share the work buffer with segments still being sent.
    Done {
        call: CallId,
        algorithm: Algorithm,
        result: Result<Bytes, Failure>,
    },
}

#[derive(Debug)]
struct Running {
    call: CallId,
    desc: Descriptor,
    devices: Vec<u8>,
    rank: usize,
    plan: Plan,
    work: Vec<u8>,
    /// The work buffer once shared (then `work` is empty): frozen when a
    /// step from `final_from` on sends out of it, so that its segments go as
    /// slices of it, uncopied; or the named input itself when it fills the
    /// work buffer. A write after that takes it back ([`work_mut`]: moved if
    /// no segment holds it any more, else copied).
    shared: Option<Bytes>,
    /// The first step from which no step receives: the work buffer is not
    /// written any more, so its sends may share it.
    final_from: usize,
    step: usize,
    entered: bool,
    /// Per receive of the current step: bytes arrived.
    got: Vec<usize>,
    /// Per send of the current step: sent yet.
    sent: Vec<bool>,
    /// Per send of the current step waiting for its receiver's `Ready`: its
    /// bytes as they were on entering the step, when the step's receives
    /// overwrite them meanwhile (recursive doubling).
    held: Vec<Option<Vec<u8>>>,
    /// Per send of step 0: its messages, built from the input when the call
    /// started (`Plan::sends_from_input`), until they may go.
    prebuilt: Vec<Option<Vec<Segment>>>,
    /// A shared input read in place where the work buffer has not been
    /// written yet, instead of copied into it first (`InputReads`).
    reads: Option<InputReads>,
    /// `Ready` seen from (rank, step).
    ready: FxHashSet<(usize, u32)>,
    /// Messages for later steps.
    stash: Vec<(Descriptor, Kept)>,
    /// Segments of the current step being read straight into place.
    posts: Vec<Post>,
    /// The work buffer is filled in order, not zeroed first (`fills_in_order`):
    /// its bytes so far are `work`, the data that came ahead of them wait
    /// here (keyed by where they go in the work buffer), moved or copied as
    /// a stashed message is.
    ahead: Option<BTreeMap<usize, Kept>>,
    deadline: Instant,
    timeout: Duration,
}

/// A segment of the current step read straight into its place in the work
/// buffer while its message arrives ([`Collectives::post`]). Its bytes are
/// reserved: another message that writes any of them fails the collective.
#[derive(Debug)]
struct Post {
    id: PostId,
    /// The receive of the step it is part of.
    recv: usize,
    /// Its bytes in the work buffer.
    range: std::ops::Range<usize>,
    /// Bytes of it in place so far.
    done: usize,
    /// Appended to a work buffer filled in order (its end is where the
    /// segment is up to), rather than written over zeroes or the input.
    append: bool,
}

/// A message's body kept for later: the message as it came when the
/// machine was given it ([`Collectives::handle_message_owned`]: moved, not
/// copied), else a copy of the body.
#[derive(Debug)]
struct Kept {
    buf: Vec<u8>,
    /// Where the body starts in `buf`.
    at: usize,
}

impl Kept {
    fn body(&self) -> &[u8] {
        &self.buf[self.at..]
    }
}

/// A shared input (a named buffer) that fills the work buffer, read where
/// it is rather than copied in when the call starts: the work buffer starts
/// zeroed, a receive that is the first write of its bytes reduces the
/// input and the message into it (or copies the message, in a copy step),
/// and a send of bytes no receive has written yet goes as a slice of the
/// input. Only for plans whose receives together write every byte of the
/// work buffer (`input_reads`): the ring and recursive-doubling
/// all-reduces, a tree reduce's inner ranks.
#[derive(Debug)]
struct InputReads {
    input: Bytes,
    /// Per step, per receive: no earlier receive wrote its bytes.
    fresh: Vec<Vec<bool>>,
    /// Per step, per send: no earlier receive wrote its bytes.
    sends: Vec<Vec<bool>>,
}

impl InputReads {
    fn fresh(&self, step: usize, i: usize) -> bool {
        self.fresh.get(step).and_then(|f| f.get(i)).copied() == Some(true)
    }

    fn send(&self, step: usize, i: usize) -> bool {
        self.sends.get(step).and_then(|f| f.get(i)).copied() == Some(true)
    }
}

/// A message to send: its descriptor (and body, if copied), then a shared
/// tail (empty if the body was copied).
type Segment = (Vec<u8>, Bytes);

/// A call's input: lent by the caller, or shared with its owner.
enum Src<'a> {
    Borrowed(&'a [u8]),
    Shared(Bytes),
}

/// A message handed to the machine: borrowed (kept by copying its body) or
/// owned (kept as it is).
enum Msg<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

impl Msg<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Msg::Borrowed(b) => b,
            Msg::Owned(v) => v,
        }
    }

    /// Its body (bytes `at..`), kept: moved if owned, else copied (`true`).
    fn keep(self, at: usize) -> (Kept, bool) {
        match self {
            Msg::Borrowed(b) => (
                Kept {
                    buf: b[at..].to_vec(),
                    at: 0,
                },
                true,
            ),
            Msg::Owned(buf) => (Kept { buf, at }, false),
        }
    }
}

/// A message's body handed to [`apply`]: lent by the caller, or kept.
enum Body<'a> {
    Msg(Msg<'a>, usize),
    Kept(Kept),
}

impl Body<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Body::Msg(m, at) => &m.bytes()[*at..],
            Body::Kept(k) => k.body(),
        }
    }

    /// Kept for later: moved if owned, else copied (`true`).
    fn keep(self) -> (Kept, bool) {
        match self {
            Body::Msg(m, at) => m.keep(at),
            Body::Kept(k) => (k, false),
        }
    }
}

/// Messages for a collective not called here yet.
#[derive(Debug, Default)]
struct Early {
    first_at: Option<Instant>,
    msgs: Vec<(Descriptor, Kept)>,
    bytes: usize,
    abort: Option<Failure>,
}

/// Counters, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub completed: u64,
    pub failed: u64,
    pub sent_messages: u64,
    pub sent_bytes: u64,
    pub rendezvous: u64,
    /// Bytes running collectives copied in memory: inputs into the work buffer or
    /// into messages, message bodies out of the work buffer, received data
    /// into it (copied or reduced) or kept for a later step, outputs out of
    /// it. (Data kept for a collective not called yet is not counted.)
    pub copied_bytes: u64,
    /// Bytes of data messages that came before their step and were kept
    /// for it (moved when the driver hands the message over, copied into
    /// `copied_bytes` too when it lends it).
    pub stashed_bytes: u64,
    /// Bytes of work buffers zeroed before their data came (a buffer only
    /// part of which the input fills, and not filled in order).
    pub zeroed_bytes: u64,
    /// Bytes sent as slices of a shared buffer (the work buffer once it is
    /// not written any more, or a named input), not copied into messages.
    pub shared_bytes: u64,
    /// Bytes of work buffers that reused the memory of a buffer given back
    /// ([`Collectives::recycle`]) instead of fresh memory.
    pub reused_bytes: u64,
    /// Bytes of received segments read straight into their place in the
    /// work buffer (posted receives), not copied: the bytes of a posted
    /// segment that came with its descriptor are copied (`copied_bytes`).
    pub posted_bytes: u64,
}

/// A work buffer smaller than this is not worth keeping for reuse: the
/// allocator reuses such memory anyway. Larger ones come from fresh
/// mappings whose every page the kernel faults in and clears on first write.
const SPARE_MIN_BYTES: usize = 1 << 20;

pub struct Collectives {
    me: u8,
    cfg: Config,
    running: FxHashMap<Key, Running>,
    early: FxHashMap<Key, Early>,
    early_bytes: usize,
    /// Tags that ended here, until when their late messages are dropped.
    finished: FxHashMap<Key, Instant>,
    /// Collectives that succeeded here, until `early_ttl` after: their
    /// descriptor and this node's rank, to tell a peer that refused one of
    /// their messages (it would wait for it in vain).
    succeeded: FxHashMap<Key, (Instant, Descriptor, u8)>,
    out: VecDeque<Out>,
    stats: Stats,
    /// A buffer given back for reuse, and until when it is kept.
    spare: Option<(Vec<u8>, Instant)>,
    /// Open posted receives, and whose they are.
    posts: FxHashMap<PostId, Key>,
    next_post: PostId,
}

impl Collectives {
    pub fn new(me: u8, cfg: Config) -> Collectives {
        Collectives {
            me,
            cfg,
            running: FxHashMap::default(),
            early: FxHashMap::default(),
            early_bytes: 0,
            finished: FxHashMap::default(),
            succeeded: FxHashMap::default(),
            out: VecDeque::new(),
            stats: Stats::default(),
            spare: None,
            posts: FxHashMap::default(),
            next_post: 0,
        }
    }

    /// A buffer that held a collective's output and is free again (the
    /// named buffer it was kept in was replaced): its memory becomes the
    /// spare that the next work buffer of a size it fits reuses, so that a
    /// collective repeated into the same named buffer writes memory already
    /// mapped instead of fresh pages (each faulted in and cleared by the
    /// kernel on its first write: a 32 MiB buffer is 8192 faults). One spare
    /// at most, of at most `max_work_bytes`, kept `early_ttl`; a buffer
    /// still shared (slices of it being sent) or under 1 MiB is dropped.
    pub fn recycle(&mut self, now: Instant, buf: Bytes) {
        // Taken back whole and emptied, so that no byte moves (dropped if a
        // slice of it is still held elsewhere).
        let Ok(mut buf) = buf.try_into_mut() else {
            return;
        };
        buf.clear();
        let buf = Vec::from(buf);
        let cap = buf.capacity();
        if (SPARE_MIN_BYTES..=self.cfg.max_work_bytes).contains(&cap) {
            self.spare = Some((buf, now + self.cfg.early_ttl));
        }
    }

    /// Bytes of the spare buffer kept for reuse (0: none).
    pub fn spare_bytes(&self) -> usize {
        self.spare.as_ref().map_or(0, |(b, _)| b.capacity())
    }

    /// The spare buffer, emptied, if `len` bytes fit in it and it is not
    /// more than twice as large.
    fn take_spare(&mut self, len: usize) -> Option<Vec<u8>> {
        let fits = |b: &Vec<u8>| b.capacity() >= len && b.capacity() / 2 <= len;
        match self.spare.take() {
            Some((mut b, _)) if len >= SPARE_MIN_BYTES && fits(&b) => {
                b.clear();
                self.stats.reused_bytes += len as u64;
                Some(b)
            }
            spare => {
                self.spare = spare;
                None
            }
        }
    }

    /// A zeroed buffer of `len` bytes (counted): the spare if it fits, else new.
    fn zeroed_work_buffer(&mut self, len: usize) -> Vec<u8> {
        self.stats.zeroed_bytes += len as u64;
        match self.take_spare(len) {
            Some(mut b) => {
                b.resize(len, 0);
                b
            }
            // Fresh zeroed memory (pages untouched until written).
            None => vec![0u8; len],
        }
    }

    /// An empty buffer for `len` bytes: the spare if it fits, else new.
    fn work_buffer(&mut self, len: usize) -> Vec<u8> {
        self.take_spare(len)
            .unwrap_or_else(|| Vec::with_capacity(len))
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Collectives running here.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn poll(&mut self) -> Option<Out> {
        self.out.pop_front()
    }

    /// A local client's call (`payload`: descriptor then input).
    /// `reachable(device)`: the device is in this node's device table.
    pub fn handle_call(
        &mut self,
        now: Instant,
        call: CallId,
        payload: &[u8],
        reachable: impl Fn(u8) -> bool,
    ) {
        self.handle_call_with_input(now, call, payload, None, reachable);
    }

    /// [`Collectives::handle_call`] whose input is `input` rather than the
    /// bytes after the descriptor (a named buffer's, read in place: it is
    /// copied once, into the work buffer).
    pub fn handle_call_with_input(
        &mut self,
        now: Instant,
        call: CallId,
        payload: &[u8],
        input: Option<&[u8]>,
        reachable: impl Fn(u8) -> bool,
    ) {
        self.call(now, call, payload, input.map(Src::Borrowed), reachable);
    }

    /// [`Collectives::handle_call_with_input`] of an input shared with its
    /// owner (a named buffer): segments sent straight from the input are
    /// slices of it, and a work buffer the input fills and no step writes
    /// (a broadcast's root) is the input itself — no copy.
    pub fn handle_call_shared(
        &mut self,
        now: Instant,
        call: CallId,
        payload: &[u8],
        input: Bytes,
        reachable: impl Fn(u8) -> bool,
    ) {
        self.call(now, call, payload, Some(Src::Shared(input)), reachable);
    }

    fn call(
        &mut self,
        now: Instant,
        call: CallId,
        payload: &[u8],
        input: Option<Src<'_>>,
        reachable: impl Fn(u8) -> bool,
    ) {
        match self.start(now, call, payload, input, reachable) {
            Ok(key) => self.progress(now, key),
            Err((f, tell)) => {
                if tell {
                    self.abort_refused_call(now, payload, f.kind, &f.message);
                }
                self.stats.failed += 1;
                self.out.push_back(Out::Done {
                    call,
                    algorithm: Algorithm::Auto,
                    result: Err(f),
                });
            }
        }
    }

    /// A call this node refuses before its collective starts (`kind`,
    /// `message`: why), e.g. the driver found its named input missing: the
    /// other members are sent `Abort` at once instead of waiting for this
    /// rank until their deadline, and the tag ends here (its early data is
    /// dropped, late messages too). Nothing is told when the payload does
    /// not name a communicator this node is a member of, or when the tag is
    /// already running or recently ended here (the refusal is about this
    /// call's tag, not about the collective that holds it).
    pub fn abort_refused_call(
        &mut self,
        now: Instant,
        payload: &[u8],
        kind: FailKind,
        message: &str,
    ) {
        let Ok((d, _)) = Descriptor::decode(payload) else {
            return;
        };
        let Some(rank) = d.members.rank_of(self.me) else {
            return;
        };
        let key = (d.tag, d.members);
        if d.kind != Kind::Call
            || self.running.contains_key(&key)
            || self.finished.contains_key(&key)
        {
            return;
        }
        if let Some(e) = self.early.remove(&key) {
            self.early_bytes -= e.bytes;
        }
        for (i, device) in d.members.devices().into_iter().enumerate() {
            if i != rank {
                let message =
                    d.message(Kind::Abort, rank as u8, 0, kind.code(), message.as_bytes());
                self.out.push_back(Out::Send {
                    device,
                    key,
                    message,
                    tail: Bytes::new(),
                });
            }
        }
        self.finished.insert(key, now + self.cfg.early_ttl);
    }

    /// Start a call's collective, or say why not and whether the other
    /// members are to be told (the call itself is wrong: they would wait
    /// for this rank in vain).
    fn start(
        &mut self,
        now: Instant,
        call: CallId,
        payload: &[u8],
        src: Option<Src<'_>>,
        reachable: impl Fn(u8) -> bool,
    ) -> Result<Key, (Failure, bool)> {
        let quiet = |m: String| (Failure::new(FailKind::BadInput, None, m), false);
        let (mut d, after) = Descriptor::decode(payload).map_err(|e| quiet(e.to_string()))?;
        let shared = match &src {
            Some(Src::Shared(b)) => Some(b.clone()),
            _ => None,
        };
        let input: &[u8] = match &src {
            Some(Src::Borrowed(b)) => b,
            Some(Src::Shared(b)) => b,
            None => after,
        };
        if d.kind != Kind::Call {
            return Err(quiet(format!(
                "a client sends calls (kind 1), not kind {}",
                d.kind as u8
            )));
        }
        let Some(rank) = d.members.rank_of(self.me) else {
            return Err(quiet(format!(
                "this node (device {}) is not a member of the communicator",
                self.me
            )));
        };
        // From here the call names its collective: a refusal is told.
        let tell = |f: Failure| (f, true);
        let bad = |m: String| tell(Failure::new(FailKind::BadInput, None, m));
        let devices = d.members.devices();
        let n = devices.len();
        if let Some(&gone) = devices.iter().find(|&&x| x != self.me && !reachable(x)) {
            return Err(tell(Failure::new(
                FailKind::Unreachable,
                Some(gone),
                format!("member device {gone} is not in this node's device table"),
            )));
        }
        if d.count == 0 {
            return Err(bad("a collective of 0 elements".into()));
        }
        if d.root as usize >= n {
            return Err(bad(format!(
                "root rank {} but the communicator has {n} ranks",
                d.root
            )));
        }
        let elem = d.dtype.size();
        let len = d.count as usize * elem;
        if d.algorithm == Algorithm::Auto {
            d.algorithm = plan::choose(d.op, n, len, &self.cfg.thresholds);
        } else if let Some(why) = plan::unsupported(d.op, d.algorithm, n) {
            return Err(bad(why));
        }
        let p = plan::plan(d.op, d.algorithm, n, rank, d.root as usize, len, elem);
        if p.work_len > self.cfg.max_work_bytes {
            return Err(tell(Failure::new(
                FailKind::TooLarge,
                None,
                format!(
                    "{} of {} bytes exceeds this node's limit of {} bytes per collective",
                    d.op.name(),
                    p.work_len,
                    self.cfg.max_work_bytes
                ),
            )));
        }
        let want = p.input.len();
        // A broadcast's non-root may pass its buffer (ignored), as MPI does.
        let ignored = want == 0 && d.op == crate::wire::Op::Broadcast && input.len() == len;
        if input.len() != want && !ignored {
            return Err(bad(format!(
                "rank {rank} of {} of {} {} (root {}) gives {} input bytes, expected {want}",
                d.op.name(),
                d.count,
                d.dtype.name(),
                d.root,
                input.len()
            )));
        }
        let key = (d.tag, d.members);
        if self.running.contains_key(&key) {
            return Err((
                Failure::new(
                    FailKind::Busy,
                    None,
                    format!("tag {} is already running on this communicator", d.tag),
                ),
                false,
            ));
        }
        if self.finished.contains_key(&key) {
            return Err(quiet(format!(
                "tag {} was used recently on this communicator; use a new tag",
                d.tag
            )));
        }
        let timeout = match d.timeout_ms {
            0 => self.cfg.default_timeout,
            ms => Duration::from_millis(ms as u64).min(self.cfg.max_timeout),
        };
        let mut prebuilt = Vec::new();
        let mut reads = None;
        let mut ahead = None;
        let mut shared_work = None;
        let final_from = p
            .steps
            .iter()
            .rposition(|s| !s.recvs.is_empty())
            .map_or(0, |i| i + 1);
        let work = if p.sends_from_input {
            // The sends' messages straight from the input; the work buffer
            // only the input's part that is the output.
            let seg = self.cfg.segment_bytes.max(4);
            let at = |r: &std::ops::Range<usize>| r.start - p.input.start..r.end - p.input.start;
            for t in p.steps.first().map_or(&[][..], |s| &s.sends[..]) {
                let range = at(&t.range);
                let msgs = match &shared {
                    Some(b) => {
                        self.stats.shared_bytes += range.len() as u64;
                        shared_segments(&d, rank, 0, t.range.start, &b.slice(range), seg)
                    }
                    None => {
                        self.stats.copied_bytes += range.len() as u64;
                        segments(&d, rank, 0, t.range.start, &input[range], seg)
                    }
                };
                prebuilt.push(Some(msgs));
            }
            let held = p.work_base..p.work_base + p.work_len;
            if held.is_empty() {
                Vec::new()
            } else if let Some(b) = &shared {
                // This rank's own part (a scatter root's block) stays a
                // slice of the input until written (never, for a scatter).
                shared_work = Some(b.slice(at(&held)));
                Vec::new()
            } else {
                self.stats.copied_bytes += held.len() as u64;
                let mut work = self.work_buffer(held.len());
                work.extend_from_slice(&input[at(&held)]);
                work
            }
        } else if fills_in_order(&p) {
            // Every byte of the work buffer comes once (the input, then
            // whole receives): no zeroing, the buffer grows in order.
            let mut work = self.work_buffer(p.work_len);
            let mut wait = BTreeMap::new();
            if !p.input.is_empty() {
                self.stats.copied_bytes += input.len() as u64;
                let at = in_work(&p, &p.input).start;
                if at == 0 {
                    work.extend_from_slice(input);
                } else {
                    let buf = input.to_vec();
                    wait.insert(at, Kept { buf, at: 0 });
                }
            }
            ahead = Some(wait);
            work
        } else if !ignored && in_work(&p, &p.input) == (0..p.work_len) {
            // The input fills the work buffer: no zeroing first; a shared
            // input that no step writes over is the work buffer itself; one
            // the receives overwrite everywhere is read in place.
            let in_place = match &shared {
                Some(b) if final_from != 0 => input_reads(&p, b),
                _ => None,
            };
            match &shared {
                Some(b) if final_from == 0 => {
                    shared_work = Some(b.clone());
                    Vec::new()
                }
                _ if in_place.is_some() => {
                    reads = in_place;
                    self.zeroed_work_buffer(p.work_len)
                }
                _ => {
                    self.stats.copied_bytes += input.len() as u64;
                    let mut work = self.work_buffer(input.len());
                    work.extend_from_slice(input);
                    work
                }
            }
        } else {
            let mut work = self.zeroed_work_buffer(p.work_len);
            if !ignored {
                self.stats.copied_bytes += input.len() as u64;
                work[in_work(&p, &p.input)].copy_from_slice(input);
            }
            work
        };
        let mut run = Running {
            call,
            desc: d,
            devices,
            rank,
            plan: p,
            work,
            shared: shared_work,
            final_from,
            step: 0,
            entered: false,
            got: Vec::new(),
            sent: Vec::new(),
            held: Vec::new(),
            prebuilt,
            reads,
            ready: FxHashSet::default(),
            stash: Vec::new(),
            posts: Vec::new(),
            ahead,
            deadline: now + timeout,
            timeout,
        };
        if let Some(e) = self.early.remove(&key) {
            self.early_bytes -= e.bytes;
            if let Some(f) = e.abort {
                self.finished.insert(key, now + self.cfg.early_ttl);
                return Err((f, false));
            }
            for (m, body) in e.msgs {
                if let Err(f) = matches(&run, &m) {
                    self.abort_others(&run, &f);
                    self.finished.insert(key, now + self.cfg.early_ttl);
                    return Err((f, false));
                }
                run.stash.push((m, body));
            }
        }
        self.running.insert(key, run);
        Ok(key)
    }

    /// A message from another rank's node. An error means the message
    /// itself is malformed (answer the sender `BAD_INPUT`).
    pub fn handle_message(&mut self, now: Instant, payload: &[u8]) -> Result<(), WireError> {
        self.message(now, Msg::Borrowed(payload))
    }

    /// [`Collectives::handle_message`] of a message the driver hands over:
    /// kept as it is, not copied, when it comes before its step (or before
    /// this node's call).
    pub fn handle_message_owned(
        &mut self,
        now: Instant,
        payload: Vec<u8>,
    ) -> Result<(), WireError> {
        self.message(now, Msg::Owned(payload))
    }

    /// A data message has begun to arrive: `head` is its payload so far
    /// (its descriptor, then the first bytes of its body), and its body is
    /// `body_len` bytes in all. If it is a segment this rank copies (not
    /// reduces) into its work buffer in the step it is in now, the rest of
    /// the body can be read straight into its place there — a posted
    /// receive: the body bytes in `head` are copied there now, the rest goes
    /// into [`Collectives::posted_room`] read by read
    /// ([`Collectives::posted_read`]), and the whole message, as the
    /// payload it has then (`head`), to [`Collectives::handle_message_posted`];
    /// if its bytes stop coming, [`Collectives::cancel_post`]. `None`: hand
    /// the message over whole, as usual. Nothing fails here: a message that
    /// is not posted is judged when it is whole.
    pub fn post(&mut self, head: &[u8], body_len: usize) -> Option<PostId> {
        let mut desc: [u8; DESCRIPTOR_LEN] = head.get(..DESCRIPTOR_LEN)?.try_into().ok()?;
        take_message_flags(&mut desc).ok()?;
        let (d, _) = Descriptor::decode(&desc).ok()?;
        let early = &head[DESCRIPTOR_LEN..];
        if d.kind != Kind::Data || early.len() >= body_len {
            return None;
        }
        let key = (d.tag, d.members);
        let r = self.running.get_mut(&key)?;
        if matches(r, &d).is_err() || !r.entered || d.step as usize != r.step {
            return None;
        }
        if r.plan.combine == Combine::Reduce && r.step < r.plan.copy_from {
            return None; // reduced, not copied: it needs the bytes where they are
        }
        let (src, at) = (d.src as usize, d.offset as usize);
        let end = at.checked_add(body_len)?;
        let recvs = &r.plan.steps[r.step].recvs;
        let i = recvs
            .iter()
            .position(|t| t.peer == src && t.range.start <= at && end <= t.range.end)?;
        if r.got[i] + body_len > recvs[i].range.len() {
            return None;
        }
        let into = in_work(&r.plan, &(at..end));
        if r.posts.iter().any(|p| overlap(&p.range, &into)) {
            return None;
        }
        let work = work_mut(&mut r.work, &mut r.shared, &mut self.stats);
        let append = match &r.ahead {
            // Filled in order: only the segment that is next, and none
            // waiting ahead within it.
            Some(ahead) => {
                if into.start != work.len() || ahead.range(..into.end).next().is_some() {
                    return None;
                }
                work.reserve(body_len);
                work.extend_from_slice(early);
                true
            }
            None => {
                work[into.start..into.start + early.len()].copy_from_slice(early);
                false
            }
        };
        self.stats.copied_bytes += early.len() as u64;
        let id = self.next_post;
        self.next_post += 1;
        r.posts.push(Post {
            id,
            recv: i,
            range: into,
            done: early.len(),
            append,
        });
        self.posts.insert(id, key);
        Some(id)
    }

    /// Where the next bytes of posted receive `id` go: appended to the work
    /// buffer, or over their place in it. `None`: the post is gone (its
    /// collective ended): the rest of its message has nowhere to go.
    pub fn posted_room(&mut self, id: PostId) -> Option<Room<'_>> {
        let key = self.posts.get(&id)?;
        let r = self.running.get_mut(key)?;
        let p = r.posts.iter().find(|p| p.id == id)?;
        let left = p.range.len() - p.done;
        if p.append {
            debug_assert_eq!(r.work.len(), p.range.start + p.done);
            Some(Room::Spare(&mut r.work, left))
        } else {
            Some(Room::Slice(
                &mut r.work[p.range.start + p.done..p.range.end],
            ))
        }
    }

    /// `n` bytes were read into [`Collectives::posted_room`] of `id` (a
    /// spare room's vector already grown by them).
    pub fn posted_read(&mut self, id: PostId, n: usize) {
        let Some(key) = self.posts.get(&id) else {
            return;
        };
        let Some(p) = self
            .running
            .get_mut(key)
            .and_then(|r| r.posts.iter_mut().find(|p| p.id == id))
        else {
            return;
        };
        let n = n.min(p.range.len() - p.done);
        p.done += n;
        self.stats.posted_bytes += n as u64;
    }

    /// The message of posted receive `id` is whole: `payload` is what came
    /// apart from its posted bytes (its descriptor, flags cleared, and the
    /// body bytes [`Collectives::post`] was given). Its segment counts as
    /// received; a post whose collective ended meanwhile is dropped.
    pub fn handle_message_posted(
        &mut self,
        now: Instant,
        payload: &[u8],
        id: PostId,
    ) -> Result<(), WireError> {
        let (d, _) = Descriptor::decode(payload)?;
        let Some(key) = self.posts.remove(&id) else {
            return Ok(()); // its collective ended here
        };
        let Some(r) = self.running.get_mut(&key) else {
            return Ok(());
        };
        let Some(i) = r.posts.iter().position(|p| p.id == id) else {
            return Ok(());
        };
        let p = r.posts.swap_remove(i);
        let src = d.src as usize;
        let whole = p.done == p.range.len() && d.step as usize == r.step;
        r.got[p.recv] += p.range.len();
        let res = if !whole || r.got[p.recv] > r.plan.steps[r.step].recvs[p.recv].range.len() {
            Err(Failure::new(
                FailKind::BadInput,
                r.devices.get(src).copied(),
                format!(
                    "rank {src}'s segment at {} in step {} did not fill its place",
                    d.offset, r.step
                ),
            ))
        } else if let (true, Some(ahead)) = (p.append, &mut r.ahead) {
            // What waited for these bytes follows them.
            follow(&mut r.work, ahead, &mut self.stats).map_err(|()| {
                Failure::new(
                    FailKind::BadInput,
                    r.devices.get(src).copied(),
                    format!("data that overlap rank {src}'s segment at {}", d.offset),
                )
            })
        } else {
            Ok(())
        };
        match res {
            Ok(()) => self.progress(now, key),
            Err(f) => self.fail(now, key, f, true),
        }
        Ok(())
    }

    /// The message of posted receive `id` will not be whole (the connection
    /// it came on closed part-way, or its request was given up): its
    /// collective fails here (`UNREACHABLE`, naming the sender) and the
    /// other members are told, rather than waiting for the deadline.
    pub fn cancel_post(&mut self, now: Instant, id: PostId, why: &str) {
        let Some(key) = self.posts.remove(&id) else {
            return;
        };
        let Some(r) = self.running.get(&key) else {
            return;
        };
        let Some(p) = r.posts.iter().find(|p| p.id == id) else {
            return;
        };
        let peer = r.plan.steps[r.step].recvs[p.recv].peer;
        let device = r.devices[peer];
        let f = Failure::new(
            FailKind::Unreachable,
            Some(device),
            format!("rank {peer} (device {device}) stopped part-way through a segment: {why}"),
        );
        self.fail(now, key, f, true);
    }

    fn message(&mut self, now: Instant, msg: Msg<'_>) -> Result<(), WireError> {
        let payload = msg.bytes();
        let (d, body) = Descriptor::decode(payload)?;
        let at = payload.len() - body.len();
        if d.kind == Kind::Call {
            return Err(WireError::Kind(d.kind as u8));
        }
        let key = (d.tag, d.members);
        if self.finished.contains_key(&key) {
            return Ok(()); // late: the collective ended here (e.g. it failed)
        }
        let Some(run) = self.running.get_mut(&key) else {
            self.keep_early(now, key, d, msg, at);
            return Ok(());
        };
        if let Err(f) = matches(run, &d) {
            self.fail(now, key, f, true);
            return Ok(());
        }
        if d.kind == Kind::Abort {
            let f = abort_failure(run, &d, body);
            self.fail(now, key, f, false);
            return Ok(());
        }
        let step = d.step as usize;
        if step > run.step || (step == run.step && !run.entered) {
            let len = body.len() as u64;
            let (kept, copied) = msg.keep(at);
            self.stats.stashed_bytes += len;
            if copied {
                self.stats.copied_bytes += len;
            }
            run.stash.push((d, kept));
            return Ok(());
        }
        let res = if step < run.step {
            Err(Failure::new(
                FailKind::BadInput,
                run.devices.get(d.src as usize).copied(),
                format!(
                    "rank {} sent step {step} after this rank left it (now at step {})",
                    d.src, run.step
                ),
            ))
        } else {
            let body = Body::Msg(msg, at);
            apply(run, &self.cfg, &mut self.out, &mut self.stats, &d, body)
        };
        match res {
            Ok(()) => self.progress(now, key),
            Err(f) => self.fail(now, key, f, true),
        }
        Ok(())
    }

    /// A message of `key` to `device` could not be delivered (its link is
    /// down or it answered an error): the collective fails.
    /// If the collective already succeeded here (a root whose part was to
    /// send), the refusing device is sent an `ABORT` instead, once: it would
    /// otherwise wait for the refused data until its deadline.
    pub fn handle_send_failed(&mut self, now: Instant, key: Key, device: u8, why: &str) {
        if self.running.contains_key(&key) {
            let f = Failure::new(
                FailKind::Unreachable,
                Some(device),
                format!("cannot deliver to device {device}: {why}"),
            );
            self.fail(now, key, f, true);
        } else if let Some((_, desc, rank)) = self.succeeded.remove(&key) {
            let reason = format!(
                "device {} could not deliver a message of the collective to device {device}: {why}",
                self.me
            );
            let message = desc.message(
                Kind::Abort,
                rank,
                0,
                FailKind::Unreachable.code(),
                reason.as_bytes(),
            );
            self.out.push_back(Out::Send {
                device,
                key,
                message,
                tail: Bytes::new(),
            });
        }
    }

    /// The link to `device` went down: every collective it is a member of fails.
    pub fn handle_peer_down(&mut self, now: Instant, device: u8, why: &str) {
        let keys: Vec<Key> = self
            .running
            .iter()
            .filter(|(_, r)| r.devices.contains(&device))
            .map(|(k, _)| *k)
            .collect();
        for key in keys {
            let rank = self.running[&key].devices.iter().position(|&x| x == device);
            let f = Failure::new(
                FailKind::Unreachable,
                Some(device),
                format!(
                    "device {device} (rank {}) went down during the collective: {why}",
                    rank.unwrap_or(0)
                ),
            );
            self.fail(now, key, f, true);
        }
    }

    /// Time passed: deadlines, and early data and finished tags to forget.
    pub fn handle_timeout(&mut self, now: Instant) {
        let late: Vec<Key> = self
            .running
            .iter()
            .filter(|(_, r)| r.deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for key in late {
            let r = &self.running[&key];
            let waiting: Vec<String> = r
                .plan
                .steps
                .get(r.step)
                .map(|s| {
                    s.recvs
                        .iter()
                        .zip(&r.got)
                        .filter(|(t, &g)| g < t.range.len())
                        .map(|(t, _)| format!("{} (device {})", t.peer, r.devices[t.peer]))
                        .collect()
                })
                .unwrap_or_default();
            let f = Failure::new(
                FailKind::Timeout,
                None,
                format!(
                    "{} tag {} did not finish within {} ms: at step {} of {}, waiting for rank(s) [{}]",
                    r.desc.op.name(),
                    r.desc.tag,
                    r.timeout.as_millis(),
                    r.step,
                    r.plan.steps.len(),
                    waiting.join(", ")
                ),
            );
            self.fail(now, key, f, true);
        }
        let ttl = self.cfg.early_ttl;
        let mut freed = 0;
        self.early.retain(|_, e| {
            let keep = e.first_at.is_some_and(|t| t + ttl > now);
            if !keep {
                freed += e.bytes;
            }
            keep
        });
        self.early_bytes -= freed;
        self.finished.retain(|_, &mut until| until > now);
        self.succeeded.retain(|_, (until, _, _)| *until > now);
        if self.spare.as_ref().is_some_and(|(_, until)| *until <= now) {
            self.spare = None;
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        let ttl = self.cfg.early_ttl;
        let deadlines = self.running.values().map(|r| r.deadline);
        let early = self
            .early
            .values()
            .filter_map(|e| e.first_at.map(|t| t + ttl));
        let finished = self.finished.values().copied();
        let spare = self.spare.as_ref().map(|(_, until)| *until);
        deadlines.chain(early).chain(finished).chain(spare).min()
    }

    fn keep_early(&mut self, now: Instant, key: Key, d: Descriptor, msg: Msg<'_>, at: usize) {
        let body = &msg.bytes()[at..];
        let e = self.early.entry(key).or_default();
        e.first_at.get_or_insert(now);
        if e.abort.is_some() {
            return;
        }
        if d.kind == Kind::Abort {
            let from = d.members.devices().get(d.src as usize).copied();
            e.abort = Some(Failure::new(
                FailKind::from_code(d.offset),
                from,
                format!(
                    "rank {} (device {}) failed the collective: {}",
                    d.src,
                    from.unwrap_or(0),
                    String::from_utf8_lossy(body)
                ),
            ));
            self.early_bytes -= e.bytes;
            e.msgs.clear();
            e.bytes = 0;
            return;
        }
        if self.early_bytes + body.len() > self.cfg.early_max_bytes {
            // No room: the sender is told, and the tag fails here when called.
            let f = Failure::new(
                FailKind::Busy,
                Some(self.me),
                format!(
                    "device {} holds {} bytes of data for collectives not called there yet (early_max_bytes)",
                    self.me, self.early_bytes
                ),
            );
            self.early_bytes -= e.bytes;
            e.msgs.clear();
            e.bytes = 0;
            if let Some(src) = d.members.devices().get(d.src as usize) {
                let me = d.members.rank_of(self.me).unwrap_or(0) as u8;
                let mut m = d;
                m.timeout_ms = 0;
                let msg = m.message(Kind::Abort, me, 0, f.kind.code(), f.message.as_bytes());
                self.out.push_back(Out::Send {
                    device: *src,
                    key,
                    message: msg,
                    tail: Bytes::new(),
                });
            }
            e.abort = Some(f);
            return;
        }
        let len = body.len();
        e.bytes += len;
        self.early_bytes += len;
        e.msgs.push((d, msg.keep(at).0));
    }

    /// Run `key` as far as its messages allow.
    fn progress(&mut self, now: Instant, key: Key) {
        loop {
            let Some(r) = self.running.get_mut(&key) else {
                return;
            };
            if r.step == r.plan.steps.len() {
                if r.ahead.is_some() && work_len(r) != r.plan.work_len {
                    // Not reached: the receives tile the buffer exactly.
                    let f = Failure::new(
                        FailKind::BadInput,
                        None,
                        format!(
                            "{} of {} bytes of the work buffer came",
                            work_len(r),
                            r.plan.work_len
                        ),
                    );
                    return self.fail(now, key, f, true);
                }
                let r = self.running.remove(&key).expect("running");
                self.finished.insert(key, now + self.cfg.early_ttl);
                self.succeeded
                    .insert(key, (now + self.cfg.early_ttl, r.desc, r.rank as u8));
                self.stats.completed += 1;
                let out = in_work(&r.plan, &r.plan.output);
                let out = match r.shared {
                    // Shared with segments maybe still being written: a slice.
                    Some(b) => b.slice(out),
                    None if out == (0..r.work.len()) => Bytes::from(r.work),
                    None => {
                        self.stats.copied_bytes += out.len() as u64;
                        Bytes::copy_from_slice(&r.work[out])
                    }
                };
                self.out.push_back(Out::Done {
                    call: r.call,
                    algorithm: r.desc.algorithm,
                    result: Ok(out),
                });
                return;
            }
            if !r.entered {
                if let Err(f) = enter(r, &self.cfg, &mut self.out, &mut self.stats) {
                    return self.fail(now, key, f, true);
                }
            }
            let step = &r.plan.steps[r.step];
            let received = step
                .recvs
                .iter()
                .zip(&r.got)
                .all(|(t, &g)| g == t.range.len());
            if !(received && r.sent.iter().all(|&s| s)) {
                return;
            }
            r.step += 1;
            r.entered = false;
        }
    }

    /// End `key` with `f` here; tell the other members (`tell`) so none waits.
    fn fail(&mut self, now: Instant, key: Key, f: Failure, tell: bool) {
        let Some(r) = self.running.remove(&key) else {
            return;
        };
        for p in &r.posts {
            self.posts.remove(&p.id);
        }
        if tell {
            self.abort_others(&r, &f);
        }
        self.finished.insert(key, now + self.cfg.early_ttl);
        self.stats.failed += 1;
        self.out.push_back(Out::Done {
            call: r.call,
            algorithm: r.desc.algorithm,
            result: Err(f),
        });
    }

    fn abort_others(&mut self, r: &Running, f: &Failure) {
        let key = (r.desc.tag, r.desc.members);
        for (i, &device) in r.devices.iter().enumerate() {
            if i != r.rank {
                let message = r.desc.message(
                    Kind::Abort,
                    r.rank as u8,
                    0,
                    f.kind.code(),
                    f.message.as_bytes(),
                );
                self.out.push_back(Out::Send {
                    device,
                    key,
                    message,
                    tail: Bytes::new(),
                });
            }
        }
    }
}

/// Whether a shared input that fills the work buffer can be read in place
/// ([`InputReads`]), and where: every receive is either the first write of
/// all its bytes (no earlier receive, nor another of its step, touches
/// them) or rewrites bytes earlier steps wrote; every send reads either
/// bytes no earlier step wrote (the input's) or bytes earlier steps wrote;
/// and the receives together write the whole buffer, so that none of its
/// zeroes is ever read or answered. `None`: the input is copied in.
fn input_reads(p: &Plan, input: &Bytes) -> Option<InputReads> {
    use std::ops::Range;
    if p.sends_from_input || p.work_base != 0 || p.input != (0..p.work_len) {
        return None;
    }
    if input.len() != p.work_len {
        return None;
    }
    let overlap = |a: &Range<usize>, b: &Range<usize>| a.start < b.end && b.start < a.end;
    // Whether `r` lies within the union of `ws`.
    let covered = |r: &Range<usize>, ws: &[Range<usize>]| {
        let mut at = r.start;
        while at < r.end {
            match ws
                .iter()
                .filter(|w| w.start <= at && at < w.end)
                .map(|w| w.end)
                .max()
            {
                Some(end) => at = end,
                None => return false,
            }
        }
        true
    };
    let mut written: Vec<Range<usize>> = Vec::new();
    let (mut fresh, mut sends) = (Vec::new(), Vec::new());
    for step in &p.steps {
        let mut f = Vec::with_capacity(step.recvs.len());
        for (i, t) in step.recvs.iter().enumerate() {
            let alone = step
                .recvs
                .iter()
                .enumerate()
                .all(|(j, q)| j == i || !overlap(&q.range, &t.range));
            if alone && !written.iter().any(|w| overlap(w, &t.range)) {
                f.push(true);
            } else if covered(&t.range, &written) {
                f.push(false);
            } else {
                return None;
            }
        }
        let mut s = Vec::with_capacity(step.sends.len());
        for t in &step.sends {
            if !written.iter().any(|w| overlap(w, &t.range)) {
                s.push(true);
            } else if covered(&t.range, &written) {
                s.push(false);
            } else {
                return None;
            }
        }
        written.extend(step.recvs.iter().map(|t| t.range.clone()));
        fresh.push(f);
        sends.push(s);
    }
    covered(&(0..p.work_len), &written).then(|| InputReads {
        input: input.clone(),
        fresh,
        sends,
    })
}

/// Whether the work buffer may be filled in order instead of zeroed first:
/// one step, no send reading the buffer, and the receives (copied, not
/// reduced) and the input tile it (a gather's root, a scatter's non-root,
/// a one-to-all broadcast's non-root). The receives are exact (a step ends
/// when each has its bytes, none more), and [`fill`] refuses overlaps, so
/// every byte of the buffer comes exactly once.
fn fills_in_order(p: &Plan) -> bool {
    let [step] = &p.steps[..] else {
        return false;
    };
    if p.combine != Combine::Copy || p.sends_from_input || !step.sends.is_empty() {
        return false;
    }
    let mut parts: Vec<_> = step.recvs.iter().map(|t| in_work(p, &t.range)).collect();
    if !p.input.is_empty() {
        parts.push(in_work(p, &p.input));
    }
    parts.sort_by_key(|r| r.start);
    let mut end = 0;
    for r in parts {
        if r.start != end {
            return false;
        }
        end = r.end;
    }
    end == p.work_len && end > 0
}

/// Bytes for `at..` of a work buffer filled in order: appended if they
/// are next, else kept in `ahead` until the bytes before them came
/// (moved if the message is owned); then whatever is next in `ahead`
/// follows. `Err`: they overlap bytes that came already.
fn fill(
    work: &mut Vec<u8>,
    ahead: &mut BTreeMap<usize, Kept>,
    stats: &mut Stats,
    at: usize,
    msg: Body<'_>,
) -> Result<(), ()> {
    let len = msg.bytes().len();
    if len == 0 {
        return Ok(());
    }
    if at < work.len() || ahead.contains_key(&at) {
        return Err(());
    }
    if at > work.len() {
        let (kept, copied) = msg.keep();
        if copied {
            stats.copied_bytes += len as u64;
        }
        ahead.insert(at, kept);
        return Ok(());
    }
    stats.copied_bytes += len as u64;
    work.extend_from_slice(msg.bytes());
    follow(work, ahead, stats)
}

/// The data waiting in `ahead` that are next in a work buffer filled in
/// order, appended. `Err`: some overlap bytes that came already.
fn follow(
    work: &mut Vec<u8>,
    ahead: &mut BTreeMap<usize, Kept>,
    stats: &mut Stats,
) -> Result<(), ()> {
    while let Some(e) = ahead.first_entry() {
        if *e.key() > work.len() {
            break;
        }
        if *e.key() < work.len() {
            return Err(());
        }
        let k = e.remove();
        stats.copied_bytes += k.body().len() as u64;
        work.extend_from_slice(k.body());
    }
    Ok(())
}

fn overlap(a: &std::ops::Range<usize>, b: &std::ops::Range<usize>) -> bool {
    a.start < b.end && b.start < a.end
}

/// Where `range` (of the collective's layout) sits in the work buffer. The
/// plan's ranges lie within the buffer (`plan.rs` tests), and a message's
/// range is checked against the plan's before it is used.
fn in_work(p: &Plan, range: &std::ops::Range<usize>) -> std::ops::Range<usize> {
    if range.is_empty() {
        return 0..0;
    }
    range.start - p.work_base..range.end - p.work_base
}

/// Whether message `m` belongs to the same collective as this rank's call.
fn matches(r: &Running, m: &Descriptor) -> Result<(), Failure> {
    let d = &r.desc;
    let n = r.devices.len();
    if m.src as usize >= n || m.src as usize == r.rank {
        return Err(Failure::new(
            FailKind::BadInput,
            None,
            format!("message from rank {} in a communicator of {n}", m.src),
        ));
    }
    if m.kind == Kind::Abort {
        return Ok(());
    }
    let same = (m.op, m.dtype, m.redop, m.root, m.count, m.algorithm)
        == (d.op, d.dtype, d.redop, d.root, d.count, d.algorithm);
    if same {
        return Ok(());
    }
    let desc = |x: &Descriptor| {
        format!(
            "{} of {} {} (root {}, {}{})",
            x.op.name(),
            x.count,
            x.dtype.name(),
            x.root,
            x.algorithm.name(),
            match x.redop {
                crate::wire::RedOp::Sum => ", sum",
                crate::wire::RedOp::Max => ", max",
                crate::wire::RedOp::None => "",
            }
        )
    };
    Err(Failure::new(
        FailKind::BadInput,
        r.devices.get(m.src as usize).copied(),
        format!(
            "mismatched calls for tag {}: rank {} called {}, rank {} called {}",
            d.tag,
            m.src,
            desc(m),
            r.rank,
            desc(d)
        ),
    ))
}

fn abort_failure(r: &Running, d: &Descriptor, body: &[u8]) -> Failure {
    let from = r.devices[d.src as usize];
    Failure::new(
        FailKind::from_code(d.offset),
        Some(from),
        format!(
            "rank {} (device {from}) failed the collective: {}",
            d.src,
            String::from_utf8_lossy(body)
        ),
    )
}

/// Enter the current step: ask for large receives, send what may go now,
/// take the messages that came early.
fn enter(
    r: &mut Running,
    cfg: &Config,
    out: &mut VecDeque<Out>,
    stats: &mut Stats,
) -> Result<(), Failure> {
    r.entered = true;
    let step = &r.plan.steps[r.step];
    r.got = vec![0; step.recvs.len()];
    r.sent = vec![false; step.sends.len()];
    r.held = step
        .sends
        .iter()
        .enumerate()
        .map(|(i, t)| {
            if r.step == 0 && r.prebuilt.get(i).is_some_and(Option::is_some) {
                return None; // its messages are built already
            }
            if r.reads.as_ref().is_some_and(|x| x.send(r.step, i)) {
                return None; // it goes from the input, which nothing writes
            }
            let waits = t.range.len() > cfg.eager_max_bytes;
            let overwritten = step
                .recvs
                .iter()
                .any(|q| q.range.start < t.range.end && t.range.start < q.range.end);
            (waits && overwritten).then(|| {
                stats.copied_bytes += t.range.len() as u64;
                work(r)[in_work(&r.plan, &t.range)].to_vec()
            })
        })
        .collect();
    let key = (r.desc.tag, r.desc.members);
    // Rendezvous one step ahead: entering step s says `Ready` for step s+1
    // too (step 0 for steps 0 and 1), so a sender that reaches step s+1
    // sends at once instead of waiting a round trip for this rank to get
    // there. Data that comes before this rank enters its step is kept
    // (`stash`): at most one step's receives, of a collective that runs.
    let first = if r.step == 0 { 0 } else { r.step + 1 };
    for s in first..=r.step + 1 {
        let Some(ahead) = r.plan.steps.get(s) else {
            break;
        };
        for t in &ahead.recvs {
            if t.range.len() > cfg.eager_max_bytes {
                stats.rendezvous += 1;
                out.push_back(Out::Send {
                    device: r.devices[t.peer],
                    key,
                    message: r.desc.message(Kind::Ready, r.rank as u8, s as u32, 0, &[]),
                    tail: Bytes::new(),
                });
            }
        }
    }
    try_sends(r, cfg, out, stats);
    let now_step = r.step as u32;
    let (mine, later): (Vec<_>, Vec<_>) = std::mem::take(&mut r.stash)
        .into_iter()
        .partition(|(d, _)| d.step == now_step);
    r.stash = later;
    for (d, kept) in mine {
        apply(r, cfg, out, stats, &d, Body::Kept(kept))?;
    }
    Ok(())
}

/// Send the current step's transfers that may go: eager ones, and
/// rendezvous ones whose receiver is ready.
fn try_sends(r: &mut Running, cfg: &Config, out: &mut VecDeque<Out>, stats: &mut Stats) {
    let step = &r.plan.steps[r.step];
    let key = (r.desc.tag, r.desc.members);
    for (i, t) in step.sends.iter().enumerate() {
        if r.sent[i] {
            continue;
        }
        let len = t.range.len();
        if len > cfg.eager_max_bytes && !r.ready.contains(&(t.peer, r.step as u32)) {
            continue;
        }
        r.sent[i] = true;
        let seg = cfg.segment_bytes.max(4);
        let from_input = r.reads.as_ref().filter(|x| x.send(r.step, i));
        let messages = match r.prebuilt.get_mut(i).and_then(Option::take) {
            Some(m) if r.step == 0 => m,
            _ if from_input.is_some() => {
                let input = &from_input.expect("checked").input;
                let body = input.slice(t.range.clone());
                stats.shared_bytes += body.len() as u64;
                shared_segments(&r.desc, r.rank, r.step, t.range.start, &body, seg)
            }
            _ => match r.held[i].take() {
                Some(h) => {
                    stats.copied_bytes += h.len() as u64;
                    segments(&r.desc, r.rank, r.step, t.range.start, &h, seg)
                }
                None if r.step >= r.final_from => {
                    // No step writes the work buffer any more: share it.
                    let frozen = r
                        .shared
                        .get_or_insert_with(|| Bytes::from(std::mem::take(&mut r.work)));
                    let body = frozen.slice(in_work(&r.plan, &t.range));
                    stats.shared_bytes += body.len() as u64;
                    shared_segments(&r.desc, r.rank, r.step, t.range.start, &body, seg)
                }
                None => {
                    let bytes = &work(r)[in_work(&r.plan, &t.range)];
                    stats.copied_bytes += bytes.len() as u64;
                    segments(&r.desc, r.rank, r.step, t.range.start, bytes, seg)
                }
            },
        };
        stats.sent_bytes += t.range.len() as u64;
        for (message, tail) in messages {
            stats.sent_messages += 1;
            out.push_back(Out::Send {
                device: r.devices[t.peer],
                key,
                message,
                tail,
            });
        }
    }
}

/// The `Data` messages of `body` (bytes `start..` of the collective's
/// layout), in segments of at most `seg` bytes, each copied into its message.
fn segments(
    d: &Descriptor,
    rank: usize,
    step: usize,
    start: usize,
    body: &[u8],
    seg: usize,
) -> Vec<Segment> {
    body.chunks(seg)
        .enumerate()
        .map(|(k, bytes)| {
            let at = start + k * seg;
            let m = d.message(Kind::Data, rank as u8, step as u32, at as u32, bytes);
            (m, Bytes::new())
        })
        .collect()
}

/// [`segments`] of a shared `body`: each message is its descriptor and a
/// slice of `body` (its tail), nothing copied.
fn shared_segments(
    d: &Descriptor,
    rank: usize,
    step: usize,
    start: usize,
    body: &Bytes,
    seg: usize,
) -> Vec<Segment> {
    (0..body.len())
        .step_by(seg)
        .map(|k| {
            let at = start + k;
            let m = d.message(Kind::Data, rank as u8, step as u32, at as u32, &[]);
            (m, body.slice(k..(k + seg).min(body.len())))
        })
        .collect()
}

/// The work buffer's bytes, wherever they are.
fn work(r: &Running) -> &[u8] {
    match &r.shared {
        Some(b) => b,
        None => &r.work,
    }
}

fn work_len(r: &Running) -> usize {
    work(r).len()
}

/// The work buffer, to write: a shared one is taken back — moved if
/// nothing else holds it any more, else copied (counted).
fn work_mut<'a>(
    work: &'a mut Vec<u8>,
    shared: &mut Option<Bytes>,
    stats: &mut Stats,
) -> &'a mut Vec<u8> {
    if let Some(b) = shared.take() {
        *work = match b.try_into_mut() {
            Ok(m) => m.into(),
            Err(b) => {
                stats.copied_bytes += b.len() as u64;
                b.to_vec()
            }
        };
    }
    work
}

/// A message for the current (entered) step.
fn apply(
    r: &mut Running,
    cfg: &Config,
    out: &mut VecDeque<Out>,
    stats: &mut Stats,
    d: &Descriptor,
    msg: Body<'_>,
) -> Result<(), Failure> {
    let src = d.src as usize;
    let body = msg.bytes();
    match d.kind {
        Kind::Ready => {
            r.ready.insert((src, d.step));
            try_sends(r, cfg, out, stats);
            Ok(())
        }
        Kind::Data => {
            let at = d.offset as usize;
            let end = at + body.len();
            let step = &r.plan.steps[r.step];
            let hit = step
                .recvs
                .iter()
                .position(|t| t.peer == src && t.range.start <= at && end <= t.range.end);
            let Some(i) = hit else {
                return Err(Failure::new(
                    FailKind::BadInput,
                    r.devices.get(src).copied(),
                    format!(
                        "rank {src} sent bytes {at}..{end} in step {}, which this rank does not expect from it",
                        r.step
                    ),
                ));
            };
            let combine_now = if r.step >= r.plan.copy_from {
                Combine::Copy
            } else {
                r.plan.combine
            };
            let into = in_work(&r.plan, &(at..end));
            if r.posts.iter().any(|p| overlap(&p.range, &into)) {
                return Err(Failure::new(
                    FailKind::BadInput,
                    r.devices.get(src).copied(),
                    format!(
                        "rank {src} sent bytes {at}..{end} in step {}, which overlap a segment being received",
                        r.step
                    ),
                ));
            }
            r.got[i] += body.len();
            if r.got[i] > step.recvs[i].range.len() {
                return Err(Failure::new(
                    FailKind::BadInput,
                    r.devices.get(src).copied(),
                    format!("rank {src} sent more than expected in step {}", r.step),
                ));
            }
            if let Some(ahead) = &mut r.ahead {
                let work = work_mut(&mut r.work, &mut r.shared, stats);
                return fill(work, ahead, stats, into.start, msg).map_err(|()| {
                    Failure::new(
                        FailKind::BadInput,
                        r.devices.get(src).copied(),
                        format!(
                            "rank {src} sent bytes {at}..{end} in step {}, which overlap bytes this rank has",
                            r.step
                        ),
                    )
                });
            }
            let work = work_mut(&mut r.work, &mut r.shared, stats);
            stats.copied_bytes += body.len() as u64;
            let input = r.reads.as_ref().filter(|x| x.fresh(r.step, i));
            let (dtype, redop) = (r.desc.dtype, r.desc.redop);
            match (combine_now, input) {
                (Combine::Copy, _) => work[into].copy_from_slice(body),
                // The first write of these bytes: the input is still where it came.
                (Combine::Reduce, Some(x)) => {
                    let mine = &x.input[into.clone()];
                    combine_into(dtype, redop, &mut work[into], mine, body);
                }
                (Combine::Reduce, None) => combine(dtype, redop, &mut work[into], body),
            }
            Ok(())
        }
        Kind::Abort | Kind::Call => Ok(()),
    }
}
