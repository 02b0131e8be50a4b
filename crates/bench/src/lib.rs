//! The offrac load generator and its baselines (`offrac bench`).
//!
//! - [`run_closed_loop`]: `clients` connections, each sending its next request
//!   when the previous answer arrives; [`run_open_loop`]: Poisson arrivals at a
//!   set rate over `connections` connections, latency measured from each
//!   request's scheduled send time (no coordinated omission).
//! - Requests can be split into `fragments` writes with a gap between them;
//!   latency is recorded both from the first and from the last fragment.
//! - Every request lands in HDR histograms per row (function and size) and per
//!   client; the node's own timing in each response header splits the round
//!   trip into network + overhead, reassembly, queue and execution.
//! - [`trace`]: parse and replay the Azure Functions 2021 trace.
//! - [`servers`]: the baselines driven by the same generator: a raw TCP echo
//!   floor and the paper's per-connection CPU server; [`grpc`]: the same
//!   functions behind a tonic gRPC service.

mod closed;
mod conn;
mod direct;
mod error;
mod open;
mod progress;
mod report;
mod rng;
mod spec;
mod stats;

pub mod grpc;
pub mod servers;
pub mod trace;

pub use closed::{connect_wire, run_closed_loop, run_closed_loop_with};
pub use conn::{Caller, Outcome, WireConn};
pub use direct::DirectCaller;
pub use error::BenchError;
pub use open::run_open_loop;
pub use report::{text_table, BenchReport, ClientRow, Row, CSV_HEADER};
pub use spec::{parse_mix, BenchSpec, MixItem};
