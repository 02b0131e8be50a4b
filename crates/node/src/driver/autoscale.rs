//! The driver's part of autoscaling (`docs/control.md`, "The autoscaler"):
//! every period it hands the policy ([`offrac_control::Autoscaler`]) what
//! each function saw — requests dispatched, `BUSY` refusals, the live
//! `T_acc` — and carries out its decisions as swaps through the same
//! controller and safety sequence as a control request's swap. Spare slots
//! are paused (they serve nothing) until a replica is loaded into them, and
//! paused again when it is reclaimed.

use super::Driver;
use offrac_control::{AutoscaleConfig, Autoscaler, Decision, FunctionLoad, SlotRole, Target};
use offrac_core::Instant;
use offrac_proto::Status;
use std::collections::BTreeMap;
use std::time::Duration;

/// `[autoscale]` of the node's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscaleSettings {
    pub policy: AutoscaleConfig,
    /// How often the policy looks at the figures.
    pub period: Duration,
    /// Slots the autoscaler may load replicas into (spare at start).
    pub spare: Vec<usize>,
}

/// What the autoscaler has done so far (describe answers, metrics, tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct AutoscaleStats {
    pub periods: u64,
    pub replicated: u64,
    pub reclaimed: u64,
    /// Decisions whose swap failed or conflicted (the slot kept its role).
    pub failed: u64,
}

pub(super) struct AutoscaleState {
    scaler: Autoscaler,
    period_ns: u64,
    next: Instant,
    /// Per function: jobs dispatched to its slots this period.
    dispatched: BTreeMap<u8, u64>,
    /// Per function: its `BUSY` refusals counted so far (the engine's totals).
    busy_total: BTreeMap<u8, u64>,
    /// Swap tokens of the autoscaler's decisions: the slot, and whether it
    /// goes back to spare.
    tokens: BTreeMap<u64, (usize, bool)>,
    stats: AutoscaleStats,
}

impl AutoscaleState {
    /// An error when a spare slot does not exist or a setting is out of range.
    pub(super) fn new(s: &AutoscaleSettings, functions: &[u8]) -> Result<AutoscaleState, String> {
        if let Some(&bad) = s.spare.iter().find(|&&i| i >= functions.len()) {
            return Err(format!(
                "spare slot {bad} does not exist ({} slots)",
                functions.len()
            ));
        }
        if s.period.is_zero() {
            return Err("the period must be longer than zero".into());
        }
        let roles = functions
            .iter()
            .enumerate()
            .map(|(i, &f)| {
                if s.spare.contains(&i) {
                    SlotRole::Spare
                } else {
                    SlotRole::Fixed(f)
                }
            })
            .collect();
        let period_ns = s.period.as_nanos().min(u64::MAX as u128) as u64;
        Ok(AutoscaleState {
            scaler: Autoscaler::new(s.policy.clone(), roles).map_err(|e| e.to_string())?,
            period_ns,
            next: Instant::from_nanos(period_ns),
            dispatched: BTreeMap::new(),
            busy_total: BTreeMap::new(),
            tokens: BTreeMap::new(),
            stats: AutoscaleStats::default(),
        })
    }

    pub(super) fn spare_slots(&self) -> Vec<usize> {
        (0..self.scaler.roles().len())
            .filter(|&i| self.scaler.roles()[i] == SlotRole::Spare)
            .collect()
    }

    /// An operator's decision on `slot` (a control request): see
    /// [`Autoscaler::assign`].
    pub(super) fn assign(&mut self, slot: usize, role: SlotRole) -> bool {
        self.scaler.assign(slot, role)
    }

    pub(super) fn free_spares(&self) -> Vec<usize> {
        self.scaler.free_spares()
    }

    pub(super) fn role(&self, slot: usize) -> Option<SlotRole> {
        self.scaler.roles().get(slot).copied()
    }

    /// The swap of an operator's decision on `slot` ended.
    pub(super) fn done(&mut self, slot: usize, ok: bool) {
        self.scaler.swap_done(slot, ok);
    }

    /// A job of `function` was dispatched to a slot.
    pub(super) fn count(&mut self, function: u8) {
        *self.dispatched.entry(function).or_default() += 1;
    }
}

impl Driver {
    pub(super) fn autoscale_timeout(&self) -> Option<Instant> {
        self.autoscale.as_ref().map(|a| a.next)
    }

    /// The autoscaler's roles and counters, if it runs.
    pub fn autoscale_view(&self) -> Option<(Vec<SlotRole>, AutoscaleStats)> {
        self.autoscale
            .as_ref()
            .map(|a| (a.scaler.roles().to_vec(), a.stats))
    }

    /// For describe answers: each slot's role and the counters (`null` when
    /// the autoscaler does not run).
    pub(super) fn autoscale_json(&self) -> serde_json::Value {
        let Some((roles, stats)) = self.autoscale_view() else {
            return serde_json::Value::Null;
        };
        let roles: Vec<serde_json::Value> = roles
            .iter()
            .map(|r| match r {
                SlotRole::Fixed(f) => serde_json::json!({ "role": "fixed", "function": f }),
                SlotRole::Spare => serde_json::json!({ "role": "spare" }),
                SlotRole::Replica(f) => serde_json::json!({ "role": "replica", "function": f }),
            })
            .collect();
        serde_json::json!({ "slots": roles, "stats": stats })
    }

