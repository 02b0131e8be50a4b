//! Trace-driven runs of the node's driver in the virtual [`World`]: a list of
//! timed arrivals (the Azure Functions 2021 trace, time-compressed) sent open
//! loop over a few connections, against either a static slot arrangement or
//! one fixed slot per function plus spare slots run by the autoscaler. The
//! report gives each function's latency quantiles and `BUSY` refusals and the
//! slot-seconds provisioned (static: slots × span; autoscaler: the integral
//! of the slots not spare), so the two can be compared on the same arrivals.

use crate::world::{World, WorldConfig};
use crate::Nanos;
use offrac_control::{AutoscaleConfig, SlotRole};
use offrac_core::EngineConfig;
use offrac_node::{AutoscaleSettings, DriverConfig, SlotConfig};
use offrac_proto::{RequestHeader, Status};
use std::collections::BTreeMap;
use std::time::Duration;

/// One request of a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub at_ns: Nanos,
    pub function: u8,
    pub bytes: u32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TraceError {
    #[error("trace line {line}: {msg}")]
    Line { line: usize, msg: String },
    #[error("the trace has no rows of a mapped app")]
    Empty,
    #[error("speedup must be a positive number, not {0}")]
    Speedup(f64),
    #[error("no slots to run: {0}")]
    Slots(&'static str),
    #[error("the node driver refused the configuration: {0}")]
    Driver(String),
}

/// Parse the processed Azure Functions 2021 trace (`app,sleep_time,
/// request_size,response_size`, header first): each row arrives
/// `sleep_time / speedup` seconds after the previous one (open loop; the
/// original replay waited for the answer first). Apps not in `map`
/// (app → function id) are skipped; their gaps still count.
pub fn parse_azure(
    text: &str,
    map: &[(u32, u8)],
    speedup: f64,
) -> Result<Vec<Arrival>, TraceError> {
    if !(speedup.is_finite() && speedup > 0.0) {
        return Err(TraceError::Speedup(speedup));
    }
    let mut out = Vec::new();
    let mut t_s = 0.0f64;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if (i == 0 && line.starts_with("app")) || line.is_empty() {
            continue;
        }
        let bad = |msg: &str| TraceError::Line {
            line: i + 1,
            msg: format!("{msg}: {line:?}"),
        };
        let f: Vec<&str> = line.split(',').collect();
        if f.len() != 4 {
            return Err(bad("expected 4 comma-separated fields"));
        }
        let app: u32 = f[0].trim().parse().map_err(|_| bad("bad app"))?;
        let sleep: f64 = f[1].trim().parse().map_err(|_| bad("bad sleep_time"))?;
        if !(sleep.is_finite() && sleep >= 0.0) {
            return Err(bad("sleep_time must be a non-negative number"));
        }
        let bytes: u32 = f[2].trim().parse().map_err(|_| bad("bad request_size"))?;
        t_s += sleep;
        if let Some(&(_, function)) = map.iter().find(|(a, _)| *a == app) {
            out.push(Arrival {
                at_ns: (t_s / speedup * 1e9).round() as Nanos,
                function,
                bytes,
            });
        }
    }
    if out.is_empty() {
        return Err(TraceError::Empty);
    }
    Ok(out)
}

/// Slots by seed 001's formula `N = ceil(λ (T_oh + T_acc) / ρ)` (at least
/// one) for each of `functions`, with λ the mean rate over the whole trace
/// (`window_ns = None`) or the highest rate seen in any window of that length.
pub fn formula_slots(
    arrivals: &[Arrival],
    functions: &[(u8, Nanos)],
    t_oh_ns: f64,
    rho: f64,
    window_ns: Option<Nanos>,
) -> Vec<usize> {
    let span = arrivals.last().map_or(1, |a| a.at_ns).max(1);
    functions
        .iter()
        .map(|&(f, t_acc)| {
            let rate_per_ns = match window_ns {
                None => arrivals.iter().filter(|a| a.function == f).count() as f64 / span as f64,
                Some(w) => {
                    let w = w.max(1);
                    let mut counts: BTreeMap<u64, u64> = BTreeMap::new();
                    for a in arrivals.iter().filter(|a| a.function == f) {
                        *counts.entry(a.at_ns / w).or_default() += 1;
                    }
                    counts.values().copied().max().unwrap_or(0) as f64 / w as f64
                }
            };
            let n = (rate_per_ns * (t_oh_ns + t_acc as f64) / rho).ceil() as usize;
            n.max(1)
        })
        .collect()
}

