//! The node over real loopback sockets, driven by the Rust client.

mod common;

use offrac_client::{Client, ClientError, FunctionId, Hop, RetryPolicy, Status};
use offrac_node::{start, NodeConfig, NodeHandle};
use offrac_proto::{RequestHeader, ResponseHeader, HEADER_LEN};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

fn node(extra: &str) -> NodeHandle {
    let cfg = NodeConfig::parse(&format!("[metrics]\nlisten = \"127.0.0.1:0\"\n{extra}"))
        .expect("config");
    start(cfg, "127.0.0.1:0").expect("node starts")
}

fn ints(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn read_response(s: &mut TcpStream) -> (ResponseHeader, Vec<u8>) {
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h).expect("response header");
    let h = ResponseHeader::decode(&h).expect("valid response");
    let mut p = vec![0; h.payload_len as usize];
    s.read_exact(&mut p).expect("response payload");
    (h, p)
}

#[test]
fn topk_roundtrip_reports_node_timing() {
    let n = node("");
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    let r = c
        .call(FunctionId::TopK, 3, &ints(&[5, -1, 9, 7, 3]))
        .unwrap();
    assert_eq!(r.payload, ints(&[9, 7, 5]));
    assert_eq!(r.header.status, Status::Ok);
    assert!(r.header.exec_ns > 0, "execution time is reported");
    n.shutdown().unwrap();
}

#[test]
fn one_byte_writes_and_coalesced_requests() {
    let n = node("");
    let mut s = TcpStream::connect(n.addr).unwrap();
    s.set_nodelay(true).unwrap();
    let payload = ints(&[1, 2, 3, 4]);
    let mut req = RequestHeader::single(11, FunctionId::TopK.id(), 2, payload.len() as u32)
        .encode()
        .to_vec();
    req.extend_from_slice(&payload);
    for b in &req {
        s.write_all(&[*b]).unwrap();
    }
    let (h, p) = read_response(&mut s);
    assert_eq!((h.status, h.request_id, p), (Status::Ok, 11, ints(&[4, 3])));

    // Fifty requests in one write: fifty answers, each id once.
    let mut batch = Vec::new();
    for id in 100..150u64 {
        batch.extend_from_slice(&RequestHeader::single(id, FunctionId::Echo.id(), 0, 8).encode());
        batch.extend_from_slice(&id.to_le_bytes());
    }
    s.write_all(&batch).unwrap();
    let mut seen: Vec<u64> = (0..50)
        .map(|_| {
            let (h, p) = read_response(&mut s);
            assert_eq!(h.status, Status::Ok);
            assert_eq!(p, h.request_id.to_le_bytes());
            h.request_id
        })
        .collect();
    seen.sort();
    assert_eq!(seen, (100..150).collect::<Vec<_>>());
    n.shutdown().unwrap();
}

#[test]
fn a_long_function_does_not_hold_up_other_slots() {
    let n = node("");
    let addr = n.addr.to_string();
    let mut slow = TcpStream::connect(n.addr).unwrap();
    let mut spin = RequestHeader::single(1, FunctionId::Spin.id(), 400_000, 4)
        .encode()
        .to_vec();
    spin.extend_from_slice(b"slow");
    slow.write_all(&spin).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // While the spin slot computes for 400 ms, top-k answers many times over.
    let mut c = Client::connect(&addr).unwrap();
    let started = Instant::now();
    for _ in 0..20 {
        c.call(FunctionId::TopK, 1, &ints(&[3, 1, 2])).unwrap();
    }
    let fast = started.elapsed();
    let (h, p) = read_response(&mut slow);
    let slow_done = started.elapsed();
    assert_eq!((h.status, p.as_slice()), (Status::Ok, &b"slow"[..]));
    assert!(
        fast < slow_done,
        "top-k calls ({fast:?}) finished after the spin ({slow_done:?})"
    );
    assert!(h.exec_ns >= 400_000_000, "spin ran {} ns", h.exec_ns);
    n.shutdown().unwrap();
}

