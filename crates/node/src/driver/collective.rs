//! The driver's part of collectives (`docs/collectives.md`): requests for
//! function 251 leave the engine like control requests; a client's call
//! goes to the sans-IO [`Collectives`] machine and is answered when its
//! collective ends; a message from another rank's node is handed to the
//! machine and acknowledged at once (`OK`, or `BAD_INPUT` if it does not
//! decode). The machine's messages travel on the links to the peers as
//! ordinary requests; a refused message or a link that goes down fails the
//! collectives it concerns.

use super::{Driver, Io, LinkState};
use offrac_collective::{Algorithm, CallId, Collectives, FailKind, Key, Kind, Out};
use offrac_core::{nanos, ConnId, Instant, Job};
use offrac_proto::{RequestHeader, ResponseHeader, Status, FN_COLLECTIVE};
use rustc_hash::FxHashMap;

/// The calls of local clients waiting for their collective.
#[derive(Default)]
pub(super) struct Calls {
    waiting: FxHashMap<CallId, (ConnId, RequestHeader, Instant)>,
    next: CallId,
}

pub(super) fn machine(device: u8, cfg: offrac_collective::Config) -> Collectives {
    Collectives::new(device, cfg)
}

fn status_of(kind: FailKind) -> Status {
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

    /// A complete request for function 251 (the engine has let go of it).
    pub(super) fn collective_request(&mut self, now: Instant, job: Job) {
        let Some(c) = self.conns.get_mut(&job.conn) else {
            return;
        };
        if job.payload.first() == Some(&(Kind::Call as u8)) {
            c.answering += 1;
            let call = self.calls.next;
            self.calls.next += 1;
            self.calls
                .waiting
                .insert(call, (job.conn, job.header, job.first_byte_at));
            let link_of = &self.link_of;
            self.collectives
                .handle_call(now, call, &job.payload, |d| link_of[d as usize].is_some());
        } else {
            let (status, msg) = match self.collectives.handle_message(now, &job.payload) {
                Ok(()) => (Status::Ok, String::new()),
                Err(e) => (Status::BadInput, e.to_string()),
            };
            let me = self.engine.config().device_id;
            let header = ResponseHeader::answer(&job.header, status, me, msg.len() as u32);
            self.out.push_back(Io::Send {
                conn: job.conn,
                header,
                payload: msg.into_bytes(),
            });
        }
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
                } => self.send_collective(now, device, key, message),
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
        result: Result<Vec<u8>, offrac_collective::Failure>,
    ) {
        let Some((conn, req, first_byte)) = self.calls.waiting.remove(&call) else {
            return;
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
                h.exec_ns = nanos(now.saturating_since(first_byte));
                (h, out)
            }
            Err(f) => {
                let mut h =
                    ResponseHeader::answer(&req, status_of(f.kind), me, f.message.len() as u32);
                h.detail = f.device.map_or(0, u64::from);
                (h, f.message.into_bytes())
            }
        };
        self.out.push_back(Io::Send {
            conn,
            header,
            payload,
        });
        self.maybe_shut(now, conn);
    }

    /// A message to another rank's node, on the link to it.
    fn send_collective(&mut self, now: Instant, device: u8, key: Key, message: Vec<u8>) {
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
        let header = RequestHeader::single(id, FN_COLLECTIVE, 0, message.len() as u32);
        l.collective.insert(id, key);
        if l.state == LinkState::Up {
            self.out.push_back(Io::SendLink {
                link,
                header,
                payload: message,
            });
        } else {
            l.waiting.push_back((header, message));
        }
    }
}
