//! The driver's part of collectives (`docs/collectives.md`): requests for
//! function 251 leave the engine like control requests; a client's call
//! goes to the sans-IO [`Collectives`] machine and is answered when its
//! collective ends; a message from another rank's node is handed to the
//! machine and answered only if it is refused (`BAD_INPUT` if it does not
//! decode) or its sender asked for an answer (byte 7 bit 0, on every
//! `ack_window`-th message of a link). The machine's messages travel on the
//! links to the peers as ordinary requests; a refused message or a link that
//! goes down fails the collectives it concerns.

use super::{Driver, Io, LinkState};
use bytes::Bytes;
use offrac_collective::{
    take_message_flags, Algorithm, CallId, Collectives, FailKind, Key, Kind, Out, PostId,
    DESCRIPTOR_LEN, MSG_ANSWER,
};
use offrac_core::{nanos, BufferError, ConnId, Instant, Job, TenantKey};
use offrac_proto::{RequestHeader, ResponseHeader, Status, DEVICE_SELF, FN_COLLECTIVE};
use rustc_hash::FxHashMap;

/// The calls of local clients waiting for their collective.
#[derive(Default)]
pub(super) struct Calls {
    waiting: FxHashMap<CallId, Waiting>,
    /// Chains waiting at a collective hop (`driver/hop.rs`).
    pub(super) hops: FxHashMap<CallId, Job>,
    /// Data segments being read straight into their place (posted
    /// receives), by the connection and request id of their message.
    posts: FxHashMap<(ConnId, u64), PostId>,
    pub(super) next: CallId,
}

struct Waiting {
    conn: ConnId,
    req: RequestHeader,
    first_byte: Instant,
    /// When the call's last byte arrived: its reassembly ends, the
    /// collective's execution starts.
    complete: Instant,
    /// Keep the output under this name (for this tenant) instead of
    /// answering it (`docs/collectives.md`, "Named buffers").
    keep: Option<(TenantKey, u32)>,
}

/// Byte 7 of a call's descriptor: take the input from the named buffer in
/// `param` bits 0-31.
pub const CALL_FROM_BUFFER: u8 = 1;
/// Byte 7 of a call's descriptor: keep the output in the named buffer in
/// `param` bits 32-63 and answer with no payload.
pub const CALL_KEEP: u8 = 2;

pub(super) fn machine(device: u8, cfg: offrac_collective::Config) -> Collectives {
    Collectives::new(device, cfg)
}

pub(super) fn status_of(kind: FailKind) -> Status {
    match kind {
        FailKind::BadInput => Status::BadInput,
        FailKind::Unreachable => Status::Unreachable,
        FailKind::Timeout => Status::Timeout,
        FailKind::TooLarge => Status::TooLarge,
        FailKind::Busy => Status::Busy,
    }
}

impl Driver {
    /// Collectives running on this node, and the machine's counters.
    pub fn collective_stats(&self) -> (usize, offrac_collective::Stats) {
        (self.collectives.running(), self.collectives.stats())
    }

    /// The posted receive the payload `conn` is reading goes to: its open
    /// one, or a new one if the payload is a collective's data segment the
    /// machine takes straight into its work buffer from here on
    /// ([`Collectives::post`]). A post whose collective ended meanwhile:
    /// the rest of its message is skipped (the engine drops the request).
    pub(super) fn collective_post(&mut self, now: Instant, conn: ConnId) -> Option<PostId> {
        let me = self.engine.config().device_id;
        let current = self.engine.payload_in(conn).map(|(h, _, _)| h.request_id);
        if self
            .calls
            .posts
            .keys()
            .any(|&(c, id)| c == conn && Some(id) != current)
        {
            // Their payload was given up (reassembly timeout, shutdown).
            self.cancel_posts(now, conn, current);
        }
        let (h, head, diverted) = self.engine.payload_in(conn)?;
        let hop = h.current_hop();
        let here = hop.device == DEVICE_SELF || hop.device == me;
        if hop.function != FN_COLLECTIVE || h.hop_count != 1 || !here {
            return None;
        }
        let at = (conn, h.request_id);
        if let Some(&post) = self.calls.posts.get(&at) {
            if self.collectives.posted_room(post).is_some() {
                return Some(post);
            }
            // Its collective ended: the rest has nowhere to go.
            self.calls.posts.remove(&at);
            self.engine.discard_payload(now, conn);
            return None;
        }
        let body_len = (h.payload_len as usize).checked_sub(DESCRIPTOR_LEN)?;
        if diverted > 0 || head.first() != Some(&(Kind::Data as u8)) {
            return None;
        }
        let post = self.collectives.post(head, body_len)?;
        self.calls.posts.insert(at, post);
        Some(post)
    }

