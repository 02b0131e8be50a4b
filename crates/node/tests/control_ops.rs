//! Control operations over several slots, over real loopback sockets
//! (`docs/control.md`, "Forced unload", "Replicate"): a forced unload of a
//! module two slots run, under load, answers every call and leaves the slots
//! on their configured built-ins; a replicate is all or nothing over the
//! spare slots and keeps to the tenant's slot quota; bad requests (another
//! tenant's module, an unknown digest, a wrong key, too few spares) are
//! refused with their documented status and change nothing.

mod common;

use common::control::{now_ms, Ctl};
use offrac_client::{Client, ClientError, FunctionId, RetryPolicy, Status};
use offrac_control::examples::{large_wat, ADD_WAT};
use offrac_control::{wire, Op, Target};
use offrac_node::{start, NodeConfig, NodeHandle};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: [&[u8]; 2] = [b"0123456789abcdef", b"fedcba9876543210"];

fn node(slots: &str, extra: &str) -> NodeHandle {
    let cfg = NodeConfig::parse(&format!(
        r#"
[metrics]
listen = ""
{slots}
{extra}
[control]
fuel = 10000000
[[control.tenants]]
id = 1
key = "{}"
max_slots = {}
[[control.tenants]]
id = 2
key = "{}"
"#,
        hex::encode(KEYS[0]),
        if extra.is_empty() { 8 } else { 1 },
        hex::encode(KEYS[1])
    ))
    .expect("config");
    start(cfg, "127.0.0.1:0").expect("node starts")
}

/// Tenant `tenant`'s control connection (tenant 1 or 2, with its key).
fn ctl_of(n: &NodeHandle, tenant: u16) -> Ctl {
    Ctl::new(
        n,
        tenant,
        KEYS[tenant as usize - 1],
        tenant as u64 * 1_000_000,
    )
}

/// The refusal's status and detail.
fn refusal(r: Result<offrac_client::Reply, ClientError>) -> (Status, u64) {
    match r {
        Ok(r) => panic!("accepted: {}", String::from_utf8_lossy(&r.payload)),
        Err(ClientError::Status { status, detail, .. }) => (status, detail),
        Err(e) => panic!("no answer: {e}"),
    }
}

