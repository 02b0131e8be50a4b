//! Helpers shared by the node's integration tests (each test crate uses a
//! part of it): free ports, waiting for a listener, a node with one
//! `[[attach]]` function, nodes linked to each other, signed control
//! requests, and a real memcached.
#![allow(dead_code)]

pub mod busy;
pub mod collective;
pub mod control;
pub mod memcached;
pub mod metrics;

use offrac_client::Client;
use offrac_node::{start, NodeConfig, NodeHandle};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Ports handed out by [`free_port`]: below the kernel's ephemeral range
/// (32768-60999), so no `bind(0)` or outgoing connection takes one.
const PORTS: std::ops::Range<u32> = 20_000..32_000;
static NEXT_PORT: AtomicU32 = AtomicU32::new(0);

/// A loopback port free for TCP and UDP a moment ago, never the same twice
/// in one test process: ports come from a process-wide counter (starting at
/// a place drawn from the process id, so two test processes start apart)
/// in a range below the kernel's ephemeral ports. (`bind(0)` then drop, as
/// before, let two parallel tests draw the same port.) A server started on
/// it may still lose it to another process: [`memcached::memcached`]
/// retries on another port then.
pub fn free_port() -> u16 {
    let span = PORTS.end - PORTS.start;
    let _ = NEXT_PORT.compare_exchange(
        0,
        std::process::id().wrapping_mul(7919) % span + 1,
        Ordering::SeqCst,
        Ordering::SeqCst,
    );
    for _ in 0..span {
        let n = NEXT_PORT.fetch_add(1, Ordering::SeqCst);
        let port = (PORTS.start + n % span) as u16;
        let free = TcpListener::bind(("127.0.0.1", port)).is_ok()
            && UdpSocket::bind(("127.0.0.1", port)).is_ok();
        if free {
            return port;
        }
    }
    panic!("no free loopback port in {PORTS:?}");
}

/// Waits until something accepts TCP connections on loopback `port`; panics
/// naming `what` after `within`.
pub fn wait_listening(port: u16, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not listen on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` holds a socket listening on TCP `port` (the
/// listener's inode in /proc/net/tcp{,6} among the process's fds). A server
/// started on a port from [`free_port`] may have lost it to another
/// process, whose listener then answers in its place.
pub fn listens_on(pid: u32, port: u16) -> bool {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let Some(local_port) = f.get(1).and_then(|a| a.rsplit(':').next()) else {
                continue;
            };
            let listening = f.get(3) == Some(&"0A");
            if listening && u16::from_str_radix(local_port, 16) == Ok(port) {
                if let Some(inode) = f.get(9) {
                    inodes.push(format!("socket:[{inode}]"));
                }
            }
        }
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path())
            .map(|l| inodes.iter().any(|i| l.to_str() == Some(i)))
            .unwrap_or(false)
    })
}

/// Waits until `child` listens on `port` itself (see [`listens_on`]);
/// false when it exits first (it could not bind) or after `within`.
pub fn wait_own_listener(child: &mut std::process::Child, port: u16, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if listens_on(child.id(), port) {
            return true;
        }
        if !matches!(child.try_wait(), Ok(None)) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// A node (metrics off) with one attached `function` in front of loopback
/// port `backend`; `extra` is added to the `[[attach]]` table. Returns the
/// node and the attached listener's address.
pub fn attach_node(function: &str, backend: u16, extra: &str) -> (NodeHandle, SocketAddr) {
    attach_node_with_metrics(function, backend, extra, "")
}

/// [`attach_node`], serving /metrics on `metrics` (empty: off).
pub fn attach_node_with_metrics(
    function: &str,
    backend: u16,
    extra: &str,
    metrics: &str,
) -> (NodeHandle, SocketAddr) {
    let text = format!(
        "[metrics]\nlisten = \"{metrics}\"\n[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"{function}\"\n\
         backend = \"127.0.0.1:{backend}\"\n{extra}"
    );
    let n = start(NodeConfig::parse(&text).expect("config"), "127.0.0.1:0").expect("node starts");
    let a = n.attached[0];
    (n, a)
}

/// `n` nodes on free loopback ports, node `me` being device `me` with every
/// other in its device table, each configured by `body` (after its
/// `device_id`, before its `[[devices]]`); returned once every node sees all
/// its links up (panics after 5 s).
pub fn linked_nodes(n: usize, body: &str) -> Vec<NodeHandle> {
    let ports: Vec<SocketAddr> = (0..n)
        .map(|_| SocketAddr::from(([127, 0, 0, 1], free_port())))
        .collect();
    let nodes: Vec<NodeHandle> = (0..n)
        .map(|me| {
            let devices: String = (0..n)
                .filter(|&j| j != me)
                .map(|j| format!("[[devices]]\nid = {j}\naddr = \"{}\"\n", ports[j]))
                .collect();
            let text = format!("device_id = {me}\n{body}\n{devices}");
            start(
                NodeConfig::parse(&text).expect("config"),
                &ports[me].to_string(),
            )
            .expect("node starts")
        })
        .collect();
    for node in &nodes {
        let mut c = Client::connect(&node.addr.to_string()).expect("connect");
        let t = Instant::now();
        while !c.describe().expect("describe")["peers"]
            .as_array()
            .expect("peers")
            .iter()
            .all(|p| p["up"] == true)
        {
            assert!(t.elapsed() < Duration::from_secs(5), "links never came up");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    nodes
}
