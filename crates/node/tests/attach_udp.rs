//! The memcached look-through cache served over UDP (`udp = true`, memcached's
//! UDP framing) in front of a real memcached (Debian's package, TCP only),
//! over loopback. Each test starts its own memcached and node.

mod common;

use common::memcached::{memcached, memcached_on, memcached_stat, memcached_udp};
use common::metrics::metric;
use common::{attach_node, attach_node_with_metrics, free_port};
use offrac_node::NodeHandle;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

fn node_for(backend: u16, extra: &str) -> (NodeHandle, SocketAddr) {
    attach_node("memcached_cache", backend, &format!("udp = true\n{extra}"))
}

/// A raw memcached UDP client: frame header, request id, reassembly by sequence number.
struct UdpClient {
    s: UdpSocket,
    to: SocketAddr,
    next_id: u16,
}

impl UdpClient {
    fn new(to: SocketAddr) -> Self {
        let s = UdpSocket::bind("127.0.0.1:0").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        UdpClient { s, to, next_id: 1 }
    }

    fn send_raw(&self, d: &[u8]) {
        self.s.send_to(d, self.to).unwrap();
    }

    fn header(id: u16, seq: u16, total: u16) -> Vec<u8> {
        [id, seq, total, 0]
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect()
    }

    /// Sends one request and reassembles its answer's datagrams.
    fn ask(&mut self, req: &[u8]) -> Vec<u8> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let mut d = Self::header(id, 0, 1);
        d.extend_from_slice(req);
        self.send_raw(&d);
        self.receive(id)
    }

    fn receive(&self, id: u16) -> Vec<u8> {
        let mut parts: Vec<Option<Vec<u8>>> = Vec::new();
        let mut buf = vec![0; 65536];
        loop {
            let (n, from) = self.s.recv_from(&mut buf).expect("an answer datagram");
            assert_eq!(from, self.to);
            assert!((8..=1400).contains(&n), "datagram of {n} bytes");
            let w = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
            let (rid, seq, total, reserved) = (w(0), w(2), w(4), w(6));
            assert_eq!(reserved, 0);
            if rid != id {
                continue; // a late answer to an earlier request
            }
            if parts.is_empty() {
                parts = vec![None; usize::from(total)];
            }
            assert_eq!(parts.len(), usize::from(total));
            parts[usize::from(seq)] = Some(buf[8..n].to_vec());
            if parts.iter().all(Option::is_some) {
                return parts.into_iter().flatten().flatten().collect();
            }
        }
    }

    /// Sends `req` in one datagram and collects `count` answer messages in
    /// arrival order, each one reassembled from its datagrams (sequence
    /// numbers from 0 and a total of its own, as memcached frames each response).
    fn messages(&mut self, req: &[u8], count: usize) -> Vec<Vec<u8>> {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.send_raw(&[Self::header(id, 0, 1), req.to_vec()].concat());
        (0..count).map(|_| self.receive(id)).collect()
    }

    /// Every datagram arriving within `wait` of the last one: (request id, seq, total, payload).
    fn drain(&self, wait: Duration) -> Vec<(u16, u16, u16, Vec<u8>)> {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut buf = vec![0; 65536];
        let mut got = Vec::new();
        while let Ok((n, _)) = self.s.recv_from(&mut buf) {
            let w = |i: usize| u16::from_be_bytes([buf[i], buf[i + 1]]);
            got.push((w(0), w(2), w(4), buf[8..n].to_vec()));
        }
        self.s
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        got
    }

    /// Nothing arrives within `wait`.
    fn silent(&self, wait: Duration) -> bool {
        self.s.set_read_timeout(Some(wait)).unwrap();
        let mut buf = [0; 2048];
        let got = self.s.recv_from(&mut buf);
        self.s
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        got.is_err()
    }
}

fn tcp_ask(addr: SocketAddr, req: &[u8]) -> String {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(s);
    r.get_mut().write_all(req).unwrap();
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    l
}

