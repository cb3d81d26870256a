//! `estimate --jsonl`: one JSON object per line with `model` (config numbers) and `settings`
//! (the schema of `tests/data/reference/cases.jsonl`, read through [`super::fields`]), answered with one JSON object per line.

use serde::Deserialize;
use serde_json::{json, Value};

use crate::formats::fields::settings_from_json;
use crate::model::{plan_simulated, Plan};

#[derive(Deserialize)]
struct Line {
    #[serde(default)]
    id: Value,
    model: Value,
    #[serde(default)]
    settings: Option<Value>,
}

/// Plans one input line; `Err` carries the line's id and a message.
pub fn estimate_line(line: &str) -> Result<(Value, Plan), (Value, String)> {
    let parsed: Line = serde_json::from_str(line)
        .map_err(|e| (id_of(line), format!("not a valid input line: {e}")))?;
    let id = parsed.id.clone();
    let arch =
        crate::formats::catalog::resolve_model(&parsed.model).map_err(|e| (id.clone(), e))?;
    let settings = settings_from_json(&parsed.settings.unwrap_or_else(|| json!({})))
        .map_err(|e| (id.clone(), e.to_string()))?;
    let p = plan_simulated(&arch, &settings).map_err(|e| (id.clone(), e.to_string()))?;
    Ok((id, p))
}

fn id_of(line: &str) -> Value {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(Value::Null)
}

/// The output object for one line.
pub fn output_line(line: &str) -> (bool, String) {
    match estimate_line(line) {
        Ok((id, p)) => {
            let mut v = serde_json::to_value(&p).unwrap_or(Value::Null);
            if let Value::Object(m) = &mut v {
                m.insert("id".into(), id);
            }
            (true, v.to_string())
        }
        Err((id, e)) => (false, json!({"id": id, "error": e}).to_string()),
    }
}
