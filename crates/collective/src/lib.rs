//! Collectives across offrac nodes (ACCL+, seed 003): broadcast, reduce,
//! all-reduce, gather and scatter over a communicator of devices, as a
//! sans-IO state machine the node's driver runs (`docs/collectives.md`).

pub mod machine;
pub mod plan;
pub mod reduce;
pub mod wire;

pub use machine::{CallId, Collectives, Config, FailKind, Failure, Key, Out, PostId, Stats};
pub use plan::Thresholds;
pub use wire::{
    take_message_flags, Algorithm, Descriptor, Dtype, Kind, Members, Op, RedOp, WireError,
    DESCRIPTOR_LEN, MSG_ANSWER,
};
