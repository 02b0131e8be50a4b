//! Named buffers (`docs/protocol.md`, "Named buffers"): a hop for function
//! [`FN_BUFFER`](crate::FN_BUFFER) keeps data on the node under a name, or
//! reads it back as the next hop's input. Its `param` carries the
//! operation (bits 32-39) and the name (bits 0-31); bits 40-63 are 0.

/// What a buffer hop does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum BufferOp {
    /// Keep the hop's input under the name (replacing a buffer of that
    /// name); output empty.
    Put = 1,
    /// Keep a copy of the hop's input under the name; output the input.
    Tee = 2,
    /// Output the buffer's bytes followed by the hop's input (the buffer stays).
    Get = 3,
    /// Remove the buffer; output empty.
    Drop = 4,
    /// Keep the hop's input under the name only if the tenant keeps no
    /// buffer of that name (else `BUFFER_EXISTS`); output empty. Lets
    /// clients that share a tenant claim names without overwriting.
    Create = 5,
}

impl BufferOp {
    pub const ALL: [BufferOp; 5] = [
        BufferOp::Put,
        BufferOp::Tee,
        BufferOp::Get,
        BufferOp::Drop,
        BufferOp::Create,
    ];

    pub fn name(self) -> &'static str {
        match self {
            BufferOp::Put => "put",
            BufferOp::Tee => "tee",
            BufferOp::Get => "get",
            BufferOp::Drop => "drop",
            BufferOp::Create => "create",
        }
    }

    pub fn from_name(name: &str) -> Option<BufferOp> {
        BufferOp::ALL.into_iter().find(|o| o.name() == name)
    }
}

/// The `param` of a buffer hop.
pub fn buffer_param(op: BufferOp, name: u32) -> u64 {
    (u64::from(op as u8) << 32) | u64::from(name)
}

/// The `param` of a collective hop (a hop for [`crate::FN_COLLECTIVE`] in a
/// chain of two or more hops, `docs/protocol.md`, "Collective hops"): the
/// named buffer holding the call's 64-byte descriptor in bits 0-31, the
/// number added to the descriptor's tag in bits 32-63.
pub fn collective_hop_param(descriptor: u32, tag: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(descriptor)
}

/// A collective hop's `param` as (descriptor buffer, tag added).
pub fn decode_collective_hop_param(param: u64) -> (u32, u32) {
    (param as u32, (param >> 32) as u32)
}

/// A buffer hop's `param` that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BufferParamError {
    #[error("buffer operation {0} is not 1 (put), 2 (tee), 3 (get), 4 (drop) or 5 (create)")]
    UnknownOp(u8),
    #[error("bits 40-63 of a buffer hop's param must be 0 (param {0:#x})")]
    Reserved(u64),
}

/// The operation and name of a buffer hop's `param`.
pub fn decode_buffer_param(param: u64) -> Result<(BufferOp, u32), BufferParamError> {
    if param >> 40 != 0 {
        return Err(BufferParamError::Reserved(param));
    }
    let op = match (param >> 32) as u8 {
        1 => BufferOp::Put,
        2 => BufferOp::Tee,
        3 => BufferOp::Get,
        4 => BufferOp::Drop,
        5 => BufferOp::Create,
        o => return Err(BufferParamError::UnknownOp(o)),
    };
    Ok((op, param as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_round_trip_and_refuse_junk() {
        for op in BufferOp::ALL {
            for name in [0, 7, u32::MAX] {
                assert_eq!(decode_buffer_param(buffer_param(op, name)), Ok((op, name)));
            }
            assert_eq!(BufferOp::from_name(op.name()), Some(op));
        }
        assert_eq!(buffer_param(BufferOp::Get, 5), 0x0000_0003_0000_0005);
        assert_eq!(decode_buffer_param(5), Err(BufferParamError::UnknownOp(0)));
        assert_eq!(
            decode_buffer_param(0x0000_0006_0000_0001),
            Err(BufferParamError::UnknownOp(6))
        );
        assert_eq!(
            decode_buffer_param(1 << 40 | 1 << 32),
            Err(BufferParamError::Reserved(1 << 40 | 1 << 32))
        );
    }
}
