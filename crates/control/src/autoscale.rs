//! The autoscaler (OffRAC §6's "next step"): a sans-IO policy that watches
//! each function's load and loads another instance of a function into a
//! spare slot when its demand keeps exceeding what its slots can serve, and
//! gives idle replicas back, with hysteresis both ways.
//!
//! Demand is the provisioning model of seed 001 §III-C applied live: a
//! function with arrival rate λ and per-request cost `T_oh + T_acc` needs
//! `N = ceil(λ · (T_oh + T_acc) / ρ)` slots at a target utilisation ρ. The
//! caller (the node, or the simulator) measures λ, `T_acc`, `T_oh` and the
//! `BUSY` refusals of each period and passes them in with the time; the
//! autoscaler answers with [`Decision`]s, which the caller carries out with
//! the swap controller and reports back ([`Autoscaler::swap_done`]). No
//! clock reads, no I/O: the node and the simulator run the same decisions.
//!
//! Slots have roles: `Fixed` slots are the configured provisioning and are
//! never touched; `Spare` slots are the pool replicas come from and return
//! to. A function is never left without a slot it had: only replicas are
//! reclaimed.

use std::collections::BTreeMap;

/// The autoscaler's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct AutoscaleConfig {
    /// Target utilisation ρ of a slot (0 < ρ ≤ 1): below 1 so queues stay short.
    pub target_utilisation: f64,
    /// Consecutive periods a function must want more slots (or see `BUSY`
    /// refusals) before a replica is added: filters a single burst.
    pub grow_periods: u32,
    /// Consecutive periods a function must need fewer slots than it has
    /// before a replica is reclaimed: longer than `grow_periods`, so a
    /// function that oscillates keeps its replica (hysteresis).
    pub shrink_periods: u32,
    /// Replicas added per function per period at most (a burst of demand
    /// grows the function step by step, each step checked by the next
    /// period's figures).
    pub max_step: usize,
}

impl Default for AutoscaleConfig {
    fn default() -> AutoscaleConfig {
        AutoscaleConfig {
            target_utilisation: 0.7,
            grow_periods: 2,
            shrink_periods: 8,
            max_step: 2,
        }
    }
}

/// What a slot is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotRole {
    /// Configured for this function; never swapped by the autoscaler.
    Fixed(u8),
    /// Free for a replica.
    Spare,
    /// A replica of this function, loaded by the autoscaler.
    Replica(u8),
}

/// One function's figures for the period that just ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FunctionLoad {
    pub function: u8,
    /// Requests that arrived for it.
    pub arrivals: u64,
    /// Of those, refused `BUSY` (no room to queue them).
    pub busy: u64,
    /// Its mean execution time `T_acc` (ns); 0 when unknown.
    pub t_acc_ns: f64,
}

/// What the caller should do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Swap `slot` to `function`: a spare, or (no spare left) a replica of
    /// a function with slots beyond its need.
    Replicate { function: u8, slot: usize },
    /// Swap replica `slot` back to spare.
    Reclaim { slot: usize },
}

/// Why the autoscaler cannot start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AutoscaleError {
    #[error("target utilisation {0} is not in (0, 1]")]
    Utilisation(f64),
    #[error("grow_periods and shrink_periods must be at least 1, and max_step at least 1")]
    Periods,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Streak {
    grow: u32,
    shrink: u32,
}

/// The policy's state: slot roles, swaps in flight, per-function streaks.
#[derive(Debug, Clone)]
pub struct Autoscaler {
    cfg: AutoscaleConfig,
    roles: Vec<SlotRole>,
    /// Slots with a decision the caller has not reported done, and the role
    /// they will have.
    pending: BTreeMap<usize, SlotRole>,
    streaks: BTreeMap<u8, Streak>,
}

impl Autoscaler {
    pub fn new(cfg: AutoscaleConfig, roles: Vec<SlotRole>) -> Result<Autoscaler, AutoscaleError> {
        if !(cfg.target_utilisation > 0.0 && cfg.target_utilisation <= 1.0) {
            return Err(AutoscaleError::Utilisation(cfg.target_utilisation));
        }
        if cfg.grow_periods == 0 || cfg.shrink_periods == 0 || cfg.max_step == 0 {
            return Err(AutoscaleError::Periods);
        }
        Ok(Autoscaler {
            cfg,
            roles,
            pending: BTreeMap::new(),
            streaks: BTreeMap::new(),
        })
    }

