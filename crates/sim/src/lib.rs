//! A discrete-event simulator for offrac: closed- or open-loop clients send
//! requests fragment by fragment, under virtual time, to the *same*
//! `offrac_core::Engine` the node runs (or to Fig. 4's immediate-ingestion
//! baseline), following OffRAC Appendix B. See `docs/simulator.md`.

mod backend;
mod config;
mod driven;
mod driver;
pub mod faults;
mod immediate;
mod reassembled;
mod rng;
mod spec;
mod stats;
pub mod trace;
pub mod world;

pub use config::{NodeModel, OnRefusal, PoolModel, SimConfig, SimError};
pub use driver::run;
pub use spec::{parse_list, Delay, SizeDist, SpecError};
pub use stats::{Quantiles, Row, Summary};

/// Virtual time in nanoseconds.
pub type Nanos = u64;

/// Kingman's approximation of the mean wait in a G/D/1 queue fed Erlang-2
/// arrivals (OffRAC Appendix E): ρ / (4 μ (1 − ρ)), in the unit of `1/mu`.
pub fn kingman_erlang2_wait(rho: f64, service: f64) -> f64 {
    rho * service / (4.0 * (1.0 - rho))
}
