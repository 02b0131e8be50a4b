//! Function chains inside one node, under virtual time through the node's own
//! driver: a chain gives the bytes of its functions run one by one, a hop
//! that fails answers once naming that hop, and a full node refuses a hop
//! explicitly instead of losing it. Seeds cut the byte streams differently;
//! `OFFRAC_SIM_SEED=N` replays one.

mod common;

use common::{floats, for_seeds, one_by_one, world, ECHO, LOGIT, MINMAX, MS, SPIN, TOPK};
use offrac_proto::{Hop, RequestHeader, Status};

fn chain(id: u64, hops: &[(u8, u64)], payload: &[u8]) -> Vec<u8> {
    let hops: Vec<Hop> = hops.iter().map(|&(f, p)| Hop::local(f, p)).collect();
    let h = RequestHeader::chain(id, &hops, payload.len() as u32).expect("1..=8 hops");
    let mut b = h.encode_wire()[..h.wire_len()].to_vec();
    b.extend_from_slice(payload);
    b
}

#[test]
fn a_chain_gives_the_bytes_of_its_functions_run_one_by_one() {
    let chains: [&[(u8, u64)]; 4] = [
        &[(MINMAX, 0), (LOGIT, 0)],
        &[(ECHO, 0), (MINMAX, 0), (LOGIT, 0), (ECHO, 0)],
        &[(TOPK, 64), (TOPK, 8)],
        &[(LOGIT, 0), (MINMAX, 0), (SPIN, 3)],
    ];
    for_seeds(|seed| {
        let mut w = world(seed, |_| {});
        let c = w.connect();
        let mut expected = Vec::new();
        for (i, hops) in chains.iter().enumerate() {
            let payload = floats(seed * 8 + i as u64, 300 + 97 * i);
            w.send(c, &chain(i as u64, hops, &payload));
            expected.push((i as u64, one_by_one(hops, &payload), hops.len()));
        }
        w.run_for(20 * MS);
        for (id, bytes, hops) in expected {
            let a = w.answers_to(c, id);
            assert_eq!(a.len(), 1, "request {id}: {} answers", a.len());
            assert_eq!(a[0].header.status, Status::Ok, "request {id}");
            assert_eq!(a[0].payload, bytes, "request {id}");
            assert_eq!(
                a[0].header.hop_index as usize,
                hops - 1,
                "the last hop answers"
            );
        }
        assert_eq!(
            w.driver().engine().stats().hops,
            1 + 3 + 1 + 2,
            "hops handed on"
        );
    });
}

#[test]
fn the_answer_times_every_hop() {
    for_seeds(|seed| {
        // Each spin hop is modelled at 40 us: three of them are 120 us of execution.
        let mut w = world(seed, |c| c.exec.fixed = vec![(SPIN, 40_000)]);
        let c = w.connect();
        w.send(c, &chain(1, &[(SPIN, 0), (SPIN, 0), (SPIN, 0)], b"abc"));
        w.run_for(5 * MS);
        let a = w.answers_to(c, 1);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].header.exec_ns, 120_000);
        assert_eq!(a[0].payload, b"abc");
    });
}

/// A chain's answer counts the request's reassembly once: its later hops
/// do not stretch it over the earlier hops' queueing and execution (which
/// `queue_ns` and `exec_ns` hold), so the three add up to no more than the
/// time the node held the request.
#[test]
fn a_chains_reassembly_is_the_requests_not_its_earlier_hops() {
    for_seeds(|seed| {
        let mut w = world(seed, |c| c.exec.fixed = vec![(SPIN, 40_000)]);
        let c = w.connect();
        w.run_for(MS);
        let sent = w.now();
        w.send(c, &chain(1, &[(SPIN, 0), (SPIN, 0), (SPIN, 0)], b"abc"));
        w.run_for(5 * MS);
        let a = w.answers_to(c, 1);
        assert_eq!(a.len(), 1);
        let h = &a[0].header;
        assert_eq!(h.exec_ns, 120_000);
        assert!(
            h.reassembly_ns < 40_000,
            "a 67-byte request; reassembly_ns {} counts earlier hops",
            h.reassembly_ns
        );
        assert!(
            h.reassembly_ns + h.queue_ns + h.exec_ns <= a[0].at - sent,
            "{h:?}: more than the {} ns from send to answer",
            a[0].at - sent
        );
    });
}

#[test]
fn a_failing_hop_answers_once_and_names_itself() {
    for_seeds(|seed| {
        let mut w = world(seed, |_| {});
        let c = w.connect();
        // topk with K = 0 is invalid: hop 1 fails after hop 0 ran.
        let ints: Vec<u8> = (0..64i32).flat_map(i32::to_le_bytes).collect();
        w.send(c, &chain(7, &[(TOPK, 8), (TOPK, 0), (ECHO, 0)], &ints));
        // Function 200 is hosted nowhere: refused before anything runs.
        w.send(c, &chain(8, &[(ECHO, 0), (ECHO, 0), (200, 0)], b"x"));
        w.run_for(5 * MS);
        let a = w.answers_to(c, 7);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].header.status, Status::BadInput);
        assert_eq!(a[0].header.hop_index, 1);
        let a = w.answers_to(c, 8);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].header.status, Status::UnknownFunction);
        assert_eq!(a[0].header.hop_index, 2);
        assert_eq!(a[0].header.detail, 200);
        // Request 7 ran one hop and failed in the second; request 8 ran nothing.
        assert_eq!(w.driver().engine().stats().dispatched, 2);
    });
}

