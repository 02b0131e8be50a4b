//! The CNN (OffRAC's accelerator A4): digit class scores of one 64×64 image.
//!
//! The network is the one trained and exported by `models/cnn/train.py`
//! (`models/cnn/README.md` has the architecture, the data and the input
//! format); its ONNX file is compiled into the binary and run by `tract`, so
//! the node executes exactly the graph the Python reference and onnxruntime
//! are checked against. Input: 64 × 64 × 3 `uint16` little-endian, row-major,
//! channel-last (24,576 bytes). Output: 10 `float32` class scores (logits; the
//! predicted digit is the largest).
//!
//! The model is parsed and optimised once per process (a few milliseconds)
//! and shared by every instance; each instance keeps its own run state.

use crate::{AccelError, Accelerator};
use offrac_proto::FunctionId;

/// Image side in pixels.
pub const CNN_SIDE: usize = 64;
/// Channels per pixel.
pub const CNN_CHANNELS: usize = 3;
/// The one accepted payload size: 64 × 64 × 3 × 2 bytes.
pub const CNN_INPUT_BYTES: usize = CNN_SIDE * CNN_SIDE * CNN_CHANNELS * 2;
/// Class scores per answer.
pub const CNN_CLASSES: usize = 10;

/// The inference runtime: tract with the embedded model (feature `cnn`, on by
/// default).
#[cfg(feature = "cnn")]
mod runtime {
    use super::{CNN_CHANNELS, CNN_CLASSES, CNN_SIDE};
    use crate::AccelError;
    use std::sync::{Arc, OnceLock};
    use tract_onnx::prelude::*;

    /// `models/cnn/cnn.onnx` (its SHA-256 is in `models/cnn/SHA256SUMS`).
    static MODEL_ONNX: &[u8] = include_bytes!("../models/cnn.onnx");

    type Plan = Arc<TypedSimplePlan>;

    /// The optimised plan, built on first use; an error is kept and reported
    /// by every call (it would mean the embedded file is broken, a build
    /// defect).
    fn plan() -> Result<&'static Plan, AccelError> {
        static PLAN: OnceLock<Result<Plan, String>> = OnceLock::new();
        PLAN.get_or_init(|| build_plan().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| AccelError::Internal(format!("the CNN model does not load: {e}")))
    }

    fn build_plan() -> TractResult<Plan> {
        let shape = [1, CNN_SIDE, CNN_SIDE, CNN_CHANNELS];
        tract_onnx::onnx()
            .model_for_read(&mut &MODEL_ONNX[..])?
            .with_input_fact(0, u16::fact(shape).into())?
            .into_optimized()?
            .into_runnable()
    }

    pub fn warm_up() -> Result<(), AccelError> {
        plan().map(|_| ())
    }

    /// One instance's run state, made on first use.
    #[derive(Default)]
    pub struct Runner {
        state: Option<TypedSimpleState>,
    }

    impl Runner {
        /// The class scores of one image (`pixels` in the input layout).
        pub fn scores(&mut self, pixels: &[u16], out: &mut Vec<u8>) -> Result<(), AccelError> {
            let image = Tensor::from_shape(&[1, CNN_SIDE, CNN_SIDE, CNN_CHANNELS], pixels)
                .map_err(|e| AccelError::Internal(format!("CNN input tensor: {e:#}")))?;
            let state = match &mut self.state {
                Some(s) => s,
                None => {
                    let s = plan()?
                        .spawn()
                        .map_err(|e| AccelError::Internal(format!("CNN state: {e:#}")))?;
                    self.state.insert(s)
                }
            };
            let outputs = state
                .run(tvec!(image.into_tvalue()))
                .map_err(|e| AccelError::Internal(format!("CNN inference: {e:#}")))?;
            let scores = outputs
                .first()
                .and_then(|t| t.to_plain_array_view::<f32>().ok())
                .filter(|s| s.len() == CNN_CLASSES)
                .ok_or_else(|| {
                    AccelError::Internal("the CNN returned no 10 class scores".into())
                })?;
            out.reserve(CNN_CLASSES * 4);
            for s in scores.iter() {
                out.extend_from_slice(&s.to_le_bytes());
            }
            Ok(())
        }
    }
}

/// A build without the runtime (e.g. the fuzz targets, which leave the large
/// dependencies out): the CNN validates its input, then says what is missing.
#[cfg(not(feature = "cnn"))]
mod runtime {
    use crate::AccelError;