    /// The posted receive the bytes `conn` reads now go to, if any.
    pub(super) fn open_post(&self, conn: ConnId) -> Option<PostId> {
        let (h, _, _) = self.engine.payload_in(conn)?;
        self.calls.posts.get(&(conn, h.request_id)).copied()
    }

    /// The posted receives of `conn` (but the one of request `keep`) will
    /// not be whole: their collectives fail here and tell the other ranks.
    pub(super) fn cancel_posts(&mut self, now: Instant, conn: ConnId, keep: Option<u64>) {
        let gone: Vec<_> = self
            .calls
            .posts
            .iter()
            .filter(|(&(c, id), _)| c == conn && Some(id) != keep)
            .map(|(&k, &post)| (k, post))
            .collect();
        for (k, post) in gone {
            self.calls.posts.remove(&k);
            let why =
                "its message stopped part-way (the connection closed or the request was given up)";
            self.collectives.cancel_post(now, post, why);
        }
        self.collective_outs(now);
    }

    /// A complete request for function 251 (the engine has let go of it).
    pub(super) fn collective_request(&mut self, now: Instant, job: Job) {
        if !self.conns.contains_key(&job.conn) {
            return;
        }
        // A segment read straight into place: its payload is what came
        // before (descriptor, first bytes), the rest is in the work buffer.
        let post = match job.diverted {
            0 => None,
            _ => match self.calls.posts.remove(&(job.conn, job.header.request_id)) {
                Some(post) => Some(post),
                None => return, // cancelled: its collective failed here already
            },
        };
        // Flat already (the engine joins a kept buffer before handing it on).
        let mut payload = job.payload.into_flat();
        if payload.first() == Some(&(Kind::Call as u8)) {
            let mut keep = None;
            // The input from a named buffer: read where it is kept.
            let mut from_buffer = None;
            if payload.len() >= DESCRIPTOR_LEN && payload[7] != 0 {
                let flags = payload[7];
                let param = job.header.current_hop().param;
                let tenant = job.tenant;
                let refusal = if flags & !(CALL_FROM_BUFFER | CALL_KEEP) != 0 {
                    Some((
                        Status::BadInput,
                        0,
                        format!("byte 7 of the collective descriptor is {flags:#x}: only bits 0 (input from a named buffer) and 1 (keep the output) are defined"),
                    ))
                } else if flags & CALL_FROM_BUFFER != 0 && payload.len() > DESCRIPTOR_LEN {
                    Some((
                        Status::BadInput,
                        0,
                        "a call whose input comes from a named buffer carries no data after its descriptor".to_string(),
                    ))
                } else if flags & CALL_FROM_BUFFER != 0 {
                    match self.engine.buffers().get(tenant, param as u32) {
                        Ok(_) => {
                            from_buffer = Some((tenant, param as u32));
                            None
                        }
                        Err(e) => Some((e.status(), e.detail(), e.to_string())),
                    }
                } else {
                    None
                };
                if let Some((status, detail, msg)) = refusal {
                    // The other ranks would wait for this one in vain: tell them now.
                    let kind = match status {
                        Status::TooLarge => FailKind::TooLarge,
                        _ => FailKind::BadInput,
                    };
                    // The descriptor alone, its byte 7 (the driver's flags) cleared.
                    let mut desc = payload[..DESCRIPTOR_LEN].to_vec();
                    desc[7] = 0;
                    self.collectives.abort_refused_call(now, &desc, kind, &msg);
                    self.collective_outs(now);
                    let me = self.engine.config().device_id;
                    let mut header =
                        ResponseHeader::answer(&job.header, status, me, msg.len() as u32);
                    header.detail = detail;
                    self.out.push_back(Io::Send {
                        conn: job.conn,
                        header,
                        payload: msg.into_bytes(),
                    });
                    return;
                }
                if flags & CALL_KEEP != 0 {
                    keep = Some((tenant, (param >> 32) as u32));
                }
                payload[7] = 0;
            }
            if let Some(c) = self.conns.get_mut(&job.conn) {
                c.answering += 1;
            }
            let call = self.calls.next;
            self.calls.next += 1;
            self.calls.waiting.insert(
                call,
                Waiting {
                    conn: job.conn,
                    req: job.header,
                    first_byte: job.first_byte_at,
                    complete: job.complete_at,
                    keep,
                },
            );
            let link_of = &self.link_of;
            let reachable = |d: u8| link_of[d as usize].is_some();
            // A named input is shared, not copied: segments sent straight
            // from it are slices of it.
            match from_buffer.and_then(|(t, name)| self.engine.buffers().get_shared(t, name).ok()) {
                Some(input) => self
                    .collectives
                    .handle_call_shared(now, call, &payload, input, reachable),
                None => self
                    .collectives
                    .handle_call_with_input(now, call, &payload, None, reachable),
            }
        } else {
            // A message from another rank's node: answered only when refused,
            // or when its sender asked (byte 7 bit 0, `MSG_ANSWER`: every
            // `ack_window`-th message of a link, so that the sender can
            // forget what it sent before; `docs/protocol.md`, "Collectives").
            let (status, msg, answer) = match take_message_flags(&mut payload) {
                Err(e) => (Status::BadInput, e.to_string(), true),
                Ok(flags) => {
                    let res = match post {
                        Some(post) => self.collectives.handle_message_posted(now, &payload, post),
                        // Handed over: a message that comes before its step is kept as it is.
                        None => self.collectives.handle_message_owned(now, payload),
                    };
                    match res {
                        Ok(()) => (Status::Ok, String::new(), flags & MSG_ANSWER != 0),
                        Err(e) => (Status::BadInput, e.to_string(), true),
                    }
                }
            };
            // What the message set going first (the next step's data to the
            // peers, a finished call's answer to its client), an answer to
            // the sender last: nobody waits for it, and writing it wakes the
            // sender's node, which on shared cores may take the core before
            // the waiting rank's answer is out.
            self.collective_outs(now);
            if answer {
                let me = self.engine.config().device_id;
                let header = ResponseHeader::answer(&job.header, status, me, msg.len() as u32);
                self.out.push_back(Io::Send {
                    conn: job.conn,
                    header,
                    payload: msg.into_bytes(),
                });
            }
            return;
        }
        self.collective_outs(now);
    }

