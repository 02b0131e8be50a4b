//! The `jwt` attached function: an HS256 JWT verifier in front of an
//! unmodified HTTP/1.1 server. Requests with a valid bearer token are
//! forwarded and their answers relayed; the others are answered at the node
//! (401, or 400/411/413/417/431 for what is not HTTP the node can frame).
//! Decisions live in the sans-IO [`Gate`] over [`request`], [`response`]
//! and [`token`]. See docs/inline.md.

pub mod gate;
pub mod request;
pub mod response;
pub mod token;

pub use gate::{Gate, GateSettings, GateStats};
pub use token::{Policy, TokenError};
