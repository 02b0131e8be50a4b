//! Control operations that act on several slots (`docs/control.md`): a
//! forced `UNLOAD` (swap every slot running a module out, then remove it)
//! and `REPLICATE` (load more instances of a function into spare slots).
//! Each is planned here from the [`SwapController`]'s view of the slots,
//! then carried out as a [`Batch`] of ordinary swaps through the safety
//! sequence, whose outcomes the batch collects. Sans-IO, like the rest.

use crate::swap::{SwapController, SwapError, SwapReport, Token};
use crate::wire::{Digest, Target};
use std::collections::BTreeMap;

/// Why a multi-slot operation was refused before any slot changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    /// A slot the operation needs is being swapped by another operation:
    /// concurrent operations on one slot are refused, not queued.
    #[error("slot {0} is being swapped; retry")]
    Busy(usize),
    /// Fewer spare slots are free than asked for (nothing was started).
    #[error("{wanted} replicas asked, {available} spare slots free")]
    NotEnoughSpares { wanted: usize, available: usize },
}

/// The slots to swap out before module `digest` may leave the library:
/// those running it. A slot being swapped from or to it refuses the unload
/// (`Busy`): its outcome is not known yet.
pub fn plan_unload(ctl: &SwapController, digest: &Digest) -> Result<Vec<usize>, OpError> {
    let runs = |t: &Target| matches!(t, Target::Wasm { digest: d, .. } if d == digest);
    let mut slots = Vec::new();
    for (i, current) in ctl.targets().enumerate() {
        let pending = ctl.pending_target(i);
        if ctl.is_swapping(i) && (runs(&current) || pending.is_some_and(|t| runs(&t))) {
            return Err(OpError::Busy(i));
        }
        if runs(&current) {
            slots.push(i);
        }
    }
    Ok(slots)
}

/// `n` slots for replicas, from `spare` (the free slots in the order they
/// should be used): all or nothing — fewer free than `n` starts nothing. A
/// spare slot being swapped is not free.
pub fn plan_replicate(
    ctl: &SwapController,
    spare: &[usize],
    n: usize,
) -> Result<Vec<usize>, OpError> {
    let free: Vec<usize> = spare
        .iter()
        .copied()
        .filter(|&s| !ctl.is_swapping(s))
        .collect();
    if free.len() < n {
        return Err(OpError::NotEnoughSpares {
            wanted: n,
            available: free.len(),
        });
    }
    Ok(free[..n].to_vec())
}

/// Which of `serving` (the spare slots serving a function, lowest first)
/// to give back so that `keep` stay: the highest first. A slot among them
/// being swapped refuses the shrink (`Busy`).
pub fn plan_shrink(
    ctl: &SwapController,
    serving: &[usize],
    keep: usize,
) -> Result<Vec<usize>, OpError> {
    if let Some(&s) = serving.iter().find(|&&s| ctl.is_swapping(s)) {
        return Err(OpError::Busy(s));
    }
    Ok(serving
        .iter()
        .rev()
        .take(serving.len().saturating_sub(keep))
        .copied()
        .collect())
}

/// The swaps that move the slots to `template` (a target per slot): those
/// whose current target differs. While any slot is being swapped the resize
/// is refused (`Busy`): it would race that swap.
pub fn plan_resize(
    ctl: &SwapController,
    template: &[Target],
) -> Result<Vec<(usize, Target)>, OpError> {
    if let Some(s) = (0..template.len()).find(|&s| ctl.is_swapping(s)) {
        return Err(OpError::Busy(s));
    }
    Ok(ctl
        .targets()
        .zip(template)
        .enumerate()
        .filter(|(_, (current, want))| current != *want)
        .map(|(i, (_, want))| (i, *want))
        .collect())
}

/// The swaps of one operation and their outcomes as they come back.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// Swap token → slot, for the swaps not answered yet.
    pending: BTreeMap<Token, usize>,
    done: Vec<(usize, Result<SwapReport, SwapError>)>,
}

impl Batch {
    /// A batch of the swaps `token → slot`.
    pub fn new(parts: impl IntoIterator<Item = (Token, usize)>) -> Batch {
        Batch {
            pending: parts.into_iter().collect(),
            done: Vec::new(),
        }
    }

    /// Whether swap `token` is one of this batch's, not answered yet.
    pub fn has(&self, token: Token) -> bool {
        self.pending.contains_key(&token)
    }

    /// Swap `token` ended with `outcome`; whether the batch is complete.
    pub fn record(&mut self, token: Token, outcome: Result<SwapReport, SwapError>) -> bool {
        if let Some(slot) = self.pending.remove(&token) {
            self.done.push((slot, outcome));
        }
        self.is_complete()
    }

    /// The slot of swap `token`, while not answered.
    pub fn slot_of(&self, token: Token) -> Option<usize> {
        self.pending.get(&token).copied()
    }

    /// The slots whose swap is not answered yet.
    pub fn pending_slots(&self) -> Vec<usize> {
        self.pending.values().copied().collect()
    }