fn tenant_client(n: &NodeHandle, nonce: u64) -> Client {
    let mut c = Client::connect(&n.addr.to_string())
        .unwrap()
        .with_retry_policy(RetryPolicy::with_max_retries(0));
    c.hello(1, &wire::encode(1, now_ms(), nonce, &Op::Hello, KEYS[0]))
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn unload(digest: [u8; 32], force: bool) -> Op {
    Op::Unload { digest, force }
}

#[test]
fn a_forced_unload_under_load_swaps_the_module_out_and_answers_every_call() {
    let n = node(
        "[[slots]]\nfunction = \"echo\"\n[[slots]]\nfunction = \"echo\"\n[[slots]]\nfunction = \"logit\"",
        "",
    );
    let mut ctl = ctl_of(&n, 1);
    let add = ctl.upload(ADD_WAT);
    let module = Target::Wasm {
        function: 130,
        digest: add,
    };
    for slot in [1, 2] {
        ctl.json(&Op::Swap {
            slot,
            target: module,
        });
    }
    // Three callers of the module, one call at a time each, until stopped;
    // a call that gets no answer (or a wrong one) fails the test.
    // The counts are shared so the test waits for progress, not for a time
    // window (a loaded machine may run few calls in 150 ms).
    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[AtomicU64; 3]> = Arc::new(Default::default()); // ok, busy, unknown function
    let loaders: Vec<_> = (0..3)
        .map(|i| {
            let (stop, counts) = (stop.clone(), counts.clone());
            let mut c = tenant_client(&n, 1 << 40 | i);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let k = match c.call(130, 1, &[1; 300]) {
                        Ok(r) => {
                            assert_eq!(r.payload, [2; 300]);
                            0
                        }
                        Err(e) if e.status() == Some(Status::Busy) => 1,
                        Err(e) if e.status() == Some(Status::UnknownFunction) => 2,
                        Err(e) => panic!("call lost or wrong: {e}"),
                    };
                    counts[k].fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let wait_for = |k: usize, n: u64| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while counts[k].load(Ordering::Relaxed) < n {
            assert!(Instant::now() < deadline, "count {k} never reached {n}");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_for(0, 50);
    // Refusals first: nothing changes.
    assert_eq!(
        refusal(ctl.send(&unload(add, false))).0,
        Status::BadInput,
        "in use, no force"
    );
    let mut other = ctl_of(&n, 2);
    assert_eq!(
        refusal(other.send(&unload(add, true))).0,
        Status::UnknownFunction,
        "another tenant's module"
    );
    assert_eq!(
        refusal(ctl.send(&unload([9; 32], true))).0,
        Status::UnknownFunction,
        "unknown digest"
    );
    let mut forged = ctl_of(&n, 1);
    forged.key = b"not the key at all".to_vec();
    assert_eq!(
        refusal(forged.send(&unload(add, true))).0,
        Status::Unauthorized
    );
    assert_eq!(ctl.json(&Op::List)["slots"][1]["kind"], "wasm");
    // The forced unload: both slots back on their configured built-ins.
    let v = ctl.json(&unload(add, true));
    let swapped = v["swapped_out"].as_array().unwrap();
    assert_eq!(swapped.len(), 2, "{v}");
    assert_eq!(v["digest"], hex::encode(add));
    // Calls after the unload are answered UNKNOWN_FUNCTION.
    wait_for(2, 3);
    stop.store(true, Ordering::Relaxed);
    for l in loaders {
        l.join().expect("every call answered");
    }
    let total = counts.each_ref().map(|c| c.load(Ordering::Relaxed));
    assert!(total[0] >= 50, "ok/busy/unknown {total:?}");
    let list = ctl.json(&Op::List);
    assert_eq!(list["modules"], serde_json::json!([]), "{list}");
    assert_eq!(list["slots"][1]["name"], "echo", "{list}");
    assert_eq!(list["slots"][2]["name"], "logit", "{list}");
    // The module is gone: it cannot be swapped in again.
    assert_eq!(
        refusal(ctl.send(&Op::Swap {
            slot: 1,
            target: module
        }))
        .0,
        Status::UnknownFunction
    );
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    assert_eq!(c.call(FunctionId::Echo, 0, b"x").unwrap().payload, b"x");
    n.shutdown().unwrap();
}

fn roles(c: &mut Client) -> Vec<String> {
    let d = c.describe().expect("describe");
    d["autoscale"]["slots"]
        .as_array()
        .expect("the autoscaler runs")
        .iter()
        .map(|r| r["role"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn replicate_takes_spares_all_or_nothing_within_the_quota() {
    // SPIN and ECHO fixed, two spare slots; the policy never acts on its
    // own here (its grow streak outlasts the test). Tenant 1: one slot.
    let n = node(
        "[[slots]]\nfunction = \"spin\"\n[[slots]]\nfunction = \"echo\"\n\
         [[slots]]\nfunction = \"echo\"\nspare = true\n[[slots]]\nfunction = \"echo\"\nspare = true",
        "[autoscale]\nperiod_ms = 1000\ngrow_periods = 1000000\nshrink_periods = 1000000",
    );
    let mut probe = Client::connect(&n.addr.to_string()).unwrap();
    let spin = Target::Builtin(FunctionId::Spin.id());
    let replicate = |n: u16, target: Target| Op::Replicate { n, target };
    let mut ctl = ctl_of(&n, 1);
    let add = ctl.upload(ADD_WAT);
    let module = Target::Wasm {
        function: 131,
        digest: add,
    };
    let mut other = ctl_of(&n, 2);
    let theirs = other.upload(&large_wat(3));
    let mut forged = ctl_of(&n, 1);
    forged.key = b"not the key at all".to_vec();
    assert_eq!(
        refusal(forged.send(&replicate(1, spin))).0,
        Status::Unauthorized
    );
    assert_eq!(refusal(ctl.send(&replicate(3, spin))), (Status::Busy, 2));
    assert_eq!(
        refusal(ctl.send(&replicate(2, module))),
        (Status::QuotaExceeded, 1)
    );
    let foreign = Target::Wasm {
        function: 132,
        digest: theirs,
    };
    assert_eq!(
        refusal(ctl.send(&replicate(1, foreign))).0,
        Status::UnknownFunction
    );
    let unknown = Target::Wasm {
        function: 132,
        digest: [9; 32],
    };
    assert_eq!(
        refusal(ctl.send(&replicate(1, unknown))).0,
        Status::UnknownFunction
    );
    assert_eq!(roles(&mut probe), ["fixed", "fixed", "spare", "spare"]);
    // One instance of the module: its slot quota allows one.
    let v = ctl.json(&replicate(1, module));
    assert_eq!(v["slots"], serde_json::json!([2]), "{v}");
    assert_eq!(v["function"], 131);
    let mut c = tenant_client(&n, 1 << 41);
    assert_eq!(c.call(131, 1, b"ab").unwrap().payload, b"bc");
    assert_eq!(
        refusal(ctl.send(&replicate(1, module))),
        (Status::QuotaExceeded, 1)
    );
    // Two SPIN replicas asked, one spare left: nothing happens.
    assert_eq!(refusal(ctl.send(&replicate(2, spin))), (Status::Busy, 1));
    assert_eq!(roles(&mut probe), ["fixed", "fixed", "fixed", "spare"]);
    let v = ctl.json(&replicate(1, spin));
    assert_eq!(v["slots"], serde_json::json!([3]), "{v}");
    assert_eq!(v["swaps"][0]["target"]["name"], "spin", "{v}");
    assert_eq!(roles(&mut probe), ["fixed"; 4]);
    // A forced unload of the module gives its slot back as spare.
    ctl.json(&unload(add, true));
    assert_eq!(roles(&mut probe), ["fixed", "fixed", "spare", "fixed"]);
    let v = ctl.json(&replicate(1, spin));
    assert_eq!(v["slots"], serde_json::json!([2]), "{v}");
    let list = ctl.json(&Op::List);
    let names: Vec<&str> = (0..4)
        .map(|i| list["slots"][i]["name"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(names, ["spin", "echo", "spin", "spin"], "{list}");
    // Each SPIN slot serves: three calls at once are all answered.
    std::thread::scope(|s| {
        for _ in 0..3 {
            let addr = n.addr.to_string();
            s.spawn(move || {
                let mut c = Client::connect(&addr).unwrap();
                c.call(FunctionId::Spin, 1_000, b"x")
                    .expect("spin answered");
            });
        }
    });
    // Shrink SPIN's spare slots to none: both go back; slot 0 stays.
    let shrink = Op::Shrink {
        keep: 0,
        function: FunctionId::Spin.id(),
    };
    let v = ctl.json(&shrink);
    assert_eq!(v["slots"], serde_json::json!([3, 2]), "{v}");
    assert_eq!(roles(&mut probe), ["fixed", "fixed", "spare", "spare"]);
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    c.call(FunctionId::Spin, 1_000, b"x")
        .expect("slot 0 still spins");
    assert_eq!(ctl.json(&shrink)["slots"], serde_json::json!([]));
    n.shutdown().unwrap();
}

#[test]
fn resize_moves_the_slots_to_a_configured_template() {
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
[[control.tenants]]
id = 1
key = "{}"
[[control.tenants]]
id = 2
key = "{}"
[[control.templates]]
name = "sorting"
slots = ["echo", "topk", "minmax"]
[[control.templates]]
name = "start"
slots = ["echo", "echo", "logit"]
"#,
        hex::encode(KEYS[0]),
        hex::encode(KEYS[1])
    ))
    .expect("config");
    let n = start(cfg, "127.0.0.1:0").expect("node starts");
    let mut ctl = ctl_of(&n, 1);
    let resize = |name: &str| Op::Resize(name.into());
    assert_eq!(
        refusal(ctl.send(&resize("nope"))).0,
        Status::BadInput,
        "unknown template"
    );
    let mut forged = ctl_of(&n, 1);
    forged.key = b"not the key at all".to_vec();
    assert_eq!(
        refusal(forged.send(&resize("sorting"))).0,
        Status::Unauthorized
    );
    let names = |ctl: &mut Ctl| -> Vec<String> {
        let list = ctl.json(&Op::List);
        (0..3)
            .map(|i| list["slots"][i]["name"].as_str().unwrap_or("-").to_string())
            .collect()
    };
    assert_eq!(names(&mut ctl), ["echo", "echo", "logit"]);
    let v = ctl.json(&resize("sorting"));
    assert_eq!(v["slots"], serde_json::json!([1, 2]), "{v}");
    assert_eq!(v["template"], "sorting");
    assert_eq!(names(&mut ctl), ["echo", "topk", "minmax"]);
    let mut c = Client::connect(&n.addr.to_string()).unwrap();
    assert_eq!(c.call(FunctionId::Echo, 0, b"x").unwrap().payload, b"x");
    assert_eq!(
        refusal(c.call(FunctionId::Logit, 0, &[0; 8])).0,
        Status::UnknownFunction,
        "logit has no slot in this template"
    );
    // Already there: nothing to swap.
    assert_eq!(ctl.json(&resize("sorting"))["slots"], serde_json::json!([]));
    // Tenant 2's module in slot 2: tenant 1 may not resize it away.
    let mut other = ctl_of(&n, 2);
    let add = other.upload(ADD_WAT);
    other.json(&Op::Swap {
        slot: 2,
        target: Target::Wasm {
            function: 133,
            digest: add,
        },
    });
    assert_eq!(refusal(ctl.send(&resize("start"))), (Status::BadInput, 2));
    // Tenant 2 may: back to the start arrangement.
    let v = other.json(&resize("start"));
    assert_eq!(v["slots"], serde_json::json!([1, 2]), "{v}");
    assert_eq!(names(&mut ctl), ["echo", "echo", "logit"]);
    n.shutdown().unwrap();
}

/// A forced unload whose slot is busy past the drain timeout (a looping call
/// that runs until its fuel is gone) is rolled back and answered `TIMEOUT`
/// (detail = the slot): the module stays and still serves; the looping call
/// gets its own answer (`FUEL_EXHAUSTED`); once the slot is free the unload
/// goes through.
#[test]
fn a_forced_unload_that_outlasts_the_drain_timeout_keeps_the_module() {
    let cfg = NodeConfig::parse(&format!(
        r#"
[metrics]
listen = ""
[[slots]]
function = "echo"
[[slots]]
function = "echo"
[control]
drain_timeout_ms = 20
fuel = 2000000000
[[control.tenants]]
id = 1
key = "{}"
"#,
        hex::encode(KEYS[0])
    ))
    .expect("config");
    let n = start(cfg, "127.0.0.1:0").expect("node starts");
    let mut ctl = ctl_of(&n, 1);
    let bad = ctl.upload(offrac_control::examples::BAD_WAT);
    ctl.json(&Op::Swap {
        slot: 1,
        target: Target::Wasm {
            function: 141,
            digest: bad,
        },
    });
    // A call that loops until its (large) fuel budget is gone.
    let mut looper = tenant_client(&n, 1 << 42);
    let looping = std::thread::spawn(move || {
        let t = std::time::Instant::now();
        let r = looper.call(141, 1, b"x");
        (r.map(|r| r.payload), t.elapsed())
    });
    std::thread::sleep(Duration::from_millis(30));
    let answer = refusal(ctl.send(&unload(bad, true)));
    let (r, took) = looping.join().unwrap();
    assert!(
        took > Duration::from_millis(60),
        "the loop ended after {took:?}: too soon to hold the slot past the drain timeout"
    );
    assert_eq!(answer, (Status::Timeout, 1), "rolled back");
    assert_eq!(
        r.expect_err("the loop is stopped").status(),
        Some(Status::FuelExhausted)
    );
    let list = ctl.json(&Op::List);
    assert_eq!(list["modules"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["slots"][1]["kind"], "wasm", "{list}");
    let mut c = tenant_client(&n, 1 << 43);
    assert_eq!(c.call(141, 0, b"ok").unwrap().payload, b"ok");
    let v = ctl.json(&unload(bad, true));
    assert_eq!(v["swapped_out"].as_array().unwrap().len(), 1, "{v}");
    n.shutdown().unwrap();
}
