//! Tenants over real loopback sockets (`docs/control.md`, "Tenants"): the
//! authenticated hello, anonymous connections refused, a tenant's modules
//! hidden from the others, quotas (requests, pool bytes, slots) answered
//! `QUOTA_EXCEEDED`, and the DRR share of a slot two tenants flood.

mod common;

use common::control::envelope;
use offrac_client::{Client, ClientError, FunctionId, RetryPolicy, Status};
use offrac_control::examples::{compile_wat, large_wat, ADD_WAT};
use offrac_control::{Op, Target, FN_CONTROL};
use offrac_node::{start, NodeConfig, NodeHandle};
use std::time::Duration;

const KEY1: &[u8] = b"0123456789abcdef";
const KEY2: &[u8] = b"fedcba9876543210";

fn node(extra: &str, tenants: &str) -> NodeHandle {
    let cfg = NodeConfig::parse(&format!(
        r#"
[metrics]
listen = ""
[[slots]]
function = "spin"
[[slots]]
function = "echo"
[control]
{extra}
[[control.tenants]]
id = 1
key = "{}"
{tenants}
[[control.tenants]]
id = 2
key = "{}"
"#,
        hex::encode(KEY1),
        hex::encode(KEY2)
    ))
    .expect("config");
    start(cfg, "127.0.0.1:0").expect("node starts")
}

fn client(n: &NodeHandle) -> Client {
    let mut c = Client::connect(&n.addr.to_string())
        .unwrap()
        .with_retry_policy(RetryPolicy::with_max_retries(0));
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c
}

fn tenant_client(n: &NodeHandle, tenant: u16, key: &[u8]) -> Client {
    let mut c = client(n);
    c.hello(tenant, &envelope(tenant, key, &Op::Hello))
        .expect("hello accepted");
    c
}

fn status<T: std::fmt::Debug>(r: Result<T, ClientError>) -> Status {
    r.expect_err("a refusal").status().expect("a status")
}

/// Tenant 1 uploads the `add` example module; its digest.
fn upload_add(one: &mut Client) -> [u8; 32] {
    let module = compile_wat(ADD_WAT).unwrap();
    let up = one
        .call(FN_CONTROL, 0, &envelope(1, KEY1, &Op::Upload(module)))
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&up.payload).unwrap();
    hex::decode(v["digest"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap()
}

#[test]
fn hello_attributes_and_anonymous_connections_are_refused() {
    let n = node("anonymous = \"refuse\"", "");
    let mut anon = client(&n);
    assert_eq!(
        status(anon.call(FunctionId::Echo, 0, b"x")),
        Status::Unauthorized
    );
    // A forged, replayed or unknown-tenant hello is refused; the connection stays anonymous.
    let forged = envelope(1, b"not the key at all", &Op::Hello);
    assert_eq!(status(anon.hello(1, &forged)), Status::Unauthorized);
    let good = envelope(1, KEY1, &Op::Hello);
    assert_eq!(
        status(anon.hello(9, &envelope(9, KEY1, &Op::Hello))),
        Status::Unauthorized
    );
    anon.set_tenant(0);
    assert_eq!(
        status(anon.call(FunctionId::Echo, 0, b"x")),
        Status::Unauthorized
    );
    let mut c = client(&n);
    c.hello(1, &good).unwrap();
    assert_eq!(c.call(FunctionId::Echo, 0, b"hi").unwrap().payload, b"hi");
    let mut again = client(&n);
    assert_eq!(status(again.hello(1, &good)), Status::Unauthorized); // replay
                                                                     // A request naming another tenant than the connection's hello.
    c.set_tenant(2);
    assert_eq!(
        status(c.call(FunctionId::Echo, 0, b"x")),
        Status::Unauthorized
    );
    // A connection belongs to one tenant.
    assert_eq!(
        status(c.hello(2, &envelope(2, KEY2, &Op::Hello))),
        Status::BadInput
    );
    c.set_tenant(1);
    assert_eq!(c.call(FunctionId::Echo, 0, b"ok").unwrap().payload, b"ok");
    n.shutdown().unwrap();
}

#[test]
fn a_tenants_module_is_hidden_from_the_others() {
    let n = node("", "");
    let mut one = tenant_client(&n, 1, KEY1);
    let digest = upload_add(&mut one);
    let target = Target::Wasm {
        function: 140,
        digest,
    };
    // Tenant 2 cannot swap in tenant 1's module: it is not in its library.
    let mut two = tenant_client(&n, 2, KEY2);
    let swap = Op::Swap { slot: 1, target };
    assert_eq!(
        status(two.call(FN_CONTROL, 0, &envelope(2, KEY2, &swap))),
        Status::UnknownFunction
    );
    let list = two
        .call(FN_CONTROL, 0, &envelope(2, KEY2, &Op::List))
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&list.payload).unwrap();
    assert_eq!(list["modules"].as_array().unwrap().len(), 0);
    one.call(FN_CONTROL, 0, &envelope(1, KEY1, &swap)).unwrap();
    assert_eq!(one.call(140, 1, b"ab").unwrap().payload, b"bc");
    // Tenant 2 and anonymous callers see no function 140; the built-ins stay shared.
    assert_eq!(status(two.call(140, 1, b"ab")), Status::UnknownFunction);
    assert_eq!(
        status(client(&n).call(140, 1, b"ab")),
        Status::UnknownFunction
    );
    assert_eq!(two.call(FunctionId::Spin, 1, b"s").unwrap().payload, b"s");
    // Nor may tenant 2 swap that slot away from tenant 1.
    let away = Op::Swap {
        slot: 1,
        target: Target::Builtin(0),
    };
    assert_eq!(
        status(two.call(FN_CONTROL, 0, &envelope(2, KEY2, &away))),
        Status::BadInput
    );
    n.shutdown().unwrap();
}