    /// The engine refused a request for function 251 before this driver saw
    /// it (beyond `max_payload`, no reassembly buffer, over a quota, not
    /// complete in time, its caller gone) and answered it; `head` is its
    /// first 64 bytes. If it is a client's call, the other members of its
    /// collective would wait for this rank in vain: tell them now, as for a
    /// call this driver refuses.
    pub(super) fn refused_collective(
        &mut self,
        now: Instant,
        head: &[u8; DESCRIPTOR_LEN],
        status: Status,
        message: &str,
    ) {
        if head[0] != Kind::Call as u8 {
            return; // a node's message: its sender learns of the refusal
        }
        let kind = match status {
            Status::TooLarge => FailKind::TooLarge,
            Status::Busy | Status::QuotaExceeded => FailKind::Busy,
            Status::Timeout => FailKind::Timeout,
            Status::Unreachable => FailKind::Unreachable,
            _ => FailKind::BadInput,
        };
        // The descriptor alone, its byte 7 (the driver's flags) cleared.
        let mut desc = *head;
        desc[7] = 0;
        let message = format!("its node refused the call: {message}");
        self.collectives
            .abort_refused_call(now, &desc, kind, &message);
        self.collective_outs(now);
    }

    /// Carry out what the collectives machine asks.
    pub(super) fn collective_outs(&mut self, now: Instant) {
        while let Some(o) = self.collectives.poll() {
            match o {
                Out::Send {
                    device,
                    key,
                    message,
                    tail,
                } => self.send_collective(now, device, key, message, tail),
                Out::Done {
                    call,
                    algorithm,
                    result,
                } => self.answer_call(now, call, algorithm, result),
            }
        }
    }

