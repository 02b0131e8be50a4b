mod common;

use std::time::Duration;

use common::FakeNode;
use offrac_client::{
    generate_payload, run_closed_loop, ClientError, FunctionId, LoadSpec, MixOrder,
};

fn check_row_sane(r: &offrac_client::FunctionRow, window_s: f64) {
    assert!(r.ok > 0, "{}: no OK calls", r.name);
    assert!(r.p50_us > 0.0, "{}: p50 {}", r.name, r.p50_us);
    assert!(r.p50_us <= r.p90_us && r.p90_us <= r.p99_us, "{r:?}");
    assert!(r.p99_us <= r.p999_us && r.p999_us <= r.max_us, "{r:?}");
    // 3 significant figures: the max is within 0.1% of some real RTT, and no
    // single RTT can exceed the whole window.
    assert!(r.max_us < window_s * 1e6 * 1.001, "{r:?}");
    assert!(r.mean_us > 0.0 && r.mean_us <= r.max_us * 1.001, "{r:?}");
    // Fake node timings: 1 + 2 + 3 µs on every OK response.
    assert!((r.reassembly_us - 1.0).abs() < 1e-9, "{r:?}");
    assert!((r.queue_us - 2.0).abs() < 1e-9, "{r:?}");
    assert!((r.exec_us - 3.0).abs() < 1e-9, "{r:?}");
    assert!((r.overhead_us - (r.mean_us - 6.0)).abs() < 1e-6, "{r:?}");
    assert!(
        (r.req_per_s * window_s - r.ok as f64).abs() < 1e-6 * r.ok as f64 + 1e-9,
        "{r:?}"
    );
    let bits = (r.request_bytes + r.response_bytes) as f64 * 8.0;
    assert!(
        (r.gbit_per_s * 1e9 * window_s - bits).abs() <= 1e-6 * bits + 1e-9,
        "{r:?}"
    );
}

#[test]
fn closed_loop_against_fake_echo_node() {
    let node = FakeNode::start();
    let mut spec = LoadSpec::new(
        node.addr(),
        2,
        Duration::from_millis(400),
        Duration::from_millis(150),
        vec![
            (FunctionId::Echo, 0, 1024),
            (FunctionId::TopK, 8, 4096),
            (FunctionId::Logit, 0, 4096),
            (FunctionId::MinMax, 0, 4096),
            (FunctionId::MatMul, 8, 0),
            (FunctionId::Echo, 0, 64),
        ],
    );
    spec.order = MixOrder::RoundRobin;
    let report = run_closed_loop(&spec).expect("run");

    assert_eq!(report.clients, 2);
    assert!(
        report.window_s >= 0.4 && report.window_s < 5.0,
        "window {}",
        report.window_s
    );
    let names: Vec<&str> = report.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["echo", "topk", "logit", "minmax", "matmul"]);
    for r in &report.rows {
        // Every generated payload passes the fake node's validation.
        assert_eq!(r.errors, 0, "{}: {:?}", r.name, r.errors_by_status);
        check_row_sane(r, report.window_s);
    }
    check_row_sane(&report.total, report.window_s);
    assert_eq!(
        report.total.ok,
        report.rows.iter().map(|r| r.ok).sum::<u64>()
    );

    // Round-robin from staggered starts: echo has two entries, so about twice
    // the calls of any other function.
    let echo = report.rows[0].ok as f64;
    let topk = report.rows[1].ok as f64;
    assert!(
        echo > 1.5 * topk && echo < 2.5 * topk,
        "echo {echo} topk {topk}"
    );
    // Echo bytes: request == response; matmul: 2·8·8 f32 in, echoed back.
    assert_eq!(report.rows[0].request_bytes, report.rows[0].response_bytes);
    assert_eq!(report.rows[4].request_bytes, report.rows[4].ok * 512);

    // Warm-up requests reached the node but were not recorded.
    assert!(
        node.requests() > report.total.ok,
        "node saw {} requests, report has {}",
        node.requests(),
        report.total.ok
    );

    let table = report.render_table();
    assert!(
        table.starts_with("offrac load: 2 clients x 0.40 s measured"),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("total")), "{table}");
    assert!(table.lines().any(|l| l.starts_with("matmul")), "{table}");
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).expect("valid json");
    assert_eq!(json["clients"], 2);
    assert_eq!(json["rows"][0]["name"], "echo");
    assert_eq!(json["total"]["ok"], report.total.ok);
}

