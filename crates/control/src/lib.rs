//! The offrac control plane (`docs/control.md`): the function library of
//! WebAssembly modules ([`library`], run by [`wasm`]), the control envelope
//! on the wire ([`wire`]) and its authentication ([`auth`]), and the swap
//! controller ([`swap`]), a sans-IO state machine the node drives, and the
//! autoscaler's policy ([`autoscale`]), another; operations over several
//! slots ([`ops`]: forced unload, replicate) are batches of swaps.

pub mod auth;
pub mod autoscale;
pub mod examples;
pub mod library;
pub mod ops;
pub mod swap;
pub mod wasm;
pub mod wire;

pub use auth::{AuthError, Authenticator};
pub use autoscale::{
    AutoscaleConfig, AutoscaleError, Autoscaler, Decision, FunctionLoad, SlotRole,
};
pub use library::{
    digest_of, hex_digest, Compiler, Library, LibraryConfig, LibraryError, Prepared,
};
pub use ops::{plan_replicate, plan_resize, plan_shrink, plan_unload, Batch, OpError};
pub use swap::{Command, SwapController, SwapError, SwapReport, WASM_FUNCTIONS};
pub use wasm::{WasmError, WasmFunction, WasmLimits};
pub use wire::{Digest, Envelope, Op, Target, WireError, FN_CONTROL};
