//! Live provisioning figures (seed 001 §III-C): the node measures its own
//! per-request overhead `T_oh` and, per function and request size, the
//! execution time `T_acc`; with them `offrac provision` sizes a deployment:
//! `N = ceil(Θ · (T_oh + T_acc) / s)` slots for a target throughput Θ of
//! requests of `s` bytes.
//!
//! - `T_acc`: exponentially weighted mean (weight 1/32 per run) of the
//!   function's run time, per power-of-two size class of its input.
//! - `T_oh`: everything else the node spends per request — the I/O thread's
//!   busy time (reading, parsing, admission, dispatch; inline runs' own
//!   execution excluded) plus each slot thread's time around a run (hand-off,
//!   encoding and writing the answer), divided by the requests answered. It is
//!   folded every `WINDOW` answers into a weighted mean (weight 1/4), so it
//!   follows the current load.
//!
//! Pure bookkeeping: the reactor and the workers measure and pass
//! nanoseconds in.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Answers per `T_oh` window.
const WINDOW: u64 = 256;

/// The smallest size class (bytes): inputs up to it share one estimate.
pub const MIN_CLASS: u64 = 64;

/// The size class of an input of `bytes`: the next power of two, at least
/// [`MIN_CLASS`].
pub fn size_class(bytes: u64) -> u64 {
    bytes.max(MIN_CLASS).next_power_of_two()
}

#[derive(Debug, Clone, Copy, Default)]
struct Ewma {
    mean: f64,
    samples: u64,
}

impl Ewma {
    fn add(&mut self, x: f64, weight: f64) {
        self.mean = if self.samples == 0 {
            x
        } else {
            self.mean + weight * (x - self.mean)
        };
        self.samples += 1;
    }
}

#[derive(Debug, Default)]
struct State {
    acc: BTreeMap<(u8, u64), Ewma>,
    /// This window: overhead time (I/O thread, slot threads) and answers so far.
    io_ns: u64,
    slot_ns: u64,
    inline_exec_ns: u64,
    answers: u64,
    io: Ewma,
    slot: Ewma,
}

/// One `T_acc` estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AccEstimate {
    pub function: u8,
    /// Inputs of at most this many bytes (and more than half of it).
    pub size_class: u64,
    pub t_acc_ns: f64,
    pub runs: u64,
}

/// What the node knows now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Estimates {
    /// `None` until a first window of answers has been seen.
    pub t_oh_ns: Option<f64>,
    /// Its two parts: the I/O thread's share (serial: one thread serves
    /// every slot) and the slot threads' share (parallel across slots).
    pub t_oh_io_ns: Option<f64>,
    pub t_oh_slot_ns: Option<f64>,
    pub acc: Vec<AccEstimate>,
}

impl Estimates {
    /// `function`'s `T_acc` over all its size classes, weighted by runs
    /// (the autoscaler's per-function cost); `None` before its first run.
    pub fn mean_t_acc_ns(&self, function: u8) -> Option<f64> {
        let (sum, runs) = self
            .acc
            .iter()
            .filter(|a| a.function == function && a.runs > 0)
            .fold((0.0, 0u64), |(s, n), a| {
                (s + a.t_acc_ns * a.runs as f64, n + a.runs)
            });
        (runs > 0).then(|| sum / runs as f64)
    }
}

/// Shared by the I/O thread and the slot workers.
#[derive(Debug, Default)]
pub struct Provisioning {
    state: Mutex<State>,
}

