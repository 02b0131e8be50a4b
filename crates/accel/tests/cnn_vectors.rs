//! The node's CNN against the 20 held-out test vectors of `models/cnn/model.json`:
//! each vector's payload (from its grey levels) must hash to the recorded
//! SHA-256 input, and tract's scores must equal onnxruntime's recorded scores
//! within 1e-4 (the tolerance `python/tests/test_cnn_model.py` uses for the
//! reference; raising one conv weight by 1 % moves scores beyond it).

use offrac_accel::{builtin, digit_image, CNN_CLASSES};
use offrac_proto::FunctionId;
use sha2::{Digest, Sha256};

const MODEL_JSON: &str = include_str!("../../../models/cnn/model.json");

fn scores(bytes: &[u8]) -> Vec<f32> {
    bytes
        .as_chunks::<4>()
        .0
        .iter()
        .map(|w| f32::from_le_bytes(*w))
        .collect()
}

fn argmax(s: &[f32]) -> usize {
    (0..s.len())
        .max_by(|&a, &b| s[a].total_cmp(&s[b]))
        .unwrap_or(0)
}

#[test]
fn twenty_held_out_vectors_match_onnxruntime() {
    let model: serde_json::Value = serde_json::from_str(MODEL_JSON).unwrap();
    let vectors = model["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 20);
    let mut cnn = builtin(FunctionId::Cnn);
    let (mut worst, mut correct) = (0f32, 0);
    for v in vectors {
        let grey: Vec<u8> = v["grey"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_u64().unwrap() as u8)
            .collect();
        let image = digit_image(&grey.try_into().unwrap());
        let expected: Vec<f32> = v["scores"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_f64().unwrap() as f32)
            .collect();
        let mut out = Vec::new();
        cnn.run(0, &image, &mut out).unwrap();
        let got = scores(&out);
        assert_eq!(got.len(), CNN_CLASSES);
        for (g, e) in got.iter().zip(&expected) {
            worst = worst.max((g - e).abs());
        }
        assert_eq!(
            argmax(&got),
            argmax(&expected),
            "vector {}",
            v["digits_index"]
        );
        correct += usize::from(argmax(&got) as u64 == v["label"].as_u64().unwrap());
    }
    println!("largest score difference from onnxruntime: {worst:e}");
    assert!(worst < 1e-4, "largest score difference {worst}");
    // tract is right exactly where onnxruntime was.
    let recorded = vectors
        .iter()
        .filter(|v| {
            let s: Vec<f32> = v["scores"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s.as_f64().unwrap() as f32)
                .collect();
            argmax(&s) as u64 == v["label"].as_u64().unwrap()
        })
        .count();
    assert_eq!(correct, recorded);
}

#[test]
fn payload_hashes_match_the_recorded_inputs() {
    // digit_image against the Python expansion, byte for byte, for all 20.
    let model: serde_json::Value = serde_json::from_str(MODEL_JSON).unwrap();
    for v in model["vectors"].as_array().unwrap() {
        let grey: Vec<u8> = v["grey"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_u64().unwrap() as u8)
            .collect();
        let image = digit_image(&grey.try_into().unwrap());
        let digest = hex::encode(Sha256::digest(&image));
        assert_eq!(digest, v["payload_sha256"].as_str().unwrap());
    }
}