    pub fn roles(&self) -> &[SlotRole] {
        &self.roles
    }

    /// Slots serving `function` now or about to (a replica being loaded
    /// counts, one being reclaimed does not).
    pub fn serving(&self, function: u8) -> usize {
        (0..self.roles.len())
            .filter(|i| {
                let role = self.pending.get(i).copied().unwrap_or(self.roles[*i]);
                matches!(role, SlotRole::Fixed(f) | SlotRole::Replica(f) if f == function)
            })
            .count()
    }

    /// Slots `function` needs for `load` over a period of `period_ns`, with a
    /// per-request overhead `t_oh_ns`: `ceil(λ (T_oh + T_acc) / ρ)`, at least
    /// one while it is called.
    pub fn needed(&self, load: &FunctionLoad, period_ns: u64, t_oh_ns: f64) -> usize {
        if load.arrivals == 0 || period_ns == 0 {
            return 0;
        }
        let busy_ns = load.arrivals as f64 * (t_oh_ns.max(0.0) + load.t_acc_ns.max(0.0));
        let n = (busy_ns / (period_ns as f64 * self.cfg.target_utilisation)).ceil();
        (n as usize).max(1)
    }

    /// The period of `period_ns` that just ended: its per-function figures
    /// and the node's `T_oh`. Returns what to swap now.
    pub fn observe(
        &mut self,
        period_ns: u64,
        t_oh_ns: f64,
        loads: &[FunctionLoad],
    ) -> Vec<Decision> {
        let mut wants: Vec<(usize, u8, usize)> = Vec::new(); // (deficit, function, step)
        let mut out = Vec::new();
        // Slots each function had beyond its need this period: what a
        // function short of slots may take once no spare is left.
        let mut surplus: BTreeMap<u8, usize> =
            self.streaks.keys().map(|&f| (f, self.serving(f))).collect();
        for load in loads {
            let need = self.needed(load, period_ns, t_oh_ns);
            let have = self.serving(load.function);
            surplus.insert(load.function, have.saturating_sub(need));
            let streak = self.streaks.entry(load.function).or_default();
            if need > have || load.busy > 0 {
                streak.grow += 1;
                streak.shrink = 0;
                if streak.grow >= self.cfg.grow_periods {
                    let step = need.saturating_sub(have).clamp(1, self.cfg.max_step);
                    wants.push((need.saturating_sub(have), load.function, step));
                }
            } else if need < have {
                streak.shrink += 1;
                streak.grow = 0;
            } else {
                *streak = Streak::default();
            }
        }
        // Functions not seen this period had no arrivals: they shrink too.
        let seen: Vec<u8> = loads.iter().map(|l| l.function).collect();
        for (f, s) in self.streaks.iter_mut() {
            if !seen.contains(f) {
                s.grow = 0;
                s.shrink += 1;
            }
        }
        // The largest deficit first gets the spare slots.
        wants.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        // A function that wants more gives none away.
        for (_, function, _) in &wants {
            surplus.remove(function);
        }
        for (_, function, step) in wants {
            for _ in 0..step {
                let Some(slot) = self.spare_slot().or_else(|| self.donor_slot(&mut surplus)) else {
                    break;
                };
                self.pending.insert(slot, SlotRole::Replica(function));
                out.push(Decision::Replicate { function, slot });
            }
            if let Some(s) = self.streaks.get_mut(&function) {
                s.grow = 0;
            }
        }
        // One replica back per function per period, after a long enough calm.
        let calm: Vec<u8> = self
            .streaks
            .iter()
            .filter(|(_, s)| s.shrink >= self.cfg.shrink_periods)
            .map(|(f, _)| *f)
            .collect();
        for function in calm {
            if let Some(slot) = self.replica_slot(function) {
                self.pending.insert(slot, SlotRole::Spare);
                out.push(Decision::Reclaim { slot });
            }
            if let Some(s) = self.streaks.get_mut(&function) {
                s.shrink = 0;
            }
        }
        out
    }

