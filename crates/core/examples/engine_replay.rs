//! The engine's answers to beat streams, for the RTL dispatcher to be
//! replayed against (issue #12's co-verification of `offrac_dispatcher.v`
//! against `Engine` itself; `rtl/tests/tb_dispatcher.py` writes the input
//! and reads the output, docs/rtl.md describes both).
//!
//! ```sh
//! cargo run --release -p offrac-core --example engine_replay < traces.json > answers.json
//! ```
//! Input: `{"config": {...}, "traces": [[[conn, "hex bytes"], ...], ...]}`,
//! the configuration the RTL was built with (`buffers`, `buffer_bytes`,
//! `policy` spelled as in the node's TOML, `max_payload`, `device_id`, `hosted` function ids,
//! and optionally `small_request_max` and `small_queue_bytes`, 0 when absent: the small-request
//! queue off) and, per trace, the segments in arrival order. Each segment is one `handle_bytes`
//! call (a segment whose bytes are `null` is the connection's close: `handle_close`,
//! after which its later bytes are a new connection's) of a fresh engine per trace, with a slot
//! per hosted function that finishes every job at once (so a complete request leaves the pool,
//! or the small queue, at the end of the segment it completed in, as the engine drains it).
//!
//! Output, per trace and per segment, what the engine did in that call:
//! `reply` (connection and the 64-byte response header, hex), `dispatch`
//! (connection, request id, payload length) and `close` (connection); then
//! `reassembling`, the buffers holding a partial request after the segment, `small`, the
//! requests it admitted to the small queue, and `small_bytes`, the small queue's bytes after it.

use offrac_core::{Action, Engine, EngineConfig, Instant};
use serde_json::{json, Value};

mod replay;
use replay::{engine_config, feed};

fn replay(cfg: &EngineConfig, beats: &Value) -> Result<Value, String> {
    let mut engine = Engine::new(cfg.clone()).map_err(|e| e.to_string())?;
    let now = Instant::from_nanos(0);
    let mut out = Vec::new();
    for beat in beats.as_array().ok_or("a trace is a list of beats")? {
        let small_before = engine.stats().admitted_small;
        feed(&mut engine, now, beat)?;
        let mut events = Vec::new();
        while let Some(action) = engine.poll_action() {
            match action {
                Action::Reply { conn, header, .. } => {
                    events.push(json!({"reply": [conn, hex::encode(header.encode())]}));
                }
                Action::Dispatch { slot, job } => {
                    events.push(
                        json!({"dispatch": [job.conn, job.header.request_id, job.payload.len()]}),
                    );
                    engine.handle_slot_done(now, slot);
                }
                Action::Close { conn } => events.push(json!({"close": conn})),
                other => return Err(format!("the RTL's configuration cannot produce {other:?}")),
            }
        }
        let pool = engine.pool();
        let reassembling: Vec<usize> = (0..pool.len())
            .filter(|&b| pool.is_reassembling(b))
            .collect();
        out.push(json!({
            "events": events,
            "reassembling": reassembling,
            "small": engine.stats().admitted_small - small_before,
            "small_bytes": engine.small_queue().1,
        }));
    }
    Ok(Value::Array(out))
}

fn main() -> Result<(), String> {
    let input: Value =
        serde_json::from_reader(std::io::stdin().lock()).map_err(|e| e.to_string())?;
    let cfg = engine_config(&input["config"])?;
    let traces = input["traces"].as_array().ok_or("traces missing")?;
    let answers = traces
        .iter()
        .map(|t| replay(&cfg, t))
        .collect::<Result<Vec<_>, _>>()?;
    println!("{}", Value::Array(answers));
    Ok(())
}
