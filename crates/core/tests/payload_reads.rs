//! A shell may read a request's payload straight into the engine's
//! reassembly buffer (`Engine::payload_room`, `Engine::handle_payload_read`)
//! instead of handing it a slice to copy (`Engine::handle_bytes`): the
//! requests come out the same, whatever the mix of the two and the read
//! sizes, and the engine counts exactly the payload bytes it copied.

use offrac_core::{Action, Engine, EngineConfig, Instant};
use offrac_proto::{RequestHeader, FN_COLLECTIVE, HEADER_LEN};
use std::ops::Range;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn engine() -> Engine {
    Engine::new(EngineConfig {
        max_payload: 1 << 21,
        ..EngineConfig::default()
    })
    .expect("valid configuration")
}

/// Requests for function 251 (handed to the driver as they complete, so no
/// slot is involved): the stream, each payload, and where the payloads sit
/// in the stream.
fn stream(payloads: &[Vec<u8>]) -> (Vec<u8>, Vec<Range<usize>>) {
    let mut bytes = Vec::new();
    let mut at = Vec::new();
    for (i, p) in payloads.iter().enumerate() {
        let h = RequestHeader::single(i as u64 + 1, FN_COLLECTIVE, 0, p.len() as u32);
        bytes.extend_from_slice(&h.encode());
        at.push(bytes.len()..bytes.len() + p.len());
        bytes.extend_from_slice(p);
    }
    (bytes, at)
}

fn overlap(a: &Range<usize>, b: &Range<usize>) -> usize {
    a.end.min(b.end).saturating_sub(a.start.max(b.start))
}

/// Feed `bytes` to `e` in reads of random sizes up to `max_read`; a read
/// goes straight into the payload when the engine offers one and
/// `direct(rng)` says so. Returns the payload bytes the shell handed over
/// as slices (the engine copies those).
fn feed(
    e: &mut Engine,
    rng: &mut Rng,
    bytes: &[u8],
    payloads: &[Range<usize>],
    max_read: usize,
    direct: impl Fn(&mut Rng) -> bool,
) -> u64 {
    let now = Instant::default();
    let c = e.open(now);
    let mut pos = 0;
    let mut sliced = 0u64;
    while pos < bytes.len() {
        let read = 1 + rng.below(max_read);
        let use_direct = direct(rng);
        if let (true, Some((payload, need))) = (use_direct, e.payload_room(c)) {
            let n = read.min(need).min(bytes.len() - pos);
            payload.extend_from_slice(&bytes[pos..pos + n]);
            e.handle_payload_read(now, c, n);
            pos += n;
        } else {
            let n = read.min(bytes.len() - pos);
            sliced += payloads
                .iter()
                .map(|p| overlap(p, &(pos..pos + n)))
                .sum::<usize>() as u64;
            e.handle_bytes(now, c, &bytes[pos..pos + n]);
            pos += n;
        }
    }
    sliced
}

fn jobs(e: &mut Engine) -> Vec<(u64, Vec<u8>)> {
    std::iter::from_fn(|| e.poll_action())
        .filter_map(|a| match a {
            Action::Control { job } => Some((job.header.request_id, job.payload.into_flat())),
            _ => None,
        })
        .collect()
}

#[test]
fn requests_read_straight_into_their_payload_come_out_whole_and_uncopied() {
    for seed in 0..64u64 {
        let mut rng = Rng(seed);
        let payloads: Vec<Vec<u8>> = (0..1 + rng.below(6))
            .map(|_| {
                let len = [0, 1, 63, 64, 65, 4096][rng.below(6)] + rng.below(20_000);
                (0..len).map(|_| rng.next() as u8).collect()
            })
            .collect();
        let total: usize = payloads.iter().map(Vec::len).sum();
        let (bytes, at) = stream(&payloads);
        let mut e = engine();
        let max_read = [1, 64, 100, 4096, 65536][rng.below(5)];
        let share = rng.below(3); // never, sometimes, always straight in
        let sliced = feed(&mut e, &mut rng, &bytes, &at, max_read, |r| match share {
            0 => false,
            1 => r.below(2) == 0,
            _ => true,
        });
        let want: Vec<(u64, Vec<u8>)> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| (i as u64 + 1, p.clone()))
            .collect();
        // Small requests may overtake large ones (the small-request queue).
        let mut got = jobs(&mut e);
        got.sort_by_key(|j| j.0);
        assert!(got == want, "seed {seed}: requests differ");
        let st = e.stats();
        assert_eq!(st.payload_bytes_copied, sliced, "seed {seed}");
        assert_eq!(
            st.payload_bytes_copied + st.payload_bytes_direct,
            total as u64,
            "seed {seed}"
        );
    }
}

