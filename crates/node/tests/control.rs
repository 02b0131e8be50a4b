//! The control plane over real loopback sockets: authenticated upload, swap,
//! list and unload; a WebAssembly function serving, trapping and looping;
//! replayed and forged requests refused; a swap under load losing nothing;
//! the library and the slot assignment surviving a restart; uploads compiled
//! off the I/O thread, so a large one does not stall other connections.

mod common;

use common::control::{now_ms, Ctl};
use offrac_client::{Client, ClientError, FunctionId, RetryPolicy, Status};
use offrac_control::examples::{compile_wat, large_wat, ADD_WAT, BAD_WAT};
use offrac_control::{wire, Op, Target, FN_CONTROL};
use offrac_node::{start, NodeConfig, NodeHandle};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &[u8] = b"0123456789abcdef";

fn node_in(dir: Option<&std::path::Path>) -> NodeHandle {
    let state = dir
        .map(|d| format!("state_dir = {:?}\n", d.display().to_string()))
        .unwrap_or_default();
    let cfg = NodeConfig::parse(&format!(
        r#"
[metrics]
listen = ""
[[slots]]
function = "echo"
[[slots]]
function = "echo"
[[slots]]
function = "logit"
[control]
{state}fuel = 10000000
[[control.tenants]]
id = 1
key = "{}"
"#,
        hex::encode(KEY)
    ))
    .expect("config");
    start(cfg, "127.0.0.1:0").expect("node starts")
}

/// Tenant 1's control connection.
fn ctl_of(n: &NodeHandle) -> Ctl {
    Ctl::new(n, 1, KEY, 0)
}

fn status(r: Result<impl std::fmt::Debug, ClientError>) -> Status {
    r.expect_err("a refusal").status().expect("a status")
}

#[test]
fn upload_swap_call_list_and_bad_modules() {
    let n = node_in(None);
    let mut ctl = ctl_of(&n);
    // Tenant 1's modules are for tenant 1's connections (a hello first).
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    c.hello(1, &wire::encode(1, now_ms(), 1 << 40, &Op::Hello, KEY))
        .unwrap();
    let add = ctl.upload(ADD_WAT);
    // Function 130 is not served yet.
    assert_eq!(status(c.call(130, 1, b"ab")), Status::UnknownFunction);
    let v = ctl.json(&Op::Swap {
        slot: 1,
        target: Target::Wasm {
            function: 130,
            digest: add,
        },
    });
    assert_eq!(v["slot"], 1);
    assert_eq!(v["previous"]["name"], "echo");
    assert!(v["total_ns"].as_u64().unwrap() > 0);
    assert_eq!(c.call(130, 1, b"ab").unwrap().payload, b"bc");
    // Echo still has slot 0.
    assert_eq!(c.call(FunctionId::Echo, 0, b"x").unwrap().payload, b"x");
    let list = ctl.json(&Op::List);
    assert_eq!(list["modules"].as_array().unwrap().len(), 1);
    assert_eq!(list["slots"][1]["kind"], "wasm");

    // Misbehaving module: explicit statuses, the slot keeps serving.
    let bad = ctl.upload(BAD_WAT);
    ctl.json(&Op::Swap {
        slot: 2,
        target: Target::Wasm {
            function: 131,
            digest: bad,
        },
    });
    assert_eq!(status(c.call(131, 1, b"x")), Status::FuelExhausted);
    assert_eq!(status(c.call(131, 2, b"x")), Status::Trapped);
    assert_eq!(status(c.call(131, 3, b"x")), Status::Trapped);
    assert_eq!(status(c.call(131, 4, b"x")), Status::BadInput);
    assert_eq!(c.call(131, 0, b"fine").unwrap().payload, b"fine");
    // Logit lost its only slot.
    assert_eq!(
        status(c.call(FunctionId::Logit, 0, &[0; 4])),
        Status::UnknownFunction
    );

    // Bad control requests.
    assert_eq!(
        status(ctl.send(&Op::Upload(b"not wasm".to_vec()))),
        Status::BadInput
    );
    let missing = Target::Wasm {
        function: 140,
        digest: [9; 32],
    };
    assert_eq!(
        status(ctl.send(&Op::Swap {
            slot: 0,
            target: missing
        })),
        Status::UnknownFunction
    );
    assert_eq!(
        status(ctl.send(&Op::Swap {
            slot: 7,
            target: Target::Builtin(0)
        })),
        Status::BadInput
    );
    // Function 130 already names another module.
    let conflict = Target::Wasm {
        function: 130,
        digest: bad,
    };
    assert_eq!(
        status(ctl.send(&Op::Swap {
            slot: 0,
            target: conflict
        })),
        Status::BadInput
    );
    assert_eq!(
        status(ctl.send(&Op::Unload {
            digest: add,
            force: false
        })),
        Status::BadInput,
        "in use"
    );
    // Back to a built-in, then the module may go.
    ctl.json(&Op::Swap {
        slot: 1,
        target: Target::Builtin(0),
    });
    assert_eq!(
        ctl.send(&Op::Unload {
            digest: add,
            force: false
        })
        .unwrap()
        .payload,
        b""
    );
    assert_eq!(status(c.call(130, 1, b"ab")), Status::UnknownFunction);
    n.shutdown().unwrap();
}

