//! Helpers shared by the node's integration tests (each test crate uses a
//! part of it): free ports, waiting for a listener, a node with one
//! `[[attach]]` function, and a real memcached.
#![allow(dead_code)]

pub mod memcached;

use offrac_node::{start, NodeConfig, NodeHandle};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
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

/// A node (metrics off) with one attached `function` in front of loopback
/// port `backend`; `extra` is added to the `[[attach]]` table. Returns the
/// node and the attached listener's address.
pub fn attach_node(function: &str, backend: u16, extra: &str) -> (NodeHandle, SocketAddr) {
    let text = format!(
        "[metrics]\nlisten = \"\"\n[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"{function}\"\n\
         backend = \"127.0.0.1:{backend}\"\n{extra}"
    );
    let n = start(NodeConfig::parse(&text).expect("config"), "127.0.0.1:0").expect("node starts");
    let a = n.attached[0];
    (n, a)
}
