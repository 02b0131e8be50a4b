//! The node's clock: the one place the real time is read and turned into the
//! engine's and driver's nanoseconds.

use offrac_core::Instant as CoreInstant;
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

    /// Now, on the driver's clock (nanoseconds since the node started).
    pub fn now(&self) -> CoreInstant {
        CoreInstant::from_nanos(offrac_core::nanos(self.origin.elapsed()))
    }
}