/// How the slots are provisioned.
#[derive(Debug, Clone, PartialEq)]
pub enum Provisioning {
    /// This many slots of each function (in the order of `TraceRun::functions`).
    Static(Vec<usize>),
    /// One fixed slot per function plus `spare` slots for the autoscaler.
    Autoscale {
        spare: usize,
        policy: AutoscaleConfig,
        period_ns: Nanos,
    },
}

/// A trace-driven run.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceRun {
    /// Each function and its execution time per request.
    pub functions: Vec<(u8, Nanos)>,
    pub provisioning: Provisioning,
    /// Connections the arrivals are spread over (round robin).
    pub connections: usize,
    /// Requests a slot's queue holds besides the one running.
    pub queue_depth: usize,
    /// Segmentation and the node's choices.
    pub seed: u64,
    /// The slot count is sampled this often for the slot-seconds integral.
    pub sample_ns: Nanos,
}

/// One function's outcome.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct FunctionReport {
    pub function: u8,
    pub sent: u64,
    pub ok: u64,
    pub busy: u64,
    /// Answers other than OK and BUSY.
    pub other: u64,
    pub p50_ns: Nanos,
    pub p99_ns: Nanos,
}

/// What a trace-driven run measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TraceReport {
    pub functions: Vec<FunctionReport>,
    /// All functions together.
    pub total: FunctionReport,
    /// First to last arrival.
    pub span_ns: Nanos,
    /// Slots provisioned × time over the span, in slot-seconds.
    pub slot_seconds: f64,
    pub peak_slots: usize,
    /// Slots configured in the world (static: all; autoscaler: fixed + spare).
    pub configured_slots: usize,
    pub replicated: u64,
    pub reclaimed: u64,
    /// Requests without exactly one answer (must be 0).
    pub unanswered: u64,
}

fn quantile(sorted: &[Nanos], q: f64) -> Nanos {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    sent: u64,
    ok: u64,
    busy: u64,
    other: u64,
}

impl Counts {
    fn report(&self, function: u8, latency: &mut [Nanos]) -> FunctionReport {
        latency.sort_unstable();
        FunctionReport {
            function,
            sent: self.sent,
            ok: self.ok,
            busy: self.busy,
            other: self.other,
            p50_ns: quantile(latency, 0.5),
            p99_ns: quantile(latency, 0.99),
        }
    }
}

/// Answers as they come back, by request id (the arrival's index).
struct Tally {
    sent_at: Vec<Nanos>,
    latency: Vec<Vec<Nanos>>,
    counts: Vec<Counts>,
    answers: Vec<u32>,
}

impl Tally {
    fn collect(
        &mut self,
        w: &mut World,
        clients: &[usize],
        arrivals: &[Arrival],
        index_of: &dyn Fn(u8) -> Option<usize>,
    ) {
        for &c in clients {
            for r in w.drain_answers(c) {
                let id = r.header.request_id as usize;
                let (Some(a), Some(&sent)) = (arrivals.get(id), self.sent_at.get(id)) else {
                    continue;
                };
                self.answers[id] += 1;
                let Some(i) = index_of(a.function) else {
                    continue;
                };
                let e = &mut self.counts[i];
                match r.header.status {
                    Status::Ok => {
                        e.ok += 1;
                        self.latency[i].push(r.at.saturating_sub(sent));
                    }
                    Status::Busy => e.busy += 1,
                    _ => e.other += 1,
                }
            }
        }
        w.clear_log();
    }
}

