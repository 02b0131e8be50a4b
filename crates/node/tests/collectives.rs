//! Collectives across three nodes on real loopback sockets, one client per
//! rank (docs/collectives.md): results against a plain sum, a mismatched
//! call, a node that shuts down while the others wait for it.

mod common;

use common::collective::allreduce_payload;
use common::metrics::metric;
use offrac_client::{Client, ClientError, RetryPolicy, Status};
use offrac_collective::{Algorithm, Kind};
use offrac_node::NodeHandle;
use offrac_proto::{RequestHeader, ResponseHeader, FN_COLLECTIVE, HEADER_LEN};
use std::io::{Read, Write};
use std::time::{Duration, Instant};

const N: usize = 3;

fn cluster() -> Vec<NodeHandle> {
    // Small thresholds: the test sizes take both protocols and several segments.
    common::linked_nodes(
        N,
        "[metrics]\nlisten = \"\"\n[collectives]\neager_max_bytes = 1024\nsegment_bytes = 16384",
    )
}

fn call(
    node: &NodeHandle,
    tag: u64,
    count: u32,
    algorithm: Algorithm,
    input: &[i32],
    timeout_ms: u32,
) -> Result<Vec<i32>, ClientError> {
    call_at(
        &node.addr.to_string(),
        tag,
        count,
        algorithm,
        input,
        timeout_ms,
    )
}

fn call_at(
    addr: &str,
    tag: u64,
    count: u32,
    algorithm: Algorithm,
    input: &[i32],
    timeout_ms: u32,
) -> Result<Vec<i32>, ClientError> {
    let payload = allreduce_payload(tag, count, algorithm, timeout_ms, 0, input);
    let mut c = Client::connect(addr)?;
    c.set_retry_policy(RetryPolicy::NONE);
    let r = c.call(FN_COLLECTIVE, 0, &payload)?;
    Ok(r.payload
        .chunks_exact(4)
        .map(|w| i32::from_le_bytes(w.try_into().unwrap()))
        .collect())
}

/// Rank `rank`'s ring all-reduce of `count` on `node`, called from a thread.
fn spawn_ring_call(
    node: &NodeHandle,
    rank: usize,
    tag: u64,
    count: u32,
    timeout_ms: u32,
) -> std::thread::JoinHandle<Result<Vec<i32>, ClientError>> {
    let addr = node.addr.to_string();
    std::thread::spawn(move || {
        call_at(
            &addr,
            tag,
            count,
            Algorithm::Ring,
            &input(rank, count as usize),
            timeout_ms,
        )
    })
}

fn input(rank: usize, n: usize) -> Vec<i32> {
    (0..n)
        .map(|i| (i as i32 % 1000) * (rank as i32 + 1) - 7)
        .collect()
}

#[test]
fn allreduce_across_three_nodes_then_failures_end_in_errors() {
    let nodes = cluster();
    // Ring and one-to-all-sized: 3 × 100 000 elements (rendezvous, many segments), and 10.
    for (tag, count) in [(1u64, 100_000usize), (2, 10)] {
        let got: Vec<Vec<i32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..N)
                .map(|r| {
                    let node = &nodes[r];
                    s.spawn(move || {
                        call(
                            node,
                            tag,
                            count as u32,
                            Algorithm::Ring,
                            &input(r, count),
                            5000,
                        )
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap().expect("allreduce"))
                .collect()
        });
        let want: Vec<i32> = (0..count)
            .map(|i| (0..N).map(|r| input(r, count)[i]).sum())
            .collect();
        for g in &got {
            assert_eq!(g, &want);
        }
    }

    // A mismatched count: every rank gets BAD_INPUT, one names the mismatch.
    let errs: Vec<ClientError> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..N)
            .map(|r| {
                let node = &nodes[r];
                let count = if r == 1 { 51 } else { 50 };
                s.spawn(move || {
                    call(
                        node,
                        3,
                        count,
                        Algorithm::Auto,
                        &input(r, count as usize),
                        5000,
                    )
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().unwrap().unwrap_err())
            .collect()
    });
    assert!(
        errs.iter().all(|e| e.status() == Some(Status::BadInput)),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.to_string().contains("mismatched")),
        "{errs:?}"
    );

    // Node 2 goes away while ranks 0 and 1 wait for it: both fail at once
    // (their links to it close), far before the 20 s deadline.
    let mut nodes = nodes;
    let gone = nodes.pop().unwrap();
    let t = Instant::now();
    let errs: Vec<ClientError> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|r| {
                let node = &nodes[r];
                s.spawn(move || call(node, 4, 1000, Algorithm::Auto, &input(r, 1000), 20_000))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        gone.shutdown().unwrap();
        hs.into_iter()
            .map(|h| h.join().unwrap().unwrap_err())
            .collect()
    });
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );
    for e in &errs {
        assert_eq!(e.status(), Some(Status::Unreachable), "{e}");
        assert!(e.to_string().contains("device 2"), "{e}");
    }
    for n in nodes {
        n.shutdown().unwrap();
    }
}

