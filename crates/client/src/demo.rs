//! Closed-loop load driver: `clients` threads, each with its own connection,
//! each sending its next request as soon as the previous one is answered.
//!
//! Round-trip times are measured by the client per call (including any `BUSY`
//! back-off, i.e. the latency a caller sees); the node's own split of each
//! `OK` call (reassembly, queue, exec) comes from the response header, and the
//! remainder is reported as network + node overhead.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use offrac_proto::{FunctionId, ResponseHeader, Status};
use serde::Serialize;

use crate::client::{Client, ClientError, RetryPolicy};
use crate::rng::SplitMix64;

/// Largest value the latency histograms track (60 s, in nanoseconds); longer
/// round trips are clamped to it.
const HIST_MAX_NS: u64 = 60_000_000_000;
const HIST_SIGFIGS: u8 = 3;

/// How each client picks the next mix entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum MixOrder {
    /// Cycle through the mix; client `i` starts at entry `i % mix.len()`.
    RoundRobin,
    /// Uniformly random entry, from a generator seeded by `seed` and the client index.
    #[default]
    Random,
}

/// What load to apply. Build with [`LoadSpec::new`] and adjust fields.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Node address, `host:port`.
    pub addr: String,
    /// Concurrent connections, one thread each (≥ 1).
    pub clients: usize,
    /// Measured period, after the warm-up.
    pub duration: Duration,
    /// Period at the start whose requests are sent but not recorded.
    pub warmup: Duration,
    /// `(function, param, payload_bytes)` entries. Payloads are generated once
    /// per entry with valid data for the function (see [`generate_payload`]).
    pub mix: Vec<(FunctionId, u64, usize)>,
    pub order: MixOrder,
    /// `BUSY` handling for every call (default: [`RetryPolicy::default`]).
    pub retry: RetryPolicy,
    /// Seeds payload data and the per-client mix choice.
    pub seed: u64,
    /// Per-response read timeout; a call exceeding it counts as a connection
    /// error and the client reconnects.
    pub call_timeout: Duration,
    /// Clients busy-poll their sockets (see [`crate::Client::set_busy_poll`]).
    pub busy_poll: bool,
}

impl LoadSpec {
    pub fn new(
        addr: impl Into<String>,
        clients: usize,
        duration: Duration,
        warmup: Duration,
        mix: Vec<(FunctionId, u64, usize)>,
    ) -> LoadSpec {
        LoadSpec {
            addr: addr.into(),
            clients,
            duration,
            warmup,
            mix,
            order: MixOrder::default(),
            retry: RetryPolicy::default(),
            seed: 0x0ff7_ac00,
            call_timeout: Duration::from_secs(30),
            busy_poll: false,
        }
    }
}

/// One row of a [`LoadReport`]: everything recorded for one function (or the
/// total over all functions). Latencies are in microseconds; rates are over
/// the measured window. Latency and node-time figures cover `OK` calls only.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionRow {
    pub name: String,
    /// Function id, or `None` for the total row.
    pub function: Option<u8>,
    /// Calls that ended `OK` (possibly after `BUSY` retries).
    pub ok: u64,
    /// Calls that ended with a non-`OK` status or a transport error.
    pub errors: u64,
    /// `errors` by final status name; transport failures under `"CONNECTION"`.
    pub errors_by_status: BTreeMap<String, u64>,
    /// `BUSY` responses that were retried (not counted in `errors`).
    pub busy_retries: u64,
    /// `OK` calls per second.
    pub req_per_s: f64,
    /// Request + response payload bits of `OK` calls per second, in Gbit/s.
    pub gbit_per_s: f64,
    pub request_bytes: u64,
    pub response_bytes: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Mean node-reported reassembly time.
    pub reassembly_us: f64,
    /// Mean node-reported queue time.
    pub queue_us: f64,
    /// Mean node-reported execution time.
    pub exec_us: f64,
    /// Mean round trip minus mean (reassembly + queue + exec).
    pub overhead_us: f64,
}

