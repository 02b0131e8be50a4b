//! `offrac bench`: the load generator, trace replay and the baseline servers.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use offrac_bench::grpc::{serve_grpc, GrpcCaller};
use offrac_bench::servers::{cpu, floor, raw, IoMode, ServerHandle};
use offrac_bench::trace::{load_trace, replay, ReplaySpec};
use offrac_bench::{
    parse_mix, run_closed_loop, run_closed_loop_with, run_open_loop, BenchReport, BenchSpec,
    Caller, CSV_HEADER,
};

use crate::CliError;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Sub,
}

impl Args {
    /// A server (the baselines), not a client.
    pub fn serves(&self) -> bool {
        !matches!(self.command, Sub::Load(_) | Sub::Replay(_))
    }
}

#[derive(clap::Subcommand)]
enum Sub {
    /// Drive load at a node (or a baseline): closed loop, or open loop with --rate.
    Load(LoadArgs),
    /// Replay the Azure Functions 2021 trace against a node (rows of unknown apps are skipped and counted).
    Replay(ReplayArgs),
    /// Serve the raw TCP echo (same framing, nothing else) on one epoll thread, like the node.
    ServeRaw(ServeArgs),
    /// Serve the same echo with one thread per connection spinning on recv: the real floor.
    ServeFloor(FloorArgs),
    /// Serve the CPU baseline: K workers, each connection reassembled and run on its worker.
    ServeCpu(CpuArgs),
    /// Serve the built-ins over gRPC (tonic, unary calls) for `load --protocol grpc`.
    ServeGrpc(GrpcArgs),
}

#[derive(clap::Args)]
struct GrpcArgs {
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
}

#[derive(clap::Args)]
struct Output {
    /// Append result rows to this CSV file (header written when the file is new).
    #[arg(long)]
    csv: Option<PathBuf>,
    /// Write the full report as JSON to this file ("-" = stdout, instead of the table).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Label stored in the report (e.g. "node", "raw").
    #[arg(long, default_value = "")]
    label: String,
    /// No progress bar.
    #[arg(long)]
    no_progress: bool,
}

#[derive(clap::Args)]
struct LoadArgs {
    /// Server address (host:port).
    #[arg(long)]
    addr: String,
    /// Connections: closed-loop clients, or connections the open-loop arrivals are spread over.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Open loop: Poisson arrivals at this many requests/s in total.
    #[arg(long)]
    rate: Option<f64>,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Seconds sent but not recorded, first.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// FUNCTION:BYTES[:PARAM] items, comma-separated; each request picks one at random.
    #[arg(long, default_value = "echo:4096")]
    mix: String,
    /// Writes each request is split into (the header rides in the first).
    #[arg(long, default_value_t = 1)]
    fragments: usize,
    /// Busy-waited gap between fragments, µs.
    #[arg(long, default_value_t = 0.0)]
    gap_us: f64,
    /// Spin on non-blocking sockets instead of sleeping.
    #[arg(long)]
    busy_poll: bool,
    /// Closed loop: client i always sends mix item i mod (mix length) instead of a random one.
    #[arg(long)]
    item_per_client: bool,
    /// Send each request as this chain, FUNCTION[:PARAM][@DEVICE],… (e.g. minmax,logit@1),
    /// with its mix item's payload. Default: the mix item's function alone.
    #[arg(long)]
    chain: Option<String>,
    /// Closed loop: each client registers as a direct reply endpoint on the node at this
    /// HOST:PORT (the one that ends the chain), which writes the answers there instead of
    /// sending them back along the chain's path.
    #[arg(long, value_name = "HOST:PORT")]
    reply_at: Option<String>,
    #[command(flatten)]
    tenant: crate::tenant::TenantArgs,
    /// Send every mix item to this function id instead of its own (e.g. a WebAssembly
    /// module of 128..=250 swapped into a slot, fed the mix item's payload).
    #[arg(long)]
    function_id: Option<u8>,
    /// "wire" (the offrac framing: nodes, raw echo, CPU baseline) or "grpc" (closed loop only).
    #[arg(long, default_value = "wire")]
    protocol: String,
    /// Seed of payload data, mix choice and arrivals.
    #[arg(long, default_value_t = 0x0ff7_ac00)]
    seed: u64,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args)]
