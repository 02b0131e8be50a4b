use crate::{init_logs, load_config, status, CliError};
use offrac_client::{run_closed_loop, FunctionId, LoadSpec};
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

/// The demo mix: every built-in at the sizes of OffRAC's evaluation.
fn mix() -> Vec<(FunctionId, u64, usize)> {
    vec![
        (FunctionId::Echo, 0, 1024),
        (FunctionId::TopK, 16, 1024),
        (FunctionId::TopK, 16, 4096),
        (FunctionId::Logit, 0, 1024),
        (FunctionId::Logit, 0, 4096),
        (FunctionId::MinMax, 0, 1024),
        (FunctionId::MinMax, 0, 4096),
        (FunctionId::MatMul, 64, 2 * 64 * 64 * 4),
    ]
}

/// Parse FUNCTION:BYTES[:PARAM] items.
fn parse_mix(text: &str) -> Result<Vec<(FunctionId, u64, usize)>, CliError> {
    let bad = |item: &str, why: &str| {
        CliError::Usage(format!(
            "--mix item {item:?}: {why} (want FUNCTION:BYTES[:PARAM])"
        ))
    };
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            let mut parts = item.split(':');
            let name = parts.next().unwrap_or_default();
            let f = FunctionId::from_name(name).ok_or_else(|| bad(item, "unknown function"))?;
            let bytes = parts
                .next()
                .ok_or_else(|| bad(item, "missing size"))?
                .parse::<usize>()
                .map_err(|_| bad(item, "size is not a number"))?;
            let param = match parts.next() {
                Some(p) => p
                    .parse::<u64>()
                    .map_err(|_| bad(item, "param is not a number"))?,
                None if f == FunctionId::TopK => 16,
                None => 0,
            };
            if parts.next().is_some() {
                return Err(bad(item, "too many fields"));
            }
            Ok((f, param, bytes))
        })
        .collect::<Result<Vec<_>, _>>()
        .and_then(|m| {
            if m.is_empty() {
                Err(CliError::Usage("--mix is empty".into()))
            } else {
                Ok(m)
            }
        })
}

pub fn run(a: Args) -> Result<(), CliError> {
    init_logs(false, "warn");
    let mix = match &a.mix {
        Some(text) => parse_mix(text)?,
        None => mix(),
    };
    let node = match &a.addr {
        Some(_) => None,
        None => Some(offrac_node::start(
            load_config(a.config.as_deref())?,
            "127.0.0.1:0",
        )?),
    };
    let addr = a.addr.clone().unwrap_or_else(|| {
        node.as_ref()
            .map(|n| n.addr.to_string())
            .unwrap_or_default()
    });
    if a.duration <= 0.0 || a.warmup < 0.0 || a.clients == 0 {
        return Err(CliError::Usage(
            "need --duration > 0, --warmup >= 0 and --clients >= 1".into(),
        ));
    }
    let mut spec = LoadSpec::new(
        addr.clone(),
        a.clients,
        Duration::from_secs_f64(a.duration),
        Duration::from_secs_f64(a.warmup),
        mix,
    );
    spec.busy_poll = a.busy_poll;
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
        if let Some(m) = node.metrics_addr {
            if !a.json {
                // Give the I/O thread a moment to publish its last counters.
                std::thread::sleep(Duration::from_millis(120));
                println!(
                    "node slots after the run:\n{}",
                    status::summarize(&status::fetch_metrics(&m.to_string())?)
                );
            }
        }
        node.shutdown()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_items_parse_with_defaults() {
        let m = parse_mix("echo:1024, topk:4096, topk:64:3").unwrap();
        assert_eq!(
            m,
            vec![
                (FunctionId::Echo, 0, 1024),
                (FunctionId::TopK, 16, 4096),
                (FunctionId::TopK, 3, 64)
            ]
        );
    }

    #[test]
    fn bad_mix_items_say_why() {
        for (text, why) in [
            ("fft:10", "unknown function"),
            ("echo", "missing size"),
            ("echo:x", "size is not a number"),
            ("echo:1:2:3", "too many fields"),
            (",", "empty"),
        ] {
            let e = parse_mix(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }
}
