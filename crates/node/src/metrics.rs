//! Prometheus text metrics: per-slot counters kept by the workers, engine
//! counters published by the I/O thread, latency histograms per function.

use crate::driver::Driver;
use offrac_proto::{FunctionId, ResponseHeader, Status};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Histogram bucket upper bounds, in microseconds.
const BUCKETS_US: [u64; 16] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 50_000, 100_000, 1_000_000,
];

#[derive(Default)]
struct Histogram {
    counts: [AtomicU64; BUCKETS_US.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    fn observe(&self, ns: u64) {
        // Prometheus buckets are `le`: an observation equal to a bound counts in it.
        let i = BUCKETS_US
            .iter()
            .position(|&b| ns <= b * 1000)
            .unwrap_or(BUCKETS_US.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_ns.fetch_add(ns, Relaxed);
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cum = 0;
        for (i, b) in BUCKETS_US.iter().enumerate() {
            cum += self.counts[i].load(Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels},le=\"{}\"}} {cum}",
                *b as f64 / 1e6
            );
        }
        cum += self.counts[BUCKETS_US.len()].load(Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cum}");
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {}",
            self.sum_ns.load(Relaxed) as f64 / 1e9
        );
        let _ = writeln!(out, "{name}_count{{{labels}}} {cum}");
    }
}

#[derive(Default)]
struct SlotMetrics {
    completions: AtomicU64,
    inline: AtomicU64,
    errors: AtomicU64,
    busy_ns: AtomicU64,
    queue_depth: AtomicU64,
    /// Bytes of kept buffers the slot's function got joined with the
    /// request's own (it does not read the two parts in place).
    joined_bytes: AtomicU64,
}

#[derive(Default)]
struct FunctionMetrics {
    /// Node-side time: first byte in → execution finished.
    node: Histogram,
    exec: Histogram,
}

#[derive(Default, Clone)]
struct EngineSnapshot {
    requests: u64,
    admitted: u64,
    admitted_small: u64,
    dispatched: u64,
    collected: u64,
    aborted: u64,
    refusals: Vec<(Status, u64)>,
    by_function: Vec<((u8, u16), u64)>,
    by_tenant: Vec<((u16, u16), u64)>,
    tenant_overflow: u64,
    buffer_used: Vec<u64>,
    small_queue: (usize, u64),
    connections: usize,
    hops: u64,
    payload_bytes_copied: u64,
    payload_bytes_direct: u64,
    buffer_bytes_copied: u64,
    /// The collectives machine's counters.
    collectives: offrac_collective::Stats,
    links: crate::LinkStats,
    /// (device, up) per link.
    link_up: Vec<(u8, bool)>,
}

pub struct Metrics {
    /// Live `T_oh` / `T_acc` (seed 001 §III-C).
    pub provision: crate::provision::Provisioning,
    slot_functions: Vec<u8>,
    slots: Vec<SlotMetrics>,
    functions: Vec<FunctionMetrics>,
    engine: Mutex<EngineSnapshot>,
    /// The attached addresses' counters: (`listen="…",function="…"`, source).
    attach: Mutex<Vec<(String, crate::attach::CounterSource)>>,
    /// Times the I/O thread's spin gate said to sleep instead (`spin_gate.rs`).
    pub io_spin_refused: AtomicU64,
    /// Readings of the runnable threads the I/O thread's spin gate took.
    pub io_spin_readings: AtomicU64,
}

impl Metrics {
    pub fn new(slot_functions: &[u8]) -> Metrics {
        Metrics {
            provision: Default::default(),
            slot_functions: slot_functions.to_vec(),
            slots: slot_functions
                .iter()
                .map(|_| SlotMetrics::default())
                .collect(),
            functions: (0..256).map(|_| FunctionMetrics::default()).collect(),
            engine: Mutex::new(EngineSnapshot::default()),
            attach: Mutex::new(Vec::new()),
            io_spin_refused: AtomicU64::new(0),
            io_spin_readings: AtomicU64::new(0),
        }
    }

    /// A slot's run joined `bytes` of a kept buffer to its request's bytes.
    pub fn record_joined(&self, slot: usize, bytes: u64) {
        if bytes > 0 {
            self.slots[slot].joined_bytes.fetch_add(bytes, Relaxed);
        }
    }