#[test]
fn a_full_node_refuses_a_hop_and_loses_nothing() {
    for_seeds(|seed| {
        // Tiny queues and a slow second hop: later hops find no room.
        let mut w = world(seed, |c| {
            c.engine.slot_queue_bytes = 8 << 10;
            c.engine.max_payload = 8 << 10;
            c.engine.buffer_bytes = 8 << 10;
            c.exec.fixed = vec![(SPIN, 200_000)];
        });
        let clients: Vec<usize> = (0..4).map(|_| w.connect()).collect();
        let payload = vec![7u8; 3000];
        for (k, &c) in clients.iter().enumerate() {
            for i in 0..10 {
                w.send(
                    c,
                    &chain((k * 100 + i) as u64, &[(ECHO, 0), (SPIN, 0)], &payload),
                );
            }
        }
        w.run_for(200 * MS);
        let mut ok = 0;
        for (k, &c) in clients.iter().enumerate() {
            for i in 0..10 {
                let a = w.answers_to(c, (k * 100 + i) as u64);
                assert_eq!(a.len(), 1, "request {k}/{i}: {} answers", a.len());
                match a[0].header.status {
                    Status::Ok => {
                        ok += 1;
                        assert_eq!(a[0].payload, payload);
                    }
                    Status::Busy => {}
                    s => panic!("request {k}/{i}: {s:?}"),
                }
            }
        }
        let st = w.driver().engine().stats();
        assert!(ok > 0, "nothing got through");
        assert!(
            st.hops as usize > ok,
            "no hop was refused: the test does not load the node enough"
        );
        assert_eq!(
            st.hops as usize,
            ok + st.refused(Status::Busy) as usize - refused_at_admission(st)
        );
        assert!(w.driver().engine().is_idle());
    });
}

/// BUSY refusals of whole requests (hop 0, at admission), as opposed to
/// refusals of a chain's next hop.
fn refused_at_admission(st: &offrac_core::EngineStats) -> usize {
    (st.requests - st.admitted) as usize
}

#[test]
fn eight_hops_ride_in_the_hop_extension() {
    // Five to eight hops need the second 64-byte beat; segments cut it anywhere.
    // (logit of a min-max output is infinite at its ends, so logit comes first)
    let hops: [(u8, u64); 8] = [
        (LOGIT, 0),
        (ECHO, 0),
        (MINMAX, 0),
        (ECHO, 0),
        (MINMAX, 0),
        (ECHO, 0),
        (ECHO, 0),
        (MINMAX, 0),
    ];
    for_seeds(|seed| {
        let mut w = world(seed, |_| {});
        let c = w.connect();
        for n in [5, 8] {
            let payload = floats(seed + n as u64, 500);
            let bytes = chain(n as u64, &hops[..n], &payload);
            assert_eq!(bytes.len(), 128 + payload.len(), "header + extension");
            w.send(c, &bytes);
            w.run_for(20 * MS);
            let a = w.answers_to(c, n as u64);
            assert_eq!(a.len(), 1);
            assert_eq!(a[0].header.status, Status::Ok, "{n} hops");
            assert_eq!(a[0].header.hop_index as usize, n - 1);
            assert_eq!(a[0].payload, one_by_one(&hops[..n], &payload), "{n} hops");
        }
    });
}

#[test]
fn a_bad_hop_extension_is_malformed_and_the_connection_goes_on() {
    for_seeds(|seed| {
        let mut w = world(seed, |_| {});
        let c = w.connect();
        let mut bad = chain(1, &[(ECHO, 0); 6], b"payload");
        bad[64 + 60] = 1; // a reserved byte of the extension
        w.send(c, &bad);
        w.send(c, &chain(2, &[(ECHO, 0); 5], b"next"));
        // Flagged with an extension that a one-hop chain does not need: refused,
        // and the extension that follows is skipped with the payload.
        let mut needless = chain(3, &[(ECHO, 0); 5], b"skipped");
        needless[6] = 1; // hop_count 1
        needless[64..].fill(0);
        needless.extend_from_slice(b"skipped");
        needless.truncate(128 + 7);
        w.send(c, &needless);
        w.send(c, &chain(4, &[(ECHO, 0)], b"after"));
        w.run_for(10 * MS);
        let a = w.answers_to(c, 3);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].header.status, Status::Malformed);
        let a = w.answers_to(c, 4);
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].header.status, a[0].payload.as_slice()),
            (Status::Ok, &b"after"[..])
        );
        let a = w.answers_to(c, 1);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].header.status, Status::Malformed);
        let a = w.answers_to(c, 2);
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].header.status, a[0].payload.as_slice()),
            (Status::Ok, &b"next"[..])
        );
    });
}