/// A call's answer times its reassembly (first byte to the call complete)
/// apart from the collective (complete to answered): rank 0's call arrives
/// in two pieces 500 ms apart while the other ranks already wait.
#[test]
fn a_calls_answer_carries_its_reassembly_time() {
    let nodes = cluster();
    let count = 4096u32;
    let waiting: Vec<_> = (1..N)
        .map(|r| spawn_ring_call(&nodes[r], r, 5, count, 10_000))
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    let payload = allreduce_payload(
        5,
        count,
        Algorithm::Ring,
        10_000,
        0,
        &input(0, count as usize),
    );
    let mut wire = RequestHeader::single(1, FN_COLLECTIVE, 0, payload.len() as u32)
        .encode()
        .to_vec();
    wire.extend(&payload);
    let mut s = std::net::TcpStream::connect(nodes[0].addr).unwrap();
    s.set_nodelay(true).unwrap();
    let (first, rest) = wire.split_at(wire.len() / 2);
    s.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    s.write_all(rest).unwrap();
    let mut head = [0u8; HEADER_LEN];
    s.read_exact(&mut head).unwrap();
    let h = ResponseHeader::decode(&head).unwrap();
    assert_eq!(h.status, Status::Ok, "{h:?}");
    // The node stamps the first byte when it reads it, which a loaded
    // machine may delay by a few ms after the write (a run saw 497 ms), so
    // the bound leaves 50 ms; a reassembly not timed at all would be ~0.
    assert!(
        h.reassembly_ns >= 450_000_000,
        "the call took 500 ms to arrive; reassembly_ns {}",
        h.reassembly_ns
    );
    assert!(
        h.exec_ns < h.reassembly_ns,
        "exec_ns {} should not count the call's arrival",
        h.exec_ns
    );
    for w in waiting {
        assert!(w.join().unwrap().is_ok());
    }
}

/// Rank 0's call of tag `tag` as raw descriptor bytes (all-reduce of `count`
/// i32 over the three nodes), `flags` in byte 7 and `param` in the hop.
fn raw_call(
    node: &NodeHandle,
    tag: u64,
    count: u32,
    input: &[i32],
    flags: u8,
    param: u64,
) -> ClientError {
    let payload = allreduce_payload(tag, count, Algorithm::Auto, 20_000, flags, input);
    let mut c = Client::connect(&node.addr.to_string()).unwrap();
    c.set_retry_policy(RetryPolicy::NONE);
    c.call(FN_COLLECTIVE, param, &payload)
        .expect_err("the call is refused")
}

/// Rank 0's refused call: what its refusal says (`why`), the call, and the
/// statuses of rank 0 and of the others.
struct Refused {
    why: &'static str,
    count: u32,
    input: Vec<i32>,
    flags: u8,
    param: u64,
    root: Status,
    others: Status,
}

