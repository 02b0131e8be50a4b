//! The RTL request path (`rtl/offrac_request_path.v`) Verilated into a
//! cycle-stepped model, and the thin TCP driver that makes it the node's
//! datapath (`offrac serve --datapath rtl`, docs/rtl.md "The Verilated
//! datapath").
//!
//! The model and the driver need the `model` feature (and Verilator 5 at
//! build time); without it only the instance's parameters and the check of a
//! node configuration against them are here, so ordinary workspace builds
//! need no Verilator.

mod check;
pub mod params;

#[cfg(feature = "model")]
mod model;
#[cfg(feature = "model")]
mod serve;

pub use check::{check_settings, slot_mask, RtlSettings, SlotPolicy};
#[cfg(feature = "model")]
pub use model::{Model, OutBeat};
pub use params::{CONNECTIONS, DEFAULT_SLOT_MASK, MAX_PAYLOAD, SLOT_FUNCS, SLOT_POLICY_RUNTIME};
#[cfg(feature = "model")]
pub use serve::{serve, ServeStats};

/// Errors of the model and its driver.
#[derive(Debug, thiserror::Error)]
pub enum RtlError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("the RTL did not take the MapId dictionary: {0}")]
    Dictionary(String),
    #[error("the RTL did not take the Bucketize border sets: {0}")]
    Borders(String),
    /// A setting of the node's configuration the Verilated instance cannot
    /// host (its parameters are fixed when it is built).
    #[error("--datapath rtl cannot host {setting} = {value}: {limit} (docs/rtl.md, \"The Verilated datapath\")")]
    Unsupported {
        setting: String,
        value: String,
        limit: String,
    },
}
