//! The `jwt` attached function (an HS256 verifier) in front of real HTTP
//! servers over loopback: Python's stock `http.server` (HTTP/1.0, closes
//! after each answer) and a keep-alive HTTP/1.1 server on the same library
//! (tests/support/http_backend.py). Each test starts its own backend.

mod common;

use common::{attach_node, free_port};
use offrac_node::attach::http::token::sign;
use offrac_node::{NodeConfig, NodeHandle};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const SECRET: &str = "test secret, 32 bytes long......";

struct Backend {
    child: Child,
    port: u16,
    _dir: Option<TempDir>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The keep-alive HTTP/1.1 test backend on `port`; None when the port
/// turned out to be another process's.
fn try_echo_backend_on(port: u16) -> Option<Backend> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/support/http_backend.py");
    let child = Command::new("python3")
        .args([script, &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 starts");
    owned(child, port, None)
}

/// The backend as a [`Backend`] once `child` itself listens on `port`, else
/// (it could not bind: someone else has the port) None, the child stopped.
fn owned(mut child: Child, port: u16, dir: Option<TempDir>) -> Option<Backend> {
    if common::wait_own_listener(&mut child, port, Duration::from_secs(10)) {
        return Some(Backend {
            child,
            port,
            _dir: dir,
        });
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

/// The test backend on `port` exactly (a restart on the same port).
fn echo_backend_on(port: u16) -> Backend {
    try_echo_backend_on(port)
        .unwrap_or_else(|| panic!("the test backend could not listen on its port {port}"))
}

/// The test backend on a free port, another one if it lost the first.
fn echo_backend() -> Backend {
    (0..5)
        .find_map(|_| try_echo_backend_on(free_port()))
        .expect("the test backend never got a port of its own")
}

/// `python3 -m http.server` serving a directory with one file (on another
/// port if it lost the first).
fn stock_backend() -> Backend {
    (0..5)
        .find_map(|_| {
            let port = free_port();
            let dir =
                std::env::temp_dir().join(format!("offrac-jwt-{}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("file.txt"), "the file's contents\n").unwrap();
            let child = Command::new("python3")
                .args([
                    "-m",
                    "http.server",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                ])
                .current_dir(&dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("python3 starts");
            owned(child, port, Some(TempDir(dir)))
        })
        .expect("http.server never got a port of its own")
}

fn node_for(backend: u16, extra: &str) -> (NodeHandle, SocketAddr) {
    attach_node("jwt", backend, &format!("secret = \"{SECRET}\"\n{extra}"))
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn token(claims: Value) -> String {
    sign(
        SECRET.as_bytes(),
        &json!({"alg": "HS256", "typ": "JWT"}),
        &claims,
    )
}

fn valid() -> String {
    token(json!({"sub": "u", "exp": unix_now() + 300.0}))
}

fn connect(addr: SocketAddr) -> BufReader<TcpStream> {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    BufReader::new(s)
}

#[derive(Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Reads one answer (Content-Length, chunked, or until close).
fn read_answer(r: &mut BufReader<TcpStream>) -> Option<Answer> {
    let mut line = String::new();
    if r.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let status: u16 = line.split(' ').nth(1)?.parse().ok()?;
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).ok()?;
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':')?;
        headers.push((n.to_string(), v.trim().to_string()));
    }
    let mut a = Answer {
        status,
        headers,
        body: Vec::new(),
    };
    if a.header("transfer-encoding") == Some("chunked") {
        loop {
            let mut l = String::new();
            r.read_line(&mut l).ok()?;
            let n = usize::from_str_radix(l.trim_end(), 16).ok()?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            a.body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(n) = a.header("content-length") {
        let mut body = vec![0; n.parse().ok()?];
        r.read_exact(&mut body).ok()?;
        a.body = body;
    } else {
        r.read_to_end(&mut a.body).ok()?;
    }
    Some(a)
}

fn get(path: &str, auth: Option<&str>) -> String {
    let auth = auth.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n")
}

/// Asks the backend directly how many requests it served.
fn served(backend: &Backend) -> u64 {
    let mut r = connect(SocketAddr::from(([127, 0, 0, 1], backend.port)));
    r.get_mut()
        .write_all(get("/count", None).as_bytes())
        .unwrap();
    read_answer(&mut r).unwrap().text().parse().unwrap()
}

#[test]
fn valid_tokens_pass_and_every_other_is_answered_401_at_the_node() {
    let b = echo_backend();
    let (node, addr) = node_for(b.port, "");
    let now = unix_now();
    let hs = |c: Value| token(c);
    let alg = |alg: &str| {
        sign(
            SECRET.as_bytes(),
            &json!({"alg": alg}),
            &json!({"exp": now + 60.0}),
        )
    };
    let refused: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        (
            "forged",
            Some(sign(
                b"another key",
                &json!({"alg": "HS256"}),
                &json!({"exp": now + 60.0}),
            )),
        ),
        ("expired", Some(hs(json!({"exp": now - 10.0})))),
        (
            "not yet valid",
            Some(hs(json!({"exp": now + 60.0, "nbf": now + 30.0}))),
        ),
        (
            "alg none",
            Some(alg("none").rsplit_once('.').unwrap().0.to_string() + "."),
        ),
        ("RS256", Some(alg("RS256"))),
        ("malformed", Some("not.a.token".into())),
        ("no exp", Some(hs(json!({"sub": "u"})))),
    ];
    // All pipelined on one connection, a valid request between each refused
    // one: answers come back in order, each exactly once.
    let good = valid();
    let mut script = String::new();
    for (i, (_, t)) in refused.iter().enumerate() {
        script += &get(&format!("/ok{i}"), Some(&good));
        script += &get("/secret", t.as_deref());
    }
    let mut r = connect(addr);
    r.get_mut().write_all(script.as_bytes()).unwrap();
    for (i, (what, t)) in refused.iter().enumerate() {
        let a = read_answer(&mut r).expect("answer");
        assert_eq!((a.status, a.text()), (200, format!("hello /ok{i}")));
        assert_eq!(a.header("x-auth"), Some(format!("Bearer {good}").as_str()));
        let a = read_answer(&mut r).expect("answer");
        assert_eq!(a.status, 401, "{what}");
        let challenge = a.header("www-authenticate").expect("challenge");
        assert!(
            challenge.starts_with("Bearer realm=\"offrac\""),
            "{challenge}"
        );
        assert_eq!(
            t.is_some(),
            challenge.contains("invalid_token"),
            "{what}: {challenge}"
        );
    }
    // Only the valid ones reached the backend.
    assert_eq!(served(&b), refused.len() as u64);
    node.shutdown().unwrap();
}

/// The gate on two event loops (`loops = 2`): connections dealt to both
/// loops each get their valid request relayed and their invalid one refused.
#[test]
fn on_two_loops_each_connection_is_gated() {
    let b = echo_backend();
    let (node, addr) = node_for(b.port, "loops = 2\n");
    let good = valid();
    let expired = token(json!({"exp": unix_now() - 10.0}));
    let mut conns: Vec<_> = (0..4).map(|_| connect(addr)).collect();
    for (i, r) in conns.iter_mut().enumerate() {
        let script = get(&format!("/c{i}"), Some(&good)) + &get("/no", Some(&expired));
        r.get_mut().write_all(script.as_bytes()).unwrap();
    }
    for (i, r) in conns.iter_mut().enumerate() {
        let a = read_answer(r).expect("answer");
        assert_eq!((a.status, a.text()), (200, format!("hello /c{i}")));
        assert_eq!(read_answer(r).expect("answer").status, 401);
    }
    assert_eq!(served(&b), 4);
    node.shutdown().unwrap();
}

#[test]
fn bodies_keep_alive_and_every_response_framing_are_relayed() {
    let b = echo_backend();
    let (node, addr) = node_for(b.port, "");
    let t = valid();
    let mut r = connect(addr);
    let body = "x".repeat(100_000);
    let post = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    // The body arrives in pieces.
    let (head, rest) = post.split_at(post.len() - 50_000);
    r.get_mut().write_all(head.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    r.get_mut().write_all(rest.as_bytes()).unwrap();
    let a = read_answer(&mut r).unwrap();
    assert_eq!((a.status, a.body.len()), (200, body.len()));
    r.get_mut()
        .write_all(get("/chunked", Some(&t)).as_bytes())
        .unwrap();
    let a = read_answer(&mut r).unwrap();
    assert_eq!((a.status, a.text()), (200, "one two three".into()));
    // An answer the backend ends by closing is re-framed as chunks, so the
    // client's connection stays open.
    r.get_mut()
        .write_all(get("/close", Some(&t)).as_bytes())
        .unwrap();
    let a = read_answer(&mut r).unwrap();
    assert_eq!(a.text(), "until close");
    assert_eq!(a.header("transfer-encoding"), Some("chunked"));
    let head = format!("HEAD /h HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\n\r\n");
    r.get_mut().write_all(head.as_bytes()).unwrap();
    let mut l = String::new();
    let mut lines = Vec::new();
    while r.read_line(&mut l).unwrap() > 0 && l != "\r\n" {
        lines.push(std::mem::take(&mut l));
    }
    assert!(lines[0].starts_with("HTTP/1.1 200"), "{lines:?}");
    // A 401 to a POST whose body is sent: the body is skipped, the connection stays usable.
    let denied = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
    r.get_mut().write_all(denied.as_bytes()).unwrap();
    assert_eq!(read_answer(&mut r).unwrap().status, 401);
    r.get_mut()
        .write_all(get("/after", Some(&t)).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut r).unwrap().text(), "hello /after");
    // Connection: close is honoured.
    let close = format!(
        "GET /bye HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nConnection: close\r\n\r\n"
    );
    r.get_mut().write_all(close.as_bytes()).unwrap();
    let a = read_answer(&mut r).unwrap();
    assert_eq!(a.header("connection"), Some("close"));
    assert!(read_answer(&mut r).is_none(), "closed after");
    node.shutdown().unwrap();
}

#[test]
fn the_stock_http_server_works_through_the_node_on_one_client_connection() {
    // python3 -m http.server answers HTTP/1.0 and closes after each answer;
    // the node opens a backend connection per request and keeps the client's.
    let b = stock_backend();
    let (node, addr) = node_for(b.port, "");
    let t = valid();
    let mut r = connect(addr);
    for _ in 0..5 {
        r.get_mut()
            .write_all(get("/file.txt", Some(&t)).as_bytes())
            .unwrap();
        let a = read_answer(&mut r).unwrap();
        assert_eq!((a.status, a.text()), (200, "the file's contents\n".into()));
        assert_eq!(a.header("connection"), None);
    }
    r.get_mut()
        .write_all(get("/nope", Some(&t)).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut r).unwrap().status, 404);
    node.shutdown().unwrap();
}

#[test]
fn malformed_and_oversized_requests_are_answered_and_closed() {
    let b = echo_backend();
    let (node, addr) = node_for(b.port, "max_header_bytes = 2048\nmax_body_bytes = 1000\n");
    let t = valid();
    let cases: Vec<(String, u16)> = vec![
        ("BLAH\r\n\r\n".into(), 400),
        ("GET / HTTP/1.1\r\n\r\n".into(), 400),
        (format!("GET / HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n", "a".repeat(4000)), 431),
        (format!("POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nContent-Length: 1001\r\n\r\n"), 413),
        (format!("POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"), 411),
        ("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n".into(), 400),
    ];
    for (req, want) in cases {
        let mut r = connect(addr);
        r.get_mut().write_all(req.as_bytes()).unwrap();
        let a = read_answer(&mut r).expect("answered");
        assert_eq!(a.status, want, "{req:?}");
        assert_eq!(a.header("connection"), Some("close"));
        assert!(read_answer(&mut r).is_none(), "then closed");
    }
    assert_eq!(served(&b), 0, "none reached the backend");
    node.shutdown().unwrap();
}

#[test]
fn clients_that_leave_mid_request_reach_nothing_and_hurt_no_one() {
    let b = echo_backend();
    let (node, addr) = node_for(b.port, "");
    let t = valid();
    let full = format!("POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {t}\r\nContent-Length: 10\r\n\r\n12345");
    for cut in [10, 40, full.len()] {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&full.as_bytes()[..cut]).unwrap();
        drop(s);
    }
    // Half-closed mid-body: answered 400, nothing forwarded.
    let mut r = connect(addr);
    r.get_mut().write_all(full.as_bytes()).unwrap();
    r.get_mut().shutdown(std::net::Shutdown::Write).unwrap();
    assert_eq!(read_answer(&mut r).unwrap().status, 400);
    // One that leaves while its request is at the backend.
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(get("/slow", Some(&t)).as_bytes()).unwrap();
    drop(s);
    let mut r = connect(addr);
    r.get_mut()
        .write_all(get("/still", Some(&t)).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut r).unwrap().text(), "hello /still");
    // The backend saw /slow (sent whole) and /still, nothing cut off.
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(served(&b), 2);
    node.shutdown().unwrap();
}

#[test]
fn a_backend_that_stops_gets_502_then_recovers_on_the_same_connection() {
    let port = free_port();
    let b = echo_backend_on(port);
    let (node, addr) = node_for(port, "backend_timeout_ms = 1000\n");
    let t = valid();
    let mut r = connect(addr);
    r.get_mut()
        .write_all(get("/a", Some(&t)).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut r).unwrap().status, 200);
    // Killed with a request in flight.
    r.get_mut()
        .write_all(get("/slow", Some(&t)).as_bytes())
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(b);
    assert_eq!(read_answer(&mut r).unwrap().status, 502);
    // Down: refused connections.
    r.get_mut()
        .write_all(get("/b", Some(&t)).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut r).unwrap().status, 502);
    // A bad token is still answered 401 while the backend is down.
    r.get_mut().write_all(get("/b", None).as_bytes()).unwrap();
    assert_eq!(read_answer(&mut r).unwrap().status, 401);
    // Back.
    let _b = echo_backend_on(port);
    r.get_mut()
        .write_all(get("/c", Some(&t)).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut r).unwrap().text(), "hello /c");
    // Silent past the timeout: 504.
    r.get_mut()
        .write_all(get("/slow", Some(&t)).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut r).unwrap().status, 504);
    r.get_mut()
        .write_all(get("/d", Some(&t)).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut r).unwrap().text(), "hello /d");
    node.shutdown().unwrap();
}

