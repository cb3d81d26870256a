//! An ms-swift command line (`swift sft …`, `swift rlhf --rlhf_type dpo …`) as its shell scripts
//! write it: environment assignments before it (`CUDA_VISIBLE_DEVICES`, `NPROC_PER_NODE`,
//! `MAX_PIXELS`), `\` line continuations, quoted values, flags with one value or several. Its
//! defaults (`swift/llm/argument/tuner_args.py`, `train_args.py`): `lora_rank` 8, `lora_alpha`
//! 32, `lora_dropout` 0.05, `target_modules` all-linear, gradient checkpointing on. Both the
//! current `--tuner_type` and v3's `--train_type` are read. Several GPUs: `NPROC_PER_NODE`,
//! `--deepspeed`, `--fsdp` (the `fsdp2` preset, a JSON, or its path), or
//! `accelerate launch --config_file C swift/cli/sft.py …` with accelerate's config read after it.

use super::hf::liger;
use super::{
    deepspeed_by_name, int_text, quant_bits, quant_method, read_with, targets, Default, Reader,
    Reading, Rule, Source, Table,
};
use serde_json::{Map, Value};

const DEFAULTS: &[Default] = &[
    ("batch", "1", "ms-swift's per_device_train_batch_size"),
    (
        "optimizer",
        "adamw_torch_fused",
        "Trainer's optim with torch ≥ 2.8 (transformers/training_args.py)",
    ),
    ("lora_r", "8", "ms-swift's lora_rank"),
    ("lora_alpha", "32", "ms-swift's lora_alpha"),
    ("lora_dropout", "0.05", "ms-swift's lora_dropout"),
    ("target_modules", "all-linear", "ms-swift's target_modules"),
    ("grad_ckpt", "true", "ms-swift's gradient_checkpointing"),
    (
        "prepare_kbit",
        "false",
        "ms-swift does not run prepare_model_for_kbit_training: only trainable fp16 parameters go to fp32 (swift/pipelines/train/tuner.py:402-407 in 4.6.0)",
    ),
];