/// A rank whose call is refused before its collective starts (a wrong input
/// size, a named input the node does not hold, a collective beyond the
/// node's limit, a call beyond `max_payload` that the engine refuses) fails the ranks waiting for it at once with the reason,
/// not at their 20 s deadline.
#[test]
fn a_refused_call_fails_the_waiting_ranks_at_once() {
    let nodes = cluster();
    let count = 100u32;
    let cases = [
        // 99 elements for a count of 100
        Refused {
            why: "gives 396 input bytes",
            count,
            input: input(0, 99),
            flags: 0,
            param: 0,
            root: Status::BadInput,
            others: Status::BadInput,
        },
        // input from named buffer 77, which this node does not hold
        Refused {
            why: "77",
            count,
            input: Vec::new(),
            flags: 1,
            param: 77,
            root: Status::UnknownBuffer,
            others: Status::BadInput,
        },
        // 4 GiB of work: beyond max_work_bytes
        Refused {
            why: "exceeds this node's limit",
            count: u32::MAX / 4,
            input: Vec::new(),
            flags: 0,
            param: 0,
            root: Status::TooLarge,
            others: Status::TooLarge,
        },
        // 2.4 MB of input: beyond the node's max_payload (2 MiB), refused by
        // its engine before the driver sees the call
        Refused {
            why: "exceeds the maximum of 2097152",
            count: 600_000,
            input: input(0, 600_000),
            flags: 0,
            param: 0,
            root: Status::TooLarge,
            others: Status::TooLarge,
        },
    ];
    for (i, case) in cases.into_iter().enumerate() {
        let Refused {
            why,
            count: root_count,
            input: root_input,
            flags,
            param,
            root: root_status,
            others,
        } = case;
        let tag = 10 + i as u64;
        let t = Instant::now();
        let (root, errs, told) = std::thread::scope(|s| {
            let hs: Vec<_> = (1..N)
                .map(|r| {
                    let node = &nodes[r];
                    s.spawn(move || {
                        call(
                            node,
                            tag,
                            count,
                            Algorithm::Auto,
                            &input(r, count as usize),
                            20_000,
                        )
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(200));
            let root = raw_call(&nodes[0], tag, root_count, &root_input, flags, param);
            let refused = Instant::now();
            let errs: Vec<ClientError> = hs
                .into_iter()
                .map(|h| h.join().unwrap().expect_err("rank 0 was refused"))
                .collect();
            (root, errs, refused.elapsed())
        });
        assert!(
            told < Duration::from_secs(1),
            "case {i}: the others failed {told:?} after rank 0's refusal"
        );
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "case {i}: took {:?}",
            t.elapsed()
        );
        assert_eq!(root.status(), Some(root_status), "case {i}: {root}");
        assert!(root.to_string().contains(why), "case {i}: {root}");
        for e in &errs {
            assert_eq!(e.status(), Some(others), "case {i}: {e}");
            let msg = e.to_string();
            assert!(
                msg.contains("rank 0 (device 0) failed the collective") && msg.contains(why),
                "case {i}: {msg}"
            );
        }
    }
    for n in nodes {
        n.shutdown().unwrap();
    }
}

/// A message from rank 1's node as raw bytes: `kind` of an all-reduce of 4
/// i32 under `tag`, `flags` in byte 7.
fn raw_message(id: u64, tag: u64, kind: Kind, flags: u8) -> Vec<u8> {
    let mut payload = allreduce_payload(tag, 4, Algorithm::RecursiveDoubling, 0, 0, &[]);
    payload[0] = kind as u8;
    payload[6] = 1; // src: rank 1
    payload[7] = flags;
    if kind == Kind::Data {
        payload.extend([0u8; 16]);
    }
    let header = RequestHeader::single(id, FN_COLLECTIVE, 0, payload.len() as u32);
    let mut bytes = header.encode_wire()[..header.wire_len()].to_vec();
    bytes.extend(payload);
    bytes
}

fn read_answer(s: &mut std::net::TcpStream) -> (ResponseHeader, Vec<u8>) {
    let mut head = [0u8; HEADER_LEN];
    s.read_exact(&mut head).unwrap();
    let h = ResponseHeader::decode(&head).unwrap();
    let mut payload = vec![0u8; h.payload_len as usize];
    s.read_exact(&mut payload).unwrap();
    (h, payload)
}

/// Node-to-node collective messages are answered only when the sender asks
/// (byte 7 bit 0) or when they are refused, on a real socket: the node
/// stays silent about the others (`docs/protocol.md`, "Collectives").
#[test]
fn node_to_node_messages_are_answered_only_when_asked_or_refused() {
    let nodes = cluster();
    let mut s = std::net::TcpStream::connect(nodes[0].addr).unwrap();
    s.set_nodelay(true).unwrap();
    // Five data segments and a READY of a collective rank 0 was not called
    // for (kept as early data), none asking for an answer; then one that asks.
    let mut bytes = Vec::new();
    for id in 1..=5 {
        bytes.extend(raw_message(id, 900, Kind::Data, 0));
    }
    bytes.extend(raw_message(6, 901, Kind::Ready, 0));
    bytes.extend(raw_message(
        7,
        902,
        Kind::Data,
        offrac_collective::MSG_ANSWER,
    ));
    s.write_all(&bytes).unwrap();
    let (h, payload) = read_answer(&mut s);
    assert_eq!(
        (h.request_id, h.status, payload.len()),
        (7, Status::Ok, 0),
        "the first answer is the asked-for one: {h:?}"
    );
    // Unknown bits of byte 7 and an undecodable descriptor: refused.
    s.write_all(&raw_message(8, 903, Kind::Data, 2)).unwrap();
    let (h, payload) = read_answer(&mut s);
    assert_eq!((h.request_id, h.status), (8, Status::BadInput));
    assert!(
        String::from_utf8_lossy(&payload).contains("byte 7"),
        "{payload:?}"
    );
    let mut bad = raw_message(9, 904, Kind::Data, 0);
    bad[HEADER_LEN + 2] = 9; // dtype 9
    s.write_all(&bad).unwrap();
    let (h, _) = read_answer(&mut s);
    assert_eq!((h.request_id, h.status), (9, Status::BadInput));
    // Nothing else comes: messages 1-6 were never answered.
    s.write_all(&raw_message(10, 905, Kind::Ready, 0)).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut buf = [0u8; 1];
    match s.read(&mut buf) {
        Ok(0) => panic!("the node closed the connection"),
        Ok(_) => panic!("an answer nobody asked for"),
        Err(e) => assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        ),
    }
}

/// Rendezvous one step ahead on a real node and real sockets: node 0 runs
/// rank 0 of a 3-rank ring all-reduce whose other ranks are plain TCP
/// listeners (the node's links connect to them). On its call, before any
/// data comes, node 0 says `Ready` to its previous rank (device 2) for
/// step 0 and for step 1 — one step ahead, so that rank does not wait a
/// round trip when it gets to step 1 (`docs/collectives.md`, "Eager and
/// rendezvous").
#[test]
fn a_ring_rank_says_ready_one_step_ahead() {
    use std::net::TcpListener;
    let peers: Vec<TcpListener> = (0..2)
        .map(|_| TcpListener::bind(("127.0.0.1", common::free_port())).unwrap())
        .collect();
    let devices: String = peers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            format!(
                "[[devices]]\nid = {}\naddr = \"{}\"\n",
                i + 1,
                l.local_addr().unwrap()
            )
        })
        .collect();
    let addr = format!("127.0.0.1:{}", common::free_port());
    let text = format!(
        "device_id = 0\n[metrics]\nlisten = \"\"\n[collectives]\neager_max_bytes = 1024\nsegment_bytes = 16384\n{devices}"
    );
    let node = offrac_node::start(offrac_node::NodeConfig::parse(&text).unwrap(), &addr).unwrap();
    // 3000 i32: chunks of 4000 bytes, over the 1024-byte eager limit.
    let caller = {
        let addr = addr.clone();
        std::thread::spawn(move || call_at(&addr, 77, 3000, Algorithm::Ring, &input(0, 3000), 1500))
    };
    let (mut s, _) = peers[1].accept().unwrap(); // device 2: rank 0's previous rank
    s.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut readies = Vec::new();
    while readies.len() < 2 {
        let mut head = [0u8; HEADER_LEN];
        s.read_exact(&mut head).unwrap();
        let h = RequestHeader::decode(&head).unwrap();
        assert_eq!(h.wire_len(), HEADER_LEN, "a single-hop request");
        let mut payload = vec![0u8; h.payload_len as usize];
        s.read_exact(&mut payload).unwrap();
        let (d, _) = offrac_collective::Descriptor::decode(&payload).unwrap();
        assert_eq!(
            d.kind,
            Kind::Ready,
            "only Ready messages before any data came: {d:?}"
        );
        readies.push(d.step);
    }
    assert_eq!(readies, vec![0, 1]);
    // Nobody sends data: the call ends at its deadline.
    let r = caller.join().unwrap();
    assert!(
        matches!(
            &r,
            Err(ClientError::Status {
                status: Status::Timeout,
                ..
            })
        ),
        "{r:?}"
    );
    node.shutdown().unwrap();
}

