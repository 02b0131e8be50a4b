//! The swap controller: the safety sequence of a slot's reconfiguration as a
//! sans-IO state machine (`docs/control.md`, "The swap sequence").
//!
//! 1. authenticate (done before: only authenticated swaps reach it);
//! 2. refuse a swap of a slot already swapping, an unknown slot, a function
//!    id of the wrong range, or a function id bound to another module;
//! 3. [`Command::StopDispatch`]: the selector stops choosing the slot;
//! 4. [`Command::HandOff`]: its queued requests go to a replica of its
//!    function if one is serving, else are answered `BUSY` (retry);
//! 5. wait for the running request to finish ([`SwapController::handle_slot_idle`]),
//!    at most `drain_timeout` — past it, roll back;
//! 6. [`Command::Install`]: the shell validates the target (its digest is in
//!    the library), instantiates and warms it up, and reports
//!    [`SwapController::handle_installed`];
//! 7. [`Command::Resume`] with the new function — or, on any failure, with
//!    the previous one (roll back: the shell installs nothing on failure);
//! 8. [`Command::Reply`] with the outcome.
//!
//! No clock reads: time is passed in.

use crate::wire::Target;
use std::collections::VecDeque;
use std::time::Duration;

/// Function ids a WebAssembly module may be served under.
pub const WASM_FUNCTIONS: std::ops::RangeInclusive<u8> = 128..=250;

/// The controller's clock: nanoseconds on the driver's monotonic clock.
pub type Nanos = u64;

/// Who asked for a swap (the driver's handle for the control request).
pub type Token = u64;

/// What the controller wants done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Stop choosing `slot` for new requests.
    StopDispatch { slot: usize },
    /// Move `slot`'s queued requests to the other slots of its function
    /// (`to_replica`), or answer each `BUSY`.
    HandOff { slot: usize, to_replica: bool },
    /// Validate and instantiate `target` for `slot`, warm it up and make it
    /// the slot's function; report [`SwapController::handle_installed`]. On
    /// failure nothing changes.
    Install { slot: usize, target: Target },
    /// `slot` serves `function` again (the new one, or the previous one on
    /// roll-back).
    Resume { slot: usize, function: u8 },
    /// Answer the control request `token`.
    Reply {
        token: Token,
        outcome: Result<SwapReport, SwapError>,
    },
}

/// A completed swap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwapReport {
    pub slot: usize,
    pub previous: Target,
    pub target: Target,
    /// From the request to the resume, ns.
    pub total_ns: u64,
    /// Of which waiting for the running request, ns.
    pub drain_ns: u64,
    /// Of which installing (instantiate + warm-up), ns.
    pub install_ns: u64,
    /// Queued requests handed to a replica / answered `BUSY`.
    pub handed_off: bool,
}

/// Why a swap did not happen (the slot serves what it served before).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwapError {
    #[error("no slot {0}")]
    NoSlot(usize),
    #[error("slot {0} is already being swapped")]
    Busy(usize),
    #[error("function id {0} is reserved or outside the range of its kind")]
    BadFunction(u8),
    #[error("function {function} is served by another module or built-in in slot {slot}")]
    Conflict { function: u8, slot: usize },
    #[error("the running request did not finish within {0:?}; rolled back")]
    DrainTimeout(Duration),
    #[error("install failed, rolled back: {0}")]
    Install(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Serving,
    Draining(Pending),
    Installing(Pending),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    token: Token,
    target: Target,
    started: Nanos,
    drained: Option<Nanos>,
    deadline: Nanos,
    handed_off: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    current: Target,
    phase: Phase,
}

/// The controller of a node's slots.
#[derive(Debug, Clone)]
pub struct SwapController {
    slots: Vec<Slot>,
    drain_timeout: Duration,
    out: VecDeque<Command>,
    /// Whether `f` is a built-in function id (the registry's).
    is_builtin: fn(u8) -> bool,
}

