//! The software built-ins as an oracle for the RTL testbenches (`rtl/tests`): reads
//! calls as JSON on stdin, runs each through the shipping kernel, prints the results
//! as JSON, so the hardware is checked against this crate's code, not a re-implementation.
//!
//! Input: `{"dictionary": [u32 keys] | null, "borders": [[f32 bits as u32]] | null,
//! "calls": [{"function": NAME, "param": u64, "input": HEX}]}` (null: the built-in state).
//! Output: `[{"status": CODE, "message": TEXT, "output": HEX}]`, one per call.
//! `accel_oracle builtin-state` prints the built-in `{"dictionary": [...], "borders": [[...]]}`.

use std::io::Read;
use std::sync::Arc;

use offrac_accel::builtin_with;
use offrac_accel::dlrm::state::{default_borders, default_dictionary_key, DEFAULT_DICTIONARY_KEYS};
use offrac_accel::dlrm::state::{Dictionary, FunctionState};
use offrac_proto::FunctionId;
use serde_json::{json, Value};

fn u32s(v: &Value) -> Result<Vec<u32>, String> {
    v.as_array()
        .ok_or("expected an array")?
        .iter()
        .map(|w| {
            w.as_u64()
                .and_then(|w| u32::try_from(w).ok())
                .ok_or_else(|| format!("{w} is not a u32"))
        })
        .collect()
}

fn state(req: &Value) -> Result<FunctionState, String> {
    let mut s = FunctionState::default();
    if let Some(keys) = req.get("dictionary").filter(|v| !v.is_null()) {
        s.dictionary = Arc::new(Dictionary::from_keys(u32s(keys)?));
    }
    if let Some(sets) = req.get("borders").filter(|v| !v.is_null()) {
        let sets = sets
            .as_array()
            .ok_or("borders: expected an array of sets")?;
        let sets: Result<Vec<Vec<f32>>, String> = sets
            .iter()
            .map(|set| Ok(u32s(set)?.into_iter().map(f32::from_bits).collect()))
            .collect();
        s.borders = Arc::new(sets?);
    }
    Ok(s)
}

fn call(s: &FunctionState, c: &Value) -> Result<Value, String> {
    let name = c["function"]
        .as_str()
        .ok_or("call without a function name")?;
    let f = FunctionId::from_name(name).ok_or_else(|| format!("unknown function {name}"))?;
    let param = c["param"].as_u64().ok_or("param: expected a u64")?;
    let input = hex::decode(c["input"].as_str().ok_or("input: expected hex")?)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    Ok(match builtin_with(f, s).run(param, &input, &mut out) {
        Ok(()) => json!({"status": 0, "message": "", "output": hex::encode(&out)}),
        Err(e) => json!({"status": e.status() as u8, "message": e.message(), "output": ""}),
    })
}

fn main() -> Result<(), String> {
    if std::env::args().nth(1).as_deref() == Some("builtin-state") {
        let keys: Vec<u32> = (0..DEFAULT_DICTIONARY_KEYS as u64)
            .map(default_dictionary_key)
            .collect();
        let borders: Vec<u32> = default_borders().iter().map(|b| b.to_bits()).collect();
        println!("{}", json!({"dictionary": keys, "borders": [borders]}));
        return Ok(());
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    let req: Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let s = state(&req)?;
    let calls = req["calls"].as_array().ok_or("calls: expected an array")?;
    let answers: Result<Vec<Value>, String> = calls.iter().map(|c| call(&s, c)).collect();
    println!("{}", Value::Array(answers?));
    Ok(())
}