/// The element-wise sum of the ranks' [`input`]s, as the nodes keep it.
fn summed_inputs(ranks: usize, count: usize) -> Vec<u8> {
    let inputs: Vec<Vec<i32>> = (0..ranks).map(|r| input(r, count)).collect();
    (0..count)
        .map(|i| inputs.iter().map(|x| x[i]).sum::<i32>())
        .flat_map(|x| x.to_le_bytes())
        .collect()
}

/// Every node keeps exactly `want` in its buffer `name`.
fn assert_each_keeps(nodes: &[NodeHandle], name: u32, want: &[u8]) {
    use offrac_client::Hop;
    use offrac_proto::{buffer_param, BufferOp, FN_BUFFER};
    for (i, node) in nodes.iter().enumerate() {
        let mut c = Client::connect(&node.addr.to_string()).unwrap();
        let get = Hop::local(FN_BUFFER, buffer_param(BufferOp::Get, name));
        assert!(
            c.call_chain(&[get], b"").unwrap().payload == want,
            "node {i}: buffer {name}"
        );
    }
}

/// Nodes for 8 MiB collectives in 1 MiB segments, with metrics.
const LARGE: &str = "max_payload = 16777216\n[metrics]\nlisten = \"127.0.0.1:0\"\n\
     [collectives]\nsegment_bytes = 1048576\n[pool]\nbuffers = 8\nbuffer_bytes = 16777216\n\
     [selector]\nslot_queue_bytes = 16777216";

