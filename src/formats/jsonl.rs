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
    /// The versions a measured run used (`{"transformers": "4.48.1", …}`), when the line says.
    #[serde(default)]
    software: Option<Value>,
    /// The config.json numbers, when `model` names a checkpoint the catalog does not hold (the
    /// schema of published runs: `tests/data/reference/published_gpu.jsonl`).
    #[serde(default)]
    model_config: Option<Value>,
}

/// The published-run schema's own names for settings: `num_gpus` with `strategy` (and FSDP's
/// `sharding`), and `lora_param_dtype`. A key the line also gives in lorafit's names wins.
fn published_names(settings: &mut Value) {
    let Some(obj) = settings.as_object_mut() else {
        return;
    };
    let gpus = obj.get("num_gpus").and_then(Value::as_u64).unwrap_or(1);
    if gpus > 1 && !obj.contains_key("parallel") && !obj.contains_key("gpus_per_node") {
        let sharding = obj
            .get("fsdp")
            .and_then(|f| f.get("sharding"))
            .and_then(Value::as_str)
            .map(str::to_lowercase);
        let strategy = sharding
            .or_else(|| {
                obj.get("strategy")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .unwrap_or_else(|| "ddp".into());
        obj.insert("gpus_per_node".into(), json!(gpus));
        obj.insert("strategy".into(), json!(strategy));
    }
    if let Some(d) = obj.get("lora_param_dtype").cloned() {
        obj.entry("adapter_dtype").or_insert(d);
    }
}

/// A run on transformers 4 stored a mixture-of-experts model's experts as per-expert
/// `nn.Linear` layers: a line that names its transformers version and does not choose an
/// `experts_layout` is planned with the layout of that version.
fn layout_from_software(settings: &mut Value, software: Option<&Value>) {
    let major = software
        .and_then(|s| s.get("transformers"))
        .and_then(Value::as_str)
        .and_then(|v| v.split('.').next())
        .and_then(|m| m.trim().parse::<u32>().ok());
    if let (Some(major), Some(obj)) = (major, settings.as_object_mut()) {
        if major < 5 && !obj.contains_key("experts_layout") {
            obj.insert("experts_layout".into(), json!("per_expert"));
        }
    }
}

/// Plans one input line; `Err` carries the line's id and a message.
pub fn estimate_line(line: &str) -> Result<(Value, Plan), (Value, String)> {
    let parsed: Line = serde_json::from_str(line)
        .map_err(|e| (id_of(line), format!("not a valid input line: {e}")))?;
    let id = parsed.id.clone();
    let arch = crate::formats::catalog::resolve_model(&parsed.model)
        .or_else(|e| match &parsed.model_config {
            Some(config) => crate::formats::catalog::resolve_model(config),
            None => Err(e),
        })
        .map_err(|e| (id.clone(), e))?;
    let mut given = parsed.settings.unwrap_or_else(|| json!({}));
    layout_from_software(&mut given, parsed.software.as_ref());
    published_names(&mut given);
    let settings = settings_from_json(&given).map_err(|e| (id.clone(), e.to_string()))?;
    let p = plan_simulated(&arch, &settings).map_err(|e| (id.clone(), e.to_string()))?;
    Ok((id, p))
}

fn id_of(line: &str) -> Value {
    serde_json::from_str::<Value>(line)
        .ok()
        .and_then(|v| v.get("id").cloned())
        .unwrap_or(Value::Null)
}

/// The planner for other pages (`plan()` of the release build's `lib/lorafit-js.js`): one request
/// object as an `estimate --jsonl` line takes it (`{"model": name or config numbers, "settings":
/// {…}}`), plus an optional `"gpu"` (catalog id) that adds `"verdict"` and `"gpu"`; answers the plan
/// as the CLI prints it. A string is read as the JSON text of such an object.
pub fn plan_request(v: &Value) -> Result<Value, String> {
    if let Value::String(text) = v {
        let parsed: Value =
            serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
        return plan_request(&parsed);
    }
    let obj = v
        .as_object()
        .ok_or(r#"expected {"model": "llama2-7b", "settings": {...}}"#)?;
    let arch =
        crate::formats::catalog::resolve_model(obj.get("model").ok_or("missing \"model\"")?)?;
    let settings =
        settings_from_json(obj.get("settings").unwrap_or(&json!({}))).map_err(|e| e.to_string())?;
    let p = plan_simulated(&arch, &settings).map_err(|e| e.to_string())?;
    let mut out = serde_json::to_value(&p).map_err(|e| e.to_string())?;
    if let (Some(g), Value::Object(m)) = (obj.get("gpu"), &mut out) {
        let g =
            crate::formats::catalog::find_gpu(g.as_str().ok_or("\"gpu\" must be a catalog id")?)?;
        let v = crate::planning::verdict(&p, g.capacity_bytes());
        m.insert("gpu".into(), json!(g.name));
        m.insert(
            "verdict".into(),
            serde_json::to_value(v).map_err(|e| e.to_string())?,
        );
    }
    Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_planned_like_a_jsonl_line() {
        let req = json!({"model": "llama2-7b", "settings": {"batch": 2, "seq": 2048, "grad_ckpt": true}, "gpu": "rtx4090"});
        let out = plan_request(&req).unwrap();
        let (ok, line) = output_line(&json!({"model": "llama2-7b", "settings": {"batch": 2, "seq": 2048, "grad_ckpt": true}}).to_string());
        assert!(ok);
        let line: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(out["peak_allocated_bytes"], line["peak_allocated_bytes"]);
        assert_eq!(out["verdict"]["status"], "fits");
        assert!(out["gpu"].as_str().unwrap().contains("4090"));
        // JSON text works too; bad input says why.
        assert_eq!(plan_request(&json!(req.to_string())).unwrap(), out);
        assert!(plan_request(&json!({"settings": {}}))
            .unwrap_err()
            .contains("model"));
        assert!(plan_request(&json!({"model": "llama2-7b", "settings": {"batch": 0}})).is_err());
        assert!(plan_request(&json!({"model": "llama2-7b", "gpu": "nope"}))
            .unwrap_err()
            .contains("unknown GPU"));
        assert!(plan_request(&json!(3)).is_err());
    }
}