    /// A slot ran its function once (a whole request or one hop of a chain).
    pub fn record_run(
        &self,
        slot: usize,
        function: u8,
        in_bytes: usize,
        exec_ns: u64,
        status: Status,
        inline: bool,
    ) {
        if status == Status::Ok {
            self.provision
                .record_run(function, in_bytes as u64, exec_ns, inline);
        }
        let s = &self.slots[slot];
        s.completions.fetch_add(1, Relaxed);
        if inline {
            s.inline.fetch_add(1, Relaxed);
        }
        s.busy_ns.fetch_add(exec_ns, Relaxed);
        if status != Status::Ok {
            s.errors.fetch_add(1, Relaxed);
        }
        self.functions[function as usize].exec.observe(exec_ns);
    }

    /// A request's answer went out; `function` ran its last hop.
    pub fn record_answer(&self, function: u8, h: &ResponseHeader) {
        self.provision.record_answer();
        let node = h.reassembly_ns + h.queue_ns + h.exec_ns;
        self.functions[function as usize].node.observe(node);
    }

    /// An attached address whose counters /metrics shows (`offrac_attach_*`).
    pub fn add_attach(
        &self,
        listen: std::net::SocketAddr,
        function: &str,
        source: crate::attach::CounterSource,
    ) {
        let labels = format!("listen=\"{listen}\",function=\"{function}\"");
        self.attach
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((labels, source));
    }

    /// The attached addresses' counters, each name's samples together under one HELP/TYPE.
    fn render_attach(&self, o: &mut String) {
        let sources = self
            .attach
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let read: Vec<(String, Vec<crate::attach::inline::Counter>)> =
            sources.iter().map(|(l, f)| (l.clone(), f())).collect();
        let mut names: Vec<&'static str> = Vec::new();
        for c in read.iter().flat_map(|(_, cs)| cs) {
            if !names.contains(&c.name) {
                names.push(c.name);
            }
        }
        for name in names {
            let mut head = false;
            for (labels, cs) in &read {
                for c in cs.iter().filter(|c| c.name == name) {
                    if !head {
                        let kind = if c.gauge { "gauge" } else { "counter" };
                        let _ = writeln!(o, "# HELP {name} {}\n# TYPE {name} {kind}", c.help);
                        head = true;
                    }
                    let extra = c
                        .label
                        .as_ref()
                        .map(|(k, v)| format!(",{k}=\"{v}\""))
                        .unwrap_or_default();
                    let _ = writeln!(o, "{name}{{{labels}{extra}}} {}", c.value);
                }
            }
        }
    }

    /// Copy the engine's counters and gauges (called by the I/O thread).
    pub fn publish(&self, driver: &Driver) {
        let engine = driver.engine();
        for (m, q) in self.slots.iter().zip(engine.slots()) {
            m.queue_depth.store(q.depth() as u64, Relaxed);
        }
        let st = engine.stats();
        let pool = engine.pool();
        let snap = EngineSnapshot {
            requests: st.requests,
            admitted: st.admitted,
            admitted_small: st.admitted_small,
            dispatched: st.dispatched,
            collected: st.collected,
            aborted: st.aborted,
            refusals: Status::ALL.iter().map(|&s| (s, st.refused(s))).collect(),
            by_function: st
                .refusals_by_function
                .iter()
                .map(|(&k, &v)| (k, v))
                .collect(),
            by_tenant: st
                .refusals_by_tenant
                .iter()
                .map(|(&k, &v)| (k, v))
                .collect(),
            tenant_overflow: st.refusals_tenant_overflow,
            buffer_used: (0..pool.len()).map(|b| pool.used(b)).collect(),
            small_queue: engine.small_queue(),
            connections: driver.connections(),
            hops: st.hops,
            payload_bytes_copied: st.payload_bytes_copied,
            payload_bytes_direct: st.payload_bytes_direct,
            buffer_bytes_copied: st.buffer_bytes_copied,
            collectives: driver.collective_stats().1,
            links: driver.link_stats(),
            link_up: driver
                .links()
                .map(|(d, state)| (d, state == crate::LinkState::Up))
                .collect(),
        };
        *self.engine.lock().unwrap_or_else(|p| p.into_inner()) = snap;
    }

