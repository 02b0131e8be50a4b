//! `spin` (id 5): busy-computes for `param` microseconds, then echoes.
//!
//! A test and benchmark aid: it occupies its slot (and a CPU core) for a
//! known time, without sleeping.

use std::time::{Duration, Instant};

use offrac_proto::FunctionId;

use crate::{AccelError, Accelerator};

/// Largest accepted `param` for `spin`: one second.
pub const SPIN_MAX_MICROS: u64 = 1_000_000;

/// Busy-waits `param` µs (≤ [`SPIN_MAX_MICROS`]), then returns the input.
#[derive(Debug, Default, Clone, Copy)]
pub struct Spin;

impl Accelerator for Spin {
    fn function(&self) -> FunctionId {
        FunctionId::Spin
    }

    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        if param > SPIN_MAX_MICROS {
            return Err(AccelError::BadInput(format!(
                "spin time {param} µs exceeds the maximum {SPIN_MAX_MICROS} µs"
            )));
        }
        let budget = Duration::from_micros(param);
        let start = Instant::now();
        while start.elapsed() < budget {
            for _ in 0..32 {
                std::hint::spin_loop();
            }
        }
        out.extend_from_slice(input);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spins_at_least_the_requested_time_then_echoes() {
        let mut out = Vec::new();
        let t = Instant::now();
        Spin.run(2_000, b"abc", &mut out).unwrap();
        assert!(t.elapsed() >= Duration::from_micros(2_000));
        assert_eq!(out, b"abc");
    }

    #[test]
    fn zero_is_immediate() {
        let mut out = Vec::new();
        Spin.run(0, b"", &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn rejects_more_than_a_second() {
        let mut out = Vec::new();
        // (exactly SPIN_MAX_MICROS is accepted; not run here to keep tests fast)
        let e = Spin.run(SPIN_MAX_MICROS + 1, b"x", &mut out).unwrap_err();
        assert!(matches!(e, AccelError::BadInput(m) if m.contains("1000001")));
        assert!(out.is_empty());
    }
}
