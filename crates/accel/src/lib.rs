//! Accelerators: one small interface, complete request in, response out.
//!
//! A slot owns one `Box<dyn Accelerator>` and calls [`Accelerator::run`] for
//! each complete request, to completion. Errors are values, never panics.

use offrac_proto::FunctionId;

/// Why a function refused or failed a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccelError {
    /// The payload or parameter is not acceptable input (status `BAD_INPUT`).
    #[error("bad input: {0}")]
    BadInput(String),
    /// The function itself failed (status `INTERNAL`).
    #[error("internal error: {0}")]
    Internal(String),
}

/// A function a slot can host.
pub trait Accelerator: Send {
    /// Which function this is.
    fn function(&self) -> FunctionId;
    /// Run on one complete request. `out` arrives empty (capacity reused
    /// between calls) and receives the whole result payload.
    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError>;
}

/// A fresh instance of a built-in function.
pub fn builtin(f: FunctionId) -> Box<dyn Accelerator> {
    todo!("built-in {f:?}")
}
