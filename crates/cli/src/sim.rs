//! `offrac sim`: run the discrete-event simulator over one configuration and
//! one or more seeds; CSV on stdout (one row per seed and request group).

use crate::CliError;
use offrac_core::{BufferPolicy, SlotPolicy};
use offrac_sim::{
    parse_list, Delay, NodeModel, OnRefusal, PoolModel, SimConfig, SizeDist, Summary,
};
use std::io::Write;

#[derive(Clone, Copy, clap::ValueEnum)]
enum Node {
    /// Reassemble in the core's pool, then queue complete requests to slots.
    Reassembled,
    /// Feed fragments straight to an accelerator (Fig. 4's baseline).
    Immediate,
    /// The node's own driver around the core, with a hand-off to slot workers (--handoff-us).
    Driver,
}

#[derive(clap::Args)]
pub struct Args {
    /// Clients, one connection each.
    #[arg(long, default_value_t = 8)]
    clients: usize,
    /// Requests each client completes (closed loop) or sends (open loop).
    #[arg(long, default_value_t = 100)]
    requests: u64,
    /// Request-type mix A:B:C… (weights).
    #[arg(long, default_value = "33:33:33")]
    mix: String,
    /// Sizes in fragments: single (95/3/1/1), uniform, multi (10/30/30/30) over 1/2/4/8, or FRAGS:WEIGHT,….
    #[arg(long, default_value = "uniform")]
    sizes: String,
    /// Delay between a request's fragments in µs: N, fixed:N, uniform:LO:HI, exp:MEAN.
    #[arg(long, default_value = "uniform:5:15")]
    gap: String,
    /// Delay before the next request (after the answer; open loop: after the last fragment).
    #[arg(long, default_value = "0")]
    think: String,
    /// Open loop: send without waiting for answers; refused requests are not retried.
    #[arg(long)]
    open_loop: bool,
    /// Back-off before a refused request is retried, µs.
    #[arg(long, default_value = "uniform:80:120")]
    retry: String,
    /// Execution time of each accelerator type in µs per fragment (comma-separated).
    #[arg(long, default_value = "10,10,10")]
    exec_us: String,
    /// Per-request overhead added to every execution, µs (T_oh).
    #[arg(long, default_value_t = 0.0)]
    overhead_us: f64,
    /// Instances of each accelerator type (comma-separated).
    #[arg(long, default_value = "1,1,1")]
    instances: String,
    /// Payload bytes per fragment fed to the engine. Every size the model
    /// compares scales with it, so results do not depend on it; small is fast.
    #[arg(long, default_value_t = 8)]
    frag_bytes: u32,
    #[arg(long, value_enum, default_value = "reassembled")]
    node: Node,
    /// `--node driver`: latency of the hand-off from the I/O thread to a slot's worker, µs.
    #[arg(long, default_value_t = 0.0)]
    handoff_us: f64,
    /// Reassembly buffers.
    #[arg(long, default_value_t = 4)]
    buffers: usize,
    /// Capacity of each buffer, fragments.
    #[arg(long, default_value_t = 16)]
    buffer_frags: u64,
    /// Buffer admission policy: naive-rr, eligible-rr or jsb.
    #[arg(long, default_value = "eligible-rr", value_parser = str::parse::<BufferPolicy>)]
    policy: BufferPolicy,
    /// Slot selection policy: rr or jsq.
    #[arg(long, default_value = "rr", value_parser = str::parse::<SlotPolicy>)]
    selector: SlotPolicy,
    /// No single-fragment queue: small requests share the pool.
    #[arg(long)]
    no_small_queue: bool,
    /// Capacity of the single-fragment queue, fragments.
    #[arg(long, default_value_t = 16)]
    small_queue_frags: u64,
    /// Per-accelerator buffers: buffer i admits only type i mod (number of types).
    #[arg(long)]
    per_function_buffers: bool,
    /// Capacity of each slot queue, fragments.
    #[arg(long, default_value_t = 64)]
    slot_queue_frags: u64,
    /// A request refused while its fragments are still going out: `finish`
    /// sending them (the node discards them) or `abort` (stop, reset the
    /// connection, retry on a new one after the back-off; the paper's simulator).
    #[arg(long, default_value = "finish", value_parser = str::parse::<OnRefusal>)]
    on_refusal: OnRefusal,
    /// Seed of every client's (function, size) sequence; default: each run's timing seed.
    /// Fixed, it replays one request sequence across the timing seeds.
    #[arg(long)]
    workload_seed: Option<u64>,
    /// Start every client at t = 0 (default: spread over one inter-fragment gap).
    #[arg(long)]
    start_together: bool,
    /// First (timing) seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of seeds (seed, seed+1, …), one run each.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Threads running seeds in parallel (default: one per core).
    #[arg(long)]
    jobs: Option<usize>,
    /// Leave out the CSV header line.
    #[arg(long)]
    no_header: bool,
}

