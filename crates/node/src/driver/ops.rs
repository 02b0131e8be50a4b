//! The driver's part of the control operations over several slots
//! (`docs/control.md`, "Forced unload", "Replicate"): planned by
//! [`offrac_control::ops`], each carried out as a batch of ordinary swaps
//! through the swap controller (the same safety sequence, the same
//! roll-back), answered once every swap of the batch has ended.

use super::{Driver, Io};
use offrac_control::{
    plan_replicate, plan_resize, plan_shrink, plan_unload, Batch, Digest, OpError, SlotRole,
    SwapError, SwapReport, Target,
};
use offrac_core::{ConnId, Instant};
use offrac_proto::{RequestHeader, Status};

/// What a batch is for.
#[derive(Debug, Clone)]
pub(super) enum Kind {
    /// A forced unload of `digest`: once its slots are swapped out, the
    /// shell removes the module ([`Io::RemoveModule`]).
    Unload { digest: Digest },
    /// A replicate of `target` into spare slots.
    Replicate { target: Target },
    /// A shrink of `function`'s spare slots back to spare.
    Shrink { function: u8 },
    /// A resize to the template `name`.
    Resize { name: String },
}

/// A multi-slot control request waiting for its swaps.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    conn: ConnId,
    header: RequestHeader,
    tenant: u16,
    kind: Kind,
    batch: Batch,
    /// Per swapped slot: requests handed to a replica / refused `BUSY`.
    counts: Vec<(usize, u64, u64)>,
}

impl Pending {
    /// The slots a replicate of one of `tenant`'s modules is loading it into
    /// (they count against its slot quota until answered).
    pub(super) fn module_slots_of(&self, tenant: u16) -> Vec<usize> {
        match self.kind {
            Kind::Replicate {
                target: Target::Wasm { .. },
            } if self.tenant == tenant => self.batch.pending_slots(),
            _ => Vec::new(),
        }
    }

    /// Whether this batch removes module `d` once done.
    pub(super) fn unloads(&self, d: &Digest) -> bool {
        matches!(&self.kind, Kind::Unload { digest } if digest == d)
    }
}

fn op_status(e: &OpError) -> (Status, u64) {
    match e {
        OpError::Busy(slot) => (Status::Busy, *slot as u64),
        OpError::NotEnoughSpares { available, .. } => (Status::Busy, *available as u64),
    }
}

fn report_json(r: &SwapReport, handed: u64, refused: u64) -> serde_json::Value {
    serde_json::json!({
        "slot": r.slot,
        "previous": crate::control::target_json(r.slot, &r.previous, false),
        "target": crate::control::target_json(r.slot, &r.target, false),
        "total_ns": r.total_ns,
        "drain_ns": r.drain_ns,
        "install_ns": r.install_ns,
        "handed_to_replica": handed,
        "refused_busy": refused,
    })
}

impl Driver {
    /// Answer a control request of `conn` from the driver (it was handed
    /// to the shell as [`Io::Control`]).
    pub(super) fn answer_control_request(
        &mut self,
        now: Instant,
        conn: ConnId,
        header: &RequestHeader,
        status: Status,
        detail: u64,
        body: String,
    ) {
        let payload = body.into_bytes();
        let mut h = offrac_proto::ResponseHeader::answer(
            header,
            status,
            self.engine.config().device_id,
            payload.len() as u32,
        );
        h.detail = detail;
        self.out.push_back(Io::Send {
            conn,
            header: h,
            payload,
        });
        self.handle_control_answered(now, conn);
    }

    /// Whether a forced unload of module `d` is under way (a swap or a
    /// replicate to it is refused `BUSY` meanwhile).
    pub(super) fn unloading(&self, d: &Digest) -> bool {
        self.batches.values().any(|p| p.unloads(d))
    }