/// A large collective's data is read straight into the reassembly buffers
/// of its messages (and of the clients' calls), not read into the
/// connection's read buffer and copied (`docs/collectives.md`, "Large
/// messages"): an 8 MiB ring all-reduce across three nodes in 1 MiB
/// segments; each node reads 8 MiB of its client's call and 2 × 2 × 8/3 MiB
/// of its peers' data, and copies at most the bytes that come with a
/// request's header in its first read.
#[test]
fn large_collective_data_is_read_straight_into_its_buffers() {
    let nodes = common::linked_nodes(N, LARGE);
    let count = 2u32 << 20; // 8 MiB of i32
    let ranks: Vec<_> = (0..N)
        .map(|r| spawn_ring_call(&nodes[r], r, 9, count, 30_000))
        .collect();
    let inputs: Vec<Vec<i32>> = (0..N).map(|r| input(r, count as usize)).collect();
    let want: Vec<i32> = (0..count as usize)
        .map(|i| inputs.iter().map(|x| x[i]).sum())
        .collect();
    for r in ranks {
        assert!(r.join().unwrap().expect("all-reduce") == want);
    }
    std::thread::sleep(Duration::from_millis(200)); // the nodes publish their metrics
    let bytes = 4 * count as u64;
    for (i, node) in nodes.iter().enumerate() {
        let copied = metric(node, "offrac_payload_bytes_copied_total");
        let direct = metric(node, "offrac_payload_bytes_direct_total");
        assert!(
            copied + direct >= bytes + 4 * bytes / 3,
            "node {i}: copied {copied} + direct {direct} bytes, fewer than it received"
        );
        assert!(
            direct >= 4 * copied,
            "node {i}: copied {copied} bytes, read {direct} straight in"
        );
    }
}

/// A broadcast's root sends its segments as slices of its input, not
/// copies (`docs/collectives.md`, "Large messages"): an 8 MiB one-to-all
/// broadcast across three nodes in 1 MiB segments, the root's input in a
/// named buffer and every rank's output kept in one. The root copies
/// nothing in memory and shares the 2 × 8 MiB it sends; each other rank
/// takes the 8 MiB it receives into its work buffer once (copied, or read
/// straight into place: posted). (The machine
/// that copied each segment out of the work buffer copied 8 MiB into the
/// work buffer and 16 MiB into messages at the root.)
#[test]
fn a_broadcasts_root_sends_its_named_input_uncopied() {
    use offrac_client::Hop;
    use offrac_collective::{Descriptor, Dtype, Members, Op};
    use offrac_proto::{buffer_param, BufferOp, FN_BUFFER};
    let nodes = common::linked_nodes(N, LARGE);
    let count = 2u32 << 20; // 8 MiB of i32
    let data: Vec<u8> = input(0, count as usize)
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let mut c = Client::connect(&nodes[0].addr.to_string()).unwrap();
    c.set_retry_policy(RetryPolicy::NONE);
    let put = Hop::local(FN_BUFFER, buffer_param(BufferOp::Put, 5));
    c.call_chain(&[put], &data).expect("input kept");
    let outs: Vec<_> = (0..N)
        .map(|r| {
            let addr = nodes[r].addr.to_string();
            std::thread::spawn(move || {
                let d = Descriptor {
                    algorithm: Algorithm::OneToAll,
                    tag: 12,
                    timeout_ms: 30_000,
                    ..Descriptor::call(Op::Broadcast, Dtype::I32, count, Members::of(&[0, 1, 2]))
                };
                let mut p = d.encode().to_vec();
                // Every rank keeps its output in buffer 6; the root's input is buffer 5.
                p[7] = if r == 0 { 3 } else { 2 };
                let mut c = Client::connect(&addr).unwrap();
                c.set_retry_policy(RetryPolicy::NONE);
                c.call(FN_COLLECTIVE, 6 << 32 | 5, &p).map(|a| a.payload)
            })
        })
        .collect();
    for o in outs {
        assert!(o.join().unwrap().expect("broadcast kept").is_empty());
    }
    assert_each_keeps(&nodes, 6, &data);
    std::thread::sleep(Duration::from_millis(200)); // the nodes publish their metrics
    let bytes = 4 * count as u64;
    for (i, node) in nodes.iter().enumerate() {
        let copied = metric(node, "offrac_collective_bytes_copied_total");
        let shared = metric(node, "offrac_collective_bytes_shared_total");
        let posted = metric(node, "offrac_collective_bytes_posted_total");
        let want = if i == 0 { (0, 2 * bytes) } else { (bytes, 0) };
        assert_eq!(
            (copied + posted, shared),
            want,
            "node {i}: (copied + posted, shared)"
        );
    }
}

