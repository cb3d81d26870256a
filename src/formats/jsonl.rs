//! `estimate --jsonl`: one JSON object per line with `model` (config numbers) and `settings`
//! (the schema of `tests/data/reference/cases.jsonl`, read through [`super::fields`]), answered with one JSON object per line.

use serde_json::{json, Map, Value};

use super::unused::{path, Parsed};
use crate::formats::catalog::{self, GpuEntry};
use crate::formats::fields::settings_from_json;
use crate::model::job::{plan_job, plan_job_within, Job};
use crate::model::{plan_simulated, Architecture, Plan, Settings};

/// The members of a line (or of a `plan()` request) this reader uses; any other is reported in
/// the answer's `ignored`.
const LINE_KEYS: &[&str] = &["id", "model", "settings", "software", "model_config"];

/// The published-run schema's own names for settings: `num_gpus` with `strategy` (and FSDP's
/// `sharding`), `bnb_quant_storage` and `lora_param_dtype`. A key the line also gives in
/// lorafit's names wins.
/// Answers the keys it used (they are not lorafit's settings, so the table does not know them).
fn published_names(settings: &mut Value) -> Vec<String> {
    let Some(obj) = settings.as_object_mut() else {
        return vec![];
    };
    let mut used = vec![];
    let gpus = obj.get("num_gpus").and_then(Value::as_u64).unwrap_or(1);
    if obj.contains_key("num_gpus") {
        used.push("num_gpus".to_string());
    }
    if gpus > 1 && !obj.contains_key("parallel") && !obj.contains_key("gpus_per_node") {
        let sharding = obj
            .get("fsdp")
            .and_then(|f| f.get("sharding"))
            .and_then(Value::as_str)
            .map(str::to_lowercase);
        if sharding.is_some() {
            used.push("fsdp.sharding".into());
        }
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
    if let Some(d) = obj.get("bnb_quant_storage").cloned() {
        if !obj.contains_key("bnb_4bit_quant_storage") {
            used.push("bnb_quant_storage".into());
            obj.insert("bnb_4bit_quant_storage".into(), d);
        }
    }
    if let Some(d) = obj.get("lora_param_dtype").cloned() {
        if !obj.contains_key("adapter_dtype") {
            used.push("lora_param_dtype".into());
            obj.insert("adapter_dtype".into(), d);
        }
    }
    used
}

/// A `major.minor` version from a line's `software` member `name`.
fn version_of(software: Option<&Value>, name: &str) -> Option<(u32, u32)> {
    let v = software?.get(name)?.as_str()?;
    let mut parts = v.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()
        .and_then(|m| m.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or(0);
    Some((major, minor))
}

/// What a line's software versions decide when the line does not choose it, and which of its
/// `software` members were read:
/// - `transformers` 4 stored a mixture-of-experts model's experts as per-expert `nn.Linear`
///   layers (`experts_layout`), and before 4.49 the causal-LM loss copied the shifted fp32
///   logits (`loss_shift`, [`crate::model::LossShift`]);
/// - `trl`: before 0.19 its `packing=True` made rows of the full length, not padding-free ones
///   ([`crate::model::Settings::packing`]); TRL's SFTTrainer up to 0.21 runs peft's `prepare_model_for_kbit_training` on a 4-bit
///   model unless its `Params4bit` sit on the CPU or the meta device, as FSDP and ZeRO-3 load
///   them ("sharded QLoRA", `trl/trainer/sft_trainer.py:182-201` in 0.13.0, the same in 0.21.0);
///   from 0.22 it prepares none (`prepare_kbit`). With `bf16` the older versions then cast
///   embed_tokens and lm_head back to bf16 (`peft_module_casting_to_bf16`, `trl/trainer/utils.py:872-879`
///   in 0.13.0), which the plan does not model: it keeps them in fp32 with the norms.
fn from_software(settings: &mut Value, software: Option<&Value>) -> Vec<&'static str> {
    let mut read = vec![];
    let Some(obj) = settings.as_object_mut() else {
        return read;
    };
    if let Some(version) = version_of(software, "transformers") {
        read.push("transformers");
        if version.0 < 5 && !obj.contains_key("experts_layout") {
            obj.insert("experts_layout".into(), json!("per_expert"));
        }
        if version < (4, 49) && !obj.contains_key("loss_shift") {
            obj.insert("loss_shift".into(), json!("logits"));
        }
    }
    let trl = version_of(software, "trl");
    // Before 0.19 TRL's `packing=True` cut the concatenated samples into rows of
    // `max_seq_length` tokens (`ConstantLengthDataset`, `trl/trainer/sft_trainer.py:474` in
    // 0.13.0), one attention over each whole row: the rows are planned as given. From 0.19
    // packing is padding-free (`self.padding_free = … args.packing and args.packing_strategy ==
    // "ffd"`, `sft_trainer.py:394` in 0.19.0; "bfd" from 0.20).
    if trl.is_some_and(|v| v < (0, 19)) && obj.get("packing") == Some(&json!(true)) {
        read.push("trl");
        obj.insert("packing".into(), json!(false));
    }
    let quant = obj.get("quant").is_some_and(|q| !q.is_null());
    // TRL's version decides how a 4-bit base is prepared.
    if let Some(version) = trl.filter(|_| quant) {
        if !read.contains(&"trl") {
            read.push("trl");
        }
        let sharded = obj
            .get("strategy")
            .and_then(Value::as_str)
            .and_then(crate::model::Strategy::parse)
            .is_some_and(|s| s.is_fsdp() || s == crate::model::Strategy::Zero3);
        if !obj.contains_key("prepare_kbit") {
            obj.insert("prepare_kbit".into(), json!(version < (0, 22) && !sharded));
        }
    }
    read
}

/// One request read: what to plan, and every member of it that was not used.
struct Request {
    id: Value,
    arch: Architecture,
    settings: Settings,
    ignored: Vec<String>,
}

/// Reads a line's object: the model (a catalog name or config numbers, else `model_config`), the
/// settings through the table, and what neither used. `extra` names members the caller reads
/// itself (`gpu` for `plan()`).
fn read_request(obj: &Map<String, Value>, extra: &[&str]) -> Result<Request, String> {
    let mut ignored: Vec<String> = obj
        .keys()
        .filter(|k| !LINE_KEYS.contains(&k.as_str()) && !extra.contains(&k.as_str()))
        .cloned()
        .collect();
    let model = obj.get("model").ok_or("missing \"model\"")?;
    let arch = match (catalog::resolve_model(model), obj.get("model_config")) {
        (Ok(a), config) => {
            if config.is_some() {
                ignored.push("model_config".into());
            }
            prefixed(a, "model", &mut ignored)
        }
        (Err(_), Some(config)) => prefixed(
            catalog::resolve_model(config)?,
            "model_config",
            &mut ignored,
        ),
        (Err(e), None) => return Err(e),
    };
    // `"settings": null` says none were given, like no member at all.
    let mut given = match obj.get("settings") {
        None | Some(Value::Null) => json!({}),
        Some(v) => v.clone(),
    };
    let software = obj.get("software");
    let used = published_names(&mut given);
    let read = from_software(&mut given, software);
    if let Some(Value::Object(sw)) = software {
        ignored.extend(
            sw.keys()
                .filter(|k| !read.contains(&k.as_str()))
                .map(|k| path("software", k)),
        );
    }
    let settings = settings_from_json(&given).map_err(|e| e.to_string())?;
    // What the table did not read, less what the published schema's rules read above: a key
    // they used whole, or the other members of an object they read a member of (FSDP's
    // `sharding`).
    for k in settings.ignored.iter().filter(|k| !used.contains(k)) {
        let prefix = format!("{k}.");
        let read: Vec<&str> = used
            .iter()
            .filter_map(|u| u.strip_prefix(&prefix))
            .collect();
        match given.get(k) {
            Some(Value::Object(members)) if !read.is_empty() => {
                let at = path("settings", k);
                ignored.extend(
                    members
                        .keys()
                        .filter(|m| !read.contains(&m.as_str()))
                        .map(|m| path(&at, m)),
                );
            }
            _ => ignored.push(path("settings", k)),
        }
    }
    Ok(Request {
        id: obj.get("id").cloned().unwrap_or(Value::Null),
        arch,
        settings: settings.value,
        ignored,
    })
}

fn prefixed(a: Parsed<Architecture>, at: &str, ignored: &mut Vec<String>) -> Architecture {
    ignored.extend(a.ignored.iter().map(|k| path(at, k)));
    a.value
}

/// One input line read: its id, the model, the settings, and the members it did not use.
pub type Line = (Value, Architecture, Settings, Vec<String>);

/// An input line's JSON object, or why it is not one.
fn line_object(line: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str(line) {
        Ok(Value::Object(obj)) => Ok(obj),
        Ok(_) => Err("not a valid input line: expected a JSON object".into()),
        Err(e) => Err(format!("not a valid input line: {e}")),
    }
}

/// What one input line asks to plan; `Err` carries the line's id and a message.
pub fn read_line(line: &str) -> Result<Line, (Value, String)> {
    let obj = line_object(line).map_err(|e| (Value::Null, e))?;
    let id = obj.get("id").cloned().unwrap_or(Value::Null);
    let r = read_request(&obj, &[]).map_err(|e| (id.clone(), e))?;
    Ok((r.id, r.arch, r.settings, r.ignored))
}

/// Plans one input line; `Err` carries the line's id and a message.
pub fn estimate_line(line: &str) -> Result<Estimate, (Value, String)> {
    let (id, arch, settings, ignored) = read_line(line)?;
    let p = plan_simulated(&arch, &settings).map_err(|e| (id.clone(), e.to_string()))?;
    let job = plan_job(&arch, &settings, &p).map_err(|e| (id.clone(), e.to_string()))?;
    Ok((id, p, job, ignored))
}

/// One line's answer: its id, the step's plan, the job's phases and the members it did not use.
pub type Estimate = (Value, Plan, Job, Vec<String>);

/// The planner for other pages (`plan()` of the release build's `lib/lorafit-js.js`) and each
/// `estimate --jsonl` line: one request object (`{"model": name or config numbers, "settings":
/// {…}}`), plus an optional `"gpu"` (a catalog id, name or alias) that adds `"gpu"`, `"verdict"`
/// and `"time"` (the step-time estimate, as `plan --json` gives it, with an optional
/// `"dataset_tokens"` per epoch, 10⁸ by default, and `"usd_per_gpu_hour"` to cost it at
/// instead of the catalog's rate); answers the plan as the CLI prints it, with
/// `"ignored"`: the members of the request it did not use. A string is read as the JSON text of
/// such an object.
pub fn plan_request(v: &Value) -> Result<Value, String> {
    if let Value::String(text) = v {
        let parsed: Value =
            serde_json::from_str(text).map_err(|e| format!("not a JSON object: {e}"))?;
        return plan_request(&parsed);
    }
    let obj = v
        .as_object()
        .ok_or(r#"expected {"model": "llama2-7b", "settings": {...}}"#)?;
    let r = read_request(obj, &["gpu", "dataset_tokens", "usd_per_gpu_hour"])?;
    // A request that fails says too what it did not use (a setting put beside "settings"
    // rather than in it is often why).
    answer(obj, &r).map_err(|e| {
        if r.ignored.is_empty() {
            e
        } else {
            format!("{e} (not used: {})", r.ignored.join(", "))
        }
    })
}

/// [`plan_request`]'s answer to a request already read.
fn answer(obj: &Map<String, Value>, r: &Request) -> Result<Value, String> {
    let rate = match obj.get("usd_per_gpu_hour") {
        None => None,
        Some(d) => Some(
            d.as_f64()
                .filter(|d| d.is_finite() && *d >= 0.0)
                .ok_or("\"usd_per_gpu_hour\" must be a number of dollars, 0 or more")?,
        ),
    };
    // The catalog card, at the line's rate when it gives one.
    let gpu: Option<GpuEntry> = match obj.get("gpu") {
        Some(g) => {
            let card = catalog::find_gpu(g.as_str().ok_or("\"gpu\" must be a catalog id")?)?;
            Some(GpuEntry {
                usd_per_gpu_hour: rate.or(card.usd_per_gpu_hour),
                ..card.clone()
            })
        }
        None => None,
    };
    let gpu = gpu.as_ref();
    let dataset_tokens = match obj.get("dataset_tokens") {
        None => crate::planning::time::DEFAULT_DATASET_TOKENS,
        Some(d) => d
            .as_f64()
            .filter(|d| d.is_finite() && *d >= 0.0)
            .ok_or("\"dataset_tokens\" must be a number of tokens, 0 or more")?,
    };
    if gpu.is_none() && obj.contains_key("dataset_tokens") {
        return Err("\"dataset_tokens\" times an epoch on a GPU: name the \"gpu\" too".into());
    }
    if gpu.is_none() && rate.is_some() {
        return Err("\"usd_per_gpu_hour\" costs an epoch on a GPU: name the \"gpu\" too".into());
    }
    let p = plan_simulated(&r.arch, &r.settings).map_err(|e| e.to_string())?;
    let job = match gpu {
        Some(g) => plan_job_within(&r.arch, &r.settings, &p, g.capacity_bytes()),
        None => plan_job(&r.arch, &r.settings, &p),
    }
    .map_err(|e| e.to_string())?;
    let mut out = serde_json::to_value(&p).map_err(|e| e.to_string())?;
    if let Value::Object(m) = &mut out {
        m.insert(
            "job".into(),
            serde_json::to_value(&job).map_err(|e| e.to_string())?,
        );
        if let Some(g) = gpu {
            let v = crate::planning::job_verdict(&job, g.capacity_bytes());
            let time =
                crate::planning::time::estimate(&r.arch, &r.settings, &p, g, None, dataset_tokens);
            m.insert("gpu".into(), json!(g.name));
            m.insert(
                "verdict".into(),
                serde_json::to_value(v).map_err(|e| e.to_string())?,
            );
            m.insert(
                "time".into(),
                serde_json::to_value(time).map_err(|e| e.to_string())?,
            );
        }
        if !r.id.is_null() {
            m.insert("id".into(), r.id.clone());
        }
        m.insert("ignored".into(), json!(r.ignored));
    }
    Ok(out)
}

/// The output object for one line: [`plan_request`]'s answer, or `{"id", "error"}`.
pub fn output_line(line: &str) -> (bool, String) {
    let v = match line_object(line) {
        Ok(obj) => Value::Object(obj),
        Err(e) => return (false, json!({"id": Value::Null, "error": e}).to_string()),
    };
    match plan_request(&v) {
        Ok(mut out) => {
            // A line answers with its id, null when it has none.
            if let Value::Object(m) = &mut out {
                m.entry("id").or_insert(Value::Null);
            }
            (true, out.to_string())
        }
        Err(e) => (
            false,
            json!({"id": v.get("id").cloned().unwrap_or(Value::Null), "error": e}).to_string(),
        ),
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
        // What the request held and the planner did not use is named.
        assert_eq!(out["ignored"], json!([]));
        let rs = plan_request(&json!({"model": "llama2-7b", "settings": {"use_qalora": true}, "gpu": "rtx4090", "colour": "red"})).unwrap();
        assert_eq!(rs["ignored"], json!(["colour", "settings.use_qalora"]));
        // An id comes back as given; null settings are no settings.
        let with_id =
            plan_request(&json!({"id": 7, "model": "llama2-7b", "settings": null})).unwrap();
        assert_eq!(with_id["id"], 7);
        let (_, plain) = output_line(r#"{"model": "llama2-7b"}"#);
        let plain: Value = serde_json::from_str(&plain).unwrap();
        assert_eq!(
            with_id["peak_allocated_bytes"],
            plain["peak_allocated_bytes"]
        );
        assert_eq!(with_id["ignored"], json!([]));
    }

    #[test]
    fn a_published_row_names_only_what_no_rule_read() {
        // The published-run schema: num_gpus and FSDP's sharding are read (as the layout), the
        // other FSDP members and the harness's own fields are not.
        let line = json!({"id": "r", "model": "mistral-7b-v0.1", "gpu": "A100-80GB",
            "software": {"transformers": "4.48.1", "torch": "2.4.1"},
            "settings": {"batch": 1, "seq": 512, "num_gpus": 2, "fsdp": {"sharding": "FULL_SHARD", "forward_prefetch": false},
                "lora_param_dtype": "bf16", "max_steps": 10}});
        let (_, p, _, ignored) = estimate_line(&line.to_string()).unwrap();
        assert_eq!(p.world_size, 2);
        assert_eq!(
            ignored,
            vec![
                "gpu",
                "software.torch",
                "settings.fsdp.forward_prefetch",
                "settings.max_steps"
            ]
        );
    }

    #[test]
    fn a_line_naming_a_gpu_answers_its_verdict_and_time() {
        // A catalog id, or a name the card goes by (published tables, nvidia-smi).
        for gpu in ["a100-80", "A100-80GB", "NVIDIA A100-SXM4-80GB"] {
            let line = json!({"id": "x", "model": "mistral-7b-v0.1", "gpu": gpu,
                "settings": {"batch": 4, "seq": 4096, "grad_ckpt": true, "attn_impl": "flash_attention_2"}});
            let (ok, out) = output_line(&line.to_string());
            assert!(ok, "{out}");
            let out: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(out["gpu"], "NVIDIA A100 80GB SXM4");
            assert_eq!(out["verdict"]["status"], "fits");
            let t = &out["time"];
            let (sps, tps) = (
                t["seconds_per_step"].as_f64().unwrap(),
                t["tokens_per_second"].as_f64().unwrap(),
            );
            assert!((sps * tps - 4.0 * 4096.0).abs() < 1e-6 * tps, "{sps} {tps}");
            assert_eq!(out["ignored"], json!([]), "the gpu is used");
        }
        // Without a gpu: no verdict, no time; a dataset size needs a gpu.
        let (_, plain) = output_line(r#"{"model": "llama2-7b"}"#);
        let plain: Value = serde_json::from_str(&plain).unwrap();
        assert!(plain.get("time").is_none() && plain.get("verdict").is_none());
        let (ok, e) = output_line(r#"{"id": 3, "model": "llama2-7b", "dataset_tokens": 1e6}"#);
        assert!(
            !ok && e.contains("name the") && e.contains("\"id\":3"),
            "{e}"
        );
        let (ok, e) = output_line(r#"{"model": "llama2-7b", "gpu": "h200", "dataset_tokens": -1}"#);
        assert!(!ok && e.contains("dataset_tokens"), "{e}");
        let (ok, e) = output_line(r#"{"model": "llama2-7b", "gpu": "nope"}"#);
        assert!(!ok && e.contains("unknown GPU"), "{e}");
    }

    #[test]
    fn a_line_that_fails_names_what_it_did_not_use() {
        // The dropout put beside "settings" is not used, so the default's is refused: the error
        // says so.
        let (ok, e) = output_line(r#"{"model": "qwen3-30b-a3b", "lora_dropout": 0, "seq": 512}"#);
        assert!(
            !ok && e.contains("lora_dropout") && e.contains("(not used: lora_dropout, seq)"),
            "{e}"
        );
        // Nothing left over: the error alone.
        let (ok, e) = output_line(r#"{"model": "qwen3-30b-a3b", "settings": {"seq": 512}}"#);
        assert!(!ok && !e.contains("not used"), "{e}");
    }

    #[test]
    fn a_line_can_cost_its_epoch_at_its_own_rate() {
        let at = |rate: Option<f64>| {
            let mut line = json!({"model": "llama2-7b", "gpu": "h200", "dataset_tokens": 1e7});
            if let Some(r) = rate {
                line["usd_per_gpu_hour"] = json!(r);
            }
            let (ok, out) = output_line(&line.to_string());
            assert!(ok, "{out}");
            let out: Value = serde_json::from_str(&out).unwrap();
            assert_eq!(out["ignored"], json!([]));
            let t = out["time"].clone();
            (
                t["usd_per_gpu_hour"].as_f64().unwrap(),
                t["usd_per_epoch"].as_f64().unwrap(),
                t["seconds_per_epoch"].as_f64().unwrap(),
            )
        };
        let catalog = at(None);
        let own = at(Some(1.25));
        assert_ne!(catalog.0, 1.25);
        assert_eq!(own.0, 1.25);
        assert_eq!(own.2, catalog.2, "the rate changes the cost, not the time");
        assert!((own.1 - own.2 / 3600.0 * 1.25).abs() < 1e-9, "{own:?}");
        for bad in [
            r#"{"model": "llama2-7b", "gpu": "h200", "usd_per_gpu_hour": -1}"#,
            r#"{"model": "llama2-7b", "gpu": "h200", "usd_per_gpu_hour": "cheap"}"#,
            r#"{"model": "llama2-7b", "usd_per_gpu_hour": 2}"#,
        ] {
            let (ok, e) = output_line(bad);
            assert!(!ok && e.contains("usd_per_gpu_hour"), "{e}");
        }
    }
}