#[test]
fn quotas_are_answered_quota_exceeded_and_nothing_is_lost() {
    let n = node("", "max_inflight = 4\nmax_pool_bytes = 100000");
    let mut c = tenant_client(&n, 1, KEY1);
    // Ten 20 ms requests pipelined: four are admitted, the rest refused at once.
    for id in 0..10u64 {
        c.send(id, FunctionId::Spin, 20_000, b"p").unwrap();
    }
    let mut by_status = std::collections::HashMap::new();
    for _ in 0..10 {
        let (h, _) = c.recv().unwrap();
        *by_status.entry(h.status).or_insert(0) += 1;
        if h.status == Status::QuotaExceeded {
            assert_eq!(h.detail, 4);
        }
    }
    assert_eq!(by_status.get(&Status::Ok), Some(&4), "{by_status:?}");
    assert_eq!(
        by_status.get(&Status::QuotaExceeded),
        Some(&6),
        "{by_status:?}"
    );
    // Reassembly bytes: one request larger than the tenant's pool quota.
    let big = vec![7u8; 150_000];
    assert_eq!(
        status(c.call(FunctionId::Echo, 0, &big)),
        Status::QuotaExceeded
    );
    // Tenant 2 has no quota, and tenant 1 is served again once answered.
    let mut two = tenant_client(&n, 2, KEY2);
    assert_eq!(
        two.call(FunctionId::Echo, 0, &big).unwrap().payload.len(),
        big.len()
    );
    assert_eq!(c.call(FunctionId::Echo, 0, b"ok").unwrap().payload, b"ok");
    n.shutdown().unwrap();
}

/// Two tenants with weights 3 and 1 flood the one spin slot with 1 ms
/// requests: execution time is shared 3:1, and each gets answers.
#[test]
fn a_shared_slot_is_shared_by_weight() {
    let n = node("", "weight = 3");
    let addr = n.addr.to_string();
    let run = |tenant: u16, key: &'static [u8], clients: usize| {
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut c = Client::connect(&addr).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            c.hello(tenant, &envelope(tenant, key, &Op::Hello)).unwrap();
            let end = std::time::Instant::now() + Duration::from_millis(1500);
            let (mut next, mut outstanding, mut exec_ns) = (0u64, 0, 0u64);
            while std::time::Instant::now() < end || outstanding > 0 {
                while outstanding < clients && std::time::Instant::now() < end {
                    c.send(next, FunctionId::Spin, 1_000, b"x").unwrap();
                    next += 1;
                    outstanding += 1;
                }
                let (h, _) = c.recv().unwrap();
                assert_eq!(h.status, Status::Ok);
                outstanding -= 1;
                exec_ns += h.exec_ns;
            }
            exec_ns
        })
    };
    let heavy = run(1, KEY1, 8);
    let light = run(2, KEY2, 8);
    let (a, b) = (heavy.join().unwrap(), light.join().unwrap());
    let share = a as f64 / (a + b) as f64;
    assert!(
        (0.65..=0.85).contains(&share),
        "weight 3 of 4 got {share:.3} of the slot ({a} vs {b} ns)"
    );
    n.shutdown().unwrap();
}

