//! The load generator against an in-process node and the baseline servers.

use std::path::PathBuf;
use std::time::Duration;

use offrac_bench::servers::{cpu::serve_cpu, floor::serve_floor, raw::serve_raw, IoMode};
use offrac_bench::trace::{load_trace, replay, ReplaySpec};
use offrac_bench::{run_closed_loop, run_open_loop, BenchSpec, MixItem, WireConn};
use offrac_client::generate_payload;
use offrac_proto::{FunctionId, Status};

fn node() -> offrac_node::NodeHandle {
    let mut cfg = offrac_node::NodeConfig::parse(offrac_node::DEFAULT_CONFIG).expect("config");
    cfg.metrics_listen = None;
    offrac_node::start(cfg, "127.0.0.1:0").expect("node starts")
}

fn spec(addr: String, clients: usize, mix: Vec<MixItem>) -> BenchSpec {
    let mut s = BenchSpec::new(addr, clients, mix);
    s.duration = Duration::from_millis(300);
    s.warmup = Duration::from_millis(100);
    s
}

/// What top-k of `payload` must be, computed locally by the built-in.
fn expected(f: FunctionId, param: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    offrac_accel::builtin(f)
        .run(param, payload, &mut out)
        .expect("valid input");
    out
}

#[test]
fn closed_loop_counts_every_client_and_row() {
    let n = node();
    let mix = vec![
        MixItem::new(FunctionId::Echo, 0, 1024),
        MixItem::new(FunctionId::TopK, 16, 4096),
    ];
    let r = run_closed_loop(&spec(n.addr.to_string(), 3, mix)).expect("run");
    assert_eq!(r.rows.len(), 2);
    assert_eq!(r.per_client.len(), 3);
    assert_eq!(r.total.errors, 0, "{:?}", r.total.errors_by_status);
    assert!(r.total.ok > 100, "only {} answers", r.total.ok);
    assert_eq!(r.rows.iter().map(|x| x.ok).sum::<u64>(), r.total.ok);
    assert_eq!(r.per_client.iter().map(|c| c.ok).sum::<u64>(), r.total.ok);
    assert!(r.per_client.iter().all(|c| c.ok > 0));
    let t = &r.total;
    assert!(t.p25_us <= t.p50_us && t.p50_us <= t.p99_us && t.p99_us <= t.max_us);
    // The node times every answer; top-k runs for a measurable time.
    assert!(r.rows[1].exec_us > 0.0);
    assert!(r.client_p50_spread_us >= 0.0);
    let csv = r.to_csv();
    assert_eq!(csv.lines().count(), 3);
    n.shutdown().expect("shutdown");
}

#[test]
fn open_loop_offers_about_the_set_rate() {
    let n = node();
    let mut s = spec(
        n.addr.to_string(),
        2,
        vec![MixItem::new(FunctionId::Echo, 0, 256)],
    );
    s.rate = Some(2000.0);
    s.duration = Duration::from_millis(500);
    let r = run_open_loop(&s).expect("run");
    // 1000 expected; Poisson noise is ~3 %, allow for a slow CI machine.
    let got = r.total.ok + r.total.errors + r.unanswered;
    assert!(
        (700..=1300).contains(&got),
        "{got} requests in 0.5 s at 2000/s"
    );
    assert_eq!(r.total.errors, 0);
    assert_eq!(r.mode, "open");
    n.shutdown().expect("shutdown");
}

#[test]
fn fragmented_requests_get_correct_answers_from_the_node() {
    let n = node();
    let mut c = WireConn::connect(&n.addr.to_string(), false).expect("connect");
    for (frags, gap) in [(1, 0), (2, 0), (4, 50), (7, 10)] {
        c.set_fragments(frags, Duration::from_micros(gap));
        for f in [FunctionId::TopK, FunctionId::Logit, FunctionId::MinMax] {
            let param = if f == FunctionId::TopK { 16 } else { 0 };
            let payload = generate_payload(f, param, 4096, 7).expect("payload");
            c.send(9, f.id(), param, &payload).expect("send");
            let h = c.recv().expect("answer");
            assert_eq!(h.status, Status::Ok, "{f:?} in {frags} fragments");
            assert_eq!(h.request_id, 9);
            assert_eq!(c.payload(), expected(f, param, &payload));
        }
    }
    n.shutdown().expect("shutdown");
}

#[test]
fn raw_echo_answers_pipelined_and_fragmented_requests() {
    echoes_pipelined_and_fragmented(serve_raw("127.0.0.1:0", IoMode::Blocking).expect("serve"));
}