#[test]
fn a_large_payload_read_straight_in_is_copied_only_as_far_as_its_headers_read() {
    // 1 MiB in 64 KiB reads, as the node's shell reads: before, the engine
    // copied every payload byte; now only those that came in the header's read.
    let payload: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    let (bytes, _) = stream(std::slice::from_ref(&payload));
    for (direct, copied) in [(false, 1 << 20), (true, 65536 - HEADER_LEN as u64)] {
        let mut e = engine();
        let now = Instant::default();
        let c = e.open(now);
        let mut pos = 0;
        while pos < bytes.len() {
            match e.payload_room(c).filter(|_| direct) {
                Some((p, need)) => {
                    let n = need.min(65536);
                    p.extend_from_slice(&bytes[pos..pos + n]);
                    e.handle_payload_read(now, c, n);
                    pos += n;
                }
                None => {
                    let n = (bytes.len() - pos).min(65536);
                    e.handle_bytes(now, c, &bytes[pos..pos + n]);
                    pos += n;
                }
            }
        }
        assert!(jobs(&mut e) == [(1, payload.clone())], "direct {direct}");
        assert_eq!(e.stats().payload_bytes_copied, copied, "direct {direct}");
        assert_eq!(
            e.stats().payload_bytes_direct,
            (1 << 20) - copied,
            "direct {direct}"
        );
    }
}

/// A driver may take the rest of a payload into a place of its own (a
/// collective's posted receive, `Engine::handle_diverted_read`): the
/// request completes with only the bytes that came before in its payload
/// and the count of the others (`Job::diverted`), holds its reassembly room
/// until then and no longer, and the requests after it on the connection
/// come out whole. A diverted payload whose place went away is dropped
/// (`Engine::discard_payload`), and so is one whose bytes a driver hands
/// over as a slice after diverting: never a hole in a payload.
#[test]
fn a_payload_read_into_the_drivers_place_completes_with_its_count() {
    let p1: Vec<u8> = (0..10_000).map(|i| (i % 251) as u8).collect();
    let p2: Vec<u8> = (0..300).map(|i| (i % 7) as u8).collect();
    let (bytes, at) = stream(&[p1.clone(), p2.clone(), p1.clone(), p1.clone(), p2.clone()]);
    let mut e = engine();
    let now = Instant::default();
    let c = e.open(now);
    // Request 1: its header and 1000 bytes, then 9000 bytes elsewhere.
    e.handle_bytes(now, c, &bytes[..at[0].start + 1000]);
    let (h, head, diverted) = e.payload_in(c).expect("in a payload");
    assert_eq!((h.request_id, head, diverted), (1, &p1[..1000], 0));
    e.handle_diverted_read(now, c, 4000);
    assert!(
        e.payload_room(c).is_none(),
        "no payload room after a diversion"
    );
    assert_eq!(e.payload_in(c).unwrap().2, 4000);
    e.handle_diverted_read(now, c, 5000);
    assert!(e.payload_in(c).is_none(), "complete");
    let done: Vec<_> = std::iter::from_fn(|| e.poll_action())
        .filter_map(|a| match a {
            Action::Control { job } => Some(job),
            _ => None,
        })
        .collect();
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].diverted, done[0].cost()), (9000, 10_000));
    assert!(done[0].payload.clone().into_flat() == p1[..1000]);
    assert_eq!(e.usage(None), Default::default(), "its room is free");
    // Request 2 after it: whole.
    e.handle_bytes(now, c, &bytes[at[0].end..at[1].end]);
    assert!(jobs(&mut e) == [(2, p2.clone())]);
    // Request 3: diverted, then its place goes: dropped, the rest skipped.
    e.handle_bytes(now, c, &bytes[at[1].end..at[2].start + 10]);
    e.handle_diverted_read(now, c, 100);
    e.discard_payload(now, c);
    e.handle_bytes(now, c, &bytes[at[2].start + 110..at[2].end]);
    assert!(jobs(&mut e).is_empty());
    // Request 4: diverted, then handed over as a slice (a driver's
    // mistake): dropped, not joined with a hole; request 5 whole.
    e.handle_bytes(now, c, &bytes[at[2].end..at[3].start + 10]);
    e.handle_diverted_read(now, c, 100);
    e.handle_bytes(now, c, &bytes[at[3].start + 110..]);
    assert!(jobs(&mut e) == [(5, p2)]);
    assert_eq!(e.usage(None), Default::default());
    let st = e.stats();
    assert_eq!((st.payload_bytes_diverted, st.collected), (9200, 2));
}
