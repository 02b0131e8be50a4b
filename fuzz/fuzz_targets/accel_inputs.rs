//! Every built-in function (the registry's, DLRM operators included) on
//! arbitrary input and parameter: a result or `BadInput`, never a panic,
//! never `Internal`, never an output above the largest a function may make;
//! and a reused instance (as a slot keeps it) answers as a fresh one does.
//!
//! Input: byte 0 picks the function, bytes 1..9 are the parameter (little
//! endian), the rest is split in two payloads at byte 9's fraction.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offrac_accel::{builtin, dlrm::ONEHOT_MAX_OUTPUT_BYTES, AccelError};
use offrac_proto::FunctionId;

fn run(
    acc: &mut dyn offrac_accel::Accelerator,
    f: FunctionId,
    param: u64,
    input: &[u8],
) -> (Result<(), AccelError>, Vec<u8>) {
    let mut out = Vec::new();
    let r = acc.run(param, input, &mut out);
    // This build leaves the CNN's runtime out (docs/fuzzing.md): a whole image
    // is answered with an internal error; every other size is still BadInput.
    let no_runtime = f == FunctionId::Cnn && input.len() == offrac_accel::CNN_INPUT_BYTES;
    assert!(
        matches!(r, Ok(()) | Err(AccelError::BadInput(_)))
            || (no_runtime && matches!(r, Err(AccelError::Internal(_)))),
        "{f:?} param {param:#x} on {} bytes: {r:?}",
        input.len()
    );
    assert!(
        out.len() <= ONEHOT_MAX_OUTPUT_BYTES,
        "{f:?}: {} bytes out of {} in",
        out.len(),
        input.len()
    );
    (r, out)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 10 {
        return;
    }
    let f = FunctionId::ALL[data[0] as usize % FunctionId::ALL.len()];
    let mut param = u64::from_le_bytes(data[1..9].try_into().expect("8 bytes"));
    if f == FunctionId::Spin {
        // Its parameter is a duration in microseconds: keep runs short.
        param %= 50;
    }
    let rest = &data[10..];
    let cut = rest.len() * data[9] as usize / 256;
    let (a, b) = rest.split_at(cut);
    let mut reused = builtin(f);
    for input in [a, b] {
        let got = run(reused.as_mut(), f, param, input);
        let fresh = run(builtin(f).as_mut(), f, param, input);
        assert_eq!(got, fresh, "{f:?}: a reused instance answers differently");
    }
});
