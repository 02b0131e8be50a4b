//! The report of one run: a row per mix item plus a total, per-client
//! figures and the cross-client spread; as a table, CSV or JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use comfy_table::{CellAlignment, Table};
use offrac_proto::Status;
use serde::Serialize;

use crate::stats::{ClientStats, RowStats};
use crate::{BenchError, MixItem};

/// Figures for one row (latencies in µs, rates over the measured window;
/// latency and server timings cover `OK` answers only).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// `function/bytes`, or `total`.
    pub label: String,
    pub function: String,
    /// Request payload bytes (0 for the total row).
    pub bytes: usize,
    pub ok: u64,
    pub errors: u64,
    pub errors_by_status: BTreeMap<String, u64>,
    pub req_per_s: f64,
    /// Request payload bits per second (goodput into the server), Gbit/s.
    pub gbit_per_s: f64,
    pub mean_us: f64,
    pub p25_us: f64,
    pub p50_us: f64,
    pub p75_us: f64,
    pub p90_us: f64,
    /// JSON only (the CSV columns stay as they were).
    pub p95_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
    /// Measured from the moment the last fragment was sent.
    pub last_frag_p50_us: f64,
    pub last_frag_p99_us: f64,
    /// Server-reported means (0 for servers that do not report them).
    pub reassembly_us: f64,
    pub queue_us: f64,
    pub exec_us: f64,
    /// Mean round trip minus the server's reassembly + queue + exec: the
    /// network stack, the framing and the client.
    pub network_us: f64,
    /// (latency µs, quantile) points of the CDF, when asked for.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cdf: Vec<(f64, f64)>,
}

impl Row {
    pub(crate) fn build(
        label: &str,
        function: &str,
        bytes: usize,
        s: &RowStats,
        window_s: f64,
        cdf: bool,
    ) -> Row {
        let mut errors_by_status = BTreeMap::new();
        for (status, &n) in Status::ALL.iter().zip(s.errors.iter()) {
            if n > 0 {
                errors_by_status.insert(status.name().to_string(), n);
            }
        }
        if s.conn_errors > 0 {
            errors_by_status.insert("CONNECTION".to_string(), s.conn_errors);
        }
        let per_s = |x: f64| if window_s > 0.0 { x / window_s } else { 0.0 };
        let us = |ns: u64| ns as f64 / 1000.0;
        let q = |h: &hdrhistogram::Histogram<u64>, quantile: f64| {
            if s.ok == 0 {
                0.0
            } else {
                us(h.value_at_quantile(quantile))
            }
        };
        let mean_sum = |sum: u128| {
            if s.ok == 0 {
                0.0
            } else {
                sum as f64 / s.ok as f64 / 1000.0
            }
        };
        let mean = if s.ok == 0 {
            0.0
        } else {
            s.rtt.mean() / 1000.0
        };
        let (reassembly, queue, exec) = (
            mean_sum(s.reassembly_ns),
            mean_sum(s.queue_ns),
            mean_sum(s.exec_ns),
        );
        let cdf = if cdf && s.ok > 0 {
            // Every percent, then the tail.
            (0..=99)
                .map(|p| f64::from(p) / 100.0)
                .chain([0.995, 0.999, 0.9999, 1.0])
                .map(|q| (us(s.rtt.value_at_quantile(q)), q))
                .collect()
        } else {
            Vec::new()
        };
        Row {
            label: label.to_string(),
            function: function.to_string(),
            bytes,
            ok: s.ok,
            errors: s.errors.iter().sum::<u64>() + s.conn_errors,
            errors_by_status,
            req_per_s: per_s(s.ok as f64),
            gbit_per_s: per_s(s.request_bytes as f64 * 8.0) / 1e9,
            mean_us: mean,
            p25_us: q(&s.rtt, 0.25),
            p50_us: q(&s.rtt, 0.5),
            p75_us: q(&s.rtt, 0.75),
            p90_us: q(&s.rtt, 0.9),
            p95_us: q(&s.rtt, 0.95),
            p99_us: q(&s.rtt, 0.99),
            p999_us: q(&s.rtt, 0.999),
            max_us: if s.ok == 0 { 0.0 } else { us(s.rtt.max()) },
            last_frag_p50_us: q(&s.from_last, 0.5),
            last_frag_p99_us: q(&s.from_last, 0.99),
            reassembly_us: reassembly,
            queue_us: queue,
            exec_us: exec,
            network_us: if s.ok == 0 {
                0.0
            } else {
                mean - reassembly - queue - exec
            },
            cdf,
        }
    }
}