#[test]
fn shutdown_answers_held_requests_and_refuses_new_ones() {
    let n = node("");
    let mut held = TcpStream::connect(n.addr).unwrap();
    let mut spin = RequestHeader::single(7, FunctionId::Spin.id(), 300_000, 2)
        .encode()
        .to_vec();
    spin.extend_from_slice(b"ok");
    held.write_all(&spin).unwrap();
    let mut late = TcpStream::connect(n.addr).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let stopper = n.shutdown_handle();
    let joiner = std::thread::spawn(move || n.join());
    stopper.shutdown();
    std::thread::sleep(Duration::from_millis(50));
    let req = RequestHeader::single(8, FunctionId::Echo.id(), 0, 0).encode();
    late.write_all(&req).unwrap();
    let (h, _) = read_response(&mut late);
    assert_eq!((h.status, h.request_id), (Status::ShuttingDown, 8));
    let (h, p) = read_response(&mut held);
    assert_eq!(
        (h.status, h.request_id, p.as_slice()),
        (Status::Ok, 7, &b"ok"[..])
    );
    joiner.join().unwrap().unwrap();
}

#[test]
fn bad_input_and_unknown_function_keep_the_connection() {
    let n = node("[[slots]]\nfunction = \"logit\"\n");
    let mut c = Client::connect(&n.addr.to_string())
        .unwrap()
        .with_retry_policy(RetryPolicy::NONE);
    match c.call(FunctionId::Logit, 0, &[1, 2, 3]) {
        Err(ClientError::Status {
            status: Status::BadInput,
            ..
        }) => {}
        other => panic!("expected BAD_INPUT, got {other:?}"),
    }
    match c.call(FunctionId::TopK, 1, &ints(&[1])) {
        Err(ClientError::Status {
            status: Status::UnknownFunction,
            detail: 1,
            ..
        }) => {}
        other => panic!("expected UNKNOWN_FUNCTION, got {other:?}"),
    }
    let r = c.call(FunctionId::Logit, 0, &0.5f32.to_le_bytes()).unwrap();
    assert_eq!(r.payload, 0.0f32.to_le_bytes());
    n.shutdown().unwrap();
}

#[test]
fn metrics_count_completions_per_slot() {
    let n = node("");
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    for _ in 0..5 {
        c.call(FunctionId::Echo, 0, b"hi").unwrap();
    }
    std::thread::sleep(Duration::from_millis(150));
    let text = n.metrics.render();
    assert!(
        text.contains("offrac_slot_completions_total{slot=\"0\",function=\"echo\"} 5"),
        "{text}"
    );
    assert!(text.contains("offrac_dispatched_total 5"), "{text}");
    n.shutdown().unwrap();
}

#[test]
fn blocking_mode_serves_too() {
    let n = node("[io]\nmode = \"blocking\"\n");
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    for i in 0..50 {
        let r = c.call(FunctionId::TopK, 1, &ints(&[i, i + 1])).unwrap();
        assert_eq!(r.payload, ints(&[i + 1]));
    }
    n.shutdown().unwrap();
}

fn metric(text: &str, line_prefix: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(line_prefix)
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or_else(|| panic!("no {line_prefix} in\n{text}"))
}

