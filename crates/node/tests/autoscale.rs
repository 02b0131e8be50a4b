//! The autoscaler over real loopback sockets: a node with one SPIN slot and
//! two spare ones; four clients calling SPIN keep its slot busy, so the
//! autoscaler loads replicas into the spare slots (seen in the describe
//! answer), every call is answered, and once the clients stop the replicas
//! go back to spare.

mod common;

use common::control::now_ms;
use offrac_client::{Client, FunctionId, RetryPolicy, Status};
use offrac_control::examples::compile_wat;
use offrac_control::{wire, Op, Target, FN_CONTROL};
use offrac_node::{start, NodeConfig};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: &[u8] = b"autoscale tenant";

/// Busy-loops `param` times, then echoes: a WebAssembly stand-in for SPIN.
const LOOP_WAT: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "alloc") (param $len i32) (result i32) (i32.const 1024))
  (func (export "run") (param $ptr i32) (param $len i32) (param $n i64) (result i64)
    (local $i i64)
    (block $done
      (loop $again
        (br_if $done (i64.ge_u (local.get $i) (local.get $n)))
        (local.set $i (i64.add (local.get $i) (i64.const 1)))
        (br $again)))
    (i64.or
      (i64.shl (i64.extend_i32_u (local.get $ptr)) (i64.const 32))
      (i64.extend_i32_u (local.get $len))))
)"#;

