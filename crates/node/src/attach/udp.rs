//! memcached's UDP framing, sans-IO (memcached's protocol.txt, "UDP
//! protocol"): every datagram starts with an 8-byte frame header (request
//! id, sequence number, total datagrams, reserved 0, each a big-endian
//! u16); a request fits one datagram; an answer may span several datagrams
//! of at most [`MAX_DATAGRAM_BYTES`], all carrying the request's id.
//!
//! Each admitted datagram becomes a pseudo-connection of the cache's
//! [`super::Machine`] (the same machine, cache and per-key in-flight state
//! TCP clients use): opened, fed the payload, half-closed, and when it is
//! finished its answer is framed back to the peer. [`UdpTable`] holds the
//! requests in flight, keyed by (peer, request id), under a cap.
//!
//! Framing of answers follows stock memcached (checked against memcached
//! 1.6 side by side, `crates/node/tests/attach_udp.rs`): every response is a
//! message of its own with sequence numbers from 0 and its own total, all
//! under the request id; a datagram with several requests gets one message
//! per request, and a multi-key get one message per `VALUE` item, `END`
//! going with the last item (alone when nothing was found or the last key
//! missed), after an empty message when the first of several keys missed
//! ([`GetShape`], noted by the machine).

use super::inline::{Counter, InlineMachine, Now};
use std::collections::HashSet;
use std::net::SocketAddr;

/// The frame header in front of every datagram's payload.
pub const HEADER_BYTES: usize = 8;
/// The largest datagram sent, header included (memcached's `UDP_MAX_PAYLOAD_SIZE`).
pub const MAX_DATAGRAM_BYTES: usize = 1400;
/// Answer bytes per datagram.
pub const MAX_PAYLOAD_BYTES: usize = MAX_DATAGRAM_BYTES - HEADER_BYTES;
/// The largest answer one UDP request may get: a larger one is replaced by
/// [`TOO_LARGE`] (bounds the memory a pseudo-connection holds).
pub const MAX_ANSWER_BYTES: usize = 8 << 20;
/// Sent instead of an answer over [`MAX_ANSWER_BYTES`].
pub const TOO_LARGE: &[u8] = b"SERVER_ERROR answer too large for UDP\r\n";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub request_id: u16,
    pub seq: u16,
    pub total: u16,
    pub reserved: u16,
}

impl Header {
    pub fn parse(b: &[u8]) -> Option<Header> {
        let w = |i: usize| Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]));
        Some(Header {
            request_id: w(0)?,
            seq: w(2)?,
            total: w(4)?,
            reserved: w(6)?,
        })
    }

    pub fn bytes(&self) -> [u8; HEADER_BYTES] {
        let mut h = [0; HEADER_BYTES];
        h[0..2].copy_from_slice(&self.request_id.to_be_bytes());
        h[2..4].copy_from_slice(&self.seq.to_be_bytes());
        h[4..6].copy_from_slice(&self.total.to_be_bytes());
        h[6..8].copy_from_slice(&self.reserved.to_be_bytes());
        h
    }
}

/// Why a datagram was dropped without an answer (each counted in [`UdpStats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Dropped {
    /// memcached drops these too: there is no request id to answer with.
    #[error("datagram of {0} bytes is shorter than the 8-byte frame header")]
    Short(usize),
    /// memcached drops a request spanning several datagrams (total != 1).
    #[error("request spans {0} datagrams; only one-datagram requests are served")]
    MultiDatagram(u16),
    /// A retransmission of a request still in flight: the first one gets the answer.
    #[error("request id {0} from this peer is already in flight")]
    Duplicate(u16),
    /// The cap on UDP requests in flight is reached (as memcached drops under load).
    #[error("{0} UDP requests in flight (the cap)")]
    Full(usize),
}

/// Which keys of a get were found: memcached frames a get's UDP answer by
/// it (1.6.18: `END` goes with the last item only if the last key was
/// found, else alone; a get of two keys or more whose first key missed
/// starts with an empty message, a header with total 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetShape {
    pub keys: usize,
    pub first_found: bool,
    pub last_found: bool,
}

/// One answer in a pseudo-connection's answer stream, in order: its length
/// and, for a get's answer, its shape (the machine notes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub len: usize,
    pub get: Option<GetShape>,
}