#[test]
fn short_requests_of_cheap_functions_run_inline_up_to_the_limit() {
    let n = node("[[slots]]\nfunction = \"echo\"\ninline_max_bytes = 100\n[[slots]]\nfunction = \"topk\"\ninline_max_bytes = 0\n");
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    for _ in 0..3 {
        c.call(FunctionId::Echo, 0, &[7; 100]).unwrap();
    }
    let r = c.call(FunctionId::Echo, 0, &[9; 101]).unwrap();
    assert_eq!(r.payload, vec![9; 101]);
    c.call(FunctionId::TopK, 1, &ints(&[1, 2])).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let text = n.metrics.render();
    let echo = "{slot=\"0\",function=\"echo\"} ";
    let topk = "{slot=\"1\",function=\"topk\"} ";
    assert_eq!(
        metric(&text, &format!("offrac_slot_completions_total{echo}")),
        4
    );
    assert_eq!(
        metric(
            &text,
            &format!("offrac_slot_inline_completions_total{echo}")
        ),
        3
    );
    assert_eq!(
        metric(&text, &format!("offrac_slot_completions_total{topk}")),
        1
    );
    assert_eq!(
        metric(
            &text,
            &format!("offrac_slot_inline_completions_total{topk}")
        ),
        0
    );
    n.shutdown().unwrap();
}

#[test]
fn a_client_whose_answer_frees_room_is_never_refused() {
    // Room for exactly three requests: one running, one in the slot queue, one
    // in the single buffer. Three closed-loop clients therefore always fit —
    // provided the slot is freed before the answer that prompts the next
    // request goes out (it once was freed after, and clients got BUSY). A
    // sleeping I/O thread and quick clients make that race likely: the wake-up
    // and the next request then arrive in the same poll.
    let n = node(
        "[io]\nmode = \"blocking\"\n[pool]\nbuffers = 1\nbuffer_bytes = 4096\nsmall_request_max = 0\n\
         [selector]\nslot_queue_bytes = 4096\n[[slots]]\nfunction = \"spin\"\n",
    );
    let addr = n.addr.to_string();
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                let mut c = Client::connect(&addr)
                    .unwrap()
                    .with_retry_policy(RetryPolicy::NONE);
                (0..60)
                    .filter(|_| c.call(FunctionId::Spin, 100, &[1; 4096]).is_err())
                    .count()
            })
        })
        .collect();
    let refused: usize = clients.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(refused, 0, "{refused} of 180 calls were refused");
    n.shutdown().unwrap();
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_chain_equals_its_functions_called_one_by_one() {
    let n = node("");
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    let x = floats(&[-4.0, 0.5, 3.0, 12.0, 7.25]);
    let mm = c.call(FunctionId::MinMax, 0, &x).unwrap().payload;
    let one_by_one = c.call(FunctionId::Logit, 0, &mm).unwrap().payload;
    let hops = [
        Hop::local(FunctionId::MinMax.id(), 0),
        Hop::local(FunctionId::Logit.id(), 0),
    ];
    let r = c.call_chain(&hops, &x).unwrap();
    assert_eq!(r.payload, one_by_one);
    assert_eq!((r.header.status, r.header.hop_index), (Status::Ok, 1));
    n.shutdown().unwrap();
}

/// A chain's answer counts the request's reassembly once: two 30 ms spin
/// hops before the last do not stretch it (they are in `queue_ns` and
/// `exec_ns`), and the three add up to no more than the call took.
#[test]
fn a_chains_reassembly_is_not_stretched_over_its_earlier_hops() {
    let n = node("");
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    let hops = [
        Hop::local(FunctionId::Spin.id(), 30_000),
        Hop::local(FunctionId::Spin.id(), 30_000),
        Hop::local(FunctionId::Echo.id(), 0),
    ];
    let t = Instant::now();
    let r = c.call_chain(&hops, b"abc").unwrap();
    let took = t.elapsed().as_nanos() as u64;
    let h = r.header;
    assert_eq!(
        (h.status, h.hop_index, &r.payload[..]),
        (Status::Ok, 2, &b"abc"[..])
    );
    assert!(h.exec_ns >= 60_000_000, "{h:?}");
    assert!(
        h.reassembly_ns < 30_000_000,
        "a 67-byte request; reassembly_ns {} counts the spin hops",
        h.reassembly_ns
    );
    assert!(
        h.reassembly_ns + h.queue_ns + h.exec_ns <= took,
        "{h:?}: more than the call's {took} ns"
    );
    n.shutdown().unwrap();
}