impl Provisioning {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        // A poisoned lock only means a panic elsewhere mid-update of plain
        // numbers: the figures stay usable.
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut s)
    }

    /// A function ran on `in_bytes` of input for `exec_ns`; `inline`: on the
    /// I/O thread (whose busy time then includes the run).
    pub fn record_run(&self, function: u8, in_bytes: u64, exec_ns: u64, inline: bool) {
        self.with(|s| {
            s.acc
                .entry((function, size_class(in_bytes)))
                .or_default()
                .add(exec_ns as f64, 1.0 / 32.0);
            if inline {
                s.inline_exec_ns += exec_ns;
            }
        });
    }

    /// The I/O thread's busy time (inline runs included; they are taken
    /// out when the window is folded).
    pub fn record_io_busy(&self, ns: u64) {
        self.with(|s| s.io_ns += ns);
    }

    /// A slot thread's time around a run.
    pub fn record_slot_overhead(&self, ns: u64) {
        self.with(|s| s.slot_ns += ns);
    }

    /// A request was answered.
    pub fn record_answer(&self) {
        self.with(|s| {
            s.answers += 1;
            if s.answers >= WINDOW {
                let n = s.answers as f64;
                let io = s.io_ns.saturating_sub(s.inline_exec_ns) as f64 / n;
                s.io.add(io, 0.25);
                s.slot.add(s.slot_ns as f64 / n, 0.25);
                s.io_ns = 0;
                s.slot_ns = 0;
                s.inline_exec_ns = 0;
                s.answers = 0;
            }
        });
    }

    pub fn estimates(&self) -> Estimates {
        let seen = |e: &Ewma| (e.samples > 0).then_some(e.mean);
        self.with(|s| Estimates {
            t_oh_ns: seen(&s.io).zip(seen(&s.slot)).map(|(a, b)| a + b),
            t_oh_io_ns: seen(&s.io),
            t_oh_slot_ns: seen(&s.slot),
            acc: s
                .acc
                .iter()
                .map(|(&(function, size_class), e)| AccEstimate {
                    function,
                    size_class,
                    t_acc_ns: e.mean,
                    runs: e.samples,
                })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_powers_of_two() {
        assert_eq!(size_class(0), 64);
        assert_eq!(size_class(64), 64);
        assert_eq!(size_class(65), 128);
        assert_eq!(size_class(1024), 1024);
        assert_eq!(size_class(1025), 2048);
    }

    #[test]
    fn acc_follows_the_runs_per_function_and_size() {
        let p = Provisioning::default();
        for _ in 0..100 {
            p.record_run(6, 1024, 600, false);
            p.record_run(6, 4096, 2400, false);
            p.record_run(3, 1000, 50, true);
        }
        let e = p.estimates();
        let get = |f, c| {
            e.acc
                .iter()
                .find(|a| a.function == f && a.size_class == c)
                .copied()
        };
        assert_eq!(
            get(6, 1024).map(|a| (a.t_acc_ns, a.runs)),
            Some((600.0, 100))
        );
        assert_eq!(get(6, 4096).map(|a| a.t_acc_ns), Some(2400.0));
        assert_eq!(get(3, 1024).map(|a| a.t_acc_ns), Some(50.0));
        // Moves toward a new level.
        for _ in 0..300 {
            p.record_run(6, 1024, 1200, false);
        }
        let a = p
            .estimates()
            .acc
            .into_iter()
            .find(|a| a.function == 6 && a.size_class == 1024);
        assert!(
            a.is_some_and(|a| (a.t_acc_ns - 1200.0).abs() < 1.0),
            "{a:?}"
        );
    }

    #[test]
    fn oh_is_busy_time_per_answer_without_inline_runs() {
        let p = Provisioning::default();
        assert_eq!(p.estimates().t_oh_ns, None);
        for _ in 0..WINDOW {
            p.record_io_busy(3_000); // including a 1 µs inline run
            p.record_run(2, 1024, 1_000, true);
            p.record_answer();
        }
        assert_eq!(p.estimates().t_oh_ns, Some(2_000.0));
        for _ in 0..WINDOW {
            p.record_io_busy(600);
            p.record_slot_overhead(400);
            p.record_answer();
        }
        // Each part weighted 1/4 toward the new window's: I/O 2000 -> 1750,
        // slot 0 -> 100.
        let e = p.estimates();
        assert_eq!((e.t_oh_io_ns, e.t_oh_slot_ns), (Some(1_650.0), Some(100.0)));
        assert_eq!(e.t_oh_ns, Some(1_750.0));
    }
}
