//! The driver's part of a swap: it runs the [`SwapController`] (the safety
//! sequence, `docs/control.md`) and carries out its commands on the engine
//! (stop dispatch, hand off, resume); the install is the shell's
//! ([`Io::Install`]).

use super::{Driver, Io};
use offrac_control::{Command, SwapController, SwapError, Target};
use offrac_core::{ConnId, Instant, SlotId};
use offrac_proto::{FunctionId, RequestHeader, ResponseHeader, Status};

/// A control request waiting for its swap's outcome.
#[derive(Debug, Clone)]
pub(super) struct Waiter {
    conn: ConnId,
    header: RequestHeader,
    handed: u64,
    refused: u64,
    /// The tenant that asked: a module it swaps in is its own.
    tenant: u16,
    /// The slot it swaps, if to one of its modules (counts against its
    /// slot quota until answered).
    module_slot: Option<usize>,
    /// The slot, if the autoscaler runs and was told the operator's swap
    /// makes it `Fixed` to its new function (settled with the answer).
    assigned: Option<usize>,
}

/// The controller of a driver whose slots run `targets`.
pub(super) fn controller(
    targets: Vec<Target>,
    drain_timeout: std::time::Duration,
) -> SwapController {
    SwapController::new(targets, drain_timeout, |f| FunctionId::from_id(f).is_some())
}

pub(super) fn status_of(e: &SwapError) -> Status {
    match e {
        SwapError::NoSlot(_) | SwapError::BadFunction(_) | SwapError::Conflict { .. } => {
            Status::BadInput
        }
        SwapError::Busy(_) => Status::Busy,
        SwapError::DrainTimeout(_) => Status::Timeout,
        SwapError::Install(_) => Status::BadInput,
    }
}

impl Driver {
    /// What each slot serves, and whether it is being swapped.
    pub fn slot_targets(&self) -> Vec<(Target, bool)> {
        self.swaps
            .targets()
            .enumerate()
            .map(|(i, t)| (t, self.swaps.is_swapping(i)))
            .collect()
    }

    /// Whether a slot runs (or is being swapped to) module `digest`.
    pub fn module_in_use(&self, digest: &offrac_control::Digest) -> bool {
        self.swaps.uses(digest)
    }

    /// The shell answered a control request ([`Io::Control`]) itself.
    pub fn handle_control_answered(&mut self, now: Instant, conn: ConnId) {
        self.handle_answered(now, conn);
    }

    /// An authenticated hello of `tenant` ([`Io::Control`]) on `conn`:
    /// attribute the connection and answer `OK`, or `BAD_INPUT` if the
    /// connection already belongs to another tenant.
    pub fn handle_hello(&mut self, now: Instant, conn: ConnId, header: RequestHeader, tenant: u16) {
        let (status, msg) = if self.engine.attribute(conn, tenant) {
            (Status::Ok, String::new())
        } else {
            let was = self.engine.tenant_of(conn).unwrap_or_default();
            (
                Status::BadInput,
                format!(
                    "this connection belongs to tenant {was}; open another for tenant {tenant}"
                ),
            )
        };
        let mut h = ResponseHeader::answer(
            &header,
            status,
            self.engine.config().device_id,
            msg.len() as u32,
        );
        h.detail = tenant as u64;
        self.out.push_back(Io::Send {
            conn,
            header: h,
            payload: msg.into_bytes(),
        });
        self.handle_control_answered(now, conn);
    }

    /// An authenticated hello of another node ([`Io::Control`]) on `conn`:
    /// a node link from now on (its hops keep their origin tenant); `OK`, or
    /// `BAD_INPUT` if the connection belongs to a tenant.
    pub fn handle_peer_hello(&mut self, now: Instant, conn: ConnId, header: RequestHeader) {
        let (status, msg) = if self.engine.attribute_peer(conn) {
            (Status::Ok, "")
        } else {
            (Status::BadInput, "this connection belongs to a tenant")
        };
        let h = ResponseHeader::answer(
            &header,
            status,
            self.engine.config().device_id,
            msg.len() as u32,
        );
        self.out.push_back(Io::Send {
            conn,
            header: h,
            payload: msg.as_bytes().to_vec(),
        });
        self.handle_control_answered(now, conn);
    }

    /// Which tenant owns `function` (a module it swapped in), if any.
    pub fn function_owner(&self, function: u8) -> Option<u16> {
        self.engine.owner(function)
    }