#[test]
fn a_bad_jwt_config_is_named() {
    for (extra, want) in [
        ("", "exactly one of secret and secret_file"),
        ("secret = \"\"\n", "must not be empty"),
        (
            "secret = \"k\"\ncapacity_bytes = 5\n",
            "capacity_bytes does not apply",
        ),
        ("secret_file = \"/nonexistent/key\"\n", "secret_file"),
    ] {
        let text = format!(
            "[[attach]]\nlisten = \"127.0.0.1:0\"\nfunction = \"jwt\"\nbackend = \"a:1\"\n{extra}"
        );
        let e = NodeConfig::parse(&text).unwrap_err().to_string();
        assert!(e.contains(want), "{extra}: {e}");
    }
    let c = offrac_node::attach::AttachConfig::from_spec(
        "listen=127.0.0.1:0,function=jwt,backend=127.0.0.1:1,secret=k,issuer=me,require_exp=false",
    )
    .unwrap();
    let offrac_node::attach::AttachFunction::Jwt(s) = c.function else {
        panic!("jwt expected")
    };
    assert_eq!(s.policy.issuer.as_deref(), Some("me"));
    assert!(!s.policy.require_exp);
}

/// A port someone else listens on is not taken for the backend's: the
/// backend cannot bind it, and the listener that answers there is not its.
#[test]
fn a_backend_whose_port_is_taken_is_not_mistaken_for_its_listener() {
    let port = free_port();
    let other = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    assert!(common::listens_on(std::process::id(), port));
    assert!(try_echo_backend_on(port).is_none());
    drop(other);
    let b = echo_backend();
    assert!(common::listens_on(b.child.id(), b.port));
    assert!(!common::listens_on(std::process::id(), b.port));
}
