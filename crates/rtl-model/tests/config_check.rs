//! `check_settings`: what of a node configuration the Verilated instance
//! hosts, and each limit refused naming the setting and the limit. Pure Rust:
//! runs with or without the `model` feature.

use offrac_accel::dlrm::state::Dictionary;
use offrac_rtl_model::params::{
    BUCKET_BORDERS_MAX, BUCKET_SETS_MAX, BUF_BYTES, BUF_COUNT, HOSTED, MAPID_DICT_MAX, MAX_PAYLOAD,
};
use offrac_rtl_model::{
    check_settings, slot_mask, RtlError, RtlSettings, SlotPolicy, DEFAULT_SLOT_MASK, SLOT_FUNCS,
};

fn ok() -> RtlSettings {
    RtlSettings {
        device_id: 0,
        peers: vec![],
        slots: HOSTED
            .iter()
            .map(|&i| (i, format!("f{i}"), false))
            .collect(),
        slot_policy: SlotPolicy::Rr,
        buffers: BUF_COUNT,
        buffer_bytes: BUF_BYTES as u64,
        max_payload: MAX_PAYLOAD as u64,
        small_request_max: 1500,
        small_queue_bytes: 1 << 20,
        dictionary: vec![1, 2, 3],
        borders: vec![vec![0.0, 1.0]],
        other: vec![],
    }
}

fn refused(s: &RtlSettings) -> String {
    match check_settings(s) {
        Err(e @ RtlError::Unsupported { .. }) => e.to_string(),
        other => panic!("not refused: {other:?}"),
    }
}

#[test]
fn the_instance_s_own_sizes_are_hosted() {
    assert_eq!(check_settings(&ok()).unwrap(), Vec::<String>::new());
    let mut s = ok();
    s.dictionary = (0..MAPID_DICT_MAX as u32).collect();
    s.borders = vec![vec![0.0; BUCKET_BORDERS_MAX]; BUCKET_SETS_MAX];
    assert!(check_settings(&s).is_ok());
    s.buffers = 1;
    assert_eq!(
        check_settings(&s).unwrap().len(),
        1,
        "a smaller pool is a warning"
    );
    s.buffers = BUF_COUNT;
    s.small_request_max = 0;
    let w = check_settings(&s).unwrap();
    assert!(
        w.len() == 1 && w[0].contains("small_request_max 0"),
        "another small-request queue is a warning: {w:?}"
    );
}

#[test]
fn slots_map_onto_the_instance_s_slots() {
    // one slot a function: the first of each, the default mask
    assert_eq!(slot_mask(&ok().slots).unwrap(), DEFAULT_SLOT_MASK);
    assert_eq!(SLOT_FUNCS, [1, 1, 0, 0, 3, 6, 7, 8]);
    assert_eq!(DEFAULT_SLOT_MASK, 0b1111_0101);
    // a second top-k and a second echo take the spare slots 1 and 3
    let mut s = ok();
    s.slots.push((1, "topk".into(), false));
    assert_eq!(slot_mask(&s.slots).unwrap(), 0b1111_0111);
    assert!(check_settings(&s).is_ok());
    s.slots.insert(0, (0, "echo".into(), false));
    assert_eq!(slot_mask(&s.slots).unwrap(), 0xFF);
    assert!(check_settings(&s).is_ok());
}

#[test]
fn each_limit_is_refused_naming_setting_and_limit() {
    let mut s = ok();
    s.dictionary = (0..=MAPID_DICT_MAX as u32).collect();
    let m = refused(&s);
    assert!(
        m.contains("[functions.mapid] dictionary = 32769 distinct keys"),
        "{m}"
    );
    assert!(m.contains("at most 32768"), "{m}");
    let mut s = ok();
    s.borders = vec![vec![0.0]; BUCKET_SETS_MAX + 1];
    let m = refused(&s);
    assert!(
        m.contains("borders = 5 sets") && m.contains("BUCKET_SETS_MAX 4"),
        "{m}"
    );
    let mut s = ok();
    s.borders = vec![vec![0.0], vec![0.0; BUCKET_BORDERS_MAX + 1]];
    let m = refused(&s);
    assert!(
        m.contains("border set 1 = 33 borders") && m.contains("32"),
        "{m}"
    );
    let mut s = ok();
    s.slots.push((2, "logit".into(), false));
    let m = refused(&s);
    assert!(
        m.contains("\"logit\" (2)") && m.contains("hosts only"),
        "{m}"
    );
    let mut s = ok();
    s.slots.push((1, "topk".into(), false));
    s.slots.push((1, "topk".into(), false));
    let m = refused(&s);
    assert!(
        m.contains("\"topk\" 3 times") && m.contains("2 topk slots"),
        "{m}"
    );
    let mut s = ok();
    s.slots.push((6, "mapid".into(), false));
    let m = refused(&s);
    assert!(
        m.contains("\"mapid\" 2 times") && m.contains("1 mapid slot "),
        "{m}"
    );
    let mut s = ok();
    s.slots.remove(2);
    let m = refused(&s);
    assert!(
        m.contains("without function minmax (3)") && m.contains("at least once"),
        "{m}"
    );
    let mut s = ok();
    s.slots[1].2 = true;
    let m = refused(&s);
    assert!(m.contains("spare") && m.contains("leave spare out"), "{m}");
    let mut s = ok();
    s.buffers = BUF_COUNT + 1;
    assert!(refused(&s).contains("[pool] buffers = 17"));
    let mut s = ok();
    s.buffer_bytes += 1;
    assert!(refused(&s).contains("BUF_BYTES 2097152"));
    let mut s = ok();
    s.max_payload = 16384;
    assert!(refused(&s).contains("max_payload = 16384"));
    let mut s = ok();
    s.device_id = 3;
    assert!(refused(&s).contains("device_id = 3"));
    let mut s = ok();
    s.peers = vec![9];
    assert!(refused(&s).contains("[[devices]] id = 9"));
    let mut s = ok();
    s.other = vec!["[[attach]]".into()];
    assert!(refused(&s).contains("[[attach]]"));
}

#[test]
fn a_dictionary_is_loaded_as_its_distinct_keys_in_index_order() {
    let d = Dictionary::from_keys([9, 5, 9, 7, 5, 1]);
    assert_eq!(d.keys(), vec![9, 5, 7, 1]);
    assert_eq!(Dictionary::from_keys(d.keys()), d);
    let b = Dictionary::builtin();
    assert_eq!(b.keys().len(), 32768);
    assert_eq!(Dictionary::from_keys(b.keys()), b);
}

#[test]
fn either_slot_policy_is_hosted() {
    // the instance takes the policy at reset (SLOT_POLICY 2, cfg_slot_policy): no refusal, no warning
    for policy in [SlotPolicy::Rr, SlotPolicy::Jsq] {
        let s = RtlSettings {
            slot_policy: policy,
            ..ok()
        };
        assert_eq!(check_settings(&s).expect("hosted"), Vec::<String>::new());
    }
    assert_eq!((SlotPolicy::Rr.code(), SlotPolicy::Jsq.code()), (0, 1));
}