#[test]
fn a_failing_hop_is_named_and_later_hops_do_not_run() {
    let n = node("");
    let mut c = Client::connect(&n.addr.to_string())
        .unwrap()
        .with_retry_policy(RetryPolicy::NONE);
    // top-k with K = 0 at hop 1 fails; the spin at hop 2 must never run
    let hops = [
        Hop::local(FunctionId::Echo.id(), 0),
        Hop::local(FunctionId::TopK.id(), 0),
        Hop::local(FunctionId::Spin.id(), 200_000),
    ];
    let t = Instant::now();
    match c.call_chain(&hops, &ints(&[1, 2, 3])) {
        Err(ClientError::Status {
            status: Status::BadInput,
            hop: 1,
            ..
        }) => {}
        other => panic!("expected BAD_INPUT at hop 1, got {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(150),
        "hop 2 (a 200 ms spin) ran"
    );
    // the connection serves on: the chain got exactly one answer
    let r = c.call(FunctionId::Echo, 0, b"next").unwrap();
    assert_eq!(r.payload, b"next");
    match c.call_chain(&[], b"x") {
        Err(ClientError::ChainLength(0)) => {}
        other => panic!("expected ChainLength, got {other:?}"),
    }
    n.shutdown().unwrap();
}

/// Node A (device 0) and node B (device 1), each in the other's device table.
fn two_nodes() -> (NodeHandle, NodeHandle) {
    // Each node's table needs the other's address before it starts: take two
    // free ports first.
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
    };
    let (pa, pb) = (free(), free());
    let start_with = |me: u8, listen: std::net::SocketAddr, peer: std::net::SocketAddr| {
        let text = format!(
            "device_id = {me}\n[metrics]\nlisten = \"\"\n[[devices]]\nid = {}\naddr = \"{peer}\"\n",
            1 - me
        );
        start(
            NodeConfig::parse(&text).expect("config"),
            &listen.to_string(),
        )
        .expect("node starts")
    };
    let (a, b) = (start_with(0, pa, pb), start_with(1, pb, pa));
    // A's first connect may have raced B's start: it retries after 100 ms.
    let mut c = Client::connect(&a.addr.to_string()).unwrap();
    let t = Instant::now();
    while c.call_chain(&[hop(FunctionId::Echo, 1, 0)], b"up").is_err() {
        assert!(t.elapsed() < Duration::from_secs(5), "A never linked to B");
        std::thread::sleep(Duration::from_millis(20));
    }
    (a, b)
}

fn hop(f: FunctionId, device: u8, param: u64) -> Hop {
    Hop {
        function: f.id(),
        device,
        param,
    }
}