const TABLE: Table = &[
    ("model", Rule::Model),
    (
        "NPROC_PER_NODE",
        Rule::Read(|rd, v| {
            let n = int_text(rd.key(), v)?;
            if n > 1 && rd.r.settings.parallel.strategy == crate::model::Strategy::Single {
                rd.set("strategy", "ddp")?;
            }
            rd.set("gpus_per_node", &n.to_string())
        }),
    ),
    ("NNODES", Rule::To("nodes")),
    ("CUDA_VISIBLE_DEVICES", Rule::Read(visible)),
    ("MAX_PIXELS", Rule::To("image_max_pixels")),
    ("rlhf_type", Rule::Read(rlhf)),
    ("tuner_type", Rule::Read(tuner)),
    ("train_type", Rule::Read(tuner)),
    ("torch_dtype", Rule::Read(dtype)),
    ("max_length", Rule::To("seq")),
    ("lora_rank", Rule::To("lora_r")),
    ("lora_alpha", Rule::To("lora_alpha")),
    ("lora_dropout", Rule::To("lora_dropout")),
    ("target_modules", Rule::Read(targets)),
    ("modules_to_save", Rule::To("modules_to_save")),
    ("use_dora", Rule::To("use_dora")),
    ("use_rslora", Rule::To("use_rslora")),
    ("init_weights", Rule::To("init_lora_weights")),
    (
        "quant_method",
        Rule::Read(|rd, v| quant_method(rd, v, &["bnb"])),
    ),
    (
        "quant_bits",
        Rule::Read(|rd, v| {
            let bits = int_text(rd.key(), v)?;
            // Without a method ms-swift quantizes nothing (get_quantization_config returns
            // None: swift/arguments/base_args/quant_args.py:46-47 in 4.6.0).
            if rd.other("quant_method").is_none() {
                rd.not_modeled(format!(
                    "{bits} bits without quant_method: ms-swift does not quantize, so neither does the plan (add --quant_method bnb for a {bits}-bit base)"
                ));
                return Ok(());
            }
            quant_bits(rd, bits, "bnb_4bit_quant_type")
        }),
    ),
    ("bnb_4bit_quant_type", Rule::NoEffect),
    ("bnb_4bit_use_double_quant", Rule::To("double_quant")),
    ("bnb_4bit_compute_dtype", Rule::NoEffect),
    ("bnb_4bit_quant_storage", Rule::To("bnb_4bit_quant_storage")),
    (
        "attn_impl",
        Rule::Read(|rd, v| match v.as_str() {
            Some("flash_attn") => rd.set("attn_impl", "flash_attention_2"),
            Some(other) => super::attention(rd, other),
            None => Err(format!("{}: expected an attention name", rd.key())),
        }),
    ),
    (
        "deepspeed",
        Rule::Read(|rd, v| match v.as_str() {
            Some(p) => deepspeed_by_name(rd, p),
            None => Err(format!(
                "{}: expected zero0 … zero3[_offload] or a DeepSpeed JSON",
                rd.key()
            )),
        }),
    ),
    // Before `fsdp`, whose FSDP checkpointing turns it on again.
    ("gradient_checkpointing", Rule::To("grad_ckpt")),
    ("fsdp", Rule::Read(fsdp)),
    (
        "_accelerate_config",
        Rule::Read(|rd, v| {
            rd.r.launch_path = v.as_str().map(str::to_string);
            rd.r.notes.push(format!(
                "launched by accelerate with {v}: its GPUs and strategy are read when the config is given after the command"
            ));
            Ok(())
        }),
    ),
    ("use_liger_kernel", Rule::Read(liger)),
    // ms-swift flattens a packed or padding-free batch into one row with position ids
    // restarting at each sample (`Template._data_collator`: `batch[:] =
    // [self.packing_row(batch)]`, `swift/template/base.py:1869-1886` at 3d61b93), as
    // transformers' DataCollatorWithFlattening does.
    ("packing", Rule::To("packing")),
    ("padding_free", Rule::To("packing")),
    ("beta", Rule::To("beta")),
    ("loss_type", Rule::Read(loss_type)),
    // ms-swift's vLLM sleep (0: none; 1: the weights offloaded, the KV cache freed; 2: both
    // freed): TRL's sleep mode in either case.
    (
        "sleep_level",
        Rule::Read(|rd, v| {
            let level = v
                .as_u64()
                .or_else(|| v.as_str().and_then(|t| t.parse().ok()))
                .ok_or_else(|| format!("{}: expected 0, 1 or 2", rd.key()))?;
            rd.set(
                "vllm_enable_sleep_mode",
                if level > 0 { "true" } else { "false" },
            )
        }),
    ),
    ("reward_funcs", Rule::NoEffect),
    ("reward_weights", Rule::NoEffect),
    ("external_plugins", Rule::NoEffect),
    ("temperature", Rule::NoEffect),
    ("log_completions", Rule::NoEffect),
    ("PYTORCH_CUDA_ALLOC_CONF", Rule::To("alloc_conf")),
    ("PYTORCH_ALLOC_CONF", Rule::To("alloc_conf")),
    ("rpo_alpha", Rule::NoEffect),
    ("freeze_vit", Rule::To("freeze_vision_tower")),
    ("freeze_aligner", Rule::To("freeze_multi_modal_projector")),
    ("max_pixels", Rule::To("image_max_pixels")),
    ("dataset", Rule::NoEffect),
    ("system", Rule::NoEffect),
    ("dataset_num_proc", Rule::NoEffect),
    ("model_author", Rule::NoEffect),
    ("model_name", Rule::NoEffect),
    ("load_from_cache_file", Rule::NoEffect),
    ("split_dataset_ratio", Rule::NoEffect),
];

/// Whether `text` is a `swift` command line, or `accelerate launch … swift/cli/sft.py …`, or
/// Megatron-SWIFT's `megatron sft …` (refused by the reader).
pub(super) fn is_command(text: &str) -> bool {
    let w = words(text);
    w.iter()
        .any(|w| w == "swift" || script_command(w).is_some())
        || w.windows(2)
            .any(|p| p[0] == "megatron" && matches!(p[1].as_str(), "sft" | "pt" | "rlhf"))
}