impl SwapController {
    /// `slots`: what each slot serves at start.
    pub fn new(
        slots: Vec<Target>,
        drain_timeout: Duration,
        is_builtin: fn(u8) -> bool,
    ) -> SwapController {
        SwapController {
            slots: slots
                .into_iter()
                .map(|current| Slot {
                    current,
                    phase: Phase::Serving,
                })
                .collect(),
            drain_timeout,
            out: VecDeque::new(),
            is_builtin,
        }
    }

    /// What each slot serves (or served before a swap in progress).
    pub fn targets(&self) -> impl Iterator<Item = Target> + '_ {
        self.slots.iter().map(|s| s.current)
    }

    /// Whether `slot` is being swapped.
    pub fn is_swapping(&self, slot: usize) -> bool {
        self.slots
            .get(slot)
            .is_some_and(|s| s.phase != Phase::Serving)
    }

    /// What `slot` is being swapped to, if a swap is in progress.
    pub fn pending_target(&self, slot: usize) -> Option<Target> {
        match &self.slots.get(slot)?.phase {
            Phase::Draining(p) | Phase::Installing(p) => Some(p.target),
            Phase::Serving => None,
        }
    }

    /// Whether some slot runs WebAssembly module `digest` (or is being swapped to it).
    pub fn uses(&self, digest: &crate::wire::Digest) -> bool {
        let is = |t: &Target| matches!(t, Target::Wasm { digest: d, .. } if d == digest);
        self.slots.iter().any(|s| {
            is(&s.current)
                || matches!(&s.phase, Phase::Draining(p) | Phase::Installing(p) if is(&p.target))
        })
    }

    /// An authenticated swap of `slot` to `target`. `busy`: the slot is
    /// running a request now (else it is drained at once).
    pub fn handle_swap(
        &mut self,
        now: Nanos,
        token: Token,
        slot: usize,
        target: Target,
        busy: bool,
    ) {
        if let Err(e) = self.admissible(slot, target) {
            self.out.push_back(Command::Reply {
                token,
                outcome: Err(e),
            });
            return;
        }
        let function = self.slots[slot].current.function();
        let replica = self.slots.iter().enumerate().any(|(i, s)| {
            i != slot && s.phase == Phase::Serving && s.current.function() == function
        });
        self.out.push_back(Command::StopDispatch { slot });
        self.out.push_back(Command::HandOff {
            slot,
            to_replica: replica,
        });
        let pending = Pending {
            token,
            target,
            started: now,
            drained: None,
            deadline: now + self.drain_timeout.as_nanos() as u64,
            handed_off: replica,
        };
        self.slots[slot].phase = Phase::Draining(pending);
        if !busy {
            self.handle_slot_idle(now, slot);
        }
    }

    fn admissible(&self, slot: usize, target: Target) -> Result<(), SwapError> {
        let s = self.slots.get(slot).ok_or(SwapError::NoSlot(slot))?;
        if s.phase != Phase::Serving {
            return Err(SwapError::Busy(slot));
        }
        let f = target.function();
        let ok = match target {
            Target::Builtin(f) => (self.is_builtin)(f),
            Target::Wasm { function, .. } => WASM_FUNCTIONS.contains(&function),
        };
        if !ok {
            return Err(SwapError::BadFunction(f));
        }
        // One function id, one implementation node-wide: replicas of a
        // function are interchangeable.
        for (i, other) in self.slots.iter().enumerate() {
            let claims = |t: &Target| t.function() == f && *t != target;
            let pending = match &other.phase {
                Phase::Draining(p) | Phase::Installing(p) => claims(&p.target),
                Phase::Serving => false,
            };
            if i != slot && (claims(&other.current) || pending) {
                return Err(SwapError::Conflict {
                    function: f,
                    slot: i,
                });
            }
        }
        Ok(())
    }

    /// `slot` finished its running request (or was idle).
    pub fn handle_slot_idle(&mut self, now: Nanos, slot: usize) {
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        if let Phase::Draining(p) = &s.phase {
            let mut p = p.clone();
            p.drained = Some(now);
            let target = p.target;
            s.phase = Phase::Installing(p);
            self.out.push_back(Command::Install { slot, target });
        }
    }

    /// The shell installed (`Ok`) or could not install `slot`'s target.
    pub fn handle_installed(&mut self, now: Nanos, slot: usize, result: Result<(), String>) {
        let Some(s) = self.slots.get_mut(slot) else {
            return;
        };
        let Phase::Installing(p) = std::mem::replace(&mut s.phase, Phase::Serving) else {
            return;
        };
        let previous = s.current;
        let outcome = match result {
            Ok(()) => {
                s.current = p.target;
                let drained = p.drained.unwrap_or(now);
                Ok(SwapReport {
                    slot,
                    previous,
                    target: p.target,
                    total_ns: now.saturating_sub(p.started),
                    drain_ns: drained.saturating_sub(p.started),
                    install_ns: now.saturating_sub(drained),
                    handed_off: p.handed_off,
                })
            }
            Err(e) => Err(SwapError::Install(e)),
        };
        self.out.push_back(Command::Resume {
            slot,
            function: s.current.function(),
        });
        self.out.push_back(Command::Reply {
            token: p.token,
            outcome,
        });
    }

    /// Time passed: a slot whose running request outlasts the drain timeout
    /// is rolled back (it resumes its previous function).
    pub fn handle_timeout(&mut self, now: Nanos) {
        for (slot, s) in self.slots.iter_mut().enumerate() {
            if let Phase::Draining(p) = &s.phase {
                if p.deadline <= now {
                    let token = p.token;
                    s.phase = Phase::Serving;
                    self.out.push_back(Command::Resume {
                        slot,
                        function: s.current.function(),
                    });
                    self.out.push_back(Command::Reply {
                        token,
                        outcome: Err(SwapError::DrainTimeout(self.drain_timeout)),
                    });
                }
            }
        }
    }

    /// When [`SwapController::handle_timeout`] next has work.
    pub fn poll_timeout(&self) -> Option<Nanos> {
        self.slots
            .iter()
            .filter_map(|s| match &s.phase {
                Phase::Draining(p) => Some(p.deadline),
                _ => None,
            })
            .min()
    }

    pub fn poll_command(&mut self) -> Option<Command> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn ctl() -> SwapController {
        // Slots: 0 and 1 serve built-in 1, slot 2 built-in 0.
        SwapController::new(
            vec![Target::Builtin(1), Target::Builtin(1), Target::Builtin(0)],
            Duration::from_millis(100),
            |f| f < 17,
        )
    }

    fn drain(c: &mut SwapController) -> Vec<Command> {
        std::iter::from_fn(|| c.poll_command()).collect()
    }

    const WASM: Target = Target::Wasm {
        function: 130,
        digest: [3; 32],
    };

    #[test]
    fn idle_slot_with_a_replica_steps_through_the_sequence() {
        let mut c = ctl();
        c.handle_swap(10 * MS, 7, 0, WASM, false);
        assert_eq!(
            drain(&mut c),
            vec![
                Command::StopDispatch { slot: 0 },
                Command::HandOff {
                    slot: 0,
                    to_replica: true
                },
                Command::Install {
                    slot: 0,
                    target: WASM
                },
            ]
        );
        assert!(c.is_swapping(0));
        assert!(c.uses(&[3; 32]));
        c.handle_installed(10 * MS + 300_000, 0, Ok(()));
        let cmds = drain(&mut c);
        assert_eq!(
            cmds[0],
            Command::Resume {
                slot: 0,
                function: 130
            }
        );
        let Command::Reply {
            token: 7,
            outcome: Ok(r),
        } = &cmds[1]
        else {
            panic!("{cmds:?}")
        };
        assert_eq!(
            (r.previous, r.target, r.total_ns, r.install_ns),
            (Target::Builtin(1), WASM, 300_000, 300_000)
        );
        assert!(!c.is_swapping(0));
        assert_eq!(c.targets().next(), Some(WASM));
    }

    #[test]
    fn busy_slot_waits_for_its_running_request_and_without_replica_refuses_queued() {
        let mut c = ctl();
        c.handle_swap(0, 1, 2, Target::Builtin(3), true);
        assert_eq!(
            drain(&mut c),
            vec![
                Command::StopDispatch { slot: 2 },
                Command::HandOff {
                    slot: 2,
                    to_replica: false
                },
            ]
        );
        // A second swap of the same slot meanwhile is refused at once.
        c.handle_swap(MS, 2, 2, Target::Builtin(4), false);
        assert_eq!(
            drain(&mut c),
            vec![Command::Reply {
                token: 2,
                outcome: Err(SwapError::Busy(2))
            }]
        );
        c.handle_slot_idle(5 * MS, 2);
        assert_eq!(
            drain(&mut c),
            vec![Command::Install {
                slot: 2,
                target: Target::Builtin(3)
            }]
        );
        c.handle_installed(6 * MS, 2, Ok(()));
        let cmds = drain(&mut c);
        let Command::Reply { outcome: Ok(r), .. } = &cmds[1] else {
            panic!("{cmds:?}")
        };
        assert_eq!((r.drain_ns, r.install_ns, r.total_ns), (5 * MS, MS, 6 * MS));
    }

    #[test]
    fn failed_install_rolls_back_to_the_previous_function() {
        let mut c = ctl();
        c.handle_swap(0, 1, 1, WASM, false);
        drain(&mut c);
        c.handle_installed(MS, 1, Err("no module with digest 0303…".into()));
        assert_eq!(
            drain(&mut c),
            vec![
                Command::Resume {
                    slot: 1,
                    function: 1
                },
                Command::Reply {
                    token: 1,
                    outcome: Err(SwapError::Install("no module with digest 0303…".into()))
                }
            ]
        );
        assert_eq!(c.targets().nth(1), Some(Target::Builtin(1)));
        assert!(!c.uses(&[3; 32]));
    }

    #[test]
    fn a_request_that_outlasts_the_drain_timeout_rolls_back() {
        let mut c = ctl();
        c.handle_swap(0, 4, 0, Target::Builtin(2), true);
        drain(&mut c);
        assert_eq!(c.poll_timeout(), Some(100 * MS));
        c.handle_timeout(99 * MS);
        assert!(drain(&mut c).is_empty());
        c.handle_timeout(100 * MS);
        assert_eq!(
            drain(&mut c),
            vec![
                Command::Resume {
                    slot: 0,
                    function: 1
                },
                Command::Reply {
                    token: 4,
                    outcome: Err(SwapError::DrainTimeout(Duration::from_millis(100)))
                }
            ]
        );
        // The late end of the running request changes nothing.
        c.handle_slot_idle(150 * MS, 0);
        assert!(drain(&mut c).is_empty());
        assert_eq!(c.poll_timeout(), None);
    }

    #[test]
    fn bad_targets_are_refused_before_anything_stops() {
        let mut c = ctl();
        let cases = [
            (9, Target::Builtin(0), SwapError::NoSlot(9)),
            (0, Target::Builtin(2), SwapError::Busy(0)),
            (2, Target::Builtin(200), SwapError::BadFunction(200)),
            (
                2,
                Target::Wasm {
                    function: 5,
                    digest: [0; 32],
                },
                SwapError::BadFunction(5),
            ),
            // Function 0 is served by slot 2: no other implementation of it.
            (
                1,
                Target::Wasm {
                    function: 0,
                    digest: [0; 32],
                },
                SwapError::BadFunction(0),
            ),
            // Slot 0 is being swapped to module [3; 32] as 130: another module may not take 130.
            (
                2,
                Target::Wasm {
                    function: 130,
                    digest: [1; 32],
                },
                SwapError::Conflict {
                    function: 130,
                    slot: 0,
                },
            ),
        ];
        c.handle_swap(0, 0, 0, WASM, false); // slot 0 now swapping to WASM as 130
        drain(&mut c);
        for (i, (slot, target, err)) in cases.into_iter().enumerate() {
            c.handle_swap(0, 100 + i as u64, slot, target, false);
            assert_eq!(
                drain(&mut c),
                vec![Command::Reply {
                    token: 100 + i as u64,
                    outcome: Err(err)
                }]
            );
        }
        // A replica of the same target is fine.
        c.handle_swap(0, 200, 1, WASM, false);
        assert_eq!(drain(&mut c)[0], Command::StopDispatch { slot: 1 });
    }
}
