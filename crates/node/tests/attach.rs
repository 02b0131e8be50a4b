//! The memcached look-through cache (`[[attach]]`) in front of a real
//! memcached (Debian's package; `.ci/run` installs it), over loopback.
//! Each test starts its own memcached on a free port.

mod common;

use common::memcached::{memcached, memcached_on, memcached_stat};
use common::{attach_node, free_port};
use offrac_node::{NodeConfig, NodeHandle};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn node_for(backend: u16, extra: &str) -> (NodeHandle, SocketAddr) {
    attach_node("memcached_cache", backend, extra)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// Sends `script` (ending in `quit`) and reads everything until the server closes.
fn transcript(addr: SocketAddr, script: &[u8]) -> Vec<u8> {
    let mut s = connect(addr);
    s.write_all(script).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).expect("read until close");
    out
}

/// One request, one answer ending in a line that `last` accepts.
fn ask(r: &mut BufReader<TcpStream>, req: &[u8], last: impl Fn(&str) -> bool) -> Vec<String> {
    r.get_mut().write_all(req).unwrap();
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        assert!(
            r.read_line(&mut l).expect("answer") > 0,
            "closed after {lines:?}"
        );
        let l = l.trim_end().to_string();
        let done = last(&l);
        lines.push(l);
        if done {
            return lines;
        }
    }
}

fn is_end(l: &str) -> bool {
    l == "END" || l.contains("ERROR")
}

#[test]
fn through_the_node_a_client_sees_what_memcached_answers() {
    // The same script against two fresh memcacheds, one through the node:
    // byte-identical transcripts (CAS uniques included), hits and all.
    let Some(direct) = memcached() else { return };
    let Some(behind) = memcached() else { return };
    let (node, addr) = node_for(behind.port, "");
    let big = vec![b'v'; 2 << 20];
    let mut script = Vec::new();
    script.extend_from_slice(
        b"get a\r\nset a 7 0 3\r\nabc\r\nget a\r\nget a\r\ngets a\r\nget a b a\r\nadd a 0 0 1\r\nx\r\n\
          add b 1 0 2\r\nbb\r\nget a b c\r\nappend a 0 0 2\r\nde\r\nprepend b 0 0 1\r\n_\r\ngets a b\r\n\
          cas a 0 0 1 999\r\nz\r\ncas a 9 0 1 3\r\nz\r\ngets a\r\nset n 0 0 1\r\n5\r\nget n\r\n\
          incr n 10\r\nget n\r\ndecr n 100\r\nget n\r\nincr a 1\r\nincr n x\r\ndelete a\r\nget a\r\n\
          delete a\r\ntouch b 100\r\nget b\r\nset q 0 0 1 noreply\r\nq\r\nget q\r\ndelete q noreply\r\n\
          get q\r\nbogus command\r\n\r\nget\r\nset k 0 0 z\r\nset k 0 0 -1\r\nset k 0 0 2\r\nabcd\r\n\
          gat 100 b\r\ngats 100 b n\r\nversion\r\nverbosity 1\r\nflush_all\r\nget b n\r\n",
    );
    script.extend_from_slice(format!("set huge 0 0 {}\r\n", big.len()).as_bytes());
    script.extend_from_slice(&big);
    script.extend_from_slice(b"\r\nget huge\r\nset after 0 0 1\r\n1\r\nget after\r\nquit\r\n");
    let want = transcript(SocketAddr::from(([127, 0, 0, 1], direct.port)), &script);
    let got = transcript(addr, &script);
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want),
        "through the node vs memcached direct"
    );
    assert!(
        want.windows(7).any(|w| w == b"VALUE a"),
        "the script reads values"
    );
    node.shutdown().unwrap();
}