#[test]
fn a_tenants_modules_occupy_at_most_max_slots() {
    let n = node("", "max_slots = 1");
    let mut one = tenant_client(&n, 1, KEY1);
    let digest = upload_add(&mut one);
    let wasm = |slot: u16| Op::Swap {
        slot,
        target: Target::Wasm {
            function: 140,
            digest,
        },
    };
    one.call(FN_CONTROL, 0, &envelope(1, KEY1, &wasm(1)))
        .unwrap();
    // A second slot (a replica) is over tenant 1's quota of one: refused,
    // with the limit as detail, and slot 0 keeps serving spin.
    let over = one
        .call(FN_CONTROL, 0, &envelope(1, KEY1, &wasm(0)))
        .expect_err("over the slot quota");
    assert_eq!(over.status(), Some(Status::QuotaExceeded));
    assert!(over.to_string().contains("(detail 1)"), "{over}");
    assert_eq!(one.call(FunctionId::Spin, 1, b"s").unwrap().payload, b"s");
    assert_eq!(one.call(140, 1, b"ab").unwrap().payload, b"bc");
    // The slot tenant 1 holds it may swap again (here, back to echo).
    let back = Op::Swap {
        slot: 1,
        target: Target::Builtin(FunctionId::Echo.id()),
    };
    one.call(FN_CONTROL, 0, &envelope(1, KEY1, &back)).unwrap();
    // Its slot given back, tenant 1 may take another.
    one.call(FN_CONTROL, 0, &envelope(1, KEY1, &wasm(0)))
        .unwrap();
    assert_eq!(one.call(140, 1, b"ab").unwrap().payload, b"bc");
    n.shutdown().unwrap();
}