    pub fn render(&self) -> String {
        let mut o = String::with_capacity(8192);
        render_process(&mut o);
        let slot_label = |i: usize| {
            let f = self.slot_functions[i];
            let name = FunctionId::from_id(f).map_or("unknown", FunctionId::name);
            format!("slot=\"{i}\",function=\"{name}\"")
        };
        let gauge = |o: &mut String, name: &str, help: &str, kind: &str| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} {kind}");
        };
        type SlotValue = fn(&SlotMetrics) -> f64;
        let per_slot: [(&str, &str, &str, SlotValue); 6] = [
            (
                "offrac_slot_completions_total",
                "Requests a slot finished (any status).",
                "counter",
                |s| s.completions.load(Relaxed) as f64,
            ),
            (
                "offrac_slot_inline_completions_total",
                "Of those, run on the I/O thread (short requests of cheap functions).",
                "counter",
                |s| s.inline.load(Relaxed) as f64,
            ),
            (
                "offrac_slot_errors_total",
                "Requests a slot finished with an error status.",
                "counter",
                |s| s.errors.load(Relaxed) as f64,
            ),
            (
                "offrac_slot_busy_seconds_total",
                "Time a slot spent executing.",
                "counter",
                |s| s.busy_ns.load(Relaxed) as f64 / 1e9,
            ),
            (
                "offrac_slot_input_bytes_joined_total",
                "Bytes of kept buffers a slot copied to join them with its requests' own bytes (its function does not read the two in place).",
                "counter",
                |s| s.joined_bytes.load(Relaxed) as f64,
            ),
            (
                "offrac_slot_queue_depth",
                "Complete requests waiting in a slot's queue.",
                "gauge",
                |s| s.queue_depth.load(Relaxed) as f64,
            ),
        ];
        for (name, help, kind, value) in per_slot {
            gauge(&mut o, name, help, kind);
            for (i, s) in self.slots.iter().enumerate() {
                let _ = writeln!(o, "{name}{{{}}} {}", slot_label(i), value(s));
            }
        }
        let e = self
            .engine
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for (name, help, v) in [
            (
                "offrac_io_spin_refused_total",
                "Times the I/O thread slept inside its spin window because more threads were runnable than the machine has CPUs ([io] spin_when = \"cpu_idle\").",
                self.io_spin_refused.load(Relaxed),
            ),
            (
                "offrac_io_spin_readings_total",
                "Readings of the machine's runnable threads taken by the I/O thread's spin gate ([io] spin_when = \"cpu_idle\"; ~2 us each).",
                self.io_spin_readings.load(Relaxed),
            ),
            (
                "offrac_requests_total",
                "Request headers parsed.",
                e.requests,
            ),
            (
                "offrac_admitted_total",
                "Requests admitted to the pool or small-request queue.",
                e.admitted,
            ),
            (
                "offrac_admitted_small_total",
                "Requests admitted through the small-request queue.",
                e.admitted_small,
            ),
            (
                "offrac_dispatched_total",
                "Requests dispatched to a slot.",
                e.dispatched,
            ),
            (
                "offrac_collected_total",
                "Admitted requests collected before completion (client closed, stalled or past the reassembly timeout).",
                e.collected,
            ),
            (
                "offrac_aborted_total",
                "Complete requests answered SHUTTING_DOWN because the shutdown grace period ended first.",
                e.aborted,
            ),
            (
                "offrac_payload_bytes_copied_total",
                "Payload bytes of admitted requests copied from the read buffer into their reassembly buffer.",
                e.payload_bytes_copied,
            ),
            (
                "offrac_payload_bytes_direct_total",
                "Payload bytes of admitted requests read straight into their reassembly buffer (not copied).",
                e.payload_bytes_direct,
            ),
            (
                "offrac_buffer_bytes_copied_total",
                "Bytes of kept named buffers copied into requests' payloads by load hops, and payload bytes copied into buffers by tee hops.",
                e.buffer_bytes_copied,
            ),
            (
                "offrac_chain_hops_total",
                "Chain hops run here whose output went on to a next hop.",
                e.hops,
            ),
            (
                "offrac_forwarded_total",
                "Chain hops forwarded to another device.",
                e.links.forwarded,
            ),
            (
                "offrac_relayed_total",
                "Answers of forwarded hops relayed back to their caller.",
                e.links.relayed,
            ),
            (
                "offrac_receipts_total",
                "Receipts from peers: forwarded hops whose answer a node further on wrote to the caller's direct reply endpoint.",
                e.links.receipts,
            ),
            (
                "offrac_forward_failures_total",
                "Forwarded hops this node answered itself (link down or full, no answer in time, shutdown).",
                e.links.failed,
            ),
            (
                "offrac_late_answers_total",
                "Answers from a peer that came after their hop had been answered TIMEOUT (dropped).",
                e.links.late,
            ),
            (
                "offrac_link_connects_total",
                "Connection attempts to peers.",
                e.links.connects,
            ),
            (
                "offrac_link_hellos_refused_total",
                "Links closed because the peer refused this node's hello (another node key?).",
                e.links.hellos_refused,
            ),
            (
                "offrac_collective_bytes_copied_total",
                "Bytes collectives copied in memory (inputs into work buffers or messages, segments out of them, received data into them, outputs out of them).",
                e.collectives.copied_bytes,
            ),
            (
                "offrac_collective_bytes_shared_total",
                "Bytes collectives sent as slices of a shared buffer (a work buffer no step writes any more, a named input), not copied.",
                e.collectives.shared_bytes,
            ),
            (
                "offrac_collective_bytes_posted_total",
                "Bytes of collectives' received segments read straight into their place in the work buffer (posted receives), not copied.",
                e.collectives.posted_bytes,
            ),
            (
                "offrac_collective_bytes_reused_total",
                "Bytes of collectives' work buffers that reused the memory of an output the kept named buffer replaced (no fresh pages).",
                e.collectives.reused_bytes,
            ),
            (
                "offrac_collective_acks_total",
                "OK answers from peers to collective messages that asked for one (every ack_window-th of a link).",
                e.links.collective_answers,
            ),
        ] {
            gauge(&mut o, name, help, "counter");
            let _ = writeln!(o, "{name} {v}");
        }
        gauge(
            &mut o,
            "offrac_refusals_total",
            "Requests answered by the node itself with an error, by reason.",
            "counter",
        );
        for (s, v) in &e.refusals {
            if *s != Status::Ok {
                let _ = writeln!(o, "offrac_refusals_total{{reason=\"{}\"}} {v}", s.name());
            }
        }
        let reason = |code: u16| Status::from_code(code).map_or("unknown", Status::name);
        gauge(
            &mut o,
            "offrac_refusals_by_function_total",
            "Refusals of requests whose header was read, by function and reason.",
            "counter",
        );
        for &((f, code), v) in &e.by_function {
            let name =
                FunctionId::from_id(f).map_or_else(|| f.to_string(), |f| f.name().to_string());
            let _ = writeln!(
                o,
                "offrac_refusals_by_function_total{{function=\"{name}\",reason=\"{}\"}} {v}",
                reason(code)
            );
        }
        gauge(
            &mut o,
            "offrac_refusals_by_tenant_total",
            "Refusals of requests whose header was read, by tenant and reason.",
            "counter",
        );
        for &((t, code), v) in &e.by_tenant {
            let _ = writeln!(
                o,
                "offrac_refusals_by_tenant_total{{tenant=\"{t}\",reason=\"{}\"}} {v}",
                reason(code)
            );
        }
        if e.tenant_overflow > 0 {
            // Past the bounded number of series: counted, not labelled.
            let _ = writeln!(
                o,
                "offrac_refusals_by_tenant_total{{tenant=\"other\",reason=\"any\"}} {}",
                e.tenant_overflow
            );
        }
        gauge(
            &mut o,
            "offrac_buffer_used_bytes",
            "Bytes reserved in each reassembly buffer.",
            "gauge",
        );
        for (b, v) in e.buffer_used.iter().enumerate() {
            let _ = writeln!(o, "offrac_buffer_used_bytes{{buffer=\"{b}\"}} {v}");
        }
        gauge(
            &mut o,
            "offrac_small_queue_requests",
            "Requests waiting in the small-request queue.",
            "gauge",
        );
        let _ = writeln!(o, "offrac_small_queue_requests {}", e.small_queue.0);
        gauge(
            &mut o,
            "offrac_connections",
            "Open client connections.",
            "gauge",
        );
        let _ = writeln!(o, "offrac_connections {}", e.connections);
        gauge(
            &mut o,
            "offrac_link_up",
            "1 if the link to a peer device is connected, else 0.",
            "gauge",
        );
        for (device, up) in &e.link_up {
            let _ = writeln!(o, "offrac_link_up{{device=\"{device}\"}} {}", u8::from(*up));
        }
        for (name, help, pick) in [
            (
                "offrac_node_latency_seconds",
                "Node-side latency: first byte in to execution done.",
                0,
            ),
            ("offrac_exec_seconds", "Function execution time.", 1),
        ] {
            gauge(&mut o, name, help, "histogram");
            for f in FunctionId::ALL {
                if !self.slot_functions.contains(&f.id()) {
                    continue;
                }
                let m = &self.functions[f.id() as usize];
                let h = if pick == 0 { &m.node } else { &m.exec };
                h.render(&mut o, name, &format!("function=\"{}\"", f.name()));
            }
        }
        let est = self.provision.estimates();
        gauge(
            &mut o,
            "offrac_overhead_seconds",
            "Live per-request overhead T_oh (I/O and slot threads' time outside execution, per answer).",
            "gauge",
        );
        if let Some(oh) = est.t_oh_ns {
            let _ = writeln!(o, "offrac_overhead_seconds {}", oh / 1e9);
        }
        gauge(
            &mut o,
            "offrac_exec_mean_seconds",
            "Live execution time T_acc per function and input size class (weighted mean).",
            "gauge",
        );
        for a in &est.acc {
            let name = FunctionId::from_id(a.function).map_or("unknown", FunctionId::name);
            let _ = writeln!(
                o,
                "offrac_exec_mean_seconds{{function=\"{name}\",size_class_bytes=\"{}\"}} {}",
                a.size_class,
                a.t_acc_ns / 1e9
            );
        }
        self.render_attach(&mut o);
        o
    }
}