#[test]
fn forged_stale_and_replayed_requests_are_refused() {
    let n = node_in(None);
    let mut c = Client::connect(&n.addr.to_string())
        .unwrap()
        .with_retry_policy(RetryPolicy::with_max_retries(0));
    let good = wire::encode(1, now_ms(), 77, &Op::List, KEY);
    assert!(c.call(FN_CONTROL, 0, &good).is_ok());
    assert_eq!(
        status(c.call(FN_CONTROL, 0, &good)),
        Status::Unauthorized,
        "replay"
    );
    let forged = wire::encode(1, now_ms(), 78, &Op::List, b"not the key at all");
    assert_eq!(status(c.call(FN_CONTROL, 0, &forged)), Status::Unauthorized);
    let stale = wire::encode(1, now_ms() - 120_000, 79, &Op::List, KEY);
    assert_eq!(status(c.call(FN_CONTROL, 0, &stale)), Status::Unauthorized);
    let tenant = wire::encode(2, now_ms(), 80, &Op::List, KEY);
    assert_eq!(status(c.call(FN_CONTROL, 0, &tenant)), Status::Unauthorized);
    assert_eq!(status(c.call(FN_CONTROL, 0, b"short")), Status::Malformed);
    // The node serves on.
    assert_eq!(c.call(FunctionId::Echo, 0, b"x").unwrap().payload, b"x");
    n.shutdown().unwrap();
}

#[test]
fn swaps_under_load_answer_every_request() {
    let n = node_in(None);
    let mut ctl = ctl_of(&n);
    let add = ctl.upload(ADD_WAT);
    let stop = Arc::new(AtomicBool::new(false));
    let addr = n.addr.to_string();
    let loaders: Vec<_> = (0..3)
        .map(|_| {
            let (stop, addr) = (stop.clone(), addr.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&addr)
                    .unwrap()
                    .with_retry_policy(RetryPolicy::with_max_retries(0));
                c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let (mut ok, mut busy) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    match c.call(FunctionId::Echo, 0, &[1; 300]) {
                        Ok(r) => {
                            assert_eq!(r.payload, [1; 300]);
                            ok += 1
                        }
                        Err(e) if e.status() == Some(Status::Busy) => busy += 1,
                        Err(e) => panic!("request lost or wrong: {e}"),
                    }
                }
                (ok, busy)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(100));
    for i in 0..40 {
        let target = if i % 2 == 0 {
            Target::Wasm {
                function: 130,
                digest: add,
            }
        } else {
            Target::Builtin(0)
        };
        let v = ctl.json(&Op::Swap { slot: 1, target });
        assert_eq!(v["slot"], 1);
    }
    stop.store(true, Ordering::Relaxed);
    let (mut ok, mut busy) = (0, 0);
    for l in loaders {
        let (o, b) = l.join().expect("every request answered");
        ok += o;
        busy += b;
    }
    // Slot 0 always served echo: a replica took what slot 1 had queued.
    assert!(ok > 100, "ok {ok}, busy {busy}");
    n.shutdown().unwrap();
}