struct ReplayArgs {
    #[arg(long)]
    addr: String,
    /// The processed trace CSV (app,sleep_time,request_size,response_size).
    #[arg(long)]
    trace: PathBuf,
    /// Divide every sleep_time by this.
    #[arg(long, default_value_t = 1.0)]
    speedup: f64,
    /// Replay at most this many rows (0 = all).
    #[arg(long, default_value_t = 0)]
    max_rows: usize,
    /// Stop after this many seconds (0 = no limit).
    #[arg(long, default_value_t = 0.0)]
    time_limit: f64,
    /// K of top-k requests.
    #[arg(long, default_value_t = 16)]
    topk_k: u64,
    #[arg(long)]
    busy_poll: bool,
    /// Skip this many rows first (start the replay mid-trace).
    #[arg(long, default_value_t = 0)]
    from_row: usize,
    /// Open loop: send each row at its time in the trace (sleeps summed, divided by
    /// --speedup), whatever the answers, spread over --clients connections.
    #[arg(long)]
    open_loop: bool,
    /// --open-loop: connections.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    #[command(flatten)]
    out: Output,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on (port 0 picks one; printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// "poll" (busy-poll --spin-us after the last event) or "blocking".
    #[arg(long, default_value = "poll")]
    io: String,
    #[arg(long, default_value_t = 100)]
    spin_us: u64,
}

#[derive(clap::Args)]
struct FloorArgs {
    /// Address to listen on (port 0 picks one; printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
}

#[derive(clap::Args)]
struct CpuArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Worker threads (connections are spread over them round-robin).
    #[arg(long, default_value_t = 1)]
    workers: usize,
}

pub fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Sub::Load(l) => load(l),
        Sub::Replay(r) => replay_cmd(r),
        Sub::ServeRaw(s) => {
            let mode = io_mode(&s)?;
            serve_forever(raw::serve_raw(&s.listen, mode)?)
        }
        Sub::ServeFloor(f) => serve_forever(floor::serve_floor(&f.listen)?),
        Sub::ServeCpu(c) => {
            let mode = io_mode(&c.serve)?;
            serve_forever(cpu::serve_cpu(&c.serve.listen, c.workers, mode)?)
        }
        Sub::ServeGrpc(g) => {
            let server = serve_grpc(&g.listen, g.threads)?;
            announce(server.addr)?;
            server.wait();
            Ok(())
        }
    }
}

fn io_mode(s: &ServeArgs) -> Result<IoMode, CliError> {
    match s.io.as_str() {
        "poll" => Ok(IoMode::Poll {
            spin: Duration::from_micros(s.spin_us),
        }),
        "blocking" => Ok(IoMode::Blocking),
        other => Err(CliError::Usage(format!(
            "--io {other:?}: want poll or blocking"
        ))),
    }
}

/// The first stdout line tells scripts where the server listens.
fn announce(addr: std::net::SocketAddr) -> Result<(), CliError> {
    println!(
        "{}",
        serde_json::json!({"event": "listening", "addr": addr.to_string()})
    );
    std::io::stdout().flush()?;
    Ok(())
}

fn serve_forever(h: ServerHandle) -> Result<(), CliError> {
    announce(h.addr)?;
    h.wait();
    Ok(())
}

fn secs(x: f64, what: &str) -> Result<Duration, CliError> {
    Duration::try_from_secs_f64(x).map_err(|_| CliError::Usage(format!("{what}: bad seconds {x}")))
}

