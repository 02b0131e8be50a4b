//! `offrac demo`: start a node, drive a short mixed load at it with the
//! load generator of `offrac bench`, print the figures and the node's slots.

use crate::{init_logs, load_config, status, CliError};
use offrac_bench::{parse_mix, run_closed_loop, BenchSpec, MixItem};
use offrac_client::FunctionId;
use std::time::Duration;

#[derive(clap::Args)]
pub struct Args {
    /// Drive an existing node instead of starting one.
    #[arg(long)]
    addr: Option<String>,
    /// Configuration of the node started for the demo.
    #[arg(long)]
    config: Option<String>,
    /// Seconds of measured load.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds of warm-up before measuring.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Closed-loop clients, each on its own connection.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Clients busy-poll their sockets instead of sleeping (pair with io.mode = "poll").
    #[arg(long)]
    busy_poll: bool,
    /// Requests to send, as FUNCTION:BYTES[:PARAM] items, comma-separated
    /// (e.g. "echo:1024,topk:4096:16"); default: every built-in at 1 and 4 KiB.
    #[arg(long)]
    mix: Option<String>,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// The demo mix: every built-in at the sizes of OffRAC's and seed 001's evaluations
/// (but `spin`, a synthetic load for experiments).
fn default_mix() -> Vec<MixItem> {
    vec![
        MixItem::new(FunctionId::Echo, 0, 1024),
        MixItem::new(FunctionId::TopK, 16, 1024),
        MixItem::new(FunctionId::TopK, 16, 4096),
        MixItem::new(FunctionId::Logit, 0, 1024),
        MixItem::new(FunctionId::Logit, 0, 4096),
        MixItem::new(FunctionId::MinMax, 0, 1024),
        MixItem::new(FunctionId::MinMax, 0, 4096),
        MixItem::new(FunctionId::MatMul, 64, 2 * 64 * 64 * 4),
        // The DLRM preprocessing operators of seed 001 at 1 KiB.
        MixItem::new(FunctionId::MapId, 0, 1024),
        MixItem::new(FunctionId::SparseTransform, 0, 1024),
        MixItem::new(FunctionId::Bucketize, 0, 1024),
        MixItem::new(FunctionId::SigridHash, 100_000, 1024),
        MixItem::new(FunctionId::FirstX, 4, 1024),
        MixItem::new(FunctionId::IdListTransform, 0, 1024),
        MixItem::new(FunctionId::Cartesian, 0, 1024),
        MixItem::new(FunctionId::NGram, 2, 1024),
        MixItem::new(FunctionId::GetLocalHour, 0, 1024),
        MixItem::new(FunctionId::Onehot, 16, 1024),
        MixItem::new(FunctionId::BoxCox, 0, 1024),
        // OffRAC's CNN (its accelerator A4): one 64×64×3 uint16 image (24,576
        // bytes, six 4 KiB fragments), milliseconds of work beside the rest.
        MixItem::new(FunctionId::Cnn, 0, 64 * 64 * 3 * 2),
        // The distributed multiply's kernel (ACCL+ §6, `experiments/gemv`):
        // a 64×64 float32 matrix and its vector, `param` = 64 columns.
        MixItem::new(FunctionId::Gemv, 64, (64 * 64 + 64) * 4),
    ]
}

fn seconds(x: f64, what: &str) -> Result<Duration, CliError> {
    Duration::try_from_secs_f64(x).map_err(|_| CliError::Usage(format!("{what}: bad seconds {x}")))
}

pub fn run(a: Args) -> Result<(), CliError> {
    init_logs(false, "warn");
    let mix = match &a.mix {
        Some(text) => parse_mix(text)?,
        None => default_mix(),
    };
    let (node, addr) = match &a.addr {
        Some(addr) => (None, addr.clone()),
        None => {
            let n = offrac_node::start(load_config(a.config.as_deref())?, "127.0.0.1:0")?;
            let addr = n.addr.to_string();
            (Some(n), addr)
        }
    };
    let mut spec = BenchSpec::new(addr.clone(), a.clients, mix);
    spec.duration = seconds(a.duration, "--duration")?;
    spec.warmup = seconds(a.warmup, "--warmup")?;
    spec.busy_poll = a.busy_poll;
    spec.progress = !a.json;
    spec.label = "demo".into();
    if !a.json {
        eprintln!(
            "offrac demo: {} closed-loop clients against {addr} for {:.1} s (+{:.1} s warm-up)…",
            a.clients, a.duration, a.warmup
        );
    }
    let report = run_closed_loop(&spec)?;
    if a.json {
        println!("{}", report.to_json());
    } else {
        println!("{}", report.render_table());
    }
    if let Some(node) = node {
        if let (Some(m), false) = (node.metrics_addr, a.json) {
            // Give the I/O thread a moment to publish its last counters.
            std::thread::sleep(Duration::from_millis(120));
            let text = status::fetch_metrics(&m.to_string())?;
            println!("node slots after the run:\n{}", status::summarize(&text));
        }
        node.shutdown()?;
    }
    Ok(())
}