#[test]
fn a_chain_across_two_nodes_equals_its_functions_one_by_one() {
    let (a, b) = two_nodes();
    let mut c = Client::connect(&a.addr.to_string()).unwrap();
    let x = floats(&[-4.0, 0.5, 3.0, 12.0, 7.25]);
    let mm = c.call(FunctionId::MinMax, 0, &x).unwrap().payload;
    let want = c.call(FunctionId::Logit, 0, &mm).unwrap().payload;
    let r = c
        .call_chain(
            &[hop(FunctionId::MinMax, 0, 0), hop(FunctionId::Logit, 1, 0)],
            &x,
        )
        .unwrap();
    assert_eq!(r.payload, want);
    assert_eq!((r.header.hop_index, r.header.device), (1, 1));
    // The first hop remote, then back to A.
    let ints_in: Vec<i32> = (0..500).map(|i| (i * 7919) % 1000 - 500).collect();
    let r = c
        .call_chain(
            &[hop(FunctionId::TopK, 1, 64), hop(FunctionId::TopK, 0, 3)],
            &ints(&ints_in),
        )
        .unwrap();
    let mut sorted = ints_in.clone();
    sorted.sort_unstable_by(|x, y| y.cmp(x));
    assert_eq!(r.payload, ints(&sorted[..3]));
    assert_eq!((r.header.hop_index, r.header.device), (1, 0));
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

#[test]
fn a_direct_reply_is_read_on_the_last_nodes_endpoint() {
    let (a, b) = two_nodes();
    let mut rx = Client::connect(&b.addr.to_string()).unwrap();
    let e = rx.register_reply(Some(33)).unwrap();
    let mut tx = Client::connect(&a.addr.to_string()).unwrap();
    tx.set_direct_reply(Some(e));
    let chain = [hop(FunctionId::MinMax, 0, 0), hop(FunctionId::Logit, 1, 0)];
    let x = floats(&[-4.0, 0.5, 3.0, 12.0, 7.25]);
    for id in 10..15 {
        tx.send_chain(id, &chain, &x).unwrap();
    }
    let mut plain = Client::connect(&a.addr.to_string()).unwrap();
    let want = plain.call_chain(&chain, &x).unwrap().payload;
    for id in 10..15 {
        let (h, payload) = rx.recv().unwrap();
        assert_eq!((h.request_id, h.status, h.device), (id, Status::Ok, 1));
        assert_eq!(payload, want);
    }
    // Nothing came back to the sender.
    tx.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(tx.recv().is_err(), "the sender got an answer");
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

#[test]
fn a_peer_that_went_away_is_unreachable_naming_the_hop() {
    let (a, b) = two_nodes();
    let mut c = Client::connect(&a.addr.to_string())
        .unwrap()
        .with_retry_policy(RetryPolicy::NONE);
    let chain = [hop(FunctionId::Echo, 0, 0), hop(FunctionId::Echo, 1, 0)];
    assert_eq!(c.call_chain(&chain, b"hi").unwrap().payload, b"hi");
    b.shutdown().unwrap();
    // A learns the link broke when B closes it; from then on the hop is refused.
    let t = Instant::now();
    loop {
        match c.call_chain(&chain, b"hi") {
            Err(ClientError::Status {
                status: Status::Unreachable,
                hop: 1,
                detail: 1,
                ..
            }) => break,
            Ok(_) if t.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(10))
            }
            other => panic!("expected UNREACHABLE at hop 1, got {other:?}"),
        }
    }
    // An unknown device is refused at admission, by name.
    match c.call_chain(&[hop(FunctionId::Echo, 9, 0)], b"x") {
        Err(ClientError::Status {
            status: Status::Unreachable,
            hop: 0,
            detail: 9,
            ..
        }) => {}
        other => panic!("expected UNREACHABLE for device 9, got {other:?}"),
    }
    a.shutdown().unwrap();
}

#[test]
fn a_budget_spent_in_the_queue_is_timeout_and_not_run() {
    let n = node("");
    let addr = n.addr.to_string();
    let mut holder = Client::connect(&addr).unwrap();
    holder.send(1, FunctionId::Spin, 300_000, b"hold").unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut c = Client::connect(&addr)
        .unwrap()
        .with_retry_policy(RetryPolicy::NONE);
    c.set_budget(Some(Duration::from_millis(20))).unwrap();
    let t = Instant::now();
    match c.call(FunctionId::Spin, 400_000, b"late") {
        Err(ClientError::Status {
            status: Status::Timeout,
            hop: 0,
            ..
        }) => {}
        other => panic!("expected TIMEOUT, got {other:?}"),
    }
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "the late spin ran"
    );
    assert_eq!(holder.recv().unwrap().0.status, Status::Ok);
    c.set_budget(Some(Duration::from_secs(1))).unwrap();
    assert_eq!(c.call(FunctionId::Echo, 0, b"ok").unwrap().payload, b"ok");
    assert!(matches!(
        c.set_budget(Some(Duration::from_secs(20))),
        Err(ClientError::Budget(_))
    ));
    n.shutdown().unwrap();
}

