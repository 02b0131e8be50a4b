//! Requests using named buffers against `docs/vectors/buffers.json` (written
//! from the protocol's tables by `docs/vectors/make_buffers.py`): the header
//! encoder with `buffer_param` gives the same bytes, and they decode back.

use offrac_proto::{
    collective_hop_param, decode_buffer_param, decode_collective_hop_param, Hop, RequestHeader,
    FN_BUFFER, FN_COLLECTIVE, HEADER_LEN,
};

#[test]
fn buffer_requests_match_the_vectors() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/vectors/buffers.json"
    );
    let text = std::fs::read_to_string(path).expect("vectors file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let vectors = v["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 5);
    let mut buffer_hops = 0;
    let mut collective_hops = 0;
    for (i, t) in vectors.iter().enumerate() {
        let name = t["name"].as_str().unwrap();
        let bytes = hex::decode(t["hex"].as_str().unwrap()).unwrap();
        let payload = hex::decode(t["payload_hex"].as_str().unwrap()).unwrap();
        let hops: Vec<Hop> = t["hops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| Hop {
                function: h["function"].as_u64().unwrap() as u8,
                device: h["device"].as_u64().unwrap() as u8,
                param: h["param"].as_u64().unwrap(),
            })
            .collect();
        let h = RequestHeader::chain(i as u64 + 1, &hops, payload.len() as u32).expect(name);
        assert_eq!(&h.encode()[..], &bytes[..HEADER_LEN], "{name}");
        assert_eq!(&bytes[HEADER_LEN..], &payload[..], "{name}");
        let back = RequestHeader::decode(bytes[..HEADER_LEN].try_into().unwrap()).expect(name);
        assert_eq!(back, h, "{name}");
        for hop in hops.iter().filter(|h| h.function == FN_BUFFER) {
            decode_buffer_param(hop.param).expect(name);
            buffer_hops += 1;
        }
        if hops.len() > 1 {
            for hop in hops.iter().filter(|h| h.function == FN_COLLECTIVE) {
                let (descriptor, tag) = decode_collective_hop_param(hop.param);
                assert_eq!(collective_hop_param(descriptor, tag), hop.param, "{name}");
                assert!(
                    descriptor >= 0xC011_0000,
                    "{name}: the vectors' descriptor names"
                );
                collective_hops += 1;
            }
        }
    }
    assert!(buffer_hops >= 4);
    assert_eq!(collective_hops, 2);
}
