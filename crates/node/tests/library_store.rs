//! The library's home in a real etcd (`docs/control.md`, "The library in the
//! cluster store"): a node started with no state directory on the same store
//! gets its modules, their owners and its slots back, and a module uploaded
//! on one node (larger than one store request, so chunked; a request payload is at most 2 MiB) is swapped into a
//! slot of another. Needs the `etcd` server binary (CI installs Debian's
//! etcd-server); `OFFRAC_ALLOW_NO_ETCD=1` skips instead of failing.

mod common;

use common::control::envelope;
use common::free_port;
use offrac_client::{Client, ClientError, RetryPolicy, Status};
use offrac_control::examples::{compile_wat, ADD_WAT};
use offrac_control::{Op, Target, FN_CONTROL};
use offrac_node::{start, NodeConfig, NodeHandle};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEY1: &[u8] = b"0123456789abcdef";
const KEY2: &[u8] = b"fedcba9876543210";

struct Etcd {
    child: Child,
    addr: String,
    dir: std::path::PathBuf,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A one-member etcd on loopback, or `None` (test skipped) if there is no
/// `etcd` binary and `OFFRAC_ALLOW_NO_ETCD=1`.
fn etcd() -> Option<Etcd> {
    let found = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("etcd").is_file()));
    if !found {
        if std::env::var("OFFRAC_ALLOW_NO_ETCD").as_deref() == Ok("1") {
            eprintln!("skipped: no `etcd` server binary on PATH");
            return None;
        }
        panic!("no `etcd` on PATH (apt-get install etcd-server, or OFFRAC_ALLOW_NO_ETCD=1)");
    }
    let (port, peer) = (free_port(), free_port());
    let addr = format!("127.0.0.1:{port}");
    let dir = std::env::temp_dir().join(format!("offrac-etcd-{}-{port}", std::process::id()));
    let child = Command::new("etcd")
        .args(["--name", "offrac-test", "--data-dir"])
        .arg(&dir)
        .args([
            "--listen-client-urls",
            &format!("http://{addr}"),
            "--advertise-client-urls",
            &format!("http://{addr}"),
            "--listen-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-advertise-peer-urls",
            &format!("http://127.0.0.1:{peer}"),
            "--initial-cluster",
            &format!("offrac-test=http://127.0.0.1:{peer}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("etcd starts");
    let e = Etcd { child, addr, dir };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&e.addr).is_err() {
        assert!(Instant::now() < deadline, "etcd did not come up");
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(e)
}

fn node(etcd: &Etcd, device: u8) -> NodeHandle {
    let cfg = NodeConfig::parse(&format!(
        r#"
device_id = {device}
[metrics]
listen = ""
[cluster]
etcd = ["{}"]
prefix = "/offrac-library-test"
[[slots]]
function = "echo"
[[slots]]
function = "echo"
[control]
[[control.tenants]]
id = 1
key = "{}"
[[control.tenants]]
id = 2
key = "{}"
"#,
        etcd.addr,
        hex::encode(KEY1),
        hex::encode(KEY2)
    ))
    .expect("config");
    start(cfg, "127.0.0.1:0").expect("node starts")
}

fn tenant(n: &NodeHandle, tenant: u16, key: &[u8]) -> Client {
    let mut c = Client::connect(&n.addr.to_string())
        .unwrap()
        .with_retry_policy(RetryPolicy::with_max_retries(0));
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.hello(tenant, &envelope(tenant, key, &Op::Hello))
        .expect("hello accepted");
    c
}

fn control(
    c: &mut Client,
    tenant: u16,
    key: &[u8],
    op: &Op,
) -> Result<serde_json::Value, ClientError> {
    let r = c.call(FN_CONTROL, 0, &envelope(tenant, key, op))?;
    Ok(serde_json::from_slice(&r.payload).unwrap_or(serde_json::Value::Null))
}

fn status<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Status {
    r.expect_err("a refusal").status().expect("a status")
}

fn digest_of(v: &serde_json::Value) -> [u8; 32] {
    hex::decode(v["digest"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap()
}

/// `add.wat` with a data segment of `bytes` bytes: a module larger than one
/// store request.
fn big_add(bytes: usize) -> Vec<u8> {
    let data: String = (0..bytes)
        .map(|i| (b'a' + (i % 23) as u8) as char)
        .collect();
    let wat = ADD_WAT.replacen(
        "(memory (export \"memory\") 1)",
        &format!("(memory (export \"memory\") 96)\n  (data (i32.const 2097152) \"{data}\")"),
        1,
    );
    compile_wat(&wat).unwrap()
}

/// Retry `f` until it gives `Ok` (another node's change reaches this one
/// through the store's watch).
fn eventually<T>(what: &str, mut f: impl FnMut() -> Result<T, ClientError>) -> T {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

#[test]
fn the_library_lives_in_the_cluster_store() {
    let Some(etcd) = etcd() else {
        return;
    };
    let big = big_add(1_800_000);
    assert!(big.len() > offrac_cluster::library::CHUNK_BYTES); // two chunks
                                                               // Node 1, no state directory: tenant 1 uploads two modules and swaps
                                                               // one into slot 1.
    let (add, large) = {
        let n = node(&etcd, 1);
        let mut one = tenant(&n, 1, KEY1);
        let add = digest_of(
            &control(
                &mut one,
                1,
                KEY1,
                &Op::Upload(compile_wat(ADD_WAT).unwrap()),
            )
            .unwrap(),
        );
        let large = digest_of(&control(&mut one, 1, KEY1, &Op::Upload(big.clone())).unwrap());
        let swap = Op::Swap {
            slot: 1,
            target: Target::Wasm {
                function: 140,
                digest: add,
            },
        };
        control(&mut one, 1, KEY1, &swap).unwrap();
        assert_eq!(one.call(140, 1, b"ab").unwrap().payload, b"bc");
        // The store's writes are asynchronous; a node that stops writes
        // what it queued before it goes.
        n.shutdown().unwrap();
        (add, large)
    };
    // Node 1 again, still with no state directory: its modules, their
    // owner and its slot come back from the store.
    let n1 = node(&etcd, 1);
    let mut one = tenant(&n1, 1, KEY1);
    assert_eq!(one.call(140, 1, b"ab").unwrap().payload, b"bc");
    let list = control(&mut one, 1, KEY1, &Op::List).unwrap();
    let mut mods: Vec<&str> = list["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["digest"].as_str().unwrap())
        .collect();
    mods.sort();
    let mut want = vec![hex::encode(add), hex::encode(large)];
    want.sort();
    assert_eq!(mods, want, "{list}");
    assert_eq!(list["slots"][1]["digest"], hex::encode(add), "{list}");
    let mut two = tenant(&n1, 2, KEY2);
    assert_eq!(status(two.call(140, 1, b"ab")), Status::UnknownFunction);
    assert!(control(&mut two, 2, KEY2, &Op::List).unwrap()["modules"]
        .as_array()
        .unwrap()
        .is_empty());
    // Node 2 of the same cluster: tenant 1 swaps the large module, uploaded
    // on node 1, into one of node 2's slots; tenant 2 cannot.
    let n2 = node(&etcd, 2);
    let mut two = tenant(&n2, 2, KEY2);
    let take = |digest| Op::Swap {
        slot: 0,
        target: Target::Wasm {
            function: 141,
            digest,
        },
    };
    assert_eq!(
        status(control(&mut two, 2, KEY2, &take(large))),
        Status::UnknownFunction
    );
    let mut one2 = tenant(&n2, 1, KEY1);
    eventually("swap on node 2", || {
        control(&mut one2, 1, KEY1, &take(large))
    });
    assert_eq!(one2.call(141, 2, b"ab").unwrap().payload, b"cd");
    assert_eq!(status(two.call(141, 2, b"ab")), Status::UnknownFunction);
    // A module uploaded on node 2 appears on node 1.
    let fresh = big_add(10);
    let fresh = digest_of(&control(&mut one2, 1, KEY1, &Op::Upload(fresh)).unwrap());
    eventually("the module uploaded on node 2, on node 1", || {
        let list = control(&mut one, 1, KEY1, &Op::List)?;
        let seen = list["modules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["digest"] == hex::encode(fresh));
        if seen {
            Ok(())
        } else {
            Err(ClientError::Io(std::io::Error::other("not yet")))
        }
    });
    n2.shutdown().unwrap();
    n1.shutdown().unwrap();
}
