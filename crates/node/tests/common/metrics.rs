//! Reading a node's `/metrics` (published when its I/O thread goes idle).

use offrac_node::NodeHandle;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The whole text of `node`'s `/metrics`.
pub fn metrics_body(node: &NodeHandle) -> String {
    let at = node.metrics_addr.expect("metrics on");
    let mut s = TcpStream::connect(at).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    s.read_to_string(&mut body).unwrap();
    body
}

/// One sample of `node`'s `/metrics` (`name{labels}` as written there).
pub fn metric(node: &NodeHandle, sample: &str) -> u64 {
    let body = metrics_body(node);
    body.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {sample} in /metrics:\n{body}"))
}
