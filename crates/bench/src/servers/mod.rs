//! Baseline servers speaking the offrac framing, so the same load generator
//! drives them and the node alike:
//!
//! - [`raw`]: the epoll echo — reads the 64-byte header and the payload
//!   and answers a 64-byte response header and the same payload, nothing else;
//! - [`floor`]: the same echo with one thread per connection spinning on
//!   `recv` (no epoll): the real latency floor of kernel TCP;
//! - [`cpu`]: the paper's CPU server (OffRAC Appendix G) — `k` workers, each
//!   connection pinned to one, which reassembles the connection's request and
//!   runs the function itself: no shared pool, no slots, no queues.
//!
//! Both run on [`evloop`]: one mio event loop per worker, in the node's two
//! I/O modes (blocking, or busy-polling `spin` after the last event).

pub mod cpu;
pub mod evloop;
pub mod floor;
pub mod raw;

pub use evloop::{serve, IoMode, ServerHandle};
