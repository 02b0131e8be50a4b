//! A rank whose call is refused before its collective starts (wrong input
//! size, a named input that is not there) fails the other ranks at once
//! (`docs/collectives.md`, "Failures and deadlines"), under virtual time
//! with the node's own driver: they do not wait for it until their deadline.

mod common;

use common::{bcast_descriptor, collective_request, for_seeds};
use offrac_collective::Algorithm;
use offrac_proto::Status;
use offrac_sim::world::World;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
/// The calls' deadline: far beyond what a told rank takes to fail.
const DEADLINE_MS: u32 = 1000;

fn nodes(seed: u64, n: usize) -> World {
    common::cluster(seed, n, |_, c| {
        c.link_ns = 5 * US;
        c.write_ns = 20 * US;
    })
}

/// A client's call: broadcast of `count` i32 from rank 0 of `n` ranks with
/// `input` as this rank's data (the others wait for the root's); `from_buffer`: the input is named buffer 42
/// instead (descriptor byte 7 bit 0, the name in `param`).
fn bcast(tag: u64, n: usize, count: usize, input: &[i32], from_buffer: bool) -> Vec<u8> {
    let d = bcast_descriptor(tag, n, count, Algorithm::Auto, DEADLINE_MS);
    let (flags, param) = if from_buffer { (1, 42) } else { (0, 0) };
    collective_request(1, &d, flags, param, input)
}

/// How the refused rank (rank 0, the root) gets its call wrong.
#[derive(Clone, Copy, Debug)]
enum Wrong {
    /// One element short.
    Size,
    /// Its input is a named buffer the node does not hold.
    MissingBuffer,
}

/// Rank 0's wrong call at `root_at` (ms after the links are up), the
/// others' good calls at 1 ms: every rank is answered within a few ms of
/// the later of the two, not at the 1 s deadline.
fn refused_root_fails_the_others_at_once(seed: u64, n: usize, wrong: Wrong, root_at: u64) {
    let mut w = nodes(seed, n);
    w.run_for(5 * MS); // the links come up
    let clients: Vec<usize> = (0..n).map(|i| w.connect_to(i)).collect();
    w.run_for(MS);
    let count = 64;
    let good: Vec<i32> = (0..count as i32).collect();
    let start = w.now();
    let root_call = match wrong {
        Wrong::Size => bcast(5, n, count, &good[1..], false),
        Wrong::MissingBuffer => bcast(5, n, count, &[], true),
    };
    for t in 0..3 {
        if t == root_at {
            w.send(clients[0], &root_call);
        }
        if t == 1 {
            for &c in &clients[1..] {
                w.send(c, &bcast(5, n, count, &[], false));
            }
        }
        w.run_for(MS);
    }
    w.run_for(10 * MS);
    let want_root = match wrong {
        Wrong::Size => Status::BadInput,
        Wrong::MissingBuffer => Status::UnknownBuffer,
    };
    let root = w.answers_to(clients[0], 1);
    assert_eq!(root.len(), 1, "{wrong:?}, root: {root:?}");
    assert_eq!(root[0].header.status, want_root, "{wrong:?}");
    for (r, &c) in clients.iter().enumerate().skip(1) {
        let a = w.answers_to(c, 1);
        assert_eq!(
            a.len(),
            1,
            "n={n} {wrong:?} root at {root_at} ms: rank {r} not answered 13 ms after the calls (deadline {DEADLINE_MS} ms)"
        );
        assert_eq!(a[0].header.status, Status::BadInput, "rank {r}");
        let msg = String::from_utf8_lossy(&a[0].payload);
        assert!(
            msg.contains("rank 0 (device 0) failed the collective"),
            "rank {r}: {msg}"
        );
        assert!(a[0].at - start < 5 * MS, "rank {r} answered late");
    }
    // The tag ended everywhere: nothing is left running or held.
    for i in 0..n {
        let (running, _) = w.node(i).driver().collective_stats();
        assert_eq!(running, 0, "node {i}");
    }
}

#[test]
fn a_root_whose_call_is_refused_fails_the_waiting_ranks_at_once() {
    for_seeds(|seed| {
        for n in [2, 4] {
            for wrong in [Wrong::Size, Wrong::MissingBuffer] {
                // The others wait first; the root's refused call comes later.
                refused_root_fails_the_others_at_once(seed, n, wrong, 2);
            }
        }
    });
}

#[test]
fn a_rank_called_after_the_refusal_fails_at_once() {
    for_seeds(|seed| {
        for wrong in [Wrong::Size, Wrong::MissingBuffer] {
            // The root's refusal comes first: the others' nodes keep its
            // abort and fail their calls when they come.
            refused_root_fails_the_others_at_once(seed, 3, wrong, 0);
        }
    });
}