#[test]
fn hits_do_not_reach_memcached() {
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_for(mc.port, "");
    let stat = |name: &str| memcached_stat(mc.port, name);
    let mut r = BufReader::new(connect(addr));
    assert_eq!(
        ask(&mut r, b"set k 0 0 16\r\n0123456789abcdef\r\n", |_| true),
        ["STORED"]
    );
    let before = stat("cmd_get");
    for _ in 0..1000 {
        let a = ask(&mut r, b"get k\r\n", is_end);
        assert_eq!(a, ["VALUE k 0 16", "0123456789abcdef", "END"]);
    }
    let fetched = stat("cmd_get") - before;
    assert!(
        fetched <= 1,
        "memcached saw {fetched} gets for 1000 reads of one key"
    );
    node.shutdown().unwrap();
}

#[test]
fn concurrent_writers_never_read_back_an_older_value() {
    writers_never_read_back_an_older_value("loops = 1\n");
}

/// The same with the connections spread over four event loops sharing the
/// cache: writers and readers of a key are served by different threads.
#[test]
fn concurrent_writers_on_several_loops_never_read_back_an_older_value() {
    writers_never_read_back_an_older_value("loops = 4\n");
}

fn writers_never_read_back_an_older_value(extra: &str) {
    // Writers increment shared counters through the node (memcached orders
    // the increments); after each increment answers v, that writer's read of
    // the counter must be >= v, though readers keep the key hot in the cache.
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_for(mc.port, extra);
    let keys = ["c0", "c1", "c2"];
    {
        let mut r = BufReader::new(connect(addr));
        for k in keys {
            ask(&mut r, format!("set {k} 0 0 1\r\n0\r\n").as_bytes(), |_| {
                true
            });
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut r = BufReader::new(connect(addr));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for k in keys {
                        ask(&mut r, format!("get {k}\r\n").as_bytes(), is_end);
                        n += 1;
                    }
                }
                n
            })
        })
        .collect();
    let writers: Vec<_> = (0..4)
        .map(|w| {
            std::thread::spawn(move || {
                let mut r = BufReader::new(connect(addr));
                for i in 0..400 {
                    let k = keys[(i + w) % keys.len()];
                    let v: u64 = ask(&mut r, format!("incr {k} 1\r\n").as_bytes(), |_| true)[0]
                        .parse()
                        .expect("incr answers a number");
                    let a = ask(&mut r, format!("get {k}\r\n").as_bytes(), is_end);
                    let seen: u64 = a[1].parse().expect("a value");
                    assert!(
                        seen >= v,
                        "writer {w} read {k}={seen} after its incr answered {v}"
                    );
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    stop.store(true, Ordering::Relaxed);
    let reads: u64 = readers.into_iter().map(|r| r.join().expect("reader")).sum();
    assert!(reads > 0);
    let mut r = BufReader::new(connect(addr));
    let total: u64 = keys
        .iter()
        .map(|k| {
            ask(&mut r, format!("get {k}\r\n").as_bytes(), is_end)[1]
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    assert_eq!(total, 4 * 400);
    node.shutdown().unwrap();
}

#[test]
fn hostile_clients_do_not_hold_up_others() {
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_for(mc.port, "");
    // A line that never ends: answered and closed at the limit.
    let mut s = connect(addr);
    let _ = s.write_all(&vec![b'g'; 200 * 1024]);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(
        out.starts_with(b"CLIENT_ERROR line too long"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    // A client that claims a huge value and stops mid-way, one that sends
    // garbage, one that pipelines without reading: others are still served.
    let mut half = connect(addr);
    half.write_all(b"set k 0 0 1000000\r\nabc").unwrap();
    let mut garbage = connect(addr);
    garbage
        .write_all(&[0xff, 0x00, b'\n', 7, 7, 7, b'\r', b'\n'])
        .unwrap();
    let mut greedy = connect(addr);
    let many = b"get x\r\n".repeat(200_000);
    greedy
        .set_write_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let _ = greedy.write_all(&many);
    let mut r = BufReader::new(connect(addr));
    assert_eq!(ask(&mut r, b"set ok 0 0 2\r\nhi\r\n", |_| true), ["STORED"]);
    assert_eq!(
        ask(&mut r, b"get ok\r\n", is_end),
        ["VALUE ok 0 2", "hi", "END"]
    );
    drop(half); // disconnects mid-request
    let mut line = String::new();
    BufReader::new(&mut garbage).read_line(&mut line).unwrap();
    assert_eq!(line, "ERROR\r\n");
    drop(greedy);
    assert_eq!(
        ask(&mut r, b"get ok k\r\n", is_end),
        ["VALUE ok 0 2", "hi", "END"]
    );
    node.shutdown().unwrap();
}

#[test]
fn a_backend_that_goes_away_gets_server_errors_then_recovers() {
    let port = free_port();
    let Some(mc) = memcached_on(port, false) else {
        return;
    };
    let (node, addr) = node_for(port, "backend_timeout_ms = 500\n");
    let mut r = BufReader::new(connect(addr));
    assert_eq!(ask(&mut r, b"set k 0 0 1\r\nv\r\n", |_| true), ["STORED"]);
    drop(mc);
    // The connection's backend is gone: the client gets SERVER_ERROR for what
    // it had asked, or a closed connection (as from memcached going away);
    // never a hang, with or without a request in flight.
    let gone = |r: &mut BufReader<TcpStream>| {
        let _ = r.get_mut().write_all(b"get nope\r\n");
        let mut all = String::new();
        let _ = r.read_to_string(&mut all);
        assert!(
            all.is_empty() || all == "SERVER_ERROR backend unavailable\r\n",
            "{all:?}"
        );
    };
    gone(&mut r);
    gone(&mut BufReader::new(connect(addr)));
    // memcached back (empty): new connections reach it; nothing stale is served.
    let _mc = memcached_on(port, false).expect("memcached restarts");
    let mut r = BufReader::new(connect(addr));
    assert_eq!(ask(&mut r, b"get k\r\n", is_end), ["END"]);
    node.shutdown().unwrap();
}

/// With several loops, loop 0 accepts and deals connections out; a timeout
/// found by whichever loop ticks must reach the loop serving the connection.
/// Three clients (one per loop) ask a backend that accepts and never answers:
/// each gets its `SERVER_ERROR` within the timeout, and the node then serves
/// new connections on every loop once a real memcached is back there.
#[test]
fn on_several_loops_every_connection_gets_its_timeout_and_its_answers() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = held.clone();
    std::thread::spawn(move || {
        for s in silent.incoming().flatten() {
            keep.lock().unwrap().push(s);
        }
    });
    let (node, addr) = node_for(port, "loops = 3\nbackend_timeout_ms = 300\n");
    let start = Instant::now();
    let mut clients: Vec<TcpStream> = (0..3).map(|_| connect(addr)).collect();
    for c in &mut clients {
        c.write_all(b"get k\r\n").unwrap();
    }
    for c in &mut clients {
        let mut all = String::new();
        c.read_to_string(&mut all)
            .expect("the node answers and closes");
        assert_eq!(all, "SERVER_ERROR backend unavailable\r\n");
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "timeouts took {:?}",
        start.elapsed()
    );
    node.shutdown().unwrap();
    let Some(mc) = memcached() else { return };
    let (node, addr) = node_for(mc.port, "loops = 3\n");
    let mut rs: Vec<BufReader<TcpStream>> = (0..6).map(|_| BufReader::new(connect(addr))).collect();
    for (i, r) in rs.iter_mut().enumerate() {
        let set = format!("set k{i} 0 0 1\r\n{i}\r\n");
        assert_eq!(ask(r, set.as_bytes(), |_| true), ["STORED"]);
    }
    for (i, r) in rs.iter_mut().enumerate() {
        let j = (i + 1) % 6;
        let got = ask(r, format!("get k{j}\r\n").as_bytes(), is_end);
        assert_eq!(
            got,
            [format!("VALUE k{j} 0 1"), j.to_string(), "END".into()]
        );
    }
    node.shutdown().unwrap();
}

/// Clients that send their requests and half-close at once: the request
/// bytes and the end of stream often arrive together, and the driver (which
/// takes a short read as having emptied the socket) must still see the end
/// and close after answering, on one loop and on several, sleeping in
/// epoll or busy-polling (`spin_us`, and `backend_spin_us` on or off).
#[test]
fn a_client_that_sends_and_half_closes_gets_its_answers_then_a_close() {
    let Some(mc) = memcached() else { return };
    for extra in [
        "loops = 1\n",
        "loops = 1\nspin_us = 0\n",
        "loops = 1\nspin_us = 0\nbackend_spin_us = 100\n",
        "loops = 2\nbackend_spin_us = 100\n",
        "loops = 2\n",
        "loops = 2\nspin_us = 300\n",
        "loops = 2\nspin_us = 300\nspin_when = \"always\"\n",
    ] {
        let (node, addr) = node_for(mc.port, extra);
        let mut r = BufReader::new(connect(addr));
        assert_eq!(ask(&mut r, b"set h 0 0 2\r\nhi\r\n", |_| true), ["STORED"]);
        let clients: Vec<_> = (0..40)
            .map(|i| {
                std::thread::spawn(move || {
                    let mut s = connect(addr);
                    // Half of them ask for a miss, so the answer comes from memcached.
                    let req = if i % 2 == 0 {
                        "get h\r\n"
                    } else {
                        "get h nope\r\n"
                    };
                    s.write_all(req.as_bytes()).unwrap();
                    s.shutdown(std::net::Shutdown::Write).unwrap();
                    let mut all = String::new();
                    s.read_to_string(&mut all).expect("answer, then close");
                    all
                })
            })
            .collect();
        for c in clients {
            assert_eq!(c.join().unwrap(), "VALUE h 0 2\r\nhi\r\nEND\r\n", "{extra}");
        }
        node.shutdown().unwrap();
    }
}

#[test]
fn a_bad_attach_config_is_named() {
    for (bad, want) in [
        ("[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"nope\"\nbackend = \"a:1\"", "unknown attach function"),
        ("[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"memcached_cache\"\nbackend = \"a\"", "backend"),
        (
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"memcached_cache\"\nbackend = \"a:1\"\ncapacity_bytes = 0",
            "capacity_bytes",
        ),
        (
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"memcached_cache\"\nbackend = \"a:1\"\nloops = 0",
            "loops must be at least 1",
        ),
        (
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"jwt\"\nbackend = \"a:1\"\nsecret = \"s\"\nloops = 65",
            "loops must be at most 64",
        ),
        (
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"memcached_cache\"\nbackend = \"a:1\"\nspin_us = 20000",
            "spin_us must be at most 10000",
        ),
        (
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"memcached_cache\"\nbackend = \"a:1\"\nspin_when = \"sometimes\"",
            "unknown variant `sometimes`",
        ),
        (
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"memcached_cache\"\nbackend = \"a:1\"\nbackend_spin_us = 10001",
            "backend_spin_us must be at most 10000",
        ),
        (
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"jwt\"\nbackend = \"a:1\"\nsecret = \"s\"\nudp = true",
            "udp does not apply to function \"jwt\"",
        ),
        (
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"memcached_cache\"\nbackend = \"a:1\"\nudp = true\nudp_max_requests = 0",
            "udp_max_requests must be at least 1",
        ),
    ] {
        let e = NodeConfig::parse(bad).unwrap_err().to_string();
        assert!(e.contains(want), "{bad}: {e}");
    }
    let c = offrac_node::attach::AttachConfig::from_spec(
        "listen=127.0.0.1:0,function=memcached_cache,backend=127.0.0.1:1,capacity_bytes=1000",
    )
    .unwrap();
    use offrac_node::spin_gate::SpinWhen;
    assert_eq!((c.spin.as_micros(), c.spin_when), (50, SpinWhen::CpuIdle));
    let always = offrac_node::attach::AttachConfig::from_spec(
        "listen=127.0.0.1:0,function=memcached_cache,backend=127.0.0.1:1,spin_us=0,spin_when=always",
    )
    .unwrap();
    assert_eq!(
        (always.spin.as_micros(), always.spin_when),
        (0, SpinWhen::Always)
    );
    let offrac_node::attach::AttachFunction::MemcachedCache(s) = c.function else {
        panic!("memcached_cache expected")
    };
    assert_eq!(s.capacity_bytes, 1000);
    assert!(offrac_node::attach::AttachConfig::from_spec("listen").is_err());
}

/// The refusals of the attached loops' spin gate, from the node's /metrics.
fn spin_refused(node: &NodeHandle) -> u64 {
    attach_metric(node, "offrac_attach_spin_refused_total")
}

/// One of the address's counters or gauges, from the node's /metrics.
fn attach_metric(node: &NodeHandle, name: &str) -> u64 {
    let body = common::metrics::metrics_body(node);
    body.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{body}"))
}

/// Without `loops` an address gets one event loop per CPU the node may use
/// (at most four), as memcached gets worker threads: one loop is a serial
/// server, the cache's bottleneck on two CPUs. Connections dealt to every
/// loop are answered; `loops` set is taken as it is.
#[test]
fn by_default_an_address_gets_a_loop_per_cpu() {
    let Some(mc) = memcached() else { return };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (extra, want) in [("", cpus.clamp(1, 4)), ("loops = 3\n", 3)] {
        let (node, addr) =
            common::attach_node_with_metrics("memcached_cache", mc.port, extra, "127.0.0.1:0");
        assert_eq!(
            attach_metric(&node, "offrac_attach_loops") as usize,
            want,
            "{extra:?}"
        );
        let mut conns: Vec<_> = (0..2 * want)
            .map(|_| BufReader::new(connect(addr)))
            .collect();
        for (i, r) in conns.iter_mut().enumerate() {
            let req = format!("set k{i} 0 0 1\r\n{}\r\nget k{i}\r\n", i % 10);
            let want_value = format!("{}", i % 10);
            assert_eq!(
                ask(r, req.as_bytes(), |l| l == "END"),
                ["STORED", &format!("VALUE k{i} 0 1"), &want_value, "END"],
                "{extra:?} connection {i}"
            );
        }
        assert_eq!(
            attach_metric(&node, "offrac_attach_connections") as usize,
            2 * want
        );
        node.shutdown().unwrap();
    }
}

/// `spin_when = "cpu_idle"` (the default): with more threads runnable than
/// the machine has CPUs, a loop inside its spin window sleeps instead of
/// taking a CPU someone else wants; with `"always"` it spins anyway. Misses
/// are answered either way.
#[test]
fn a_loop_sleeps_instead_of_spinning_while_every_cpu_is_wanted() {
    let Some(mc) = memcached() else { return };
    for (extra, refuses) in [
        ("spin_us = 10000\n", true),
        ("spin_us = 10000\nspin_when = \"always\"\n", false),
    ] {
        let (node, addr) =
            common::attach_node_with_metrics("memcached_cache", mc.port, extra, "127.0.0.1:0");
        let mut r = BufReader::new(connect(addr));
        let busy = common::busy::oversubscribe();
        for i in 0..100 {
            let req = format!("get absent{i}\r\n");
            assert_eq!(
                ask(&mut r, req.as_bytes(), |l| l == "END"),
                ["END"],
                "{extra}"
            );
        }
        drop(busy);
        let refused = spin_refused(&node);
        assert_eq!(refused > 0, refuses, "{extra}: {refused} refusals");
        // A refusing verdict holds longer with each refusal in a row, so the
        // gate reads the machine less often than it refuses; "always" never reads.
        let readings = attach_metric(&node, "offrac_attach_spin_readings_total");
        if refuses {
            assert!(
                readings > 0 && readings < refused,
                "{readings} readings, {refused} refusals"
            );
        } else {
            assert_eq!(readings, 0);
        }
        node.shutdown().unwrap();
    }
}
