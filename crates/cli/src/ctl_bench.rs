//! `offrac ctl bench-swap`: swap time p50/p99 for a built-in, a small and a
//! large WebAssembly module (OffRAC Table 6 measured 1.83–5.41 ms per partial
//! reconfiguration), and how many requests a swap under load delays, refuses
//! or loses. Starts its own node on a loopback port.

use crate::ctl::{BenchArgs, Ctl};
use crate::CliError;
use offrac_client::{Client, ClientError, RetryPolicy};
use offrac_control::{examples, Op, Target};
use offrac_proto::{FunctionId, Status};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The benches' tenant key (their own node's configuration).
pub(crate) const KEY_HEX: &str = "6f6666726163206265636e68206b6579";

fn config() -> String {
    format!(
        r#"
[metrics]
listen = ""
[[slots]]
function = "echo"
[[slots]]
function = "echo"
[[slots]]
function = "logit"
[[slots]]
function = "minmax"
[control]
drain_timeout_ms = 2000
[[control.tenants]]
id = 1
key = "{KEY_HEX}"
"#
    )
}

/// The `p`th percentile of `v` (sorted here), NaN when empty.
pub(crate) fn pct(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let i = ((p / 100.0) * (v.len() - 1) as f64).round() as usize;
    v[i.min(v.len() - 1)]
}

struct Kind {
    name: &'static str,
    /// Node-side swap time (request to resume), µs.
    node_us: Vec<f64>,
    /// Of which the install (instantiate + warm-up), µs.
    install_us: Vec<f64>,
    /// Client round trip of the control request, µs.
    rtt_us: Vec<f64>,
    module_bytes: usize,
}

fn swap(ctl: &mut Ctl, slot: u16, target: Target) -> Result<(serde_json::Value, f64), CliError> {
    let t = Instant::now();
    let p = ctl.request(&Op::Swap { slot, target })?;
    let rtt = t.elapsed().as_secs_f64() * 1e6;
    let v: serde_json::Value =
        serde_json::from_slice(&p).map_err(|e| CliError::Usage(format!("swap answer: {e}")))?;
    Ok((v, rtt))
}

fn measure(
    ctl: &mut Ctl,
    name: &'static str,
    slot: u16,
    a: Target,
    b: Target,
    n: usize,
    bytes: usize,
) -> Result<Kind, CliError> {
    let mut k = Kind {
        name,
        node_us: Vec::new(),
        install_us: Vec::new(),
        rtt_us: Vec::new(),
        module_bytes: bytes,
    };
    for i in 0..n {
        let (v, rtt) = swap(ctl, slot, if i % 2 == 0 { a } else { b })?;
        k.node_us
            .push(v["total_ns"].as_f64().unwrap_or(f64::NAN) / 1e3);
        k.install_us
            .push(v["install_ns"].as_f64().unwrap_or(f64::NAN) / 1e3);
        k.rtt_us.push(rtt);
    }
    Ok(k)
}

#[derive(Default, Debug, Clone, Copy)]
struct LoadCounts {
    sent: u64,
    ok: u64,
    busy: u64,
    unknown: u64,
    other: u64,
    lost: u64,
    /// Answers slower than 1 ms (delayed).
    slow: u64,
}

/// `threads` clients call `function` (no retries) until `stop`.
fn load(
    addr: String,
    function: u8,
    threads: usize,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<LoadCounts>> {
    (0..threads)
        .map(|_| {
            let addr = addr.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = LoadCounts::default();
                let Ok(client) = Client::connect(&addr) else {
                    return c;
                };
                let mut client = client.with_retry_policy(RetryPolicy::with_max_retries(0));
                let _ = client.set_read_timeout(Some(Duration::from_secs(5)));
                let payload = [0u8; 256];
                while !stop.load(Ordering::Relaxed) {
                    c.sent += 1;
                    let t = Instant::now();
                    match client.call(function, 0, &payload) {
                        Ok(_) => c.ok += 1,
                        Err(ClientError::Status {
                            status: Status::Busy,
                            ..
                        }) => c.busy += 1,
                        Err(ClientError::Status {
                            status: Status::UnknownFunction,
                            ..
                        }) => c.unknown += 1,
                        Err(ClientError::Status { .. }) => c.other += 1,
                        Err(_) => {
                            c.lost += 1;
                            break;
                        }
                    }
                    if t.elapsed() > Duration::from_millis(1) {
                        c.slow += 1;
                    }
                }
                c
            })
        })
        .collect()
}

/// One client calling echo back to back until `stop`: each call's latency, µs.
fn echo_latencies(addr: String, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<f64>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let Ok(mut client) = Client::connect(&addr) else {
            return out;
        };
        while !stop.load(Ordering::Relaxed) {
            let t = Instant::now();
            if client.call(FunctionId::Echo.id(), 0, b"ping").is_err() {
                break;
            }
            out.push(t.elapsed().as_secs_f64() * 1e6);
        }
        out
    })
}