/// Result of [`run_closed_loop`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadReport {
    pub addr: String,
    pub clients: usize,
    pub order: MixOrder,
    /// Requested measurement duration.
    pub duration_s: f64,
    pub warmup_s: f64,
    /// Actual measured window: end of warm-up to the last recorded answer.
    pub window_s: f64,
    /// One row per distinct function, in order of first appearance in the mix.
    pub rows: Vec<FunctionRow>,
    pub total: FunctionRow,
    /// Reconnects after connection-fatal errors (also counted per row as `CONNECTION`
    /// when they happened during the measured window).
    pub reconnects: u64,
    /// Clients that stopped early because they could not reconnect.
    pub clients_lost: usize,
    /// The last transport error seen, if any.
    pub last_error: Option<String>,
}

impl LoadReport {
    /// Machine-readable form (pretty JSON).
    pub fn to_json(&self) -> String {
        // Plain structs with string keys and finite floats cannot fail to serialize.
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// Human-readable aligned table, one line per function plus a total.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "offrac load: {} client{} x {:.2} s measured ({:.2} s window, {:.2} s warm-up), {:?} mix, node {}",
            self.clients,
            if self.clients == 1 { "" } else { "s" },
            self.duration_s,
            self.window_s,
            self.warmup_s,
            self.order,
            self.addr,
        );
        let _ = writeln!(
            out,
            "latencies in µs; reasm/queue/exec are node-reported means, net+ovh = mean rtt - their sum"
        );
        let header = format!(
            "{:<8} {:>9} {:>7} {:>10} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
            "function",
            "ok",
            "errors",
            "req/s",
            "Gbit/s",
            "mean",
            "p50",
            "p90",
            "p99",
            "p99.9",
            "max",
            "reasm",
            "queue",
            "exec",
            "net+ovh",
        );
        let rule = "-".repeat(header.chars().count());
        let _ = writeln!(out, "{header}");
        let _ = writeln!(out, "{rule}");
        for row in &self.rows {
            let _ = writeln!(out, "{}", format_row(row));
        }
        let _ = writeln!(out, "{rule}");
        let _ = writeln!(out, "{}", format_row(&self.total));
        for row in &self.rows {
            if row.errors > 0 || row.busy_retries > 0 {
                let detail: Vec<String> = row
                    .errors_by_status
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let _ = writeln!(
                    out,
                    "{}: {} errors [{}], {} BUSY retries",
                    row.name,
                    row.errors,
                    detail.join(", "),
                    row.busy_retries
                );
            }
        }
        if self.reconnects > 0 || self.clients_lost > 0 {
            let _ = writeln!(
                out,
                "reconnects: {}, clients lost: {}, last error: {}",
                self.reconnects,
                self.clients_lost,
                self.last_error.as_deref().unwrap_or("-")
            );
        }
        out
    }
}

fn format_row(r: &FunctionRow) -> String {
    format!(
        "{:<8} {:>9} {:>7} {:>10.1} {:>8.3} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1}",
        r.name,
        r.ok,
        r.errors,
        r.req_per_s,
        r.gbit_per_s,
        r.mean_us,
        r.p50_us,
        r.p90_us,
        r.p99_us,
        r.p999_us,
        r.max_us,
        r.reassembly_us,
        r.queue_us,
        r.exec_us,
        r.overhead_us,
    )
}

