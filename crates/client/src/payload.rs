//! Valid request payloads for the built-in functions, for load generation.

use offrac_accel::dlrm::state::{default_dictionary_key, DEFAULT_DICTIONARY_KEYS};
use offrac_accel::ragged::encode_id_lists;
use offrac_proto::FunctionId;

use crate::client::ClientError;
use crate::rng::SplitMix64;

/// A payload of about `bytes` bytes with valid input for `function`, and the
/// param to send with it. `topk`: random i32; `logit`: f32 strictly inside
/// (0, 1); `minmax`: random finite f32 in [-1000, 1000); `matmul`: two n×n
/// f32 matrices in [-1, 1), n = `param`, or inferred from `bytes` when `param`
/// is 0 (the param is then sent as 0); `echo`/`spin`: random bytes;
/// `mapid`: 90 % keys of the built-in dictionary, 10 % others;
/// `sparsetransform`: f32 counts, half of them 0; `bucketize`/`boxcox`:
/// positive counts spread over six decades; `sigridhash`: random ids;
/// `getlocalhour`: timestamps of 2026; `onehot`: ids below `param`; the
/// id-list functions: the ragged layout, rows of 0-7 ids (0-3 for
/// `cartesian`); `cnn`: a random 8×8 grey image expanded to the CNN's
/// 64×64×3 uint16 input (always 24,576 bytes); `gemv`: an m×n matrix and
/// an n-vector in [-1, 1), n = `param` (1 when 0). Array payloads are rounded
/// down to whole elements, at least one.
pub fn generate_payload(
    function: FunctionId,
    param: u64,
    bytes: usize,
    seed: u64,
) -> Result<Vec<u8>, ClientError> {
    let mut rng = SplitMix64::new(seed);
    let elems = (bytes / 4).max(1);
    let words = |rng: &mut SplitMix64, f: &mut dyn FnMut(&mut SplitMix64) -> [u8; 4]| {
        (0..elems).flat_map(|_| f(rng)).collect::<Vec<u8>>()
    };
    // A count spread log-uniformly over [1, 10^6).
    let count = |rng: &mut SplitMix64| 10f64.powf(rng.next_f64() * 6.0).floor() as f32;
    let out = match function {
        FunctionId::Echo | FunctionId::Spin => {
            let mut v = vec![0u8; bytes];
            rng.fill_bytes(&mut v);
            v
        }
        FunctionId::TopK | FunctionId::SigridHash => {
            words(&mut rng, &mut |r| r.next_u32().to_le_bytes())
        }
        FunctionId::Logit => words(&mut rng, &mut |r| {
            // k / 2^24 with k in 1..2^24 is exact in f32 and strictly inside (0, 1).
            let k = 1 + (r.next_u32() >> 8) % ((1 << 24) - 1);
            (k as f32 / (1u32 << 24) as f32).to_le_bytes()
        }),
        FunctionId::MinMax => words(&mut rng, &mut |r| {
            ((r.next_f64() * 2000.0 - 1000.0) as f32).to_le_bytes()
        }),
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
        FunctionId::MapId => words(&mut rng, &mut |r| {
            if r.below(10) == 0 {
                r.next_u32()
            } else {
                default_dictionary_key(r.below(DEFAULT_DICTIONARY_KEYS) as u64)
            }
            .to_le_bytes()
        }),
        FunctionId::SparseTransform => words(&mut rng, &mut |r| {
            let c = count(r);
            if r.below(2) == 0 { 0.0 } else { c }.to_le_bytes()
        }),
        FunctionId::Bucketize | FunctionId::BoxCox => {
            words(&mut rng, &mut |r| count(r).to_le_bytes())
        }
        FunctionId::GetLocalHour => words(&mut rng, &mut |r| {
            // 2026-01-01T00:00:00Z plus up to a year.
            (1_767_225_600 + r.below(365 * 86_400) as u32).to_le_bytes()
        }),
        FunctionId::Onehot => {
            let classes = param.clamp(1, u64::from(u32::MAX)) as usize;
            words(&mut rng, &mut |r| (r.below(classes) as u32).to_le_bytes())
        }
        FunctionId::FirstX
        | FunctionId::IdListTransform
        | FunctionId::Cartesian
        | FunctionId::NGram => {
            let max_len = if function == FunctionId::Cartesian {
                4
            } else {
                8
            };
            id_lists(&mut rng, bytes, max_len)
        }
        FunctionId::Gemv => {
            // An m×n matrix and its n-vector, n = `param` (1 when 0); values in [-1, 1).
            let n = param.clamp(1, elems as u64) as usize;
            let m = (elems / n).saturating_sub(1).max(1);
            (0..(m + 1) * n)
                .flat_map(|_| ((rng.next_f64() * 2.0 - 1.0) as f32).to_le_bytes())
                .collect()
        }
        FunctionId::Cnn => {
            // A random 8×8 grey "digit", expanded as the CNN's input; the
            // size is fixed, whatever `bytes` asks for.
            let mut grey = [0u8; 64];
            grey.iter_mut().for_each(|g| *g = rng.below(17) as u8);
            offrac_accel::digit_image(&grey)
        }
    };
    if out.len() > u32::MAX as usize {
        return Err(ClientError::PayloadTooLarge(out.len()));
    }
    Ok(out)
}

/// A ragged payload of about `bytes` bytes: an even number of rows (so the
/// pairwise functions accept it) of `0..max_len` ids drawn from a small
/// vocabulary (so pairs overlap).
fn id_lists(rng: &mut SplitMix64, bytes: usize, max_len: usize) -> Vec<u8> {
    let mut rows: Vec<Vec<u32>> = Vec::new();
    // Header word plus the closing offset, then a word per row and per id.
    let mut size = 8;
    while size < bytes || rows.len() % 2 == 1 {
        let row: Vec<u32> = (0..rng.below(max_len))
            .map(|_| rng.below(64) as u32)
            .collect();
        size += 4 * (1 + row.len());
        rows.push(row);
    }
    encode_id_lists(&rows)
}