    /// An authenticated forced `UNLOAD` of module `digest` by `tenant` (the
    /// shell checked that it is the tenant's alone): every slot running it
    /// is swapped to its configured built-in, then the shell removes it
    /// ([`Io::RemoveModule`]).
    pub fn handle_unload(
        &mut self,
        now: Instant,
        conn: ConnId,
        header: RequestHeader,
        digest: Digest,
        tenant: u16,
    ) {
        if self.unloading(&digest) {
            let msg = "this module is being unloaded already; retry".to_string();
            self.answer_control_request(now, conn, &header, Status::Busy, 0, msg);
            return;
        }
        let slots = match plan_unload(&self.swaps, &digest) {
            Ok(s) => s,
            Err(e) => {
                let (status, detail) = op_status(&e);
                self.answer_control_request(now, conn, &header, status, detail, e.to_string());
                return;
            }
        };
        if slots.is_empty() {
            // No slot runs it (any more): the shell removes it at once.
            self.out.push_back(Io::RemoveModule {
                conn,
                header,
                digest,
                tenant,
                swapped: serde_json::json!([]),
            });
            return;
        }
        let spare = self
            .cfg
            .autoscale
            .as_ref()
            .map(|a| a.spare.clone())
            .unwrap_or_default();
        for &slot in &slots {
            // A configured spare slot goes back to being spare.
            if spare.contains(&slot) {
                if let Some(a) = &mut self.autoscale {
                    a.assign(slot, SlotRole::Spare);
                }
            }
        }
        let swaps = self.to_builtins(&slots);
        self.start_batch(now, conn, header, tenant, Kind::Unload { digest }, swaps);
    }

    /// An authenticated `REPLICATE` of `target`, `n` more instances, by
    /// `tenant`: all or nothing over the autoscaler's free spare slots.
    pub fn handle_replicate(
        &mut self,
        now: Instant,
        conn: ConnId,
        header: RequestHeader,
        target: Target,
        n: usize,
        tenant: u16,
    ) {
        if let Target::Wasm { digest, .. } = target {
            if self.unloading(&digest) {
                let msg = "this module is being unloaded; retry".to_string();
                self.answer_control_request(now, conn, &header, Status::Busy, 0, msg);
                return;
            }
            if let Some(max) = self.slot_quota_hit_n(tenant, &[], n) {
                let msg = format!("tenant {tenant}'s modules may occupy at most {max} slots");
                self.answer_control_request(
                    now,
                    conn,
                    &header,
                    Status::QuotaExceeded,
                    max as u64,
                    msg,
                );
                return;
            }
        }
        let spares = self
            .autoscale
            .as_ref()
            .map(|a| a.free_spares())
            .unwrap_or_default();
        let slots = match plan_replicate(&self.swaps, &spares, n) {
            Ok(s) => s,
            Err(e) => {
                let (status, detail) = op_status(&e);
                self.answer_control_request(now, conn, &header, status, detail, e.to_string());
                return;
            }
        };
        for &slot in &slots {
            if let Some(a) = &mut self.autoscale {
                // An operator's replica: the autoscaler never reclaims it.
                a.assign(slot, SlotRole::Fixed(target.function()));
            }
        }
        let swaps = slots.iter().map(|&slot| (slot, target)).collect();
        self.start_batch(now, conn, header, tenant, Kind::Replicate { target }, swaps);
    }

    /// An authenticated `SHRINK` of `function` to `keep` spare slots: the
    /// configured spare slots serving it beyond `keep` (highest first) are
    /// swapped back to their configured built-in and become spare again.
    /// Configured (not spare) slots are never touched.
    pub fn handle_shrink(
        &mut self,
        now: Instant,
        conn: ConnId,
        header: RequestHeader,
        function: u8,
        keep: usize,
        tenant: u16,
    ) {
        let spare = self
            .cfg
            .autoscale
            .as_ref()
            .map(|a| a.spare.clone())
            .unwrap_or_default();
        let targets: Vec<Target> = self.swaps.targets().collect();
        let serving: Vec<usize> = spare
            .iter()
            .copied()
            .filter(|&s| {
                targets.get(s).is_some_and(|t| t.function() == function)
                    && !self.engine.is_paused(s)
            })
            .collect();
        let slots = match plan_shrink(&self.swaps, &serving, keep) {
            Ok(s) => s,
            Err(e) => {
                let (status, detail) = op_status(&e);
                self.answer_control_request(now, conn, &header, status, detail, e.to_string());
                return;
            }
        };
        if slots.is_empty() {
            let body = serde_json::json!({ "function": function, "slots": [], "swaps": [] });
            self.answer_control_request(now, conn, &header, Status::Ok, 0, body.to_string());
            return;
        }
        for &slot in &slots {
            if let Some(a) = &mut self.autoscale {
                a.assign(slot, SlotRole::Spare);
            }
        }
        let swaps = self.to_builtins(&slots);
        self.start_batch(now, conn, header, tenant, Kind::Shrink { function }, swaps);
    }