/// A control request of tenant 1 on `c`; the answer's JSON.
fn control(c: &mut Client, nonce: u64, op: &Op) -> serde_json::Value {
    let env = wire::encode(1, now_ms(), nonce, op, KEY);
    let answer = c.call(FN_CONTROL, 0, &env).expect("control request");
    serde_json::from_slice(&answer.payload).expect("JSON")
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

/// Reads `read` until it gives `want` or `within` passes; the last reading.
fn wait_until<T: PartialEq>(
    c: &mut Client,
    read: fn(&mut Client) -> T,
    want: &T,
    within: Duration,
) -> T {
    let end = Instant::now() + within;
    loop {
        let r = read(c);
        if &r == want || Instant::now() > end {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for(c: &mut Client, want: &[&str], within: Duration) -> Vec<String> {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    wait_until(c, roles, &want, within)
}

#[test]
fn replicas_are_loaded_under_load_and_reclaimed_after() {
    let node = spare_node("spin", 3, false);
    let addr = node.addr.to_string();
    let mut probe = Client::connect(&addr).unwrap();
    assert_eq!(roles(&mut probe), ["fixed", "spare", "spare"]);

    let stop = Arc::new(AtomicBool::new(false));
    let workers = spin_callers(&addr, stop.clone());
    let grown = wait_for(
        &mut probe,
        &["fixed", "replica", "replica"],
        Duration::from_secs(5),
    );
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    assert_eq!(grown, ["fixed", "replica", "replica"]);
    assert_eq!(
        counts.iter().map(|c| c.2).sum::<u64>(),
        0,
        "only OK or BUSY answers"
    );
    assert!(counts.iter().map(|c| c.0).sum::<u64>() > 0);
    // Idle now: after three calm periods each replica goes back.
    let shrunk = wait_for(
        &mut probe,
        &["fixed", "spare", "spare"],
        Duration::from_secs(5),
    );
    assert_eq!(shrunk, ["fixed", "spare", "spare"]);
    let d = probe.describe().unwrap();
    let stats = &d["autoscale"]["stats"];
    assert_eq!(stats["replicated"], 2, "{stats}");
    assert_eq!(stats["reclaimed"], 2, "{stats}");
    assert_eq!(stats["failed"], 0, "{stats}");
    node.shutdown().unwrap();
}

/// `threads` clients calling `function` with `param` and `payload` until
/// `stop`; returns (answered OK, refused BUSY, anything else).
fn callers(
    addr: &str,
    threads: usize,
    function: u8,
    param: u64,
    payload: Vec<u8>,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<(u64, u64, u64)>> {
    tenant_callers(addr, threads, function, param, payload, stop, false)
}

/// Four [`callers`] of SPIN with 2 ms of work a call: about four slots' worth.
fn spin_callers(
    addr: &str,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<(u64, u64, u64)>> {
    callers(addr, 4, FunctionId::Spin.id(), 2_000, b"x".to_vec(), stop)
}

/// [`callers`], each connection opened with tenant 1's hello if `hello`.
fn tenant_callers(
    addr: &str,
    threads: usize,
    function: u8,
    param: u64,
    payload: Vec<u8>,
    stop: Arc<AtomicBool>,
    hello: bool,
) -> Vec<std::thread::JoinHandle<(u64, u64, u64)>> {
    (0..threads)
        .map(|i| {
            let (addr, stop, payload) = (addr.to_string(), stop.clone(), payload.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&addr)
                    .unwrap()
                    .with_retry_policy(RetryPolicy::with_max_retries(0));
                if hello {
                    let env = wire::encode(1, now_ms(), 1 << 40 | i as u64, &Op::Hello, KEY);
                    c.hello(1, &env).expect("hello");
                }
                let mut n = (0, 0, 0);
                while !stop.load(Ordering::Relaxed) {
                    match c.call(function, param, &payload) {
                        Ok(_) => n.0 += 1,
                        Err(e) if e.status() == Some(Status::Busy) => n.1 += 1,
                        Err(_) => n.2 += 1,
                    }
                }
                n
            })
        })
        .collect()
}

fn replica_functions(c: &mut Client) -> Vec<Option<u64>> {
    let d = c.describe().expect("describe");
    d["autoscale"]["slots"]
        .as_array()
        .expect("the autoscaler runs")
        .iter()
        .map(|r| (r["role"] == "replica").then(|| r["function"].as_u64().unwrap()))
        .collect()
}

/// SPIN is hot first and takes both spare slots; then its callers stop and
/// MINMAX's start. With no spare left, MINMAX takes SPIN's idle replicas at
/// once — not after SPIN's calm streak, set here far longer than the test.
#[test]
fn a_function_hot_later_takes_the_replicas_of_one_gone_cold() {
    let cfg = NodeConfig::parse(
        r#"
[metrics]
listen = ""
[[slots]]
function = "spin"
queue_depth = 2
[[slots]]
function = "minmax"
queue_depth = 2
inline_max_bytes = 0
[[slots]]
function = "echo"
spare = true
[[slots]]
function = "echo"
spare = true
[autoscale]
period_ms = 50
grow_periods = 1
shrink_periods = 2000
"#,
    )
    .expect("config");
    let node = start(cfg, "127.0.0.1:0").expect("node starts");
    let addr = node.addr.to_string();
    let mut probe = Client::connect(&addr).unwrap();
    let (spin, minmax) = (FunctionId::Spin.id() as u64, FunctionId::MinMax.id() as u64);
    let until = |probe: &mut Client, want: [Option<u64>; 4]| {
        wait_until(
            probe,
            replica_functions,
            &want.to_vec(),
            Duration::from_secs(5),
        )
    };
    let stop = Arc::new(AtomicBool::new(false));
    let hot = spin_callers(&addr, stop.clone());
    let first = until(&mut probe, [None, None, Some(spin), Some(spin)]);
    stop.store(true, Ordering::Relaxed);
    let spun: Vec<_> = hot.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(first, [None, None, Some(spin), Some(spin)]);

    // 256 KiB of float32 a call: about a millisecond of work each.
    let floats: Vec<u8> = (0..65_536u32)
        .flat_map(|i| (i as f32).to_le_bytes())
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let later = callers(&addr, 4, FunctionId::MinMax.id(), 0, floats, stop.clone());
    let second = until(&mut probe, [None, None, Some(minmax), Some(minmax)]);
    stop.store(true, Ordering::Relaxed);
    let scaled: Vec<_> = later.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(second, [None, None, Some(minmax), Some(minmax)]);
    for (ok, _, other) in spun.iter().chain(&scaled) {
        assert!(*ok > 0);
        assert_eq!(*other, 0, "only OK or BUSY answers");
    }
    let d = probe.describe().unwrap();
    let stats = &d["autoscale"]["stats"];
    assert_eq!(stats["replicated"], 4, "{stats}");
    assert_eq!(stats["reclaimed"], 0, "{stats}");
    assert_eq!(stats["failed"], 0, "{stats}");
    node.shutdown().unwrap();
}

/// A node with one `first` slot and two spare ones, the autoscaler growing
/// after one busy period and shrinking after `shrink_periods` calm ones;
/// with tenant 1 (and fuel for its modules) if `tenant`.
fn spare_node(first: &str, shrink_periods: u64, tenant: bool) -> offrac_node::NodeHandle {
    let control = if tenant {
        format!(
            "[control]\nfuel = 200000000\n[[control.tenants]]\nid = 1\nkey = \"{}\"\n",
            hex::encode(KEY)
        )
    } else {
        String::new()
    };
    let cfg = NodeConfig::parse(&format!(
        r#"
[metrics]
listen = ""
[[slots]]
function = "{first}"
queue_depth = 2
[[slots]]
function = "echo"
spare = true
[[slots]]
function = "echo"
spare = true
[autoscale]
period_ms = 50
grow_periods = 1
shrink_periods = {shrink_periods}
{control}"#
    ))
    .expect("config");
    start(cfg, "127.0.0.1:0").expect("node starts")
}

/// A tenant's module is hot: the autoscaler loads replicas of that module
/// (not of a built-in of its id, which would be refused) into the spare
/// slots, and the tenant's callers are served by them. Before, every such
/// decision failed (`failed` counted, the slots stayed spare).
#[test]
fn a_hot_module_gets_replicas_of_itself() {
    let node = spare_node("echo", 100_000, true);
    let addr = node.addr.to_string();
    let mut ctl = Client::connect(&addr).unwrap();
    let up = control(&mut ctl, 1, &Op::Upload(compile_wat(LOOP_WAT).unwrap()));
    let digest: [u8; 32] = hex::decode(up["digest"].as_str().unwrap())
        .unwrap()
        .try_into()
        .unwrap();
    let module = Target::Wasm {
        function: 140,
        digest,
    };
    control(
        &mut ctl,
        2,
        &Op::Swap {
            slot: 0,
            target: module,
        },
    );
    let stop = Arc::new(AtomicBool::new(false));
    // Millions of loop turns a call (milliseconds): four callers need about four slots.
    let workers = tenant_callers(&addr, 4, 140, 3_000_000, b"x".to_vec(), stop.clone(), true);
    let mut probe = Client::connect(&addr).unwrap();
    let want = vec![None, Some(140), Some(140)];
    let grown = wait_until(
        &mut probe,
        replica_functions,
        &want,
        Duration::from_secs(10),
    );
    stop.store(true, Ordering::Relaxed);
    let counts: Vec<_> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    let d = probe.describe().unwrap();
    let stats = &d["autoscale"]["stats"];
    assert_eq!(grown, want, "{stats}");
    assert_eq!(stats["failed"], 0, "{stats}");
    assert_eq!(
        counts.iter().map(|c| c.2).sum::<u64>(),
        0,
        "only OK or BUSY: {counts:?}"
    );
    assert!(counts.iter().map(|c| c.0).sum::<u64>() > 0);
    node.shutdown().unwrap();
}

/// An operator's SWAP of a spare slot makes it the operator's (`fixed` in
/// the describe answer): a hot SPIN takes the other spare only, and the
/// swapped slot keeps serving what the operator put there.
#[test]
fn an_operators_swap_of_a_spare_slot_stays_the_operators() {
    let node = spare_node("spin", 100_000, true);
    let addr = node.addr.to_string();
    let mut ctl = Client::connect(&addr).unwrap();
    let minmax = Target::Builtin(FunctionId::MinMax.id());
    control(
        &mut ctl,
        1,
        &Op::Swap {
            slot: 2,
            target: minmax,
        },
    );
    let mut probe = Client::connect(&addr).unwrap();
    assert_eq!(roles(&mut probe), ["fixed", "spare", "fixed"]);
    let stop = Arc::new(AtomicBool::new(false));
    let workers = spin_callers(&addr, stop.clone());
    let grown = wait_for(
        &mut probe,
        &["fixed", "replica", "fixed"],
        Duration::from_secs(5),
    );
    // Past a few more periods of load, slot 2 is still the operator's.
    std::thread::sleep(Duration::from_millis(300));
    let later = roles(&mut probe);
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(grown, ["fixed", "replica", "fixed"]);
    assert_eq!(later, ["fixed", "replica", "fixed"]);
    let x = 1.5f32.to_le_bytes().repeat(2);
    assert!(
        probe.call(FunctionId::MinMax.id(), 0, &x).is_ok(),
        "slot 2 serves minmax"
    );
    node.shutdown().unwrap();
}