/// A get over TCP: its whole answer, up to END.
fn tcp_get(addr: SocketAddr, req: &[u8]) -> String {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(s);
    r.get_mut().write_all(req).unwrap();
    let mut all = String::new();
    while !all.ends_with("END\r\n") {
        assert!(r.read_line(&mut all).unwrap() > 0, "closed after {all:?}");
    }
    all
}

#[test]
fn udp_gets_miss_then_hit_and_see_a_tcp_write() {
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_for(mc.port, "");
    let mut u = UdpClient::new(addr);
    assert_eq!(u.ask(b"get nothing\r\n"), b"END\r\n");
    assert_eq!(tcp_ask(addr, b"set k 7 0 2\r\nv1\r\n"), "STORED\r\n");
    assert_eq!(u.ask(b"get k\r\n"), b"VALUE k 7 2\r\nv1\r\nEND\r\n");
    let before = memcached_stat(mc.port, "cmd_get");
    for _ in 0..200 {
        assert_eq!(u.ask(b"get k\r\n"), b"VALUE k 7 2\r\nv1\r\nEND\r\n");
    }
    let fetched = memcached_stat(mc.port, "cmd_get") - before;
    assert!(
        fetched <= 1,
        "memcached saw {fetched} gets for 200 UDP hits"
    );
    // A write over TCP: the next UDP read sees it, never the cached v1.
    assert_eq!(tcp_ask(addr, b"set k 7 0 2\r\nv2\r\n"), "STORED\r\n");
    assert_eq!(u.ask(b"get k\r\n"), b"VALUE k 7 2\r\nv2\r\nEND\r\n");
    // A write over UDP (forwarded to memcached over TCP), seen over TCP and UDP.
    assert_eq!(u.ask(b"set k 7 0 2\r\nv3\r\n"), b"STORED\r\n");
    assert_eq!(tcp_get(addr, b"get k\r\n"), "VALUE k 7 2\r\nv3\r\nEND\r\n");
    assert!(u.ask(b"gets k\r\n").starts_with(b"VALUE k 7 2 "));
    assert!(u.ask(b"get k\r\n").ends_with(b"\r\nv3\r\nEND\r\n"));
    // Several requests in one datagram: one message per answer, in order.
    assert_eq!(
        u.messages(b"delete k\r\nget k\r\nbogus\r\n", 3),
        vec![
            b"DELETED\r\n".to_vec(),
            b"END\r\n".to_vec(),
            b"ERROR\r\n".to_vec()
        ]
    );
    node.shutdown().unwrap();
}

#[test]
fn a_large_value_comes_back_over_several_datagrams() {
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_for(mc.port, "");
    let value: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    let mut set = format!("set big 1 0 {}\r\n", value.len()).into_bytes();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(tcp_ask(addr, &set), "STORED\r\n");
    let mut want = format!("VALUE big 1 {}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\nEND\r\n");
    let mut u = UdpClient::new(addr);
    // Twice: the miss (filled from memcached), then the hit.
    for _ in 0..2 {
        assert!(u.ask(b"get big\r\n") == want, "reassembled value differs");
    }
    node.shutdown().unwrap();
}

#[test]
fn bad_datagrams_are_dropped_and_good_ones_still_answered() {
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_for(mc.port, "");
    let mut u = UdpClient::new(addr);
    u.send_raw(b"\x00\x01\x00");
    u.send_raw(&UdpClient::header(5, 0, 1)); // a header and no request
    let mut multi = UdpClient::header(6, 0, 2);
    multi.extend_from_slice(b"get k\r\n");
    u.send_raw(&multi);
    assert!(
        u.silent(Duration::from_millis(300)),
        "a dropped datagram was answered"
    );
    assert_eq!(u.ask(b"get k\r\n"), b"END\r\n");
    node.shutdown().unwrap();
}

