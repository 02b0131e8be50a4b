//! Accelerators: one small interface, complete request in, response out.
//!
//! A slot owns one `Box<dyn Accelerator>` and calls [`Accelerator::run`] for
//! each complete request, to completion. Errors are values, never panics.
//!
//! The built-in functions and their exact semantics (edge cases included) are
//! documented in `docs/accelerators.md`; each lives in its own module here.

use offrac_proto::FunctionId;

mod cnn;
pub mod dlrm;
mod echo;
mod elems;
mod gemv;
mod logit;
mod matmul;
mod minmax;
pub mod ragged;
mod spin;
mod topk;

pub use cnn::{
    cnn_warm_up, digit_image, Cnn, CNN_CHANNELS, CNN_CLASSES, CNN_INPUT_BYTES, CNN_SIDE,
};
pub use echo::Echo;
pub use gemv::Gemv;
pub use logit::Logit;
pub use matmul::{MatMul, MATMUL_MAX_N};
pub use minmax::MinMax;
pub use spin::{Spin, SPIN_MAX_MICROS};
pub use topk::TopK;

pub use dlrm::state::FunctionState;
use dlrm::{
    BoxCox, Bucketize, Cartesian, FirstX, GetLocalHour, IdListTransform, MapId, NGram, Onehot,
    SigridHash, SparseTransform,
};

/// Why a function refused or failed a call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AccelError {
    /// The payload or parameter is not acceptable input (status `BAD_INPUT`).
    #[error("bad input: {0}")]
    BadInput(String),
    /// The function itself failed (status `INTERNAL`).
    #[error("internal error: {0}")]
    Internal(String),
    /// A WebAssembly module trapped (status `TRAPPED`).
    #[error("trapped: {0}")]
    Trapped(String),
    /// A WebAssembly module used up its fuel and was stopped (status `FUEL_EXHAUSTED`).
    #[error("fuel exhausted: {0}")]
    FuelExhausted(String),
}

impl AccelError {
    /// The one place an accelerator's error becomes a wire status.
    pub fn status(&self) -> offrac_proto::Status {
        match self {
            AccelError::BadInput(_) => offrac_proto::Status::BadInput,
            AccelError::Internal(_) => offrac_proto::Status::Internal,
            AccelError::Trapped(_) => offrac_proto::Status::Trapped,
            AccelError::FuelExhausted(_) => offrac_proto::Status::FuelExhausted,
        }
    }

    /// The message sent as the error answer's payload.
    pub fn message(&self) -> &str {
        match self {
            AccelError::BadInput(m)
            | AccelError::Internal(m)
            | AccelError::Trapped(m)
            | AccelError::FuelExhausted(m) => m,
        }
    }
}