#[test]
fn the_spinning_floor_answers_pipelined_and_fragmented_requests() {
    echoes_pipelined_and_fragmented(serve_floor("127.0.0.1:0").expect("serve"));
}

fn echoes_pipelined_and_fragmented(s: offrac_bench::servers::ServerHandle) {
    let mut c = WireConn::connect(&s.addr.to_string(), false).expect("connect");
    let payloads: Vec<Vec<u8>> = (0..20)
        .map(|i| generate_payload(FunctionId::Echo, 0, i * 333, i as u64).expect("payload"))
        .collect();
    c.set_fragments(3, Duration::ZERO);
    for (i, p) in payloads.iter().enumerate() {
        c.send(i as u64, 0, 0, p).expect("send");
    }
    for (i, p) in payloads.iter().enumerate() {
        let h = c.recv().expect("answer");
        assert_eq!((h.status, h.request_id), (Status::Ok, i as u64));
        assert_eq!(c.payload(), &p[..]);
    }
    s.shutdown();
}

#[test]
fn cpu_baseline_runs_the_built_ins_and_refuses_bad_input() {
    let s = serve_cpu(
        "127.0.0.1:0",
        2,
        IoMode::Poll {
            spin: Duration::from_micros(50),
        },
    )
    .expect("serve");
    let addr = s.addr.to_string();
    for busy in [false, true] {
        let mut c = WireConn::connect(&addr, busy).expect("connect");
        c.set_fragments(2, Duration::from_micros(20));
        for f in [FunctionId::TopK, FunctionId::Logit, FunctionId::MinMax] {
            let param = if f == FunctionId::TopK { 16 } else { 0 };
            let payload = generate_payload(f, param, 1024, 3).expect("payload");
            c.send(1, f.id(), param, &payload).expect("send");
            let h = c.recv().expect("answer");
            assert_eq!(h.status, Status::Ok);
            assert_eq!(c.payload(), expected(f, param, &payload));
            assert!(h.exec_ns > 0);
        }
        c.send(2, FunctionId::TopK.id(), 16, &[1, 2, 3])
            .expect("send");
        assert_eq!(c.recv().expect("answer").status, Status::BadInput);
        c.send(3, 42, 0, &[]).expect("send");
        let h = c.recv().expect("answer");
        assert_eq!((h.status, h.detail), (Status::UnknownFunction, 42));
    }
    // And under the closed loop, four clients over two workers.
    let r = run_closed_loop(&spec(
        addr,
        4,
        vec![MixItem::new(FunctionId::TopK, 16, 1024)],
    ))
    .expect("run");
    assert_eq!(r.total.errors, 0);
    assert!(r.total.ok > 100);
    s.shutdown();
}

fn trace_path() -> PathBuf {
    // CI keeps shared/ beside the clone: <repo>/../shared/data/...
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/data/azure-functions-2021/processed_trace.csv")
}

#[test]
fn the_azure_trace_parses_with_its_documented_counts() {
    let path = trace_path();
    if !path.exists() {
        println!("NOTICE: {} absent; trace test skipped", path.display());
        return;
    }
    let rows = load_trace(&path).expect("trace parses");
    assert_eq!(rows.len(), 46_394);
    let count = |app| rows.iter().filter(|r| r.app == app).count();
    assert_eq!(
        (count(1), count(2), count(3), count(5)),
        (14_768, 6_154, 21_342, 4_130)
    );
    let total: f64 = rows.iter().map(|r| r.sleep_s).sum();
    assert!((3500.0..3700.0).contains(&total), "{total}");
}

#[test]
fn replay_sends_every_trace_app_including_the_cnn_and_counts_unknown_ones() {
    use offrac_bench::trace::parse_trace;
    let text = "app,sleep_time,request_size,response_size\r\n\
                1,0.0,512,64\r\n2,0.0,24576,64\r\n3,0.001,1024,1024\r\n5,0.0,4096,4096\r\n\
                1,0.0,512,64\r\n2,0.0,24576,64\r\n4,0.0,100,100\r\n";
    let rows = parse_trace(text).expect("parse");
    let n = node();
    let spec = ReplaySpec {
        addr: n.addr.to_string(),
        speedup: 1.0,
        max_rows: 0,
        time_limit: Duration::ZERO,
        busy_poll: false,
        topk_k: 16,
        progress: false,
        label: "t".into(),
    };
    let r = replay(&spec, &rows).expect("replay");
    assert_eq!(r.skipped.get("app4"), Some(&1));
    assert_eq!(r.skipped.len(), 1);
    let labels: Vec<&str> = r.rows.iter().map(|x| x.label.as_str()).collect();
    assert_eq!(
        labels,
        ["topk/512", "cnn/24576", "logit/1024", "minmax/4096"]
    );
    assert_eq!(r.rows[0].ok, 2);
    assert_eq!(r.rows[1].ok, 2);
    assert_eq!(r.total.ok, 6);
    assert_eq!(r.total.errors, 0);
    assert!(!r.rows[0].cdf.is_empty());
    n.shutdown().expect("shutdown");
}

