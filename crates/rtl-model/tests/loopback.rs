//! The Verilated request path against the software kernels: requests for
//! echo, top-k and MapId (the node's built-in dictionary) cut into beats and
//! interleaved over connections, straight into the model and through the
//! TCP driver on loopback; every answer's header and payload checked.
#![cfg(feature = "model")]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use offrac_accel::dlrm::state::{default_dictionary_key, DEFAULT_DICTIONARY_KEYS};
use offrac_proto::{FunctionId, RequestHeader, ResponseHeader, Status};
use offrac_rtl_model::{Model, OutBeat};

/// A read that waits longer has lost an answer: fail instead of hanging.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

struct Call {
    id: u64,
    function: u8,
    param: u64,
    payload: Vec<u8>,
}

/// A small deterministic generator (no test-only dependency).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 17
    }
}

fn calls(first_id: u64, n: usize, seed: u64) -> Vec<Call> {
    let mut r = Lcg(seed);
    (0..n)
        .map(|i| {
            let id = first_id + i as u64;
            match i % 3 {
                0 => {
                    let len = (r.next() % 900) as usize;
                    Call {
                        id,
                        function: 0,
                        param: 0,
                        payload: (0..len).map(|_| r.next() as u8).collect(),
                    }
                }
                1 => {
                    let n = 1 + (r.next() % 300) as usize;
                    let k = 1 + r.next() % 64;
                    let xs: Vec<u8> = (0..n)
                        .flat_map(|_| (r.next() as i32).to_le_bytes())
                        .collect();
                    Call {
                        id,
                        function: 1,
                        param: k,
                        payload: xs,
                    }
                }
                _ => {
                    let n = 1 + (r.next() % 400) as usize;
                    let ids: Vec<u8> = (0..n)
                        .flat_map(|_| {
                            let id = if r.next().is_multiple_of(4) {
                                r.next() as u32
                            } else {
                                default_dictionary_key(r.next() % DEFAULT_DICTIONARY_KEYS as u64)
                            };
                            id.to_le_bytes()
                        })
                        .collect();
                    Call {
                        id,
                        function: 6,
                        param: 0,
                        payload: ids,
                    }
                }
            }
        })
        .collect()
}

fn wire(c: &Call) -> Vec<u8> {
    let h = RequestHeader::single(c.id, c.function, c.param, c.payload.len() as u32);
    let mut b = h.encode().to_vec();
    b.extend_from_slice(&c.payload);
    b
}

fn software(c: &Call) -> Vec<u8> {
    let f = FunctionId::from_id(c.function).expect("a built-in");
    let mut out = Vec::new();
    offrac_accel::builtin(f)
        .run(c.param, &c.payload, &mut out)
        .expect("valid calls");
    out
}

/// Split one connection's response bytes into (header, payload) and check
/// them against the calls, in any order, each exactly once.
fn check(bytes: &[u8], calls: &[&Call]) -> u64 {
    let mut seen = std::collections::HashSet::new();
    let mut pos = 0;
    let mut cycles = 0;
    while pos < bytes.len() {
        let h: [u8; 64] = bytes[pos..pos + 64].try_into().expect("a whole header");
        let h = ResponseHeader::decode(&h).expect("a valid response header");
        let len = h.payload_len as usize;
        let payload = &bytes[pos + 64..pos + 64 + len];
        pos += 64 + len;
        let c = calls
            .iter()
            .find(|c| c.id == h.request_id)
            .expect("an answer to a request of this connection");
        assert!(seen.insert(c.id), "request {} answered twice", c.id);
        assert_eq!(
            h.status,
            Status::Ok,
            "request {} function {}",
            c.id,
            c.function
        );
        assert_eq!(
            payload,
            software(c).as_slice(),
            "request {} function {}",
            c.id,
            c.function
        );
        assert_eq!((h.hop_index, h.device, h.tenant), (0, 0, 0));
        cycles += h.queue_ns + h.exec_ns;
    }
    assert_eq!(seen.len(), calls.len(), "every request answered");
    cycles
}

fn keys() -> Vec<u32> {
    (0..DEFAULT_DICTIONARY_KEYS as u64)
        .map(default_dictionary_key)
        .collect()
}

/// Steps the model (64 cycles at a time, at least once) until it is idle,
/// handing every output beat to `beat`.
fn run_until_idle(m: &mut Model, mut beat: impl FnMut(OutBeat)) {
    let mut n = 0;
    while !m.idle() || n == 0 {
        m.step(64);
        n += 1;
        assert!(n < 100_000, "the model never went idle");
        while let Some(b) = m.pop() {
            beat(b);
        }
    }
}

