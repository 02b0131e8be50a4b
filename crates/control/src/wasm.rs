//! Running a WebAssembly module as a slot's function (`docs/control.md`, "ABI").
//!
//! A module exports `memory`, `alloc(len: i32) -> i32` (where the node writes
//! the request's payload) and `run(ptr: i32, len: i32, param: i64) -> i64`:
//! a result `r >= 0` names the output as `ptr = r >> 32`, `len = r & 0xFFFF_FFFF`
//! in the same memory; `r < 0` refuses the input (`BAD_INPUT`, code `-r`).
//! No imports: a module that asks for any is refused at upload.
//!
//! Each call gets a fresh fuel budget (a looping module runs out and is
//! answered `FUEL_EXHAUSTED`); the store's memory is bounded by
//! [`WasmLimits::max_memory`]; a trap is answered `TRAPPED`. After either, the
//! instance is thrown away and the next call gets a fresh one, so the slot
//! keeps serving from a clean state.

/// Bounds on one module instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WasmLimits {
    /// Fuel per call (about one unit per WebAssembly instruction).
    pub fuel: u64,
    /// Largest linear memory, bytes.
    pub max_memory: usize,
}

impl Default for WasmLimits {
    fn default() -> WasmLimits {
        WasmLimits {
            fuel: 200_000_000,
            max_memory: 64 << 20,
        }
    }
}

/// Why a call (or an instantiation) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WasmError {
    /// The module trapped (unreachable, out-of-bounds access, division by
    /// zero, a failed memory grow, stack overflow…).
    #[error("module trapped: {0}")]
    Trapped(String),
    /// The call used up its fuel: stopped.
    #[error("module ran out of fuel ({0} units) and was stopped")]
    OutOfFuel(u64),
    /// `run` returned a negative code: the module refused the input.
    #[error("module refused the input (code {0})")]
    Refused(u64),
    /// The module broke the ABI (missing export, output out of bounds, …).
    #[error("module broke the ABI: {0}")]
    Abi(String),
}

// The runtime: wasmtime (feature `wasm`, on by default), or, in a build
// without it (the fuzz workspace), a stand-in that refuses every module.
#[cfg(feature = "wasm")]
mod runtime;
#[cfg(not(feature = "wasm"))]
#[path = "wasm/absent.rs"]
mod runtime;
pub use runtime::{check, compile, engine, Engine, Module, WasmFunction};
