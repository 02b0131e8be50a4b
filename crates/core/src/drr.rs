//! Deficit round robin among the tenants waiting for one slot (NICA's
//! time-sharing of a compute unit), charged *after* each run by what the run
//! measurably cost, so a tenant is billed for execution time, not bytes.
//!
//! Each tenant with waiting work holds a deficit. When the round reaches a
//! tenant it is credited `quantum × weight`; it runs jobs while its deficit
//! is positive, and each finished job is charged its execution time. The
//! scheduler is work-conserving: while any tenant has work, one of them is
//! served. A debt (negative deficit) outlives an empty queue, so a tenant
//! cannot shed its debt by pausing; unused credit is dropped when its queue
//! empties, so it cannot hoard either.

use crate::TenantKey;
use std::collections::VecDeque;

#[derive(Debug, Clone)]
struct Class<T> {
    key: TenantKey,
    weight: u64,
    deficit: i64,
    queue: VecDeque<T>,
}

/// The waiting jobs of one slot, one FIFO per tenant.
#[derive(Debug, Clone)]
pub struct Drr<T> {
    classes: Vec<Class<T>>,
    /// The class the round is at.
    current: usize,
    quantum: u64,
    len: usize,
}

impl<T> Drr<T> {
    /// `quantum`: the credit per round of a weight-1 tenant, in the unit of
    /// [`Drr::charge`] (nanoseconds of execution).
    pub fn new(quantum: u64) -> Drr<T> {
        Drr {
            classes: Vec::new(),
            current: 0,
            quantum: quantum.max(1),
            len: 0,
        }
    }

