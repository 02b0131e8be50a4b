use crate::{init_logs, load_config, CliError};
use signal_hook::consts::{SIGINT, SIGTERM};

#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, default_value = "127.0.0.1:7000")]
    listen: String,
    /// TOML configuration (default: the embedded one, see docs/operations.md).
    #[arg(long)]
    config: Option<String>,
    /// Write logs to stderr as JSON lines.
    #[arg(long)]
    log_json: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    init_logs(a.log_json, "info");
    let cfg = load_config(a.config.as_deref())?;
    let node = offrac_node::start(cfg, &a.listen)?;
    // The first stdout line tells scripts where the node listens.
    let line = serde_json::json!({
        "event": "listening",
        "addr": node.addr.to_string(),
        "metrics": node.metrics_addr.map(|m| m.to_string()),
    });
    println!("{line}");
    let handle = node.shutdown_handle();
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
    std::thread::spawn(move || {
        if signals.forever().next().is_some() {
            handle.shutdown();
        }
    });
    node.join()?;
    tracing::info!("node stopped");
    Ok(())
}
