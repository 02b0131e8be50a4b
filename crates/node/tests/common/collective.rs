//! Collective calls as a client sends them (docs/collectives.md).

use offrac_collective::{Algorithm, Descriptor, Dtype, Members, Op};

/// The payload of an i32 sum all-reduce call over devices 0, 1 and 2 (root
/// 0): the descriptor with `flags` in byte 7 (bit 0: the input is a named
/// buffer), then `input`.
pub fn allreduce_payload(
    tag: u64,
    count: u32,
    algorithm: Algorithm,
    timeout_ms: u32,
    flags: u8,
    input: &[i32],
) -> Vec<u8> {
    let d = Descriptor {
        algorithm,
        tag,
        timeout_ms,
        ..Descriptor::call(Op::AllReduce, Dtype::I32, count, Members::of(&[0, 1, 2]))
    };
    let mut payload = d.encode().to_vec();
    payload[7] = flags;
    payload.extend(input.iter().flat_map(|x| x.to_le_bytes()));
    payload
}
