//! Links to other nodes, for chain hops that run on another device: one
//! persistent connection per peer (the same protocol, this node as the
//! client), opened at start and reopened with back-off. A forwarded hop
//! travels under a link-local request id that maps back to the caller's
//! connection and request id; the answer — result or error — comes back on
//! the link and is relayed to the caller with its id restored. Every
//! forwarded request ends in exactly one answer: the relayed one, or
//! `UNREACHABLE` when the link is down or breaks first, `TIMEOUT` when no
//! answer comes within the forward timeout, `BUSY` when the link holds too
//! much, `SHUTTING_DOWN` when the grace period ends before it was sent.
//! A late answer to a request already answered is dropped.

use super::{Driver, Io};
use offrac_core::{nanos, ConnId, Instant, Job};
use offrac_proto::{
    HopTime, RequestHeader, ResponseHeader, Status, HEADER_LEN, HOP_TIMES_LEN, MAX_HOPS,
};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

/// The driver's name for a link to a peer (an index into the device table).
pub type LinkId = usize;

/// The link-local request id of a link's hello (forwarded hops count from 1).
pub const LINK_HELLO_ID: u64 = 0;

/// One entry of the device table: a peer and where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerConfig {
    pub device: u8,
    /// `host:port` of the peer's request listener.
    pub addr: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    Connecting,
    /// Open; the node's hello was sent and its answer is awaited.
    Greeting,
    Up,
    /// Down until `retry_at`, when it is reopened.
    Down {
        retry_at: Instant,
    },
    /// Its peer left the device table: closed for good.
    Retired,
}

/// A request forwarded on a link and not answered yet.
#[derive(Debug)]
struct Forwarded {
    conn: ConnId,
    /// The caller's request, at the forwarded hop.
    origin: RequestHeader,
    /// This node's share of the answer's timings.
    reassembly_ns: u64,
    queue_ns: u64,
    exec_ns: u64,
    bytes: usize,
    deadline: Instant,
    /// Hops this node ran before forwarding (for per-hop timings).
    times: [HopTime; MAX_HOPS],
}

#[derive(Debug)]
pub(super) struct Link {
    device: u8,
    addr: String,
    pub(super) state: LinkState,
    backoff: Duration,
    forwarded: FxHashMap<u64, Forwarded>,
    /// Collective messages sent whose peer has not said yet that it handled
    /// them (`driver/collective.rs`): by link-local id, so that a refusal
    /// fails its collective; fewer than `ack_window` past the last answer.
    pub(super) collective: BTreeMap<u64, offrac_collective::Key>,
    /// Collective messages sent since the last one that asked for an answer.
    pub(super) unasked: usize,
    /// Forwarded while connecting: written when the link comes up.
    pub(super) waiting: VecDeque<(RequestHeader, bytes::Bytes, Vec<u8>, bytes::Bytes)>,
    /// Payload bytes of the forwarded requests not answered yet.
    bytes: usize,
    /// Response bytes not yet parsed.
    rx: Vec<u8>,
    pub(super) next_id: u64,
}

/// Counters of the links, for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub forwarded: u64,
    pub relayed: u64,
    /// Answered by this node because the link could not deliver them.
    pub failed: u64,
    /// Answers that came after their request had been answered (timed out).
    pub late: u64,
    /// Receipts: forwarded requests whose answer the peer (or a node after
    /// it) wrote straight to the caller's direct reply endpoint.
    pub receipts: u64,
    pub connects: u64,
    /// Links closed because the peer refused this node's hello.
    pub hellos_refused: u64,
    /// `OK` answers to collective messages (only those that asked for one).
    pub collective_answers: u64,
}

impl Link {
    pub(super) fn new(peer: &PeerConfig, min_backoff: Duration) -> Link {
        Link {
            device: peer.device,
            addr: peer.addr.clone(),
            state: LinkState::Connecting,
            backoff: min_backoff,
            forwarded: FxHashMap::default(),
            collective: BTreeMap::new(),
            unasked: 0,
            waiting: VecDeque::new(),
            bytes: 0,
            rx: Vec::new(),
            next_id: 1,
        }
    }

    pub(super) fn device(&self) -> u8 {
        self.device
    }

    pub(super) fn addr(&self) -> &str {
        &self.addr
    }

    pub(super) fn is_up(&self) -> bool {
        self.state == LinkState::Up
    }

    /// Still in the device table (not retired).
    pub(super) fn is_listed(&self) -> bool {
        self.state != LinkState::Retired
    }

