//! Check the codec byte-for-byte against `docs/vectors/headers.json`.

use offrac_proto::{
    HeaderError, Hop, RequestHeader, ResponseHeader, Status, EXT_LEN, HEADER_LEN, RESP_FLAG_RECEIPT,
};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/vectors/headers.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("vector file")).expect("json")
}

fn bytes(v: &Value) -> [u8; HEADER_LEN] {
    let raw = hex::decode(v["hex"].as_str().unwrap()).unwrap();
    raw[..HEADER_LEN].try_into().expect("64 bytes")
}

/// The hop extension after the header, if the vector has one.
fn ext(v: &Value) -> Option<[u8; EXT_LEN]> {
    let raw = hex::decode(v["hex"].as_str().unwrap()).unwrap();
    (raw.len() > HEADER_LEN).then(|| raw[HEADER_LEN..].try_into().expect("64 more bytes"))
}

/// Decode a header and its extension (when flagged), as a node reads them.
fn decode_all(
    b: &[u8; HEADER_LEN],
    e: Option<[u8; EXT_LEN]>,
) -> Result<RequestHeader, HeaderError> {
    let mut h = RequestHeader::decode(b)?;
    if h.has_ext() {
        h.decode_ext(&e.expect("flagged header comes with its extension"))?;
    }
    Ok(h)
}

fn u(v: &Value, k: &str) -> u64 {
    v[k].as_u64().unwrap_or_else(|| panic!("field {k}"))
}

fn error_name(e: HeaderError) -> &'static str {
    match e {
        HeaderError::BadMagic(_) => "BadMagic",
        HeaderError::BadVersion { .. } => "BadVersion",
        HeaderError::ReservedFlags(_) => "ReservedFlags",
        HeaderError::BadHopCount(_) => "BadHopCount",
        HeaderError::BadHopIndex { .. } => "BadHopIndex",
        HeaderError::ReservedBytes => "ReservedBytes",
        HeaderError::UnusedHop(_) => "UnusedHop",
        HeaderError::NeedlessExtension(_) => "NeedlessExtension",
    }
}

#[test]
fn request_vectors_decode_and_reencode() {
    let all = vectors();
    let reqs = all["requests"].as_array().unwrap();
    assert!(reqs.len() >= 10);
    for v in reqs {
        let b = bytes(v);
        let note = v["note"].as_str().unwrap();
        let f = &v["fields"];
        match decode_all(&b, ext(v)) {
            Ok(h) => {
                assert!(
                    v["valid"].as_bool().unwrap(),
                    "{note}: decoded but should fail"
                );
                assert_eq!(h.request_id, u(f, "request_id"), "{note}");
                assert_eq!(h.payload_len as u64, u(f, "payload_len"), "{note}");
                assert_eq!(h.tenant as u64, u(f, "tenant"), "{note}");
                assert_eq!(h.hop_count as u64, u(f, "hop_count"), "{note}");
                assert_eq!(h.hop_index as u64, u(f, "hop_index"), "{note}");
                assert_eq!(h.reply_device as u64, u(f, "reply_device"), "{note}");
                assert_eq!(h.budget_us as u64, u(f, "budget_us"), "{note}");
                let origin = f.get("origin_id").and_then(Value::as_u64).unwrap_or(0);
                assert_eq!(h.origin_id, origin, "{note}");
                for (i, hv) in f["hops"].as_array().unwrap().iter().enumerate() {
                    let want = Hop {
                        function: u(hv, "function") as u8,
                        device: u(hv, "device") as u8,
                        param: u(hv, "param"),
                    };
                    assert_eq!(h.hops[i], want, "{note}: hop {i}");
                }
                let wire = h.encode_wire();
                let raw = hex::decode(v["hex"].as_str().unwrap()).unwrap();
                assert_eq!(h.wire_len(), raw.len(), "{note}");
                assert_eq!(
                    &wire[..h.wire_len()],
                    &raw[..],
                    "{note}: re-encoding differs"
                );
            }
            Err(e) => {
                assert!(!v["valid"].as_bool().unwrap(), "{note}: failed with {e}");
                assert_eq!(error_name(e), v["error"].as_str().unwrap(), "{note}");
                assert_eq!(
                    RequestHeader::peek_request_id(&b),
                    u(f, "request_id"),
                    "{note}"
                );
            }
        }
    }
}

#[test]
fn response_vectors_decode_and_reencode() {
    let all = vectors();
    for v in all["responses"].as_array().unwrap() {
        let b = bytes(v);
        let f = &v["fields"];
        let h = ResponseHeader::decode(&b).unwrap();
        assert_eq!(h.status, Status::from_code(u(f, "status") as u16).unwrap());
        assert_eq!(h.request_id, u(f, "request_id"));
        assert_eq!(h.payload_len as u64, u(f, "payload_len"));
        assert_eq!(h.reassembly_ns, u(f, "reassembly_ns"));
        assert_eq!(h.queue_ns, u(f, "queue_ns"));
        assert_eq!(h.exec_ns, u(f, "exec_ns"));
        assert_eq!(h.detail, u(f, "detail"));
        assert_eq!(h.tenant as u64, u(f, "tenant"));
        assert_eq!(h.device as u64, u(f, "device"));
        assert_eq!(h.hop_index as u64, u(f, "hop_index"));
        let flags = f.get("flags").and_then(Value::as_u64).unwrap_or(0);
        assert_eq!(h.receipt, flags & RESP_FLAG_RECEIPT as u64 != 0);
        assert_eq!(h.encode(), b);
    }
}

proptest::proptest! {
    #[test]
    fn any_valid_request_roundtrips(id: u64, len: u32, tenant: u16, count in 1usize..=8, f: [u8; 8], d: [u8; 8], p: [u64; 8]) {
        let hops: Vec<Hop> = (0..count).map(|i| Hop { function: f[i], device: d[i], param: p[i] }).collect();
        let mut h = RequestHeader::chain(id, &hops, len).unwrap();
        h.tenant = tenant;
        h.hop_index = count as u8 - 1;
        let wire = h.encode_wire();
        proptest::prop_assert_eq!(h.wire_len(), if count > 4 { 128 } else { 64 });
        let base: [u8; HEADER_LEN] = wire[..HEADER_LEN].try_into().unwrap();
        let e: [u8; EXT_LEN] = wire[HEADER_LEN..].try_into().unwrap();
        proptest::prop_assert_eq!(decode_all(&base, h.has_ext().then_some(e)), Ok(h));
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(b in proptest::array::uniform32(0u8..), c in proptest::array::uniform32(0u8..)) {
        let mut all = [0u8; HEADER_LEN];
        all[..32].copy_from_slice(&b);
        all[32..].copy_from_slice(&c);
        let _ = RequestHeader::decode(&all);
        let _ = ResponseHeader::decode(&all);
    }
}