    /// An authenticated swap of `slot` to `target`, asked by `tenant` with
    /// the control request `header` on `conn` ([`Io::Control`]); answered
    /// when done.
    pub fn handle_swap(
        &mut self,
        now: Instant,
        conn: ConnId,
        header: RequestHeader,
        slot: usize,
        target: Target,
        tenant: u16,
    ) {
        if let Target::Wasm { digest, .. } = target {
            if self.unloading(&digest) {
                let msg = "this module is being unloaded; retry".to_string();
                self.answer_control_request(now, conn, &header, Status::Busy, 0, msg);
                return;
            }
        }
        let module_slot = matches!(target, Target::Wasm { .. }).then_some(slot);
        if let Some(max) = self.slot_quota_hit(tenant, module_slot) {
            let msg = format!("tenant {tenant}'s modules may occupy at most {max} slots");
            let mut h = ResponseHeader::answer(
                &header,
                Status::QuotaExceeded,
                self.engine.config().device_id,
                msg.len() as u32,
            );
            h.detail = max as u64;
            self.out.push_back(Io::Send {
                conn,
                header: h,
                payload: msg.into_bytes(),
            });
            self.handle_control_answered(now, conn);
            return;
        }
        // An operator's swap makes the slot the operator's: the autoscaler
        // neither takes it as spare nor counts it for its old function.
        let function = target.function();
        let assigned = self
            .autoscale
            .as_mut()
            .is_some_and(|a| a.assign(slot, offrac_control::SlotRole::Fixed(function)))
            .then_some(slot);
        let token = self.next_swap_token;
        self.next_swap_token += 1;
        self.swap_waiters.insert(
            token,
            Waiter {
                conn,
                header,
                handed: 0,
                refused: 0,
                tenant,
                module_slot,
                assigned,
            },
        );
        // Busy until the hand-off shows otherwise (`run_swaps`).
        self.swaps
            .handle_swap(now.as_nanos(), token, slot, target, true);
        self.run_swaps(now);
    }

    /// `tenant`'s slot quota, if swapping one of its modules into
    /// `module_slot` would go over it: the slots its modules run in, and
    /// those its pending swaps are bringing them to, besides this one.
    fn slot_quota_hit(&self, tenant: u16, module_slot: Option<usize>) -> Option<u32> {
        let slot = module_slot?;
        self.slot_quota_hit_n(tenant, &[slot], 1)
    }

    /// `tenant`'s slot quota, if `n` more slots running its modules (besides
    /// those of `besides`, which it holds or is swapping already) would go
    /// over it.
    pub(super) fn slot_quota_hit_n(&self, tenant: u16, besides: &[usize], n: usize) -> Option<u32> {
        let max = self.engine.tenancy().policy(Some(tenant)).max_slots?;
        let mut held: std::collections::BTreeSet<usize> = self
            .swaps
            .targets()
            .enumerate()
            .filter(|(_, t)| {
                matches!(t, Target::Wasm { .. }) && self.engine.owner(t.function()) == Some(tenant)
            })
            .map(|(i, _)| i)
            .collect();
        held.extend(
            self.swap_waiters
                .values()
                .filter(|w| w.tenant == tenant)
                .filter_map(|w| w.module_slot),
        );
        held.extend(
            self.batches
                .values()
                .flat_map(|p| p.module_slots_of(tenant)),
        );
        // Swaps on their way to one of its modules (the autoscaler's too).
        held.extend((0..self.cfg.slots.len()).filter(|&s| {
            matches!(self.swaps.pending_target(s),
                Some(t @ Target::Wasm { .. }) if self.engine.owner(t.function()) == Some(tenant))
        }));
        for s in besides {
            held.remove(s);
        }
        (held.len() + n > max as usize).then_some(max)
    }

    /// Swap `r` is done: a module is its tenant's (`tenant`), a built-in
    /// everyone's; a function id no slot serves any more is nobody's.
    pub(super) fn note_swapped(&mut self, r: &offrac_control::SwapReport, tenant: Option<u16>) {
        if let Target::Wasm { .. } = r.previous {
            let f = r.previous.function();
            if !self.swaps.targets().any(|t| t.function() == f) {
                self.engine.set_owner(f, None);
            }
        }
        let owner = match r.target {
            Target::Wasm { .. } => tenant,
            Target::Builtin(_) => None,
        };
        self.engine.set_owner(r.target.function(), owner);
    }

