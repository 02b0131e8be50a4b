//! Valid request payloads for the built-in functions, for load generation.

use offrac_proto::FunctionId;

use crate::client::ClientError;
use crate::rng::SplitMix64;

/// A payload of about `bytes` bytes with valid input for `function`, and the
/// param to send with it. `topk`: random i32; `logit`: f32 strictly inside
/// (0, 1); `minmax`: random finite f32 in [-1000, 1000); `matmul`: two n×n
/// f32 matrices in [-1, 1), n = `param`, or inferred from `bytes` when `param`
/// is 0 (the param is then sent as 0); `echo`/`spin`: random bytes. Array
/// payloads are rounded down to whole elements, at least one.
pub fn generate_payload(
    function: FunctionId,
    param: u64,
    bytes: usize,
    seed: u64,
) -> Result<Vec<u8>, ClientError> {
    let mut rng = SplitMix64::new(seed);
    let elems = (bytes / 4).max(1);
    let out = match function {
        FunctionId::Echo | FunctionId::Spin => {
            let mut v = vec![0u8; bytes];
            rng.fill_bytes(&mut v);
            v
        }
        FunctionId::TopK => (0..elems)
            .flat_map(|_| rng.next_u32().to_le_bytes())
            .collect(),
        FunctionId::Logit => (0..elems)
            .flat_map(|_| {
                // k / 2^24 with k in 1..2^24 is exact in f32 and strictly inside (0, 1).
                let k = 1 + (rng.next_u32() >> 8) % ((1 << 24) - 1);
                (k as f32 / (1u32 << 24) as f32).to_le_bytes()
            })
            .collect(),
        FunctionId::MinMax => (0..elems)
            .flat_map(|_| ((rng.next_f64() * 2000.0 - 1000.0) as f32).to_le_bytes())
            .collect(),
        FunctionId::MatMul => {
            let n = if param == 0 {
                ((bytes / 8) as f64).sqrt().floor().max(1.0) as u64
            } else {
                param
            };
            let len = n
                .checked_mul(n)
                .and_then(|nn| nn.checked_mul(8))
                .filter(|&l| l <= u32::MAX as u64)
                .ok_or_else(|| {
                    ClientError::Config(format!("matmul n={n} does not fit one request"))
                })?;
            (0..len / 4)
                .flat_map(|_| ((rng.next_f64() * 2.0 - 1.0) as f32).to_le_bytes())
                .collect()
        }
    };
    if out.len() > u32::MAX as usize {
        return Err(ClientError::PayloadTooLarge(out.len()));
    }
    Ok(out)
}