/// A payload of about `bytes` bytes with valid input for `function`, and the
/// param to send with it. `topk`: random i32; `logit`: f32 strictly inside
/// (0, 1); `minmax`: random finite f32 in [-1000, 1000); `matmul`: two n×n
/// f32 matrices in [-1, 1), n = `param`, or inferred from `bytes` when `param`
/// is 0 (the param is then sent as 0); `echo`/`spin`: random bytes. Array
/// payloads are rounded down to whole elements, at least one.
pub fn generate_payload(
    function: FunctionId,
    param: u64,
    bytes: usize,
    seed: u64,
) -> Result<Vec<u8>, ClientError> {
    let mut rng = SplitMix64::new(seed);
    let elems = (bytes / 4).max(1);
    let out = match function {
        FunctionId::Echo | FunctionId::Spin => {
            let mut v = vec![0u8; bytes];
            rng.fill_bytes(&mut v);
            v
        }
        FunctionId::TopK => (0..elems)
            .flat_map(|_| rng.next_u32().to_le_bytes())
            .collect(),
        FunctionId::Logit => (0..elems)
            .flat_map(|_| {
                // k / 2^24 with k in 1..2^24 is exact in f32 and strictly inside (0, 1).
                let k = 1 + (rng.next_u32() >> 8) % ((1 << 24) - 1);
                (k as f32 / (1u32 << 24) as f32).to_le_bytes()
            })
            .collect(),
        FunctionId::MinMax => (0..elems)
            .flat_map(|_| ((rng.next_f64() * 2000.0 - 1000.0) as f32).to_le_bytes())
            .collect(),
        FunctionId::MatMul => {
            let n = if param == 0 {
                ((bytes / 8) as f64).sqrt().floor().max(1.0) as u64
            } else {
                param
            };
            let len = n
                .checked_mul(n)
                .and_then(|nn| nn.checked_mul(8))
                .filter(|&l| l <= u32::MAX as u64)
                .ok_or_else(|| {
                    ClientError::Config(format!("matmul n={n} does not fit one request"))
                })?;
            (0..len / 4)
                .flat_map(|_| ((rng.next_f64() * 2.0 - 1.0) as f32).to_le_bytes())
                .collect()
        }
    };
    if out.len() > u32::MAX as usize {
        return Err(ClientError::PayloadTooLarge(out.len()));
    }
    Ok(out)
}

/// What one mix entry sends.
struct Entry {
    function: FunctionId,
    param: u64,
    payload: Vec<u8>,
    /// Index into the per-function stats.
    row: usize,
}

/// Per-function counters of one worker.
#[derive(Clone)]
struct FnStats {
    hist: Histogram<u64>,
    ok: u64,
    errors: [u64; Status::ALL.len()],
    conn_errors: u64,
    busy_retries: u64,
    rtt_ns: u128,
    reassembly_ns: u128,
    queue_ns: u128,
    exec_ns: u128,
    request_bytes: u64,
    response_bytes: u64,
}

impl FnStats {
    fn new() -> Result<FnStats, ClientError> {
        let hist = Histogram::new_with_bounds(1, HIST_MAX_NS, HIST_SIGFIGS)
            .map_err(|e| ClientError::Config(format!("histogram: {e}")))?;
        Ok(FnStats {
            hist,
            ok: 0,
            errors: [0; Status::ALL.len()],
            conn_errors: 0,
            busy_retries: 0,
            rtt_ns: 0,
            reassembly_ns: 0,
            queue_ns: 0,
            exec_ns: 0,
            request_bytes: 0,
            response_bytes: 0,
        })
    }

    fn record_ok(&mut self, rtt: Duration, h: &ResponseHeader, req: usize, resp: usize) {
        let ns = u64::try_from(rtt.as_nanos()).unwrap_or(u64::MAX);
        self.hist.saturating_record(ns.clamp(1, HIST_MAX_NS));
        self.ok += 1;
        self.rtt_ns += u128::from(ns);
        self.reassembly_ns += u128::from(h.reassembly_ns);
        self.queue_ns += u128::from(h.queue_ns);
        self.exec_ns += u128::from(h.exec_ns);
        self.request_bytes += req as u64;
        self.response_bytes += resp as u64;
    }

    fn merge(&mut self, o: &FnStats) -> Result<(), ClientError> {
        self.hist
            .add(&o.hist)
            .map_err(|e| ClientError::Config(format!("histogram merge: {e:?}")))?;
        self.ok += o.ok;
        for (a, b) in self.errors.iter_mut().zip(o.errors.iter()) {
            *a += b;
        }
        self.conn_errors += o.conn_errors;
        self.busy_retries += o.busy_retries;
        self.rtt_ns += o.rtt_ns;
        self.reassembly_ns += o.reassembly_ns;
        self.queue_ns += o.queue_ns;
        self.exec_ns += o.exec_ns;
        self.request_bytes += o.request_bytes;
        self.response_bytes += o.response_bytes;
        Ok(())
    }

