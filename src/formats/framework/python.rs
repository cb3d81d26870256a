//! A Python training script: peft + transformers' `Trainer`, or TRL's trainers (lorafit's own
//! `python` and `trl` exports, and scripts written by hand). The script is not run: its calls
//! are read ([`crate::formats::pyscript`]) — `from_pretrained` of the model, `BitsAndBytesConfig`,
//! `LoraConfig`, `TrainingArguments` or TRL's `SFTConfig` / `DPOConfig` / `KTOConfig` /
//! `ORPOConfig` / `CPOConfig`, `prepare_model_for_kbit_training`, Liger's
//! `apply_liger_kernel_to_*` — and each call's keywords are read as keys named `Call.keyword`,
//! through the TrainingArguments / LoraConfig tables ([`super::hf`]). A keyword whose value is
//! not a literal (an expression, a name assigned more than once) is an error when the key
//! changes memory; the rest of the script (data loading, the training loop) is not read, which
//! the reading says.
//!
//! TRL's configs differ from TrainingArguments in their defaults (TRL 1.16
//! `trainer/base_config.py:62-75`: `gradient_checkpointing=True`, `bf16=True` unless `fp16`;
//! `max_length=1024` in `sft_config.py:202` and `dpo_config.py:195`).

use super::{assume, flag, hf, quant_bits, read_with, Reader, Reading, Rule, Source, Table};
use crate::formats::pyscript::{self, Call, PyValue};
use serde_json::{Map, Value};

/// TRL's trainers that lorafit does not plan, with what they are.
const UNPLANNED: &[(&str, &str)] = &[
    ("RLOOConfig", "TRL's RLOO (online RL with generation)"),
    (
        "OnlineDPOConfig",
        "TRL's online DPO (generation during training)",
    ),
    ("PPOConfig", "TRL's PPO"),
    ("RewardConfig", "TRL's reward-model training"),
    (
        "GKDConfig",
        "TRL's GKD (a teacher model beside the student)",
    ),
    (
        "DistillationConfig",
        "TRL's distillation (a teacher model beside the student)",
    ),
];

/// The config classes that carry TrainingArguments' keys, and the stage each trains.
const TRAINING_CLASSES: &[(&str, Option<&str>)] = &[
    ("TrainingArguments", None),
    ("Seq2SeqTrainingArguments", None),
    ("SFTConfig", Some("sft")),
    ("DPOConfig", Some("dpo")),
    ("KTOConfig", Some("kto")),
    ("ORPOConfig", Some("orpo")),
    ("CPOConfig", Some("simpo")),
    ("GRPOConfig", Some("grpo")),
];

/// The script's top-level keys: the calls read, in the order they are applied (the model
/// before its quantization, the config after the variables it may override).
const TABLE: Table = &[
    ("max_length", Rule::To("seq")),
    ("max_seq_length", Rule::To("seq")),
    ("MAX_LENGTH", Rule::To("seq")),
    ("MAX_SEQ_LENGTH", Rule::To("seq")),
    (
        "BitsAndBytesConfig",
        Rule::Read(|rd, v| rd.section(v, &[BNB])),
    ),
    (
        "from_pretrained",
        Rule::Read(|rd, v| rd.section(v, &[FROM_PRETRAINED])),
    ),
    (
        "LoraConfig",
        Rule::Read(|rd, v| {
            rd.set("finetuning_type", "lora")?;
            rd.section(v, &[hf::TABLE])
        }),
    ),
    // The training config classes, each read with the stage TRAINING_CLASSES gives it.
    ("TrainingArguments", Rule::Read(training)),
    ("Seq2SeqTrainingArguments", Rule::Read(training)),
    ("SFTConfig", Rule::Read(training)),
    ("DPOConfig", Rule::Read(training)),
    ("KTOConfig", Rule::Read(training)),
    ("ORPOConfig", Rule::Read(training)),
    ("CPOConfig", Rule::Read(training)),
    ("GRPOConfig", Rule::Read(training)),
    ("prepare_model_for_kbit_training", Rule::Read(prepare)),
    ("apply_liger_kernel_to_*", Rule::Read(liger)),
];