/// Cuts a stream of answers into memcached's UDP messages by the machine's
/// units: a get's answer by its shape ([`GetShape`]; an empty slice is the
/// empty message), anything else by [`responses`]. Units that do not add
/// up to the stream (a machine that does not note them) leave the whole
/// stream to [`responses`].
pub fn messages<'a>(answer: &'a [u8], units: &[Unit]) -> Vec<&'a [u8]> {
    if units.is_empty() || units.iter().map(|u| u.len).sum::<usize>() != answer.len() {
        return responses(answer);
    }
    let mut out = Vec::new();
    let mut at = 0;
    for u in units {
        let part = &answer[at..at + u.len];
        at += u.len;
        let mut rs = responses(part);
        if let Some(shape) = u.get {
            if !shape.first_found && shape.keys > 1 {
                out.push(&part[..0]);
            }
            // END goes alone when the last key missed (and something was found).
            if !shape.last_found {
                if let Some(last) = rs.pop() {
                    match last.strip_suffix(b"END\r\n").filter(|i| !i.is_empty()) {
                        Some(item) => rs.extend([item, &last[item.len()..]]),
                        None => rs.push(last),
                    }
                }
            }
        }
        out.extend(rs);
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an answer of {0} bytes needs more than 65535 datagrams")]
pub struct AnswerTooLarge(pub usize);

/// Cuts an answer stream into memcached's UDP messages (one per response,
/// see the module doc): a `VALUE` item with its data block (and a directly
/// following `END`), a run of `STAT` lines with their `END`, or one line.
/// Bytes that do not parse (a cut-off stream) are one last message, so no
/// byte is lost.
pub fn responses(answer: &[u8]) -> Vec<&[u8]> {
    let line_end = |from: usize| {
        answer[from..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|p| from + p + 2)
    };
    let mut out = Vec::new();
    let mut at = 0;
    while at < answer.len() {
        let Some(mut end) = line_end(at) else {
            out.push(&answer[at..]);
            break;
        };
        let line = &answer[at..end];
        if line.starts_with(b"VALUE ") {
            let bytes = std::str::from_utf8(line)
                .ok()
                .and_then(|l| l.split_ascii_whitespace().nth(3))
                .and_then(|n| n.parse::<usize>().ok());
            let Some(n) = bytes.filter(|n| end + n + 2 <= answer.len()) else {
                out.push(&answer[at..]);
                break;
            };
            end += n + 2;
            if answer[end..].starts_with(b"END\r\n") {
                end += 5;
            }
        } else if line.starts_with(b"STAT ") {
            while answer[end..].starts_with(b"STAT ") {
                match line_end(end) {
                    Some(e) => end = e,
                    None => {
                        end = answer.len();
                        break;
                    }
                }
            }
            if answer[end..].starts_with(b"END\r\n") {
                end += 5;
            }
        }
        out.push(&answer[at..end]);
        at = end;
    }
    out
}

/// Splits `answer` into datagrams with `request_id`, sequence numbers 0.. and
/// the total in each header. An empty answer (a `noreply` write) is no datagram.
pub fn frame(request_id: u16, answer: &[u8]) -> Result<Vec<Vec<u8>>, AnswerTooLarge> {
    let chunks = answer.len().div_ceil(MAX_PAYLOAD_BYTES);
    let total = u16::try_from(chunks).map_err(|_| AnswerTooLarge(answer.len()))?;
    Ok(answer
        .chunks(MAX_PAYLOAD_BYTES)
        .enumerate()
        .map(|(seq, payload)| {
            let h = Header {
                request_id,
                seq: seq as u16,
                total,
                reserved: 0,
            };
            let mut d = Vec::with_capacity(HEADER_BYTES + payload.len());
            d.extend_from_slice(&h.bytes());
            d.extend_from_slice(payload);
            d
        })
        .collect())
}

/// Counters of the UDP side (logged; read by tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UdpStats {
    pub received: u64,
    pub admitted: u64,
    pub dropped_short: u64,
    pub dropped_multi: u64,
    pub dropped_duplicate: u64,
    pub dropped_full: u64,
    pub answers_too_large: u64,
    /// Admitted requests whose answer was sent (a `noreply` write's empty answer included).
    pub answered: u64,
    /// memcached UDP messages sent (one per response, each one datagram or more).
    pub messages_sent: u64,
    pub datagrams_sent: u64,
    /// Datagrams the socket would not take (full send buffer or an error): lost, as UDP may lose them.
    pub send_failed: u64,
    /// New backend connections for UDP requests (a miss or an update with no
    /// idle pooled one, or a retry) seen to work: a write taken or bytes read.
    pub backend_connects: u64,
    /// New backend connections for UDP requests that failed (refused, reset,
    /// or timed out) before they were seen to work.
    pub backend_connect_failures: u64,
    /// UDP requests given an idle pooled backend connection instead.
    pub backend_reused: u64,
    /// Pooled connections found closed or with stray bytes when taken (dropped, not used).
    pub backend_stale: u64,
}

