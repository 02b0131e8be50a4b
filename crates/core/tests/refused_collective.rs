//! A collective request (function 251) the engine refuses before the driver
//! sees it hands its first 64 payload bytes (the collective descriptor) to
//! the driver, whatever the segmentation, so the driver can tell the
//! collective's other ranks (`docs/collectives.md`, "Failures and
//! deadlines"); other refusals do not, and the connection goes on.

use offrac_core::{Action, Engine, EngineConfig, Instant, COLLECTIVE_HEAD_LEN};
use offrac_proto::{RequestHeader, Status, FN_COLLECTIVE};
use std::time::Duration;

fn wire(id: u64, function: u8, payload: &[u8]) -> Vec<u8> {
    let mut b = RequestHeader::single(id, function, 0, payload.len() as u32)
        .encode()
        .to_vec();
    b.extend_from_slice(payload);
    b
}

fn engine() -> Engine {
    Engine::new(EngineConfig {
        max_payload: 4096,
        reassembly_timeout: Duration::from_millis(50),
        ..EngineConfig::default()
    })
    .expect("valid configuration")
}

fn actions(e: &mut Engine) -> Vec<Action> {
    std::iter::from_fn(|| e.poll_action()).collect()
}

fn head() -> [u8; COLLECTIVE_HEAD_LEN] {
    std::array::from_fn(|i| (i as u8).wrapping_mul(37) ^ 0x5a)
}

/// What `actions` say, in order: (request id, status) of replies, the head
/// and status of refused collectives, and the ids handed over as control.
#[derive(Debug, PartialEq)]
enum Seen {
    Reply(u64, Status),
    Refused([u8; COLLECTIVE_HEAD_LEN], Status),
    Control(u64),
}

fn seen(actions: Vec<Action>) -> Vec<Seen> {
    actions
        .into_iter()
        .filter_map(|a| match a {
            Action::Reply { header, .. } => Some(Seen::Reply(header.request_id, header.status)),
            Action::RefusedCollective { head, status, .. } => Some(Seen::Refused(*head, status)),
            Action::Control { job } => Some(Seen::Control(job.header.request_id)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_collective_beyond_max_payload_hands_over_its_descriptor_whatever_the_segments() {
    let mut payload = head().to_vec();
    payload.extend(vec![7u8; 5000]);
    for seg in [1usize, 7, 63, 64, 65, 100, 128, 10_000] {
        let mut e = engine();
        let now = Instant::default();
        let c = e.open(now);
        let mut bytes = wire(1, FN_COLLECTIVE, &payload);
        bytes.extend(wire(2, FN_COLLECTIVE, &[])); // the next request is read as usual
        for chunk in bytes.chunks(seg) {
            e.handle_bytes(now, c, chunk);
        }
        assert_eq!(
            seen(actions(&mut e)),
            [
                Seen::Reply(1, Status::TooLarge),
                Seen::Refused(head(), Status::TooLarge),
                Seen::Control(2)
            ],
            "segments of {seg} bytes"
        );
    }
}

#[test]
fn other_functions_refusals_hand_over_nothing() {
    let mut e = engine();
    let now = Instant::default();
    let c = e.open(now);
    // Not a collective: refused, nothing handed over.
    e.handle_bytes(now, c, &wire(1, 0, &[1u8; 5000]));
    // A small collective is admitted and handed over as usual.
    let mut small = RequestHeader::single(2, FN_COLLECTIVE, 0, 30)
        .encode()
        .to_vec();
    small.extend([0u8; 30]);
    e.handle_bytes(now, c, &small);
    let got = seen(actions(&mut e));
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        matches!(got[0], Seen::Reply(1, s) if s != Status::Ok),
        "{got:?}"
    );
    assert_eq!(got[1], Seen::Control(2));
}

#[test]
fn a_collective_not_complete_in_time_hands_over_its_descriptor_once_it_is_in() {
    for (sent, told) in [
        (COLLECTIVE_HEAD_LEN + 100, true),
        (COLLECTIVE_HEAD_LEN - 1, false),
    ] {
        let mut e = engine();
        let now = Instant::default();
        let c = e.open(now);
        let mut payload = head().to_vec();
        payload.extend(vec![7u8; 3000]);
        let bytes = wire(1, FN_COLLECTIVE, &payload);
        e.handle_bytes(now, c, &bytes[..64 + sent]);
        assert_eq!(seen(actions(&mut e)), []);
        let later = now + Duration::from_millis(500);
        e.handle_timeout(later);
        let mut want = vec![Seen::Reply(1, Status::Timeout)];
        if told {
            want.push(Seen::Refused(head(), Status::Timeout));
        }
        assert_eq!(seen(actions(&mut e)), want, "{sent} payload bytes in");
    }
}