/// One client's figures, over all its rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientRow {
    pub client: usize,
    pub ok: u64,
    pub errors: u64,
    pub req_per_s: f64,
    /// 5th and 95th percentiles of this client's round trips (seed 001 Fig. 10).
    pub p5_us: f64,
    pub p50_us: f64,
    pub p95_us: f64,
    pub p99_us: f64,
}

/// Result of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BenchReport {
    pub label: String,
    pub addr: String,
    /// `closed`, `open` or `replay`.
    pub mode: String,
    pub clients: usize,
    /// Open loop: offered requests/s.
    pub offered_rate: Option<f64>,
    pub fragments: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    /// Measured window actually used for rates.
    pub window_s: f64,
    pub rows: Vec<Row>,
    pub total: Row,
    pub per_client: Vec<ClientRow>,
    /// 5th and 95th percentile (nearest rank) of the per-client medians and
    /// their difference: the cross-client spread.
    pub client_p50_p5_us: f64,
    pub client_p50_p95_us: f64,
    pub client_p50_spread_us: f64,
    /// Open loop: requests sent in the window and never answered.
    pub unanswered: u64,
    pub reconnects: u64,
    pub last_error: Option<String>,
    /// Replay: rows of the trace skipped (no such function here), by app.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped: BTreeMap<String, u64>,
}

/// Column names of [`BenchReport::to_csv`].
pub const CSV_HEADER: &str = "label,mode,clients,offered_rate,fragments,row,function,bytes,ok,errors,req_per_s,gbit_per_s,mean_us,p25_us,p50_us,p75_us,p90_us,p99_us,p999_us,max_us,last_frag_p50_us,last_frag_p99_us,reassembly_us,queue_us,exec_us,network_us,client_p50_spread_us";

/// Nearest-rank percentile of a sorted slice (`q` in 0..=1).
fn nearest_rank(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

pub(crate) struct RunInfo<'a> {
    pub label: &'a str,
    pub addr: &'a str,
    pub mode: &'a str,
    pub offered_rate: Option<f64>,
    pub fragments: usize,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub window_s: f64,
    pub cdf: bool,
}

