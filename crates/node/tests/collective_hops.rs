//! Collective hops of chains over real loopback sockets (`docs/protocol.md`,
//! "Collective hops"): three nodes run the distributed gemv of ACCL+ §6 as
//! one request per rank and multiply — `[scatter, BUFFER GET A, gemv,
//! reduce]` — against a plain product; a root whose scatter hop is refused
//! fails every rank's chain at once, each with one answer.

mod common;

use offrac_client::{Client, ClientError, Hop, Reply, RetryPolicy, Status};
use offrac_collective::{Descriptor, Dtype, Members, Op};
use offrac_node::NodeHandle;
use offrac_proto::{
    buffer_param, collective_hop_param, BufferOp, FunctionId, FN_BUFFER, FN_COLLECTIVE,
};
use std::time::{Duration, Instant};

const N: usize = 3;
const SCATTER_DESC: u32 = 0xC011_0001;
const REDUCE_DESC: u32 = 0xC011_0002;
const A_BUF: u32 = 1;
const GEMV: u8 = FunctionId::Gemv as u8;

fn descriptor(op: Op, count: usize, timeout_ms: u32) -> Vec<u8> {
    Descriptor {
        tag: (op as u64) << 40, // apart for each descriptor: the hops add their call's number
        timeout_ms,
        ..Descriptor::call(op, Dtype::F32, count as u32, Members::of(&[0, 1, 2]))
    }
    .encode()
    .to_vec()
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn chain(seq: u64, k: usize) -> [Hop; 4] {
    [
        Hop::local(
            FN_COLLECTIVE,
            collective_hop_param(SCATTER_DESC, seq as u32),
        ),
        Hop::local(FN_BUFFER, buffer_param(BufferOp::Get, A_BUF)),
        Hop::local(GEMV, k as u64),
        Hop::local(FN_COLLECTIVE, collective_hop_param(REDUCE_DESC, seq as u32)),
    ]
}

/// Every rank's chain `seq` at once, the root's carrying `x`; each rank's answer.
fn call_all(
    clients: &mut [Client],
    seq: u64,
    k: usize,
    x: &[f32],
) -> Vec<Result<Reply, ClientError>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = clients
            .iter_mut()
            .enumerate()
            .map(|(r, c)| {
                let payload = if r == 0 { f32s(x) } else { Vec::new() };
                s.spawn(move || c.call_chain(&chain(seq, k), &payload))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank"))
            .collect()
    })
}

/// Each rank's client, its node holding its column block of the m × 3k
/// matrix `a` and the two descriptors (the scatter's naming `k + 1`
/// elements at rank `bad`).
fn ranks(nodes: &[NodeHandle], a: &[f32], m: usize, k: usize, bad: Option<usize>) -> Vec<Client> {
    let cols = N * k;
    nodes
        .iter()
        .enumerate()
        .map(|(r, node)| {
            let mut c = Client::connect(&node.addr.to_string()).expect("connect");
            c.set_retry_policy(RetryPolicy::NONE);
            let block: Vec<f32> = (0..m)
                .flat_map(|i| a[i * cols + r * k..i * cols + (r + 1) * k].to_vec())
                .collect();
            let put = |name| [Hop::local(FN_BUFFER, buffer_param(BufferOp::Put, name))];
            let scatter_count = if bad == Some(r) { k + 1 } else { k };
            c.call_chain(&put(A_BUF), &f32s(&block)).expect("put A");
            c.call_chain(
                &put(SCATTER_DESC),
                &descriptor(Op::Scatter, scatter_count, 5000),
            )
            .expect("put scatter");
            c.call_chain(&put(REDUCE_DESC), &descriptor(Op::Reduce, m, 5000))
                .expect("put reduce");
            c
        })
        .collect()
}

#[test]
fn three_ranks_multiply_with_one_request_each_and_a_refused_scatter_hop_answers_every_chain_once() {
    let nodes = common::linked_nodes(N, "[metrics]\nlisten = \"\"");
    let (m, k) = (64usize, 32usize);
    let cols = N * k;
    let a: Vec<f32> = (0..m * cols).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    let mut clients = ranks(&nodes, &a, m, k, None);
    for seq in 0..5u64 {
        let x: Vec<f32> = (0..cols)
            .map(|j| ((j as u64 * 13 + seq) % 7) as f32 - 3.0)
            .collect();
        let answers = call_all(&mut clients, seq, k, &x);
        let want: Vec<f32> = (0..m)
            .map(|i| (0..cols).map(|j| a[i * cols + j] * x[j]).sum())
            .collect();
        for (r, reply) in answers.into_iter().enumerate() {
            let reply = reply.unwrap_or_else(|e| panic!("rank {r} call {seq}: {e}"));
            assert_eq!(reply.header.hop_index, 3);
            if r == 0 {
                assert_eq!(reply.payload, f32s(&want), "call {seq}");
            } else {
                assert!(reply.payload.is_empty());
            }
        }
    }

    // The root's scatter descriptor names one element more per rank: its
    // hop is refused at once (its input is 3k elements, not 3(k + 1)) and
    // the other ranks' scatter hops are aborted. (A mismatch at the reduce
    // is not as clean a test: a non-root's part of a reduce is to send, so
    // it may succeed before the abort comes, as in MPI.)
    let mut clients = ranks(&nodes, &a, m, k, Some(0));
    let x: Vec<f32> = vec![1.0; cols];
    let t = Instant::now();
    let answers = call_all(&mut clients, 100, k, &x);
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "answered at the deadline, not at once: {:?}",
        t.elapsed()
    );
    for (r, reply) in answers.into_iter().enumerate() {
        let e = reply.expect_err("the scatter hop fails");
        assert_eq!(e.status(), Some(Status::BadInput), "rank {r}: {e}");
        assert!(
            matches!(e, offrac_client::ClientError::Status { hop: 0, .. }),
            "rank {r}: {e}"
        );
    }
    // Each client got exactly its one answer: the connection is usable and
    // nothing else is waiting on it.
    for c in &mut clients {
        c.call_chain(&[Hop::local(FunctionId::Echo as u8, 0)], b"hi")
            .expect("echo after the failed chain");
    }
}
