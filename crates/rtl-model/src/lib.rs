//! The RTL request path (`rtl/offrac_request_path.v`) Verilated into a
//! cycle-stepped model, and the thin TCP driver that makes it the node's
//! datapath (`offrac serve --datapath rtl`, docs/rtl.md "The Verilated
//! datapath").
//!
//! Everything here needs the `model` feature (and Verilator 5 at build time);
//! without it the crate is empty, so ordinary workspace builds need no
//! Verilator.

#[cfg(feature = "model")]
mod model;
#[cfg(feature = "model")]
mod serve;

#[cfg(feature = "model")]
pub use model::{Model, OutBeat, CONNECTIONS, MAX_PAYLOAD};
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
}
