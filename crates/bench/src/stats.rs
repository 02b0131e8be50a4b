//! Per-row and per-client recording: HDR histograms of round trips (from the
//! first and from the last fragment) and sums of the server's own timings.

use std::time::Duration;

use hdrhistogram::Histogram;
use offrac_proto::{ResponseHeader, Status};

use crate::BenchError;

/// Histograms track 1 ns .. 60 s with 3 significant digits.
pub(crate) const HIST_MAX_NS: u64 = 60_000_000_000;
const HIST_SIGFIGS: u8 = 3;

pub(crate) fn new_hist() -> Result<Histogram<u64>, BenchError> {
    Histogram::new_with_bounds(1, HIST_MAX_NS, HIST_SIGFIGS)
        .map_err(|e| BenchError::Config(format!("histogram: {e}")))
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos())
        .unwrap_or(u64::MAX)
        .clamp(1, HIST_MAX_NS)
}

/// Everything recorded for one row (one mix item) by one or more clients.
#[derive(Clone)]
pub(crate) struct RowStats {
    pub rtt: Histogram<u64>,
    pub from_last: Histogram<u64>,
    pub ok: u64,
    pub errors: [u64; Status::ALL.len()],
    pub conn_errors: u64,
    pub reassembly_ns: u128,
    pub queue_ns: u128,
    pub exec_ns: u128,
    pub request_bytes: u64,
    pub response_bytes: u64,
}

impl RowStats {
    pub fn new() -> Result<RowStats, BenchError> {
        Ok(RowStats {
            rtt: new_hist()?,
            from_last: new_hist()?,
            ok: 0,
            errors: [0; Status::ALL.len()],
            conn_errors: 0,
            reassembly_ns: 0,
            queue_ns: 0,
            exec_ns: 0,
            request_bytes: 0,
            response_bytes: 0,
        })
    }

    /// An `OK` answer `rtt` after the first byte and `from_last` after the
    /// last fragment was sent.
    pub fn record_ok(
        &mut self,
        rtt: Duration,
        from_last: Duration,
        h: &ResponseHeader,
        request_bytes: usize,
        response_bytes: usize,
    ) {
        self.rtt.saturating_record(ns(rtt));
        self.from_last.saturating_record(ns(from_last));
        self.ok += 1;
        self.reassembly_ns += u128::from(h.reassembly_ns);
        self.queue_ns += u128::from(h.queue_ns);
        self.exec_ns += u128::from(h.exec_ns);
        self.request_bytes += request_bytes as u64;
        self.response_bytes += response_bytes as u64;
    }

    pub fn record_status(&mut self, status: Status) {
        self.errors[status.code() as usize] += 1;
    }

    pub fn merge(&mut self, o: &RowStats) -> Result<(), BenchError> {
        let merge_err = |e| BenchError::Config(format!("histogram merge: {e:?}"));
        self.rtt.add(&o.rtt).map_err(merge_err)?;
        self.from_last.add(&o.from_last).map_err(merge_err)?;
        self.ok += o.ok;
        for (a, b) in self.errors.iter_mut().zip(o.errors.iter()) {
            *a += b;
        }
        self.conn_errors += o.conn_errors;
        self.reassembly_ns += o.reassembly_ns;
        self.queue_ns += o.queue_ns;
        self.exec_ns += o.exec_ns;
        self.request_bytes += o.request_bytes;
        self.response_bytes += o.response_bytes;
        Ok(())
    }
}

/// What one client (connection) recorded: a row per mix item.
#[derive(Clone)]
pub(crate) struct ClientStats {
    pub rows: Vec<RowStats>,
    pub reconnects: u64,
    pub last_error: Option<String>,
    /// Open loop: requests sent in the window that never got an answer.
    pub unanswered: u64,
}

impl ClientStats {
    pub fn new(rows: usize) -> Result<ClientStats, BenchError> {
        let one = RowStats::new()?;
        Ok(ClientStats {
            rows: vec![one; rows],
            reconnects: 0,
            last_error: None,
            unanswered: 0,
        })
    }

    /// All of this client's rows merged.
    pub fn total(&self) -> Result<RowStats, BenchError> {
        let mut t = RowStats::new()?;
        for r in &self.rows {
            t.merge(r)?;
        }
        Ok(t)
    }
}