/// `offrac_build_info` and the standard process metrics, read from /proc.
fn render_process(o: &mut String) {
    let _ = writeln!(
        o,
        "# HELP offrac_build_info The running build.\n# TYPE offrac_build_info gauge\noffrac_build_info{{version=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION")
    );
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok());
    if let Some(kib) = rss_kib {
        let _ = writeln!(
            o,
            "# HELP process_resident_memory_bytes Resident memory size in bytes.\n# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes {}",
            kib * 1024
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        let _ = writeln!(
            o,
            "# HELP process_open_fds Number of open file descriptors.\n# TYPE process_open_fds gauge\nprocess_open_fds {}",
            fds.count()
        );
    }
    // utime and stime: fields 14 and 15 of /proc/self/stat, after the ")" of the name.
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let ticks: Option<u64> = stat.rsplit_once(')').and_then(|(_, rest)| {
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
    });
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if let (Some(t), true) = (ticks, hz > 0) {
        let _ = writeln!(
            o,
            "# HELP process_cpu_seconds_total Total user and system CPU time in seconds.\n# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total {}",
            t as f64 / hz as f64
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two attached addresses: each name gets one HELP/TYPE and all its
    /// samples together (Prometheus text needs a name's samples grouped),
    /// each sample labelled with its address, function and own label.
    #[test]
    fn attach_counters_are_grouped_by_name_with_their_labels() {
        use crate::attach::inline::Counter;
        let m = Metrics::new(&[]);
        let source = |v: u64| -> crate::attach::CounterSource {
            std::sync::Arc::new(move || {
                vec![
                    Counter::total("offrac_attach_x_total", "X.", v),
                    Counter::total("offrac_attach_d_total", "D.", v + 1).with("reason", "short"),
                    Counter::gauge("offrac_attach_g", "G.", v + 2),
                ]
            })
        };
        m.add_attach(
            "127.0.0.1:1".parse().unwrap(),
            "memcached_cache",
            source(10),
        );
        m.add_attach("127.0.0.1:2".parse().unwrap(), "jwt", source(20));
        let text = m.render();
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("offrac_attach_"))
            .collect();
        let a = "listen=\"127.0.0.1:1\",function=\"memcached_cache\"";
        let b = "listen=\"127.0.0.1:2\",function=\"jwt\"";
        let want = [
            "# HELP offrac_attach_x_total X.".to_string(),
            "# TYPE offrac_attach_x_total counter".to_string(),
            format!("offrac_attach_x_total{{{a}}} 10"),
            format!("offrac_attach_x_total{{{b}}} 20"),
            "# HELP offrac_attach_d_total D.".to_string(),
            "# TYPE offrac_attach_d_total counter".to_string(),
            format!("offrac_attach_d_total{{{a},reason=\"short\"}} 11"),
            format!("offrac_attach_d_total{{{b},reason=\"short\"}} 21"),
            "# HELP offrac_attach_g G.".to_string(),
            "# TYPE offrac_attach_g gauge".to_string(),
            format!("offrac_attach_g{{{a}}} 12"),
            format!("offrac_attach_g{{{b}}} 22"),
        ];
        assert_eq!(lines, want);
    }

    #[test]
    fn an_observation_equal_to_a_bound_lands_in_that_bucket() {
        let h = Histogram::default();
        h.observe(1_000); // exactly 1 µs
        h.observe(1_001);
        assert_eq!(h.counts[0].load(Relaxed), 1);
        assert_eq!(h.counts[1].load(Relaxed), 1);
    }

    #[test]
    fn process_metrics_are_rendered() {
        let mut o = String::new();
        render_process(&mut o);
        assert!(o.contains("offrac_build_info{version=\""), "{o}");
        for m in [
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_cpu_seconds_total ",
        ] {
            let v: f64 = o
                .lines()
                .find_map(|l| l.strip_prefix(m))
                .unwrap_or_else(|| panic!("{m} missing in {o}"))
                .parse()
                .unwrap();
            assert!(v >= 0.0);
        }
    }
}