    fn answer_call(
        &mut self,
        now: Instant,
        call: CallId,
        algorithm: Algorithm,
        result: Result<Bytes, offrac_collective::Failure>,
    ) {
        if let Some(job) = self.calls.hops.remove(&call) {
            return self.collective_hop_done(now, job, result.map(Vec::from));
        }
        let Some(Waiting {
            conn,
            req,
            first_byte,
            complete,
            keep,
        }) = self.calls.waiting.remove(&call)
        else {
            return;
        };
        // The output kept on the node: the answer carries none of it.
        let result = match (result, keep) {
            (Ok(out), Some((tenant, name))) => {
                let budget = self.engine.buffer_budget_of(tenant);
                match self.engine.buffers_mut().replace(tenant, name, out, budget) {
                    Ok(replaced) => {
                        // The memory of the output it replaced serves the
                        // next work buffer (no fresh pages to fault in).
                        if let Some(old) = replaced {
                            self.collectives.recycle(now, old);
                        }
                        Ok(Bytes::new())
                    }
                    Err(e) => Err(e),
                }
                .map_err(Failed::Keep)
            }
            (r, _) => r.map_err(Failed::Call),
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return; // the caller is gone
        };
        c.answering -= 1;
        let me = self.engine.config().device_id;
        let (header, payload) = match result {
            Ok(out) => {
                let mut h = ResponseHeader::answer(&req, Status::Ok, me, out.len() as u32);
                h.detail = algorithm as u64;
                h.exec_ns = nanos(now.saturating_since(complete));
                // Moved if nothing else holds it, else copied (an output
                // shared with segments not written yet).
                (h, Vec::from(out))
            }
            Err(Failed::Call(f)) => {
                let mut h =
                    ResponseHeader::answer(&req, status_of(f.kind), me, f.message.len() as u32);
                h.detail = f.device.map_or(0, u64::from);
                (h, f.message.into_bytes())
            }
            Err(Failed::Keep(e)) => {
                let msg = format!("the collective finished but its output was not kept: {e}");
                let mut h = ResponseHeader::answer(&req, e.status(), me, msg.len() as u32);
                h.detail = e.detail();
                (h, msg.into_bytes())
            }
        };
        let mut header = header;
        header.reassembly_ns = nanos(complete.saturating_since(first_byte));
        self.out.push_back(Io::Send {
            conn,
            header,
            payload,
        });
        self.maybe_shut(now, conn);
    }

    /// A message to another rank's node, on the link to it.
    fn send_collective(
        &mut self,
        now: Instant,
        device: u8,
        key: Key,
        message: Vec<u8>,
        tail: Bytes,
    ) {
        let Some(link) = self.link_of[device as usize] else {
            let why = "it is not in this node's device table";
            self.collectives.handle_send_failed(now, key, device, why);
            return;
        };
        let l = &mut self.links[link];
        if matches!(l.state, LinkState::Down { .. } | LinkState::Retired) {
            self.collectives
                .handle_send_failed(now, key, device, "the link to it is down");
            return;
        }
        let id = l.next_id;
        l.next_id += 1;
        // Ask for an answer on every `ack_window`-th message: the peer's
        // `OK` to it says that it handled every earlier message of the link
        // too (a refusal is written before it), so their records go.
        let mut message = message;
        l.unasked += 1;
        if l.unasked >= self.collectives.config().ack_window.max(1) {
            l.unasked = 0;
            if let Some(b) = message.get_mut(7) {
                *b |= MSG_ANSWER;
            }
        }
        let len = message.len() + tail.len();
        let header = RequestHeader::single(id, FN_COLLECTIVE, 0, len as u32);
        l.collective.insert(id, key);
        if l.state == LinkState::Up {
            self.out.push_back(Io::SendLink {
                link,
                header,
                head: bytes::Bytes::new(),
                payload: message,
                tail,
            });
        } else {
            l.waiting
                .push_back((header, bytes::Bytes::new(), message, tail));
        }
    }
}

/// Why a call's answer is not its output.
enum Failed {
    /// The collective failed.
    Call(offrac_collective::Failure),
    /// It succeeded, but its output could not be kept.
    Keep(BufferError),
}
