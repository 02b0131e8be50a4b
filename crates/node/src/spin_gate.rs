//! Whether a loop with nothing to do may keep polling instead of sleeping.
//!
//! Polling instead of sleeping saves the wake-up of the next message, which
//! on a VM costs ~30–70 µs when it lands on another, sleeping vCPU
//! (docs/results.md, "Where the scheduler puts a wake-up"). It pays only
//! while the spinning thread takes a CPU nobody else wants: on shared cores a
//! spinner delays the very client or backend it waits for (a four-client hit
//! rate halved with `spin_us = 100`). `SpinWhen::CpuIdle` therefore lets a
//! loop spin only while the machine has no more runnable threads than CPUs,
//! counting the spinner itself. Sans-IO: the driver reads the machine's
//! runnable threads when the gate asks for a reading (`runnable.rs`) and
//! passes the time in.

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

/// How long one reading of the runnable threads decides for: short enough
/// that a spinner stops within a small share of a time slice after a client
/// becomes runnable, long enough that reading (~2 µs) stays a small share
/// of the spin.
pub const READING_FRESH: Duration = Duration::from_micros(20);

#[derive(Debug, Clone)]
pub struct SpinGate {
    when: SpinWhen,
    /// Spinning is allowed while the runnable threads (the spinner counted)
    /// are at most this many; 0 never allows it.
    room: u32,
    /// The last reading's time and verdict.
    last: Option<(Instant, bool)>,
    /// Readings that refused a spin the window allowed, not yet taken for the metrics.
    refused: u64,
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
            refused: 0,
        }
    }

    /// Whether the gate needs a new reading to decide at `now`.
    pub fn wants_reading(&self, now: Instant) -> bool {
        self.when == SpinWhen::CpuIdle
            && self
                .last
                .is_none_or(|(t, _)| now.saturating_duration_since(t) >= READING_FRESH)
    }

    /// A reading of the machine's runnable threads at `now` (`None`: the
    /// machine would not say, in which case the loop spins as configured).
    pub fn observe(&mut self, now: Instant, runnable: Option<u32>) {
        let ok = runnable.is_none_or(|r| r <= self.room);
        if !ok {
            self.refused += 1;
        }
        self.last = Some((now, ok));
    }

    /// Whether a loop inside its spin window may spin now.
    pub fn may_spin(&self) -> bool {
        match self.when {
            SpinWhen::Always => true,
            SpinWhen::CpuIdle => self.last.is_some_and(|(_, ok)| ok),
        }
    }

    /// Readings that refused a spin since the last call (for a counter).
    pub fn take_refused(&mut self) -> u64 {
        std::mem::take(&mut self.refused)
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
        let g = SpinGate::new(SpinWhen::Always, 1, 1);
        assert!(!g.wants_reading(Instant::now()));
        assert!(g.may_spin());
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
        assert_eq!(g.take_refused(), 1);
        assert_eq!(g.take_refused(), 0, "taken once");
        assert!(
            g.wants_reading(t0 + READING_FRESH * 2),
            "a stale reading is renewed"
        );
        g.observe(t0 + READING_FRESH * 2, Some(1));
        assert!(g.may_spin());
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
