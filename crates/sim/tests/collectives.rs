//! Collectives between the node's own drivers under virtual time
//! (`docs/collectives.md`): where a node's writes sit on the critical path
//! of a small collective. Each node's I/O thread takes `write_ns` per write
//! (a send on cores the hosts share), so the order of a turn's writes is
//! when each reaches its peer.

mod common;

use common::{bcast_descriptor, collective_request, for_seeds};
use offrac_collective::Algorithm;
use offrac_proto::Status;
use offrac_sim::world::World;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const LINK_NS: u64 = 5 * US;
const WRITE_NS: u64 = 50 * US;

/// `n` nodes, every write taking `WRITE_NS` and every link `LINK_NS`.
fn cluster(seed: u64, n: usize) -> World {
    common::cluster(seed, n, |_, c| {
        c.link_ns = LINK_NS;
        c.write_ns = WRITE_NS;
    })
}

/// `cluster` once its links are up, with a client connected to each node.
fn linked(seed: u64, n: usize) -> (World, Vec<usize>) {
    let mut w = cluster(seed, n);
    w.run_for(5 * MS); // the links come up
    let clients: Vec<usize> = (0..n).map(|i| w.connect_to(i)).collect();
    w.run_for(MS);
    (w, clients)
}

/// A client's call: broadcast of `count` i32 from rank 0 of `n` ranks
/// (`data`: the root's, empty elsewhere).
fn bcast(id: u64, tag: u64, n: usize, count: usize, data: &[i32]) -> Vec<u8> {
    let d = bcast_descriptor(tag, n, count, Algorithm::OneToAll, 1000);
    collective_request(id, &d, 0, 0, data)
}

#[test]
fn a_small_broadcast_reaches_the_waiting_ranks_within_the_roots_writes_and_three_link_latencies() {
    for_seeds(|seed| {
        for n in [2usize, 4] {
            let (mut w, clients) = linked(seed, n);
            let data: Vec<i32> = (0..256).collect();
            // The other ranks wait first; the root calls later.
            for &c in &clients[1..] {
                w.send(c, &bcast(1, 7, n, data.len(), &[]));
            }
            w.run_for(MS);
            let called = w.now();
            w.send(clients[0], &bcast(1, 7, n, data.len(), &data));
            w.run_for(20 * MS);
            let want: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
            for (r, &c) in clients.iter().enumerate() {
                let a = w.answers_to(c, 1);
                assert_eq!(a.len(), 1, "rank {r}: {a:?}");
                assert_eq!(a[0].header.status, Status::Ok, "rank {r}");
                if r > 0 {
                    assert_eq!(a[0].payload, want, "rank {r}");
                }
            }
            // The root's node writes the data to the n-1 peers (one write
            // each), then answers its client. A waiting rank's node writes its
            // client's answer as soon as the data is in (the data message is
            // not acknowledged: ack_window). So the last rank hears within the
            // root's n-1 writes and one of its own, the link latencies, and
            // the segments' jitter.
            let bound = called + LINK_NS + (n as u64 - 1) * WRITE_NS + LINK_NS + WRITE_NS + LINK_NS;
            for (r, &c) in clients.iter().enumerate().skip(1) {
                let at = w.answers_to(c, 1)[0].at;
                assert!(
                    at <= bound + 20 * US,
                    "n={n}: rank {r} answered {} µs after the root's call (bound {} µs)",
                    (at - called) / US,
                    (bound - called) / US
                );
            }
        }
    });
}

#[test]
fn a_calls_answer_times_its_reassembly_apart_from_the_collective() {
    for_seeds(|seed| {
        let mut w = cluster(seed, 2);
        w.run_for(5 * MS); // the link comes up
        let clients: Vec<usize> = (0..2).map(|i| w.connect_to(i)).collect();
        w.run_for(MS);
        let data: Vec<i32> = (0..1024).collect();
        w.send(clients[1], &bcast(1, 9, 2, data.len(), &[]));
        w.run_for(MS);
        // The root's call arrives in two pieces, 3 ms apart.
        let call = bcast(1, 9, 2, data.len(), &data);
        let (first, rest) = call.split_at(call.len() / 2);
        w.send(clients[0], first);
        w.run_for(3 * MS);
        w.send(clients[0], rest);
        w.run_for(20 * MS);
        let a = w.answers_to(clients[0], 1);
        assert_eq!(a.len(), 1, "{a:?}");
        let h = &a[0].header;
        assert_eq!(h.status, Status::Ok);
        assert!(
            (3 * MS..4 * MS).contains(&h.reassembly_ns),
            "the root's call took 3 ms to arrive; reassembly_ns {}",
            h.reassembly_ns
        );
        assert!(
            h.exec_ns < MS,
            "the broadcast itself is quick here; exec_ns {} counts the reassembly",
            h.exec_ns
        );
    });
}

/// `rounds` 2-rank broadcasts one after another (rank 1 waiting, then the
/// root's call); each must succeed. Returns the writes of rank 1's node and
/// the answers rank 0's node got to its collective messages.
fn broadcasts(seed: u64, ack_window: usize, rounds: u64) -> (u64, u64) {
    let mut w = common::cluster(seed, 2, |_, c| {
        c.link_ns = LINK_NS;
        c.write_ns = WRITE_NS;
        c.driver.collectives.ack_window = ack_window;
    });
    w.run_for(5 * MS); // the link comes up
    let clients: Vec<usize> = (0..2).map(|i| w.connect_to(i)).collect();
    w.run_for(MS);
    let data: Vec<i32> = (0..256).collect();
    let before = w.node(1).writes();
    for r in 0..rounds {
        let id = r + 1;
        w.send(clients[1], &bcast(id, 100 + r, 2, data.len(), &[]));
        w.run_for(MS);
        w.send(clients[0], &bcast(id, 100 + r, 2, data.len(), &data));
        w.run_for(5 * MS);
        for (rank, &c) in clients.iter().enumerate() {
            let a = w.answers_to(c, id);
            assert_eq!(a.len(), 1, "round {r}, rank {rank}: {a:?}");
            assert_eq!(a[0].header.status, Status::Ok, "round {r}, rank {rank}");
        }
    }
    let writes = w.node(1).writes() - before;
    (writes, w.node(0).driver().link_stats().collective_answers)
}