/// The TCP driver serving the model on a loopback port in its own thread,
/// with the node's built-in dictionary and borders loaded.
struct Served {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<offrac_rtl_model::ServeStats>,
}

/// Starts [`Served`] and returns once it serves (the dictionary loaded): from
/// then on each client write is read as it comes.
fn serve() -> Served {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let state = offrac_accel::FunctionState::default();
    let (keys, borders) = (state.dictionary.keys(), state.borders.to_vec());
    let (ready_tx, ready) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let mask = offrac_rtl_model::DEFAULT_SLOT_MASK;
        let policy = offrac_rtl_model::SlotPolicy::Rr;
        offrac_rtl_model::serve(listener, &flag, &keys, &borders, mask, policy, move || {
            let _ = ready_tx.send(());
        })
        .expect("the driver serves")
    });
    ready.recv().unwrap();
    Served { addr, stop, thread }
}

impl Served {
    /// Stops the driver; its counts.
    fn stop(self) -> offrac_rtl_model::ServeStats {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

#[test]
fn model_answers_as_the_software_does() {
    let mut m = Model::new();
    assert_eq!(
        m.load_dictionary(&keys()).unwrap(),
        DEFAULT_DICTIONARY_KEYS as u32
    );
    let all = calls(1, 30, 7);
    // three connections, their bytes cut into beats of 1..=64 and interleaved
    let mut streams: Vec<(u8, Vec<u8>, usize)> = (0..3u8)
        .map(|c| {
            let bytes: Vec<u8> = all
                .iter()
                .filter(|x| x.id % 3 == c as u64)
                .flat_map(wire)
                .collect();
            (c, bytes, 0)
        })
        .collect();
    let mut r = Lcg(99);
    while streams.iter().any(|s| s.2 < s.1.len()) {
        let s = &mut streams[(r.next() % 3) as usize];
        if s.2 < s.1.len() {
            let n = (1 + (r.next() % 64) as usize).min(s.1.len() - s.2);
            m.push_beat(s.0, &s.1[s.2..s.2 + n]);
            s.2 += n;
        }
    }
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); 3];
    run_until_idle(&mut m, |b| {
        out[b.conn as usize].extend_from_slice(b.payload())
    });
    for c in 0..3u8 {
        let mine: Vec<&Call> = all.iter().filter(|x| x.id % 3 == c as u64).collect();
        check(&out[c as usize], &mine);
        assert!(m.conn_clean(c));
    }
}