/// `from_pretrained`'s keywords (the first positional argument is the model).
const FROM_PRETRAINED: Table = &[
    ("pretrained_model_name_or_path", Rule::Model),
    ("torch_dtype", Rule::Read(load_dtype)),
    ("dtype", Rule::Read(load_dtype)),
    (
        "attn_implementation",
        Rule::Read(|rd, v| super::attention(rd, v.as_str().unwrap_or_default())),
    ),
    (
        "quantization_config",
        Rule::Read(|rd, _| {
            rd.confirms("quant");
            Ok(())
        }),
    ),
    ("device_map", Rule::NoEffect),
    ("trust_remote_code", Rule::NoEffect),
    ("low_cpu_mem_usage", Rule::NoEffect),
    ("revision", Rule::NoEffect),
    ("cache_dir", Rule::NoEffect),
    ("token", Rule::NoEffect),
    ("use_cache", Rule::NoEffect),
];

/// `BitsAndBytesConfig`'s keywords.
const BNB: Table = &[
    ("load_in_4bit", Rule::Read(|rd, v| load_in(rd, v, 4))),
    ("load_in_8bit", Rule::Read(|rd, v| load_in(rd, v, 8))),
    (
        "bnb_4bit_quant_type",
        Rule::Read(|rd, _| {
            rd.confirms("quant");
            Ok(())
        }),
    ),
    ("bnb_4bit_use_double_quant", Rule::To("double_quant")),
    // Judged once the loaded dtype and the precision are known (`compute_dtype`).
    ("bnb_4bit_compute_dtype", Rule::Read(|_, _| Ok(()))),
    ("bnb_4bit_quant_storage", Rule::To("bnb_4bit_quant_storage")),
    (
        "llm_int8_threshold",
        Rule::Read(|rd, v| {
            // transformers' default; another threshold changes LLM.int8's outlier test.
            if v.as_f64() == Some(6.0) {
                rd.r.ignored.push(rd.key().to_string());
            } else {
                rd.not_modeled("an llm_int8_threshold other than 6.0: planned with 6.0's outlier test (|x| >= threshold over each 8-bit Linear's input), no outlier column split off");
            }
            Ok(())
        }),
    ),
    ("llm_int8_skip_modules", Rule::NoEffect),
];

/// `load_in_4bit` / `load_in_8bit`: a base of those bits (`False` says it is not one).
fn load_in(rd: &mut Reader, v: &Value, bits: u64) -> Result<(), String> {
    if flag(rd.key(), v)? {
        quant_bits(rd, bits, "bnb_4bit_quant_type")
    } else {
        rd.confirms("quant");
        Ok(())
    }
}

/// `prepare_model_for_kbit_training`'s keywords.
const PREPARE: Table = &[
    (
        "use_gradient_checkpointing",
        Rule::Read(|rd, v| super::on_or_confirm(rd, v, "grad_ckpt")),
    ),
    ("gradient_checkpointing_kwargs", Rule::NoEffect),
];

/// Liger's `apply_liger_kernel_to_*` keywords (read by [`liger`]).
const LIGER: Table = &[
    ("rope", Rule::Read(|_, _| Ok(()))),
    ("rms_norm", Rule::Read(|_, _| Ok(()))),
    ("swiglu", Rule::Read(|_, _| Ok(()))),
    ("geglu", Rule::Read(|_, _| Ok(()))),
    ("fused_linear_cross_entropy", Rule::Read(|_, _| Ok(()))),
];

/// The tables a call's keywords are read with (None: the call is not read).
fn tables_of(call: &str) -> Option<&'static [Table]> {
    Some(match call {
        "from_pretrained" => &[FROM_PRETRAINED],
        "BitsAndBytesConfig" => &[BNB],
        "LoraConfig" => &[hf::TABLE],
        "prepare_model_for_kbit_training" => &[PREPARE],
        "apply_liger_kernel_to_*" => &[LIGER],
        c if TRAINING_CLASSES.iter().any(|(n, _)| *n == c) => &[hf::TABLE, hf::GRPO, hf::TRAINER],
        _ => return None,
    })
}

fn rule_of<'t>(tables: &'t [Table], key: &str) -> Option<&'t Rule> {
    tables
        .iter()
        .flat_map(|t| t.iter())
        .find(|(k, _)| *k == key)
        .map(|(_, r)| r)
}

/// The key a call is read under (None: not read). A model class's `from_pretrained` only.
fn key_of(c: &Call) -> Option<&'static str> {
    let n = c.name();
    if n == "from_pretrained" {
        let receiver = c.callee.rsplit('.').nth(1).unwrap_or("");
        let model = receiver.starts_with("AutoModel")
            || receiver.contains("ForCausalLM")
            || receiver.contains("ForConditionalGeneration")
            || receiver.starts_with("AutoPeftModel");
        return model.then_some("from_pretrained");
    }
    if n.starts_with("apply_liger_kernel_to_") {
        return Some("apply_liger_kernel_to_*");
    }
    TABLE
        .iter()
        .map(|(k, _)| *k)
        .find(|k| *k == n && tables_of(k).is_some())
}