/// Echo's latencies while `during` runs (or for `idle` when it is `None`):
/// what an upload's compile costs the node's other clients.
fn echo_beside(
    addr: &str,
    during: Option<&mut dyn FnMut() -> Result<(), CliError>>,
    idle: Duration,
) -> Result<Vec<f64>, CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    let h = echo_latencies(addr.to_string(), stop.clone());
    std::thread::sleep(Duration::from_millis(50));
    let r = match during {
        Some(f) => f(),
        None => {
            std::thread::sleep(idle);
            Ok(())
        }
    };
    stop.store(true, Ordering::Relaxed);
    let v = h
        .join()
        .map_err(|_| CliError::Usage("the echo thread panicked".into()))?;
    r.map(|_| v)
}

fn under_load(
    ctl: &mut Ctl,
    addr: &str,
    function: u8,
    slot: u16,
    targets: [Target; 2],
    swaps: usize,
) -> Result<(LoadCounts, Vec<f64>), CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    let handles = load(addr.to_string(), function, 3, stop.clone());
    std::thread::sleep(Duration::from_millis(200));
    let mut times = Vec::new();
    for i in 0..swaps {
        let (v, _) = swap(ctl, slot, targets[i % 2])?;
        times.push(v["total_ns"].as_f64().unwrap_or(f64::NAN) / 1e3);
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    let mut total = LoadCounts::default();
    for h in handles {
        let c = h
            .join()
            .map_err(|_| CliError::Usage("a load thread panicked".into()))?;
        total.sent += c.sent;
        total.ok += c.ok;
        total.busy += c.busy;
        total.unknown += c.unknown;
        total.other += c.other;
        total.lost += c.lost;
        total.slow += c.slow;
    }
    Ok((total, times))
}