/// Send `arrivals` to a node of the driver provisioned as `run` says.
pub fn run_trace(run: &TraceRun, arrivals: &[Arrival]) -> Result<TraceReport, TraceError> {
    if run.functions.is_empty() || run.connections == 0 {
        return Err(TraceError::Slots("no functions or no connections"));
    }
    let mut slots: Vec<u8> = Vec::new();
    let mut spare: Vec<usize> = Vec::new();
    match &run.provisioning {
        Provisioning::Static(n) => {
            if n.len() != run.functions.len() || n.contains(&0) {
                return Err(TraceError::Slots(
                    "a static count for every function, each ≥ 1",
                ));
            }
            for (&(f, _), &k) in run.functions.iter().zip(n) {
                slots.extend(std::iter::repeat_n(f, k));
            }
        }
        Provisioning::Autoscale { spare: s, .. } => {
            slots.extend(run.functions.iter().map(|&(f, _)| f));
            // Spare slots are configured as echo, as on the node (paused until a replica).
            spare = (slots.len()..slots.len() + s).collect();
            slots.extend(std::iter::repeat_n(offrac_proto::FunctionId::Echo.id(), *s));
        }
    }
    let engine = EngineConfig {
        slot_queue_depths: vec![Some(run.queue_depth.max(1)); slots.len()],
        slots: slots.clone(),
        ..EngineConfig::default()
    };
    let mut wc = WorldConfig::new(engine, run.seed);
    wc.driver = DriverConfig::new(
        slots
            .iter()
            .map(|&function| SlotConfig {
                function,
                inline_max_bytes: 0,
            })
            .collect(),
    );
    wc.exec.real_results = false;
    wc.exec.fixed = run.functions.clone();
    if let Provisioning::Autoscale {
        policy, period_ns, ..
    } = &run.provisioning
    {
        wc.driver.autoscale = Some(AutoscaleSettings {
            policy: policy.clone(),
            period: Duration::from_nanos(*period_ns),
            spare,
        });
    }
    let configured = slots.len();
    let mut w = World::new(wc).map_err(|e| TraceError::Driver(e.to_string()))?;
    let clients: Vec<usize> = (0..run.connections).map(|_| w.connect()).collect();
    // The trace starts once every connection is accepted.
    let t0 = w.now() + 1_000_000;
    w.run_until(t0);
    let in_use = |w: &World| -> usize {
        match w.driver().autoscale_view() {
            Some((roles, _)) => roles.iter().filter(|r| **r != SlotRole::Spare).count(),
            None => configured,
        }
    };
    let span = arrivals.last().map_or(0, |a| a.at_ns);
    let mut tally = Tally {
        sent_at: Vec::with_capacity(arrivals.len()),
        latency: vec![Vec::new(); run.functions.len()],
        counts: vec![Counts::default(); run.functions.len()],
        answers: vec![0u32; arrivals.len()],
    };
    let index_of = |f: u8| run.functions.iter().position(|&(g, _)| g == f);
    let mut slot_ns: f64 = 0.0;
    let mut peak = in_use(&w);
    let mut next_sample = 0;
    let sample = run.sample_ns.max(1);
    for (id, a) in arrivals.iter().enumerate() {
        while next_sample <= a.at_ns {
            w.run_until(t0 + next_sample);
            let n = in_use(&w);
            peak = peak.max(n);
            slot_ns += n as f64 * sample.min(span.saturating_sub(next_sample)) as f64;
            next_sample += sample;
            tally.collect(&mut w, &clients, arrivals, &index_of);
        }
        w.run_until(t0 + a.at_ns);
        let mut b = RequestHeader::single(id as u64, a.function, 0, a.bytes)
            .encode()
            .to_vec();
        b.resize(b.len() + a.bytes as usize, 0);
        tally.sent_at.push(w.now());
        w.send(clients[id % clients.len()], &b);
        if let Some(i) = index_of(a.function) {
            tally.counts[i].sent += 1;
        }
    }
    // Let the last requests finish (the autoscaler's timer never stops).
    w.run_for(200_000_000);
    tally.collect(&mut w, &clients, arrivals, &index_of);
    let stats = w.driver().autoscale_view().map(|(_, s)| s);
    let mut all: Vec<Nanos> = tally.latency.iter().flatten().copied().collect();
    let sum = tally.counts.iter().fold(Counts::default(), |s, c| Counts {
        sent: s.sent + c.sent,
        ok: s.ok + c.ok,
        busy: s.busy + c.busy,
        other: s.other + c.other,
    });
    let unanswered = tally.answers.iter().filter(|&&n| n != 1).count() as u64;
    let functions = run
        .functions
        .iter()
        .zip(&tally.counts)
        .zip(tally.latency.iter_mut())
        .map(|((&(f, _), c), l)| c.report(f, l))
        .collect();
    Ok(TraceReport {
        functions,
        total: sum.report(0, &mut all),
        span_ns: span,
        slot_seconds: slot_ns / 1e9,
        peak_slots: peak,
        configured_slots: configured,
        replicated: stats.map_or(0, |s| s.replicated),
        reclaimed: stats.map_or(0, |s| s.reclaimed),
        unanswered,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAP: &[(u32, u8)] = &[(1, 7), (2, 9)];

    #[test]
    fn the_trace_parses_with_its_gaps_compressed() {
        let text = "app,sleep_time,request_size,response_size\r\n1,0.5,512,64\r\n4,1.0,8,8\r\n2,0.5,24576,64\r\n";
        let a = parse_azure(text, MAP, 10.0).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            a,
            vec![
                Arrival {
                    at_ns: 50_000_000,
                    function: 7,
                    bytes: 512
                },
                // App 4 is not mapped: skipped, its gap counted.
                Arrival {
                    at_ns: 200_000_000,
                    function: 9,
                    bytes: 24576
                },
            ]
        );
    }

    #[test]
    fn bad_traces_are_typed_errors() {
        let bad = |text: &str| parse_azure(text, MAP, 1.0);
        assert!(matches!(
            bad("1,0.5,512"),
            Err(TraceError::Line { line: 1, .. })
        ));
        assert!(matches!(
            bad("app\n1,x,512,64"),
            Err(TraceError::Line { line: 2, .. })
        ));
        assert!(matches!(bad("1,-1,512,64"), Err(TraceError::Line { .. })));
        assert!(matches!(bad("3,0.1,512,64"), Err(TraceError::Empty)));
        assert!(matches!(
            parse_azure("1,1,1,1", MAP, 0.0),
            Err(TraceError::Speedup(_))
        ));
    }

    #[test]
    fn the_formula_on_mean_and_peak_rates() {
        // Function 7: 10 requests in the first 10 ms of a 100 ms trace.
        let mut a: Vec<Arrival> = (0..10)
            .map(|i| Arrival {
                at_ns: i * 1_000_000,
                function: 7,
                bytes: 1,
            })
            .collect();
        a.push(Arrival {
            at_ns: 100_000_000,
            function: 9,
            bytes: 1,
        });
        let f = [(7, 1_000_000), (9, 1_000_000)];
        // Mean: 100 req/s × 1 ms / 0.5 = 0.2 → 1; one request of 9 → 1.
        assert_eq!(formula_slots(&a, &f, 0.0, 0.5, None), vec![1, 1]);
        // Peak over 10 ms windows: 1000 req/s × 1 ms / 0.5 = 2.
        assert_eq!(
            formula_slots(&a, &f, 0.0, 0.5, Some(10_000_000)),
            vec![2, 1]
        );
    }
}
