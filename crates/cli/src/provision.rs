//! `offrac provision`: how many slots a target throughput needs, from the
//! node's own live figures (seed 001 §III-C): `N = ceil(Θ · (T_oh + T_acc) / s)`.

use crate::CliError;
use offrac_proto::FunctionId;

#[derive(clap::Args)]
pub struct Args {
    /// The node to ask (it must have served some requests of the function and size).
    #[arg(long, default_value = "127.0.0.1:7000")]
    addr: String,
    /// Target throughput Θ in Gbit/s of request payload.
    #[arg(long)]
    target_gbps: f64,
    /// Request payload size s in bytes.
    #[arg(long)]
    size: u64,
    /// One function (default: every function the node has figures for at this size).
    #[arg(long)]
    function: Option<String>,
    /// Give up after this many seconds (connect and read).
    #[arg(long, default_value_t = 5.0)]
    timeout: f64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// The seed's model: the slots needed so that `n · s / (T_oh + T_acc) ≥ Θ`.
pub fn slots_needed(target_bytes_per_s: f64, size: u64, t_oh_ns: f64, t_acc_ns: f64) -> u64 {
    let per_slot = size as f64 / ((t_oh_ns + t_acc_ns) * 1e-9);
    (target_bytes_per_s / per_slot).ceil().max(1.0) as u64
}

/// The size class the node files an input of `size` bytes under (node's
/// `provision::size_class`: next power of two, at least 64).
fn size_class(size: u64) -> u64 {
    size.max(64).next_power_of_two()
}

pub fn run(a: Args) -> Result<(), CliError> {
    if !(a.target_gbps > 0.0 && a.target_gbps.is_finite()) || a.size == 0 {
        return Err(CliError::Usage(
            "--target-gbps and --size must be positive".into(),
        ));
    }
    let wanted = match &a.function {
        Some(name) => Some(FunctionId::from_name(name).ok_or_else(|| {
            CliError::Usage(format!(
                "unknown function {name:?} (known: {})",
                FunctionId::known_names()
            ))
        })?),
        None => None,
    };
    let timeout = crate::call::timeout_arg(a.timeout)?;
    let mut c = offrac_client::Client::connect_timeout(&a.addr, timeout)?;
    c.set_read_timeout(Some(timeout))?;
    let d = c.describe()?;
    let p = &d["provisioning"];
    let t_oh = p["t_oh_ns"].as_f64().ok_or_else(|| {
        CliError::Usage(format!(
            "{} has no overhead figure yet: it measures T_oh over windows of 256 answers; send it some load first (offrac bench load)",
            a.addr
        ))
    })?;
    let class = size_class(a.size);
    let theta = a.target_gbps * 1e9 / 8.0;
    let rows: Vec<serde_json::Value> = p["t_acc"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["size_class"].as_u64() == Some(class))
        .filter(|e| wanted.is_none_or(|f| e["function"].as_u64() == Some(u64::from(f.id()))))
        .filter_map(|e| {
            let t_acc = e["t_acc_ns"].as_f64()?;
            let n = slots_needed(theta, a.size, t_oh, t_acc);
            let per_slot_gbps = a.size as f64 * 8.0 / (t_oh + t_acc);
            Some(serde_json::json!({
                "function": e["name"],
                "size": a.size,
                "t_oh_ns": t_oh,
                "t_acc_ns": t_acc,
                "runs": e["runs"],
                "per_slot_gbps": per_slot_gbps,
                "slots": n,
            }))
        })
        .collect();
    if rows.is_empty() {
        return Err(CliError::Usage(format!(
            "{} has no execution figure for {} at {} bytes (size class {class}); send it some of that load first",
            a.addr,
            a.function.as_deref().unwrap_or("any function"),
            a.size
        )));
    }
    if a.json {
        println!("{}", serde_json::Value::Array(rows));
        return Ok(());
    }
    println!(
        "target {} Gbit/s of {} B requests; node {} (T_oh {:.2} µs, measured live)",
        a.target_gbps,
        a.size,
        a.addr,
        t_oh / 1e3
    );
    let cells = rows.iter().map(|r| {
        vec![
            r["function"].as_str().unwrap_or("?").to_string(),
            format!("{:.3}", r["t_acc_ns"].as_f64().unwrap_or(0.0) / 1e3),
            r["runs"].to_string(),
            format!("{:.3}", r["per_slot_gbps"].as_f64().unwrap_or(0.0)),
            r["slots"].to_string(),
        ]
    });
    let header = ["function", "T_acc µs", "runs", "Gbit/s a slot", "slots"];
    println!("{}", offrac_bench::text_table(&header, 1, cells));
    println!("N = ceil(Θ · (T_oh + T_acc) / s), seed 001 §III-C; slots run in parallel only up to the node's free cores");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seeds_formula() {
        // 1 KiB at (0.4 + 0.692) µs is 7.5 Gbit/s a slot: 20 Gbit/s needs 3.
        let theta = 20e9 / 8.0;
        assert_eq!(slots_needed(theta, 1024, 400.0, 692.0), 3);
        assert_eq!(slots_needed(1.0, 1024, 400.0, 692.0), 1);
        assert_eq!(size_class(1000), 1024);
        assert_eq!(size_class(1), 64);
    }
}
