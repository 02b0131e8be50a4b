//! Time as the core and the drivers see it: instants on the driver's clock
//! (nanoseconds since an origin the driver picks; the node's real clock or
//! the simulator's virtual one) and `std::time::Duration`s. No sentinels: a
//! time that may not have happened yet is an `Option<Instant>`.

use std::ops::Add;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(u64);

impl Instant {
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(ns))
    }
}

/// Nanoseconds of a duration, as the wire's timing fields carry them.
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