    pub fn set_quantum(&mut self, quantum: u64) {
        self.quantum = quantum.max(1);
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Jobs `key` has waiting.
    pub fn depth_of(&self, key: TenantKey) -> usize {
        self.class(key).map_or(0, |c| c.queue.len())
    }

    /// The deficit of `key` now (0 for a tenant never seen).
    pub fn deficit(&self, key: TenantKey) -> i64 {
        self.class(key).map_or(0, |c| c.deficit)
    }

    fn class(&self, key: TenantKey) -> Option<&Class<T>> {
        self.classes.iter().find(|c| c.key == key)
    }

    /// Queue `item` for `key`, whose weight is `weight` (≥ 1).
    pub fn push(&mut self, key: TenantKey, weight: u32, item: T) {
        let weight = weight.max(1) as u64;
        let i = match self.classes.iter().position(|c| c.key == key) {
            Some(i) => i,
            None => {
                self.classes.push(Class {
                    key,
                    weight,
                    deficit: 0,
                    queue: VecDeque::new(),
                });
                self.classes.len() - 1
            }
        };
        let c = &mut self.classes[i];
        c.weight = weight;
        c.queue.push_back(item);
        self.len += 1;
    }

    /// The next job by DRR, and its tenant (to [`Drr::charge`] after it ran).
    pub fn pop(&mut self) -> Option<(TenantKey, T)> {
        if self.len == 0 {
            return None;
        }
        self.skip_empty_rounds();
        let n = self.classes.len();
        // After the skip some waiting class has credit: at most one lap.
        for _ in 0..=n {
            let c = &mut self.classes[self.current];
            if c.deficit > 0 {
                if let Some(item) = c.queue.pop_front() {
                    self.len -= 1;
                    return Some((c.key, item));
                }
            }
            self.advance();
        }
        // Unreachable by the argument above; serve anyone rather than stall.
        let c = self.classes.iter_mut().find(|c| !c.queue.is_empty())?;
        self.len -= 1;
        Some((c.key, c.queue.pop_front()?))
    }

    /// A run of `key`'s job cost `cost`.
    pub fn charge(&mut self, key: TenantKey, cost: u64) {
        if let Some(c) = self.classes.iter_mut().find(|c| c.key == key) {
            c.deficit = c.deficit.saturating_sub(cost.min(i64::MAX as u64) as i64);
        }
        self.forget_idle();
    }

    /// Empty the queues (shutdown, a swap's hand-off), oldest tenant first.
    pub fn drain(&mut self) -> Vec<T> {
        self.len = 0;
        let mut out = Vec::new();
        for c in &mut self.classes {
            out.extend(c.queue.drain(..));
        }
        out
    }

    /// Move the round to the next class, crediting it if it has work.
    fn advance(&mut self) {
        let c = &mut self.classes[self.current];
        if c.queue.is_empty() && c.deficit > 0 {
            c.deficit = 0;
        }
        self.current = (self.current + 1) % self.classes.len();
        let c = &mut self.classes[self.current];
        if !c.queue.is_empty() {
            c.deficit = c.deficit.saturating_add((self.quantum * c.weight) as i64);
        }
    }

    /// When every waiting class is in debt, credit them all the whole rounds
    /// it takes until one has credit, at once instead of lap by lap.
    fn skip_empty_rounds(&mut self) {
        let q = self.quantum as i64;
        let rounds = self
            .classes
            .iter()
            .filter(|c| !c.queue.is_empty())
            .map(|c| {
                let per = q * c.weight as i64;
                if c.deficit > 0 {
                    0
                } else {
                    (-c.deficit) / per // whole rounds that still leave it ≤ 0
                }
            })
            .min()
            .unwrap_or(0);
        if rounds > 0 {
            for c in self.classes.iter_mut().filter(|c| !c.queue.is_empty()) {
                c.deficit = c.deficit.saturating_add(rounds * q * c.weight as i64);
            }
        }
    }

    /// Drop classes that hold nothing: no job, no debt (bounded memory).
    fn forget_idle(&mut self) {
        if self.classes.len() <= 8 {
            return; // few: keep them, their order is the round's
        }
        let cur = self.classes[self.current].key;
        self.classes
            .retain(|c| !c.queue.is_empty() || c.deficit < 0 || c.key == cur);
        self.current = self.classes.iter().position(|c| c.key == cur).unwrap_or(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serve `n` jobs with costs `cost(key)`, keeping every queue non-empty;
    /// returns the execution time each tenant got.
    fn saturate(d: &mut Drr<u32>, tenants: &[(TenantKey, u32, u64)], n: usize) -> Vec<u64> {
        for &(k, w, _) in tenants {
            for _ in 0..4 {
                d.push(k, w, 0);
            }
        }
        let mut got = vec![0u64; tenants.len()];
        for _ in 0..n {
            let (k, _) = d.pop().expect("work waiting");
            let i = tenants.iter().position(|t| t.0 == k).unwrap();
            got[i] += tenants[i].2;
            d.charge(k, tenants[i].2);
            d.push(k, tenants[i].1, 0);
        }
        got
    }

    #[test]
    fn saturated_tenants_share_execution_time_by_weight() {
        // Tenant 1 weight 2 with 300 µs jobs, tenant 2 weight 1 with 100 µs jobs.
        let mut d = Drr::new(50_000);
        let got = saturate(
            &mut d,
            &[(Some(1), 2, 300_000), (Some(2), 1, 100_000)],
            30_000,
        );
        let share = got[0] as f64 / (got[0] + got[1]) as f64;
        assert!((share - 2.0 / 3.0).abs() < 0.01, "share {share}");
    }

    #[test]
    fn cost_not_count_is_what_is_shared() {
        // Equal weights, one tenant's jobs 10× dearer: it runs 10× fewer.
        let mut d = Drr::new(10_000);
        let got = saturate(
            &mut d,
            &[(Some(1), 1, 1_000_000), (Some(2), 1, 100_000)],
            20_000,
        );
        let share = got[0] as f64 / (got[0] + got[1]) as f64;
        assert!((share - 0.5).abs() < 0.02, "share {share}");
    }

    #[test]
    fn work_conserving_and_fifo_within_a_tenant() {
        let mut d = Drr::new(1);
        for i in 0..5 {
            d.push(Some(3), 1, i);
        }
        let mut seen = Vec::new();
        while let Some((k, i)) = d.pop() {
            assert_eq!(k, Some(3));
            seen.push(i);
            // Far more than the quantum: still served, as it is alone.
            d.charge(k, 1_000_000_000);
        }
        assert_eq!(seen, vec![0, 1, 2, 3, 4]);
        assert!(d.is_empty());
    }

    #[test]
    fn a_light_tenant_waits_at_most_one_round_behind_a_flood() {
        let mut d = Drr::new(100_000);
        for i in 0..1000 {
            d.push(None, 1, i);
        }
        // The flood runs for a while...
        for _ in 0..10 {
            let (k, _) = d.pop().unwrap();
            d.charge(k, 100_000);
        }
        // ...then one request of another tenant arrives: served within two pops.
        d.push(Some(9), 1, 7);
        let first = d.pop().unwrap();
        d.charge(first.0, 100_000);
        let second = d.pop().unwrap();
        assert!(
            first.0 == Some(9) || second.0 == Some(9),
            "{first:?} {second:?}"
        );
    }

    #[test]
    fn debt_outlives_an_empty_queue_but_credit_does_not() {
        let mut d = Drr::new(1_000);
        d.push(Some(1), 1, 0);
        d.push(Some(2), 1, 0);
        let (k, _) = d.pop().unwrap();
        d.charge(k, 50_000);
        assert!(d.deficit(k) < 0);
        let (other, _) = d.pop().unwrap();
        assert_ne!(other, k);
        d.charge(other, 10);
        // Both queues are empty; the first keeps its debt.
        assert!(d.deficit(k) < -40_000, "{}", d.deficit(k));
        d.push(k, 1, 1);
        d.push(other, 1, 1);
        // Both wait: the one in debt goes second.
        assert_eq!(d.pop().unwrap().0, other);
    }

    #[test]
    fn many_tenants_stay_bounded() {
        let mut d = Drr::new(1_000);
        for t in 0..1000u16 {
            d.push(Some(t), 1, t as u32);
            let (k, _) = d.pop().unwrap();
            d.charge(k, 10);
        }
        assert!(d.classes.len() <= 9, "{}", d.classes.len());
    }
}