/// The UDP side's counters for /metrics (docs/operations.md lists them);
/// `per_loop` is the requests each event loop admitted.
pub fn counters(s: &UdpStats, in_flight: usize, per_loop: &[u64]) -> Vec<Counter> {
    const DROPPED: &str = "offrac_attach_udp_dropped_total";
    const DROPPED_HELP: &str = "UDP datagrams dropped unanswered, by reason.";
    let loops = per_loop.iter().enumerate().map(|(i, &n)| {
        Counter::total(
            "offrac_attach_udp_loop_requests_total",
            "UDP requests admitted, by the event loop whose socket read them.",
            n,
        )
        .with("loop", i.to_string())
    });
    let mut out = vec![
        Counter::total(
            "offrac_attach_udp_datagrams_received_total",
            "UDP datagrams read.",
            s.received,
        ),
        Counter::total(
            "offrac_attach_udp_requests_total",
            "UDP datagrams admitted as requests.",
            s.admitted,
        ),
        Counter::total(DROPPED, DROPPED_HELP, s.dropped_short).with("reason", "short"),
        Counter::total(DROPPED, DROPPED_HELP, s.dropped_multi).with("reason", "multi_datagram"),
        Counter::total(DROPPED, DROPPED_HELP, s.dropped_duplicate).with("reason", "duplicate"),
        Counter::total(DROPPED, DROPPED_HELP, s.dropped_full).with("reason", "full"),
        Counter::total(
            "offrac_attach_udp_answers_total",
            "UDP requests answered (an empty noreply answer included).",
            s.answered,
        ),
        Counter::total(
            "offrac_attach_udp_answers_too_large_total",
            "UDP answers over the size bound, replaced by SERVER_ERROR.",
            s.answers_too_large,
        ),
        Counter::total(
            "offrac_attach_udp_messages_sent_total",
            "UDP answer messages sent (one per response).",
            s.messages_sent,
        ),
        Counter::total(
            "offrac_attach_udp_datagrams_sent_total",
            "UDP answer datagrams sent.",
            s.datagrams_sent,
        ),
        Counter::total(
            "offrac_attach_udp_send_failed_total",
            "UDP answer datagrams the socket did not take (lost).",
            s.send_failed,
        ),
        Counter::total(
            "offrac_attach_udp_backend_connects_total",
            "New backend connections for UDP requests that worked.",
            s.backend_connects,
        ),
        Counter::total(
            "offrac_attach_udp_backend_connect_failures_total",
            "New backend connections for UDP requests that failed before working.",
            s.backend_connect_failures,
        ),
        Counter::total(
            "offrac_attach_udp_backend_reused_total",
            "UDP requests served on an idle pooled backend connection.",
            s.backend_reused,
        ),
        Counter::total(
            "offrac_attach_udp_backend_stale_total",
            "Pooled backend connections found closed when taken (dropped).",
            s.backend_stale,
        ),
        Counter::gauge(
            "offrac_attach_udp_in_flight",
            "UDP requests in flight.",
            in_flight as u64,
        ),
    ];
    out.extend(loops);
    out
}

/// The UDP requests in flight, keyed by (peer, request id), at most `cap`.
#[derive(Debug)]
pub struct UdpTable {
    cap: usize,
    inflight: HashSet<(SocketAddr, u16)>,
    pub stats: UdpStats,
    /// Requests admitted by each event loop (each reads its own socket).
    pub per_loop: Vec<u64>,
}

/// An admitted request: answer it to `peer` with `request_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admitted<'a> {
    pub peer: SocketAddr,
    pub request_id: u16,
    pub payload: &'a [u8],
}

