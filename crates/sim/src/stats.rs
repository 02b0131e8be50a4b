//! What a run measured, per group of requests (all, per accelerator type, per size).

use crate::Nanos;

/// Counters and samples for one group of requests.
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// Attempts whose first fragment reached the node.
    pub attempts: u64,
    /// Attempts refused BUSY.
    pub drops: u64,
    /// Attempts answered anything else but done (0 in a well-formed run).
    pub other: u64,
    pub completed: u64,
    /// Service latency (first fragment of the successful attempt to answer), ns.
    pub latency: Vec<Nanos>,
    /// End-to-end latency including refused attempts and retry back-off, ns.
    pub e2e: Vec<Nanos>,
    /// Time complete in a slot queue before execution, ns.
    pub queue: Vec<Nanos>,
}

/// Quantiles of a sample, in µs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quantiles {
    pub min: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p99: f64,
    pub max: f64,
    pub mean: f64,
}

impl Quantiles {
    /// Sorts `v` in place.
    pub fn of(v: &mut [Nanos]) -> Quantiles {
        if v.is_empty() {
            return Quantiles::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64 / 1000.0;
        Quantiles {
            min: at(0.0),
            p25: at(0.25),
            p50: at(0.5),
            p75: at(0.75),
            p99: at(0.99),
            max: at(1.0),
            mean,
        }
    }
}

/// One output row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub group: String,
    pub attempts: u64,
    pub drops: u64,
    pub other: u64,
    pub completed: u64,
    pub latency: Quantiles,
    pub e2e_mean_us: f64,
    pub queue: Quantiles,
    /// Executing time over instance-time (instances × simulated time).
    pub util_busy: f64,
    /// Executing time over time an instance was held by a request.
    pub util_held: f64,
}

impl Row {
    pub fn drop_rate(&self) -> f64 {
        if self.attempts == 0 {
            0.0
        } else {
            self.drops as f64 / self.attempts as f64
        }
    }
}

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub seed: u64,
    pub rows: Vec<Row>,
    /// Simulated time of the last answer, ns.
    pub sim_ns: Nanos,
    pub events: u64,
    /// Completed requests per simulated second.
    pub throughput_rps: f64,
}

impl Summary {
    pub fn row(&self, group: &str) -> Option<&Row> {
        self.rows.iter().find(|r| r.group == group)
    }

    pub const CSV_HEADER: &'static str = "seed,group,attempts,drops,other,completed,drop_rate,\
lat_min_us,lat_p25_us,lat_p50_us,lat_p75_us,lat_p99_us,lat_max_us,lat_mean_us,e2e_mean_us,\
queue_min_us,queue_p25_us,queue_p50_us,queue_p75_us,queue_p99_us,queue_max_us,queue_mean_us,\
util_busy,util_held,sim_us,throughput_rps,events";

    /// One CSV line per row (no header).
    pub fn csv(&self) -> String {
        let mut s = String::new();
        for r in &self.rows {
            let (l, q) = (&r.latency, &r.queue);
            s.push_str(&format!(
                "{},{},{},{},{},{},{:.6},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},\
{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.6},{:.6},{:.3},{:.1},{}\n",
                self.seed,
                r.group,
                r.attempts,
                r.drops,
                r.other,
                r.completed,
                r.drop_rate(),
                l.min,
                l.p25,
                l.p50,
                l.p75,
                l.p99,
                l.max,
                l.mean,
                r.e2e_mean_us,
                q.min,
                q.p25,
                q.p50,
                q.p75,
                q.p99,
                q.max,
                q.mean,
                r.util_busy,
                r.util_held,
                self.sim_ns as f64 / 1000.0,
                self.throughput_rps,
                self.events,
            ));
        }
        s
    }
}

/// Accelerator type `i`'s name: A, B, C, …
pub fn function_name(i: usize) -> String {
    if i < 26 {
        char::from(b'A' + i as u8).to_string()
    } else {
        format!("F{i}")
    }
}
