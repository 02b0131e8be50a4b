//! Open loop: Poisson arrivals at a set total rate, spread evenly over the
//! connections (a sum of Poisson processes is Poisson). Each connection has a
//! sender and a receiver thread, so requests leave on schedule however slow
//! the answers are; latency is measured from each request's *scheduled* send
//! time, so a late sender does not hide queueing (no coordinated omission).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::{Duration, Instant};

use offrac_proto::Status;

use crate::closed::payloads;
use crate::conn::wait_until;
use crate::progress::Progress;
use crate::report::RunInfo;
use crate::rng::{client_seed, Rng};
use crate::stats::ClientStats;
use crate::{BenchError, BenchReport, BenchSpec, WireConn};

/// How long after the end of the run answers are still awaited.
const DRAIN: Duration = Duration::from_secs(2);

struct Pending {
    scheduled: Instant,
    row: usize,
    record: bool,
    last_fragment: Option<Instant>,
}

type PendingMap = Mutex<HashMap<u64, Pending>>;

/// Run `spec` (which must have a `rate`) in open loop.
pub fn run_open_loop(spec: &BenchSpec) -> Result<BenchReport, BenchError> {
    spec.validate()?;
    let rate = match (&spec.schedule, spec.rate) {
        (Some(s), _) => s.len() as f64 / s.last().map_or(1.0, |e| e.0.as_secs_f64().max(1e-3)),
        (None, Some(r)) => r,
        (None, None) => return Err(BenchError::Config("open loop needs a rate".into())),
    };
    let payloads = payloads(spec)?;
    let mut conns = Vec::with_capacity(spec.clients);
    for _ in 0..spec.clients {
        let mut tx = WireConn::connect(&spec.addr, spec.busy_poll)?;
        if let Some((tenant, key)) = &spec.tenant {
            tx.hello(*tenant, key)?;
        }
        tx.set_fragments(spec.fragments, spec.fragment_gap);
        tx.set_chain(&spec.chain)?;
        let rx = tx.try_clone()?;
        conns.push((tx, rx));
    }
    let per_conn_mean_gap = spec.clients as f64 / rate;
    let barrier = Barrier::new(2 * spec.clients + 1);
    let results: Vec<Result<ClientStats, BenchError>> = std::thread::scope(|s| {
        let handles: Vec<_> = conns
            .into_iter()
            .enumerate()
            .map(|(i, (tx, rx))| {
                let (barrier, payloads) = (&barrier, &payloads);
                s.spawn(move || {
                    let pending: PendingMap = Mutex::new(HashMap::new());
                    let sending = AtomicBool::new(true);
                    std::thread::scope(|s2| {
                        let (p, f) = (&pending, &sending);
                        let rxh = s2.spawn(move || receiver(rx, spec, p, f, barrier));
                        let sent = sender(i, tx, spec, payloads, per_conn_mean_gap, p, barrier);
                        sending.store(false, Ordering::SeqCst);
                        let stats = rxh.join().unwrap_or(Err(BenchError::Panicked));
                        match (sent, stats) {
                            (Ok(()), s) => s,
                            (Err(e), Ok(mut s)) => {
                                s.last_error = Some(e.to_string());
                                Ok(s)
                            }
                            (Err(_), Err(e)) => Err(e),
                        }
                    })
                })
            })
            .collect();
        barrier.wait();
        let _bar = Progress::start(spec.warmup + spec.duration, spec.progress, &spec.label);
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Err(BenchError::Panicked)))
            .collect()
    });
    let clients = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    BenchReport::build(
        RunInfo {
            label: &spec.label,
            addr: &spec.addr,
            mode: "open",
            offered_rate: Some(rate),
            fragments: spec.fragments,
            duration_s: spec.duration.as_secs_f64(),
            warmup_s: spec.warmup.as_secs_f64(),
            window_s: spec.duration.as_secs_f64(),
            cdf: false,
        },
        &spec.mix,
        &clients,
    )
}