    fn row(&self, name: &str, function: Option<u8>, window_s: f64) -> FunctionRow {
        let mut errors_by_status = BTreeMap::new();
        for (status, &n) in Status::ALL.iter().zip(self.errors.iter()) {
            if n > 0 {
                errors_by_status.insert(status.name().to_string(), n);
            }
        }
        if self.conn_errors > 0 {
            errors_by_status.insert("CONNECTION".to_string(), self.conn_errors);
        }
        let per_s = |x: f64| if window_s > 0.0 { x / window_s } else { 0.0 };
        let mean_us = |sum: u128| {
            if self.ok == 0 {
                0.0
            } else {
                sum as f64 / self.ok as f64 / 1000.0
            }
        };
        let q = |quantile: f64| {
            if self.ok == 0 {
                0.0
            } else {
                self.hist.value_at_quantile(quantile) as f64 / 1000.0
            }
        };
        let rtt = mean_us(self.rtt_ns);
        let reassembly = mean_us(self.reassembly_ns);
        let queue = mean_us(self.queue_ns);
        let exec = mean_us(self.exec_ns);
        FunctionRow {
            name: name.to_string(),
            function,
            ok: self.ok,
            errors: self.errors.iter().sum::<u64>() + self.conn_errors,
            errors_by_status,
            busy_retries: self.busy_retries,
            req_per_s: per_s(self.ok as f64),
            gbit_per_s: per_s((self.request_bytes + self.response_bytes) as f64 * 8.0) / 1e9,
            request_bytes: self.request_bytes,
            response_bytes: self.response_bytes,
            mean_us: rtt,
            p50_us: q(0.5),
            p90_us: q(0.9),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: if self.ok == 0 {
                0.0
            } else {
                self.hist.max() as f64 / 1000.0
            },
            reassembly_us: reassembly,
            queue_us: queue,
            exec_us: exec,
            overhead_us: if self.ok == 0 {
                0.0
            } else {
                rtt - (reassembly + queue + exec)
            },
        }
    }
}

struct WorkerResult {
    stats: Vec<FnStats>,
    last_done: Instant,
    reconnects: u64,
    lost: bool,
    last_error: Option<String>,
}

/// Run the load described by `spec` and report. Fails if the spec is invalid
/// or any client cannot connect at the start; errors during the run are
/// counted in the report instead (a client reconnects after a
/// connection-fatal error and stops if reconnecting fails).
pub fn run_closed_loop(spec: &LoadSpec) -> Result<LoadReport, ClientError> {
    if spec.clients == 0 {
        return Err(ClientError::Config("clients must be at least 1".into()));
    }
    if spec.mix.is_empty() {
        return Err(ClientError::Config("the mix is empty".into()));
    }

    // Distinct functions in first-appearance order, and the entries.
    let mut functions: Vec<FunctionId> = Vec::new();
    let mut entries = Vec::with_capacity(spec.mix.len());
    for (i, &(function, param, bytes)) in spec.mix.iter().enumerate() {
        let row = match functions.iter().position(|&f| f == function) {
            Some(r) => r,
            None => {
                functions.push(function);
                functions.len() - 1
            }
        };
        let payload = generate_payload(
            function,
            param,
            bytes,
            spec.seed ^ (i as u64).wrapping_mul(0x9E37),
        )?;
        entries.push(Entry {
            function,
            param,
            payload,
            row,
        });
    }
    let entries = Arc::new(entries);
    let empty = FnStats::new()?;

    let mut clients = Vec::with_capacity(spec.clients);
    for _ in 0..spec.clients {
        clients.push(connect(spec)?);
    }

    let barrier = Arc::new(Barrier::new(spec.clients + 1));
    let mut handles = Vec::with_capacity(spec.clients);
    for (idx, client) in clients.into_iter().enumerate() {
        let entries = Arc::clone(&entries);
        let barrier = Arc::clone(&barrier);
        let stats = vec![empty.clone(); functions.len()];
        let spec = spec.clone();
        let handle = thread::Builder::new()
            .name(format!("offrac-load-{idx}"))
            .spawn(move || worker(idx, client, &spec, &entries, stats, &barrier))?;
        handles.push(handle);
    }
    barrier.wait();
    let start = Instant::now();
    let record_from = start + spec.warmup;
    let end = record_from + spec.duration;

    let mut totals = vec![empty.clone(); functions.len()];
    let mut last_done = end;
    let mut reconnects = 0;
    let mut clients_lost = 0;
    let mut last_error = None;
    for handle in handles {
        let r = handle
            .join()
            .map_err(|_| ClientError::Config("a load thread panicked".into()))?;
        for (t, s) in totals.iter_mut().zip(r.stats.iter()) {
            t.merge(s)?;
        }
        last_done = last_done.max(r.last_done);
        reconnects += r.reconnects;
        clients_lost += usize::from(r.lost);
        if r.last_error.is_some() {
            last_error = r.last_error;
        }
    }

    let window_s = last_done
        .saturating_duration_since(record_from)
        .as_secs_f64();
    let mut all = empty;
    let mut rows = Vec::with_capacity(functions.len());
    for (f, s) in functions.iter().zip(totals.iter()) {
        all.merge(s)?;
        rows.push(s.row(f.name(), Some(f.id()), window_s));
    }
    Ok(LoadReport {
        addr: spec.addr.clone(),
        clients: spec.clients,
        order: spec.order,
        duration_s: spec.duration.as_secs_f64(),
        warmup_s: spec.warmup.as_secs_f64(),
        window_s,
        rows,
        total: all.row("total", None, window_s),
        reconnects,
        clients_lost,
        last_error,
    })
}