    pub(super) fn connect_io(&self, link: LinkId) -> Io {
        Io::Connect {
            link,
            addr: self.addr.clone(),
        }
    }
}

impl Driver {
    /// State of the link to `device`, if it is in the device table.
    pub fn link_state(&self, device: u8) -> Option<LinkState> {
        self.link_of[device as usize].map(|l| self.links[l].state)
    }

    /// Every link in the device table: its peer's device id and state.
    pub fn links(&self) -> impl Iterator<Item = (u8, LinkState)> + '_ {
        self.links
            .iter()
            .filter(|l| l.state != LinkState::Retired)
            .map(|l| (l.device, l.state))
    }

    pub fn link_stats(&self) -> LinkStats {
        self.link_stats
    }

    /// The device table is now `peers` (a cluster store saw nodes join,
    /// leave or move). New peers get a link; a peer that left has its link
    /// closed and whatever was forwarded on it answered `UNREACHABLE`; a
    /// peer at a new address is reconnected there. Link ids of removed
    /// peers are not reused.
    pub fn handle_peers(&mut self, now: Instant, peers: Vec<PeerConfig>) {
        let me = self.engine.config().device_id;
        let mut wanted: [Option<&PeerConfig>; 256] = [None; 256];
        for p in peers
            .iter()
            .filter(|p| p.device != me && p.device != offrac_proto::DEVICE_SELF)
        {
            wanted[p.device as usize] = Some(p);
        }
        for (device, &new) in wanted.iter().enumerate() {
            let old = self.link_of[device];
            match (old, new) {
                (None, None) => {}
                (Some(link), Some(p)) if self.links[link].addr == p.addr => {}
                (old, new) => {
                    if let Some(link) = old {
                        self.retire_link(now, link);
                        self.link_of[device] = None;
                    }
                    if let Some(p) = new {
                        let link = self.links.len();
                        self.links.push(Link::new(p, self.cfg.reconnect_min));
                        self.link_of[device] = Some(link);
                        self.link_stats.connects += 1;
                        self.out.push_back(self.links[link].connect_io(link));
                    }
                }
            }
        }
        let listed: Vec<u8> = self.links().map(|(d, _)| d).collect();
        self.engine.set_peers(listed);
    }

    /// A peer left the table: fail what was forwarded to it, close its link
    /// for good.
    fn retire_link(&mut self, now: Instant, link: LinkId) {
        self.links[link].state = LinkState::Retired;
        let device = self.links[link].device;
        let msg =
            format!("device {device} left the device table before the hop's answer came back");
        self.close_link(now, link, &msg);
    }

    /// Close `link`'s connection and answer `UNREACHABLE` (with `msg`) for
    /// everything forwarded on it, in the order it was sent.
    fn close_link(&mut self, now: Instant, link: LinkId, msg: &str) {
        let l = &mut self.links[link];
        let device = l.device;
        l.waiting.clear();
        l.rx.clear();
        l.bytes = 0;
        l.collective.clear();
        l.unasked = 0;
        let mut lost: Vec<(u64, Forwarded)> = l.forwarded.drain().collect();
        lost.sort_unstable_by_key(|(id, _)| *id);
        self.out.push_back(Io::CloseLink { link });
        for (_, f) in lost {
            let msg = maybe_delivered(&f, msg);
            self.fail_forwarded(now, f, Status::Unreachable, device as u64, &msg);
        }
        self.collectives.handle_peer_down(now, device, msg);
        self.collective_outs(now);
    }

    /// The connection of `link` is open: write what waited for it.
    pub fn handle_link_up(&mut self, _now: Instant, link: LinkId) {
        let min = self.cfg.reconnect_min;
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        if l.state != LinkState::Connecting {
            return;
        }
        l.backoff = min;
        if self.cfg.link_hello {
            l.state = LinkState::Greeting;
            self.out.push_back(Io::LinkHello { link });
            return;
        }
        self.link_greeted(link);
    }

    /// `link` may carry hops: write what waited for it.
    fn link_greeted(&mut self, link: LinkId) {
        let l = &mut self.links[link];
        l.state = LinkState::Up;
        for (header, head, payload, tail) in l.waiting.drain(..) {
            self.out.push_back(Io::SendLink {
                link,
                header,
                head,
                payload,
                tail,
            });
        }
    }

    /// The connection of `link` failed to open, broke or was closed by the
    /// peer: everything forwarded on it and not answered is answered
    /// `UNREACHABLE` (the hop may or may not have run), and the link is
    /// reopened after a back-off.
    pub fn handle_link_down(&mut self, now: Instant, link: LinkId) {
        let max = self.cfg.reconnect_max;
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        if matches!(l.state, LinkState::Down { .. } | LinkState::Retired) {
            return;
        }
        let was_up = l.state == LinkState::Up;
        let greeting = l.state == LinkState::Greeting;
        l.state = LinkState::Down {
            retry_at: now + l.backoff,
        };
        l.backoff = (l.backoff * 2).min(max);
        let device = l.device;
        let msg = if greeting {
            format!("device {device} did not accept this node's hello (another node key?)")
        } else if was_up {
            format!("the link to device {device} broke before the hop's answer came back; the hop may have run")
        } else {
            format!("cannot connect to device {device}")
        };
        self.close_link(now, link, &msg);
    }

    /// Response bytes arrived on `link`.
    pub fn handle_link_bytes(&mut self, now: Instant, link: LinkId, data: &[u8]) {
        let max = self.cfg.relay_max_payload;
        let Some(l) = self.links.get_mut(link) else {
            return;
        };
        if !matches!(l.state, LinkState::Up | LinkState::Greeting) {
            return;
        }
        l.rx.extend_from_slice(data);
        let mut greeted = None;
        let mut answers = Vec::new();
        let mut refused = Vec::new();
        let mut at = 0;
        let mut broken = false;
        while l.rx.len() - at >= HEADER_LEN {
            let head: &[u8; HEADER_LEN] = l.rx[at..at + HEADER_LEN].try_into().expect("64 bytes");
            let mut h = match ResponseHeader::decode(head) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(device = l.device, error = %e, "peer sent a bad response");
                    broken = true;
                    break;
                }
            };
            let len = h.payload_len as usize;
            if len > max {
                tracing::warn!(
                    device = l.device,
                    len,
                    "peer's response exceeds relay_max_payload"
                );
                broken = true;
                break;
            }
            let times = if h.has_hop_times() { HOP_TIMES_LEN } else { 0 };
            let start = at + HEADER_LEN + times;
            if l.rx.len() < start + len {
                break;
            }
            if times > 0 {
                let block: &[u8; HOP_TIMES_LEN] =
                    l.rx[at + HEADER_LEN..start].try_into().expect("64 bytes");
                h.decode_hop_times(block);
            }
            let payload = l.rx[start..start + len].to_vec();
            at = start + len;
            if h.receipt {
                self.link_stats.receipts += 1;
            }
            if l.state == LinkState::Greeting {
                // Nothing but the hello was sent: this is its answer.
                greeted = Some(
                    (h.request_id == LINK_HELLO_ID && h.status == Status::Ok)
                        .then_some(())
                        .ok_or_else(|| {
                            format!(
                                "device {} refused this node's hello ({:?}: {})",
                                l.device,
                                h.status,
                                String::from_utf8_lossy(&payload)
                            )
                        }),
                );
                break;
            }
            match l.forwarded.remove(&h.request_id) {
                Some(f) => {
                    l.bytes -= f.bytes;
                    answers.push((f, h, payload));
                }
                None => match l.collective.remove(&h.request_id) {
                    Some(key) if h.status != Status::Ok => {
                        let why = String::from_utf8_lossy(&payload).into_owned();
                        refused.push((key, l.device, why));
                    }
                    Some(_) => {
                        // Asked for: the peer handled every earlier message.
                        l.collective = l.collective.split_off(&h.request_id);
                        self.link_stats.collective_answers += 1;
                    }
                    None => self.link_stats.late += 1,
                },
            }
        }
        l.rx.drain(..at);
        match greeted {
            Some(Ok(())) => self.link_greeted(link),
            Some(Err(why)) => {
                tracing::warn!(link, "{why}");
                self.link_stats.hellos_refused += 1;
                return self.handle_link_down(now, link);
            }
            None => {}
        }
        for (f, h, payload) in answers {
            self.relay(now, f, h, payload);
        }
        for (key, device, why) in refused {
            let why = format!("it refused a collective message: {why}");
            self.collectives.handle_send_failed(now, key, device, &why);
        }
        self.collective_outs(now);
        if broken {
            self.handle_link_down(now, link);
        }
    }

    /// Forward `job` to the device of its current hop (the engine has let go of it).
    pub(super) fn forward(&mut self, now: Instant, job: Job) {
        let Some(c) = self.conns.get_mut(&job.conn) else {
            return; // nobody to answer
        };
        c.answering += 1;
        let device = job.header.current_hop().device;
        let f = Forwarded {
            conn: job.conn,
            origin: job.header,
            reassembly_ns: job.reassembly_ns(),
            queue_ns: job
                .earlier_queue_ns
                .saturating_add(nanos(now.saturating_since(job.complete_at))),
            exec_ns: job.earlier_exec_ns,
            bytes: job.payload.len(),
            deadline: now + self.cfg.forward_timeout,
            times: job.times,
        };
        if job.expired(now) {
            let msg = format!(
                "the request's budget of {} µs ran out before hop {} was forwarded",
                f.origin.budget_us, f.origin.hop_index
            );
            return self.fail_forwarded(now, f, Status::Timeout, 0, &msg);
        }
        let Some(link) = self.link_of[device as usize] else {
            let msg = format!("device {device} is not in this node's device table");
            return self.fail_forwarded(now, f, Status::Unreachable, device as u64, &msg);
        };
        let limit = self.cfg.link_max_bytes;
        let l = &mut self.links[link];
        if let LinkState::Down { retry_at } = l.state {
            let wait = retry_at.saturating_since(now).as_millis();
            let msg = format!("the link to device {device} is down (next attempt in {wait} ms)");
            return self.fail_forwarded(now, f, Status::Unreachable, device as u64, &msg);
        }
        if l.bytes > 0 && l.bytes + f.bytes > limit {
            let msg = format!("the link to device {device} holds too much; retry");
            return self.fail_forwarded(now, f, Status::Busy, 0, &msg);
        }
        let id = l.next_id;
        l.next_id += 1;
        // The header as the peer must see it: this link's id, and the length
        // of the payload it carries now (an earlier hop's output).
        let mut header = job.header.for_link(id, job.payload.len() as u32);
        // On an authenticated link the hop travels as its origin tenant
        // (the connection's hello), not as whatever its header said.
        if self.cfg.link_hello {
            header.tenant = job.tenant.unwrap_or(offrac_proto::TENANT_NODE);
        }
        // What is left of the budget travels on (time on the wire is not charged).
        if let Some(d) = job.deadline {
            let left = d.saturating_since(now).as_micros().max(1);
            header.budget_us = left.min(offrac_proto::MAX_BUDGET_US as u128) as u32;
        }
        l.bytes += f.bytes;
        self.forward_deadlines.push(Reverse((f.deadline, link, id)));
        l.forwarded.insert(id, f);
        self.link_stats.forwarded += 1;
        // A load's output goes as the kept buffer itself, then the job's own
        // bytes: written from where they are, not joined.
        let (head, payload) = job.payload.into_parts();
        if l.state == LinkState::Up {
            self.out.push_back(Io::SendLink {
                link,
                header,
                head,
                payload,
                tail: bytes::Bytes::new(),
            });
        } else {
            l.waiting
                .push_back((header, head, payload, bytes::Bytes::new()));
        }
    }

    /// Forward deadlines and reconnects that are due.
    pub(super) fn link_timeouts(&mut self, now: Instant) {
        while let Some(&Reverse((t, link, id))) = self.forward_deadlines.peek() {
            if t > now {
                break;
            }
            self.forward_deadlines.pop();
            let l = &mut self.links[link];
            let Some(f) = l.forwarded.remove(&id) else {
                continue; // answered already
            };
            l.bytes -= f.bytes;
            l.waiting.retain(|(h, ..)| h.request_id != id);
            let device = l.device;
            let msg = format!(
                "no answer from device {device} within the forward timeout of {} ms",
                self.cfg.forward_timeout.as_millis()
            );
            let msg = maybe_delivered(&f, &msg);
            self.fail_forwarded(now, f, Status::Timeout, device as u64, &msg);
        }
        if self.shutdown.is_some() {
            return; // no new links while shutting down
        }
        for (i, l) in self.links.iter_mut().enumerate() {
            if let LinkState::Down { retry_at } = l.state {
                if retry_at <= now {
                    l.state = LinkState::Connecting;
                    self.link_stats.connects += 1;
                    self.out.push_back(l.connect_io(i));
                }
            }
        }
    }

    /// The earliest forward deadline or reconnect.
    pub(super) fn link_timeout(&self) -> Option<Instant> {
        let deadline = self.forward_deadlines.peek().map(|Reverse((t, _, _))| *t);
        let retry = if self.shutdown.is_some() {
            None
        } else {
            self.links
                .iter()
                .filter_map(|l| match l.state {
                    LinkState::Down { retry_at } => Some(retry_at),
                    _ => None,
                })
                .min()
        };
        deadline.into_iter().chain(retry).min()
    }

    /// The grace period ended: requests still waiting for their link to come
    /// up are answered `SHUTTING_DOWN` (those already sent wait for their answer).
    pub(super) fn abort_waiting_links(&mut self, now: Instant) {
        let mut lost = Vec::new();
        for l in &mut self.links {
            for (h, ..) in l.waiting.drain(..) {
                if let Some(f) = l.forwarded.remove(&h.request_id) {
                    l.bytes -= f.bytes;
                    lost.push(f);
                }
            }
        }
        for f in lost {
            let msg = "node is shutting down: the grace period ended before this hop was forwarded";
            self.fail_forwarded(now, f, Status::ShuttingDown, 0, msg);
        }
    }

    /// Relay a peer's answer to the caller, with the caller's request id and
    /// this node's share of the timings added. A receipt ends the request
    /// here, or goes on towards the node that forwarded it to this one.
    fn relay(&mut self, now: Instant, f: Forwarded, mut h: ResponseHeader, payload: Vec<u8>) {
        h.request_id = f.origin.request_id;
        h.tenant = f.origin.tenant;
        if h.receipt {
            return self.settle_receipt(now, &f, h);
        }
        self.link_stats.relayed += 1;
        h.reassembly_ns = h.reassembly_ns.saturating_add(f.reassembly_ns);
        h.queue_ns = h.queue_ns.saturating_add(f.queue_ns);
        h.exec_ns = h.exec_ns.saturating_add(f.exec_ns);
        if f.origin.traced() {
            h.hop_times = Some(merge_times(h.hop_times, &f.times));
        }
        self.answer_forwarded(now, &f, h, payload);
    }

    /// Answer a forwarded request here, naming its hop.
    fn fail_forwarded(
        &mut self,
        now: Instant,
        f: Forwarded,
        status: Status,
        detail: u64,
        msg: &str,
    ) {
        self.link_stats.failed += 1;
        let mut h = ResponseHeader::answer(
            &f.origin,
            status,
            self.engine.config().device_id,
            msg.len() as u32,
        );
        h.detail = detail;
        if f.origin.traced() {
            h.hop_times = Some(f.times);
        }
        self.answer_forwarded(now, &f, h, msg.as_bytes().to_vec());
    }

    /// Write the answer of forwarded request `f` (to its reply endpoint, if
    /// it has one) and settle what its connection is owed.
    fn answer_forwarded(
        &mut self,
        now: Instant,
        f: &Forwarded,
        header: ResponseHeader,
        payload: Vec<u8>,
    ) {
        let Some(c) = self.conns.get_mut(&f.conn) else {
            return; // the caller is gone
        };
        c.answering -= 1;
        let route = self.engine.answer_route(f.conn, &f.origin);
        let receipt = ResponseHeader::receipt_of(&header);
        let mut header = header;
        header.request_id = route.request_id;
        if self.conns.contains_key(&route.to) {
            self.out.push_back(Io::Send {
                conn: route.to,
                header,
                payload,
            });
        }
        if let Some(sender) = route.receipt {
            self.out.push_back(Io::Send {
                conn: sender,
                header: receipt,
                payload: Vec::new(),
            });
        }
        self.maybe_shut(now, f.conn);
    }

    /// The answer to forwarded request `f` was delivered downstream, to its
    /// direct reply endpoint: nothing is owed to its caller any more. A node
    /// that forwarded it here is owed the receipt in turn.
    fn settle_receipt(&mut self, now: Instant, f: &Forwarded, receipt: ResponseHeader) {
        let Some(c) = self.conns.get_mut(&f.conn) else {
            return;
        };
        c.answering -= 1;
        if f.origin.forwarded() {
            self.out.push_back(Io::Send {
                conn: f.conn,
                header: receipt,
                payload: Vec::new(),
            });
        }
        self.maybe_shut(now, f.conn);
    }
}

/// The failure message of forwarded request `f`, warning when a node
/// further on may have written its answer to the direct reply endpoint
/// already: the one case where a caller can get a second answer.
fn maybe_delivered(f: &Forwarded, msg: &str) -> String {
    if f.origin.direct_reply() {
        format!("{msg} (its direct reply may have been delivered already)")
    } else {
        msg.to_string()
    }
}

/// A peer's per-hop timings with the hops this node ran filled in.
fn merge_times(
    peer: Option<[HopTime; MAX_HOPS]>,
    mine: &[HopTime; MAX_HOPS],
) -> [HopTime; MAX_HOPS] {
    let mut t = peer.unwrap_or_default();
    for (slot, m) in t.iter_mut().zip(mine) {
        if m.ran {
            *slot = *m;
        }
    }
    t
}
