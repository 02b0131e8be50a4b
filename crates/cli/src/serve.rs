use crate::{init_logs, load_config, CliError};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// Every flag can also be set by its `OFFRAC_*` environment variable; a flag
/// given on the command line wins, and both win over the TOML file.
#[derive(clap::Args)]
pub struct Args {
    /// Address to listen on (port 0 picks a free one).
    #[arg(long, env = "OFFRAC_LISTEN", default_value = "127.0.0.1:7000")]
    listen: String,
    /// TOML configuration (default: the embedded one, see docs/operations.md).
    #[arg(long, env = "OFFRAC_CONFIG")]
    config: Option<String>,
    /// Where to serve /metrics, /healthz and /readyz ("" disables; overrides [metrics] listen).
    #[arg(long, env = "OFFRAC_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// On SIGTERM/SIGINT, how long held work may still run (overrides shutdown_grace_ms).
    #[arg(long, env = "OFFRAC_SHUTDOWN_GRACE_MS")]
    shutdown_grace_ms: Option<u64>,
    /// Front a real server (repeatable): "listen=HOST:PORT,function=memcached_cache,backend=HOST:PORT[,capacity_bytes=N]"
    /// or "listen=HOST:PORT,function=jwt,backend=HOST:PORT,secret_file=PATH[,issuer=S,audience=S]"
    /// (the keys of an [[attach]] entry, docs/inline.md).
    #[arg(long, value_name = "SPEC")]
    attach: Vec<String>,
    /// Write logs to stderr as JSON lines.
    #[arg(long, env = "OFFRAC_LOG_JSON")]
    log_json: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    init_logs(a.log_json, "info");
    let mut cfg = load_config(a.config.as_deref())?;
    if let Some(m) = a.metrics_listen {
        cfg.metrics_listen = Some(m).filter(|s| !s.is_empty());
    }
    for spec in &a.attach {
        cfg.attach.push(
            offrac_node::attach::AttachConfig::from_spec(spec)
                .map_err(offrac_node::ConfigError::from)?,
        );
    }
    if let Some(g) = a.shutdown_grace_ms {
        cfg.shutdown_grace_ms = g;
    }
    // Catch stop signals before the "listening" line goes out: a supervisor
    // that signals as soon as it reads the line must get a clean stop, not a kill.
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])?;
    let node = offrac_node::start(cfg, &a.listen)?;
    // The first stdout line tells scripts where the node listens.
    let line = serde_json::json!({
        "event": "listening",
        "addr": node.addr.to_string(),
        "metrics": node.metrics_addr.map(|m| m.to_string()),
        "attach": node.attached.iter().map(|a| a.to_string()).collect::<Vec<_>>(),
    });
    let handle = node.shutdown_handle();
    std::thread::spawn(move || {
        let mut stopping = false;
        for sig in signals.forever() {
            match sig {
                // Nothing can be reloaded in place yet: say so instead of dying.
                SIGHUP => tracing::warn!(
                    "SIGHUP ignored: the configuration is read at start only; restart the node to change it"
                ),
                _ if stopping => {
                    tracing::warn!("second stop signal: exiting now, without waiting for held work");
                    std::process::exit(130);
                }
                _ => {
                    stopping = true;
                    handle.shutdown();
                }
            }
        }
    });
    println!("{line}");
    node.join()?;
    tracing::info!("node stopped");
    Ok(())
}
