//! `offrac ctl bench-ops`: the time of a `REPLICATE` of n = 2 and of a
//! forced `UNLOAD` of the module those two slots run, while three clients
//! call that module back to back, with a single `SWAP` timed in the same run
//! as the baseline; and what the calls got (answered, refused, lost). Starts
//! its own node on a loopback port (`docs/control.md`, "Measured").

use crate::ctl::Ctl;
use crate::ctl_bench::{pct, KEY_HEX};
use crate::CliError;
use offrac_client::{Client, ClientError, RetryPolicy};
use offrac_control::{examples, wire, Op, Target};
use offrac_proto::{FunctionId, Status};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const FUNCTION: u8 = 130;

#[derive(clap::Args)]
pub struct BenchOpsArgs {
    /// Rounds (each: upload, replicate n = 2, forced unload, and a swap there and back).
    #[arg(long, default_value_t = 50)]
    pub rounds: usize,
    /// The callers' back-off after a BUSY answer, µs.
    #[arg(long, default_value_t = 200)]
    pub backoff_us: u64,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

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
function = "echo"
spare = true
[[slots]]
function = "echo"
spare = true
[autoscale]
# Inert here: the spare slots are the operator's.
grow_periods = 1000000
shrink_periods = 1000000
[control]
drain_timeout_ms = 2000
[[control.tenants]]
id = 1
key = "{KEY_HEX}"
"#
    )
}

#[derive(Default, Debug, Clone, Copy)]
struct Counts {
    sent: u64,
    ok: u64,
    busy: u64,
    unknown: u64,
    other: u64,
    lost: u64,
    /// The first "other" answer of each kind seen (a few, for the report).
    other_seen: [Option<u16>; 4],
}

impl Counts {
    fn note_other(&mut self, code: u16) {
        self.other += 1;
        if !self.other_seen.contains(&Some(code)) {
            if let Some(free) = self.other_seen.iter_mut().find(|s| s.is_none()) {
                *free = Some(code);
            }
        }
    }
}

/// `threads` clients of tenant 1 call the module's function until `stop`.
fn load(
    addr: &str,
    key: &[u8],
    threads: usize,
    backoff_us: u64,
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Counts>> {
    (0..threads)
        .map(|i| {
            let (addr, key, stop) = (addr.to_string(), key.to_vec(), stop.clone());
            std::thread::spawn(move || {
                let mut c = Counts::default();
                let Ok(client) = Client::connect(&addr) else {
                    return c;
                };
                let mut client = client.with_retry_policy(RetryPolicy::with_max_retries(0));
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0);
                let env = wire::encode(1, now_ms, 1 << 50 | i as u64, &Op::Hello, &key);
                if client.hello(1, &env).is_err() {
                    return c;
                }
                let _ = client.set_read_timeout(Some(Duration::from_secs(5)));
                let payload = [1u8; 256];
                while !stop.load(Ordering::Relaxed) {
                    c.sent += 1;
                    match client.call(FUNCTION, 1, &payload) {
                        Ok(r) if r.payload == [2u8; 256] => c.ok += 1,
                        // A wrong payload: 0xFF00 + its first byte in the report.
                        Ok(r) => {
                            c.note_other(0xFF00 | r.payload.first().copied().unwrap_or(0) as u16)
                        }
                        Err(ClientError::Status {
                            status: Status::Busy,
                            ..
                        }) => {
                            c.busy += 1;
                            // BUSY says retry with back-off: a client that
                            // retries at once only competes for the 2 cores.
                            std::thread::sleep(Duration::from_micros(backoff_us));
                        }
                        Err(ClientError::Status {
                            status: Status::UnknownFunction,
                            ..
                        }) => {
                            c.unknown += 1;
                            // No slot serves it between rounds: do not spin.
                            std::thread::sleep(Duration::from_micros(200));
                        }
                        Err(ClientError::Status { status, .. }) => c.note_other(status.code()),
                        Err(_) => {
                            c.lost += 1;
                            break;
                        }
                    }
                }
                c
            })
        })
        .collect()
}

fn json(ctl: &mut Ctl, op: &Op) -> Result<(serde_json::Value, f64), CliError> {
    let t = Instant::now();
    let p = ctl.request(op)?;
    let rtt = t.elapsed().as_secs_f64() * 1e6;
    let v = serde_json::from_slice(&p)
        .map_err(|e| CliError::Usage(format!("{} answer: {e}", op.name())))?;
    Ok((v, rtt))
}

/// The longest node-side swap (`total_ns`, in µs) of a list of swap reports.
fn slowest_us(reports: &serde_json::Value) -> f64 {
    reports
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["total_ns"].as_f64())
        .fold(f64::NAN, f64::max)
        / 1e3
}