/// A chain request with a time budget.
fn budgeted(id: u64, hops: &[(u8, u64)], payload: &[u8], budget_us: u32) -> Vec<u8> {
    let mut b = chain(id, hops, payload);
    b[21..24].copy_from_slice(&budget_us.to_le_bytes()[..3]);
    b
}

#[test]
fn a_hop_not_started_within_the_budget_is_not_run() {
    for_seeds(|seed| {
        let mut w = world(seed, |c| c.exec.fixed = vec![(SPIN, 10 * MS)]);
        let c = w.connect();
        w.send(c, &chain(1, &[(SPIN, 1)], b"holds the slot"));
        w.run_for(MS / 2);
        // Queued behind 10 ms of spin: a 2 ms budget runs out, a 50 ms one does not.
        w.send(c, &budgeted(2, &[(SPIN, 1)], b"late", 2_000));
        w.send(c, &budgeted(3, &[(SPIN, 1)], b"in time", 50_000));
        // The first hop starts at once, the second finds the budget spent.
        w.send(
            c,
            &budgeted(4, &[(ECHO, 0), (SPIN, 1), (ECHO, 0)], b"x", 5_000),
        );
        w.run_for(100 * MS);
        let a = w.answers_to(c, 2);
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].header.status, a[0].header.hop_index),
            (Status::Timeout, 0)
        );
        let a = w.answers_to(c, 3);
        assert_eq!((a.len(), a[0].header.status), (1, Status::Ok));
        let a = w.answers_to(c, 4);
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].header.status, a[0].header.hop_index),
            (Status::Timeout, 1)
        );
        let st = w.driver().engine().stats();
        assert_eq!(st.expired, 2);
        // Spins run: 1 and 3 only (2 and 4's spin hop never started).
        assert_eq!(w.node(0).busy_ns[5], 20 * MS);
    });
}

/// A load hop hands its kept matrix to the local gemv slot as the kept
/// buffer itself, not copied into the job (issue #16): the result is the
/// flat call's bit for bit, a bad vector gets the flat call's error, and
/// the engine copies no kept bytes. A load that is the answer is written
/// from the kept buffer and the job's own bytes as they are: no join either.
#[test]
fn a_loaded_matrix_reaches_the_gemv_slot_uncopied() {
    use offrac_proto::{buffer_param, BufferOp, FunctionId, FN_BUFFER};
    const GEMV: u8 = FunctionId::Gemv as u8;
    let req = |id: u64, hops: &[Hop], payload: &[u8]| {
        let h = RequestHeader::chain(id, hops, payload.len() as u32).expect("1..=8 hops");
        let mut b = h.encode_wire()[..h.wire_len()].to_vec();
        b.extend_from_slice(payload);
        b
    };
    let buf = |op, name| Hop::local(FN_BUFFER, buffer_param(op, name));
    for_seeds(|seed| {
        let mut w = world(seed, |_| {});
        let c = w.connect();
        let (m, n) = (5 + seed as usize % 7, 3 + seed as usize % 13);
        let a = floats(seed * 2, m * n);
        let x = floats(seed * 2 + 1, n);
        w.send(c, &req(1, &[buf(BufferOp::Put, 3)], &a));
        let gemv = [buf(BufferOp::Get, 3), Hop::local(GEMV, n as u64)];
        for id in 2..5 {
            w.send(c, &req(id, &gemv, &x));
        }
        w.send(c, &req(5, &gemv, &x[..x.len() - 4]));
        w.run_for(20 * MS);
        let whole = [a.clone(), x.clone()].concat();
        let want = one_by_one(&[(GEMV, n as u64)], &whole);
        for id in 2..5 {
            let r = w.answers_to(c, id);
            assert_eq!(r.len(), 1, "request {id}");
            assert_eq!((r[0].header.status, &r[0].payload), (Status::Ok, &want));
        }
        let mut flat_err = Vec::new();
        let e = offrac_accel::builtin(FunctionId::Gemv)
            .run(n as u64, &whole[..whole.len() - 4], &mut flat_err)
            .expect_err("a short vector");
        let r = w.answers_to(c, 5);
        assert_eq!(r.len(), 1);
        assert_eq!(
            (r[0].header.status, r[0].header.hop_index, &r[0].payload[..]),
            (e.status(), 1, e.message().as_bytes())
        );
        assert_eq!(w.driver().engine().stats().buffer_bytes_copied, 0);
        w.send(c, &req(6, &[buf(BufferOp::Get, 3)], &x));
        w.run_for(5 * MS);
        assert_eq!(w.answers_to(c, 6)[0].payload, whole);
        assert_eq!(w.driver().engine().stats().buffer_bytes_copied, 0);
    });
}