fn usage<E: std::fmt::Display>(e: E) -> CliError {
    CliError::Usage(e.to_string())
}

fn config(a: &Args) -> Result<SimConfig, CliError> {
    let delay = |s: &str| s.parse::<Delay>().map_err(usage);
    let pool = PoolModel {
        buffers: a.buffers,
        buffer_frags: a.buffer_frags,
        policy: a.policy,
        selector: a.selector,
        small_queue: !a.no_small_queue,
        small_queue_frags: a.small_queue_frags,
        per_function: a.per_function_buffers,
        slot_queue_frags: a.slot_queue_frags,
    };
    let node = match a.node {
        Node::Immediate => NodeModel::Immediate,
        Node::Reassembled => NodeModel::Reassembled(pool),
        Node::Driver => NodeModel::Driven {
            pool,
            handoff_ns: (a.handoff_us * 1000.0).round() as u64,
        },
    };
    Ok(SimConfig {
        clients: a.clients,
        requests: a.requests,
        mix: parse_list(&a.mix, ':').map_err(usage)?,
        sizes: a.sizes.parse::<SizeDist>().map_err(usage)?,
        gap: delay(&a.gap)?,
        think: delay(&a.think)?,
        open_loop: a.open_loop,
        retry: delay(&a.retry)?,
        exec_us: parse_list(&a.exec_us, ',').map_err(usage)?,
        overhead_us: a.overhead_us,
        instances: parse_list(&a.instances, ',').map_err(usage)?,
        frag_bytes: a.frag_bytes,
        node,
        seed: a.seed,
        workload_seed: a.workload_seed,
        on_refusal: a.on_refusal,
        start_together: a.start_together,
    })
}

pub fn run(a: Args) -> Result<(), CliError> {
    let mut cfg = config(&a)?;
    cfg.validate().map_err(usage)?;
    let mut out = std::io::stdout().lock();
    if !a.no_header {
        writeln!(out, "{}", Summary::CSV_HEADER)?;
    }
    // Seeds are independent runs: spread them over the cores, print in seed order.
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, a.seeds.max(1) as usize);
    let t0 = std::time::Instant::now();
    let next = std::sync::atomic::AtomicU64::new(0);
    let results: Vec<Vec<(u64, Summary, f64)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                let (cfg, next) = (&cfg, &next);
                scope.spawn(move || {
                    let mut done = Vec::new();
                    loop {
                        let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if k >= a.seeds {
                            return Ok(done);
                        }
                        let mut c = cfg.clone();
                        c.seed = a.seed + k;
                        let t = std::time::Instant::now();
                        let s = offrac_sim::run(&c).map_err(usage)?;
                        done.push((k, s, t.elapsed().as_secs_f64()));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(usage("a simulation thread panicked")))
            })
            .collect::<Result<Vec<_>, CliError>>()
    })?;
    let wall = t0.elapsed().as_secs_f64();
    let mut runs: Vec<(u64, Summary, f64)> = results.into_iter().flatten().collect();
    runs.sort_by_key(|r| r.0);
    let (mut attempts, mut events, mut busy) = (0u64, 0u64, 0.0f64);
    for (_, s, t) in &runs {
        attempts += s.row("all").map_or(0, |r| r.attempts);
        events += s.events;
        busy += t;
        out.write_all(s.csv().as_bytes())?;
    }
    cfg.seed = a.seed;
    // The speed goes to stderr so that stdout stays a pure function of the seeds.
    eprintln!(
        "{{\"event\":\"sim_speed\",\"attempts\":{attempts},\"events\":{events},\"jobs\":{jobs},\"wall_s\":{wall:.6},\"attempts_per_s\":{:.0},\"attempts_per_s_per_core\":{:.0}}}",
        attempts as f64 / wall.max(1e-9),
        attempts as f64 / busy.max(1e-9)
    );
    Ok(())
}
