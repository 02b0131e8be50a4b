//! Named buffers over real loopback sockets (`docs/protocol.md`, "Named
//! buffers"): kept data feeding later chains (the matrix of a `gemv` stays
//! on the node, only the vector travels), on this node and on a peer a hop
//! is forwarded to; unknown names and full budgets answered with their
//! statuses; tenants' names apart; a collective's output kept on every rank
//! and read back by chains and by the next collective.

mod common;

use common::control::envelope;

use common::collective::allreduce_payload;
use common::metrics::{metric, metrics_body};
use offrac_client::{Client, ClientError, Hop, RetryPolicy, Status};
use offrac_collective::Algorithm;
use offrac_control::Op as ControlOp;
use offrac_node::NodeHandle;
use offrac_proto::{buffer_param, BufferOp, FunctionId, FN_BUFFER, FN_COLLECTIVE};
use std::time::Duration;

const GEMV: u8 = FunctionId::Gemv as u8;
const ECHO: u8 = FunctionId::Echo as u8;

fn buf(op: BufferOp, name: u32) -> Hop {
    Hop::local(FN_BUFFER, buffer_param(op, name))
}

fn on(device: u8, mut h: Hop) -> Hop {
    h.device = device;
    h
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn floats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn client(addr: &str) -> Client {
    let mut c = Client::connect(addr)
        .unwrap()
        .with_retry_policy(RetryPolicy::NONE);
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn refusal<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (Status, u64, u8, String) {
    match r.expect_err("a refusal") {
        ClientError::Status {
            status,
            detail,
            hop,
            message,
            ..
        } => (status, detail, hop, message),
        e => panic!("not a status: {e}"),
    }
}

/// `n` nodes, each with gemv and echo slots and every other in its device table.
fn cluster(n: usize, extra: &str) -> Vec<NodeHandle> {
    common::linked_nodes(
        n,
        &format!("{extra}\n[metrics]\nlisten = \"\"\n[[slots]]\nfunction = \"gemv\"\n[[slots]]\nfunction = \"echo\""),
    )
}

#[test]
fn kept_matrix_feeds_gemv_and_refusals_are_clear() {
    let nodes = cluster(2, "[named_buffers]\nmax_bytes = 4096");
    let mut c = client(&nodes[0].addr.to_string());
    // A 3×4 matrix kept under name 7; only the vector travels afterwards.
    let a: Vec<f32> = (0..12).map(|i| i as f32 - 4.0).collect();
    let r = c.call_chain(&[buf(BufferOp::Put, 7)], &f32s(&a)).unwrap();
    assert!(r.payload.is_empty());
    for x in [[1.0f32, 0.0, 0.0, 0.0], [0.5, -1.0, 2.0, 3.0]] {
        let r = c
            .call_chain(&[buf(BufferOp::Get, 7), Hop::local(GEMV, 4)], &f32s(&x))
            .unwrap();
        let want: Vec<f32> = a
            .chunks(4)
            .map(|row| row.iter().zip(&x).map(|(p, q)| p * q).sum())
            .collect();
        assert_eq!(floats(&r.payload), want);
        assert_eq!(r.header.hop_index, 1);
    }
    // Tee in the middle of a chain passes its input on and keeps a copy.
    let r = c
        .call_chain(
            &[
                Hop::local(ECHO, 0),
                buf(BufferOp::Tee, 8),
                Hop::local(ECHO, 0),
            ],
            b"kept in passing",
        )
        .unwrap();
    assert_eq!(r.payload, b"kept in passing");
    let r = c.call_chain(&[buf(BufferOp::Get, 8)], b"!").unwrap();
    assert_eq!(r.payload, b"kept in passing!");

    // An unknown name: UNKNOWN_BUFFER at that hop, detail = the name; later hops do not run.
    let (status, detail, hop, msg) = refusal(c.call_chain(
        &[
            Hop::local(ECHO, 0),
            buf(BufferOp::Get, 99),
            Hop::local(GEMV, 4),
        ],
        b"x",
    ));
    assert_eq!(
        (status, detail, hop),
        (Status::UnknownBuffer, 99, 1),
        "{msg}"
    );
    // Create claims a free name once: a second create of it is BUFFER_EXISTS at that hop,
    // detail = the name, and the first's bytes stay.
    c.call_chain(&[buf(BufferOp::Create, 10)], b"first")
        .unwrap();
    let (status, detail, hop, msg) =
        refusal(c.call_chain(&[Hop::local(ECHO, 0), buf(BufferOp::Create, 10)], b"second"));
    assert_eq!(
        (status, detail, hop),
        (Status::BufferExists, 10, 1),
        "{msg}"
    );
    let r = c.call_chain(&[buf(BufferOp::Get, 10)], b"").unwrap();
    assert_eq!(r.payload, b"first");
    c.call_chain(&[buf(BufferOp::Drop, 10)], b"").unwrap();
    // Over the node's budget (48 + 15 bytes kept): QUOTA_EXCEEDED, detail = the budget.
    let (status, detail, _, msg) = refusal(c.call_chain(&[buf(BufferOp::Put, 9)], &[0u8; 4040]));
    assert_eq!((status, detail), (Status::QuotaExceeded, 4096), "{msg}");
    assert!(msg.contains("budget of 4096"), "{msg}");
    // Replacing a buffer counts its old bytes as free: 4096 − 15 fits under name 7.
    c.call_chain(&[buf(BufferOp::Put, 7)], &[1u8; 4081])
        .unwrap();
    c.call_chain(&[buf(BufferOp::Put, 7)], &f32s(&a)).unwrap();
    // A param that does not decode: BAD_INPUT at admission.
    let bad = Hop::local(FN_BUFFER, 9 << 32);
    let (status, _, _, msg) = refusal(c.call_chain(&[bad], b""));
    assert_eq!(status, Status::BadInput);
    assert!(msg.contains("buffer operation 9"), "{msg}");
    // Drop, then the name is gone.
    assert!(c
        .call_chain(&[buf(BufferOp::Drop, 8)], b"")
        .unwrap()
        .payload
        .is_empty());
    let (status, detail, _, _) = refusal(c.call_chain(&[buf(BufferOp::Drop, 8)], b""));
    assert_eq!((status, detail), (Status::UnknownBuffer, 8));

    // On the peer: the matrix is kept at device 1 through node 0 and the
    // multiply runs there; node 0 has no buffer 70.
    c.call_chain(&[on(1, buf(BufferOp::Put, 70))], &f32s(&a))
        .unwrap();
    let x = [1.0f32, 2.0, 3.0, 4.0];
    let r = c
        .call_chain(
            &[on(1, buf(BufferOp::Get, 70)), on(1, Hop::local(GEMV, 4))],
            &f32s(&x),
        )
        .unwrap();
    assert_eq!(floats(&r.payload), vec![-20.0, 20.0, 60.0]);
    assert_eq!(r.header.device, 1);
    let (status, ..) = refusal(c.call_chain(&[buf(BufferOp::Get, 70)], b""));
    assert_eq!(status, Status::UnknownBuffer);
}

const KEY1: &[u8] = b"0123456789abcdef";
const KEY2: &[u8] = b"fedcba9876543210";

fn tenant_client(addr: &str, tenant: u16, key: &[u8]) -> Client {
    let env = envelope(tenant, key, &ControlOp::Hello);
    let mut c = client(addr);
    c.hello(tenant, &env).expect("hello accepted");
    c
}

#[test]
fn tenants_keep_their_own_names_within_their_budgets() {
    let extra = format!(
        "[control]\n[[control.tenants]]\nid = 1\nkey = \"{}\"\nmax_buffer_bytes = 100\n[[control.tenants]]\nid = 2\nkey = \"{}\"",
        hex::encode(KEY1),
        hex::encode(KEY2)
    );
    let nodes = cluster(1, &extra);
    let addr = nodes[0].addr.to_string();
    let mut one = tenant_client(&addr, 1, KEY1);
    let mut two = tenant_client(&addr, 2, KEY2);
    let mut anon = client(&addr);
    one.call_chain(&[buf(BufferOp::Put, 5)], b"tenant one's")
        .unwrap();
    two.call_chain(&[buf(BufferOp::Put, 5)], b"tenant two's")
        .unwrap();
    assert_eq!(
        one.call_chain(&[buf(BufferOp::Get, 5)], b"")
            .unwrap()
            .payload,
        b"tenant one's"
    );
    assert_eq!(
        two.call_chain(&[buf(BufferOp::Get, 5)], b"")
            .unwrap()
            .payload,
        b"tenant two's"
    );
    let (status, ..) = refusal(anon.call_chain(&[buf(BufferOp::Get, 5)], b""));
    assert_eq!(status, Status::UnknownBuffer);
    // Tenant 1 has 12 of its 100 bytes kept; 89 more pass its budget, not tenant 2's.
    let (status, detail, _, msg) = refusal(one.call_chain(&[buf(BufferOp::Put, 6)], &[0u8; 89]));
    assert_eq!((status, detail), (Status::QuotaExceeded, 100), "{msg}");
    assert!(msg.contains("tenant's budget"), "{msg}");
    two.call_chain(&[buf(BufferOp::Put, 6)], &[0u8; 89])
        .unwrap();
    one.call_chain(&[buf(BufferOp::Put, 6)], &[0u8; 88])
        .unwrap();
}

fn allreduce_call(tag: u64, count: u32, flags: u8) -> Vec<u8> {
    allreduce_payload(tag, count, Algorithm::Auto, 5000, flags, &[])
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_collectives_output_stays_on_every_rank_and_feeds_the_next_call() {
    let nodes = cluster(3, "");
    let count = 1000usize;
    let input = |r: usize| -> Vec<i32> { (0..count).map(|i| i as i32 * (r as i32 + 1)).collect() };
    let sum: Vec<i32> = (0..count).map(|i| 6 * i as i32).collect();
    // All-reduce, each rank keeping the sum under name 3 (param bits 32-63): empty answers.
    let run =
        |tag: u64, flags: u8, param: u64, with_input: bool| -> Vec<Result<Vec<u8>, ClientError>> {
            std::thread::scope(|s| {
                let hs: Vec<_> = (0..3)
                    .map(|r| {
                        let addr = nodes[r].addr.to_string();
                        s.spawn(move || {
                            let mut p = allreduce_call(tag, count as u32, flags);
                            if with_input {
                                p.extend(input(r).iter().flat_map(|x| x.to_le_bytes()));
                            }
                            client(&addr)
                                .call(FN_COLLECTIVE, param, &p)
                                .map(|r| r.payload)
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            })
        };
    for out in run(1, 2, 3 << 32, true) {
        assert!(out.expect("allreduce kept").is_empty());
    }
    for node in &nodes {
        let mut c = client(&node.addr.to_string());
        let kept = c.call_chain(&[buf(BufferOp::Get, 3)], b"").unwrap().payload;
        assert_eq!(i32s(&kept), sum);
    }
    // The next all-reduce reads its input from buffer 3 (param bits 0-31) and answers it.
    for out in run(2, 1, 3, false) {
        let want: Vec<i32> = sum.iter().map(|x| 3 * x).collect();
        assert_eq!(i32s(&out.expect("allreduce from a buffer")), want);
    }
    // From buffer 3 and kept back into it: in place.
    for out in run(3, 3, 3 << 32 | 3, false) {
        assert!(out.expect("in place").is_empty());
    }
    let mut c = client(&nodes[1].addr.to_string());
    let kept = c.call_chain(&[buf(BufferOp::Get, 3)], b"").unwrap().payload;
    assert_eq!(i32s(&kept), sum.iter().map(|x| 3 * x).collect::<Vec<_>>());
    // Refusals at the rank's own node, before anything is sent.
    let mut p = allreduce_call(4, count as u32, 1);
    let (status, detail, ..) = refusal(c.call(FN_COLLECTIVE, 44, &p));
    assert_eq!((status, detail), (Status::UnknownBuffer, 44));
    p.extend_from_slice(&[0; 4]);
    let (status, _, _, msg) = refusal(c.call(FN_COLLECTIVE, 3, &p));
    assert_eq!(status, Status::BadInput, "{msg}");
    p[7] = 4;
    let (status, _, _, msg) = refusal(c.call(FN_COLLECTIVE, 3, &p));
    assert_eq!(status, Status::BadInput, "{msg}");
    assert!(msg.contains("byte 7"), "{msg}");
}

/// Bytes `node`'s slots joined (the sum over its slots' series).
fn slots_joined(node: &NodeHandle) -> u64 {
    let name = "offrac_slot_input_bytes_joined_total{";
    let body = metrics_body(node);
    let series: Vec<u64> = body
        .lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    assert!(!series.is_empty(), "no {name} in /metrics:\n{body}");
    series.iter().sum()
}

/// `node`'s published counters once its chain hops reach `hops`.
fn copied_after(node: &NodeHandle, hops: u64) -> u64 {
    let t = std::time::Instant::now();
    while metric(node, "offrac_chain_hops_total") < hops {
        assert!(t.elapsed() < Duration::from_secs(5), "hops not published");
        std::thread::sleep(Duration::from_millis(10));
    }
    metric(node, "offrac_buffer_bytes_copied_total")
}

/// A load hop's kept matrix reaches the local gemv slot as the kept buffer
/// itself, not copied into the job (issue #16): the result is the flat
/// call's bit for bit, bad input gets the flat call's error, and the node
/// counts no bytes copied. Where the load's output leaves the node (the
/// multiply on a peer) or is the answer, it is written from the kept buffer
/// and the payload's own bytes, not joined either.
#[test]
fn a_loaded_matrix_reaches_the_local_gemv_uncopied() {
    let nodes = common::linked_nodes(
        2,
        "[metrics]\nlisten = \"127.0.0.1:0\"\n[[slots]]\nfunction = \"gemv\"\n[[slots]]\nfunction = \"echo\"",
    );
    let mut c = client(&nodes[0].addr.to_string());
    // Rows past a multiple of 4, columns past a multiple of 8.
    let (m, n) = (67usize, 35usize);
    let a: Vec<f32> = (0..m * n)
        .map(|i| ((i * 37) % 101) as f32 / 7.0 - 6.0)
        .collect();
    let x: Vec<f32> = (0..n).map(|i| ((i * 13) % 17) as f32 / 3.0 - 2.5).collect();
    c.call_chain(&[buf(BufferOp::Put, 5)], &f32s(&a)).unwrap();
    let whole = f32s(&[a.clone(), x.clone()].concat());
    let flat = c.call_chain(&[Hop::local(GEMV, n as u64)], &whole).unwrap();
    let gemv = [buf(BufferOp::Get, 5), Hop::local(GEMV, n as u64)];
    for _ in 0..3 {
        let r = c.call_chain(&gemv, &f32s(&x)).unwrap();
        assert_eq!(r.payload, flat.payload);
    }
    // A vector one element short: the flat call's error, at the gemv hop.
    let short = f32s(&x[..n - 1]);
    let flat_bad = refusal(c.call_chain(&[Hop::local(GEMV, n as u64)], &whole[..whole.len() - 4]));
    let (status, _, hop, msg) = refusal(c.call_chain(&gemv, &short));
    assert_eq!((status, hop, &msg), (flat_bad.0, 1, &flat_bad.3));
    assert_eq!(
        copied_after(&nodes[0], 4),
        0,
        "a local load copied its buffer"
    );
    assert_eq!(slots_joined(&nodes[0]), 0, "the gemv slot joined its input");

    // The multiply on the peer: the load's output is sent as it is.
    let r = c
        .call_chain(
            &[buf(BufferOp::Get, 5), on(1, Hop::local(GEMV, n as u64))],
            &f32s(&x),
        )
        .unwrap();
    assert_eq!(r.payload, flat.payload);
    assert_eq!(copied_after(&nodes[0], 5), 0, "a forward joined its load");
    // A load that is the answer: the kept bytes then the payload's, also
    // for a buffer of 1.5 MiB, alone and with bytes of its own after it.
    let r = c.call_chain(&[buf(BufferOp::Get, 5)], &f32s(&x)).unwrap();
    assert_eq!(r.payload, whole);
    let big: Vec<u8> = (0..3u32 << 19).map(|i| (i % 251) as u8).collect();
    c.call_chain(&[buf(BufferOp::Put, 6)], &big).unwrap();
    let r = c.call_chain(&[buf(BufferOp::Get, 6)], &[]).unwrap();
    assert!(r.payload == big, "the 1.5 MiB buffer came back different");
    let r = c.call_chain(&[buf(BufferOp::Get, 6)], b"tail").unwrap();
    assert!(r.payload[..big.len()] == big[..] && &r.payload[big.len()..] == b"tail");
    // One more hop counted: the answers above are in the snapshot it is in.
    c.call_chain(&gemv, &f32s(&x)).unwrap();
    assert_eq!(copied_after(&nodes[0], 6), 0, "an answer joined its load");
}
