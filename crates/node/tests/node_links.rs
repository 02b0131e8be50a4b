//! Tenants across nodes over real loopback sockets (`docs/control.md`,
//! "Tenants across nodes"; `docs/protocol.md`, "Node links"): two nodes that
//! share a node key say a hello on their link, so a chain across both works
//! with `anonymous = "refuse"` on each and is charged on the second node to
//! the tenant that sent it (its quota there applies); a connection that
//! did not say the node's hello cannot pass a hop off as forwarded.

mod common;

use common::control::envelope;
use offrac_client::{Client, ClientError, FunctionId, Hop, RetryPolicy, Status};
use offrac_control::Op;
use offrac_node::{start, NodeConfig, NodeHandle};
use offrac_proto::{RequestHeader, ResponseHeader, FLAG_FORWARDED, HEADER_LEN, TENANT_NODE};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const KEY1: &[u8] = b"0123456789abcdef";
const KEY2: &[u8] = b"fedcba9876543210";
const NODE_KEY: &[u8] = b"the cluster's node key";

fn free() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// Node `me` (0 or 1) linked to the other; tenant 1's reassembly bytes are
/// bounded by `pool1` on it.
fn node(
    me: u8,
    listen: std::net::SocketAddr,
    peer: std::net::SocketAddr,
    pool1: u64,
) -> NodeHandle {
    keyed_node(me, listen, peer, pool1, NODE_KEY)
}

fn keyed_node(
    me: u8,
    listen: std::net::SocketAddr,
    peer: std::net::SocketAddr,
    pool1: u64,
    node_key: &[u8],
) -> NodeHandle {
    let text = format!(
        r#"
device_id = {me}
[metrics]
listen = ""
[[devices]]
id = {}
addr = "{peer}"
[control]
anonymous = "refuse"
node_key = "{}"
[[control.tenants]]
id = 1
key = "{}"
max_pool_bytes = {pool1}
[[control.tenants]]
id = 2
key = "{}"
"#,
        1 - me,
        hex::encode(node_key),
        hex::encode(KEY1),
        hex::encode(KEY2)
    );
    start(
        NodeConfig::parse(&text).expect("config"),
        &listen.to_string(),
    )
    .expect("node starts")
}

fn client(n: &NodeHandle) -> Client {
    let mut c = Client::connect(&n.addr.to_string())
        .unwrap()
        .with_retry_policy(RetryPolicy::with_max_retries(0));
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn tenant(n: &NodeHandle, tenant: u16, key: &[u8]) -> Client {
    let mut c = client(n);
    c.hello(tenant, &envelope(tenant, key, &Op::Hello))
        .expect("hello accepted");
    c
}

fn status<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Status {
    r.expect_err("a refusal").status().expect("a status")
}

fn echo_on(device: u8) -> Hop {
    Hop {
        function: FunctionId::Echo.id(),
        device,
        param: 0,
    }
}

#[test]
fn a_chain_across_nodes_keeps_its_tenant_and_a_forged_peer_is_refused() {
    let (pa, pb) = (free(), free());
    let a = node(0, pa, pb, 1 << 20);
    let b = node(1, pb, pa, 50_000);
    let chain = [echo_on(0), echo_on(1)];
    let mut one = tenant(&a, 1, KEY1);
    // A's first connect may have raced B's start: it retries after 100 ms.
    let t = Instant::now();
    let r = loop {
        match one.call_chain(&chain, b"across") {
            Ok(r) => break r,
            Err(e) => {
                assert!(t.elapsed() < Duration::from_secs(5), "no chain across: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    assert_eq!(r.payload, b"across");
    assert_eq!(r.header.device, 1);
    // On B the hop is tenant 1's: its pool quota there (50,000 bytes) refuses
    // a larger payload, which tenant 2's same chain passes with.
    let big = vec![7u8; 100_000];
    let over = one
        .call_chain(&chain, &big)
        .expect_err("over tenant 1's quota on B");
    assert_eq!(over.status(), Some(Status::QuotaExceeded), "{over}");
    assert!(over.to_string().contains("(detail 50000)"), "{over}");
    let mut two = tenant(&a, 2, KEY2);
    assert_eq!(two.call_chain(&chain, &big).unwrap().payload, big);
    assert_eq!(one.call_chain(&chain, b"again").unwrap().payload, b"again");

    // A hop that claims to be forwarded, for tenant 1, on a connection that
    // said no node hello: refused.
    let mut raw = std::net::TcpStream::connect(b.addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut h = RequestHeader::single(7, FunctionId::Echo.id(), 0, 1);
    h.tenant = 1;
    h.flags |= FLAG_FORWARDED;
    let wire_h = h.encode_wire();
    raw.write_all(&wire_h[..h.wire_len()]).unwrap();
    raw.write_all(b"x").unwrap();
    let mut head = [0u8; HEADER_LEN];
    raw.read_exact(&mut head).unwrap();
    let resp = ResponseHeader::decode(&head).unwrap();
    assert_eq!((resp.request_id, resp.status), (7, Status::Unauthorized));
    // Nor does a node hello signed with another key make a connection a link.
    let mut forged = client(&b);
    let bad = envelope(TENANT_NODE, b"not the node key at all", &Op::Hello);
    assert_eq!(
        status(forged.hello(TENANT_NODE, &bad)),
        Status::Unauthorized
    );
    // And the node key signs nothing but hellos.
    let mut nodeish = client(&b);
    let list = envelope(TENANT_NODE, NODE_KEY, &Op::List);
    assert_eq!(
        status(nodeish.call(offrac_control::FN_CONTROL, 0, &list)),
        Status::Unauthorized
    );
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

#[test]
fn a_node_with_another_key_cannot_forward() {
    let (pa, pb) = (free(), free());
    let b = node(1, pb, pa, 1 << 20);
    let a = keyed_node(0, pa, pb, 1 << 20, b"another cluster's node key");
    let mut one = tenant(&a, 1, KEY1);
    // B refuses A's hello: A's link stays down and the hop is answered
    // UNREACHABLE by A (never run on B as anyone).
    let t = Instant::now();
    let e = loop {
        let e = one
            .call_chain(&[echo_on(0), echo_on(1)], b"x")
            .expect_err("B refuses A's link");
        if e.status() == Some(Status::Unreachable) || t.elapsed() > Duration::from_secs(5) {
            break e;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(e.status(), Some(Status::Unreachable), "{e}");
    // Because B refused A's hello (not for want of a connection).
    let refused = |n: &NodeHandle| {
        n.metrics
            .render()
            .lines()
            .find_map(|l| l.strip_prefix("offrac_link_hellos_refused_total "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let t = Instant::now();
    while refused(&a) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "A's hello was never refused"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}