/// A fresh state directory for one test.
fn state_dir(name: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("offrac-tenancy-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let line = format!("state_dir = {:?}", dir.display().to_string());
    (dir, line)
}

fn control_json(c: &mut Client, tenant: u16, key: &[u8], op: &Op) -> serde_json::Value {
    let r = c.call(FN_CONTROL, 0, &envelope(tenant, key, op)).unwrap();
    serde_json::from_slice(&r.payload).unwrap()
}

fn digests(list: &serde_json::Value) -> Vec<String> {
    list["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["digest"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn module_and_slot_owners_survive_a_restart() {
    let (dir, state) = state_dir("owners");
    let (add, kept) = {
        let n = node(&state, "");
        let mut one = tenant_client(&n, 1, KEY1);
        let add = upload_add(&mut one);
        let swap = Op::Swap {
            slot: 1,
            target: Target::Wasm {
                function: 140,
                digest: add,
            },
        };
        one.call(FN_CONTROL, 0, &envelope(1, KEY1, &swap)).unwrap();
        // A second module of tenant 1, in the library only.
        let v = control_json(
            &mut one,
            1,
            KEY1,
            &Op::Upload(compile_wat(&large_wat(3)).unwrap()),
        );
        let kept: [u8; 32] = hex::decode(v["digest"].as_str().unwrap())
            .unwrap()
            .try_into()
            .unwrap();
        n.shutdown().unwrap();
        (add, kept)
    };
    let n = node(&state, "");
    // Tenant 2 sees neither module nor the slot's function, and cannot
    // swap, unload or call them.
    let mut two = tenant_client(&n, 2, KEY2);
    let list = control_json(&mut two, 2, KEY2, &Op::List);
    assert!(digests(&list).is_empty(), "{list}");
    assert_eq!(list["slots"][1]["kind"], "another tenant's", "{list}");
    let away = Op::Swap {
        slot: 1,
        target: Target::Builtin(FunctionId::Echo.id()),
    };
    assert_eq!(
        status(two.call(FN_CONTROL, 0, &envelope(2, KEY2, &away))),
        Status::BadInput
    );
    for d in [add, kept] {
        let take = Op::Swap {
            slot: 0,
            target: Target::Wasm {
                function: 141,
                digest: d,
            },
        };
        assert_eq!(
            status(two.call(FN_CONTROL, 0, &envelope(2, KEY2, &take))),
            Status::UnknownFunction
        );
        assert_eq!(
            status(two.call(
                FN_CONTROL,
                0,
                &envelope(
                    2,
                    KEY2,
                    &Op::Unload {
                        digest: d,
                        force: false
                    }
                )
            )),
            Status::UnknownFunction
        );
    }
    assert_eq!(status(two.call(140, 1, b"ab")), Status::UnknownFunction);
    assert_eq!(
        status(client(&n).call(140, 1, b"ab")),
        Status::UnknownFunction
    );
    // Tenant 1 still sees, calls and unloads its own.
    let mut one = tenant_client(&n, 1, KEY1);
    let list = control_json(&mut one, 1, KEY1, &Op::List);
    let mut mine = digests(&list);
    mine.sort();
    let mut want = vec![hex::encode(add), hex::encode(kept)];
    want.sort();
    assert_eq!(mine, want, "{list}");
    assert_eq!(list["slots"][1]["digest"], hex::encode(add), "{list}");
    assert_eq!(one.call(140, 1, b"ab").unwrap().payload, b"bc");
    one.call(
        FN_CONTROL,
        0,
        &envelope(
            1,
            KEY1,
            &Op::Unload {
                digest: kept,
                force: false,
            },
        ),
    )
    .unwrap();
    n.shutdown().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_assignment_not_restored_leaves_no_owner_behind() {
    let (dir, state) = state_dir("stale");
    let add = {
        let n = node(&state, "");
        let mut one = tenant_client(&n, 1, KEY1);
        let add = upload_add(&mut one);
        let swap = Op::Swap {
            slot: 1,
            target: Target::Wasm {
                function: 140,
                digest: add,
            },
        };
        one.call(FN_CONTROL, 0, &envelope(1, KEY1, &swap)).unwrap();
        n.shutdown().unwrap();
        add
    };
    // The module is gone from the state directory: the saved assignment is
    // ignored, and with it tenant 1's hold on function 140.
    std::fs::remove_file(dir.join(format!("modules/{}.wasm", hex::encode(add)))).unwrap();
    let n = node(&state, "");
    let mut two = tenant_client(&n, 2, KEY2);
    let module = compile_wat(ADD_WAT).unwrap();
    control_json(&mut two, 2, KEY2, &Op::Upload(module));
    let swap = Op::Swap {
        slot: 0,
        target: Target::Wasm {
            function: 140,
            digest: add,
        },
    };
    two.call(FN_CONTROL, 0, &envelope(2, KEY2, &swap)).unwrap();
    assert_eq!(two.call(140, 1, b"ab").unwrap().payload, b"bc");
    n.shutdown().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_slot_saved_without_its_owner_takes_its_modules_uploader() {
    let (dir, state) = state_dir("oldslots");
    {
        let n = node(&state, "");
        let mut one = tenant_client(&n, 1, KEY1);
        let add = upload_add(&mut one);
        let swap = Op::Swap {
            slot: 1,
            target: Target::Wasm {
                function: 140,
                digest: add,
            },
        };
        one.call(FN_CONTROL, 0, &envelope(1, KEY1, &swap)).unwrap();
        n.shutdown().unwrap();
    }
    // A state directory written before slots recorded their owner.
    let path = dir.join("slots.json");
    let mut slots: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    for s in slots.as_array_mut().unwrap() {
        s.as_object_mut().unwrap().remove("tenant");
    }
    std::fs::write(&path, slots.to_string()).unwrap();
    let n = node(&state, "");
    let mut two = tenant_client(&n, 2, KEY2);
    assert_eq!(status(two.call(140, 1, b"ab")), Status::UnknownFunction);
    let mut one = tenant_client(&n, 1, KEY1);
    assert_eq!(one.call(140, 1, b"ab").unwrap().payload, b"bc");
    n.shutdown().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}
