//! The autoscaler over real loopback sockets: a node with one SPIN slot and
//! two spare ones; four clients calling SPIN keep its slot busy, so the
//! autoscaler loads replicas into the spare slots (seen in the describe
//! answer), every call is answered, and once the clients stop the replicas
//! go back to spare.

use offrac_client::{Client, FunctionId, RetryPolicy, Status};
use offrac_node::{start, NodeConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn roles(c: &mut Client) -> Vec<String> {
    let d = c.describe().expect("describe");
    d["autoscale"]["slots"]
        .as_array()
        .expect("the autoscaler runs")
        .iter()
        .map(|r| r["role"].as_str().unwrap().to_string())
        .collect()
}

fn wait_for(c: &mut Client, want: &[&str], within: Duration) -> Vec<String> {
    let end = Instant::now() + within;
    loop {
        let r = roles(c);
        if r == want || Instant::now() > end {
            return r;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn replicas_are_loaded_under_load_and_reclaimed_after() {
    let cfg = NodeConfig::parse(
        r#"
[metrics]
listen = ""
[[slots]]
function = "spin"
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
shrink_periods = 3
"#,
    )
    .expect("config");
    let node = start(cfg, "127.0.0.1:0").expect("node starts");
    let addr = node.addr.to_string();
    let mut probe = Client::connect(&addr).unwrap();
    assert_eq!(roles(&mut probe), ["fixed", "spare", "spare"]);

    let stop = Arc::new(AtomicBool::new(false));
    let (ok, busy, other) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicU64::new(0)),
    );
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (addr, stop) = (addr.clone(), stop.clone());
            let (ok, busy, other) = (ok.clone(), busy.clone(), other.clone());
            std::thread::spawn(move || {
                let mut c = Client::connect(&addr)
                    .unwrap()
                    .with_retry_policy(RetryPolicy::with_max_retries(0));
                while !stop.load(Ordering::Relaxed) {
                    // 2 ms of work per call: four callers need about four slots.
                    match c.call(FunctionId::Spin.id(), 2_000, b"x") {
                        Ok(_) => ok.fetch_add(1, Ordering::Relaxed),
                        Err(e) if e.status() == Some(Status::Busy) => {
                            busy.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(_) => other.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    let grown = wait_for(
        &mut probe,
        &["fixed", "replica", "replica"],
        Duration::from_secs(5),
    );
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert_eq!(grown, ["fixed", "replica", "replica"]);
    assert_eq!(other.load(Ordering::Relaxed), 0, "only OK or BUSY answers");
    assert!(ok.load(Ordering::Relaxed) > 0);
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