/// ms-swift's `loss_type`: a preference loss under `swift rlhf` (several joined by commas: the
/// first is planned), an SFT loss otherwise (loss scaling has no memory effect; the embedding and
/// reranker losses train another kind of model).
fn loss_type(rd: &mut Reader, v: &Value) -> Result<(), String> {
    // One loss, several joined by commas, or several as separate words.
    let text = match v {
        Value::Array(items) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(","),
        other => other.as_str().unwrap_or_default().to_string(),
    };
    if rd.other("rlhf_type").and_then(Value::as_str) == Some("grpo") {
        // GRPO's loss aggregation, under TRL's names (ms-swift's GRPOArguments are TRL's).
        return rd.set("grpo_loss", &text);
    }
    if rd.other("rlhf_type").is_some() {
        let mut losses = text.split(',').map(str::trim);
        let first = losses.next().unwrap_or_default();
        rd.set("pref_loss", first)?;
        if losses.next().is_some() {
            rd.not_modeled(format!(
                "several preference losses ({text}): planned with {first}'s"
            ));
        }
        return Ok(());
    }
    match text.as_str() {
        "loss_scale" | "" => {
            rd.r.ignored.push(rd.key().to_string());
            Ok(())
        }
        other => {
            rd.not_modeled(format!("the {other} loss of an embedding or reranker model: planned as a causal LM's cross-entropy over the vocabulary"));
            Ok(())
        }
    }
}

/// The subcommand a script of ms-swift's CLI runs (`swift/cli/sft.py` → `sft`).
fn script_command(word: &str) -> Option<&str> {
    let rest = word.rsplit_once("swift/cli/")?.1;
    rest.strip_suffix(".py")
}

/// ms-swift's `fsdp2` preset (swift/config/fsdp2.json in ms-swift 4.6, without its comments).
const FSDP2_PRESET: &str = r#"{"fsdp": "full_shard auto_wrap", "fsdp_config": {"fsdp_version": 2, "reshard_after_forward": true, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP", "cpu_ram_efficient_loading": true, "state_dict_type": "SHARDED_STATE_DICT", "activation_checkpointing": true}}"#;

/// `--fsdp`: the `fsdp2` preset, a JSON of Trainer's `fsdp` options and `fsdp_config`, or that
/// JSON's path (read by the caller when it can: `launch_path`), as ms-swift's `_init_fsdp`
/// takes it (swift/arguments/sft_args.py:284-329 in 4.6: `json_parse_to_dict`, FSDP version 2
/// unless `fsdp_config` says otherwise).
fn fsdp(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let Some(text) = v.as_str() else {
        return Err(format!("{}: expected fsdp2, a JSON or its path", rd.key()));
    };
    let json = if text == "fsdp2" {
        FSDP2_PRESET
    } else if text.trim_start().starts_with('{') {
        text
    } else {
        // A path: FULL_SHARD, ms-swift's default options, until the file is read.
        rd.set("strategy", "fsdp")?;
        rd.r.launch_path = Some(text.to_string());
        return Ok(());
    };
    let j: Value =
        serde_json::from_str(json).map_err(|e| format!("{}: not valid JSON: {e}", rd.key()))?;
    let versioned = j
        .get("fsdp_config")
        .is_some_and(|c| c.get("fsdp_version").is_some() || c.get("version").is_some());
    if j.get("fsdp").is_none() {
        rd.set("strategy", "fsdp")?;
    }
    rd.section(&j, &[super::accelerate::TABLE])?;
    if !versioned {
        // ms-swift's default fsdp_version is 2.
        super::axolotl::fsdp_version(rd, &Value::from(2))?;
    }
    Ok(())
}