    /// An authenticated `RESIZE` to the configured template `name`: every
    /// slot whose function differs from the template's is swapped to it,
    /// all as one batch. Refused: an unknown template (`BAD_INPUT`), a node
    /// with an autoscaler (`UNSUPPORTED`: its spare slots are the policy's),
    /// a slot running another tenant's module (`BAD_INPUT`), a slot being
    /// swapped (`BUSY`).
    pub fn handle_resize(
        &mut self,
        now: Instant,
        conn: ConnId,
        header: RequestHeader,
        name: &str,
        tenant: u16,
    ) {
        let refuse = |d: &mut Driver, status: Status, detail: u64, msg: String| {
            d.answer_control_request(now, conn, &header, status, detail, msg);
        };
        let Some((_, functions)) = self.cfg.templates.iter().find(|(n, _)| n == name) else {
            return refuse(self, Status::BadInput, 0, format!("no template {name:?}"));
        };
        let template: Vec<Target> = functions.iter().map(|&f| Target::Builtin(f)).collect();
        if template.len() != self.cfg.slots.len() {
            let msg = format!(
                "template {name:?} names {} slots, the node has {}",
                template.len(),
                self.cfg.slots.len()
            );
            return refuse(self, Status::BadInput, 0, msg);
        }
        if self.autoscale.is_some() {
            let msg = "a node with an autoscaler keeps its slot arrangement".to_string();
            return refuse(self, Status::Unsupported, 0, msg);
        }
        let changes = match plan_resize(&self.swaps, &template) {
            Ok(c) => c,
            Err(e) => {
                let (status, detail) = op_status(&e);
                return refuse(self, status, detail, e.to_string());
            }
        };
        let targets: Vec<Target> = self.swaps.targets().collect();
        if let Some(&(slot, _)) = changes.iter().find(|(s, _)| {
            matches!(targets[*s], Target::Wasm { function, .. }
                if self.engine.owner(function).is_some_and(|o| o != tenant))
        }) {
            let msg = format!("slot {slot} runs another tenant's module");
            return refuse(self, Status::BadInput, slot as u64, msg);
        }
        if changes.is_empty() {
            let body = serde_json::json!({ "template": name, "slots": [], "swaps": [] });
            return refuse(self, Status::Ok, 0, body.to_string());
        }
        let kind = Kind::Resize {
            name: name.to_string(),
        };
        self.start_batch(now, conn, header, tenant, kind, changes);
    }

    /// Each of `slots` back to the built-in it is configured with.
    fn to_builtins(&self, slots: &[usize]) -> Vec<(usize, Target)> {
        slots
            .iter()
            .map(|&slot| (slot, Target::Builtin(self.cfg.slots[slot].function)))
            .collect()
    }

    /// Start `swaps` (slot, target) as one batch of `kind`, answered on
    /// `conn` once every swap of it is done (`batch_reply`). The callers
    /// answer an empty plan themselves.
    fn start_batch(
        &mut self,
        now: Instant,
        conn: ConnId,
        header: RequestHeader,
        tenant: u16,
        kind: Kind,
        swaps: Vec<(usize, Target)>,
    ) {
        let parts: Vec<(u64, usize)> = swaps
            .iter()
            .map(|&(slot, _)| {
                let token = self.next_swap_token;
                self.next_swap_token += 1;
                (token, slot)
            })
            .collect();
        let Some(&(id, _)) = parts.first() else {
            debug_assert!(false, "an empty batch is never answered");
            return;
        };
        self.batches.insert(
            id,
            Pending {
                conn,
                header,
                tenant,
                kind,
                batch: Batch::new(parts.iter().copied()),
                counts: Vec::new(),
            },
        );
        for ((token, slot), (_, target)) in parts.into_iter().zip(swaps) {
            // Busy until its hand-off shows otherwise (`run_swaps`): the
            // hand-off of another slot of the batch may give it work first.
            self.swaps
                .handle_swap(now.as_nanos(), token, slot, target, true);
        }
        self.run_swaps(now);
    }

