//! Collective hops of chains (`docs/protocol.md`, "Collective hops") on the
//! node's own drivers under virtual time: the distributed gemv of ACCL+ §6
//! as one request per rank — `[scatter, BUFFER GET A, gemv, reduce]` — with
//! the right numbers at the root, exactly one answer per request, and the
//! failures (a root whose scatter is refused, a rank whose node dies mid-hop) answered by
//! every other rank's chain well within the deadline.

mod common;

use common::{for_seeds, MS};
use offrac_collective::{Descriptor, Dtype, Members, Op};
use offrac_proto::{
    buffer_param, collective_hop_param, BufferOp, FunctionId, Hop, RequestHeader, Status,
    FN_BUFFER, FN_COLLECTIVE,
};
use offrac_sim::world::World;

const SCATTER_DESC: u32 = 0xC011_0001;
const REDUCE_DESC: u32 = 0xC011_0002;
const A_BUF: u32 = 1;
const GEMV: u8 = FunctionId::Gemv as u8;
const TIMEOUT_MS: u32 = 400;

fn descriptor(op: Op, n: usize, count: usize) -> Vec<u8> {
    let devices: Vec<u8> = (0..n as u8).collect();
    Descriptor {
        tag: (op as u64) << 40, // apart for each descriptor: the hops add their call's number
        timeout_ms: TIMEOUT_MS,
        ..Descriptor::call(op, Dtype::F32, count as u32, Members::of(&devices))
    }
    .encode()
    .to_vec()
}

fn request(id: u64, hops: &[Hop], payload: &[u8]) -> Vec<u8> {
    let h = RequestHeader::chain(id, hops, payload.len() as u32).expect("a valid chain");
    let mut b = h.encode_wire()[..h.wire_len()].to_vec();
    b.extend_from_slice(payload);
    b
}

fn put(id: u64, name: u32, data: &[u8]) -> Vec<u8> {
    let hop = Hop::local(FN_BUFFER, buffer_param(BufferOp::Put, name));
    request(id, &[hop], data)
}