#[test]
fn answers_go_to_a_registered_reply_connection() {
    let (a, b) = two_nodes();
    let addr = a.addr.to_string();
    let mut rx = Client::connect(&addr).unwrap();
    let endpoint = rx.register_reply(None).unwrap();
    assert!(
        endpoint != 0 && endpoint != 1,
        "not a device id: {endpoint}"
    );
    let mut tx = Client::connect(&addr)
        .unwrap()
        .with_retry_policy(RetryPolicy::NONE);
    tx.set_reply_device(Some(endpoint));
    // plain, failing, and cross-node requests: every answer arrives on rx
    for id in 1..=50u64 {
        tx.send(id, FunctionId::Echo, 0, &id.to_le_bytes()).unwrap();
    }
    tx.send(51, FunctionId::TopK, 0, &ints(&[1, 2])).unwrap();
    tx.send_chain(
        52,
        &[hop(FunctionId::Echo, 0, 0), hop(FunctionId::Echo, 1, 0)],
        b"far",
    )
    .unwrap();
    let mut seen = std::collections::BTreeMap::new();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while seen.len() < 52 {
        let (h, p) = rx.recv().unwrap();
        assert!(
            seen.insert(h.request_id, (h.status, p)).is_none(),
            "two answers"
        );
    }
    for id in 1..=50u64 {
        assert_eq!(seen[&id], (Status::Ok, id.to_le_bytes().to_vec()));
    }
    assert_eq!(seen[&51].0, Status::BadInput);
    assert_eq!(seen[&52], (Status::Ok, b"far".to_vec()));
    // nothing came back on the sending connection
    tx.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(matches!(tx.recv(), Err(ClientError::Io(_))));
    // an endpoint nobody registered is refused on the sending connection
    tx.set_reply_device(Some(200));
    tx.send(60, FunctionId::Echo, 0, b"x").unwrap();
    tx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let (h, _) = tx.recv().unwrap();
    assert_eq!(
        (h.request_id, h.status, h.detail),
        (60, Status::Unreachable, 200)
    );
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

#[test]
fn a_traced_chain_across_nodes_names_each_hops_device() {
    let (a, b) = two_nodes();
    let mut c = Client::connect(&a.addr.to_string()).unwrap();
    c.set_trace(true);
    let chain = [
        hop(FunctionId::Spin, 1, 2_000),
        hop(FunctionId::Echo, 0, 0),
        hop(FunctionId::Spin, 1, 1_000),
    ];
    let r = c.call_chain(&chain, b"traced").unwrap();
    assert_eq!(r.payload, b"traced");
    let t = r.header.hop_times.expect("per-hop timings");
    let devices: Vec<(u8, bool)> = t.iter().map(|h| (h.device, h.ran)).collect();
    assert_eq!(devices[..3], [(1, true), (0, true), (1, true)]);
    assert!(
        t[0].exec_ns >= 2_000_000 && t[2].exec_ns >= 1_000_000,
        "{t:?}"
    );
    assert!(t[3..].iter().all(|h| !h.ran));
    c.set_trace(false);
    assert_eq!(c.call_chain(&chain, b"x").unwrap().header.hop_times, None);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

#[test]
fn yield_mode_serves_too() {
    let n = node("[io]\nmode = \"yield\"\nspin_us = 500\n");
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    for i in 0..50 {
        let r = c.call(FunctionId::TopK, 1, &ints(&[i, i + 1])).unwrap();
        assert_eq!(r.payload, ints(&[i + 1]));
        if i % 10 == 0 {
            // Past spin_us: the node has gone to sleep and must wake up.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    n.shutdown().unwrap();
}

/// `[io] spin_when = "cpu_idle"`: with more threads runnable than the
/// machine has CPUs, the polling I/O thread sleeps inside its spin window
/// (counted in /metrics); `"always"` spins anyway. Calls are served either way.
#[test]
fn the_io_thread_sleeps_instead_of_spinning_while_every_cpu_is_wanted() {
    for (when, refuses) in [("cpu_idle", true), ("always", false)] {
        let n = node(&format!(
            "[io]\nmode = \"poll\"\nspin_us = 10000\nspin_when = \"{when}\"\n"
        ));
        let mut c = Client::connect(&n.addr.to_string()).unwrap();
        let busy = common::busy::oversubscribe();
        for i in 0..100 {
            let r = c.call(FunctionId::TopK, 1, &ints(&[i, i + 1])).unwrap();
            assert_eq!(r.payload, ints(&[i + 1]));
        }
        // Idle past the publishing interval, then one more call: the I/O
        // thread publishes its counters as it goes back to sleep.
        std::thread::sleep(Duration::from_millis(5));
        c.call(FunctionId::TopK, 1, &ints(&[1, 2])).unwrap();
        drop(busy);
        std::thread::sleep(Duration::from_millis(20));
        let refused = common::metrics::metric(&n, "offrac_io_spin_refused_total");
        assert_eq!(refused > 0, refuses, "{when}: {refused} refusals");
        // Refusals in a row hold longer, so the gate reads less often than it refuses.
        let readings = common::metrics::metric(&n, "offrac_io_spin_readings_total");
        if refuses {
            assert!(
                readings > 0 && readings < refused,
                "{when}: {readings} readings, {refused} refusals"
            );
        } else {
            assert_eq!(readings, 0, "{when}");
        }
        n.shutdown().unwrap();
    }
}

/// A request slower than `reassembly_timeout_ms` but steadily faster than
/// `reassembly_min_rate` completes; a trickle is answered `TIMEOUT` near
/// the timeout, not when its bytes would be in.
#[test]
fn the_reassembly_deadline_grows_with_steady_progress_only() {
    let cfg = NodeConfig::parse(
        "reassembly_timeout_ms = 200\nreassembly_min_rate = 1048576\nstall_timeout_ms = 5000\n[metrics]\nlisten = \"\"\n",
    )
    .expect("config");
    let n = start(cfg, "127.0.0.1:0").expect("node starts");
    let len = 1usize << 20;
    // 64 KiB every 25 ms: ~2.6 MB/s, 400 ms in all.
    let mut s = TcpStream::connect(n.addr).unwrap();
    s.write_all(&RequestHeader::single(1, 0, 0, len as u32).encode())
        .unwrap();
    let t = Instant::now();
    for chunk in vec![5u8; len].chunks(64 << 10) {
        s.write_all(chunk).unwrap();
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(t.elapsed() > Duration::from_millis(300));
    let (h, p) = read_response(&mut s);
    assert_eq!(h.status, Status::Ok, "{}", String::from_utf8_lossy(&p));
    assert_eq!(p.len(), len);
    // 10 bytes every 20 ms of a 1 MiB request.
    let mut s = TcpStream::connect(n.addr).unwrap();
    s.write_all(&RequestHeader::single(2, 0, 0, len as u32).encode())
        .unwrap();
    s.set_nonblocking(true).unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    while t.elapsed() < Duration::from_secs(3) {
        let _ = s.write_all(&[1; 10]);
        let mut b = [0u8; 4096];
        if let Ok(k) = s.read(&mut b) {
            got.extend_from_slice(&b[..k]);
            if got.len() >= HEADER_LEN {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = t.elapsed();
    assert!(
        got.len() >= HEADER_LEN,
        "no answer to the trickle in {took:?}"
    );
    let head: [u8; HEADER_LEN] = got[..HEADER_LEN].try_into().expect("a header");
    let h = ResponseHeader::decode(&head).expect("an answer");
    assert_eq!(h.status, Status::Timeout);
    assert!(took < Duration::from_secs(1), "TIMEOUT only after {took:?}");
    n.shutdown().unwrap();
}
