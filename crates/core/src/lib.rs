//! The offrac datapath as pure state machines: no I/O, no threads, no clock reads.
//!
//! A driver (the node, or the simulator under virtual time) feeds events in —
//! [`Engine::handle_bytes`], [`Engine::handle_close`], [`Engine::handle_slot_done`],
//! [`Engine::handle_timeout`] — each stamped with the current [`Instant`] on
//! the driver's clock, then drains what the engine wants done with
//! [`Engine::poll_action`] and asks when it next needs waking with
//! [`Engine::poll_timeout`].

mod buffers;
mod config;
mod connection;
mod drr;
mod engine;
mod job;
mod payload;
mod pool;
mod room;
mod selector;
mod slot;
mod stats;
mod tenancy;
mod time;

pub use buffers::{BufferError, Buffers, DEFAULT_BUFFER_BUDGET};
pub use config::{BufferPolicy, ConfigError, EngineConfig, SlotPolicy};
pub use connection::COLLECTIVE_HEAD_LEN;
pub use drr::Drr;
pub use engine::{Action, ConnId, Engine, Route};
pub use job::Job;
pub use payload::Payload;
pub use pool::{BufferId, ReassemblyPool};
pub use room::Room;
pub use selector::Selector;
pub use slot::{SlotId, SlotQueue};
pub use stats::EngineStats;
pub use tenancy::{Tenancy, TenantKey, TenantPolicy, TenantUsage};
pub use time::{nanos, Instant};

#[cfg(feature = "oracle")]
pub mod oracle;