impl BenchReport {
    pub(crate) fn build(
        info: RunInfo<'_>,
        items: &[MixItem],
        clients: &[ClientStats],
    ) -> Result<BenchReport, BenchError> {
        let w = info.window_s;
        let mut rows = Vec::with_capacity(items.len());
        let mut all = RowStats::new()?;
        for (i, item) in items.iter().enumerate() {
            let mut s = RowStats::new()?;
            for c in clients {
                if let Some(r) = c.rows.get(i) {
                    s.merge(r)?;
                }
            }
            all.merge(&s)?;
            rows.push(Row::build(
                &item.label(),
                item.function.name(),
                item.bytes,
                &s,
                w,
                info.cdf,
            ));
        }
        let mut per_client = Vec::with_capacity(clients.len());
        for (i, c) in clients.iter().enumerate() {
            let stats = c.total()?;
            let t = Row::build("client", "", 0, &stats, w, false);
            let q = |x: f64| {
                if stats.ok == 0 {
                    0.0
                } else {
                    stats.rtt.value_at_quantile(x) as f64 / 1000.0
                }
            };
            per_client.push(ClientRow {
                client: i,
                ok: t.ok,
                errors: t.errors,
                req_per_s: t.req_per_s,
                p5_us: q(0.05),
                p50_us: t.p50_us,
                p95_us: q(0.95),
                p99_us: t.p99_us,
            });
        }
        let mut medians: Vec<f64> = per_client
            .iter()
            .filter(|c| c.ok > 0)
            .map(|c| c.p50_us)
            .collect();
        medians.sort_by(f64::total_cmp);
        let (p5, p95) = (nearest_rank(&medians, 0.05), nearest_rank(&medians, 0.95));
        Ok(BenchReport {
            label: info.label.to_string(),
            addr: info.addr.to_string(),
            mode: info.mode.to_string(),
            clients: clients.len(),
            offered_rate: info.offered_rate,
            fragments: info.fragments,
            duration_s: info.duration_s,
            warmup_s: info.warmup_s,
            window_s: w,
            rows,
            total: Row::build("total", "", 0, &all, w, info.cdf),
            per_client,
            client_p50_p5_us: p5,
            client_p50_p95_us: p95,
            client_p50_spread_us: p95 - p5,
            unanswered: clients.iter().map(|c| c.unanswered).sum(),
            reconnects: clients.iter().map(|c| c.reconnects).sum(),
            last_error: clients.iter().rev().find_map(|c| c.last_error.clone()),
            skipped: BTreeMap::new(),
        })
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// CSV lines (no header; see [`CSV_HEADER`]): one per row, then the total.
    pub fn to_csv(&self) -> String {
        let mut w = csv::WriterBuilder::new()
            .has_headers(false)
            .from_writer(Vec::new());
        for r in self.rows.iter().chain(std::iter::once(&self.total)) {
            // Serializing plain numbers and strings into memory cannot fail.
            let _ = w.serialize(CsvRecord::new(self, r));
        }
        let bytes = w.into_inner().unwrap_or_default();
        String::from_utf8(bytes).unwrap_or_default()
    }

    /// Human-readable table.
    pub fn render_table(&self) -> String {
        let mut out = String::new();
        let rate = self
            .offered_rate
            .map(|r| format!(", offered {r:.0} req/s"))
            .unwrap_or_default();
        let label = if self.label.is_empty() {
            String::new()
        } else {
            format!(" [{}]", self.label)
        };
        let _ = writeln!(
            out,
            "offrac bench{label} {} loop, {} client(s){rate}, {} fragment(s), {:.2} s window after {:.2} s warm-up, server {}",
            self.mode, self.clients, self.fragments, self.window_s, self.warmup_s, self.addr
        );
        let _ = writeln!(
            out,
            "latencies in µs; reasm/queue/exec: server-reported means; net = mean - their sum; last50: p50 from the last fragment"
        );
        let mut rows: Vec<&Row> = self.rows.iter().collect();
        if self.rows.len() > 1 {
            rows.push(&self.total);
        }
        let table = text_table(
            &[
                "row", "ok", "err", "req/s", "Gbit/s", "p25", "p50", "p75", "p90", "p99", "p99.9",
                "last50", "reasm", "queue", "exec", "net",
            ],
            1,
            rows.into_iter().map(table_cells),
        );
        let _ = writeln!(out, "{table}");
        let _ = writeln!(
            out,
            "per-client p50: P5 {:.1} µs, P95 {:.1} µs, spread {:.1} µs",
            self.client_p50_p5_us, self.client_p50_p95_us, self.client_p50_spread_us
        );
        for r in self.rows.iter().filter(|r| r.errors > 0) {
            let _ = writeln!(out, "{}: errors {:?}", r.label, r.errors_by_status);
        }
        if self.unanswered > 0 || self.reconnects > 0 {
            let _ = writeln!(
                out,
                "unanswered: {}, reconnects: {}, last error: {}",
                self.unanswered,
                self.reconnects,
                self.last_error.as_deref().unwrap_or("-")
            );
        }
        for (app, n) in &self.skipped {
            let _ = writeln!(out, "skipped trace rows: {app}: {n}");
        }
        out
    }
}

/// A table for people, in the one style the CLI prints (Markdown, so it
/// pastes into docs): the first `text_columns` columns left-aligned, the
/// rest (numbers) right-aligned.
pub fn text_table<R: Into<comfy_table::Row>>(
    header: &[&str],
    text_columns: usize,
    rows: impl IntoIterator<Item = R>,
) -> Table {
    let mut table = Table::new();
    table.load_preset(comfy_table::presets::ASCII_MARKDOWN);
    table.set_header(header.to_vec());
    for r in rows {
        table.add_row(r);
    }
    for (i, column) in table.column_iter_mut().enumerate() {
        if i >= text_columns {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    table
}

/// One table row's cells. A row nothing was sent for (e.g. a trace
/// function absent from the window) has no latencies: it says so instead
/// of printing zeros.
fn table_cells(r: &Row) -> Vec<String> {
    if r.ok + r.errors == 0 {
        return vec![
            r.label.clone(),
            "0".into(),
            "0".into(),
            "(no requests sent)".into(),
        ];
    }
    let f1 = |x: f64| format!("{x:.1}");
    let f2 = |x: f64| format!("{x:.2}");
    vec![
        r.label.clone(),
        r.ok.to_string(),
        r.errors.to_string(),
        format!("{:.0}", r.req_per_s),
        format!("{:.3}", r.gbit_per_s),
        f1(r.p25_us),
        f1(r.p50_us),
        f1(r.p75_us),
        f1(r.p90_us),
        f1(r.p99_us),
        f1(r.p999_us),
        f1(r.last_frag_p50_us),
        f2(r.reassembly_us),
        f2(r.queue_us),
        f2(r.exec_us),
        f1(r.network_us),
    ]
}

/// One CSV line, in the order of [`CSV_HEADER`] (the field names are the
/// column names; a test keeps them equal). Figures are rounded to what the
/// measurement resolves.
#[derive(Serialize)]
struct CsvRecord<'a> {
    label: &'a str,
    mode: &'a str,
    clients: usize,
    offered_rate: Option<f64>,
    fragments: usize,
    row: &'a str,
    function: &'a str,
    bytes: usize,
    ok: u64,
    errors: u64,
    req_per_s: f64,
    gbit_per_s: f64,
    mean_us: f64,
    p25_us: f64,
    p50_us: f64,
    p75_us: f64,
    p90_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    last_frag_p50_us: f64,
    last_frag_p99_us: f64,
    reassembly_us: f64,
    queue_us: f64,
    exec_us: f64,
    network_us: f64,
    client_p50_spread_us: f64,
}

impl<'a> CsvRecord<'a> {
    fn new(report: &'a BenchReport, r: &'a Row) -> CsvRecord<'a> {
        let round = |x: f64, digits: i32| {
            let k = 10f64.powi(digits);
            (x * k).round() / k
        };
        let us = |x: f64| round(x, 2);
        CsvRecord {
            label: &report.label,
            mode: &report.mode,
            clients: report.clients,
            offered_rate: report.offered_rate.map(|x| round(x, 1)),
            fragments: report.fragments,
            row: &r.label,
            function: &r.function,
            bytes: r.bytes,
            ok: r.ok,
            errors: r.errors,
            req_per_s: round(r.req_per_s, 1),
            gbit_per_s: round(r.gbit_per_s, 4),
            mean_us: us(r.mean_us),
            p25_us: us(r.p25_us),
            p50_us: us(r.p50_us),
            p75_us: us(r.p75_us),
            p90_us: us(r.p90_us),
            p99_us: us(r.p99_us),
            p999_us: us(r.p999_us),
            max_us: us(r.max_us),
            last_frag_p50_us: us(r.last_frag_p50_us),
            last_frag_p99_us: us(r.last_frag_p99_us),
            reassembly_us: us(r.reassembly_us),
            queue_us: us(r.queue_us),
            exec_us: us(r.exec_us),
            network_us: us(r.network_us),
            client_p50_spread_us: us(report.client_p50_spread_us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.05), 1.0);
        assert_eq!(nearest_rank(&v, 0.95), 19.0);
        assert_eq!(nearest_rank(&[3.0], 0.95), 3.0);
        assert_eq!(nearest_rank(&[], 0.5), 0.0);
    }

    /// A report of one echo row that saw no requests.
    fn report(label: &str) -> BenchReport {
        let items = [MixItem::new(offrac_proto::FunctionId::Echo, 0, 8)];
        let c = ClientStats::new(1).unwrap();
        let info = RunInfo {
            label,
            addr: "a",
            mode: "closed",
            offered_rate: None,
            fragments: 1,
            duration_s: 1.0,
            warmup_s: 0.0,
            window_s: 1.0,
            cdf: false,
        };
        BenchReport::build(info, &items, &[c]).unwrap()
    }

    #[test]
    fn csv_columns_match_the_header() {
        let r = report("a label, with a comma");
        // The header the csv writer derives from the record's fields.
        let mut w = csv::Writer::from_writer(Vec::new());
        w.serialize(CsvRecord::new(&r, &r.total)).unwrap();
        let text = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(text.lines().next(), Some(CSV_HEADER));
        let cols = CSV_HEADER.split(',').count();
        let lines = r.to_csv();
        let mut rd = csv::ReaderBuilder::new()
            .has_headers(false)
            .from_reader(lines.as_bytes());
        let records: Vec<csv::StringRecord> = rd.records().map(|x| x.unwrap()).collect();
        assert_eq!(records.len(), r.rows.len() + 1);
        for rec in &records {
            assert_eq!(rec.len(), cols, "{rec:?}");
            assert_eq!(&rec[0], "a label, with a comma");
        }
    }

    #[test]
    fn the_table_says_when_a_row_had_no_requests_and_hides_an_empty_label() {
        let t = report("").render_table();
        assert!(t.starts_with("offrac bench closed loop"), "{t}");
        assert!(!t.contains("[]"), "{t}");
        assert!(t.contains("(no requests sent)"), "{t}");
    }
}
