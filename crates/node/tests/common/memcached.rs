//! A real memcached (Debian's package; `.ci/run` installs it) on loopback,
//! TCP only (`-U 0`, as Debian ships it) unless asked for UDP too, stopped
//! when dropped.

use super::{free_port, wait_listening};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Memcached {
    child: Child,
    pub port: u16,
}

impl Drop for Memcached {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A fresh memcached on `port` (TCP, and UDP on the same port when `udp`),
/// or None (with the reason printed) where it is not installed.
pub fn memcached_on(port: u16, udp: bool) -> Option<Memcached> {
    if Command::new("memcached").arg("--version").output().is_err() {
        eprintln!("SKIP: memcached is not installed (apt-get install memcached)");
        return None;
    }
    let udp_port = if udp { port.to_string() } else { "0".into() };
    let child = Command::new("memcached")
        .args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", &udp_port])
        .args(["-t", "2", "-m", "64", "-u", "nobody"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("memcached starts");
    wait_listening(port, Duration::from_secs(5), "memcached");
    Some(Memcached { child, port })
}

/// A fresh memcached on a free port (see [`memcached_on`]).
pub fn memcached() -> Option<Memcached> {
    memcached_on(free_port(), false)
}

/// One counter of memcached's `stats` on loopback `port`, asked directly.
pub fn memcached_stat(port: u16, name: &str) -> u64 {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to memcached");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut r = BufReader::new(s);
    r.get_mut().write_all(b"stats\r\n").unwrap();
    loop {
        let mut l = String::new();
        assert!(
            r.read_line(&mut l).unwrap() > 0,
            "closed before stat {name}"
        );
        if let Some(v) = l.trim_end().strip_prefix(&format!("STAT {name} ")) {
            return v.parse().unwrap();
        }
        assert_ne!(l.trim_end(), "END", "no stat {name}");
    }
}