/// A collective repeated into the same named buffer writes its output into
/// the memory of the output it replaced two rounds before (no fresh pages
/// to fault in): three 4 MiB all-reduces over 3 loopback nodes, each rank
/// keeping its output in buffer 8. Round 1 and 2 take new memory; at the
/// end of round 2 the replaced round-1 output becomes the spare, which
/// round 3's work buffer reuses: each node reports exactly 4 MiB reused,
/// and the kept result is right.
#[test]
fn a_collective_repeated_into_a_kept_buffer_reuses_the_replaced_output() {
    use offrac_collective::{Descriptor, Dtype, Members, Op};
    let nodes = common::linked_nodes(N, LARGE);
    let count = 1u32 << 20; // 4 MiB of i32
    let bytes = 4 * count as u64;
    for round in 0..3u64 {
        let outs: Vec<_> = (0..N)
            .map(|r| {
                let addr = nodes[r].addr.to_string();
                std::thread::spawn(move || {
                    let d = Descriptor {
                        algorithm: Algorithm::Ring,
                        tag: 40 + round,
                        timeout_ms: 30_000,
                        ..Descriptor::call(
                            Op::AllReduce,
                            Dtype::I32,
                            count,
                            Members::of(&[0, 1, 2]),
                        )
                    };
                    let mut p = d.encode().to_vec();
                    p[7] = 2; // keep the output in buffer 8; the input in the call
                    p.extend(
                        input(r, count as usize)
                            .iter()
                            .flat_map(|x| x.to_le_bytes()),
                    );
                    let mut c = Client::connect(&addr).unwrap();
                    c.set_retry_policy(RetryPolicy::NONE);
                    c.call(FN_COLLECTIVE, 8 << 32, &p).map(|a| a.payload)
                })
            })
            .collect();
        for o in outs {
            assert!(o.join().unwrap().expect("all-reduce kept").is_empty());
        }
    }
    assert_each_keeps(&nodes, 8, &summed_inputs(N, count as usize));
    std::thread::sleep(Duration::from_millis(200)); // the nodes publish their metrics
    for (i, node) in nodes.iter().enumerate() {
        let reused = metric(node, "offrac_collective_bytes_reused_total");
        assert_eq!(reused, bytes, "node {i}: bytes reused");
    }
}

/// Rank `r`'s input of `count` i32 as bytes.
fn block(r: usize, count: u32) -> Vec<u8> {
    input(r, count as usize)
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect()
}

/// Keeps `data(r)` in named buffer 5 on rank `r`'s node.
fn keep_inputs(nodes: &[NodeHandle], data: impl Fn(usize) -> Vec<u8>) {
    use offrac_client::Hop;
    use offrac_proto::{buffer_param, BufferOp, FN_BUFFER};
    for (r, node) in nodes.iter().enumerate() {
        let mut c = Client::connect(&node.addr.to_string()).unwrap();
        c.set_retry_policy(RetryPolicy::NONE);
        let put = Hop::local(FN_BUFFER, buffer_param(BufferOp::Put, 5));
        c.call_chain(&[put], &data(r)).expect("input kept");
    }
}

