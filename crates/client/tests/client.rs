mod common;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use common::{FakeNode, EXEC_NS, QUEUE_NS, REASSEMBLY_NS};
use offrac_client::{Client, ClientError, FunctionId, RetryPolicy, Status};

#[test]
fn echo_roundtrip() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr()).expect("connect");
    let payload: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
    let reply = c.call(FunctionId::Echo, 0, &payload).expect("call");
    assert_eq!(reply.payload, payload);
    assert_eq!(reply.header.status, Status::Ok);
    assert_eq!(reply.header.payload_len as usize, payload.len());
    assert_eq!(reply.header.reassembly_ns, REASSEMBLY_NS);
    assert_eq!(reply.header.queue_ns, QUEUE_NS);
    assert_eq!(reply.header.exec_ns, EXEC_NS);

    // Empty payload and a raw u8 function id work too.
    let reply = c.call(0u8, 0, &[]).expect("empty call");
    assert!(reply.payload.is_empty());
    assert_eq!(node.requests(), 2);
}

#[test]
fn pipelined_responses_are_matched_out_of_order() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr()).expect("connect");
    let n = 5u64;
    let mut sent = HashMap::new();
    for id in 0..n {
        let payload = vec![id as u8 + 1; (id as usize + 1) * 100];
        c.send(id + 100, 9u8, n, &payload).expect("send");
        sent.insert(id + 100, payload);
    }
    let mut order = Vec::new();
    for _ in 0..n {
        let (h, p) = c.recv().expect("recv");
        assert_eq!(h.status, Status::Ok);
        assert_eq!(
            Some(&p),
            sent.get(&h.request_id),
            "payload of request {}",
            h.request_id
        );
        order.push(h.request_id);
    }
    assert_eq!(
        order,
        vec![104, 103, 102, 101, 100],
        "fake node answers a batch reversed"
    );
}

#[test]
fn call_stashes_earlier_pipelined_responses_for_recv() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr()).expect("connect");
    // Function 10 holds 2 requests then answers in arrival order: the pipelined
    // request's answer arrives before the call's own.
    c.send(1, 10u8, 2, b"first").expect("send");
    let reply = c.call(10u8, 2, b"second").expect("call");
    assert_eq!(reply.payload, b"second");
    let (h, p) = c.recv().expect("stashed recv");
    assert_eq!(h.request_id, 1);
    assert_eq!(p, b"first");
}

#[test]
fn busy_is_retried_until_ok() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr())
        .expect("connect")
        .with_retry_policy(RetryPolicy::with_max_retries(3));
    let t0 = Instant::now();
    let reply = c
        .call(7u8, 0, b"payload")
        .expect("call succeeds after 2 BUSY");
    assert_eq!(reply.payload, b"payload");
    assert_eq!(c.busy_retries(), 2);
    assert_eq!(node.requests(), 3);
    // Two back-offs of at least 80 µs and 160 µs.
    assert!(
        t0.elapsed() >= Duration::from_micros(240),
        "{:?}",
        t0.elapsed()
    );
}

#[test]
fn busy_without_retries_is_a_status_error() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr())
        .expect("connect")
        .with_retry_policy(RetryPolicy::NONE);
    for _ in 0..2 {
        match c.call(7u8, 0, b"x") {
            Err(ClientError::Status {
                status,
                message,
                detail,
                ..
            }) => {
                assert_eq!(status, Status::Busy);
                assert_eq!(message, "busy");
                assert_eq!(detail, 0);
            }
            other => panic!("expected BUSY, got {other:?}"),
        }
    }
    assert_eq!(c.busy_retries(), 0);
    // The fake only refuses twice per connection.
    assert_eq!(c.call(7u8, 0, b"x").expect("third call").payload, b"x");
}

#[test]
fn too_few_retries_return_busy() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr())
        .expect("connect")
        .with_retry_policy(RetryPolicy::with_max_retries(1));
    let err = c.call(7u8, 0, b"x").expect_err("one retry is not enough");
    assert_eq!(err.status(), Some(Status::Busy));
    assert!(!err.is_connection_fatal());
    assert_eq!(c.busy_retries(), 1);
}

#[test]
fn unknown_function_reports_status_detail_and_message() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr()).expect("connect");
    let err = c.call(42u8, 0, b"abc").expect_err("unknown function");
    match err {
        ClientError::Status {
            status,
            message,
            detail,
            request_id,
            ..
        } => {
            assert_eq!(status, Status::UnknownFunction);
            assert_eq!(detail, 42);
            assert_eq!(message, "no such function");
            assert_ne!(request_id & (1 << 63), 0, "call ids carry the top bit");
        }
        other => panic!("expected a status error, got {other:?}"),
    }
    // The connection is still usable.
    assert_eq!(
        c.call(FunctionId::Echo, 0, b"ok").expect("echo").payload,
        b"ok"
    );
}

#[test]
fn closed_connection_is_reported() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr()).expect("connect");
    let err = c.call(11u8, 0, b"bye").expect_err("node closes");
    assert!(matches!(err, ClientError::Closed), "{err:?}");
    assert!(err.is_connection_fatal());
}

#[test]
fn oversized_response_is_refused() {
    let node = FakeNode::start();
    let mut c = Client::connect(&node.addr()).expect("connect");
    c.set_max_response_payload(16);
    let err = c
        .call(FunctionId::Echo, 0, &[0u8; 17])
        .expect_err("too large");
    assert!(
        matches!(err, ClientError::ResponseTooLarge { len: 17, max: 16 }),
        "{err:?}"
    );
}

#[test]
fn connect_to_closed_port_fails_with_io() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let err = Client::connect(&format!("127.0.0.1:{port}")).expect_err("nothing listens");
    assert!(matches!(err, ClientError::Io(_)), "{err:?}");
}