fn load(a: LoadArgs) -> Result<(), CliError> {
    let mut mix = parse_mix(&a.mix)?;
    if let Some(id) = a.function_id {
        for m in &mut mix {
            m.wire_id = id;
        }
    }
    let mut spec = BenchSpec::new(a.addr, a.clients, mix);
    spec.rate = a.rate;
    spec.duration = secs(a.duration, "--duration")?;
    spec.warmup = secs(a.warmup, "--warmup")?;
    spec.fragments = a.fragments;
    spec.fragment_gap = Duration::from_secs_f64(a.gap_us.max(0.0) / 1e6);
    spec.busy_poll = a.busy_poll;
    spec.item_per_client = a.item_per_client;
    if let Some(c) = &a.chain {
        spec.chain =
            offrac_proto::chain_spec::parse(c).map_err(|e| CliError::Usage(e.to_string()))?;
    }
    if a.reply_at.is_some() && a.protocol != "wire" {
        return Err(CliError::Usage(
            "--reply-at needs the offrac wire protocol".into(),
        ));
    }
    spec.reply_at = a.reply_at.clone();
    spec.tenant = a.tenant.parsed()?;
    spec.seed = a.seed;
    spec.progress = !a.out.no_progress;
    spec.label = a.out.label.clone();
    let report = match (a.protocol.as_str(), spec.rate.is_some()) {
        ("wire", true) => run_open_loop(&spec)?,
        ("wire", false) => run_closed_loop(&spec)?,
        ("grpc", false) => run_closed_loop_with(&spec, |s| {
            Ok(Box::new(GrpcCaller::connect(&s.addr)?) as Box<dyn Caller>)
        })?,
        ("grpc", true) => {
            return Err(CliError::Usage(
                "--protocol grpc drives a closed loop only (no --rate)".into(),
            ))
        }
        (p, _) => {
            return Err(CliError::Usage(format!(
                "--protocol {p:?}: want wire or grpc"
            )))
        }
    };
    if a.protocol == "grpc" && a.fragments > 1 {
        eprintln!("note: --fragments does not apply to gRPC calls");
    }
    emit(&report, &a.out)
}

fn replay_cmd(a: ReplayArgs) -> Result<(), CliError> {
    let all = load_trace(&a.trace)?;
    let rows = all.get(a.from_row..).unwrap_or_default();
    if a.open_loop {
        let rows = if a.max_rows > 0 {
            &rows[..a.max_rows.min(rows.len())]
        } else {
            rows
        };
        let (mix, schedule, skipped) =
            offrac_bench::trace::open_schedule(rows, a.speedup, a.topk_k)?;
        let last = schedule.last().map_or(Duration::ZERO, |e| e.0);
        let mut spec = BenchSpec::new(a.addr, a.clients, mix);
        spec.duration = last.max(Duration::from_millis(1));
        spec.warmup = Duration::ZERO;
        spec.busy_poll = a.busy_poll;
        spec.progress = !a.out.no_progress;
        spec.label = a.out.label.clone();
        spec.schedule = Some(std::sync::Arc::new(schedule));
        let mut report = run_open_loop(&spec)?;
        report.skipped = skipped;
        return emit(&report, &a.out);
    }
    let spec = ReplaySpec {
        addr: a.addr,
        speedup: a.speedup,
        max_rows: a.max_rows,
        time_limit: secs(a.time_limit, "--time-limit")?,
        busy_poll: a.busy_poll,
        topk_k: a.topk_k,
        progress: !a.out.no_progress,
        label: a.out.label.clone(),
    };
    emit(&replay(&spec, rows)?, &a.out)
}

fn emit(report: &BenchReport, out: &Output) -> Result<(), CliError> {
    if let Some(path) = &out.csv {
        let new = std::fs::metadata(path)
            .map(|m| m.len() == 0)
            .unwrap_or(true);
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        if new {
            writeln!(f, "{CSV_HEADER}")?;
        }
        f.write_all(report.to_csv().as_bytes())?;
    }
    match &out.json {
        Some(p) if p.as_os_str() == "-" => println!("{}", report.to_json()),
        Some(p) => {
            std::fs::write(p, report.to_json())?;
            println!("{}", report.render_table());
        }
        None => println!("{}", report.render_table()),
    }
    Ok(())
}
