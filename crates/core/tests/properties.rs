//! Invariants of the engine under arbitrary segmentation, interleaving,
//! completions, closes and stalls.

use offrac_core::oracle::{small_config, Harness, Op};
use offrac_core::{BufferPolicy, Engine, EngineConfig, Instant, SlotPolicy};
use offrac_proto::{RequestHeader, Status};
use proptest::prelude::*;

const CONNS: usize = 4;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..CONNS, 1usize..3000).prop_map(|(conn, n)| Op::Bytes { conn, n }),
        3 => (0usize..4).prop_map(|slot| Op::Done { slot }),
        1 => (0u64..2_000_000).prop_map(|dt| Op::Tick { dt }),
        1 => (0..CONNS).prop_map(|conn| Op::Close { conn }),
        1 => prop_oneof![9 => Just(Op::Tick { dt: 0 }), 1 => Just(Op::Shutdown)],
        1 => prop_oneof![9 => Just(Op::Tick { dt: 0 }), 1 => Just(Op::Abort)],
    ]
}

/// (function, payload length) for each request of a connection.
fn requests() -> impl Strategy<Value = Vec<(u8, u32)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u8), Just(1), Just(2), Just(9)],
            0u32..2600,
        ),
        0..12,
    )
}

fn policies() -> impl Strategy<Value = (BufferPolicy, SlotPolicy, bool)> {
    (
        prop_oneof![
            Just(BufferPolicy::NaiveRr),
            Just(BufferPolicy::EligibleRr),
            Just(BufferPolicy::Jsb)
        ],
        prop_oneof![Just(SlotPolicy::Rr), Just(SlotPolicy::Jsq)],
        any::<bool>(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn every_request_leaves_exactly_once(
        (bp, sp, small) in policies(),
        owners in prop_oneof![
            Just(None),
            Just(Some(vec![Some(0u8), Some(1), Some(2)])),
            Just(Some(vec![Some(1u8), None, Some(0)])),
        ],
        reqs in prop::collection::vec(requests(), CONNS),
        ops in prop::collection::vec(op(), 0..120),
    ) {
        let mut h = Harness::with_owners(small_config(bp, sp, small), owners, reqs);
        for op in &ops {
            h.apply(op);
        }
        h.finish();
        h.check_outcomes();
    }

    #[test]
    fn segmentation_does_not_change_outcomes(reqs in requests(), cuts in prop::collection::vec(1usize..200, 1..50)) {
        // With slots always drained and room for everything, the result of a
        // stream is the same however it is cut.
        let cfg = EngineConfig { buffers: 64, buffer_bytes: 1 << 16, max_payload: 2048, small_queue_bytes: 1 << 16,
            slot_queue_bytes: 1 << 20, slots: vec![0, 1, 2], ..EngineConfig::default() };
        let mut one = Harness::new(cfg.clone(), vec![reqs.clone()]);
        one.finish();
        let mut cut = Harness::new(cfg, vec![reqs]);
        let mut k = 0;
        while cut.sent[0] < cut.streams[0].len() {
            cut.apply(&Op::Bytes { conn: 0, n: cuts[k % cuts.len()] });
            k += 1;
        }
        cut.finish();
        prop_assert_eq!(one.outcomes, cut.outcomes);
    }
}

#[test]
fn refusals_are_counted_per_function_and_per_tenant_within_a_bound() {
    let mut e = Engine::new(EngineConfig {
        slots: vec![0],
        ..EngineConfig::default()
    })
    .unwrap();
    let mut bytes = Vec::new();
    for t in 0..1100u16 {
        let mut h = RequestHeader::single(u64::from(t), 9, 0, 0);
        h.tenant = t;
        bytes.extend_from_slice(&h.encode());
    }
    e.handle_bytes(Instant::from_nanos(1), 1, &bytes);
    let st = e.stats();
    let code = Status::UnknownFunction.code();
    assert_eq!(st.refusals_by_function.get(&(9, code)), Some(&1100));
    assert_eq!(
        st.refusals_by_tenant.len(),
        offrac_core::EngineStats::MAX_TENANT_SERIES
    );
    assert_eq!(st.refusals_by_tenant.get(&(5, code)), Some(&1));
    assert_eq!(st.refusals_tenant_overflow, 1100 - 1024);
}