fn sender(
    idx: usize,
    mut conn: WireConn,
    spec: &BenchSpec,
    payloads: &[Vec<u8>],
    mean_gap_s: f64,
    pending: &PendingMap,
    barrier: &Barrier,
) -> Result<(), BenchError> {
    let mut rng = Rng::new(client_seed(spec.seed, idx));
    barrier.wait();
    let start = Instant::now();
    if let Some(schedule) = &spec.schedule {
        let mut id = 0u64;
        for &(at, row) in schedule.iter().skip(idx).step_by(spec.clients) {
            let next = start + at;
            wait_until(next);
            id += 1;
            send_one(&mut conn, spec, payloads, pending, id, next, row, true)?;
        }
        return Ok(());
    }
    let record_from = start + spec.warmup;
    let end = record_from + spec.duration;
    let mut next = start + Duration::from_secs_f64(rng.exp(mean_gap_s));
    let mut id = 0u64;
    while next < end {
        wait_until(next);
        let row = if spec.mix.len() == 1 {
            0
        } else {
            rng.below(spec.mix.len())
        };
        id += 1;
        send_one(
            &mut conn,
            spec,
            payloads,
            pending,
            id,
            next,
            row,
            next >= record_from,
        )?;
        next += Duration::from_secs_f64(rng.exp(mean_gap_s));
    }
    Ok(())
}

/// Record request `id` (mix `row`, due at `scheduled`) as pending, then send it.
#[allow(clippy::too_many_arguments)]
fn send_one(
    conn: &mut WireConn,
    spec: &BenchSpec,
    payloads: &[Vec<u8>],
    pending: &PendingMap,
    id: u64,
    scheduled: Instant,
    row: usize,
    record: bool,
) -> Result<(), BenchError> {
    lock(pending).insert(
        id,
        Pending {
            scheduled,
            row,
            record,
            last_fragment: None,
        },
    );
    let item = &spec.mix[row];
    let sent = conn.send(id, item.wire_id, item.param, &payloads[row])?;
    if let Some(p) = lock(pending).get_mut(&id) {
        p.last_fragment = Some(sent);
    }
    Ok(())
}

fn lock(m: &PendingMap) -> std::sync::MutexGuard<'_, HashMap<u64, Pending>> {
    // A panicking peer thread is reported by its join; the map itself stays usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn receiver(
    mut conn: WireConn,
    spec: &BenchSpec,
    pending: &PendingMap,
    sending: &AtomicBool,
    barrier: &Barrier,
) -> Result<ClientStats, BenchError> {
    let mut stats = ClientStats::new(spec.mix.len())?;
    barrier.wait();
    let mut drain_deadline: Option<Instant> = None;
    loop {
        if !sending.load(Ordering::SeqCst) {
            let deadline = *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN);
            if lock(pending).is_empty() || Instant::now() > deadline {
                break;
            }
        }
        match conn.wait_readable(Duration::from_millis(20)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                stats.last_error = Some(e.to_string());
                break;
            }
        }
        let header = match conn.recv() {
            Ok(h) => h,
            Err(e) => {
                stats.last_error = Some(e.to_string());
                break;
            }
        };
        let done = Instant::now();
        let Some(p) = lock(pending).remove(&header.request_id) else {
            continue;
        };
        if !p.record {
            continue;
        }
        let row = &mut stats.rows[p.row];
        if header.status == Status::Ok {
            let from_last = done.saturating_duration_since(p.last_fragment.unwrap_or(p.scheduled));
            row.record_ok(
                done.saturating_duration_since(p.scheduled),
                from_last,
                &header,
                spec.mix[p.row].bytes,
                conn.payload().len(),
            );
        } else {
            row.record_status(header.status);
        }
    }
    stats.unanswered = lock(pending).values().filter(|p| p.record).count() as u64;
    Ok(stats)
}
