//! The control envelope codec against `docs/vectors/control.json` (written
//! from the spec by an independent Python script).

use offrac_control::{wire, Envelope, Op, Target, WireError};
use offrac_proto::{RequestHeader, HEADER_LEN};
use serde_json::Value;

fn vectors() -> Vec<Value> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/vectors/control.json"
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("vector file")).expect("json");
    v["vectors"].as_array().expect("vectors").clone()
}

fn digest(v: &Value) -> [u8; 32] {
    hex::decode(v.as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap()
}

fn op_of(v: &Value) -> Op {
    match v["kind"].as_str().unwrap() {
        "list" => Op::List,
        "hello" => Op::Hello,
        "upload" => Op::Upload(hex::decode(v["module"].as_str().unwrap()).unwrap()),
        "unload" => Op::Unload {
            digest: digest(&v["digest"]),
            force: v["force"].as_bool().unwrap_or(false),
        },
        "resize" => Op::Resize(v["name"].as_str().unwrap().to_string()),
        "shrink" => Op::Shrink {
            keep: v["keep"].as_u64().unwrap() as u16,
            function: v["function"].as_u64().unwrap() as u8,
        },
        "swap" | "replicate" => {
            let function = v["function"].as_u64().unwrap() as u8;
            let target = match &v["wasm"] {
                Value::Null => Target::Builtin(function),
                d => Target::Wasm {
                    function,
                    digest: digest(d),
                },
            };
            if v["kind"] == "replicate" {
                Op::Replicate {
                    n: v["n"].as_u64().unwrap() as u16,
                    target,
                }
            } else {
                Op::Swap {
                    slot: v["slot"].as_u64().unwrap() as u16,
                    target,
                }
            }
        }
        k => panic!("kind {k}"),
    }
}

#[test]
fn envelopes_decode_verify_and_encode_as_the_vectors_say() {
    let vs = vectors();
    assert!(vs.len() >= 9);
    for v in vs {
        let note = v["note"].as_str().unwrap();
        let bytes = hex::decode(v["envelope"].as_str().unwrap()).unwrap();
        let key = hex::decode(v["key"].as_str().unwrap()).unwrap();
        // The whole request: a one-hop header for function 252, then the envelope.
        let req = hex::decode(v["request"].as_str().unwrap()).unwrap();
        let h = RequestHeader::decode(req[..HEADER_LEN].try_into().unwrap()).expect(note);
        assert_eq!(h.current_hop().function, wire::FN_CONTROL, "{note}");
        assert_eq!(h.payload_len as usize, bytes.len(), "{note}");
        assert_eq!(&req[HEADER_LEN..], &bytes[..], "{note}");
        match Envelope::decode(&bytes) {
            Ok(e) => {
                assert!(
                    v["valid"].as_bool().unwrap(),
                    "{note}: decoded but should not"
                );
                let op = op_of(&v["op"]);
                assert_eq!(e.op, op, "{note}");
                assert_eq!(e.tenant as u64, v["tenant"].as_u64().unwrap(), "{note}");
                assert_eq!(e.nonce, v["nonce"].as_u64().unwrap(), "{note}");
                assert_eq!(
                    e.timestamp_ms,
                    v["timestamp_ms"].as_u64().unwrap(),
                    "{note}"
                );
                let ok = v["mac_ok"].as_bool().unwrap();
                assert_eq!(e.mac_ok(&bytes, &key), ok, "{note}");
                if ok {
                    let again = wire::encode(e.tenant, e.timestamp_ms, e.nonce, &op, &key);
                    assert_eq!(again, bytes, "{note}: encoding");
                }
            }
            Err(err) => {
                assert!(!v["valid"].as_bool().unwrap(), "{note}: {err}");
                let want = v["error"].as_str().unwrap();
                let got = match err {
                    WireError::UnknownOp(_) => "UnknownOp",
                    WireError::Body { .. } => "Body",
                    WireError::Short(_) => "Short",
                    WireError::Length { .. } => "Length",
                    WireError::Reserved => "Reserved",
                };
                assert_eq!(got, want, "{note}");
            }
        }
    }
}