impl UdpTable {
    pub fn new(cap: usize) -> Self {
        UdpTable {
            cap,
            inflight: HashSet::new(),
            stats: UdpStats::default(),
            per_loop: Vec::new(),
        }
    }

    /// Event loop `me` admitted a request.
    pub fn admitted_on(&mut self, me: usize) {
        if self.per_loop.len() <= me {
            self.per_loop.resize(me + 1, 0);
        }
        self.per_loop[me] += 1;
    }

    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// A datagram arrived: admitted (and held in flight until [`Self::done`]) or dropped.
    pub fn admit<'a>(
        &mut self,
        peer: SocketAddr,
        datagram: &'a [u8],
    ) -> Result<Admitted<'a>, Dropped> {
        self.stats.received += 1;
        let got = self.check(peer, datagram);
        match got {
            Ok(a) => {
                self.inflight.insert((peer, a.request_id));
                self.stats.admitted += 1;
            }
            Err(Dropped::Short(_)) => self.stats.dropped_short += 1,
            Err(Dropped::MultiDatagram(_)) => self.stats.dropped_multi += 1,
            Err(Dropped::Duplicate(_)) => self.stats.dropped_duplicate += 1,
            Err(Dropped::Full(_)) => self.stats.dropped_full += 1,
        }
        got
    }

    fn check<'a>(&self, peer: SocketAddr, datagram: &'a [u8]) -> Result<Admitted<'a>, Dropped> {
        let h = match Header::parse(datagram) {
            Some(h) if datagram.len() > HEADER_BYTES => h,
            _ => return Err(Dropped::Short(datagram.len())),
        };
        if h.total != 1 {
            return Err(Dropped::MultiDatagram(h.total));
        }
        if self.inflight.contains(&(peer, h.request_id)) {
            return Err(Dropped::Duplicate(h.request_id));
        }
        if self.inflight.len() >= self.cap {
            return Err(Dropped::Full(self.cap));
        }
        Ok(Admitted {
            peer,
            request_id: h.request_id,
            payload: &datagram[HEADER_BYTES..],
        })
    }

    /// The request was answered (or given up): its (peer, id) may come again.
    pub fn done(&mut self, peer: SocketAddr, request_id: u16) {
        self.inflight.remove(&(peer, request_id));
    }

    /// The datagrams for a finished request's answer (its answer bytes as the
    /// machine produced them, or `None` when they went over [`MAX_ANSWER_BYTES`]):
    /// one message per response ([`responses`]), each framed from sequence 0.
    pub fn answer(
        &mut self,
        request_id: u16,
        answer: Option<&[u8]>,
        units: &[Unit],
    ) -> Vec<Vec<u8>> {
        self.stats.answered += 1;
        let framed = match answer {
            Some(a) if a.len() <= MAX_ANSWER_BYTES => messages(a, units)
                .into_iter()
                .map(|r| {
                    if r.is_empty() {
                        // memcached's empty message: a header, total 0.
                        let h = Header {
                            request_id,
                            seq: 0,
                            total: 0,
                            reserved: 0,
                        };
                        Ok(vec![h.bytes().to_vec()])
                    } else {
                        frame(request_id, r)
                    }
                })
                .collect::<Result<Vec<_>, _>>()
                .ok(),
            _ => None,
        };
        let messages = match framed {
            Some(m) => m,
            None => {
                self.stats.answers_too_large += 1;
                vec![frame(request_id, TOO_LARGE).unwrap_or_default()]
            }
        };
        self.stats.messages_sent += messages.len() as u64;
        messages.into_iter().flatten().collect()
    }
}

