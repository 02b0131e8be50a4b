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
    /// Which datapath runs the requests: the software node, or the Verilated
    /// RTL request path (the six built-ins: echo, top-k, min-max, MapId, SparseTransform,
    /// Bucketize; needs a build with the `rtl` feature). With rtl, --config's MapId dictionary
    /// and Bucketize borders are loaded into it, and settings it cannot host are refused.
    #[arg(long, env = "OFFRAC_DATAPATH", value_enum, default_value_t = Datapath::Software)]
    datapath: Datapath,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Datapath {
    Software,
    Rtl,
}

pub fn run(a: Args) -> Result<(), CliError> {
    init_logs(a.log_json, "info");
    if a.datapath == Datapath::Rtl {
        return run_rtl(&a);
    }
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

/// `--datapath rtl`: the RTL request path, Verilated, behind a thin TCP
/// driver (offrac-rtl-model). With `--config`, the file's function state
/// (MapId's dictionary, Bucketize's border sets) is loaded into the RTL at
/// start-up, and whatever the instance cannot host (a function it lacks, a
/// pool or payload limit past its parameters, a dictionary or border set
/// larger than its tables, peers, attach points, ...) stops it before it
/// listens, naming the setting and the limit.
#[cfg(feature = "rtl")]
fn run_rtl(a: &Args) -> Result<(), CliError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    if !a.attach.is_empty() {
        return Err(CliError::Usage(
            "--datapath rtl takes no --attach: the RTL request path fronts no server (docs/rtl.md)"
                .into(),
        ));
    }
    let state = match a.config.as_deref() {
        Some(path) => {
            let cfg = load_config(Some(path))?;
            let settings = rtl_settings(&cfg);
            for w in offrac_rtl_model::check_settings(&settings)
                .map_err(|e| CliError::Usage(format!("{path}: {e}")))?
            {
                tracing::warn!("{w}");
            }
            let mask = offrac_rtl_model::slot_mask(&settings.slots)
                .map_err(|e| CliError::Usage(format!("{path}: {e}")))?;
            (
                settings.dictionary,
                settings.borders,
                mask,
                settings.slot_policy,
            )
        }
        // no file: the instance's own functions with the node's built-in state
        None => {
            let s = offrac_node::NodeConfig::default_config().state;
            (
                s.dictionary.keys(),
                s.borders.to_vec(),
                offrac_rtl_model::DEFAULT_SLOT_MASK,
                offrac_rtl_model::SlotPolicy::Rr,
            )
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGINT, SIGTERM] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let listener = std::net::TcpListener::bind(&a.listen)?;
    let addr = listener.local_addr()?;
    // The model loads MapId's dictionary before the first request; say where
    // we listen only once it can answer.
    let (tx, rx) = std::sync::mpsc::channel();
    let flag = Arc::clone(&stop);
    let worker = std::thread::spawn(move || {
        offrac_rtl_model::serve(
            listener,
            &flag,
            &state.0,
            &state.1,
            state.2,
            state.3,
            move || {
                let _ = tx.send(());
            },
        )
    });
    if rx.recv().is_ok() {
        let line = serde_json::json!({"event": "listening", "addr": addr.to_string(), "metrics": null, "attach": [], "datapath": "rtl"});
        println!("{line}");
    }
    let stats = worker
        .join()
        .map_err(|_| CliError::Usage("the RTL datapath thread panicked".into()))?
        .map_err(|e| CliError::Usage(e.to_string()))?;
    tracing::info!(
        connections = stats.connections,
        responses = stats.responses,
        cycles = stats.busy_cycles,
        closes = stats.closes,
        slot_hops = ?stats.slot_hops,
        "RTL datapath stopped"
    );
    stop.store(true, Ordering::Relaxed);
    Ok(())
}

/// What of the node's configuration matters to the RTL (checked by
/// `offrac_rtl_model::check_settings`).
#[cfg(feature = "rtl")]
fn rtl_settings(c: &offrac_node::NodeConfig) -> offrac_rtl_model::RtlSettings {
    let mut other = Vec::new();
    if !c.attach.is_empty() {
        other.push("[[attach]]".to_string());
    }
    if c.cluster.is_some() {
        other.push("[cluster]".to_string());
    }
    if !c.control.keys.is_empty() {
        other.push("[control] tenants".to_string());
    }
    if c.autoscale.is_some() {
        other.push("[autoscale]".to_string());
    }
    offrac_rtl_model::RtlSettings {
        device_id: c.engine.device_id,
        peers: c.devices.iter().map(|d| d.device).collect(),
        slots: c
            .slots
            .iter()
            .map(|s| (s.function.id(), s.function.name().to_string(), s.spare))
            .collect(),
        slot_policy: match c.engine.slot_policy {
            offrac_core::SlotPolicy::Rr => offrac_rtl_model::SlotPolicy::Rr,
            offrac_core::SlotPolicy::Jsq => offrac_rtl_model::SlotPolicy::Jsq,
        },
        buffers: c.engine.buffers,
        buffer_bytes: c.engine.buffer_bytes,
        max_payload: c.engine.max_payload,
        small_request_max: c.engine.small_request_max,
        small_queue_bytes: c.engine.small_queue_bytes,
        dictionary: c.state.dictionary.keys(),
        borders: c.state.borders.to_vec(),
        other,
    }
}

#[cfg(not(feature = "rtl"))]
fn run_rtl(_: &Args) -> Result<(), CliError> {
    Err(CliError::Usage(
        "this offrac was built without the `rtl` feature, so --datapath rtl is not available: \
         build with `cargo build --release --workspace --bins --examples --features offrac-cli/rtl` \
         (needs Verilator 5)"
            .into(),
    ))
}