#[test]
fn a_broadcasts_data_is_not_answered_but_every_ack_window_th_message() {
    const ROUNDS: u64 = 32;
    for_seeds(|seed| {
        // The default: a peer answers one message in 16 (the sender then
        // forgets the records of the ones before), so the waiting rank's
        // node writes its client's answer and, every 16th broadcast, an
        // acknowledgement; before, it acknowledged every message.
        let (writes, acks) = broadcasts(seed, 16, ROUNDS);
        assert_eq!(acks, ROUNDS / 16, "answers to the root's node");
        assert_eq!(
            writes,
            ROUNDS + ROUNDS / 16,
            "rank 1's node: one answer per broadcast plus one acknowledgement per 16"
        );
        // A window of 1 is the old rule: every message answered.
        let (writes, acks) = broadcasts(seed, 1, ROUNDS);
        assert_eq!(acks, ROUNDS);
        assert_eq!(writes, 2 * ROUNDS);
    });
}

/// Rank 1's node refuses the root's data (larger than its `max_payload`):
/// its refusal is an answer though nobody asked for one, and the root,
/// whose broadcast already succeeded, tells rank 1 with an `ABORT`, so rank
/// 1 fails at once instead of at its deadline (1 s).
#[test]
fn a_refused_data_message_fails_the_waiting_rank_at_once() {
    for_seeds(|seed| {
        let mut w = common::cluster(seed, 2, |i, c| {
            c.link_ns = LINK_NS;
            if i == 1 {
                c.engine.max_payload = 512;
            }
        });
        w.run_for(5 * MS); // the link comes up
        let clients: Vec<usize> = (0..2).map(|i| w.connect_to(i)).collect();
        w.run_for(MS);
        let data: Vec<i32> = (0..256).collect(); // 1 KiB: beyond rank 1's 512 bytes
        w.send(clients[1], &bcast(1, 7, 2, data.len(), &[]));
        w.run_for(MS);
        let called = w.now();
        w.send(clients[0], &bcast(1, 7, 2, data.len(), &data));
        w.run_for(20 * MS);
        let root = w.answers_to(clients[0], 1);
        assert_eq!(root.len(), 1, "{root:?}");
        assert_eq!(
            root[0].header.status,
            Status::Ok,
            "the root's part was done"
        );
        let a = w.answers_to(clients[1], 1);
        assert_eq!(a.len(), 1, "rank 1 is answered within 20 ms: {a:?}");
        assert_eq!(a[0].header.status, Status::Unreachable);
        let why = String::from_utf8_lossy(&a[0].payload);
        assert!(why.contains("could not deliver"), "{why}");
        assert!(a[0].at - called < 10 * MS, "{} µs", (a[0].at - called) / US);
    });
}

/// A broadcast's root sends slices of its work buffer, not copies
/// (`docs/collectives.md`, "Large messages"), and its receivers read the
/// segments straight into place ("Posted receives"): through the nodes'
/// drivers, a 256 KiB one-to-all broadcast (rendezvous, one segment per
/// peer) from the root's call. The root copies its input into its work
/// buffer once and shares every byte it sends; each other rank takes what
/// it receives in once — the bytes that came in the same read as the
/// segment's header copied, the rest read by the driver straight into its
/// place (at least three quarters of it, in the simulator's 64 KiB reads).
/// The old send path copied the input once more per peer at the root; the
/// old receive path copied every received byte.
#[test]
fn a_broadcasts_root_shares_what_it_sends_and_its_receivers_read_it_into_place() {
    for_seeds(|seed| {
        for n in [2usize, 4] {
            let (mut w, clients) = linked(seed, n);
            let data: Vec<i32> = (0..65_536).collect();
            let len = 4 * data.len() as u64;
            for &c in &clients[1..] {
                w.send(c, &bcast(1, 8, n, data.len(), &[]));
            }
            w.send(clients[0], &bcast(1, 8, n, data.len(), &data));
            w.run_for(200 * MS);
            let want_bytes: Vec<u8> = data.iter().flat_map(|x| x.to_le_bytes()).collect();
            for (r, &c) in clients.iter().enumerate() {
                let a = w.answers_to(c, 1);
                assert_eq!(a.len(), 1, "rank {r}: {a:?}");
                assert_eq!(a[0].header.status, Status::Ok, "rank {r}");
                if r > 0 {
                    assert!(a[0].payload == want_bytes, "seed {seed} n={n} rank {r}");
                }
                let st = w.node(r).driver().collective_stats().1;
                let want = if r == 0 {
                    (len, (n as u64 - 1) * len)
                } else {
                    (len, 0)
                };
                assert_eq!(
                    (st.copied_bytes + st.posted_bytes, st.shared_bytes),
                    want,
                    "seed {seed} n={n} rank {r}: (copied + posted, shared)"
                );
                let want_posted = if r == 0 { 0 } else { 3 * len / 4 };
                assert!(
                    st.posted_bytes >= want_posted,
                    "seed {seed} n={n} rank {r}: {} bytes posted",
                    st.posted_bytes
                );
            }
        }
    });
}
