use crate::CliError;
use std::io::{Read, Write};

#[derive(clap::Args)]
pub struct Args {
    /// The node's request address: its metrics address is asked for (describe).
    #[arg(long, required_unless_present = "metrics", conflicts_with = "metrics")]
    addr: Option<String>,
    /// The node's metrics address (printed by `offrac serve` at start).
    #[arg(long)]
    metrics: Option<String>,
    /// Give up after this many seconds (connect and read).
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
}

pub fn run(a: Args) -> Result<(), CliError> {
    let timeout = crate::call::timeout_arg(a.timeout)?;
    let quiet = |what: &str, e: CliError| match e {
        CliError::Io(io) if crate::call::is_timeout(&io) => CliError::Usage(format!(
            "no answer from {what} within {} s (--timeout)",
            a.timeout
        )),
        e => e,
    };
    let metrics = match (&a.metrics, &a.addr) {
        (Some(m), _) => m.clone(),
        (None, Some(addr)) => {
            let ask = || -> Result<serde_json::Value, CliError> {
                let mut c = offrac_client::Client::connect_timeout(addr, timeout)?;
                c.set_read_timeout(Some(timeout))?;
                Ok(c.describe()?)
            };
            let d = ask().map_err(|e| match e {
                CliError::Client(offrac_client::ClientError::Io(io)) => {
                    quiet(addr, CliError::Io(io))
                }
                e => e,
            })?;
            println!("{}", describe_line(&d));
            d["metrics"].as_str().map(str::to_string).ok_or_else(|| {
                CliError::Usage(format!(
                    "{addr} serves no metrics endpoint ([metrics] listen = \"\")"
                ))
            })?
        }
        (None, None) => return Err(CliError::Usage("give --addr or --metrics".into())),
    };
    let text = fetch_metrics_within(&metrics, timeout).map_err(|e| quiet(&metrics, e))?;
    print!("{}", summarize(&text));
    Ok(())
}

/// "device 0, offrac 0.1.0, 6 slots, peers: 1 (up), metrics at …".
fn describe_line(d: &serde_json::Value) -> String {
    let peers: Vec<String> = d["peers"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let up = if p["up"].as_bool() == Some(true) {
                        "up"
                    } else {
                        "down"
                    };
                    format!("{} ({up})", p["device"])
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "device {}, offrac {}, {} slots, peers: {}, metrics at {}",
        d["device"],
        d["version"].as_str().unwrap_or("?"),
        d["slots"].as_array().map_or(0, Vec::len),
        if peers.is_empty() {
            "none".to_string()
        } else {
            peers.join(", ")
        },
        d["metrics"].as_str().unwrap_or("(off)")
    )
}

/// GET /metrics over plain HTTP/1.0.
pub fn fetch_metrics(addr: &str) -> Result<String, CliError> {
    fetch_metrics_within(addr, std::time::Duration::from_secs(5))
}

/// GET /metrics, failing after `timeout` to connect or to read.
pub fn fetch_metrics_within(addr: &str, timeout: std::time::Duration) -> Result<String, CliError> {
    use std::net::ToSocketAddrs;
    let sa = addr
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| CliError::Usage(format!("cannot resolve {addr:?}")))?;
    let mut s = std::net::TcpStream::connect_timeout(&sa, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: offrac\r\n\r\n")?;
    let mut body = String::new();
    s.read_to_string(&mut body)?;
    match body.split_once("\r\n\r\n") {
        Some((head, rest)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
            Ok(rest.to_string())
        }
        _ => Err(CliError::Usage(format!(
            "{addr} did not answer GET /metrics with 200"
        ))),
    }
}

fn value_of(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(prefix).and_then(|v| v.trim().parse().ok()))
}

/// A human summary of the metrics text: one row per slot, then refusals.
pub fn summarize(text: &str) -> String {
    let mut rows = Vec::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("offrac_slot_completions_total{"))
    {
        let Some((labels, _)) = line["offrac_slot_completions_total".len()..].split_once(' ')
        else {
            continue;
        };
        let get = |metric: &str| value_of(text, &format!("{metric}{labels} ")).unwrap_or(0.0);
        let slot = labels.split('"').nth(1).unwrap_or("?");
        let function = labels.split('"').nth(3).unwrap_or("?");
        rows.push(vec![
            slot.to_string(),
            function.to_string(),
            get("offrac_slot_completions_total").to_string(),
            get("offrac_slot_errors_total").to_string(),
            get("offrac_slot_queue_depth").to_string(),
            format!("{:.3}", get("offrac_slot_busy_seconds_total")),
        ]);
    }
    let header = [
        "slot",
        "function",
        "completions",
        "errors",
        "queued",
        "busy (s)",
    ];
    let mut out = format!("{}\n", offrac_bench::text_table(&header, 2, rows));
    let refused: Vec<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("offrac_refusals_total{reason=\""))
        .filter_map(|l| l.split_once("\"} "))
        .filter(|(_, v)| v.trim() != "0")
        .map(|(r, v)| format!("{r}={}", v.trim()))
        .collect();
    let conns = value_of(text, "offrac_connections ").unwrap_or(0.0);
    out += &format!(
        "connections: {conns}   refusals: {}\n",
        if refused.is_empty() {
            "none".into()
        } else {
            refused.join(" ")
        }
    );
    out
}
