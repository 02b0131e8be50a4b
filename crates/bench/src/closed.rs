//! Closed loop: each client has one connection and one request outstanding;
//! the next request leaves when the previous answer arrives.

use std::sync::Barrier;
use std::time::{Duration, Instant};

use offrac_proto::Status;

use crate::progress::Progress;
use crate::report::RunInfo;
use crate::rng::{client_seed, Rng};
use crate::stats::ClientStats;
use crate::{BenchError, BenchReport, BenchSpec, Caller, MixItem, WireConn};

/// Run `spec` in closed loop over the offrac wire format.
pub fn run_closed_loop(spec: &BenchSpec) -> Result<BenchReport, BenchError> {
    run_closed_loop_with(spec, connect_wire)
}

/// A [`WireConn`] configured from `spec` (fragments, gap, timeout, busy-poll).
pub fn connect_wire(spec: &BenchSpec) -> Result<Box<dyn Caller>, BenchError> {
    let mut c = WireConn::connect(&spec.addr, spec.busy_poll)?;
    if let Some((tenant, key)) = &spec.tenant {
        c.hello(*tenant, key)?;
    }
    c.set_fragments(spec.fragments, spec.fragment_gap);
    c.set_chain(&spec.chain)?;
    c.set_timeout(Some(spec.call_timeout))?;
    if let Some(at) = &spec.reply_at {
        let mut rx = WireConn::connect(at, spec.busy_poll)?;
        rx.set_timeout(Some(spec.call_timeout))?;
        let timeout = Some(spec.call_timeout).filter(|t| !t.is_zero());
        return Ok(Box::new(crate::DirectCaller::new(
            c,
            rx,
            spec.busy_poll,
            timeout,
        )?));
    }
    Ok(Box::new(c))
}

/// The payload each mix item sends (valid input for its function).
pub(crate) fn payloads(spec: &BenchSpec) -> Result<Vec<Vec<u8>>, BenchError> {
    spec.mix
        .iter()
        .enumerate()
        .map(|(i, m)| {
            offrac_client::generate_payload(
                m.function,
                m.param,
                m.bytes,
                spec.seed ^ (i as u64).wrapping_mul(0x9E37),
            )
            .map_err(BenchError::from)
        })
        .collect()
}

/// Closed loop with any transport: `connect` opens one client's connection.
pub fn run_closed_loop_with<F>(spec: &BenchSpec, connect: F) -> Result<BenchReport, BenchError>
where
    F: Fn(&BenchSpec) -> Result<Box<dyn Caller>, BenchError> + Sync,
{
    spec.validate()?;
    let payloads = payloads(spec)?;
    let mut callers = Vec::with_capacity(spec.clients);
    for _ in 0..spec.clients {
        callers.push(connect(spec)?);
    }
    let barrier = Barrier::new(spec.clients + 1);
    let results: Vec<Result<(ClientStats, Duration), BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = callers
            .into_iter()
            .enumerate()
            .map(|(i, caller)| {
                let (barrier, payloads, connect) = (&barrier, &payloads, &connect);
                s.spawn(move || client_loop(i, caller, spec, payloads, barrier, connect))
            })
            .collect();
        barrier.wait();
        let _bar = Progress::start(spec.warmup + spec.duration, spec.progress, &spec.label);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(BenchError::Panicked)))
            .collect()
    });
    let mut clients = Vec::with_capacity(results.len());
    // Rates use the measured window: end of warm-up to the last recorded answer.
    let mut window = Duration::ZERO;
    for r in results {
        let (c, span) = r?;
        clients.push(c);
        window = window.max(span);
    }
    let window_s = if window.is_zero() {
        spec.duration.as_secs_f64()
    } else {
        window.as_secs_f64()
    };
    BenchReport::build(
        RunInfo {
            label: &spec.label,
            addr: &spec.addr,
            mode: "closed",
            offered_rate: None,
            fragments: spec.fragments,
            duration_s: spec.duration.as_secs_f64(),
            warmup_s: spec.warmup.as_secs_f64(),
            window_s,
            cdf: false,
        },
        &spec.mix,
        &clients,
    )
}

fn client_loop<F>(
    idx: usize,
    mut caller: Box<dyn Caller>,
    spec: &BenchSpec,
    payloads: &[Vec<u8>],
    barrier: &Barrier,
    connect: &F,
) -> Result<(ClientStats, Duration), BenchError>
where
    F: Fn(&BenchSpec) -> Result<Box<dyn Caller>, BenchError>,
{
    let mut stats = ClientStats::new(spec.mix.len())?;
    let mut rng = Rng::new(client_seed(spec.seed, idx));
    let mut id: u64 = 0;
    barrier.wait();
    let start = Instant::now();
    let record_from = start + spec.warmup;
    let end = record_from + spec.duration;
    let mut last_done = record_from;
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        let i = if spec.item_per_client {
            idx % spec.mix.len()
        } else if spec.mix.len() == 1 {
            0
        } else {
            rng.below(spec.mix.len())
        };
        let item: &MixItem = &spec.mix[i];
        id = id.wrapping_add(1);
        let result = caller.call(id, item, &payloads[i]);
        let done = Instant::now();
        let record = t0 >= record_from;
        let row = &mut stats.rows[i];
        match result {
            Ok(o) if o.header.status == Status::Ok => {
                if record {
                    row.record_ok(
                        done - t0,
                        done.saturating_duration_since(o.last_fragment),
                        &o.header,
                        payloads[i].len(),
                        o.response_bytes,
                    );
                    last_done = done;
                }
            }
            Ok(o) => {
                if record {
                    row.record_status(o.header.status);
                }
                if matches!(
                    o.header.status,
                    Status::UnsupportedVersion | Status::Timeout | Status::ShuttingDown
                ) {
                    match reconnect(spec, connect, &mut stats, "closed by the server", end) {
                        Some(c) => caller = c,
                        None => break,
                    }
                }
            }
            Err(e) => {
                if record {
                    row.conn_errors += 1;
                }
                match reconnect(spec, connect, &mut stats, &e.to_string(), end) {
                    Some(c) => caller = c,
                    None => break,
                }
            }
        }
    }
    Ok((stats, last_done.saturating_duration_since(record_from)))
}

fn reconnect<F>(
    spec: &BenchSpec,
    connect: &F,
    stats: &mut ClientStats,
    why: &str,
    end: Instant,
) -> Option<Box<dyn Caller>>
where
    F: Fn(&BenchSpec) -> Result<Box<dyn Caller>, BenchError>,
{
    stats.last_error = Some(why.to_string());
    if Instant::now() >= end {
        return None;
    }
    stats.reconnects += 1;
    match connect(spec) {
        Ok(c) => Some(c),
        Err(e) => {
            // This client stops; the others go on.
            stats.last_error = Some(format!("reconnect failed: {e}"));
            None
        }
    }
}
