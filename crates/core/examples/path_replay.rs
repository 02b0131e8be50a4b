//! The software node's answers to segment streams of chained requests, for
//! the whole RTL request path (`offrac_request_path.v`: dispatcher, pool,
//! slot stage, accelerators, chain router, egress) to be replayed against
//! (issue #12; `rtl/tests/tb_request_path.py`'s `engine_replay` writes the
//! input and reads the output, docs/rtl.md describes both).
//!
//! ```sh
//! cargo run --release -p offrac-core --example path_replay < traces.json > answers.json
//! ```
//! Input: `{"config": {...}, "traces": [[[conn, "hex bytes" | null], ...], ...]}`: the
//! configuration the RTL was built with (`buffers`, `buffer_bytes`, `policy` spelled as in the
//! node's TOML, `max_payload`, `device_id`, `hosted` function ids (a slot each), `peers` (the
//! devices a hop may be forwarded to), `small_request_max`, `small_queue_bytes`, and the
//! functions' state: `dictionary` (MapId's keys) and `borders` (Bucketize's sets, f32 bits))
//! and, per trace, the segments in arrival order. Each segment is one `handle_bytes` call of a
//! fresh engine per trace (`null`: the connection's close, `handle_close`).
//!
//! Every `Dispatch` is run at once, in the same instant, through the shipping kernel
//! (`offrac_accel::builtin_with`, the function's state from the input) and ended as the
//! worker ends it (`crates/node/src/worker.rs`): a failed hop or the chain's last is answered
//! there (`ResponseHeader::answer`, `Job::time_answer`), otherwise `Job::advance` and
//! `Engine::handle_hop_done`, after which the engine decides the next hop (a `Dispatch`, a
//! `Reply` from `Engine::route`, or a `Forward`). A `Forward` becomes the header the driver
//! sends on the link (`forward` in `crates/node/src/driver/links.rs`, the few lines of it
//! this crate cannot call written out below, a link to every device in `peers`). Time does
//! not pass: every timing is 0 and no request is ever collected.
//!
//! Output, per trace and per segment, `hops` (the hops run because of that call) and
//! `events`, what the node sent because of it, in the engine's order: `resp` (connection, the response header with its per-hop timings block
//! when it has one, hex; the payload, hex: the result, or the error's message),
//! `net` (connection, destination device, the forwarded header, hex, the payload, hex, and
//! the caller's request id) and `close` (connection).

use std::sync::Arc;

use offrac_accel::builtin_with;
use offrac_accel::dlrm::state::{Dictionary, FunctionState};
use offrac_core::{Action, Engine, EngineConfig, Instant, Job};
use offrac_proto::{FunctionId, ResponseHeader, Status};
use serde_json::{json, Value};

mod replay;
use replay::{engine_config, feed};

