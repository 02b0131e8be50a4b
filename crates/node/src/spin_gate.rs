//! Whether a loop with nothing to do may keep polling instead of sleeping.
//!
//! Polling instead of sleeping saves the wake-up of the next message, which
//! on a VM costs ~30–70 µs when it lands on another, sleeping vCPU
//! (docs/results.md, "Where the scheduler puts a wake-up"). It pays only
//! while the spinning thread takes a CPU nobody else wants: on shared cores a
//! spinner delays the very client or backend it waits for (a four-client hit
//! rate halved with `spin_us = 100`). `SpinWhen::CpuIdle` therefore lets a
//! loop spin only while the machine has no more runnable threads than CPUs,
//! counting the spinner itself. A refusal holds longer with each refusal in
//! a row, so a busy machine is not read at every turn. Sans-IO: the driver
//! reads the machine's runnable threads when the gate asks for a reading
//! (`runnable.rs`) and passes the time in.

use serde::Deserialize;
use std::time::{Duration, Instant};

/// When a loop configured to spin may do so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpinWhen {
    /// Whenever the loop is inside its spin window.
    Always,
    /// Only while no more threads are runnable than the machine has CPUs
    /// (and the loop may run on at least two): a CPU would otherwise idle.
    CpuIdle,
}

/// How long a reading that allows spinning decides for: short enough that a
/// spinner stops within a small share of a time slice after a client becomes
/// runnable, long enough that reading (~2 µs) stays a small share of the spin.
pub const READING_FRESH: Duration = Duration::from_micros(20);

/// The longest a refusing reading decides for. Each refusal in a row doubles
/// how long the verdict holds (from [`READING_FRESH`]): on a machine that stays
/// oversubscribed a loop then sleeps as `spin_us = 0` does without paying a
/// reading (~2 µs) at nearly every turn (a 4-client hit workload read once
/// per 2.4 hits, 3 % of the node's CPU); once the load goes, spinning comes
/// back within this long (a reading every 4 ms costs ~0.05 % of a CPU).
pub const REFUSAL_HOLD_MAX: Duration = Duration::from_millis(4);

#[derive(Debug, Clone)]
pub struct SpinGate {
    when: SpinWhen,
    /// Spinning is allowed while the runnable threads (the spinner counted)
    /// are at most this many; 0 never allows it.
    room: u32,
    /// The last reading's time and verdict.
    last: Option<(Instant, bool)>,
    /// How long the last reading's verdict holds.
    hold: Duration,
    /// Spins the window allowed and the gate refused, not yet taken for the metrics.
    refused: u64,
    /// Readings taken, not yet taken for the metrics.
    readings: u64,
}

impl SpinGate {
    /// `usable`: CPUs this thread may run on; `online`: the machine's CPUs
    /// (the runnable count is machine-wide). A loop tied to one CPU never
    /// spins under `CpuIdle`: what it waits for would need that CPU.
    pub fn new(when: SpinWhen, usable: u32, online: u32) -> Self {
        let room = if usable < 2 { 0 } else { online };
        SpinGate {
            when,
            room,
            last: None,
            hold: READING_FRESH,
            refused: 0,
            readings: 0,
        }
    }

    /// Whether the gate needs a new reading to decide at `now`.
    pub fn wants_reading(&self, now: Instant) -> bool {
        self.when == SpinWhen::CpuIdle
            && self
                .last
                .is_none_or(|(t, _)| now.saturating_duration_since(t) >= self.hold)
    }

    /// A reading of the machine's runnable threads at `now` (`None`: the
    /// machine would not say, in which case the loop spins as configured).
    pub fn observe(&mut self, now: Instant, runnable: Option<u32>) {
        let ok = runnable.is_none_or(|r| r <= self.room);
        self.readings += 1;
        let refused_before = self.last.is_some_and(|(_, ok)| !ok);
        self.hold = if !ok && refused_before {
            (self.hold * 2).min(REFUSAL_HOLD_MAX)
        } else {
            READING_FRESH
        };
        self.last = Some((now, ok));
    }

    /// Whether a loop inside its spin window may spin now; a no is counted
    /// (the loop sleeps instead).
    pub fn may_spin(&mut self) -> bool {
        let ok = match self.when {
            SpinWhen::Always => true,
            SpinWhen::CpuIdle => self.last.is_some_and(|(_, ok)| ok),
        };
        if !ok {
            self.refused += 1;
        }
        ok
    }