    pub fn is_complete(&self) -> bool {
        self.pending.is_empty()
    }

    /// Every outcome so far, in the order they came.
    pub fn outcomes(&self) -> &[(usize, Result<SwapReport, SwapError>)] {
        &self.done
    }

    /// The first failed swap, if any: its slot and error.
    pub fn first_error(&self) -> Option<(usize, &SwapError)> {
        self.done.iter().find_map(|(s, o)| match o {
            Err(e) => Some((*s, e)),
            Ok(_) => None,
        })
    }

    /// The slots whose swap succeeded.
    pub fn swapped(&self) -> Vec<usize> {
        self.done
            .iter()
            .filter(|(_, o)| o.is_ok())
            .map(|(s, _)| *s)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const M: Digest = [5; 32];
    const WASM: Target = Target::Wasm {
        function: 140,
        digest: M,
    };

    fn ctl() -> SwapController {
        // Slots 0 and 2 run module M as 140, slot 1 built-in 1, slot 3 built-in 0.
        SwapController::new(
            vec![WASM, Target::Builtin(1), WASM, Target::Builtin(0)],
            Duration::from_millis(100),
            |f| f < 17,
        )
    }

    #[test]
    fn unload_plans_the_slots_running_the_module() {
        let c = ctl();
        assert_eq!(plan_unload(&c, &M), Ok(vec![0, 2]));
        assert_eq!(plan_unload(&c, &[6; 32]), Ok(vec![]));
    }

    #[test]
    fn unload_is_refused_while_a_slot_is_swapped_from_or_to_the_module() {
        let mut c = ctl();
        c.handle_swap(0, 1, 2, Target::Builtin(3), true); // slot 2 leaving M
        assert_eq!(plan_unload(&c, &M), Err(OpError::Busy(2)));
        let mut c = ctl();
        c.handle_swap(0, 1, 1, WASM, true); // slot 1 being swapped to M
        assert_eq!(plan_unload(&c, &M), Err(OpError::Busy(1)));
        // A swap of an unrelated slot does not matter.
        let mut c = ctl();
        c.handle_swap(0, 1, 3, Target::Builtin(4), true);
        assert_eq!(plan_unload(&c, &M), Ok(vec![0, 2]));
    }

    #[test]
    fn replicate_is_all_or_nothing_over_free_spares() {
        let mut c = ctl();
        assert_eq!(plan_replicate(&c, &[1, 3], 2), Ok(vec![1, 3]));
        assert_eq!(plan_replicate(&c, &[3, 1], 1), Ok(vec![3]));
        c.handle_swap(0, 1, 3, Target::Builtin(4), true);
        assert_eq!(
            plan_replicate(&c, &[1, 3], 2),
            Err(OpError::NotEnoughSpares {
                wanted: 2,
                available: 1
            })
        );
        assert_eq!(plan_replicate(&c, &[1, 3], 1), Ok(vec![1]));
    }

    #[test]
    fn shrink_gives_back_the_highest_slots_beyond_keep() {
        let mut c = ctl();
        assert_eq!(plan_shrink(&c, &[1, 3], 0), Ok(vec![3, 1]));
        assert_eq!(plan_shrink(&c, &[1, 3], 1), Ok(vec![3]));
        assert_eq!(plan_shrink(&c, &[1, 3], 5), Ok(vec![]));
        c.handle_swap(0, 1, 1, Target::Builtin(4), true);
        assert_eq!(plan_shrink(&c, &[1, 3], 1), Err(OpError::Busy(1)));
    }

    #[test]
    fn resize_swaps_only_the_slots_that_differ_and_waits_for_no_swap() {
        let mut c = ctl();
        let t = [
            Target::Builtin(2),
            Target::Builtin(1),
            Target::Builtin(2),
            Target::Builtin(0),
        ];
        assert_eq!(
            plan_resize(&c, &t),
            Ok(vec![(0, Target::Builtin(2)), (2, Target::Builtin(2))])
        );
        c.handle_swap(0, 1, 3, Target::Builtin(4), true);
        assert_eq!(plan_resize(&c, &t), Err(OpError::Busy(3)));
    }

    #[test]
    fn a_batch_completes_when_every_swap_answered() {
        let mut b = Batch::new([(7, 0), (8, 2)]);
        assert!(b.has(7) && b.has(8) && !b.has(9));
        let report = SwapReport {
            slot: 0,
            previous: WASM,
            target: Target::Builtin(1),
            total_ns: 1,
            drain_ns: 0,
            install_ns: 1,
            handed_off: false,
        };
        assert!(!b.record(7, Ok(report)));
        assert!(!b.record(9, Err(SwapError::Busy(5)))); // not its own: ignored
        assert!(b.record(8, Err(SwapError::Busy(2))));
        assert_eq!(b.swapped(), vec![0]);
        assert_eq!(b.first_error(), Some((2, &SwapError::Busy(2))));
        assert_eq!(b.outcomes().len(), 2);
    }
}
