//! `offrac functions`: the function registry as a table or as JSON. The JSON
//! is committed as `python/offrac/functions.json`, which the Python client
//! loads; a test keeps the two identical.

use crate::CliError;
use offrac_proto::{Granularity, ParamKind, SlotState, FUNCTIONS};
use serde_json::{json, Value};

#[derive(clap::Args)]
pub struct Args {
    /// Print JSON (the form the Python client ships) instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: Args) -> Result<(), CliError> {
    if a.json {
        print!("{}", registry_json());
        return Ok(());
    }
    let rows = FUNCTIONS.iter().map(|s| {
        let params: Vec<String> = s
            .params
            .iter()
            .map(|p| format!("{}{}", p.name, if p.required { "" } else { "?" }))
            .collect();
        vec![
            (s.id as u8).to_string(),
            s.name.to_string(),
            s.input.describe(),
            s.output.describe(),
            params.join(" "),
        ]
    });
    let header = ["id", "name", "input", "output", "params"];
    println!("{}", offrac_bench::text_table(&header, header.len(), rows));
    println!("(? = optional; `offrac functions --json` has each field's bits and meaning)");
    Ok(())
}

/// The registry as pretty JSON with a trailing newline (the committed file's
/// exact bytes).
pub fn registry_json() -> String {
    let functions: Vec<Value> = FUNCTIONS
        .iter()
        .map(|s| {
            json!({
                "id": s.id as u8,
                "name": s.name,
                "summary": s.summary,
                "input": s.input.describe(),
                "output": s.output.describe(),
                "params": s.params.iter().map(|p| json!({
                    "name": p.name,
                    "shift": p.shift,
                    "bits": p.bits,
                    "kind": match p.kind {
                        ParamKind::Unsigned => "unsigned",
                        ParamKind::Signed => "signed",
                        ParamKind::Float => "float32",
                    },
                    "required": p.required,
                    "doc": p.doc,
                })).collect::<Vec<_>>(),
                "state": match s.state {
                    SlotState::None => Value::Null,
                    SlotState::Dictionary => "dictionary".into(),
                    SlotState::Borders => "borders".into(),
                },
                "granularity": match s.granularity {
                    Granularity::PerRow => "per-row",
                    Granularity::PerTensor => "per-tensor",
                    Granularity::Other => "other",
                },
            })
        })
        .collect();
    let mut text = serde_json::to_string_pretty(&json!({
        "generated_by": "offrac functions --json",
        "functions": functions,
    }))
    .unwrap_or_default();
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    /// The Python client's copy is the registry's current JSON. To refresh
    /// it: `offrac functions --json > python/offrac/functions.json`.
    #[test]
    fn python_copy_is_current() {
        let committed = include_str!("../../../python/offrac/functions.json");
        assert!(
            committed == super::registry_json(),
            "python/offrac/functions.json is stale: run `offrac functions --json > python/offrac/functions.json`"
        );
    }
}