    /// The period ended: ask the policy, start its swaps.
    pub(super) fn autoscale_tick(&mut self, now: Instant) {
        let Some(a) = &mut self.autoscale else {
            return;
        };
        if now < a.next {
            return;
        }
        // A node that was not woken for a while starts a fresh period.
        a.next = if now.as_nanos() - a.next.as_nanos() > a.period_ns {
            Instant::from_nanos(now.as_nanos() + a.period_ns)
        } else {
            Instant::from_nanos(a.next.as_nanos() + a.period_ns)
        };
        let busy_code = Status::Busy.code();
        let mut busy = BTreeMap::new();
        for (&(f, s), &n) in &self.engine.stats().refusals_by_function {
            if s == busy_code {
                let before = a.busy_total.insert(f, n).unwrap_or(0);
                if n > before {
                    busy.insert(f, n - before);
                }
            }
        }
        let mut functions: Vec<u8> = a.dispatched.keys().chain(busy.keys()).copied().collect();
        functions.sort_unstable();
        functions.dedup();
        let loads: Vec<FunctionLoad> = functions
            .into_iter()
            .map(|f| {
                let refused = busy.get(&f).copied().unwrap_or(0);
                FunctionLoad {
                    function: f,
                    arrivals: a.dispatched.get(&f).copied().unwrap_or(0) + refused,
                    busy: refused,
                    t_acc_ns: self.estimates.mean_t_acc_ns(f).unwrap_or(0.0),
                }
            })
            .collect();
        a.dispatched.clear();
        a.stats.periods += 1;
        let t_oh = self.estimates.t_oh_ns.unwrap_or(0.0);
        let decisions = a.scaler.observe(a.period_ns, t_oh, &loads);
        if decisions.is_empty() {
            return;
        }
        for d in decisions {
            let (slot, target, reclaim) = match d {
                Decision::Replicate { function, slot } => match self.replica_of(function) {
                    Some(target) => (slot, target, false),
                    None => {
                        // Nothing to load (its module is gone or being
                        // unloaded, or its tenant is at its slot quota):
                        // the policy hears of a failed swap, the slot stays spare.
                        tracing::info!(slot, function, "autoscaler: no replica to load");
                        if let Some(a) = &mut self.autoscale {
                            a.scaler.swap_done(slot, false);
                            a.stats.failed += 1;
                        }
                        continue;
                    }
                },
                Decision::Reclaim { slot } => {
                    (slot, Target::Builtin(self.cfg.slots[slot].function), true)
                }
            };
            let token = self.next_swap_token;
            self.next_swap_token += 1;
            tracing::info!(slot, ?target, reclaim, "autoscaler: swap");
            if let Some(a) = &mut self.autoscale {
                a.tokens.insert(token, (slot, reclaim));
            }
            // Busy until the hand-off shows otherwise (`run_swaps`): a
            // donor's hand-off may give work to another decision's slot.
            self.swaps
                .handle_swap(now.as_nanos(), token, slot, target, true);
        }
        self.run_swaps(now);
    }

    /// What a replica of `function` loads: the built-in, or the module a slot
    /// serves under that id (held by its tenant, whose `max_slots` counts
    /// the replica). None if there is nothing to load.
    fn replica_of(&self, function: u8) -> Option<Target> {
        if offrac_proto::FunctionId::from_id(function).is_some() {
            return Some(Target::Builtin(function));
        }
        let module = self
            .swaps
            .targets()
            .find(|t| matches!(t, Target::Wasm { .. }) && t.function() == function)?;
        if let Target::Wasm { digest, .. } = module {
            if self.unloading(&digest) {
                return None;
            }
        }
        match self.engine.owner(function) {
            Some(tenant) if self.slot_quota_hit_n(tenant, &[], 1).is_some() => None,
            _ => Some(module),
        }
    }

    /// The outcome of swap `token`, if it was the autoscaler's.
    pub(super) fn autoscale_reply(&mut self, now: Instant, token: u64, ok: bool) -> bool {
        let Some(a) = &mut self.autoscale else {
            return false;
        };
        let Some((slot, reclaim)) = a.tokens.remove(&token) else {
            return false;
        };
        a.scaler.swap_done(slot, ok);
        match (ok, reclaim) {
            (true, true) => {
                a.stats.reclaimed += 1;
                // Spare again: it serves nothing until the next replica.
                self.engine.pause_slot(now, slot);
            }
            (true, false) => a.stats.replicated += 1,
            (false, _) => {
                a.stats.failed += 1;
                // A rolled-back replica resumes the slot's old function: a
                // slot that is still spare must stay out of service.
                if a.scaler.roles()[slot] == SlotRole::Spare {
                    self.engine.pause_slot(now, slot);
                }
            }
        }
        true
    }
}
