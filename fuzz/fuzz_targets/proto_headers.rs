//! Request and response header decoding on arbitrary bytes: never a panic,
//! and whatever decodes re-encodes to the same bytes (requests: every byte
//! is checked, so the encoding is exact; responses: the bytes the decoder
//! reads, with the per-hop timings block when announced) and decodes again
//! to the same header.
#![no_main]

use libfuzzer_sys::fuzz_target;
use offrac_proto::{RequestHeader, ResponseHeader, EXT_LEN, HEADER_LEN, HOP_TIMES_LEN};

/// Response bytes the decoder ignores: flag bits 2..8, 22..24, 56..64.
fn response_mask(i: usize) -> u8 {
    match i {
        3 => 0x03,
        22..=23 | 56..=63 => 0,
        _ => 0xFF,
    }
}

fn request(data: &[u8]) {
    let Some(head) = data.get(..HEADER_LEN) else {
        return;
    };
    let b: [u8; HEADER_LEN] = head.try_into().expect("64 bytes");
    let peeked = RequestHeader::peek_request_id(&b);
    let mut h = match RequestHeader::decode(&b) {
        Ok(h) => h,
        Err(e) => {
            // The error names the request when it could be read.
            if let offrac_proto::HeaderError::BadVersion { request_id, .. } = e {
                assert_eq!(request_id, peeked);
            }
            return;
        }
    };
    assert_eq!(h.request_id, peeked);
    assert_eq!(
        h.encode(),
        b,
        "a decoded request header re-encodes differently"
    );
    if !h.has_ext() {
        assert_eq!(h.wire_len(), HEADER_LEN);
        return;
    }
    let Some(rest) = data.get(HEADER_LEN..HEADER_LEN + EXT_LEN) else {
        return;
    };
    let e: [u8; EXT_LEN] = rest.try_into().expect("64 bytes");
    if h.decode_ext(&e).is_err() {
        return;
    }
    let wire = h.encode_wire();
    assert_eq!(h.wire_len(), HEADER_LEN + EXT_LEN);
    assert_eq!(&wire[..HEADER_LEN], &b[..]);
    assert_eq!(
        &wire[HEADER_LEN..],
        &e[..],
        "the extension re-encodes differently"
    );
    // And the re-encoded bytes decode to the same header.
    let mut again = RequestHeader::decode(&b).expect("decoded once");
    again.decode_ext(&e).expect("decoded once");
    assert_eq!(again, h);
}

fn response(data: &[u8]) {
    let Some(head) = data.get(..HEADER_LEN) else {
        return;
    };
    let b: [u8; HEADER_LEN] = head.try_into().expect("64 bytes");
    let Ok(mut h) = ResponseHeader::decode(&b) else {
        return;
    };
    if h.has_hop_times() {
        let mut t = [0u8; HOP_TIMES_LEN];
        let rest = data.get(HEADER_LEN..).unwrap_or(&[]);
        let n = rest.len().min(HOP_TIMES_LEN);
        t[..n].copy_from_slice(&rest[..n]);
        h.decode_hop_times(&t);
    }
    let wire = h.encode_wire();
    for (i, (&got, &want)) in wire[..HEADER_LEN].iter().zip(b.iter()).enumerate() {
        let m = response_mask(i);
        assert_eq!(
            got & m,
            want & m,
            "response byte {i} re-encodes differently"
        );
    }
    let head2: [u8; HEADER_LEN] = wire[..HEADER_LEN].try_into().expect("64 bytes");
    let mut again = ResponseHeader::decode(&head2).expect("re-encoded header decodes");
    assert_eq!(again.has_hop_times(), h.hop_times.is_some());
    if again.has_hop_times() {
        let t: [u8; HOP_TIMES_LEN] = wire[HEADER_LEN..].try_into().expect("64 bytes");
        again.decode_hop_times(&t);
    }
    assert_eq!(again, h, "a re-encoded response decodes differently");
}

fuzz_target!(|data: &[u8]| {
    request(data);
    response(data);
});