#[test]
fn closed_loop_counts_error_statuses() {
    let node = FakeNode::start();
    // K = 0 is rejected by the (fake) node with BAD_INPUT.
    let spec = LoadSpec::new(
        node.addr(),
        1,
        Duration::from_millis(150),
        Duration::ZERO,
        vec![(FunctionId::TopK, 0, 64), (FunctionId::Echo, 0, 64)],
    );
    let report = run_closed_loop(&spec).expect("run");
    let topk = &report.rows[0];
    assert_eq!(topk.ok, 0);
    assert!(topk.errors > 0);
    assert_eq!(topk.errors_by_status.get("BAD_INPUT"), Some(&topk.errors));
    assert_eq!(topk.p50_us, 0.0);
    assert!(report.rows[1].ok > 0);
    assert_eq!(report.total.errors, topk.errors);
    assert!(
        report.render_table().contains("BAD_INPUT="),
        "{}",
        report.render_table()
    );
}

#[test]
fn closed_loop_rejects_bad_specs_and_unreachable_nodes() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let mix = vec![(FunctionId::Echo, 0, 8)];
    let spec = LoadSpec::new(
        format!("127.0.0.1:{port}"),
        1,
        Duration::from_millis(10),
        Duration::ZERO,
        mix.clone(),
    );
    assert!(matches!(run_closed_loop(&spec), Err(ClientError::Io(_))));

    let node = FakeNode::start();
    let empty = LoadSpec::new(
        node.addr(),
        1,
        Duration::from_millis(10),
        Duration::ZERO,
        vec![],
    );
    assert!(matches!(
        run_closed_loop(&empty),
        Err(ClientError::Config(_))
    ));
    let none = LoadSpec::new(
        node.addr(),
        0,
        Duration::from_millis(10),
        Duration::ZERO,
        mix,
    );
    assert!(matches!(
        run_closed_loop(&none),
        Err(ClientError::Config(_))
    ));
}

#[test]
fn generated_payloads_are_valid_and_deterministic() {
    let f32s = |p: &[u8]| -> Vec<f32> {
        p.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    };
    let logit = generate_payload(FunctionId::Logit, 0, 1 << 16, 3).expect("logit");
    assert_eq!(logit.len(), 1 << 16);
    assert!(f32s(&logit).iter().all(|&x| x > 0.0 && x < 1.0));
    assert_eq!(
        logit,
        generate_payload(FunctionId::Logit, 0, 1 << 16, 3).expect("again")
    );
    assert_ne!(
        logit,
        generate_payload(FunctionId::Logit, 0, 1 << 16, 4).expect("other seed")
    );

    let minmax = generate_payload(FunctionId::MinMax, 0, 4000, 1).expect("minmax");
    let v = f32s(&minmax);
    assert!(v.iter().all(|x| x.is_finite()));
    assert!(v.iter().any(|&x| x != v[0]), "not all equal");

    assert_eq!(
        generate_payload(FunctionId::TopK, 3, 10, 1)
            .expect("topk")
            .len(),
        8
    );
    assert_eq!(
        generate_payload(FunctionId::TopK, 3, 0, 1)
            .expect("topk")
            .len(),
        4
    );
    assert_eq!(
        generate_payload(FunctionId::Echo, 0, 13, 1)
            .expect("echo")
            .len(),
        13
    );
    assert_eq!(
        generate_payload(FunctionId::MatMul, 16, 0, 1)
            .expect("mm")
            .len(),
        2 * 16 * 16 * 4
    );
    // n inferred from bytes: 2·n²·4 ≤ 5000 → n = 25.
    assert_eq!(
        generate_payload(FunctionId::MatMul, 0, 5000, 1)
            .expect("mm")
            .len(),
        2 * 25 * 25 * 4
    );
    assert!(matches!(
        generate_payload(FunctionId::MatMul, 1 << 20, 0, 1),
        Err(ClientError::Config(_))
    ));
}