/// Whether `text` reads as a Python script rather than a YAML: an import, or a call of one of
/// the config classes this reader knows at the start of a statement.
pub(super) fn is_script(text: &str) -> bool {
    text.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("import ")
            || (l.starts_with("from ") && l.contains(" import "))
            || [
                "LoraConfig(",
                "TrainingArguments(",
                "SFTConfig(",
                "from_pretrained(",
            ]
            .iter()
            .any(|c| l.contains(c) && !l.starts_with('#') && !l.contains(": "))
    })
}

/// Reads a Python script.
pub(super) fn read(text: &str) -> Result<Reading, String> {
    let script = pyscript::parse(text)?;
    let mut obj = Map::new();
    let mut notes = vec![];
    let mut extra_models = vec![];
    for c in &script.calls {
        if let Some((name, what)) = UNPLANNED.iter().find(|(n, _)| *n == c.name()) {
            return Err(format!(
                "{name}: {what} is not planned yet (SFT, DPO, KTO, ORPO and SimPO are)"
            ));
        }
        let Some(key) = key_of(c) else { continue };
        let Some(tables) = tables_of(key) else {
            continue;
        };
        let mut err = None;
        let mut kw = c.keywords(|k, text| match rule_of(tables, k) {
            None | Some(Rule::NoEffect) | Some(Rule::NotModeled(_)) => {
                Some(Value::String(text.to_string()))
            }
            Some(Rule::Read(_)) if k == "quantization_config" => {
                Some(Value::String(text.to_string()))
            }
            Some(_) => {
                err.get_or_insert_with(|| {
                    format!(
                        "{}.{k} = {text}: not a literal value; the script is read, not run, so write the value itself (a number, a string, True / False, a list) or a name assigned it once",
                        c.name()
                    )
                });
                None
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        for a in c
            .args
            .iter()
            .filter(|a| a.name.as_deref().is_some_and(|n| n.starts_with('*')))
        {
            notes.push(format!(
                "{}({}): the arguments it unpacks are not read",
                c.name(),
                a.name.as_deref().unwrap_or_default()
            ));
        }
        if key == "from_pretrained" {
            match c.positional(0) {
                Some(PyValue::Lit(v)) => {
                    kw.insert("pretrained_model_name_or_path".into(), v.clone());
                }
                Some(PyValue::Expr(t)) => {
                    return Err(format!(
                        "{}({t}, …): the model is not a literal name; write its Hub id or path",
                        c.callee
                    ))
                }
                None => {}
            }
        }
        if obj.contains_key(key) {
            if key == "from_pretrained" {
                extra_models.push(c.callee.clone());
                continue;
            }
            return Err(format!(
                "{} is called twice: the script is read as one run; keep the call of the run to plan",
                c.name()
            ));
        }
        obj.insert(key.to_string(), Value::Object(kw));
    }
    // The variables the table reads as the sequence length.
    for (name, v) in &script.assigns {
        if let (Some(Rule::To("seq")), PyValue::Lit(v @ Value::Number(_))) =
            (rule_of(&[TABLE], name), v)
        {
            obj.insert(name.clone(), v.clone());
        }
    }
    if !TRAINING_CLASSES.iter().any(|(n, _)| obj.contains_key(*n)) {
        return Err("no TrainingArguments, SFTConfig or other TRL config call in the script: it says nothing of the batch, precision or checkpointing to plan".into());
    }
    let mut r = read_with(Source::Python, &obj, hf::DEFAULTS, &[TABLE], |rd| {
        compute_dtype(rd)?;
        if rd.other("LoraConfig").is_none() {
            // No LoraConfig: every parameter of the loaded model is trained, in its dtype.
            assume(
                rd,
                "finetuning_type",
                "full",
                "no LoraConfig in the script: every parameter is trained",
            )?;
            // LoraConfig's defaults do not apply: the adapter settings stay lorafit's own.
            let lora = ["lora_r", "lora_alpha", "lora_dropout", "target_modules"];
            rd.r.assumed.retain(|a| !lora.contains(&a.setting));
            let d = crate::model::Settings::default();
            let s = &mut rd.r.settings;
            (s.lora_r, s.lora_alpha, s.lora_dropout) = (d.lora_r, d.lora_alpha, d.lora_dropout);
            s.targets = d.targets;
            let d = rd.r.setting("dtype").unwrap_or_default();
            assume(
                rd,
                "adapter_dtype",
                &d,
                "full fine-tuning trains the loaded weights",
            )?;
        }
        super::assume_gpus(rd, "several GPUs (the script does not say how many)")
    })?;
    if !extra_models.is_empty() {
        r.not_modeled.push(super::NotModeled {
            key: extra_models.join(", "),
            why: "a second model loaded in the same process (a reference or teacher): planned with the first only".into(),
        });
    }
    if text.contains("requires_grad_(") || text.contains(".requires_grad =") {
        r.notes.push("parameters frozen or unfrozen by hand are not read: the trained parameters are the LoraConfig's, or every parameter without one".into());
    }
    if r.settings.sft_fused_head() && r.settings.fused_ce.any() {
        // SFTTrainer turns off the fused cross-entropy of its use_liger_kernel
        // (sft_trainer.py:1126-1139), and its fused head calls the backbone, not the causal-LM
        // forward that apply_liger_kernel_to_* replaces (trl/trainer/utils.py:1611-1620).
        r.settings.fused_ce = crate::model::FusedCe::Off;
        let keys = r.unuse("fused_ce");
        r.not_modeled.push(super::NotModeled {
            key: keys.join(", "),
            why: "Liger's fused linear cross-entropy does not run under TRL's SFTTrainer: its fused LM head replaces it (trl/trainer/sft_trainer.py:1126-1139, utils.py:1611-1620)".into(),
        });
    }
    r.notes.extend(notes);
    r.notes.push("read from the script's calls of from_pretrained, BitsAndBytesConfig, LoraConfig, the training config and prepare_model_for_kbit_training / apply_liger_kernel_to_*; the rest of the script is not read".into());
    Ok(r)
}

/// A training config class (the key being read): its stage, TRL's defaults, then its keys.
fn training(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let stage = TRAINING_CLASSES
        .iter()
        .find(|(n, _)| *n == rd.key())
        .and_then(|(_, stage)| *stage);
    let kw = v.as_object();
    let given = |k: &str| kw.is_some_and(|o| o.get(k).is_some_and(|x| !x.is_null()));
    if let Some(stage) = stage {
        if stage == "simpo"
            && kw
                .and_then(|o| o.get("loss_type"))
                .and_then(Value::as_str)
                .is_some_and(|l| l != "simpo")
        {
            return Err(format!(
                "{}.loss_type: CPO is not planned (SimPO, CPOConfig(loss_type=\"simpo\", cpo_alpha=0.0), is)",
                rd.key()
            ));
        }
        rd.set("stage", stage)?;
        let class = rd.key().to_string();
        if !given("gradient_checkpointing") {
            assume(
                rd,
                "grad_ckpt",
                "true",
                &format!("{class}'s gradient_checkpointing default (TRL)"),
            )?;
        }
        if !given("bf16") && !given("fp16") {
            assume(
                rd,
                "autocast",
                "bf16",
                &format!("{class}'s bf16 default when fp16 is not set (TRL)"),
            )?;
        }
        if stage == "grpo" {
            // GRPOConfig has no max_length and, in TRL 1.16, no prompt limit: a sequence is the
            // data's prompt plus max_completion_length (512 by default).
            if !given("max_completion_length") {
                assume(
                    rd,
                    "max_completion_length",
                    "512",
                    &format!("{class}'s max_completion_length default (TRL)"),
                )?;
            }
            if rd.r.setting("seq").is_none() {
                assume(
                    rd,
                    "seq",
                    "1024",
                    &format!("{class}: a prompt of up to 512 tokens (TRL 1.16 does not cut prompts: set seq to your longest prompt + max_completion_length)"),
                )?;
            }
        } else if !given("max_length") && !given("max_seq_length") {
            if let Some(at) = rd.r.used.iter().position(|u| u.setting == "seq") {
                let u = rd.r.used.remove(at);
                rd.r.notes.push(format!(
                    "{} = {} is not passed to {class}: TRL truncates at its own max_length",
                    u.key, u.value
                ));
            }
            assume(
                rd,
                "seq",
                "1024",
                &format!("{class}'s max_length default (TRL)"),
            )?;
        }
    }
    let key = rd.key().to_string();
    let mut v = v.clone();
    if stage == Some("sft") {
        // SFTConfig's loss_type (nll, dft) is the SFT loss, not a preference loss.
        if let Some(o) = v.as_object_mut() {
            if o.remove("loss_type").is_some() {
                rd.r.ignored.push(format!("{key}.loss_type"));
            }
        }
    }
    rd.section(&v, &[hf::TABLE, hf::GRPO, hf::TRAINER])?;
    if stage == Some("sft") {
        assume(
            rd,
            "logits",
            "fused",
            &format!("{key}: TRL's SFTTrainer scores the tokens through its fused LM head (trl/trainer/sft_trainer.py:1140-1146)"),
        )?;
    }
    Ok(())
}

/// `torch_dtype` / `dtype` of the loaded model (`"auto"`: the checkpoint's, not known here).
fn load_dtype(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some("auto") => {
            rd.r.notes.push(format!(
                "{}=\"auto\": the checkpoint's own dtype; planned as {}",
                rd.key(),
                rd.r.setting("dtype").unwrap_or_default()
            ));
            Ok(())
        }
        Some(t) => rd.set("dtype", t),
        None => Err(format!("{}: expected a torch dtype", rd.key())),
    }
}

/// `bnb_4bit_compute_dtype`: the dtype the 4-bit Linears compute in, the loaded dtype's or the
/// autocast's in the plans.
fn compute_dtype(rd: &mut Reader) -> Result<(), String> {
    let Some(v) = rd
        .other("BitsAndBytesConfig")
        .and_then(|b| b.get("bnb_4bit_compute_dtype"))
        .cloned()
    else {
        return Ok(());
    };
    let key = std::mem::replace(
        &mut rd.key,
        "BitsAndBytesConfig.bnb_4bit_compute_dtype".into(),
    );
    let t = v.as_str().unwrap_or_default();
    let d = crate::model::Dtype::parse(t)
        .ok_or_else(|| format!("{}: expected a torch dtype, got {v}", rd.key()))?;
    let s = &rd.r.settings;
    if s.autocast == Some(d) || (s.autocast.is_none() && s.dtype == d) {
        rd.confirms("dtype");
    } else {
        rd.not_modeled(format!(
            "4-bit Linears computing in {} while the rest computes in {}: planned in the latter",
            d.name(),
            s.autocast.unwrap_or(s.dtype).name()
        ));
    }
    rd.key = key;
    Ok(())
}

/// `prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)`: peft's recipe,
/// which turns checkpointing on unless told not to (peft `utils/other.py`).
fn prepare(rd: &mut Reader, v: &Value) -> Result<(), String> {
    rd.set("prepare_kbit", "true")?;
    // Its default, use_gradient_checkpointing=True, turns checkpointing on; a value given is
    // read with the section.
    if v.get("use_gradient_checkpointing").is_none() {
        rd.set("grad_ckpt", "true")?;
    }
    rd.section(v, &[PREPARE])
}

/// `apply_liger_kernel_to_<family>(rope=True, rms_norm=True, swiglu=True,
/// fused_linear_cross_entropy=True, …)`: Liger's defaults, as its functions declare them.
fn liger(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let on = |k: &str, default: bool| v.get(k).and_then(Value::as_bool).unwrap_or(default);
    let mut parts = vec![];
    if on("rms_norm", true) {
        parts.push("rms_norm");
    }
    if on("swiglu", true) && on("geglu", true) {
        parts.push("swiglu");
    }
    if on("rope", true) {
        parts.push("rope");
    }
    let text = if parts.is_empty() {
        "none".to_string()
    } else {
        parts.join(",")
    };
    rd.set("liger_kernel", &text)?;
    rd.set(
        "fused_ce",
        if on("fused_linear_cross_entropy", true) {
            "true"
        } else {
            "false"
        },
    )?;
    let call = rd.key().to_string();
    for (k, x) in v.as_object().into_iter().flatten() {
        match k.as_str() {
            "rope" | "rms_norm" | "swiglu" | "geglu" | "fused_linear_cross_entropy"
                if x.is_boolean() => {}
            "cross_entropy" if x.as_bool() == Some(true) => {
                rd.r.not_modeled.push(super::NotModeled {
                    key: format!("{call}.{k}"),
                    why: "Liger's cross-entropy over materialised logits: planned as PyTorch's"
                        .into(),
                })
            }
            _ => rd.r.ignored.push(format!("{call}.{k}")),
        }
    }
    Ok(())
}