/// How the root's call is refused by its node's engine, before the driver
/// sees it.
#[derive(Clone, Copy, Debug)]
enum Engine {
    /// Beyond `max_payload` (its descriptor split over two segments).
    TooLarge,
    /// No reassembly buffer free: node 0's only one is held by another
    /// client's partial request.
    Busy,
    /// Only its first bytes come: not complete within the reassembly
    /// deadline.
    Stalled,
    /// Its caller closes the connection mid-call (no answer is owed).
    Closed,
}

/// Rank 0's call is refused by its node's engine (it never reaches the
/// driver) after the others have called: they fail within a few ms of the
/// refusal with its status, not at their 1 s deadline.
fn engine_refusal_fails_the_others_at_once(seed: u64, n: usize, how: Engine) {
    let mut w = common::cluster(seed, n, |i, c| {
        c.link_ns = 5 * US;
        c.write_ns = 20 * US;
        if i == 0 {
            match how {
                Engine::TooLarge => c.engine.max_payload = 4096,
                Engine::Busy => c.engine.buffers = 1,
                _ => {}
            }
            c.engine.reassembly_timeout = std::time::Duration::from_millis(50);
        }
    });
    w.run_for(5 * MS); // the links come up
    let clients: Vec<usize> = (0..n).map(|i| w.connect_to(i)).collect();
    w.run_for(MS);
    // 4 KiB + the descriptor: beyond node 0's max_payload for TooLarge; the
    // other cases send only its first 228 bytes.
    let count = 1024;
    let good: Vec<i32> = (0..count as i32).collect();
    for &c in &clients[1..] {
        w.send(c, &bcast(5, n, count, &[], false));
    }
    w.run_for(MS);
    if matches!(how, Engine::Busy) {
        // Another client's call (another tag) holds node 0's only buffer.
        let other = w.connect_to(0);
        w.run_for(MS);
        let blocker = bcast(6, n, count, &good, false);
        w.send(other, &blocker[..64 + 64 + 100]);
        w.run_for(MS);
    }
    let root_call = bcast(5, n, count, &good, false);
    let (first, rest) = match how {
        Engine::TooLarge | Engine::Busy => root_call.split_at(64 + 20),
        Engine::Stalled | Engine::Closed => root_call.split_at(64 + 64 + 100),
    };
    let start = w.now();
    w.send(clients[0], first);
    w.run_for(MS);
    match how {
        Engine::TooLarge | Engine::Busy => w.send(clients[0], rest),
        Engine::Stalled => {}
        Engine::Closed => w.close(clients[0]),
    }
    w.run_for(200 * MS);
    let (root_status, refused_at) = match how {
        Engine::TooLarge | Engine::Busy | Engine::Stalled => {
            let root = w.answers_to(clients[0], 1);
            assert_eq!(root.len(), 1, "{how:?}, root: {root:?}");
            let want = match how {
                Engine::TooLarge => Status::TooLarge,
                Engine::Busy => Status::Busy,
                _ => Status::Timeout,
            };
            assert_eq!(root[0].header.status, want, "{how:?}");
            (want, root[0].at)
        }
        Engine::Closed => (Status::Unreachable, start + MS),
    };
    for (r, &c) in clients.iter().enumerate().skip(1) {
        let a = w.answers_to(c, 1);
        assert_eq!(
            a.len(),
            1,
            "n={n} {how:?}: rank {r} not answered 200 ms after the root's call (deadline {DEADLINE_MS} ms)"
        );
        assert_eq!(a[0].header.status, root_status, "rank {r} {how:?}");
        let msg = String::from_utf8_lossy(&a[0].payload);
        assert!(
            msg.contains("rank 0 (device 0) failed the collective: its node refused the call"),
            "rank {r}: {msg}"
        );
        assert!(
            a[0].at < refused_at + 5 * MS,
            "rank {r} {how:?} answered {} ms after the refusal",
            (a[0].at - refused_at) / MS
        );
    }
    for i in 0..n {
        let (running, _) = w.node(i).driver().collective_stats();
        assert_eq!(running, 0, "node {i}");
    }
}

#[test]
fn a_root_refused_by_its_nodes_engine_fails_the_waiting_ranks_at_once() {
    for_seeds(|seed| {
        for n in [2, 3] {
            for how in [
                Engine::TooLarge,
                Engine::Busy,
                Engine::Stalled,
                Engine::Closed,
            ] {
                engine_refusal_fails_the_others_at_once(seed, n, how);
            }
        }
    });
}