/// Several UDP clients at once, each writing its own key over UDP and reading
/// it back (misses and hits), with a TCP client writing a shared key between
/// UDP readers of it: every client reads its own last write, and never a
/// shared value older than the last one acknowledged before its read began.
#[test]
fn concurrent_udp_clients_read_their_writes() {
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_for(mc.port, "loops = 2\n");
    let acked = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    assert_eq!(tcp_ask(addr, b"set shared 0 0 1\r\n0\r\n"), "STORED\r\n");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let s = TcpStream::connect(addr).unwrap();
            let mut r = BufReader::new(s);
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                n += 1;
                let v = n.to_string();
                let req = format!("set shared 0 0 {}\r\n{v}\r\n", v.len());
                r.get_mut().write_all(req.as_bytes()).unwrap();
                let mut l = String::new();
                r.read_line(&mut l).unwrap();
                assert_eq!(l, "STORED\r\n");
                acked.store(n, std::sync::atomic::Ordering::SeqCst);
            }
            n
        })
    };
    let clients: Vec<_> = (0..4)
        .map(|c| {
            let acked = acked.clone();
            std::thread::spawn(move || {
                let mut u = UdpClient::new(addr);
                for i in 0..150 {
                    let v = format!("c{c}-{i}");
                    let set = format!("set own{c} 0 0 {}\r\n{v}\r\n", v.len());
                    assert_eq!(u.ask(set.as_bytes()), b"STORED\r\n");
                    for _ in 0..2 {
                        let want = format!("VALUE own{c} 0 {}\r\n{v}\r\nEND\r\n", v.len());
                        assert_eq!(
                            String::from_utf8(u.ask(format!("get own{c}\r\n").as_bytes())).unwrap(),
                            want
                        );
                    }
                    let floor = acked.load(std::sync::atomic::Ordering::SeqCst);
                    let got = String::from_utf8(u.ask(b"get shared\r\n")).unwrap();
                    let read: u64 = got.lines().nth(1).expect("a value").parse().unwrap();
                    assert!(read >= floor, "read {read} after {floor} was acknowledged");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a UDP client");
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let writes = writer.join().unwrap();
    assert!(writes > 0);
    node.shutdown().unwrap();
}

/// memcached not there: a UDP miss is answered `SERVER_ERROR backend
/// unavailable` (once), and a noreply write gets no datagram.
#[test]
fn a_udp_miss_with_memcached_down_gets_a_server_error() {
    let port = free_port();
    let (node, addr) = node_with_metrics(port, "");
    let mut u = UdpClient::new(addr);
    assert_eq!(u.ask(b"get k\r\n"), b"SERVER_ERROR backend unavailable\r\n");
    assert_eq!(
        u.ask(b"get k j\r\n"),
        b"SERVER_ERROR backend unavailable\r\n"
    );
    u.send_raw(
        &[
            UdpClient::header(99, 0, 1),
            b"set k 0 0 1 noreply\r\nx\r\n".to_vec(),
        ]
        .concat(),
    );
    assert!(
        u.silent(Duration::from_millis(300)),
        "a noreply write was answered"
    );
    // Three connects tried, none worked: counted as failures, not connects.
    let labels = format!("listen=\"{addr}\",function=\"memcached_cache\"");
    let m = |name: &str| metric(&node, &format!("{name}{{{labels}}}"));
    assert_eq!(m("offrac_attach_udp_backend_connects_total"), 0);
    assert_eq!(m("offrac_attach_udp_backend_connect_failures_total"), 3);
    node.shutdown().unwrap();
}

/// `udp_max_requests = 1` and a backend that accepts but never answers: the
/// request in flight holds the only place, so a second request and a
/// retransmission of the first are dropped unanswered; the first is answered
/// once, `SERVER_ERROR backend unavailable` at `backend_timeout_ms`, and then
/// the place is free again.
#[test]
fn at_the_cap_and_on_retransmission_datagrams_are_dropped() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let (node, addr) = node_for(port, "udp_max_requests = 1\nbackend_timeout_ms = 700\n");
    let u = UdpClient::new(addr);
    let other = UdpClient::new(addr);
    let req = |id: u16| [UdpClient::header(id, 0, 1), b"get k\r\n".to_vec()].concat();
    let t0 = Instant::now();
    u.send_raw(&req(1));
    std::thread::sleep(Duration::from_millis(100));
    u.send_raw(&req(1)); // the same (peer, id) again: a retransmission
    other.send_raw(&req(2)); // over the cap
    assert_eq!(u.receive(1), b"SERVER_ERROR backend unavailable\r\n");
    assert!(
        t0.elapsed() >= Duration::from_millis(600),
        "answered before the timeout"
    );
    assert!(u.silent(Duration::from_millis(300)), "answered twice");
    assert!(
        other.silent(Duration::from_millis(10)),
        "a request over the cap was answered"
    );
    // The place is free again.
    other.send_raw(&req(3));
    assert_eq!(other.receive(3), b"SERVER_ERROR backend unavailable\r\n");
    drop(silent);
    node.shutdown().unwrap();
}

fn node_with_metrics(backend: u16, extra: &str) -> (NodeHandle, SocketAddr) {
    attach_node_with_metrics(
        "memcached_cache",
        backend,
        &format!("udp = true\n{extra}"),
        "127.0.0.1:0",
    )
}

/// The same datagram of several requests sent to memcached's own UDP port
/// and to the node in front of it gets the same datagrams back: one message
/// per response (a multi-key get: one per item, END with the last), each
/// framed from sequence 0, a large value spanning datagrams.
#[test]
fn a_datagram_of_several_requests_is_answered_as_memcached_answers_it() {
    let Some(mc) = memcached_udp(true) else {
        return;
    };
    let (node, addr) = node_for(mc.port, "");
    let direct: SocketAddr = ([127, 0, 0, 1], mc.port).into();
    let big = "v".repeat(3000);
    let set = format!("set a 0 0 1\r\nx\r\nset b 0 0 2\r\nyy\r\nset big 0 0 3000\r\n{big}\r\n");
    assert_eq!(tcp_ask(direct, set.as_bytes()), "STORED\r\n");
    // With memcached's corner cases: a missing last key (END alone), a
    // missing first key of several (an empty datagram first).
    let req: &[u8] = b"get a b\r\nget nope\r\ndelete nope\r\nbogus\r\ngets a\r\n\
                      get big a\r\nget a nope b\r\nset c 0 0 1\r\nz\r\nget big\r\n\
                      get nope a\r\nget a nope\r\ngets nope a nope2\r\nget nope x\r\n\
                      get big nope\r\n";
    // Twice through the node: misses fetched from memcached, then hits from the cache.
    for round in 0..2 {
        let mut answers = Vec::new();
        for to in [direct, addr] {
            let u = UdpClient::new(to);
            u.send_raw(&[UdpClient::header(7, 0, 1), req.to_vec()].concat());
            answers.push(u.drain(Duration::from_millis(1000)));
        }
        let (mc_says, node_says) = (&answers[0], &answers[1]);
        assert!(mc_says.len() >= 22, "memcached sent {}", mc_says.len());
        assert!(
            mc_says == node_says,
            "round {round}: memcached sent {mc_says:?}\nthe node sent {node_says:?}"
        );
    }
    node.shutdown().unwrap();
}

/// UDP misses and writes share a pool of backend connections instead of
/// opening one each: 150 of them in a row cost memcached a handful of
/// connections, and /metrics counts the reuse and the UDP traffic.
#[test]
fn udp_misses_and_writes_reuse_pooled_backend_connections() {
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_with_metrics(mc.port, "");
    let mut u = UdpClient::new(addr);
    let before = memcached_stat(mc.port, "total_connections");
    for i in 0..100 {
        assert_eq!(u.ask(format!("get miss{i}\r\n").as_bytes()), b"END\r\n");
    }
    for i in 0..50 {
        let set = format!("set k{i} 0 0 1\r\nx\r\n");
        assert_eq!(u.ask(set.as_bytes()), b"STORED\r\n");
    }
    // This test's own stat connection is one of them.
    let opened = memcached_stat(mc.port, "total_connections") - before;
    assert!(
        opened <= 4,
        "150 UDP requests opened {opened} backend connections"
    );
    let labels = format!("listen=\"{addr}\",function=\"memcached_cache\"");
    let m = |name: &str| metric(&node, &format!("{name}{{{labels}}}"));
    assert!(m("offrac_attach_udp_backend_reused_total") >= 146);
    let connects = m("offrac_attach_udp_backend_connects_total");
    assert!((1..=4).contains(&connects), "{connects} connects");
    assert_eq!(m("offrac_attach_udp_backend_connect_failures_total"), 0);
    assert_eq!(m("offrac_attach_udp_requests_total"), 150);
    assert_eq!(m("offrac_attach_udp_answers_total"), 150);
    assert_eq!(m("offrac_attach_cache_misses_total"), 100);
    u.send_raw(b"\x00\x01");
    assert!(u.silent(Duration::from_millis(200)));
    let short = format!("offrac_attach_udp_dropped_total{{{labels},reason=\"short\"}}");
    assert_eq!(metric(&node, &short), 1);
    assert_eq!(m("offrac_attach_udp_datagrams_received_total"), 151);
    node.shutdown().unwrap();
}

/// memcached restarts under the pool: the idle pooled connections to the
/// old process are found closed and dropped, so a request after the restart
/// is answered by the new memcached (not `SERVER_ERROR`); while it is down,
/// every request is answered once with `SERVER_ERROR backend unavailable`.
#[test]
fn pooled_connections_are_dropped_when_memcached_restarts() {
    let port = free_port();
    let Some(mc) = memcached_on(port, false) else {
        return;
    };
    let (node, addr) = node_with_metrics(port, "");
    let mut u = UdpClient::new(addr);
    for i in 0..5 {
        let set = format!("set k{i} 0 0 2\r\nv{i}\r\n");
        assert_eq!(u.ask(set.as_bytes()), b"STORED\r\n");
    }
    drop(mc);
    std::thread::sleep(Duration::from_millis(200));
    for i in 5..8 {
        assert_eq!(
            u.ask(format!("get k{i}\r\n").as_bytes()),
            b"SERVER_ERROR backend unavailable\r\n"
        );
    }
    let Some(_mc) = memcached_on(port, false) else {
        return;
    };
    assert_eq!(u.ask(b"get fresh\r\n"), b"END\r\n");
    assert_eq!(u.ask(b"set n 0 0 1\r\n1\r\n"), b"STORED\r\n");
    assert_eq!(u.ask(b"get n\r\n"), b"VALUE n 0 1\r\n1\r\nEND\r\n");
    let labels = format!("listen=\"{addr}\",function=\"memcached_cache\"");
    let stale = metric(
        &node,
        &format!("offrac_attach_udp_backend_stale_total{{{labels}}}"),
    );
    assert!(stale >= 1, "no pooled connection was found closed");
    assert!(u.silent(Duration::from_millis(200)), "an extra answer");
    node.shutdown().unwrap();
}

/// A stand-in memcached for the retry test: answers every `gets` with
/// `END`; once `restart` is set, a connection accepted before reads the next
/// request and closes without a byte of answer (memcached restarted and its
/// old connections die just as a request arrives: the node's look at the
/// idle pooled connection found nothing, its write went through, the answer
/// is an end of stream). Returns the port and the count of such closes.
fn restarting_backend(
    restart: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> (u16, std::sync::Arc<std::sync::atomic::AtomicU64>) {
    use std::io::Read;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let closed = Arc::new(AtomicU64::new(0));
    let count = closed.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let after = restart.load(Ordering::SeqCst);
            let (restart, count) = (restart.clone(), count.clone());
            std::thread::spawn(move || {
                let mut buf = [0; 4096];
                let mut pending = Vec::new();
                loop {
                    let Ok(n) = s.read(&mut buf) else { return };
                    if n == 0 {
                        return;
                    }
                    if !after && restart.load(Ordering::SeqCst) {
                        // Accepted before the restart: die with the request unread by anyone.
                        count.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(at) = pending.windows(2).position(|w| w == b"\r\n") {
                        pending.drain(..at + 2);
                        if s.write_all(b"END\r\n").is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, closed)
}

/// A pooled backend connection that memcached closes after the node's look
/// found it idle and before the request is answered (the race the look
/// cannot close) is retried once on a fresh connection: the request is
/// answered by memcached, exactly once, not `SERVER_ERROR`.
#[test]
fn a_pooled_connection_closed_as_a_request_arrives_is_retried_on_a_fresh_one() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let restart = std::sync::Arc::new(AtomicBool::new(false));
    let (port, closed) = restarting_backend(restart.clone());
    let (node, addr) = node_with_metrics(port, "");
    // Several requests at once: the pool ends up holding several connections.
    let clients: Vec<UdpClient> = (0..4).map(|_| UdpClient::new(addr)).collect();
    for round in 0..3u16 {
        for c in &clients {
            c.send_raw(&[UdpClient::header(round, 0, 1), b"get a\r\n".to_vec()].concat());
        }
        for c in &clients {
            assert_eq!(c.receive(round), b"END\r\n");
        }
    }
    restart.store(true, Ordering::SeqCst);
    let mut u = UdpClient::new(addr);
    for i in 0..6 {
        assert_eq!(
            u.ask(format!("get k{i}\r\n").as_bytes()),
            b"END\r\n",
            "request {i} after the restart"
        );
    }
    assert!(u.silent(Duration::from_millis(200)), "an extra answer");
    assert!(
        closed.load(Ordering::SeqCst) >= 1,
        "no pooled connection was closed unanswered"
    );
    let labels = format!("listen=\"{addr}\",function=\"memcached_cache\"");
    let m = |name: &str| metric(&node, &format!("{name}{{{labels}}}"));
    assert_eq!(
        m("offrac_attach_backend_retries_total"),
        closed.load(Ordering::SeqCst)
    );
    assert_eq!(m("offrac_attach_backend_failures_total"), 0);
    node.shutdown().unwrap();
}

/// With `loops = 2` each loop reads a UDP socket of its own on the same
/// address: datagrams from many client sockets (the kernel spreads them by
/// source port) are all answered, and both loops admitted some.
#[test]
fn udp_is_served_by_every_loop() {
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_with_metrics(mc.port, "loops = 2\n");
    assert_eq!(tcp_ask(addr, b"set k 0 0 2\r\nhi\r\n"), "STORED\r\n");
    let clients: Vec<UdpClient> = (0..24).map(|_| UdpClient::new(addr)).collect();
    for round in 0..2 {
        for c in &clients {
            c.send_raw(&[UdpClient::header(round, 0, 1), b"get k\r\n".to_vec()].concat());
        }
        for c in &clients {
            assert_eq!(c.receive(round), b"VALUE k 0 2\r\nhi\r\nEND\r\n");
        }
    }
    let labels = format!("listen=\"{addr}\",function=\"memcached_cache\"");
    let per_loop: Vec<u64> = (0..2)
        .map(|i| {
            metric(
                &node,
                &format!("offrac_attach_udp_loop_requests_total{{{labels},loop=\"{i}\"}}"),
            )
        })
        .collect();
    assert_eq!(per_loop.iter().sum::<u64>(), 48, "{per_loop:?}");
    assert!(
        per_loop.iter().all(|&n| n > 0),
        "a loop read nothing: {per_loop:?}"
    );
    node.shutdown().unwrap();
}
