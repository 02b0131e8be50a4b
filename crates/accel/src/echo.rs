//! `echo` (id 0): the output is the input, byte for byte.

use offrac_proto::FunctionId;

use crate::{AccelError, Accelerator};

/// Returns its input unchanged (any length, including empty). `param` unused.
#[derive(Debug, Default, Clone, Copy)]
pub struct Echo;

impl Accelerator for Echo {
    fn function(&self) -> FunctionId {
        FunctionId::Echo
    }

    /// memcpy: ~1 µs per 64 KiB (`make bench-kernels`).
    fn inline_max_bytes(&self) -> usize {
        65536
    }

    fn run(&mut self, _param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        out.extend_from_slice(input);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoes_any_bytes() {
        for input in [&b""[..], b"x", b"hello, world", &[0u8, 255, 7]] {
            let mut out = Vec::new();
            Echo.run(123, input, &mut out).unwrap();
            assert_eq!(out, input);
        }
    }
}