#[test]
fn grpc_baseline_runs_the_built_ins() {
    use offrac_bench::grpc::{serve_grpc, GrpcCaller};
    use offrac_bench::Caller;
    let s = serve_grpc("127.0.0.1:0", 1).expect("serve");
    let mut c = GrpcCaller::connect(&s.addr.to_string()).expect("connect");
    for f in [
        FunctionId::Echo,
        FunctionId::TopK,
        FunctionId::Logit,
        FunctionId::MinMax,
    ] {
        let param = if f == FunctionId::TopK { 16 } else { 0 };
        let payload = generate_payload(f, param, 1024, 5).expect("payload");
        let o = c
            .call(1, &MixItem::new(f, param, 1024), &payload)
            .expect("call");
        assert_eq!(o.header.status, Status::Ok, "{f:?}");
        assert_eq!(o.response_bytes, expected(f, param, &payload).len());
    }
    let o = c
        .call(2, &MixItem::new(FunctionId::TopK, 16, 3), &[1, 2, 3])
        .expect("call");
    assert_eq!(o.header.status, Status::BadInput);
    s.shutdown();
}

/// What grpcurl asks first: the server lists `offrac.Accel` through the
/// reflection service and describes it from the compiled `accel.proto`.
#[test]
fn grpc_baseline_answers_reflection() {
    use offrac_bench::grpc::serve_grpc;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1::ServerReflectionRequest;

    let s = serve_grpc("127.0.0.1:0", 1).expect("serve");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ask = |req: MessageRequest| {
        rt.block_on(async {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", s.addr))
                .expect("address")
                .connect()
                .await
                .expect("connect");
            let mut c = ServerReflectionClient::new(channel);
            let msg = ServerReflectionRequest {
                host: String::new(),
                message_request: Some(req),
            };
            let mut answers = c
                .server_reflection_info(tokio_stream::iter([msg]))
                .await
                .expect("reflection")
                .into_inner();
            answers
                .message()
                .await
                .expect("answer")
                .and_then(|r| r.message_response)
        })
    };
    let Some(MessageResponse::ListServicesResponse(list)) =
        ask(MessageRequest::ListServices(String::new()))
    else {
        panic!("no service list");
    };
    let names: Vec<&str> = list.service.iter().map(|x| x.name.as_str()).collect();
    assert!(names.contains(&"offrac.Accel"), "{names:?}");
    let Some(MessageResponse::FileDescriptorResponse(fd)) =
        ask(MessageRequest::FileContainingSymbol("offrac.Accel".into()))
    else {
        panic!("no descriptor for offrac.Accel");
    };
    assert!(!fd.file_descriptor_proto.is_empty());
    s.shutdown();
}

#[test]
fn the_wire_id_override_addresses_another_function() {
    let n = node();
    // The default node hosts no function 200: every request is refused by
    // id, which shows the override (not the item's echo) went on the wire.
    let mut item = MixItem::new(FunctionId::Echo, 0, 64);
    item.wire_id = 200;
    let r = run_closed_loop(&spec(n.addr.to_string(), 1, vec![item])).expect("run");
    assert_eq!(r.total.ok, 0, "{:?}", r.total.errors_by_status);
    assert!(r.total.errors > 0);
    assert!(
        r.total
            .errors_by_status
            .keys()
            .all(|s| s == "UNKNOWN_FUNCTION"),
        "{:?}",
        r.total.errors_by_status
    );
    // The same item on its own id is answered.
    let r = run_closed_loop(&spec(
        n.addr.to_string(),
        1,
        vec![MixItem::new(FunctionId::Echo, 0, 64)],
    ))
    .expect("run");
    assert!(r.total.ok > 0 && r.total.errors == 0);
    n.shutdown().expect("shutdown");
}