    /// The shell carried out [`Io::Install`] for `slot`.
    pub fn handle_installed(&mut self, now: Instant, slot: usize, result: Result<(), String>) {
        self.swaps.handle_installed(now.as_nanos(), slot, result);
        self.run_swaps(now);
    }

    /// A slot finished a run: a slot being drained for a swap may now be idle.
    pub(super) fn swap_slot_freed(&mut self, now: Instant, slot: SlotId) {
        if self.swaps.is_swapping(slot) && !self.engine.slots()[slot].is_busy() {
            self.swaps.handle_slot_idle(now.as_nanos(), slot);
            self.run_swaps(now);
        }
    }

    pub(super) fn swap_timeouts(&mut self, now: Instant) {
        if self
            .swaps
            .poll_timeout()
            .is_some_and(|t| t <= now.as_nanos())
        {
            self.swaps.handle_timeout(now.as_nanos());
            self.run_swaps(now);
        }
    }

    pub(super) fn swap_timeout(&self) -> Option<Instant> {
        self.swaps.poll_timeout().map(Instant::from_nanos)
    }

    pub(super) fn run_swaps(&mut self, now: Instant) {
        let mut changed = false;
        while let Some(cmd) = self.swaps.poll_command() {
            match cmd {
                Command::StopDispatch { slot } => self.engine.pause_slot(now, slot),
                Command::HandOff { slot, to_replica } => {
                    self.swap_counts[slot] = self.engine.hand_off(now, slot, to_replica);
                    // Whether the slot is idle is known only now: the swaps
                    // started with it (a batch, or the autoscaler's decisions)
                    // may have handed work to it before it stopped.
                    if !self.engine.slots()[slot].is_busy() {
                        self.swaps.handle_slot_idle(now.as_nanos(), slot);
                    }
                }
                Command::Install { slot, target } => {
                    self.out.push_back(Io::Install { slot, target })
                }
                Command::Resume { slot, function } => {
                    let configured = &self.cfg.slots[slot];
                    // A swapped-in function always runs on the slot's worker:
                    // the I/O thread's inline instance is the configured one.
                    self.inline_max[slot] = if function == configured.function {
                        configured.inline_max_bytes
                    } else {
                        0
                    };
                    self.engine.resume_slot(now, slot, function);
                }
                Command::Reply { token, outcome } => {
                    if self.batch_reply(now, token, &outcome) {
                        changed |= outcome.is_ok();
                        continue;
                    }
                    if self.autoscale_reply(now, token, outcome.is_ok()) {
                        changed |= outcome.is_ok();
                        continue;
                    }
                    let Some(mut w) = self.swap_waiters.remove(&token) else {
                        continue;
                    };
                    if let (Some(slot), Some(a)) = (w.assigned, &mut self.autoscale) {
                        a.done(slot, outcome.is_ok());
                        if a.role(slot) == Some(offrac_control::SlotRole::Spare) {
                            // Rolled back on a spare slot: it serves nothing.
                            self.engine.pause_slot(now, slot);
                        }
                    }
                    let (status, body) = match &outcome {
                        Ok(r) => {
                            changed = true;
                            self.note_swapped(r, Some(w.tenant));
                            (w.handed, w.refused) = std::mem::take(&mut self.swap_counts[r.slot]);
                            let body = serde_json::json!({
                                "slot": r.slot,
                                "previous": crate::control::target_json(r.slot, &r.previous, false),
                                "target": crate::control::target_json(r.slot, &r.target, false),
                                "total_ns": r.total_ns,
                                "drain_ns": r.drain_ns,
                                "install_ns": r.install_ns,
                                "handed_to_replica": w.handed,
                                "refused_busy": w.refused,
                            });
                            (Status::Ok, body.to_string())
                        }
                        Err(e) => (status_of(e), e.to_string()),
                    };
                    if let Some(c) = self.conns.get_mut(&w.conn) {
                        c.answering -= 1;
                        let payload = body.into_bytes();
                        let header = ResponseHeader::answer(
                            &w.header,
                            status,
                            self.engine.config().device_id,
                            payload.len() as u32,
                        );
                        self.out.push_back(Io::Send {
                            conn: w.conn,
                            header,
                            payload,
                        });
                        self.maybe_shut(now, w.conn);
                    }
                }
            }
        }
        if changed {
            let targets = self.swaps.targets().collect();
            self.out.push_back(Io::SaveSlots { targets });
        }
        self.pump(now);
    }
}