    /// Spins refused since the last call (for a counter).
    pub fn take_refused(&mut self) -> u64 {
        std::mem::take(&mut self.refused)
    }

    /// Readings taken since the last call (for a counter).
    pub fn take_readings(&mut self) -> u64 {
        std::mem::take(&mut self.readings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    #[test]
    fn always_spins_without_readings() {
        let mut g = SpinGate::new(SpinWhen::Always, 1, 1);
        assert!(!g.wants_reading(Instant::now()));
        assert!(g.may_spin());
        assert_eq!(g.take_readings(), 0);
    }

    #[test]
    fn cpu_idle_spins_only_while_a_cpu_is_free() {
        let t0 = Instant::now();
        let mut g = SpinGate::new(SpinWhen::CpuIdle, 2, 2);
        assert!(g.wants_reading(t0), "no reading yet");
        assert!(!g.may_spin(), "no reading: no verdict to spin on");
        g.observe(t0, Some(2));
        assert!(g.may_spin(), "the spinner and one more thread on two CPUs");
        assert!(!g.wants_reading(t0 + us(5)), "a fresh reading decides");
        g.observe(t0 + READING_FRESH, Some(3));
        assert!(
            !g.may_spin(),
            "a third runnable thread would wait for the spinner"
        );
        assert!(!g.may_spin(), "each no is a sleep, counted");
        assert_eq!(g.take_refused(), 3, "the one before any reading too");
        assert_eq!(g.take_refused(), 0, "taken once");
        assert_eq!(g.take_readings(), 2);
        assert!(
            g.wants_reading(t0 + READING_FRESH * 2),
            "a first refusal holds as long as an allowing reading"
        );
        g.observe(t0 + READING_FRESH * 2, Some(1));
        assert!(g.may_spin());
    }

    #[test]
    fn refusals_in_a_row_hold_longer_and_an_allowing_reading_resets() {
        let t0 = Instant::now();
        let mut g = SpinGate::new(SpinWhen::CpuIdle, 2, 2);
        let mut t = t0;
        let mut holds = Vec::new();
        for _ in 0..12 {
            g.observe(t, Some(5));
            assert!(!g.may_spin());
            // The verdict holds until the next reading is wanted.
            let mut hold = us(1);
            while !g.wants_reading(t + hold) {
                hold += us(1);
            }
            holds.push(hold);
            t += hold;
        }
        let doubling: Vec<Duration> = (0..8).map(|k| us(20 << k)).collect();
        assert_eq!(&holds[..8], &doubling[..], "20 µs doubling to 2.56 ms");
        assert!(
            holds[8..].iter().all(|&h| h == REFUSAL_HOLD_MAX),
            "{holds:?}"
        );
        assert_eq!(g.take_readings(), 12);
        // An idle machine: spinning comes back at the next reading, and its
        // verdict holds the short time again.
        g.observe(t, Some(1));
        assert!(g.may_spin());
        assert!(g.wants_reading(t + READING_FRESH));
        // A refusal after an allowing reading starts the doubling afresh.
        g.observe(t + READING_FRESH, Some(5));
        assert!(g.wants_reading(t + READING_FRESH * 2));
    }

    #[test]
    fn a_loop_tied_to_one_cpu_never_spins_under_cpu_idle() {
        let t0 = Instant::now();
        let mut g = SpinGate::new(SpinWhen::CpuIdle, 1, 8);
        g.observe(t0, Some(1));
        assert!(!g.may_spin());
    }

    #[test]
    fn no_reading_available_spins_as_configured() {
        let mut g = SpinGate::new(SpinWhen::CpuIdle, 2, 2);
        g.observe(Instant::now(), None);
        assert!(g.may_spin());
    }

    #[test]
    fn spin_when_reads_from_toml_names() {
        #[derive(Deserialize)]
        struct T {
            w: SpinWhen,
        }
        let t: T = toml::from_str("w = \"always\"").expect("always");
        assert_eq!(t.w, SpinWhen::Always);
        let t: T = toml::from_str("w = \"cpu_idle\"").expect("cpu_idle");
        assert_eq!(t.w, SpinWhen::CpuIdle);
        assert!(toml::from_str::<T>("w = \"sometimes\"").is_err());
    }
}