/// Calls `d` on every rank at once, each from a client of its own, with
/// byte 7 of rank `r`'s descriptor `flags(r)` and buffers 5 (input) and 6
/// (output) named in the param: each rank's answer payload, by rank.
fn call_on_every_rank(
    nodes: &[NodeHandle],
    d: offrac_collective::Descriptor,
    flags: fn(usize) -> u8,
) -> Vec<Result<Vec<u8>, ClientError>> {
    let calls: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(r, node)| {
            let addr = node.addr.to_string();
            let mut p = d.encode().to_vec();
            p[7] = flags(r);
            std::thread::spawn(move || {
                let mut c = Client::connect(&addr).unwrap();
                c.set_retry_policy(RetryPolicy::NONE);
                c.call(FN_COLLECTIVE, 6 << 32 | 5, &p).map(|a| a.payload)
            })
        })
        .collect();
    calls.into_iter().map(|t| t.join().unwrap()).collect()
}

/// A ring all-reduce whose input sits in a named buffer reads it in place
/// (`docs/collectives.md`, "Large messages"): an 8 MiB all-reduce across
/// two nodes in 1 MiB segments, each rank's input in buffer 5 and output
/// kept in buffer 6. Each node reduces the 4 MiB it receives in step 0
/// with its input straight into the work buffer, sends its step-0 half as
/// slices of the input, and copies only what it receives in step 1 (or
/// reads it straight into place: posted) and the reduced half it sends
/// then: 12 MiB copied or posted, 4 MiB shared. (The
/// machine that copied the input into the work buffer first copied 24 MiB:
/// the input, both halves it sent and both it received.)
#[test]
fn an_allreduce_reads_its_named_input_in_place() {
    use offrac_collective::{Descriptor, Dtype, Members, Op};
    const RANKS: usize = 2;
    let nodes = common::linked_nodes(RANKS, LARGE);
    let count = 2u32 << 20; // 8 MiB of i32
    let bytes = 4 * count as u64;
    let data = |r: usize| block(r, count);
    keep_inputs(&nodes, data);
    let d = Descriptor {
        algorithm: Algorithm::Ring,
        tag: 14,
        timeout_ms: 30_000,
        ..Descriptor::call(Op::AllReduce, Dtype::I32, count, Members::of(&[0, 1]))
    };
    // The input from buffer 5, the output kept in buffer 6.
    for o in call_on_every_rank(&nodes, d, |_| 3) {
        assert!(o.expect("all-reduce kept").is_empty());
    }
    assert_each_keeps(&nodes, 6, &summed_inputs(RANKS, count as usize));
    std::thread::sleep(Duration::from_millis(200)); // the nodes publish their metrics
    for (i, node) in nodes.iter().enumerate() {
        let copied = metric(node, "offrac_collective_bytes_copied_total");
        let shared = metric(node, "offrac_collective_bytes_shared_total");
        let posted = metric(node, "offrac_collective_bytes_posted_total");
        assert_eq!(
            (copied + posted, shared),
            (3 * bytes / 2, bytes / 2),
            "node {i}: (copied + posted, shared)"
        );
        // The half received in step 1 goes straight into place, but for
        // what comes in the same read as each segment's header.
        assert!(posted >= bytes / 4, "node {i}: {posted} bytes posted");
    }
}

/// A gather's root reads the blocks it receives straight into their place
/// in its work buffer (posted receives, `docs/collectives.md`, "Posted
/// receives"), not into a message and then copied: an 8 MiB gather across
/// two loopback nodes in 1 MiB segments, inputs in named buffers, the
/// root's output kept. The root takes its own block (copied once) and
/// rank 1's (posted, but for the bytes that come in the same read as each
/// segment's header): 16 MiB copied or posted, at least 6 MiB of rank 1's
/// 8 MiB posted. (Before posted receives: 16 MiB copied, nothing posted.)
#[test]
fn a_gathers_root_reads_the_blocks_straight_into_place() {
    use offrac_client::Hop;
    use offrac_collective::{Descriptor, Dtype, Members, Op};
    use offrac_proto::{buffer_param, BufferOp, FN_BUFFER};
    const RANKS: usize = 2;
    let nodes = common::linked_nodes(RANKS, LARGE);
    let count = 2u32 << 20; // 8 MiB of i32 per rank
    let bytes = 4 * count as u64;
    let data = |r: usize| block(r, count);
    keep_inputs(&nodes, data);
    let d = Descriptor {
        algorithm: Algorithm::OneToAll,
        tag: 15,
        timeout_ms: 30_000,
        ..Descriptor::call(Op::Gather, Dtype::I32, count, Members::of(&[0, 1]))
    };
    // The input from buffer 5; the root keeps its output in buffer 6.
    for o in call_on_every_rank(&nodes, d, |r| if r == 0 { 3 } else { 1 }) {
        assert!(o.expect("gather").is_empty());
    }
    let mut c = Client::connect(&nodes[0].addr.to_string()).unwrap();
    let get = Hop::local(FN_BUFFER, buffer_param(BufferOp::Get, 6));
    let kept = c.call_chain(&[get], b"").unwrap().payload;
    assert!(
        kept == [data(0), data(1)].concat(),
        "the root keeps both blocks"
    );
    std::thread::sleep(Duration::from_millis(200)); // the nodes publish their metrics
    let copied = metric(&nodes[0], "offrac_collective_bytes_copied_total");
    let posted = metric(&nodes[0], "offrac_collective_bytes_posted_total");
    assert_eq!(
        copied + posted,
        2 * bytes,
        "root: copied {copied} + posted {posted}"
    );
    assert!(posted >= 3 * bytes / 4, "root: {posted} bytes posted");
}

