//! A real memcached (Debian's package; `.ci/run` installs it) on loopback,
//! TCP only (`-U 0`, as Debian ships it) unless asked for UDP too, stopped
//! when dropped.

use super::free_port;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
/// or None (with the reason printed) where it is not installed. Panics if
/// it cannot have the port (another process holds it).
pub fn memcached_on(port: u16, udp: bool) -> Option<Memcached> {
    match start(port, udp)? {
        Ok(m) => Some(m),
        Err(why) => panic!("memcached on port {port}: {why}"),
    }
}

/// A fresh memcached on a free port (see [`memcached_on`]); when another
/// process took the port first, again on another one.
pub fn memcached() -> Option<Memcached> {
    memcached_udp(false)
}

/// [`memcached`], serving UDP on its port too when `udp`.
pub fn memcached_udp(udp: bool) -> Option<Memcached> {
    let mut last = String::new();
    for _ in 0..5 {
        match start(free_port(), udp)? {
            Ok(m) => return Some(m),
            Err(why) => {
                eprintln!("memcached: {why}; trying another port");
                last = why;
            }
        }
    }
    panic!("memcached did not start on five ports: {last}");
}

/// Starts memcached on `port`: None if it is not installed, an error if it
/// did not get the port (it exited, or what answers there is another
/// process: its `stats` pid is not our child's).
fn start(port: u16, udp: bool) -> Option<Result<Memcached, String>> {
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
    let mut m = Memcached { child, port };
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(Some(status)) = m.child.try_wait() {
            return Some(Err(format!("exited ({status}): the port is taken")));
        }
        if stat_of(port, "pid") == Some(u64::from(m.child.id())) {
            return Some(Ok(m));
        }
        if Instant::now() > deadline {
            return Some(Err("not listening as itself within 5 s".into()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One counter of memcached's `stats` on loopback `port`, or None if it
/// does not answer.
fn stat_of(port: u16, name: &str) -> Option<u64> {
    let s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut r = BufReader::new(s);
    r.get_mut().write_all(b"stats\r\n").ok()?;
    loop {
        let mut l = String::new();
        if r.read_line(&mut l).ok()? == 0 || l.trim_end() == "END" {
            return None;
        }
        if let Some(v) = l.trim_end().strip_prefix(&format!("STAT {name} ")) {
            return v.parse().ok();
        }
    }
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