/// The shell words of a script (comments dropped, `\` continuations joined, quotes removed).
fn words(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut started = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                started = true;
            }
            (None, '\\') => match chars.next() {
                Some('\n') | None => {}
                Some(n) => {
                    cur.push(n);
                    started = true;
                }
            },
            (None, '$') if chars.peek() == Some(&'(') => {
                // A command substitution stays one word: `$(expr 16 / $n)`.
                let mut depth = 0;
                cur.push(c);
                for n in chars.by_ref() {
                    cur.push(n);
                    match n {
                        '(' => depth += 1,
                        ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                started = true;
            }
            (None, '#') if !started => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        break;
                    }
                }
            }
            (None, c) if c.is_whitespace() => {
                if started {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            (None, c) => {
                cur.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(cur);
    }
    out
}

/// A word's value: true / false, a number, or text.
fn typed(w: &str) -> Value {
    match w {
        "true" | "True" => Value::Bool(true),
        "false" | "False" => Value::Bool(false),
        _ => w
            .parse::<i64>()
            .map(Value::from)
            .or_else(|_| w.parse::<f64>().map(Value::from))
            .unwrap_or_else(|_| Value::String(w.to_string())),
    }
}

/// The command's environment and flags as an object (a flag with several values as a list),
/// with the subcommand under `_command`.
fn object(text: &str) -> Result<Map<String, Value>, String> {
    let mut w = words(text);
    if w.iter().any(|x| x == "megatron") && !w.iter().any(|x| x == "swift") {
        return Err("Megatron-SWIFT (`megatron sft` / `megatron rlhf`): Megatron-Core's tensor, pipeline and expert parallel training is not planned; ms-swift's `swift sft` is".into());
    }
    // `accelerate launch --config_file C swift/cli/sft.py …` runs what `swift sft …` runs.
    let mut launch = None;
    if let Some(at) = w.iter().position(|x| script_command(x).is_some()) {
        let sub = script_command(&w[at]).unwrap_or_default().to_string();
        launch = w[..at]
            .iter()
            .position(|x| x == "--config_file")
            .and_then(|i| w.get(i + 1).cloned());
        w[at] = sub;
        w.insert(at, "swift".into());
        // The launcher's own words are not ms-swift's flags.
        if let Some(acc) = w[..at].iter().position(|x| x == "accelerate") {
            w.drain(acc..at);
        }
    }
    let at = w
        .iter()
        .position(|x| x == "swift")
        .ok_or("no `swift` command")?;
    // Shell variables set before the command (`nproc_per_node=2`), then used in it.
    let mut vars: Vec<(String, String)> = vec![];
    for (i, word) in w.iter_mut().enumerate() {
        *word = expand(word, &vars)?;
        if i < at {
            if let Some((k, v)) = word.split_once('=') {
                vars.push((k.to_string(), v.to_string()));
            }
        }
    }
    let mut o = Map::new();
    if let Some(c) = launch {
        o.insert("_accelerate_config".into(), Value::String(c));
    }
    for (k, v) in vars
        .iter()
        .filter(|(k, _)| k.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
    {
        o.insert(k.clone(), typed(v));
    }
    let sub = w.get(at + 1).cloned().unwrap_or_default();
    if !matches!(sub.as_str(), "sft" | "pt" | "rlhf") {
        return Err(format!(
            "`swift {sub}` is not a training command (sft, pt and rlhf are)"
        ));
    }
    let mut i = at + 2;
    while i < w.len() {
        let Some(key) = w[i].strip_prefix("--") else {
            return Err(format!("{:?}: expected a --flag", w[i]));
        };
        let (key, inline) = match key.split_once('=') {
            Some((k, v)) => (k.to_string(), Some(v.to_string())),
            None => (key.to_string(), None),
        };
        i += 1;
        let mut vals: Vec<String> = inline.into_iter().collect();
        while i < w.len() && !w[i].starts_with("--") {
            vals.push(w[i].clone());
            i += 1;
        }
        let v = match vals.len() {
            0 => Value::Bool(true),
            1 => typed(&vals[0]),
            _ => Value::Array(vals.into_iter().map(Value::String).collect()),
        };
        o.insert(key, v);
    }
    Ok(o)
}

/// `$name`, `${name}` and `$(expr A op B)` of a word, from the variables set before it.
fn expand(word: &str, vars: &[(String, String)]) -> Result<String, String> {
    let lookup = |name: &str| {
        vars.iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .ok_or_else(|| format!("${name} is not set before the command"))
    };
    if let Some(inner) = word.strip_prefix("$(").and_then(|x| x.strip_suffix(')')) {
        let parts: Vec<String> = inner
            .split_whitespace()
            .map(|p| expand(p, vars))
            .collect::<Result<_, _>>()?;
        let num = |p: &str| {
            p.parse::<i64>()
                .map_err(|_| format!("$({inner}): {p:?} is not a number"))
        };
        // `expr A op B [op C …]`, left to right as expr does for one precedence level.
        let words: Vec<&str> = parts.iter().map(String::as_str).collect();
        return match words[..] {
            ["expr", first, ref rest @ ..] if !rest.is_empty() && rest.len() % 2 == 0 => {
                let mut acc = num(first)?;
                for pair in rest.chunks(2) {
                    let b = num(pair[1])?;
                    acc = match pair[0] {
                        "+" => acc + b,
                        "-" => acc - b,
                        "*" | "\\*" => acc * b,
                        "/" if b != 0 => acc / b,
                        _ => return Err(format!("$({inner}) is not read")),
                    };
                }
                Ok(acc.to_string())
            }
            _ => Err(format!("$({inner}): only `expr A op B …` is read")),
        };
    }
    match word.find('$') {
        None => Ok(word.to_string()),
        Some(at) => {
            let rest = &word[at + 1..];
            let (name, tail) = if let Some(r) = rest.strip_prefix('{') {
                let end = r.find('}').ok_or_else(|| format!("{word}: unclosed ${{"))?;
                (&r[..end], &r[end + 1..])
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            };
            Ok(format!(
                "{}{}{}",
                &word[..at],
                lookup(name)?,
                expand(tail, vars)?
            ))
        }
    }
}

fn visible(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let n = match v {
        Value::String(s) => s.split(',').filter(|x| !x.trim().is_empty()).count(),
        Value::Number(_) => 1,
        _ => 0,
    };
    // Under accelerate launch its config sets the processes, one GPU each.
    if n > 1 && rd.other("NPROC_PER_NODE").is_none() && rd.other("_accelerate_config").is_none() {
        rd.not_modeled("several visible GPUs without NPROC_PER_NODE: ms-swift splits the model's layers over them (device_map); planned on one GPU");
    } else {
        rd.r.ignored.push(rd.key().to_string());
    }
    Ok(())
}

fn rlhf(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some(s @ ("dpo" | "orpo" | "simpo" | "kto" | "cpo" | "grpo")) => rd.set("stage", s),
        _ => Err(format!(
            "{}: {v} is not read from ms-swift (dpo, orpo, simpo, cpo, kto and grpo are; PPO, GKD and reward models are not planned)",
            rd.key()
        )),
    }
}

fn tuner(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some("lora") => rd.set("finetuning_type", "lora"),
        Some("full") => rd.set("finetuning_type", "full"),
        _ => Err(format!(
            "{}: {v} is not planned (lora and full are)",
            rd.key()
        )),
    }
}

/// `torch_dtype`: the weights' dtype, and mixed precision in it (ms-swift sets bf16 / fp16
/// training from it).
fn dtype(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let (d, auto) = match v.as_str() {
        Some("bfloat16" | "bf16") => ("bf16", "bf16"),
        Some("float16" | "fp16") => ("fp16", "fp16"),
        Some("float32" | "fp32") => ("fp32", "none"),
        _ => {
            return Err(format!(
                "{}: expected bfloat16, float16 or float32, got {v}",
                rd.key()
            ))
        }
    };
    rd.set("dtype", d)?;
    rd.set("autocast", auto)
}

pub(super) fn read(text: &str) -> Result<Reading, String> {
    let o = object(text)?;
    let rd = read_with(
        Source::Swift,
        &o,
        DEFAULTS,
        &[TABLE, super::hf::GRPO, super::hf::TRAINER],
        |rd| super::assume_gpus(rd, "several GPUs (NPROC_PER_NODE not given)"),
    )?;
    Ok(rd)
}