fn connect(spec: &LoadSpec) -> Result<Client, ClientError> {
    let mut c = Client::connect(&spec.addr)?.with_retry_policy(spec.retry);
    c.set_read_timeout(Some(spec.call_timeout).filter(|d| !d.is_zero()))?;
    c.set_busy_poll(spec.busy_poll)?;
    Ok(c)
}

fn worker(
    idx: usize,
    mut client: Client,
    spec: &LoadSpec,
    entries: &[Entry],
    mut stats: Vec<FnStats>,
    barrier: &Barrier,
) -> WorkerResult {
    let seed = spec.seed ^ (idx as u64 + 1).wrapping_mul(0xA076_1D64_78BD_642F);
    let mut rng = SplitMix64::new(seed);
    client.set_jitter_seed(seed.rotate_left(17));
    let mut next = idx % entries.len();
    let mut reconnects = 0;
    let mut last_error = None;
    let mut lost = false;

    barrier.wait();
    let start = Instant::now();
    let record_from = start + spec.warmup;
    let end = record_from + spec.duration;
    let mut last_done = start;

    loop {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        let entry = match spec.order {
            MixOrder::RoundRobin => {
                let e = &entries[next];
                next = (next + 1) % entries.len();
                e
            }
            MixOrder::Random => &entries[rng.below(entries.len())],
        };
        let retries_before = client.busy_retries();
        let result = client.call(entry.function, entry.param, &entry.payload);
        let done = Instant::now();
        let record = t0 >= record_from;
        let s = &mut stats[entry.row];
        if record {
            last_done = done;
            s.busy_retries += client.busy_retries() - retries_before;
        }
        let err = match result {
            Ok(reply) => {
                if record {
                    s.record_ok(
                        done - t0,
                        &reply.header,
                        entry.payload.len(),
                        reply.payload.len(),
                    );
                }
                continue;
            }
            Err(e) => e,
        };
        if record {
            match err.status() {
                Some(status) => s.errors[status.code() as usize] += 1,
                None => s.conn_errors += 1,
            }
        }
        if err.is_connection_fatal() {
            last_error = Some(err.to_string());
            if done >= end {
                break;
            }
            match connect(spec) {
                Ok(mut c) => {
                    c.set_jitter_seed(rng.next_u64());
                    client = c;
                    reconnects += 1;
                }
                Err(e) => {
                    last_error = Some(format!("reconnect failed: {e}"));
                    lost = true;
                    break;
                }
            }
        }
    }
    WorkerResult {
        stats,
        last_done,
        reconnects,
        lost,
        last_error,
    }
}
