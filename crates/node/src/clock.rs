//! The node's clock: the one place the real time is read and turned into the
//! engine's and driver's nanoseconds.

use offrac_core::Nanos;
use std::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct NodeClock {
    origin: Instant,
}

impl NodeClock {
    pub fn start() -> NodeClock {
        NodeClock {
            origin: Instant::now(),
        }
    }

    /// Nanoseconds since the node started (never 0: 0 means "not yet" in job timings).
    pub fn now(&self) -> Nanos {
        self.origin.elapsed().as_nanos() as Nanos + 1
    }
}