    fn spare_slot(&self) -> Option<usize> {
        (0..self.roles.len())
            .find(|i| self.roles[*i] == SlotRole::Spare && !self.pending.contains_key(i))
    }

    /// With no spare left: a replica of the function with the most slots
    /// beyond its need this period (popularity shifted away from it), to be
    /// swapped straight to the function short of slots. Without this, the
    /// spares stay with the functions that were hot first until their calm
    /// streaks end, and a function hot later is starved meanwhile.
    fn donor_slot(&self, surplus: &mut BTreeMap<u8, usize>) -> Option<usize> {
        let mut donors: Vec<(usize, u8)> = surplus
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(&f, &n)| (n, f))
            .collect();
        donors.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, donor) in donors {
            if let Some(slot) = self.replica_slot(donor) {
                if let Some(n) = surplus.get_mut(&donor) {
                    *n -= 1;
                }
                return Some(slot);
            }
        }
        None
    }

    /// The most recently added replica of `function` (highest slot index).
    fn replica_slot(&self, function: u8) -> Option<usize> {
        (0..self.roles.len()).rev().find(|i| {
            self.roles[*i] == SlotRole::Replica(function) && !self.pending.contains_key(i)
        })
    }

    /// An operator's decision (a control request, not the policy's):
    /// `slot` is to take `role` once its swap is done ([`Autoscaler::swap_done`]).
    /// Refused (`false`) while the slot has a decision pending.
    pub fn assign(&mut self, slot: usize, role: SlotRole) -> bool {
        if slot >= self.roles.len() || self.pending.contains_key(&slot) {
            return false;
        }
        self.pending.insert(slot, role);
        true
    }

    /// Spare slots with no decision pending, lowest first.
    pub fn free_spares(&self) -> Vec<usize> {
        (0..self.roles.len())
            .filter(|i| self.roles[*i] == SlotRole::Spare && !self.pending.contains_key(i))
            .collect()
    }

    /// The caller carried out (`ok`) or gave up (`!ok`, e.g. the swap rolled
    /// back) the decision on `slot`.
    pub fn swap_done(&mut self, slot: usize, ok: bool) {
        if let Some(role) = self.pending.remove(&slot) {
            if ok {
                self.roles[slot] = role;
            }
        }
    }

    /// Slots not spare (what a deployment pays for), counting pending swaps
    /// as done.
    pub fn slots_in_use(&self) -> usize {
        (0..self.roles.len())
            .filter(|i| self.pending.get(i).copied().unwrap_or(self.roles[*i]) != SlotRole::Spare)
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;

    fn load(function: u8, arrivals: u64, busy: u64, t_acc_us: f64) -> FunctionLoad {
        FunctionLoad {
            function,
            arrivals,
            busy,
            t_acc_ns: t_acc_us * 1e3,
        }
    }

    fn scaler(roles: Vec<SlotRole>) -> Autoscaler {
        Autoscaler::new(AutoscaleConfig::default(), roles).unwrap()
    }

    fn apply(a: &mut Autoscaler, ds: &[Decision]) {
        for d in ds {
            match *d {
                Decision::Replicate { slot, .. } | Decision::Reclaim { slot } => {
                    a.swap_done(slot, true)
                }
            }
        }
    }

    #[test]
    fn needed_is_the_provisioning_formula() {
        let a = scaler(vec![SlotRole::Fixed(1)]);
        // 10,000 req/s × (20 + 330) µs = 3.5 busy slots; / 0.7 = 5.
        assert_eq!(a.needed(&load(1, 10_000, 0, 330.0), SEC, 20_000.0), 5);
        assert_eq!(
            a.needed(&load(1, 1, 0, 1.0), SEC, 0.0),
            1,
            "called: at least one"
        );
        assert_eq!(a.needed(&load(1, 0, 0, 1.0), SEC, 0.0), 0);
    }

    #[test]
    fn grows_only_after_the_grow_streak_and_by_at_most_max_step() {
        let roles = vec![
            SlotRole::Fixed(1),
            SlotRole::Spare,
            SlotRole::Spare,
            SlotRole::Spare,
        ];
        let mut a = scaler(roles);
        let hot = [load(1, 10_000, 0, 330.0)]; // needs 5, has 1
        assert!(
            a.observe(SEC, 20_000.0, &hot).is_empty(),
            "one period is a burst"
        );
        let ds = a.observe(SEC, 20_000.0, &hot);
        assert_eq!(
            ds,
            vec![
                Decision::Replicate {
                    function: 1,
                    slot: 1
                },
                Decision::Replicate {
                    function: 1,
                    slot: 2
                }
            ]
        );
        assert_eq!(a.serving(1), 3, "pending replicas count as serving");
        apply(&mut a, &ds);
        assert!(
            a.observe(SEC, 20_000.0, &hot).is_empty(),
            "the streak restarts"
        );
        let ds = a.observe(SEC, 20_000.0, &hot);
        assert_eq!(
            ds,
            vec![Decision::Replicate {
                function: 1,
                slot: 3
            }],
            "only one spare left"
        );
        apply(&mut a, &ds);
        assert!(a.observe(SEC, 20_000.0, &hot).is_empty());
        assert!(
            a.observe(SEC, 20_000.0, &hot).is_empty(),
            "no spare slot: nothing to do"
        );
        assert_eq!(a.slots_in_use(), 4);
    }

    #[test]
    fn busy_refusals_grow_even_when_the_formula_says_enough() {
        let mut a = scaler(vec![SlotRole::Fixed(3), SlotRole::Spare]);
        let bursty = [load(3, 10, 4, 10.0)];
        a.observe(SEC, 0.0, &bursty);
        assert_eq!(
            a.observe(SEC, 0.0, &bursty),
            vec![Decision::Replicate {
                function: 3,
                slot: 1
            }]
        );
    }

    #[test]
    fn reclaims_replicas_after_a_long_calm_never_fixed_slots() {
        let cfg = AutoscaleConfig {
            grow_periods: 1,
            shrink_periods: 3,
            ..AutoscaleConfig::default()
        };
        let mut a = Autoscaler::new(
            cfg,
            vec![SlotRole::Fixed(1), SlotRole::Spare, SlotRole::Spare],
        )
        .unwrap();
        let ds = a.observe(SEC, 0.0, &[load(1, 10_000, 0, 200.0)]);
        assert_eq!(ds.len(), 2);
        apply(&mut a, &ds);
        let quiet = [load(1, 100, 0, 200.0)]; // needs 1
        assert!(a.observe(SEC, 0.0, &quiet).is_empty());
        assert!(a.observe(SEC, 0.0, &quiet).is_empty());
        let ds = a.observe(SEC, 0.0, &quiet);
        assert_eq!(
            ds,
            vec![Decision::Reclaim { slot: 2 }],
            "one replica per period"
        );
        apply(&mut a, &ds);
        for _ in 0..2 {
            assert!(a.observe(SEC, 0.0, &quiet).is_empty());
        }
        let ds = a.observe(SEC, 0.0, &quiet);
        assert_eq!(ds, vec![Decision::Reclaim { slot: 1 }]);
        apply(&mut a, &ds);
        // Silence (no arrivals at all) never takes the fixed slot.
        for _ in 0..10 {
            assert!(a.observe(SEC, 0.0, &[]).is_empty());
        }
        assert_eq!(
            a.roles(),
            &[SlotRole::Fixed(1), SlotRole::Spare, SlotRole::Spare]
        );
    }

    #[test]
    fn an_oscillating_function_keeps_its_replica() {
        let cfg = AutoscaleConfig {
            grow_periods: 1,
            shrink_periods: 4,
            ..AutoscaleConfig::default()
        };
        let mut a = Autoscaler::new(cfg, vec![SlotRole::Fixed(1), SlotRole::Spare]).unwrap();
        let hot = [load(1, 6_000, 0, 200.0)]; // 1.2 busy slots / 0.7 → 2
        let cool = [load(1, 1_000, 0, 200.0)]; // → 1
        let ds = a.observe(SEC, 0.0, &hot);
        apply(&mut a, &ds);
        for i in 0..20 {
            let l = if i % 3 == 2 { &hot } else { &cool };
            let ds = a.observe(SEC, 0.0, l);
            assert!(ds.is_empty(), "period {i}: {ds:?}");
        }
        assert_eq!(a.serving(1), 2);
    }

    #[test]
    fn the_largest_deficit_gets_the_last_spare_and_a_failed_swap_frees_it() {
        let cfg = AutoscaleConfig {
            grow_periods: 1,
            ..AutoscaleConfig::default()
        };
        let mut a = Autoscaler::new(
            cfg,
            vec![SlotRole::Fixed(1), SlotRole::Fixed(2), SlotRole::Spare],
        )
        .unwrap();
        let ds = a.observe(
            SEC,
            0.0,
            &[load(1, 4_000, 0, 200.0), load(2, 9_000, 0, 200.0)],
        );
        assert_eq!(
            ds,
            vec![Decision::Replicate {
                function: 2,
                slot: 2
            }]
        );
        a.swap_done(2, false);
        assert_eq!(
            a.roles()[2],
            SlotRole::Spare,
            "a rolled-back swap leaves the slot spare"
        );
        assert_eq!(a.serving(2), 1);
    }

    #[test]
    fn with_no_spare_left_a_function_short_of_slots_takes_an_idle_replica() {
        let cfg = AutoscaleConfig {
            grow_periods: 1,
            ..AutoscaleConfig::default()
        };
        let roles = vec![SlotRole::Fixed(1), SlotRole::Fixed(2), SlotRole::Spare];
        let mut a = Autoscaler::new(cfg, roles).unwrap();
        // Function 1 is hot first and takes the only spare.
        let ds = a.observe(SEC, 0.0, &[load(1, 6_000, 0, 200.0)]);
        assert_eq!(
            ds,
            vec![Decision::Replicate {
                function: 1,
                slot: 2
            }]
        );
        apply(&mut a, &ds);
        // Then popularity shifts: 1 needs one slot, 2 needs two. 1's replica
        // goes to 2 at once, not after 1's calm streak.
        let ds = a.observe(
            SEC,
            0.0,
            &[load(1, 1_000, 0, 200.0), load(2, 6_000, 0, 200.0)],
        );
        assert_eq!(
            ds,
            vec![Decision::Replicate {
                function: 2,
                slot: 2
            }]
        );
        apply(&mut a, &ds);
        assert_eq!((a.serving(1), a.serving(2)), (1, 2));
        // A function still using its replica keeps it.
        let ds = a.observe(
            SEC,
            0.0,
            &[load(1, 6_000, 0, 200.0), load(2, 6_000, 0, 200.0)],
        );
        assert!(ds.is_empty(), "{ds:?}");
    }

    #[test]
    fn bad_settings_are_refused() {
        for rho in [0.0, -1.0, 1.5, f64::NAN] {
            let cfg = AutoscaleConfig {
                target_utilisation: rho,
                ..AutoscaleConfig::default()
            };
            assert!(Autoscaler::new(cfg, vec![]).is_err(), "{rho}");
        }
        let cfg = AutoscaleConfig {
            shrink_periods: 0,
            ..AutoscaleConfig::default()
        };
        assert_eq!(
            Autoscaler::new(cfg, vec![]).unwrap_err(),
            AutoscaleError::Periods
        );
    }

    #[test]
    fn an_operators_assignment_takes_a_spare_the_policy_then_leaves_alone() {
        let mut a = scaler(vec![SlotRole::Fixed(1), SlotRole::Spare, SlotRole::Spare]);
        assert_eq!(a.free_spares(), vec![1, 2]);
        assert!(a.assign(1, SlotRole::Fixed(4)));
        assert!(!a.assign(1, SlotRole::Spare), "a decision is pending");
        assert_eq!(a.free_spares(), vec![2]);
        // A failed swap leaves the slot spare; a done one takes the role.
        a.swap_done(1, false);
        assert_eq!(a.roles()[1], SlotRole::Spare);
        assert!(a.assign(1, SlotRole::Fixed(4)));
        a.swap_done(1, true);
        assert_eq!(a.roles()[1], SlotRole::Fixed(4));
        // Function 4 idle for long: an operator's replica is never reclaimed.
        for _ in 0..20 {
            let ds = a.observe(SEC, 0.0, &[load(4, 0, 0, 100.0)]);
            assert!(ds
                .iter()
                .all(|d| !matches!(d, Decision::Reclaim { slot: 1 })));
        }
        assert_eq!(a.roles()[1], SlotRole::Fixed(4));
    }
}