#[test]
fn tcp_clients_through_the_driver() {
    let server = serve();
    let addr = server.addr;
    let clients: Vec<_> = (0..3u64)
        .map(|c| {
            std::thread::spawn(move || {
                let mine = calls(100 * (c + 1), 12, c + 1);
                let mut s = TcpStream::connect(addr).unwrap();
                s.set_read_timeout(Some(TIMEOUT)).unwrap();
                let bytes: Vec<u8> = mine.iter().flat_map(wire).collect();
                // in odd pieces, as segments come
                for piece in bytes.chunks(333) {
                    s.write_all(piece).unwrap();
                }
                let want: usize = mine.iter().map(|c| 64 + software(c).len()).sum();
                let mut got = vec![0u8; want];
                s.read_exact(&mut got).unwrap();
                let refs: Vec<&Call> = mine.iter().collect();
                check(&got, &refs)
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
    // a second round on indices given back
    let mine = calls(900, 6, 42);
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    s.write_all(&mine.iter().flat_map(wire).collect::<Vec<u8>>())
        .unwrap();
    let want: usize = mine.iter().map(|c| 64 + software(c).len()).sum();
    let mut got = vec![0u8; want];
    s.read_exact(&mut got).unwrap();
    check(&got, &mine.iter().collect::<Vec<_>>());
    let stats = server.stop();
    assert_eq!(stats.responses, 3 * 12 + 6);
}

#[test]
fn close_mid_request_frees_its_buffer() {
    // 20 partial requests (more than the model's 16 buffers), each on connection 1 and closed;
    // connection 0 keeps calling meanwhile: nothing is refused BUSY and the bytes come back whole
    let mut m = Model::new();
    let mut r = Lcg(5);
    for i in 0..20u64 {
        let c = Call {
            id: 5000 + i,
            function: 0,
            param: 0,
            payload: (0..8000).map(|_| r.next() as u8).collect(),
        };
        let w = wire(&c);
        let cut = if i % 4 == 3 { 30 } else { 64 + 4000 };
        m.push(1, &w[..cut]);
        let whole = Call {
            id: 6000 + i,
            function: 0,
            param: 0,
            payload: (0..(r.next() % 3000) as usize)
                .map(|_| r.next() as u8)
                .collect(),
        };
        m.push(0, &wire(&whole));
        let mut out = Vec::new();
        run_until_idle(&mut m, |b| {
            assert_eq!(b.conn, 0, "an answer to the partial request");
            out.extend_from_slice(b.payload());
        });
        assert!(!m.conn_clean(1), "connection 1 holds its partial request");
        m.close(1);
        while !m.idle() {
            m.step(1);
        }
        assert!(m.conn_clean(1), "connection 1 not clean after its close");
        check(&out, &[&whole]);
    }
}

fn echo(id: u64, len: usize, r: &mut Lcg) -> Call {
    Call {
        id,
        function: 0,
        param: 0,
        payload: (0..len).map(|_| r.next() as u8).collect(),
    }
}

/// `n` top-k calls (K 64) of 4000 random int32 each, ids from `first_id`:
/// enough work to keep the model busy for a while.
fn topk_batch(first_id: u64, n: u64, r: &mut Lcg) -> Vec<Call> {
    (0..n)
        .map(|i| Call {
            id: first_id + i,
            function: 1,
            param: 64,
            payload: (0..4000)
                .flat_map(|_| (r.next() as i32).to_le_bytes())
                .collect(),
        })
        .collect()
}

/// One answer's header and payload.
fn answer(bytes: &[u8]) -> (ResponseHeader, &[u8]) {
    let h: [u8; 64] = bytes[..64].try_into().expect("a whole header");
    let h = ResponseHeader::decode(&h).expect("a valid response header");
    let len = h.payload_len as usize;
    (h, &bytes[64..64 + len])
}

/// The model's 16 buffers each held by a partial request (connections 16..32: the header and
/// 100 bytes of a 10,000-byte echo, one segment each).
fn hold_every_buffer(m: &mut Model, r: &mut Lcg) {
    for c in 16..32u8 {
        let w = wire(&echo(7000 + c as u64, 10_000, r));
        m.push(c, &w[..164]);
    }
    run_until_idle(m, |b| {
        panic!("an answer to a partial request: {:?}", b.conn)
    });
}

#[test]
fn small_request_past_a_full_pool() {
    // the single-fragment FIFO: a small request whose payload comes in its header's segment skips the
    // pool; split across segments it needs a buffer, and every one is held: BUSY
    let mut m = Model::new();
    let mut r = Lcg(11);
    hold_every_buffer(&mut m, &mut r);
    let small = echo(7100, 200, &mut r);
    m.push(0, &wire(&small));
    let split = wire(&echo(7101, 200, &mut r));
    m.push(1, &split[..64]);
    m.push(1, &split[64..]);
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); 2];
    run_until_idle(&mut m, |b| {
        out[b.conn as usize].extend_from_slice(b.payload())
    });
    let (h, payload) = answer(&out[0]);
    assert_eq!((h.status, h.request_id), (Status::Ok, 7100));
    assert_eq!(
        payload,
        small.payload.as_slice(),
        "the small echo came back changed"
    );
    let (h, _) = answer(&out[1]);
    assert_eq!(
        (h.status, h.request_id),
        (Status::Busy, 7101),
        "split across segments"
    );
    // the holders close: their buffers come back, the split request is served
    for c in 16..32u8 {
        m.close(c);
    }
    m.push(1, &split[..64]);
    m.push(1, &split[64..]);
    let mut out = Vec::new();
    run_until_idle(&mut m, |b| out.extend_from_slice(b.payload()));
    assert_eq!(answer(&out).0.status, Status::Ok);
}

#[test]
fn a_connection_is_done_while_others_work() {
    // connection 1's request is answered while connection 0 still has top-k work queued: its own work
    // is done (the driver may give its index to a new client) though the model is not idle
    let mut m = Model::new();
    let mut r = Lcg(12);
    let heavy = topk_batch(8000, 6, &mut r);
    for c in &heavy {
        m.push(0, &wire(c));
    }
    let light = echo(8100, 100, &mut r);
    m.push(1, &wire(&light));
    let mut out = Vec::new();
    let mut done_while_busy = false;
    for _ in 0..100_000 {
        m.step(16);
        while let Some(b) = m.pop() {
            if b.conn == 1 {
                out.extend_from_slice(b.payload());
            }
        }
        if out.len() == 64 + light.payload.len() {
            assert!(
                m.conn_done(1),
                "connection 1's answer is out: its work is done"
            );
            done_while_busy = !m.idle() && !m.conn_done(0);
            break;
        }
        assert!(
            !m.conn_done(1),
            "connection 1 done before its answer came out"
        );
    }
    assert!(done_while_busy, "the model was idle by then: nothing shown");
    run_until_idle(&mut m, |_| {});
    assert!(m.conn_done(0) && m.conn_done(1));
}

#[test]
fn tcp_small_request_past_a_full_pool() {
    // through the driver with real sockets: each read is a segment
    let server = serve();
    let addr = server.addr;
    let mut r = Lcg(13);
    // 16 clients hold every buffer with a partial request
    let holders: Vec<TcpStream> = (0..16)
        .map(|i| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(&wire(&echo(9000 + i, 10_000, &mut r))[..164])
                .unwrap();
            s
        })
        .collect();
    let call = |bytes: &[&[u8]]| -> Vec<u8> {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.set_nodelay(true).unwrap();
        for (i, b) in bytes.iter().enumerate() {
            if i > 0 {
                std::thread::sleep(std::time::Duration::from_millis(200));
            }
            s.write_all(b).unwrap();
        }
        let mut head = [0u8; 64];
        s.read_exact(&mut head).unwrap();
        let h = ResponseHeader::decode(&head).expect("a valid response header");
        let mut rest = vec![0u8; h.payload_len as usize];
        s.read_exact(&mut rest).unwrap();
        [head.to_vec(), rest].concat()
    };
    // the header, then its payload in a later segment: a buffer is needed and none is free
    std::thread::sleep(std::time::Duration::from_millis(300));
    let split = wire(&echo(9100, 200, &mut r));
    let got = call(&[&split[..64], &split[64..]]);
    assert_eq!(
        answer(&got).0.status,
        Status::Busy,
        "split: {:?}",
        answer(&got).0
    );
    // the same request in one write (one segment): answered past the full pool
    let small = echo(9101, 200, &mut r);
    let got = call(&[&wire(&small)]);
    let (h, payload) = answer(&got);
    assert_eq!((h.status, h.request_id), (Status::Ok, 9101));
    assert_eq!(payload, small.payload.as_slice());
    drop(holders);
    let stats = server.stop();
    assert_eq!(stats.responses, 2);
}

#[test]
fn tcp_index_given_back_under_load() {
    // One client keeps the model busy with a long batch of top-k requests; meanwhile 40 clients
    // (more than the 31 indices left) come one after another, each with one echo, and close: each
    // index is given back once that connection's own work is done, not when the whole model is idle
    // (which it is not until the batch is done), so all 40 are served before the batch is.
    let server = serve();
    let addr = server.addr;
    let mut r = Lcg(14);
    // 300 requests: ~5x the time the 40 clients take on a quiet machine (60 were
    // about as long, and the clients sometimes finished last).
    let batch = topk_batch(10_000, 300, &mut r);
    let loader = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let writer = {
            let mut s = s.try_clone().unwrap();
            let bytes: Vec<u8> = batch.iter().flat_map(wire).collect();
            std::thread::spawn(move || s.write_all(&bytes).unwrap())
        };
        let want: usize = batch.iter().map(|c| 64 + software(c).len()).sum();
        let mut got = vec![0u8; want];
        s.read_exact(&mut got).unwrap();
        let done = std::time::Instant::now();
        writer.join().unwrap();
        check(&got, &batch.iter().collect::<Vec<_>>());
        done
    });
    std::thread::sleep(std::time::Duration::from_millis(200));
    for i in 0..40u64 {
        let c = echo(11_000 + i, 100, &mut r);
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        s.write_all(&wire(&c)).unwrap();
        let mut got = vec![0u8; 64 + 100];
        s.read_exact(&mut got).unwrap();
        check(&got, &[&c]);
    }
    let clients_done = std::time::Instant::now();
    let batch_done = loader.join().unwrap();
    assert!(
        clients_done < batch_done,
        "the 40 clients waited for the batch: an index was given back only when the model was idle"
    );
    server.stop();
}

