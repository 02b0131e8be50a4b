//! Blocking client for an offrac node (`docs/protocol.md`), and valid
//! payloads for its built-in functions (used by the load generator, `offrac bench`).
//!
//! ```no_run
//! use offrac_client::{Client, FunctionId};
//! let mut client = Client::connect("127.0.0.1:7070")?;
//! let reply = client.call(FunctionId::Echo, 0, b"hello")?;
//! assert_eq!(reply.payload, b"hello");
//! # Ok::<(), offrac_client::ClientError>(())
//! ```

mod client;
mod payload;
pub mod rng;

pub use client::{
    write_all_vectored, Client, ClientError, FunctionCode, Reply, RetryPolicy,
    DEFAULT_MAX_RESPONSE_PAYLOAD,
};
pub use offrac_proto::{FunctionId, Hop, ResponseHeader, Status};
pub use payload::generate_payload;