    fn missing() -> AccelError {
        AccelError::Internal("this build has no CNN runtime (offrac-accel feature `cnn`)".into())
    }

    pub fn warm_up() -> Result<(), AccelError> {
        Err(missing())
    }

    #[derive(Default)]
    pub struct Runner;

    impl Runner {
        pub fn scores(&mut self, _pixels: &[u16], _out: &mut Vec<u8>) -> Result<(), AccelError> {
            Err(missing())
        }
    }
}

/// Parse and optimise the model now rather than on the first request (the
/// node calls this at start-up so no caller pays for it).
pub fn cnn_warm_up() -> Result<(), AccelError> {
    runtime::warm_up()
}

/// One scikit-learn digit (8×8 grey levels 0..16, row-major) as the CNN's
/// input: level v becomes round(v · 65535 / 16), each digit pixel an 8×8 block
/// in all three channels (`models/cnn/README.md`, "Input format"). Levels
/// above 16 are clamped.
pub fn digit_image(grey: &[u8; 64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(CNN_INPUT_BYTES);
    for y in 0..CNN_SIDE {
        for x in 0..CNN_SIDE {
            let v = u32::from(grey[(y / 8) * 8 + x / 8].min(16));
            let u = ((v * 65535 + 8) / 16) as u16;
            for _ in 0..CNN_CHANNELS {
                out.extend_from_slice(&u.to_le_bytes());
            }
        }
    }
    out
}

/// The CNN slot's function.
#[derive(Default)]
pub struct Cnn {
    runner: runtime::Runner,
}

impl Cnn {
    pub fn new() -> Cnn {
        Cnn::default()
    }
}

impl Accelerator for Cnn {
    fn function(&self) -> FunctionId {
        FunctionId::Cnn
    }

    fn run(&mut self, _param: u64, input: &[u8], out: &mut Vec<u8>) -> Result<(), AccelError> {
        if input.len() != CNN_INPUT_BYTES {
            return Err(AccelError::BadInput(format!(
                "cnn takes one {CNN_SIDE}x{CNN_SIDE}x{CNN_CHANNELS} uint16 image \
                 ({CNN_INPUT_BYTES} bytes), not {} bytes",
                input.len()
            )));
        }
        let pixels: Vec<u16> = input
            .as_chunks::<2>()
            .0
            .iter()
            .map(|&p| u16::from_le_bytes(p))
            .collect();
        self.runner.scores(&pixels, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_sizes_are_bad_input() {
        let mut c = Cnn::new();
        let mut out = Vec::new();
        for n in [
            0,
            2,
            CNN_INPUT_BYTES - 2,
            CNN_INPUT_BYTES + 2,
            2 * CNN_INPUT_BYTES,
        ] {
            let r = c.run(0, &vec![0; n], &mut out);
            assert!(matches!(r, Err(AccelError::BadInput(_))), "{n}: {r:?}");
        }
        assert!(out.is_empty());
    }

    #[cfg(feature = "cnn")]
    #[test]
    fn scores_are_ten_finite_floats_and_repeatable() {
        let mut c = Cnn::new();
        let image: Vec<u8> = (0..CNN_INPUT_BYTES).map(|i| (i * 7 % 251) as u8).collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        c.run(0, &image, &mut a).unwrap();
        c.run(0, &image, &mut b).unwrap();
        assert_eq!(a.len(), 40);
        assert_eq!(a, b, "the same image must give the same scores");
        let s: Vec<f32> = a
            .as_chunks::<4>()
            .0
            .iter()
            .map(|w| f32::from_le_bytes(*w))
            .collect();
        assert!(s.iter().all(|v| v.is_finite()), "{s:?}");
        // A blank image and a digit do not score alike.
        let mut blank = Vec::new();
        c.run(0, &vec![0; CNN_INPUT_BYTES], &mut blank).unwrap();
        assert_ne!(blank, a);
    }

    #[test]
    fn expansion_matches_the_reference_format() {
        // 0 -> 0, 1 -> 4096, 8 -> 32768, 16 -> 65535 (models/cnn/README.md).
        let mut grey = [0u8; 64];
        grey[1] = 1;
        grey[2] = 8;
        grey[3] = 16;
        let p = digit_image(&grey);
        let px = |x: usize| u16::from_le_bytes([p[x * 6], p[x * 6 + 1]]);
        assert_eq!([px(0), px(8), px(16), px(24)], [0, 4096, 32768, 65535]);
    }
}
