//! What the replay examples that feed an `Engine` from a JSON trace share
//! (`engine_replay`, `path_replay`): the engine's configuration from the
//! trace file's `config`, and one trace item in.

use std::time::Duration;

use offrac_core::{BufferPolicy, Engine, EngineConfig, Instant, SlotPolicy};
use serde_json::Value;

/// `cfg.name` as a number, or an error naming it.
pub fn field(cfg: &Value, name: &str) -> Result<u64, String> {
    cfg[name]
        .as_u64()
        .ok_or_else(|| format!("config.{name} missing or not a number"))
}

/// `cfg.name` as a list of function or device ids (empty when absent).
fn ids(cfg: &Value, name: &str) -> Result<Vec<u8>, String> {
    if cfg[name].is_null() {
        return Ok(Vec::new());
    }
    cfg[name]
        .as_array()
        .ok_or_else(|| format!("config.{name}: expected an array"))?
        .iter()
        .map(|f| f.as_u64().and_then(|f| u8::try_from(f).ok()))
        .collect::<Option<_>>()
        .ok_or_else(|| format!("config.{name}: ids 0..=255"))
}

/// The engine the RTL was built as: `buffers`, `buffer_bytes`, `policy` (spelled as in the
/// node's TOML), `max_payload`, `device_id`, `hosted` (a slot each) and optionally
/// `small_request_max`, `small_queue_bytes` (0 when absent: no small-request queue) and
/// `peers` (none when absent). Slot queues hold `buffer_bytes`. Time does not pass in a
/// replay, so no request is ever collected.
pub fn engine_config(cfg: &Value) -> Result<EngineConfig, String> {
    let policy: BufferPolicy = cfg["policy"]
        .as_str()
        .ok_or("config.policy missing")?
        .parse()?;
    let hosted = ids(cfg, "hosted")?;
    let buffer_bytes = field(cfg, "buffer_bytes")?;
    Ok(EngineConfig {
        buffers: field(cfg, "buffers")? as usize,
        buffer_bytes,
        buffer_policy: policy,
        max_payload: field(cfg, "max_payload")?,
        small_request_max: cfg["small_request_max"].as_u64().unwrap_or(0),
        small_queue_bytes: cfg["small_queue_bytes"].as_u64().unwrap_or(0),
        slot_policy: SlotPolicy::Rr,
        slot_queue_bytes: buffer_bytes,
        stall_timeout: Duration::from_secs(3600),
        reassembly_timeout: Duration::from_secs(3600),
        reassembly_min_rate: 0,
        slot_queue_depths: vec![None; hosted.len()],
        slots: hosted,
        device_id: u8::try_from(field(cfg, "device_id")?).map_err(|e| e.to_string())?,
        peers: ids(cfg, "peers")?,
    })
}

/// One trace item, `[conn, hex bytes | null]`, into `engine`: the bytes the
/// connection delivered, or its close.
pub fn feed(engine: &mut Engine, now: Instant, item: &Value) -> Result<(), String> {
    let conn = item[0].as_u64().ok_or("a trace item's connection")?;
    if item[1].is_null() {
        engine.handle_close(now, conn);
    } else {
        let data = hex::decode(item[1].as_str().ok_or("a trace item's bytes")?)
            .map_err(|e| format!("hex: {e}"))?;
        engine.handle_bytes(now, conn, &data);
    }
    Ok(())
}