pub fn run(a: BenchOpsArgs) -> Result<(), CliError> {
    let cfg = offrac_node::NodeConfig::parse(&config())?;
    let node = offrac_node::start(cfg, "127.0.0.1:0")?;
    let addr = node.addr.to_string();
    let key = hex::decode(KEY_HEX).map_err(|_| CliError::Usage("key".into()))?;
    let mut ctl = Ctl::connect(&addr, 1, key.clone())?;
    let module = examples::compile_wat(examples::ADD_WAT).map_err(CliError::Usage)?;
    let stop = Arc::new(AtomicBool::new(false));
    let handles = load(&addr, &key, 3, a.backoff_us, stop.clone());
    std::thread::sleep(Duration::from_millis(100));
    let (mut rep_rtt, mut rep_node, mut unl_rtt, mut unl_node) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut swap_rtt, mut swap_node) = (Vec::new(), Vec::new());
    let mut unl_drain = Vec::new();
    let echo = Target::Builtin(FunctionId::Echo.id());
    for _ in 0..a.rounds {
        let (v, _) = json(&mut ctl, &Op::Upload(module.clone()))?;
        let digest = crate::ctl::parse_digest(v["digest"].as_str().unwrap_or(""))?;
        let target = Target::Wasm {
            function: FUNCTION,
            digest,
        };
        let (v, rtt) = json(&mut ctl, &Op::Replicate { n: 2, target })?;
        rep_rtt.push(rtt);
        rep_node.push(slowest_us(&v["swaps"]));
        std::thread::sleep(Duration::from_millis(10));
        // The baseline: one swap of slot 1 to the module and back.
        for t in [target, echo] {
            let (v, rtt) = json(&mut ctl, &Op::Swap { slot: 1, target: t })?;
            swap_rtt.push(rtt);
            swap_node.push(v["total_ns"].as_f64().unwrap_or(f64::NAN) / 1e3);
        }
        std::thread::sleep(Duration::from_millis(10));
        let (v, rtt) = json(
            &mut ctl,
            &Op::Unload {
                digest,
                force: true,
            },
        )?;
        unl_rtt.push(rtt);
        unl_node.push(slowest_us(&v["swapped_out"]));
        for r in v["swapped_out"].as_array().into_iter().flatten() {
            unl_drain.push(r["drain_ns"].as_f64().unwrap_or(f64::NAN) / 1e3);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    let mut c = Counts::default();
    for h in handles {
        let x = h
            .join()
            .map_err(|_| CliError::Usage("a load thread panicked".into()))?;
        c.sent += x.sent;
        c.ok += x.ok;
        c.busy += x.busy;
        c.unknown += x.unknown;
        c.other += x.other;
        c.lost += x.lost;
        for code in x.other_seen.into_iter().flatten() {
            if !c.other_seen.contains(&Some(code)) {
                if let Some(free) = c.other_seen.iter_mut().find(|s| s.is_none()) {
                    *free = Some(code);
                }
            }
        }
    }
    node.shutdown()?;
    let row = |name: &str, rtt: &mut Vec<f64>, node: &mut Vec<f64>| {
        serde_json::json!({
            "op": name, "n": rtt.len(),
            "node_us_p50": pct(node, 50.0), "node_us_p99": pct(node, 99.0),
            "rtt_us_p50": pct(rtt, 50.0), "rtt_us_p99": pct(rtt, 99.0),
        })
    };
    let rows = [
        row("swap (baseline)", &mut swap_rtt, &mut swap_node),
        row("replicate n=2", &mut rep_rtt, &mut rep_node),
        row("forced unload (2 slots)", &mut unl_rtt, &mut unl_node),
    ];
    let ratio = |i: usize| {
        rows[i]["rtt_us_p50"].as_f64().unwrap_or(f64::NAN)
            / rows[0]["rtt_us_p50"].as_f64().unwrap_or(f64::NAN)
    };
    let out = serde_json::json!({
        "backoff_us": a.backoff_us,
        "ops": rows,
        "rtt_p50_ratio_to_swap": {"replicate": ratio(1), "forced_unload": ratio(2)},
        "calls": {"sent": c.sent, "ok": c.ok, "refused_busy": c.busy,
                  "unknown_function": c.unknown, "other": c.other, "lost": c.lost,
                  "other_codes": c.other_seen.iter().flatten().collect::<Vec<_>>()},
        "unload_drain_us_p50": pct(&mut unl_drain, 50.0),
    });
    if a.json {
        println!("{out}");
        return Ok(());
    }
    println!(
        "control operations under load (3 callers of the module, {} µs back-off after BUSY), µs",
        a.backoff_us
    );
    println!("(node: the slowest of the op's swaps, request → resume; rtt: client round trip)");
    println!(
        "{:<26} {:>5} {:>9} {:>9} {:>9} {:>9}",
        "op", "n", "node p50", "node p99", "rtt p50", "rtt p99"
    );
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    for r in &rows {
        println!(
            "{:<26} {:>5} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
            r["op"].as_str().unwrap_or(""),
            r["n"],
            f(&r["node_us_p50"]),
            f(&r["node_us_p99"]),
            f(&r["rtt_us_p50"]),
            f(&r["rtt_us_p99"]),
        );
    }
    println!(
        "rtt p50 against one swap: replicate n=2 {:.2}x, forced unload {:.2}x",
        ratio(1),
        ratio(2)
    );
    println!(
        "forced unload: the running call's drain p50 {:.1} µs",
        f(&out["unload_drain_us_p50"])
    );
    println!(
        "calls of the module: sent {}, ok {}, refused BUSY {}, UNKNOWN_FUNCTION {} (between rounds), other {} (codes {:?}), lost {}",
        c.sent, c.ok, c.busy, c.unknown, c.other, out["calls"]["other_codes"], c.lost
    );
    Ok(())
}