#[test]
fn the_library_and_slot_assignment_survive_a_restart() {
    let dir = std::env::temp_dir().join(format!("offrac-node-control-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let add = {
        let n = node_in(Some(&dir));
        let mut ctl = ctl_of(&n);
        let add = ctl.upload(ADD_WAT);
        ctl.json(&Op::Swap {
            slot: 2,
            target: Target::Wasm {
                function: 150,
                digest: add,
            },
        });
        n.shutdown().unwrap();
        add
    };
    let n = node_in(Some(&dir));
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    // Still tenant 1's module: hidden from an anonymous connection.
    assert_eq!(status(c.call(150, 2, &[1, 2])), Status::UnknownFunction);
    c.hello(1, &wire::encode(1, now_ms(), 1 << 41, &Op::Hello, KEY))
        .unwrap();
    assert_eq!(c.call(150, 2, &[1, 2]).unwrap().payload, [3, 4]);
    let list = ctl_of(&n).json(&Op::List);
    assert_eq!(list["slots"][2]["digest"], hex::encode(add));
    n.shutdown().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_large_upload_does_not_stall_other_connections() {
    let n = node_in(None);
    let module = compile_wat(&large_wat(5000)).unwrap();
    // Another connection calls echo back to back and notes each answer's time.
    let stop = Arc::new(AtomicBool::new(false));
    let pinger = {
        let (addr, stop) = (n.addr.to_string(), stop.clone());
        std::thread::spawn(move || {
            let mut c = Client::connect(&addr).unwrap();
            let mut times = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                assert_eq!(
                    c.call(FunctionId::Echo, 0, b"ping").unwrap().payload,
                    b"ping"
                );
                times.push(Instant::now());
            }
            times
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let mut ctl = ctl_of(&n);
    let t0 = Instant::now();
    let v = ctl.json(&Op::Upload(module.clone()));
    let t1 = Instant::now();
    stop.store(true, Ordering::SeqCst);
    let times = pinger.join().unwrap();
    assert_eq!(v["size"], module.len());
    let upload = t1 - t0;
    assert!(
        upload >= Duration::from_millis(150),
        "the module compiled in {upload:?}: too fast to show a stall"
    );
    // The longest pause in the echo answers while the upload was compiled:
    // the whole compile if it ran on the I/O thread.
    let mut marks: Vec<Instant> = times.into_iter().filter(|t| (t0..t1).contains(t)).collect();
    marks.insert(0, t0);
    marks.push(t1);
    let gap = marks.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert!(
        gap < upload / 3,
        "echo paused {gap:?} during a {upload:?} upload: the I/O thread was blocked"
    );
    n.shutdown().unwrap();
}

#[test]
fn uploads_beyond_the_compile_queue_are_refused_busy() {
    let n = node_in(None);
    let modules: Vec<Vec<u8>> = (0..=offrac_node::control::MAX_COMPILING)
        .map(|i| compile_wat(&large_wat(3000 + i)).unwrap())
        .collect();
    // All at once, each on its own connection: one more than the queue holds.
    let ctls: Vec<Ctl> = (0..modules.len())
        .map(|i| {
            let mut c = ctl_of(&n);
            c.nonce = 1000 * (i as u64 + 1); // a tenant's nonces are never reused
            c
        })
        .collect();
    let barrier = Arc::new(std::sync::Barrier::new(modules.len()));
    let answers: Vec<Result<Vec<u8>, ClientError>> = std::thread::scope(|s| {
        let handles: Vec<_> = ctls
            .into_iter()
            .zip(&modules)
            .map(|(mut ctl, m)| {
                let barrier = barrier.clone();
                s.spawn(move || {
                    barrier.wait();
                    ctl.send(&Op::Upload(m.clone())).map(|r| r.payload)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let busy: Vec<&ClientError> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    assert_eq!(busy.len(), 1, "one upload over the queue: {answers:?}");
    assert_eq!(busy[0].status(), Some(Status::Busy));
    // The queue frees as compiles finish: the refused one goes through now.
    let refused = answers.iter().position(|a| a.is_err()).unwrap();
    let mut ctl = ctl_of(&n);
    ctl.nonce = 10_000;
    assert_eq!(
        ctl.json(&Op::Upload(modules[refused].clone()))["size"],
        modules[refused].len()
    );
    assert_eq!(
        ctl.json(&Op::List)["modules"].as_array().unwrap().len(),
        modules.len()
    );
    n.shutdown().unwrap();
}
