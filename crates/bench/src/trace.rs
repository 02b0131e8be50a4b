//! The Azure Functions 2021 trace as processed by the fRAC evaluation
//! (`app,sleep_time,request_size,response_size`; app 1 = top-k, 2 = CNN,
//! 3 = logit, 5 = min-max), and its replay: one connection, each row sent
//! `sleep_time` (divided by a speed-up) after the previous answer arrived.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use offrac_proto::{FunctionId, Status};

use crate::conn::wait_until;
use crate::progress::Progress;
use crate::report::RunInfo;
use crate::stats::ClientStats;
use crate::{BenchError, BenchReport, Caller, MixItem, WireConn};

/// One invocation of the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRow {
    pub app: u32,
    /// Seconds between the previous answer and this request.
    pub sleep_s: f64,
    pub request_size: usize,
    pub response_size: usize,
}

/// The function an app id maps to; `None` for unknown apps.
pub fn app_function(app: u32) -> Option<FunctionId> {
    match app {
        1 => Some(FunctionId::TopK),
        2 => Some(FunctionId::Cnn),
        3 => Some(FunctionId::Logit),
        5 => Some(FunctionId::MinMax),
        _ => None,
    }
}

/// Name of an app id, for reports.
pub fn app_name(app: u32) -> String {
    app_function(app).map_or_else(|| format!("app{app}"), |f| f.name().to_string())
}

/// Parse the CSV text (header line first; CRLF or LF).
pub fn parse_trace(text: &str) -> Result<Vec<TraceRow>, String> {
    let mut lines = text.lines().map(|l| l.trim_end_matches('\r'));
    match lines.next() {
        Some(h) if h.trim() == "app,sleep_time,request_size,response_size" => {}
        other => return Err(format!("unexpected header {other:?}")),
    }
    let mut rows = Vec::new();
    for (i, line) in lines.enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |why: &str| format!("line {}: {why}: {line:?}", i + 2);
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 4 {
            return Err(bad("want 4 fields"));
        }
        let sleep_s: f64 = f[1].parse().map_err(|_| bad("sleep_time"))?;
        if !(sleep_s.is_finite() && sleep_s >= 0.0) {
            return Err(bad("sleep_time must be a non-negative number"));
        }
        rows.push(TraceRow {
            app: f[0].parse().map_err(|_| bad("app"))?,
            sleep_s,
            request_size: f[2].parse().map_err(|_| bad("request_size"))?,
            response_size: f[3].parse().map_err(|_| bad("response_size"))?,
        });
    }
    Ok(rows)
}