/// One rank's whole multiply: scatter x (the root's payload), prepend the
/// rank's block of A, gemv, reduce (sum) to the root; call `seq` of the
/// same two descriptors (their tags advance by `seq`).
fn gemv_chain(id: u64, seq: u64, k: usize, x: &[u8]) -> Vec<u8> {
    let hops = [
        Hop::local(
            FN_COLLECTIVE,
            collective_hop_param(SCATTER_DESC, seq as u32),
        ),
        Hop::local(FN_BUFFER, buffer_param(BufferOp::Get, A_BUF)),
        Hop::local(GEMV, k as u64),
        Hop::local(FN_COLLECTIVE, collective_hop_param(REDUCE_DESC, seq as u32)),
    ];
    request(id, &hops, x)
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Small integers as floats: every sum below is exact in float32.
fn small(seed: u64, i: usize) -> f32 {
    ((seed.wrapping_mul(31).wrapping_add(i as u64 * 7919) % 9) as i32 - 4) as f32
}

struct Setup {
    w: World,
    clients: Vec<usize>,
    a: Vec<f32>,
    m: usize,
    k: usize,
}

/// `n` nodes; each rank's node keeps its column block of an m × (n·k)
/// matrix as buffer 1 and the two descriptors (rank `bad`'s scatter
/// descriptor names `k + 1` elements per rank, if given).
fn setup(seed: u64, n: usize, bad: Option<usize>) -> Setup {
    let mut w = common::cluster(seed, n, |_, _| {});
    w.run_for(5 * MS); // the links come up
    let clients: Vec<usize> = (0..n).map(|i| w.connect_to(i)).collect();
    w.run_for(MS);
    let (m, k) = (5usize, 3usize);
    let cols = n * k;
    let a: Vec<f32> = (0..m * cols).map(|i| small(seed, i)).collect();
    for (r, &c) in clients.iter().enumerate() {
        let block: Vec<f32> = (0..m)
            .flat_map(|i| a[i * cols + r * k..i * cols + (r + 1) * k].to_vec())
            .collect();
        let scatter_count = if bad == Some(r) { k + 1 } else { k };
        w.send(c, &put(1, A_BUF, &f32s(&block)));
        w.send(
            c,
            &put(2, SCATTER_DESC, &descriptor(Op::Scatter, n, scatter_count)),
        );
        w.send(c, &put(3, REDUCE_DESC, &descriptor(Op::Reduce, n, m)));
    }
    w.run_for(5 * MS);
    for &c in &clients {
        for id in 1..=3 {
            let a = w.answers_to(c, id);
            assert_eq!(a.len(), 1, "{a:?}");
            assert_eq!(a[0].header.status, Status::Ok);
        }
    }
    Setup {
        w,
        clients,
        a,
        m,
        k,
    }
}

#[test]
fn a_gemv_chain_with_a_scatter_and_a_reduce_hop_is_one_request_per_rank() {
    for_seeds(|seed| {
        for n in [2usize, 4] {
            let Setup {
                mut w,
                clients,
                a,
                m,
                k,
            } = setup(seed, n, None);
            let cols = n * k;
            for seq in 0..3u64 {
                let id = 10 + seq;
                let x: Vec<f32> = (0..cols).map(|i| small(seed + 100 + seq, i)).collect();
                // The ranks call in a seed-dependent order.
                for j in 0..n {
                    let r = (j + seed as usize + seq as usize) % n;
                    let payload = if r == 0 { f32s(&x) } else { Vec::new() };
                    w.send(clients[r], &gemv_chain(id, seq, k, &payload));
                    w.run_for(seed % 3 * 100_000);
                }
                w.run_for(50 * MS);
                let want: Vec<f32> = (0..m)
                    .map(|i| (0..cols).map(|j| a[i * cols + j] * x[j]).sum())
                    .collect();
                for (r, &c) in clients.iter().enumerate() {
                    let got = w.answers_to(c, id);
                    assert_eq!(got.len(), 1, "n={n} rank {r} call {seq}: {got:?}");
                    let h = &got[0].header;
                    assert_eq!(
                        h.status,
                        Status::Ok,
                        "n={n} rank {r}: {}",
                        String::from_utf8_lossy(&got[0].payload)
                    );
                    assert_eq!(h.hop_index, 3);
                    if r == 0 {
                        assert_eq!(got[0].payload, f32s(&want), "n={n} call {seq}");
                    } else {
                        assert!(got[0].payload.is_empty(), "a non-root's reduce is empty");
                    }
                }
            }
            // Nothing left waiting on any node.
            for i in 0..n {
                assert_eq!(w.node(i).driver().collective_stats().0, 0);
            }
        }
    });
}

#[test]
fn a_refused_scatter_hop_at_the_root_fails_every_ranks_chain_at_once_with_one_answer() {
    for_seeds(|seed| {
        for n in [2usize, 4] {
            let Setup {
                mut w, clients, k, ..
            } = setup(seed, n, Some(0));
            let x: Vec<f32> = (0..n * k).map(|i| i as f32).collect();
            let start = w.now();
            for (r, &c) in clients.iter().enumerate() {
                let payload = if r == 0 { f32s(&x) } else { Vec::new() };
                w.send(c, &gemv_chain(10, 0, k, &payload));
            }
            w.run_for(3 * TIMEOUT_MS as u64 * MS);
            for (r, &c) in clients.iter().enumerate() {
                let got = w.answers_to(c, 10);
                assert_eq!(got.len(), 1, "n={n} rank {r}: {got:?}");
                let h = &got[0].header;
                assert_eq!(h.status, Status::BadInput, "n={n} rank {r}");
                assert_eq!(h.hop_index, 0, "n={n} rank {r}: the scatter hop failed");
                assert!(
                    got[0].at - start < 20 * MS,
                    "n={n} rank {r} answered after {} ms, not at once",
                    (got[0].at - start) / MS
                );
            }
        }
    });
}

#[test]
fn a_rank_whose_node_dies_mid_chain_leaves_every_other_chain_answered_within_the_deadline() {
    for_seeds(|seed| {
        for n in [2usize, 4] {
            let Setup {
                mut w, clients, k, ..
            } = setup(seed, n, None);
            let x: Vec<f32> = (0..n * k).map(|i| i as f32).collect();
            let start = w.now();
            // Every rank but the last calls; the last rank's node dies.
            for (r, &c) in clients.iter().enumerate().take(n - 1) {
                let payload = if r == 0 { f32s(&x) } else { Vec::new() };
                w.send(c, &gemv_chain(10, 0, k, &payload));
            }
            w.run_for(MS);
            w.kill(n - 1);
            w.run_for(3 * TIMEOUT_MS as u64 * MS);
            for (r, &c) in clients.iter().enumerate().take(n - 1) {
                let got = w.answers_to(c, 10);
                assert_eq!(got.len(), 1, "n={n} rank {r}: {got:?}");
                let h = &got[0].header;
                // The root waits for the dead rank's part of the reduce (or
                // of the scatter, if the rank died before it): it fails. A
                // live non-root's scatter came from the root and its part of
                // the reduce is to send, so it may well succeed (as in MPI).
                if r == 0 {
                    assert_ne!(h.status, Status::Ok, "n={n}: the root");
                } else if h.status == Status::Ok {
                    assert_eq!(h.hop_index, 3);
                    assert!(got[0].payload.is_empty());
                }
                // The root's scatter may have finished (it only sends): its
                // chain then fails at the reduce.
                assert!(
                    h.hop_index == 0 || h.hop_index == 3,
                    "n={n} rank {r} failed at hop {}",
                    h.hop_index
                );
                assert!(
                    got[0].at - start <= (TIMEOUT_MS as u64 + 5) * MS,
                    "n={n} rank {r} answered after {} ms",
                    (got[0].at - start) / MS
                );
            }
        }
    });
}

/// Two clients of one tenant (anonymous here) claim the same descriptor name
/// with a buffer `CREATE` at seed-dependent moments: exactly one keeps its
/// descriptor, the other is told `BUFFER_EXISTS` (detail = the name) and the
/// winner's bytes stay — the name is never silently replaced, as it was with
/// `PUT` when two communicators on one node took the same name.
#[test]
fn two_clients_creating_one_name_get_one_ok_and_one_buffer_exists() {
    for_seeds(|seed| {
        let mut w = common::cluster(seed, 1, |_, _| {});
        w.run_for(MS);
        let clients = [w.connect_to(0), w.connect_to(0)];
        w.run_for(MS);
        let descs = [descriptor(Op::Scatter, 2, 3), descriptor(Op::Reduce, 2, 5)];
        let first = seed as usize % 2;
        for j in 0..2 {
            let c = (first + j) % 2;
            let hop = Hop::local(FN_BUFFER, buffer_param(BufferOp::Create, SCATTER_DESC));
            w.send(clients[c], &request(1, &[hop], &descs[c]));
            w.run_for(seed % 4 * 50_000);
        }
        w.run_for(5 * MS);
        let statuses: Vec<_> = clients
            .iter()
            .map(|&c| {
                let a = w.answers_to(c, 1);
                assert_eq!(a.len(), 1, "one answer per request: {a:?}");
                (a[0].header.status, a[0].header.detail)
            })
            .collect();
        let winner = statuses
            .iter()
            .position(|s| s.0 == Status::Ok)
            .expect("one create succeeds");
        assert_eq!(
            statuses[1 - winner],
            (Status::BufferExists, u64::from(SCATTER_DESC)),
            "seed {seed}"
        );
        let get = Hop::local(FN_BUFFER, buffer_param(BufferOp::Get, SCATTER_DESC));
        w.send(clients[1 - winner], &request(2, &[get], b""));
        w.run_for(5 * MS);
        let a = w.answers_to(clients[1 - winner], 2);
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].payload, descs[winner], "the winner's descriptor stays");
    });
}