/// A peer whose segment stops part-way — its connection closes while the
/// root reads the segment straight into place — fails the collective at
/// once with `UNREACHABLE` naming it, instead of leaving the root waiting
/// for its deadline (and no byte of the cut segment is answered): node 0
/// runs the root of a 2-rank gather of 64 KiB blocks whose rank 1 is this
/// test, on a plain socket. (Before posted receives the half message was
/// dropped and the call ended only at its deadline, `TIMEOUT`.)
#[test]
fn a_segment_cut_off_part_way_fails_the_collective_at_once() {
    use offrac_collective::{Descriptor, Dtype, Members, Op};
    use std::net::TcpListener;
    let peer = TcpListener::bind(("127.0.0.1", common::free_port())).unwrap();
    let addr = format!("127.0.0.1:{}", common::free_port());
    let text = format!(
        "device_id = 0\n[metrics]\nlisten = \"\"\n[collectives]\neager_max_bytes = 1024\nsegment_bytes = 65536\n[[devices]]\nid = 1\naddr = \"{}\"\n",
        peer.local_addr().unwrap()
    );
    let node = offrac_node::start(offrac_node::NodeConfig::parse(&text).unwrap(), &addr).unwrap();
    let count = 16384u32; // 64 KiB blocks, over the eager limit
    let d = Descriptor {
        algorithm: Algorithm::OneToAll,
        tag: 31,
        timeout_ms: 10_000,
        ..Descriptor::call(Op::Gather, Dtype::I32, count, Members::of(&[0, 1]))
    };
    let called = Instant::now();
    let caller = {
        let addr = addr.clone();
        let mut p = d.encode().to_vec();
        p.extend(vec![1u8; 4 * count as usize]);
        std::thread::spawn(move || {
            let mut c = Client::connect(&addr).unwrap();
            c.set_retry_policy(RetryPolicy::NONE);
            c.call(FN_COLLECTIVE, 0, &p)
        })
    };
    // Node 0's link to rank 1 comes up and says READY: the block may come.
    let (mut link, _) = peer.accept().unwrap();
    link.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let mut head = [0u8; HEADER_LEN];
    link.read_exact(&mut head).unwrap();
    let h = RequestHeader::decode(&head).unwrap();
    let mut payload = vec![0u8; h.payload_len as usize];
    link.read_exact(&mut payload).unwrap();
    let (ready, _) = Descriptor::decode(&payload).unwrap();
    assert_eq!(ready.kind, Kind::Ready);
    // Rank 1's block, cut off: the header, the descriptor and part of the
    // body, the rest of it never sent.
    let body = vec![2u8; 4 * count as usize];
    let msg = d.message(Kind::Data, 1, 0, 4 * count, &body);
    let header = RequestHeader::single(1, FN_COLLECTIVE, 0, msg.len() as u32);
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(&header.encode_wire()[..header.wire_len()])
        .unwrap();
    let body_at = offrac_collective::DESCRIPTOR_LEN;
    s.write_all(&msg[..body_at + 4000]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    s.write_all(&msg[body_at + 4000..body_at + 20_000]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(s);
    let r = caller.join().unwrap();
    match &r {
        Err(ClientError::Status {
            status, message, ..
        }) => {
            assert_eq!(*status, Status::Unreachable, "{message}");
            assert!(message.contains("part-way"), "{message}");
        }
        other => panic!("want UNREACHABLE, got {other:?}"),
    }
    assert!(
        called.elapsed() < Duration::from_secs(5),
        "failed only after {:?}",
        called.elapsed()
    );
    node.shutdown().unwrap();
}