    /// The outcome of swap `token`, if it belongs to a batch; the batch is
    /// answered once complete.
    pub(super) fn batch_reply(
        &mut self,
        now: Instant,
        token: u64,
        outcome: &Result<SwapReport, SwapError>,
    ) -> bool {
        let Some((&id, p)) = self.batches.iter_mut().find(|(_, p)| p.batch.has(token)) else {
            return false;
        };
        let tenant = p.tenant;
        let kind = p.kind.clone();
        let slot = match outcome {
            Ok(r) => r.slot,
            Err(_) => p.batch.slot_of(token).unwrap_or(usize::MAX),
        };
        if let Ok(r) = outcome {
            let (handed, refused) = std::mem::take(&mut self.swap_counts[r.slot]);
            p.counts.push((r.slot, handed, refused));
        }
        let complete = p.batch.record(token, outcome.clone());
        // The autoscaler's view of the slot follows the outcome.
        let was_spare = self
            .autoscale
            .as_ref()
            .is_some_and(|a| a.role(slot) == Some(SlotRole::Spare));
        if let Some(a) = &mut self.autoscale {
            a.done(slot, outcome.is_ok());
        }
        let now_spare = self
            .autoscale
            .as_ref()
            .is_some_and(|a| a.role(slot) == Some(SlotRole::Spare));
        match (&kind, outcome) {
            (_, Ok(r)) => {
                let owner = match kind {
                    Kind::Replicate { .. } => Some(tenant),
                    Kind::Unload { .. } | Kind::Shrink { .. } | Kind::Resize { .. } => None,
                };
                self.note_swapped(r, owner);
                if now_spare {
                    // Back to spare: it serves nothing until the next replica.
                    self.engine.pause_slot(now, slot);
                }
            }
            (Kind::Replicate { .. }, Err(_)) if was_spare => {
                // A rolled-back replica resumed the spare's old function.
                self.engine.pause_slot(now, slot);
            }
            _ => {}
        }
        if complete {
            if let Some(p) = self.batches.remove(&id) {
                self.finish_batch(now, p);
            }
        }
        true
    }

    fn finish_batch(&mut self, now: Instant, p: Pending) {
        let reports: Vec<serde_json::Value> = p
            .batch
            .outcomes()
            .iter()
            .filter_map(|(_, o)| o.as_ref().ok())
            .map(|r| {
                let (h, b) = p
                    .counts
                    .iter()
                    .find(|(s, _, _)| *s == r.slot)
                    .map(|&(_, h, b)| (h, b))
                    .unwrap_or((0, 0));
                report_json(r, h, b)
            })
            .collect();
        let swapped = p.batch.swapped();
        if let Some((slot, e)) = p.batch.first_error() {
            let status = super::control::status_of(e);
            let what = match p.kind {
                Kind::Unload { .. } => "the module stays in the library",
                Kind::Replicate { .. } => "the replicas loaded stay",
                Kind::Shrink { .. } => "the slots given back stay spare",
                Kind::Resize { .. } => "the slots already swapped keep the template's function",
            };
            let msg = format!("slot {slot}: {e}; {what} (swapped: {swapped:?})");
            self.answer_control_request(now, p.conn, &p.header, status, slot as u64, msg);
            return;
        }
        match p.kind {
            Kind::Unload { digest } => self.out.push_back(Io::RemoveModule {
                conn: p.conn,
                header: p.header,
                digest,
                tenant: p.tenant,
                swapped: serde_json::Value::Array(reports),
            }),
            Kind::Replicate {
                target: Target::Builtin(function) | Target::Wasm { function, .. },
            }
            | Kind::Shrink { function } => {
                let body = serde_json::json!({
                    "function": function,
                    "slots": swapped,
                    "swaps": reports,
                });
                self.answer_control_request(
                    now,
                    p.conn,
                    &p.header,
                    Status::Ok,
                    0,
                    body.to_string(),
                );
            }
            Kind::Resize { name } => {
                let body = serde_json::json!({
                    "template": name,
                    "slots": swapped,
                    "swaps": reports,
                });
                self.answer_control_request(
                    now,
                    p.conn,
                    &p.header,
                    Status::Ok,
                    0,
                    body.to_string(),
                );
            }
        }
    }
}