fn u32s(v: &Value, name: &str) -> Result<Vec<u32>, String> {
    v.as_array()
        .ok_or_else(|| format!("{name}: expected an array"))?
        .iter()
        .map(|w| w.as_u64().and_then(|w| u32::try_from(w).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("{name}: expected u32 values"))
}

/// The engine the RTL was built as; its slot queues hold a whole payload.
fn config(cfg: &Value) -> Result<EngineConfig, String> {
    let engine = engine_config(cfg)?;
    Ok(EngineConfig {
        slot_queue_bytes: engine.max_payload,
        ..engine
    })
}

fn state(cfg: &Value) -> Result<FunctionState, String> {
    let keys = u32s(&cfg["dictionary"], "config.dictionary")?;
    let sets = cfg["borders"]
        .as_array()
        .ok_or("config.borders: expected an array of sets")?;
    let sets: Result<Vec<Vec<f32>>, String> = sets
        .iter()
        .map(|set| {
            Ok(u32s(set, "config.borders")?
                .into_iter()
                .map(f32::from_bits)
                .collect())
        })
        .collect();
    Ok(FunctionState {
        dictionary: Arc::new(Dictionary::from_keys(keys)),
        borders: Arc::new(sets?),
    })
}

fn response(conn: u64, h: &ResponseHeader, payload: &[u8]) -> Value {
    let wire = h.encode_wire();
    json!({"resp": [conn, hex::encode(&wire[..h.wire_len()]), hex::encode(payload)]})
}

/// The driver's `forward` (crates/node/src/driver/links.rs) on an empty link that is up:
/// the forwarded header (the link's first request id; budgets are 0 in these traces).
fn forward(job: Job) -> Value {
    let device = job.header.current_hop().device;
    let caller = job.header.request_id;
    let header = job.header.for_link(1, job.payload.len() as u32); // the link's first id
    let w = header.encode_wire();
    json!({"net": [job.conn, device, hex::encode(&w[..header.wire_len()]),
                   hex::encode(job.payload.bytes()), caller]})
}

/// A dispatched hop run to its end as the worker runs it: the answer, or the advanced job
/// handed back to the engine.
fn run_hop(
    engine: &mut Engine,
    fs: &FunctionState,
    device: u8,
    now: Instant,
    slot: usize,
    mut job: Job,
) -> Result<Option<Value>, String> {
    let hop = job.header.current_hop();
    let f = FunctionId::from_id(hop.function)
        .ok_or_else(|| format!("function {} dispatched", hop.function))?;
    let mut out = Vec::new();
    let (head, tail) = job.payload.parts();
    let result = builtin_with(f, fs).run_parts(hop.param, head, tail, &mut out);
    if result.is_ok() && !job.is_last_hop() {
        job.advance(out, now, 0, 0, device);
        engine.handle_hop_done(now, slot, job);
        return Ok(None);
    }
    let (status, payload) = match &result {
        Ok(()) => (Status::Ok, out),
        Err(e) => (e.status(), e.message().as_bytes().to_vec()),
    };
    let mut h = ResponseHeader::answer(&job.header, status, device, payload.len() as u32);
    job.time_answer(&mut h, device, 0, 0);
    let route = engine.answer_route(job.conn, &job.header);
    h.request_id = route.request_id;
    engine.handle_slot_done(now, slot);
    Ok(Some(response(route.to, &h, &payload)))
}

fn replay(cfg: &EngineConfig, fs: &FunctionState, segments: &Value) -> Result<Value, String> {
    let mut engine = Engine::new(cfg.clone()).map_err(|e| e.to_string())?;
    let now = Instant::from_nanos(0);
    let mut out = Vec::new();
    for seg in segments.as_array().ok_or("a trace is a list of segments")? {
        feed(&mut engine, now, seg)?;
        let mut events = Vec::new();
        let mut hops = 0;
        while let Some(action) = engine.poll_action() {
            match action {
                Action::Reply {
                    conn,
                    header,
                    message,
                } => events.push(response(conn, &header, message.as_bytes())),
                Action::Dispatch { slot, job } => {
                    hops += 1;
                    if let Some(answer) = run_hop(&mut engine, fs, cfg.device_id, now, slot, job)? {
                        events.push(answer);
                    }
                }
                Action::Forward { job } => events.push(forward(job)),
                Action::Close { conn } => events.push(json!({ "close": conn })),
                other => return Err(format!("the RTL's configuration cannot produce {other:?}")),
            }
        }
        out.push(json!({"events": events, "hops": hops}));
    }
    Ok(Value::Array(out))
}

fn main() -> Result<(), String> {
    let input: Value =
        serde_json::from_reader(std::io::stdin().lock()).map_err(|e| e.to_string())?;
    let cfg = config(&input["config"])?;
    let fs = state(&input["config"])?;
    let traces = input["traces"].as_array().ok_or("traces missing")?;
    let answers = traces
        .iter()
        .enumerate()
        .map(|(i, t)| replay(&cfg, &fs, t).map_err(|e| format!("trace {i}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    println!("{}", Value::Array(answers));
    Ok(())
}