/// A long top-k (16 KiB) on connection 0, then a short one (64 elements) on
/// connection 1: with the default mask (one top-k slot) the short one runs
/// after the long one in slot 0; with both top-k slots configured it runs
/// in slot 1 at once and is answered first. Returns the cycle each was
/// answered at (long, short) and the hops each slot started; both answers
/// checked against the software.
fn long_then_short_topk(mask: u32) -> (u64, u64, Vec<u64>) {
    let mut m = Model::with_slot_mask(mask);
    assert_eq!(m.slot_mask(), mask);
    let mut r = Lcg(5);
    let ints = |n: usize, r: &mut Lcg| -> Vec<u8> {
        (0..n)
            .flat_map(|_| (r.next() as i32).to_le_bytes())
            .collect()
    };
    let long = Call {
        id: 1,
        function: 1,
        param: 64,
        payload: ints(4096, &mut r),
    };
    let short = Call {
        id: 2,
        function: 1,
        param: 8,
        payload: ints(64, &mut r),
    };
    m.push(0, &wire(&long));
    m.push(1, &wire(&short));
    let mut out: Vec<Vec<u8>> = vec![Vec::new(); 2];
    let mut done = [0u64; 2];
    run_until_idle(&mut m, |b| {
        out[b.conn as usize].extend_from_slice(b.payload());
        if b.last {
            done[b.conn as usize] = 1;
        }
    });
    // the cycles each answer took: queue + exec in its header
    let long_cycles = check(&out[0], &[&long]);
    let short_cycles = check(&out[1], &[&short]);
    assert_eq!(done, [1, 1]);
    (long_cycles, short_cycles, m.slot_starts().to_vec())
}