pub fn run(a: BenchArgs) -> Result<(), CliError> {
    let cfg = offrac_node::NodeConfig::parse(&config())?;
    let node = offrac_node::start(cfg, "127.0.0.1:0")?;
    let addr = node.addr.to_string();
    let key = hex::decode(KEY_HEX).map_err(|_| CliError::Usage("key".into()))?;
    let mut ctl = Ctl::connect(&addr, 1, key)?;
    let wat = |t: &str| examples::compile_wat(t).map_err(CliError::Usage);
    let small_a = wat(examples::ADD_WAT)?;
    // A second small module: the same code, another digest.
    let small_b = wat(&examples::ADD_WAT.replace(
        "(memory (export \"memory\") 1)",
        "(memory (export \"memory\") 2)",
    ))?;
    let large_a = wat(&examples::large_wat(a.large_functions))?;
    let large_b = wat(&examples::large_wat(a.large_functions + 1))?;
    let mut digests = Vec::new();
    for m in [&small_a, &small_b, &large_a, &large_b] {
        let t = Instant::now();
        let p = ctl.request(&Op::Upload(m.clone()))?;
        let v: serde_json::Value =
            serde_json::from_slice(&p).map_err(|e| CliError::Usage(e.to_string()))?;
        let d = crate::ctl::parse_digest(v["digest"].as_str().unwrap_or(""))?;
        digests.push((d, t.elapsed()));
    }
    // A third large module uploaded beside an echo client: the compile runs
    // off the I/O thread, so echo should hardly notice (compare it alone).
    let large_c = wat(&examples::large_wat(a.large_functions + 2))?;
    let mut upload_c = || -> Result<(), CliError> {
        ctl.request(&Op::Upload(large_c.clone()))?;
        Ok(())
    };
    let upload_start = Instant::now();
    let mut echo_upload = echo_beside(&addr, Some(&mut upload_c), Duration::ZERO)?;
    let upload_c_ms = upload_start.elapsed().as_secs_f64() * 1e3;
    let mut echo_alone = echo_beside(&addr, None, Duration::from_millis(upload_c_ms as u64))?;
    let w = |function: u8, i: usize| Target::Wasm {
        function,
        digest: digests[i].0,
    };
    let logit = FunctionId::Logit.id();
    let minmax = FunctionId::MinMax.id();
    let kinds = [
        measure(
            &mut ctl,
            "built-in (minmax <-> topk)",
            3,
            Target::Builtin(FunctionId::TopK.id()),
            Target::Builtin(minmax),
            a.swaps,
            0,
        )?,
        measure(
            &mut ctl,
            "small wasm",
            3,
            w(130, 0),
            w(131, 1),
            a.swaps,
            small_a.len(),
        )?,
        measure(
            &mut ctl,
            "large wasm",
            3,
            w(132, 2),
            w(133, 3),
            a.swaps,
            large_a.len(),
        )?,
    ];
    swap(&mut ctl, 3, Target::Builtin(minmax))?;
    // Under load, with a replica: slot 1 leaves echo (slot 0 keeps it) and comes back.
    let (with_replica, t1) = under_load(
        &mut ctl,
        &addr,
        FunctionId::Echo.id(),
        1,
        [w(130, 0), Target::Builtin(FunctionId::Echo.id())],
        a.load_swaps,
    )?;
    // Under load, no replica: logit's only slot is re-installed with logit.
    let (no_replica, t2) = under_load(
        &mut ctl,
        &addr,
        logit,
        2,
        [Target::Builtin(logit), Target::Builtin(logit)],
        a.load_swaps,
    )?;
    let upload_ms: Vec<f64> = digests.iter().map(|(_, t)| t.as_secs_f64() * 1e3).collect();
    node.shutdown()?;

    let rows: Vec<serde_json::Value> = kinds
        .iter()
        .map(|k| {
            let (mut n, mut i, mut r) = (k.node_us.clone(), k.install_us.clone(), k.rtt_us.clone());
            serde_json::json!({
                "kind": k.name,
                "module_bytes": k.module_bytes,
                "swaps": k.node_us.len(),
                "node_us_p50": pct(&mut n, 50.0), "node_us_p99": pct(&mut n, 99.0),
                "install_us_p50": pct(&mut i, 50.0), "install_us_p99": pct(&mut i, 99.0),
                "rtt_us_p50": pct(&mut r, 50.0), "rtt_us_p99": pct(&mut r, 99.0),
            })
        })
        .collect();
    let load_json = |name: &str, c: LoadCounts, mut t: Vec<f64>| {
        serde_json::json!({
            "case": name, "swaps": t.len(),
            "swap_us_p50": pct(&mut t, 50.0), "swap_us_p99": pct(&mut t, 99.0),
            "sent": c.sent, "ok": c.ok, "refused_busy": c.busy, "unknown_function": c.unknown,
            "other_status": c.other, "lost": c.lost, "delayed_over_1ms": c.slow,
        })
    };
    let echo_json = |v: &mut Vec<f64>| {
        serde_json::json!({
            "calls": v.len(), "p50_us": pct(v, 50.0), "p99_us": pct(v, 99.0),
            "max_us": pct(v, 100.0),
        })
    };
    let out = serde_json::json!({
        "swap": rows,
        "upload_ms": {"small": upload_ms[0], "large": upload_ms[2]},
        "echo_beside_upload": {
            "upload_ms": upload_c_ms,
            "during": echo_json(&mut echo_upload),
            "alone": echo_json(&mut echo_alone),
        },
        "under_load": [load_json("echo, replica serving", with_replica, t1), load_json("logit, no replica", no_replica, t2)],
    });
    if a.json {
        println!("{out}");
        return Ok(());
    }
    println!("swap time (node: request → resume; install: instantiate + warm-up; rtt: client round trip), µs");
    println!(
        "{:<30} {:>9} {:>6} {:>9} {:>9} {:>11} {:>11} {:>9} {:>9}",
        "kind",
        "bytes",
        "n",
        "node p50",
        "node p99",
        "install p50",
        "install p99",
        "rtt p50",
        "rtt p99"
    );
    for r in &rows {
        println!(
            "{:<30} {:>9} {:>6} {:>9.1} {:>9.1} {:>11.1} {:>11.1} {:>9.1} {:>9.1}",
            r["kind"].as_str().unwrap_or(""),
            r["module_bytes"],
            r["swaps"],
            r["node_us_p50"].as_f64().unwrap_or(f64::NAN),
            r["node_us_p99"].as_f64().unwrap_or(f64::NAN),
            r["install_us_p50"].as_f64().unwrap_or(f64::NAN),
            r["install_us_p99"].as_f64().unwrap_or(f64::NAN),
            r["rtt_us_p50"].as_f64().unwrap_or(f64::NAN),
            r["rtt_us_p99"].as_f64().unwrap_or(f64::NAN),
        );
    }
    println!("(OffRAC Table 6: 1830–5410 µs per partial reconfiguration)");
    println!(
        "upload (validate + compile + store): small {:.1} ms, large {:.1} ms",
        upload_ms[0], upload_ms[2]
    );
    let e = &out["echo_beside_upload"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    for (name, v) in [
        ("during a large upload", &e["during"]),
        ("alone", &e["alone"]),
    ] {
        println!(
            "echo on another connection, {name} ({:.0} ms): {} calls, p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
            f(&e["upload_ms"]),
            v["calls"],
            f(&v["p50_us"]),
            f(&v["p99_us"]),
            f(&v["max_us"])
        );
    }
    for l in out["under_load"].as_array().into_iter().flatten() {
        println!("under load, {}: {} swaps (p50 {:.1} µs, p99 {:.1} µs); requests sent {}, ok {}, refused BUSY {}, UNKNOWN_FUNCTION {}, other {}, lost {}, answered after > 1 ms {}",
            l["case"].as_str().unwrap_or(""), l["swaps"],
            l["swap_us_p50"].as_f64().unwrap_or(f64::NAN), l["swap_us_p99"].as_f64().unwrap_or(f64::NAN),
            l["sent"], l["ok"], l["refused_busy"], l["unknown_function"], l["other_status"], l["lost"], l["delayed_over_1ms"]);
    }
    Ok(())
}
