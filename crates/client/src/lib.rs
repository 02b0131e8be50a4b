//! Blocking client for an offrac node (`docs/protocol.md`) and a closed-loop
//! load driver ([`demo`]) used by `offrac demo` and `offrac bench`.
//!
//! ```no_run
//! use offrac_client::{Client, FunctionId};
//! let mut client = Client::connect("127.0.0.1:7070")?;
//! let reply = client.call(FunctionId::Echo, 0, b"hello")?;
//! assert_eq!(reply.payload, b"hello");
//! # Ok::<(), offrac_client::ClientError>(())
//! ```

mod client;
pub mod demo;
mod rng;

pub use client::{
    Client, ClientError, FunctionCode, Reply, RetryPolicy, DEFAULT_MAX_RESPONSE_PAYLOAD,
};
pub use demo::{generate_payload, run_closed_loop, FunctionRow, LoadReport, LoadSpec, MixOrder};
pub use offrac_proto::{FunctionId, ResponseHeader, Status};
