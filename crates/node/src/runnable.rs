//! Reads how many threads the machine has runnable right now, for the spin
//! gate (`spin_gate.rs`): the fourth field of `/proc/loadavg` ("running/total")
//! is the kernel's instantaneous count over all CPUs, the reader included.
//! One `pread` of an open file, about a microsecond.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use crate::spin_gate::{SpinGate, SpinWhen};

pub struct RunnableProbe {
    file: Option<File>,
}

impl RunnableProbe {
    pub fn open() -> Self {
        RunnableProbe {
            file: File::open("/proc/loadavg").ok(),
        }
    }

    /// Whether this machine gives a reading at all.
    pub fn available(&self) -> bool {
        self.file.is_some()
    }

    /// The runnable threads, or `None` if the machine would not say.
    pub fn read(&self) -> Option<u32> {
        let mut buf = [0u8; 128];
        let n = self.file.as_ref()?.read_at(&mut buf, 0).ok()?;
        parse_loadavg(buf.get(..n)?)
    }
}

/// The running count of a `/proc/loadavg` line ("0.36 1.10 1.47 1/79 23543").
pub fn parse_loadavg(line: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(line).ok()?;
    let field = text.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

/// CPUs this thread may run on, and the machine's online CPUs.
pub fn cpus() -> (u32, u32) {
    let usable = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    // SAFETY: sysconf has no preconditions; it only reads a system value.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let online = u32::try_from(online).unwrap_or(usable).max(1);
    (usable, online)
}

/// A spin gate for a loop of this process, with its probe.
pub struct Spinner {
    gate: SpinGate,
    probe: RunnableProbe,
}

impl Spinner {
    pub fn new(when: SpinWhen) -> Self {
        let (usable, online) = cpus();
        let probe = RunnableProbe::open();
        if when == SpinWhen::CpuIdle && !probe.available() {
            tracing::warn!(
                "spin_when = \"cpu_idle\" cannot read /proc/loadavg; loops spin as configured"
            );
        }
        Spinner {
            gate: SpinGate::new(when, usable, online),
            probe,
        }
    }

    /// Whether a loop inside its spin window may spin now (reads the
    /// machine when the last reading is stale).
    pub fn may_spin(&mut self) -> bool {
        let now = Instant::now();
        if self.gate.wants_reading(now) {
            self.gate.observe(now, self.probe.read());
        }
        self.gate.may_spin()
    }

    /// Refusals since the last call (for a counter).
    pub fn take_refused(&mut self) -> u64 {
        self.gate.take_refused()
    }

    /// Readings of the machine since the last call (for a counter).
    pub fn take_readings(&mut self) -> u64 {
        self.gate.take_readings()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_running_field() {
        assert_eq!(parse_loadavg(b"0.36 1.10 1.47 1/79 23543\n"), Some(1));
        assert_eq!(parse_loadavg(b"12.00 9.1 7.0 17/1024 9\n"), Some(17));
        assert_eq!(parse_loadavg(b"0.36 1.10 1.47\n"), None);
        assert_eq!(parse_loadavg(b"a b c x/y z"), None);
    }
}
