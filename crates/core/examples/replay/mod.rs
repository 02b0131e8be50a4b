//! What the replay examples that feed an `Engine` from a JSON trace share
//! (`engine_replay`, `path_replay`): a config field, and one trace item in.

use offrac_core::{Engine, Instant};
use serde_json::Value;

/// `cfg.name` as a number, or an error naming it.
pub fn field(cfg: &Value, name: &str) -> Result<u64, String> {
    cfg[name]
        .as_u64()
        .ok_or_else(|| format!("config.{name} missing or not a number"))
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
