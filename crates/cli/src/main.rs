//! `offrac`: one command for the node and its clients.

mod bench;
mod buffer;
mod call;
mod collective;
mod config;
mod ctl;
mod ctl_bench;
mod ctl_bench_ops;
mod demo;
mod functions;
mod payload_text;
mod pipeline;
mod provision;
mod serve;
mod sim;
mod sim_trace;
mod status;
mod tenant;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "offrac",
    version,
    about = "Remote accelerator calls: a node and its clients"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Start a node hosting the built-in accelerators.
    Serve(serve::Args),
    /// Call one function on a node and print the result.
    Call(call::Args),
    /// List the built-in functions: ids, layouts, parameters and slot state (the registry).
    Functions(functions::Args),
    /// Show a node's slots, queues and refusals (from its metrics endpoint).
    Status(status::Args),
    /// Start a node and drive a short mixed load at it; print throughput and latency.
    Demo(demo::Args),
    /// Load generator, trace replay and baseline servers (raw echo floor, CPU server, gRPC).
    Bench(bench::Args),
    /// Simulate the node's datapath under virtual time (OffRAC §3, Appendices B and E); CSV out.
    Sim(sim::Args),
    /// The Azure trace, time-compressed, in the simulator: autoscaler against static slots; JSON out.
    SimTrace(sim_trace::Args),
    /// Print the default configuration, or check a configuration file.
    Config(config::Args),
    /// How many slots a target throughput needs, from a node's live T_oh and T_acc.
    Provision(provision::Args),
    /// Named pipelines and cluster members in the cluster store (etcd).
    Pipeline(pipeline::Args),
    /// One rank's call of a collective (bcast, reduce, allreduce, gather, scatter) on its
    /// own node; every rank runs it with the same tag (docs/collectives.md).
    Collective(collective::Args),
    /// Named buffers on a node: keep data there, read it back, drop it
    /// (docs/protocol.md, "Named buffers").
    Buffer(buffer::Args),
    /// Control requests: upload a WebAssembly module, swap a slot's function, list, unload;
    /// bench-swap measures swap times (docs/control.md).
    Ctl(ctl::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) on stdout: `offrac man | man -l -`.
    Man,
}

/// A node's large buffers (a reassembled request, a collective's work buffer
/// and segments, an answer) come and go at the rate of requests. glibc maps
/// each allocation from 128 KiB up (its threshold grows with use, to at most
/// 32 MiB) and unmaps it on free, so every such buffer is faulted in afresh,
/// page by page: at 16 MiB that cost more than the copies themselves
/// (`docs/collectives.md`, "Large messages"). Fixed thresholds keep buffers up
/// to 32 MiB (glibc's largest threshold) on the heap for reuse, and up to
/// 256 MiB of free heap before it is returned to the system.
fn keep_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes glibc's allocation thresholds; called before
    // any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
}

fn main() -> ExitCode {
    // Like any Unix filter: a closed pipe (`offrac demo --json | head`) ends
    // the process quietly instead of a panic in println!.
    // SAFETY: called first thing, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    if serves(&cli.command) {
        // Servers, though: a client that resets its connection while answers are
        // written to it must cost an EPIPE on that connection, not the process
        // (the soak of issue #10 saw a node killed by SIGPIPE after ~5 minutes
        // of hostile clients). Rust's own default, restored.
        // SAFETY: still before any thread exists (parsing starts none).
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        keep_large_buffers();
    }
    let result = match cli.command {
        Command::Serve(a) => serve::run(a),
        Command::Call(a) => call::run(a),
        Command::Functions(a) => functions::run(a),
        Command::Status(a) => status::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Sim(a) => sim::run(a),
        Command::SimTrace(a) => sim_trace::run(a),
        Command::Config(a) => config::run(a),
        Command::Pipeline(a) => pipeline::run(a),
        Command::Provision(a) => provision::run(a),
        Command::Ctl(a) => ctl::run(a),
        Command::Collective(a) => collective::run(a),
        Command::Buffer(a) => buffer::run(a),
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "offrac", &mut std::io::stdout());
            Ok(())
        }
        Command::Man => {
            let cmd = <Cli as clap::CommandFactory>::command();
            clap_mangen::Man::new(cmd)
                .render(&mut std::io::stdout())
                .map_err(CliError::from)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("offrac: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Commands that accept connections from clients they do not control.
fn serves(command: &Command) -> bool {
    match command {
        Command::Serve(_) => true,
        Command::Bench(a) => a.serves(),
        _ => false,
    }
}

/// Errors any command can end with.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Node(#[from] offrac_node::NodeError),
    #[error(transparent)]
    Config(#[from] offrac_node::ConfigError),
    #[error(transparent)]
    Client(#[from] offrac_client::ClientError),
    #[error(transparent)]
    Bench(#[from] offrac_bench::BenchError),
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Usage(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Cluster(#[from] offrac_cluster::ClusterError),
}

pub fn init_logs(json: bool, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("OFFRAC_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

pub fn load_config(path: Option<&str>) -> Result<offrac_node::NodeConfig, CliError> {
    let text = match path {
        Some(p) => std::fs::read_to_string(p).map_err(|source| CliError::Read {
            path: p.into(),
            source,
        })?,
        None => offrac_node::DEFAULT_CONFIG.to_string(),
    };
    Ok(offrac_node::NodeConfig::parse(&text)?)
}