#[test]
fn two_topk_slots_both_run_when_configured() {
    use offrac_rtl_model::DEFAULT_SLOT_MASK;
    // default: one top-k slot (slot 0); the short one queues behind the long one
    let (long1, short1, starts1) = long_then_short_topk(DEFAULT_SLOT_MASK);
    assert_eq!(starts1, vec![2, 0, 0, 0, 0, 0, 0, 0]);
    assert!(
        short1 > long1 / 2,
        "one slot: the short top-k ({short1} cycles) waited behind the long one ({long1})"
    );
    // slots 0 and 1 configured: the short one runs in slot 1 beside the long one
    let (long2, short2, starts2) = long_then_short_topk(DEFAULT_SLOT_MASK | 0b10);
    assert_eq!(starts2, vec![1, 1, 0, 0, 0, 0, 0, 0]);
    assert!(
        long2.abs_diff(long1) * 100 < long1,
        "the long one runs as before: {long2} cycles against {long1}"
    );
    assert!(
        short2 * 10 < short1,
        "two slots: the short top-k ({short2} cycles) did not wait ({short1} with one)"
    );
}

/// The selector's policy (`cfg_slot_policy`, taken at reset) with both top-k
/// slots configured: four short top-k calls one at a time (each answered
/// before the next goes in). RR alternates the slots (its turn moves past
/// the one chosen); JSQ finds both queues empty and both slots idle each
/// time and picks the lowest index. Answers checked against the software.
fn topk_one_at_a_time(policy: offrac_rtl_model::SlotPolicy) -> Vec<u64> {
    let mask = offrac_rtl_model::DEFAULT_SLOT_MASK | 0b10;
    let mut m = Model::with_slots(mask, policy);
    assert_eq!((m.slot_mask(), m.slot_policy()), (mask, policy));
    let mut r = Lcg(9);
    for id in 1..=4u64 {
        let call = Call {
            id,
            function: 1,
            param: 8,
            payload: (0..64)
                .flat_map(|_| (r.next() as i32).to_le_bytes())
                .collect(),
        };
        m.push(0, &wire(&call));
        let mut out = Vec::new();
        run_until_idle(&mut m, |b| out.extend_from_slice(b.payload()));
        check(&out, &[&call]);
    }
    m.slot_starts().to_vec()
}

#[test]
fn slot_policy_taken_at_reset() {
    use offrac_rtl_model::SlotPolicy;
    assert_eq!(
        topk_one_at_a_time(SlotPolicy::Rr),
        vec![2, 2, 0, 0, 0, 0, 0, 0]
    );
    assert_eq!(
        topk_one_at_a_time(SlotPolicy::Jsq),
        vec![4, 0, 0, 0, 0, 0, 0, 0]
    );
}