/// Read and parse a trace file.
pub fn load_trace(path: &Path) -> Result<Vec<TraceRow>, BenchError> {
    let err = |why: String| BenchError::Trace {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    parse_trace(&text).map_err(err)
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct ReplaySpec {
    pub addr: String,
    /// Divide every `sleep_time` by this (1 = real time).
    pub speedup: f64,
    /// Stop after this many rows (0 = all).
    pub max_rows: usize,
    /// Stop after this much wall time (zero = no limit).
    pub time_limit: Duration,
    pub busy_poll: bool,
    /// Top-k's K (the trace's 64-byte answers are 16 int32).
    pub topk_k: u64,
    pub progress: bool,
    pub label: String,
}

/// Replay `rows` on one connection. Rows of unknown apps keep their sleep
/// but are not sent; they are counted in `report.skipped`.
pub fn replay(spec: &ReplaySpec, rows: &[TraceRow]) -> Result<BenchReport, BenchError> {
    if !(spec.speedup.is_finite() && spec.speedup > 0.0) {
        return Err(BenchError::Config("speed-up must be positive".into()));
    }
    let rows = if spec.max_rows > 0 && rows.len() > spec.max_rows {
        &rows[..spec.max_rows]
    } else {
        rows
    };
    // One mix item (report row) per (function, request size), in first-seen order.
    let mut items: Vec<MixItem> = Vec::new();
    let mut payloads: Vec<Vec<u8>> = Vec::new();
    let mut index: Vec<Option<usize>> = Vec::with_capacity(rows.len());
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    for r in rows {
        let Some(f) = app_function(r.app) else {
            *skipped.entry(app_name(r.app)).or_default() += 1;
            index.push(None);
            continue;
        };
        let param = if f == FunctionId::TopK {
            spec.topk_k
        } else {
            0
        };
        let item = MixItem::new(f, param, r.request_size);
        let i = match items.iter().position(|m| *m == item) {
            Some(i) => i,
            None => {
                payloads.push(offrac_client::generate_payload(
                    f,
                    param,
                    r.request_size,
                    items.len() as u64,
                )?);
                items.push(item);
                items.len() - 1
            }
        };
        index.push(Some(i));
    }
    let mut conn = WireConn::connect(&spec.addr, spec.busy_poll)?;
    conn.set_timeout(Some(Duration::from_secs(10)))?;
    let mut stats = ClientStats::new(items.len())?;
    let total_sleep: f64 = rows.iter().map(|r| r.sleep_s).sum::<f64>() / spec.speedup;
    let mut expected = Duration::from_secs_f64(total_sleep);
    if !spec.time_limit.is_zero() {
        expected = expected.min(spec.time_limit);
    }
    let bar = Progress::start(expected, spec.progress, &spec.label);
    let start = Instant::now();
    let mut prev = start;
    let mut id = 0u64;
    for (r, i) in rows.iter().zip(index.iter()) {
        if !spec.time_limit.is_zero() && start.elapsed() >= spec.time_limit {
            break;
        }
        wait_until(prev + Duration::from_secs_f64(r.sleep_s / spec.speedup));
        let Some(i) = *i else {
            prev = Instant::now();
            continue;
        };
        id += 1;
        let t0 = Instant::now();
        let res = conn.call(id, &items[i], &payloads[i]);
        let done = Instant::now();
        prev = done;
        let row = &mut stats.rows[i];
        match res {
            Ok(o) if o.header.status == Status::Ok => row.record_ok(
                done - t0,
                done.saturating_duration_since(o.last_fragment),
                &o.header,
                payloads[i].len(),
                o.response_bytes,
            ),
            Ok(o) => row.record_status(o.header.status),
            Err(e) => {
                row.conn_errors += 1;
                stats.last_error = Some(e.to_string());
                break;
            }
        }
    }
    drop(bar);
    let window_s = start.elapsed().as_secs_f64();
    let mut report = BenchReport::build(
        RunInfo {
            label: &spec.label,
            addr: &spec.addr,
            mode: "replay",
            offered_rate: None,
            fragments: 1,
            duration_s: window_s,
            warmup_s: 0.0,
            window_s,
            cdf: true,
        },
        &items,
        &[stats],
    )?;
    report.skipped = skipped;
    Ok(report)
}

/// A trace as an open-loop schedule: one mix item per (function, request
/// size), in first-seen order, and for each row of a known app its send time
/// (the sum of the sleep times up to it, divided by `speedup`) and item.
/// Rows of unknown apps keep their sleep but are not sent (counted by name).
pub type OpenSchedule = (Vec<MixItem>, Vec<(Duration, usize)>, BTreeMap<String, u64>);

pub fn open_schedule(
    rows: &[TraceRow],
    speedup: f64,
    topk_k: u64,
) -> Result<OpenSchedule, BenchError> {
    if !(speedup.is_finite() && speedup > 0.0) {
        return Err(BenchError::Config("speed-up must be positive".into()));
    }
    let mut items: Vec<MixItem> = Vec::new();
    let mut schedule = Vec::with_capacity(rows.len());
    let mut skipped: BTreeMap<String, u64> = BTreeMap::new();
    let mut t = 0.0f64;
    for r in rows {
        t += r.sleep_s / speedup;
        let Some(f) = app_function(r.app) else {
            *skipped.entry(app_name(r.app)).or_default() += 1;
            continue;
        };
        let param = if f == FunctionId::TopK { topk_k } else { 0 };
        let item = MixItem::new(f, param, r.request_size);
        let i = match items.iter().position(|m| *m == item) {
            Some(i) => i,
            None => {
                items.push(item);
                items.len() - 1
            }
        };
        schedule.push((Duration::from_secs_f64(t), i));
    }
    Ok((items, schedule, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_crlf_and_rejects_junk() {
        let rows = parse_trace(
            "app,sleep_time,request_size,response_size\r\n1,0.5,512,64\r\n2,0,24576,64\r\n",
        )
        .unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].request_size, 512);
        assert_eq!(app_name(rows[1].app), "cnn");
        assert_eq!(app_function(2), Some(FunctionId::Cnn));
        assert_eq!(app_name(4), "app4");
        assert!(parse_trace("x\n").is_err());
        assert!(parse_trace("app,sleep_time,request_size,response_size\n1,-1,5,5\n").is_err());
        assert!(parse_trace("app,sleep_time,request_size,response_size\n1,2,5\n").is_err());
    }

    #[test]
    fn an_open_schedule_sums_the_compressed_sleeps() {
        let rows = parse_trace(
            "app,sleep_time,request_size,response_size\n1,1,512,64\n4,2,8,8\n2,1,24576,64\n1,0,512,64\n",
        )
        .unwrap();
        let (items, sched, skipped) = open_schedule(&rows, 10.0, 16).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].function, FunctionId::TopK);
        assert_eq!(items[1].function, FunctionId::Cnn);
        let ms = |d: Duration| d.as_millis();
        let got: Vec<(u128, usize)> = sched.iter().map(|&(d, i)| (ms(d), i)).collect();
        assert_eq!(got, vec![(100, 0), (400, 1), (400, 0)]);
        assert_eq!(skipped.get("app4"), Some(&1));
        assert!(open_schedule(&rows, 0.0, 16).is_err());
    }
}