/// Starts a pseudo-connection for an admitted request: the machine sees a
/// client that sent the payload and half-closed, so it answers each whole
/// request in it (a cut-off one is dropped, as for a TCP client) and then
/// reports the connection finished.
pub fn open_request<M: InlineMachine>(m: &mut M, payload: &[u8], now: Now) -> usize {
    let id = m.open();
    m.track_units(id);
    m.client_input(id, payload, now);
    m.client_eof(id, now);
    id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attach::machine::{Machine, Settings};

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    fn datagram(request_id: u16, total: u16, payload: &[u8]) -> Vec<u8> {
        let mut d = Header {
            request_id,
            seq: 0,
            total,
            reserved: 0,
        }
        .bytes()
        .to_vec();
        d.extend_from_slice(payload);
        d
    }

    /// Reassembles datagrams (in any order) as a client does; checks the headers.
    fn reassemble(request_id: u16, mut ds: Vec<Vec<u8>>) -> Vec<u8> {
        ds.reverse();
        let total = ds.len();
        let mut parts = vec![None; total];
        for d in ds {
            assert!(d.len() <= MAX_DATAGRAM_BYTES);
            let h = Header::parse(&d).unwrap();
            assert_eq!(h.request_id, request_id);
            assert_eq!(usize::from(h.total), total);
            assert_eq!(h.reserved, 0);
            parts[usize::from(h.seq)] = Some(d[HEADER_BYTES..].to_vec());
        }
        parts.into_iter().flat_map(|p| p.unwrap()).collect()
    }

    /// One datagram through the table and the machine; the backend answers
    /// from `backend` (request bytes -> answer bytes) until the request is done.
    fn serve(
        t: &mut UdpTable,
        m: &mut Machine,
        from: SocketAddr,
        d: &[u8],
        backend: &mut dyn FnMut(&[u8]) -> Vec<u8>,
    ) -> Result<Vec<Vec<u8>>, Dropped> {
        let now = Now::read();
        let a = t.admit(from, d)?;
        let (rid, payload) = (a.request_id, a.payload.to_vec());
        let id = open_request(m, &payload, now);
        let (mut answer, mut units) = (Vec::new(), Vec::new());
        for _ in 0..10 {
            answer.append(InlineMachine::client_out(m, id).unwrap());
            units.extend(InlineMachine::take_units(m, id));
            if InlineMachine::finished(m, id) {
                break;
            }
            let out = std::mem::take(InlineMachine::backend_out(m, id).unwrap());
            let reply = backend(&out);
            InlineMachine::backend_input(m, id, &reply, now);
        }
        assert!(InlineMachine::finished(m, id), "the request finished");
        InlineMachine::remove(m, id, now);
        t.done(from, rid);
        Ok(t.answer(rid, Some(&answer), &units))
    }

    fn no_backend(b: &[u8]) -> Vec<u8> {
        panic!(
            "unexpected backend request {:?}",
            String::from_utf8_lossy(b)
        )
    }

    #[test]
    fn headers_round_trip_and_answers_split_at_the_datagram_size() {
        let h = Header {
            request_id: 0xbeef,
            seq: 3,
            total: 7,
            reserved: 0,
        };
        assert_eq!(Header::parse(&h.bytes()), Some(h));
        assert_eq!(frame(1, b"").unwrap(), Vec::<Vec<u8>>::new());
        let one = frame(9, b"END\r\n").unwrap();
        assert_eq!(one, vec![datagram(9, 1, b"END\r\n")]);
        let big: Vec<u8> = (0..3 * MAX_PAYLOAD_BYTES + 5).map(|i| i as u8).collect();
        let ds = frame(42, &big).unwrap();
        assert_eq!(ds.len(), 4);
        assert_eq!(ds[0].len(), MAX_DATAGRAM_BYTES);
        assert_eq!(ds[3].len(), HEADER_BYTES + 5);
        assert_eq!(reassemble(42, ds), big);
        assert_eq!(
            frame(1, &vec![0; 65536 * MAX_PAYLOAD_BYTES]),
            Err(AnswerTooLarge(65536 * MAX_PAYLOAD_BYTES))
        );
    }

    #[test]
    fn answers_are_cut_into_memcacheds_messages() {
        let cut = |a: &[u8]| -> Vec<Vec<u8>> { responses(a).iter().map(|r| r.to_vec()).collect() };
        assert_eq!(cut(b""), Vec::<Vec<u8>>::new());
        assert_eq!(
            cut(b"STORED\r\nNOT_FOUND\r\nERROR\r\n"),
            vec![
                b"STORED\r\n".to_vec(),
                b"NOT_FOUND\r\n".to_vec(),
                b"ERROR\r\n".to_vec()
            ]
        );
        // A multi-key get: one message per item, END with the last; a miss is END alone.
        assert_eq!(
            cut(b"VALUE a 0 1\r\nx\r\nVALUE b 0 4 7\r\ny\r\nz\r\nEND\r\nEND\r\n"),
            vec![
                b"VALUE a 0 1\r\nx\r\n".to_vec(),
                b"VALUE b 0 4 7\r\ny\r\nz\r\nEND\r\n".to_vec(),
                b"END\r\n".to_vec()
            ]
        );
        assert_eq!(
            cut(b"STAT pid 1\r\nSTAT uptime 2\r\nEND\r\nVERSION 1.6\r\n"),
            vec![
                b"STAT pid 1\r\nSTAT uptime 2\r\nEND\r\n".to_vec(),
                b"VERSION 1.6\r\n".to_vec()
            ]
        );
        // What does not parse is kept whole, never lost.
        assert_eq!(
            cut(b"DELETED\r\nVALUE a 0 10\r\nab"),
            vec![b"DELETED\r\n".to_vec(), b"VALUE a 0 10\r\nab".to_vec()]
        );
        assert_eq!(cut(b"VALUE a 0 x\r\n\r\n").len(), 1);
        assert_eq!(cut(b"STORED"), vec![b"STORED".to_vec()]);
        // Each message is framed from sequence 0 with its own total.
        let mut t = UdpTable::new(1);
        let big: Vec<u8> = [
            &b"VALUE a 0 1\r\nx\r\n"[..],
            format!("VALUE b 0 {}\r\n", 2 * MAX_PAYLOAD_BYTES).as_bytes(),
            &vec![b'v'; 2 * MAX_PAYLOAD_BYTES],
            b"\r\nEND\r\n",
        ]
        .concat();
        let ds = t.answer(3, Some(&big), &[]);
        let heads: Vec<(u16, u16)> = ds
            .iter()
            .map(|d| Header::parse(d).map(|h| (h.seq, h.total)).unwrap())
            .collect();
        assert_eq!(heads, vec![(0, 1), (0, 3), (1, 3), (2, 3)]);
        assert_eq!(ds[0], datagram(3, 1, b"VALUE a 0 1\r\nx\r\n"));
        let body: Vec<u8> = ds.iter().flat_map(|d| d[HEADER_BYTES..].to_vec()).collect();
        assert_eq!(body, big);
        assert_eq!((t.stats.answered, t.stats.messages_sent), (1, 2));
    }

    /// A get's answer is framed by which of its keys were found, as
    /// memcached 1.6.18 frames it: END alone after a missing last key, an
    /// empty message (header only, total 0) first when the first of two
    /// keys or more missed.
    #[test]
    fn a_gets_messages_follow_which_keys_were_found() {
        let shape = |keys, first_found, last_found| GetShape {
            keys,
            first_found,
            last_found,
        };
        let (x, y) = (&b"VALUE a 0 1\r\nx\r\n"[..], &b"VALUE b 0 1\r\ny\r\n"[..]);
        let cut = |a: &[u8], shapes: &[Option<GetShape>], lens: &[usize]| -> Vec<Vec<u8>> {
            let units: Vec<Unit> = lens
                .iter()
                .zip(shapes)
                .map(|(&len, &get)| Unit { len, get })
                .collect();
            messages(a, &units).iter().map(|r| r.to_vec()).collect()
        };
        let end = b"END\r\n".to_vec();
        // get a b (both found) / get a nope / get nope a / get nope a nope2 / get nope x / get nope
        let both = [x, y, b"END\r\n"].concat();
        assert_eq!(
            cut(&both, &[Some(shape(2, true, true))], &[both.len()]),
            vec![x.to_vec(), [y, b"END\r\n"].concat()]
        );
        let a_nope = [x, b"END\r\n"].concat();
        assert_eq!(
            cut(&a_nope, &[Some(shape(2, true, false))], &[a_nope.len()]),
            vec![x.to_vec(), end.clone()]
        );
        assert_eq!(
            cut(&a_nope, &[Some(shape(2, false, true))], &[a_nope.len()]),
            vec![Vec::new(), a_nope.clone()]
        );
        assert_eq!(
            cut(&a_nope, &[Some(shape(3, false, false))], &[a_nope.len()]),
            vec![Vec::new(), x.to_vec(), end.clone()]
        );
        assert_eq!(
            cut(&end, &[Some(shape(2, false, false))], &[5]),
            vec![Vec::new(), end.clone()]
        );
        assert_eq!(
            cut(&end, &[Some(shape(1, false, false))], &[5]),
            vec![end.clone()]
        );
        // Several units; one that is no get; units that do not add up fall back.
        let two = [&a_nope[..], b"STORED\r\n", &end].concat();
        let shapes = [
            Some(shape(2, true, false)),
            None,
            Some(shape(2, false, false)),
        ];
        assert_eq!(
            cut(&two, &shapes, &[a_nope.len(), 8, 5]),
            vec![
                x.to_vec(),
                end.clone(),
                b"STORED\r\n".to_vec(),
                Vec::new(),
                end.clone()
            ]
        );
        assert_eq!(
            cut(&two, &shapes, &[a_nope.len(), 8, 4]),
            vec![a_nope.clone(), b"STORED\r\n".to_vec(), end.clone()]
        );
        // The empty message is one datagram of a header with total 0.
        let mut t = UdpTable::new(1);
        let ds = t.answer(
            4,
            Some(&end),
            &[Unit {
                len: 5,
                get: Some(shape(2, false, false)),
            }],
        );
        assert_eq!(
            ds,
            vec![
                Header {
                    request_id: 4,
                    seq: 0,
                    total: 0,
                    reserved: 0
                }
                .bytes()
                .to_vec(),
                datagram(4, 1, b"END\r\n")
            ]
        );
    }

    #[test]
    fn bad_datagrams_are_dropped_and_counted() {
        let mut t = UdpTable::new(2);
        assert_eq!(t.admit(peer(1), b"\0\x01\0\0\0"), Err(Dropped::Short(5)));
        assert_eq!(
            t.admit(peer(1), &datagram(1, 0, b"")),
            Err(Dropped::Short(8))
        );
        assert_eq!(
            t.admit(peer(1), &datagram(1, 2, b"get k\r\n")),
            Err(Dropped::MultiDatagram(2))
        );
        assert_eq!(
            t.admit(peer(1), &datagram(1, 0, b"get k\r\n")),
            Err(Dropped::MultiDatagram(0))
        );
        let d7 = datagram(7, 1, b"get k\r\n");
        let ok = t.admit(peer(1), &d7).unwrap();
        assert_eq!((ok.request_id, ok.payload), (7, &b"get k\r\n"[..]));
        // The same id from the same peer while in flight: a retransmission.
        assert_eq!(
            t.admit(peer(1), &datagram(7, 1, b"get k\r\n")),
            Err(Dropped::Duplicate(7))
        );
        // The same id from another peer is another request.
        assert!(t.admit(peer(2), &datagram(7, 1, b"get k\r\n")).is_ok());
        assert_eq!(
            t.admit(peer(3), &datagram(1, 1, b"get k\r\n")),
            Err(Dropped::Full(2))
        );
        t.done(peer(1), 7);
        assert_eq!(t.in_flight(), 1);
        assert!(t.admit(peer(3), &datagram(1, 1, b"get k\r\n")).is_ok());
        let s = t.stats;
        assert_eq!(
            (s.received, s.admitted, s.dropped_short, s.dropped_multi),
            (9, 3, 2, 2)
        );
        assert_eq!((s.dropped_duplicate, s.dropped_full), (1, 1));
    }

    #[test]
    fn a_miss_then_a_hit_go_through_the_machine() {
        let mut t = UdpTable::new(8);
        let mut m = Machine::new(Settings::default());
        let mut asked = Vec::new();
        let mut backend = |b: &[u8]| {
            asked.push(b.to_vec());
            b"VALUE k 5 3 17\r\nabc\r\nEND\r\n".to_vec()
        };
        let miss = serve(
            &mut t,
            &mut m,
            peer(1),
            &datagram(1, 1, b"get k\r\n"),
            &mut backend,
        );
        assert_eq!(
            miss.unwrap(),
            vec![datagram(1, 1, b"VALUE k 5 3\r\nabc\r\nEND\r\n")]
        );
        assert_eq!(asked, vec![b"gets k\r\n".to_vec()]);
        let hit = serve(
            &mut t,
            &mut m,
            peer(2),
            &datagram(2, 1, b"gets k\r\n"),
            &mut no_backend,
        );
        assert_eq!(
            hit.unwrap(),
            vec![datagram(2, 1, b"VALUE k 5 3 17\r\nabc\r\nEND\r\n")]
        );
        assert_eq!(m.stats().hits, 1);
        assert_eq!(t.in_flight(), 0);
        // A noreply write is forwarded and gets no datagram; bad input gets memcached's error.
        let mut stored = |_: &[u8]| b"STORED\r\n".to_vec();
        let quiet = serve(
            &mut t,
            &mut m,
            peer(1),
            &datagram(3, 1, b"set k 0 0 1 noreply\r\nx\r\n"),
            &mut stored,
        );
        assert_eq!(quiet.unwrap(), Vec::<Vec<u8>>::new());
        let bad = serve(
            &mut t,
            &mut m,
            peer(1),
            &datagram(4, 1, b"bogus\r\n"),
            &mut no_backend,
        );
        assert_eq!(bad.unwrap(), vec![datagram(4, 1, b"ERROR\r\n")]);
    }

    /// A write over TCP invalidates what UDP readers would be served: the
    /// same machine, so the consistency promise spans both.
    #[test]
    fn a_tcp_write_is_seen_by_the_next_udp_read() {
        let mut t = UdpTable::new(8);
        let mut m = Machine::new(Settings::default());
        let now = Now::read();
        let mut old = |_: &[u8]| b"VALUE k 0 3 1\r\nold\r\nEND\r\n".to_vec();
        serve(
            &mut t,
            &mut m,
            peer(1),
            &datagram(1, 1, b"get k\r\n"),
            &mut old,
        )
        .unwrap();
        let hit = serve(
            &mut t,
            &mut m,
            peer(1),
            &datagram(2, 1, b"get k\r\n"),
            &mut no_backend,
        );
        assert_eq!(
            hit.unwrap(),
            vec![datagram(2, 1, b"VALUE k 0 3\r\nold\r\nEND\r\n")]
        );
        // A TCP client sets k; memcached answers STORED.
        let tcp = InlineMachine::open(&mut m);
        InlineMachine::client_input(&mut m, tcp, b"set k 0 0 3\r\nnew\r\n", now);
        assert_eq!(
            std::mem::take(InlineMachine::backend_out(&mut m, tcp).unwrap()),
            b"set k 0 0 3\r\nnew\r\n"
        );
        InlineMachine::backend_input(&mut m, tcp, b"STORED\r\n", now);
        assert_eq!(
            std::mem::take(InlineMachine::client_out(&mut m, tcp).unwrap()),
            b"STORED\r\n"
        );
        // The next UDP read is not served the old value from the cache.
        let mut new = |b: &[u8]| {
            assert_eq!(b, b"gets k\r\n");
            b"VALUE k 0 3 2\r\nnew\r\nEND\r\n".to_vec()
        };
        let after = serve(
            &mut t,
            &mut m,
            peer(1),
            &datagram(3, 1, b"get k\r\n"),
            &mut new,
        );
        assert_eq!(
            after.unwrap(),
            vec![datagram(3, 1, b"VALUE k 0 3\r\nnew\r\nEND\r\n")]
        );
    }

    #[test]
    fn a_large_value_spans_datagrams_and_an_oversized_answer_is_replaced() {
        let mut t = UdpTable::new(8);
        let mut m = Machine::new(Settings::default());
        let value: Vec<u8> = (0..5000u32).map(|i| b'a' + (i % 26) as u8).collect();
        let mut reply = format!("VALUE big 0 {} 9\r\n", value.len()).into_bytes();
        reply.extend_from_slice(&value);
        reply.extend_from_slice(b"\r\nEND\r\n");
        let mut backend = |_: &[u8]| reply.clone();
        let ds = serve(
            &mut t,
            &mut m,
            peer(1),
            &datagram(77, 1, b"get big\r\n"),
            &mut backend,
        )
        .unwrap();
        assert_eq!(ds.len(), 4);
        let mut want = format!("VALUE big 0 {}\r\n", value.len()).into_bytes();
        want.extend_from_slice(&value);
        want.extend_from_slice(b"\r\nEND\r\n");
        assert_eq!(reassemble(77, ds), want);
        assert_eq!(t.answer(5, None, &[]), vec![datagram(5, 1, TOO_LARGE)]);
        assert_eq!(
            t.answer(5, Some(&vec![0; MAX_ANSWER_BYTES + 1]), &[]),
            vec![datagram(5, 1, TOO_LARGE)]
        );
        assert_eq!(t.stats.answers_too_large, 2);
    }
}
