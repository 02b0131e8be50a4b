//! The descriptor codec against `docs/vectors/collective.json` (written from
//! the protocol's table by `docs/vectors/make_collective.py`).

use offrac_collective::{take_message_flags, Descriptor, Members};

#[test]
fn descriptors_match_the_vectors() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/vectors/collective.json"
    );
    let text = std::fs::read_to_string(path).expect("vectors file");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let vectors = v["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 10);
    for t in vectors {
        let name = t["name"].as_str().unwrap();
        let bytes = hex::decode(t["hex"].as_str().unwrap()).unwrap();
        // A node-to-node message's byte 7 holds its flags (the driver reads
        // and clears them); a call's is the driver's too but not a flag here.
        let mut cleared = bytes.clone();
        let res = take_message_flags(&mut cleared)
            .and_then(|flags| Descriptor::decode(&cleared).map(|(d, body)| (d, body, flags)));
        if let Some(want) = t["error"].as_str() {
            let e = res.expect_err(name);
            assert!(e.to_string().contains(want), "{name}: {e}");
            continue;
        }
        let (d, body, flags) = res.expect(name);
        let f = &t["fields"];
        let n = |k: &str| f[k].as_u64().unwrap();
        assert_eq!(d.kind as u64, n("kind"), "{name}");
        assert_eq!(d.op as u64, n("op"), "{name}");
        assert_eq!(d.dtype as u64, n("dtype"), "{name}");
        assert_eq!(d.redop as u64, n("redop"), "{name}");
        assert_eq!(d.root as u64, n("root"), "{name}");
        assert_eq!(d.algorithm as u64, n("algorithm"), "{name}");
        assert_eq!(d.src as u64, n("src"), "{name}");
        assert_eq!(flags as u64, n("flags"), "{name}: byte 7");
        assert_eq!(d.tag, n("tag"), "{name}");
        assert_eq!(d.count as u64, n("count"), "{name}");
        assert_eq!(d.step as u64, n("step"), "{name}");
        assert_eq!(d.offset as u64, n("offset"), "{name}");
        assert_eq!(d.timeout_ms as u64, n("timeout_ms"), "{name}");
        let members: Vec<u8> = t["members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(d.members, Members::of(&members), "{name}");
        assert_eq!(hex::encode(body), t["body_hex"].as_str().unwrap(), "{name}");
        let mut want = bytes[..64].to_vec();
        want[7] = 0;
        assert_eq!(d.encode()[..], want[..], "{name}: re-encoding differs");
    }
}