/// A function a slot can host.
pub trait Accelerator: Send {
    /// Which function this is.
    fn function(&self) -> FunctionId;
    /// Run on one complete request. `out` arrives empty (capacity reused
    /// between calls) and receives the whole result payload.
    fn run(&mut self, param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError>;
    /// Run on the input `head` then `tail` (a kept named buffer, then the
    /// request's own bytes: a load hop's output, not joined by the node).
    /// The same answer as [`Accelerator::run`] on the joined bytes; by
    /// default it joins them (into a reused buffer) and calls it. A function
    /// that can read the two parts in place overrides it to skip the copy.
    fn run_parts(
        &mut self,
        param: u64,
        head: &[u8],
        tail: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), AccelError> {
        run_joined(self, param, head, tail, out)
    }
    /// Largest input (bytes) whose run is short enough — a few microseconds —
    /// for the node to execute it on its I/O thread rather than hand it to the
    /// slot's own thread (a hand-off costs a thread wake-up, often more than
    /// the function). 0: always use the slot's thread.
    fn inline_max_bytes(&self) -> usize {
        0
    }
}

thread_local! {
    static JOINED: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    static JOINED_BYTES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Bytes of kept parts [`run_joined`] has copied on this thread so far: a
/// slot's thread reads it around a run to count the copies its function
/// did not avoid.
pub fn bytes_joined_on_this_thread() -> u64 {
    JOINED_BYTES.get()
}

/// [`Accelerator::run`] on `head` then `tail`, joined (when both have
/// bytes) in a buffer kept per thread: a slot's thread reuses it call after
/// call instead of allocating the joined input each time.
pub fn run_joined<A: Accelerator + ?Sized>(
    accel: &mut A,
    param: u64,
    head: &[u8],
    tail: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), AccelError> {
    if head.is_empty() {
        return accel.run(param, tail, out);
    }
    if tail.is_empty() {
        return accel.run(param, head, out);
    }
    // Taken out while in use: a function that itself joins parts gets a fresh one.
    let mut joined = JOINED.take();
    JOINED_BYTES.set(JOINED_BYTES.get() + head.len() as u64);
    joined.clear();
    joined.extend_from_slice(head);
    joined.extend_from_slice(tail);
    let r = accel.run(param, &joined, out);
    JOINED.set(joined);
    r
}

/// A fresh instance of a built-in function with the built-in state (the
/// synthetic MapId dictionary, the default Bucketize borders). The state is
/// built once per process and shared, as a node shares its own (building the
/// 32,768-key dictionary for every instance made each call of this function
/// slow, and the simulator calls it for every request it executes).
pub fn builtin(f: FunctionId) -> Box<dyn Accelerator> {
    static STATE: std::sync::OnceLock<FunctionState> = std::sync::OnceLock::new();
    builtin_with(f, STATE.get_or_init(FunctionState::default))
}

/// A fresh instance of a built-in function holding `state` (shared, not
/// copied, between the instances of a node).
pub fn builtin_with(f: FunctionId, state: &FunctionState) -> Box<dyn Accelerator> {
    match f {
        FunctionId::Echo => Box::new(Echo),
        FunctionId::TopK => Box::new(TopK::new()),
        FunctionId::Logit => Box::new(Logit),
        FunctionId::MinMax => Box::new(MinMax),
        FunctionId::MatMul => Box::new(MatMul::new()),
        FunctionId::Spin => Box::new(Spin),
        FunctionId::MapId => Box::new(MapId::new(state.dictionary.clone())),
        FunctionId::SparseTransform => Box::new(SparseTransform::default()),
        FunctionId::Bucketize => Box::new(Bucketize::new(state.borders.clone())),
        FunctionId::SigridHash => Box::new(SigridHash),
        FunctionId::FirstX => Box::new(FirstX::default()),
        FunctionId::IdListTransform => Box::new(IdListTransform::default()),
        FunctionId::Cartesian => Box::new(Cartesian::default()),
        FunctionId::NGram => Box::new(NGram::default()),
        FunctionId::GetLocalHour => Box::new(GetLocalHour),
        FunctionId::Onehot => Box::new(Onehot),
        FunctionId::BoxCox => Box::new(BoxCox),
        FunctionId::Cnn => Box::new(Cnn::new()),
        FunctionId::Gemv => Box::new(Gemv::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every built-in gives the same answer on a payload split anywhere
    /// into a kept part and the request's own as on the joined bytes.
    fn split_like_joined(
        f: FunctionId,
        param: u64,
        input: &[u8],
        at: usize,
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        let param = if f == FunctionId::Spin {
            param % 50
        } else {
            param
        };
        let (head, tail) = input.split_at(at.min(input.len()));
        let (mut joined, mut split) = (Vec::new(), Vec::new());
        let a = builtin(f).run(param, input, &mut joined);
        let b = builtin(f).run_parts(param, head, tail, &mut split);
        proptest::prop_assert_eq!(&a, &b, "{:?} split at {}", f, head.len());
        proptest::prop_assert_eq!(joined, split, "{:?} split at {}", f, head.len());
        Ok(())
    }

    #[test]
    fn builtin_reports_its_function() {
        for f in FunctionId::ALL {
            assert_eq!(builtin(f).function(), f);
        }
    }

    #[test]
    fn every_builtin_rejects_or_accepts_empty_input_without_panicking() {
        for f in FunctionId::ALL {
            let mut out = Vec::new();
            let r = builtin(f).run(1, &[], &mut out);
            match f {
                FunctionId::Echo | FunctionId::Spin => {
                    assert_eq!(r, Ok(()));
                    assert!(out.is_empty());
                }
                _ => assert!(matches!(r, Err(AccelError::BadInput(_))), "{f:?}: {r:?}"),
            }
        }
    }

    /// What a hostile client can send: any bytes, any parameter, to every
    /// built-in. Each call ends in a result or `BadInput` — never a panic,
    /// never `Internal`, never an unbounded output.
    fn hostile(
        f: FunctionId,
        param: u64,
        input: &[u8],
    ) -> Result<(), proptest::test_runner::TestCaseError> {
        // Spin's parameter is a duration: keep the test fast.
        let param = if f == FunctionId::Spin {
            param % 50
        } else {
            param
        };
        let mut out = Vec::new();
        let r = builtin(f).run(param, input, &mut out);
        proptest::prop_assert!(
            matches!(r, Ok(()) | Err(AccelError::BadInput(_))),
            "{:?} param {:#x} on {} bytes: {:?}",
            f,
            param,
            input.len(),
            r
        );
        proptest::prop_assert!(
            out.len() <= dlrm::ONEHOT_MAX_OUTPUT_BYTES,
            "{f:?}: {} bytes out",
            out.len()
        );
        Ok(())
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        #[test]
        fn any_bytes_any_param(
            input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..1200),
            param in proptest::prelude::any::<u64>(),
            small in 0u64..40,
        ) {
            for f in FunctionId::ALL {
                hostile(f, param, &input)?;
                hostile(f, small, &input)?;
            }
        }

        #[test]
        fn parts_answer_as_the_joined_input(
            input in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            at in 0usize..600,
            small in 0u64..40,
        ) {
            for f in FunctionId::ALL {
                split_like_joined(f, small, &input, at)?;
            }
        }

        /// Valid id lists with one word overwritten: reaches past the layout
        /// checks into the operators.
        #[test]
        fn damaged_id_lists(
            rows in proptest::collection::vec(proptest::collection::vec(0u32..64, 0..9), 0..40),
            at in proptest::prelude::any::<proptest::sample::Index>(),
            word in proptest::prelude::any::<u32>(),
            param in 0u64..20,
        ) {
            let mut input = ragged::encode_id_lists(&rows);
            let i = at.index(input.len() / 4) * 4;
            input[i..i + 4].copy_from_slice(&word.to_le_bytes());
            for f in FunctionId::ALL {
                hostile(f, param, &input)?;
            }
        }
    }
}
