//! A JSON of Trainer's `TrainingArguments` (or TRL's `SFTConfig` / `DPOConfig`) and peft's
//! `LoraConfig` keys, flat or under `training_args` / `lora_config`, and a saved
//! `adapter_config.json`. Defaults are those of the dataclasses: `per_device_train_batch_size`
//! 8, no gradient checkpointing, no mixed precision (`transformers/training_args.py`), and
//! `LoraConfig` r 8, alpha 8, dropout 0 (`peft/tuners/lora/config.py`).

use super::{
    assume_gpus, deepspeed_by_name, flag, read_with, targets, Default, Reader, Reading, Rule,
    Source, Table,
};
use serde_json::{Map, Value};

pub(super) const DEFAULTS: &[Default] = &[
    (
        "batch",
        "8",
        "TrainingArguments' per_device_train_batch_size",
    ),
    (
        "optimizer",
        "adamw_torch_fused",
        "Trainer's optim with torch ≥ 2.8 (transformers/training_args.py)",
    ),
    (
        "grad_ckpt",
        "false",
        "TrainingArguments' gradient_checkpointing",
    ),
    ("lora_r", "8", "LoraConfig's r"),
    ("lora_alpha", "8", "LoraConfig's lora_alpha"),
    ("lora_dropout", "0", "LoraConfig's lora_dropout"),
    (
        "target_modules",
        "q,v",
        "peft's default target_modules for Llama, Mistral, Qwen and Gemma (q_proj, v_proj)",
    ),
];

/// peft's LoraConfig keys, TRL's, and the sections of a combined JSON.
pub(super) const TABLE: Table = &[
    (
        "training_args",
        Rule::Read(|rd, v| rd.section(v, &[TABLE, GRPO, TRAINER])),
    ),
    (
        "lora_config",
        Rule::Read(|rd, v| rd.section(v, &[TABLE, GRPO, TRAINER])),
    ),
    ("model", Rule::Model),
    ("model_name_or_path", Rule::Model),
    ("base_model_name_or_path", Rule::Model),
    ("peft_type", Rule::Read(peft_type)),
    ("r", Rule::To("lora_r")),
    ("lora_alpha", Rule::To("lora_alpha")),
    ("lora_dropout", Rule::To("lora_dropout")),
    ("target_modules", Rule::Read(targets)),
    ("target_parameters", Rule::To("target_parameters")),
    ("modules_to_save", Rule::To("modules_to_save")),
    ("use_dora", Rule::To("use_dora")),
    ("use_rslora", Rule::To("use_rslora")),
    ("init_lora_weights", Rule::To("init_lora_weights")),
    (
        "layers_to_transform",
        Rule::NotModeled("adapters on some layers only: planned on every layer"),
    ),
    (
        "rank_pattern",
        Rule::Read(|rd, v| empty_or(rd, v, "per-module ranks: planned with r everywhere")),
    ),
    (
        "alpha_pattern",
        Rule::Read(|rd, v| empty_or(rd, v, "per-module alphas: no memory effect")),
    ),
    ("bias", Rule::Read(bias)),
    ("max_seq_length", Rule::To("seq")),
    ("max_length", Rule::To("seq")),
    ("beta", Rule::To("beta")),
    ("loss_type", Rule::To("pref_loss")),
    (
        "precompute_ref_log_probs",
        Rule::To("precompute_ref_log_probs"),
    ),
    ("max_prompt_length", Rule::To("max_prompt_length")),
    (
        "completion_only_loss",
        Rule::Read(|rd, v| {
            if v.is_null() {
                // TRL's default: on for a prompt-completion dataset, which the config does not say.
                rd.not_modeled("completion_only_loss None: TRL scores only the completions of a prompt-completion dataset; planned over every token (an upper bound): set it with max_prompt_length to plan that");
                Ok(())
            } else {
                rd.set(
                    "completion_only_loss",
                    &super::flag(rd.key(), v)?.to_string(),
                )
            }
        }),
    ),
    (
        "assistant_only_loss",
        Rule::Read(|rd, v| {
            if super::flag(rd.key(), v)? {
                rd.not_modeled("assistant_only_loss: the fused head scores the assistant turns only; planned over every token (an upper bound)");
            } else {
                rd.r.ignored.push(rd.key().to_string());
            }
            Ok(())
        }),
    ),
    (
        "eval_accumulation_steps",
        Rule::To("eval_accumulation_steps"),
    ),
    ("packing", Rule::Read(trl_packing)),
    ("padding_free", Rule::Read(trl_packing)),
    ("packing_strategy", Rule::Read(trl_packing)),
    (
        "torch_compile",
        Rule::NotModeled("torch.compile's fused kernels and their saved tensors: planned eager"),
    ),
    ("task_type", Rule::NoEffect),
    ("inference_mode", Rule::NoEffect),
];

/// TRL's `GRPOConfig` keys (TRL 1.16): the completions, the passes, the generation batch and
/// vLLM; axolotl's `trl:` section and ms-swift's GRPO arguments use the same names.
pub(super) const GRPO: Table = &[
    ("num_generations", Rule::To("num_generations")),
    ("max_completion_length", Rule::To("max_completion_length")),
    ("num_iterations", Rule::To("num_iterations")),
    ("use_vllm", Rule::Read(use_vllm)),
    ("vllm_mode", Rule::Read(use_vllm)),
    (
        "vllm_gpu_memory_utilization",
        Rule::To("vllm_gpu_memory_utilization"),
    ),
    ("vllm_enable_sleep_mode", Rule::To("vllm_enable_sleep_mode")),
    (
        "vllm_importance_sampling_correction",
        Rule::To("vllm_importance_sampling_correction"),
    ),
    ("generation_batch_size", Rule::To("generation_batch_size")),
    ("steps_per_generation", Rule::To("steps_per_generation")),
];

/// Trainer's `TrainingArguments` keys, which LLaMA-Factory and ms-swift pass on under the same
/// names: the batch, precision, checkpointing, optimizer, strategy, evaluation and saving, and
/// the ones with no effect on GPU memory.
pub(super) const TRAINER: Table = &[
    ("per_device_train_batch_size", Rule::To("batch")),
    ("gradient_accumulation_steps", Rule::To("grad_accum")),
    ("bf16", Rule::Read(|rd, v| mixed(rd, v, "bf16"))),
    ("fp16", Rule::Read(|rd, v| mixed(rd, v, "fp16"))),
    ("gradient_checkpointing", Rule::To("grad_ckpt")),
    ("optim", Rule::Read(super::optimizer)),
    ("use_liger_kernel", Rule::Read(liger)),
    ("deepspeed", Rule::Read(deepspeed)),
    ("fsdp", Rule::Read(fsdp)),
    ("per_device_eval_batch_size", Rule::To("eval_batch")),
    ("eval_strategy", Rule::To("eval_strategy")),
    ("evaluation_strategy", Rule::To("eval_strategy")),
    ("prediction_loss_only", Rule::To("prediction_loss_only")),
    ("predict_with_generate", Rule::To("predict_with_generate")),
    ("eval_do_concat_batches", Rule::To("eval_do_concat_batches")),
    ("save_strategy", Rule::To("save_strategy")),
    ("save_only_model", Rule::To("save_only_model")),
    ("output_dir", Rule::NoEffect),
    ("learning_rate", Rule::NoEffect),
    ("num_train_epochs", Rule::NoEffect),
    ("logging_steps", Rule::NoEffect),
    ("save_steps", Rule::NoEffect),
    ("eval_steps", Rule::NoEffect),
    ("warmup_ratio", Rule::NoEffect),
    ("lr_scheduler_type", Rule::NoEffect),
    ("weight_decay", Rule::NoEffect),
    ("report_to", Rule::NoEffect),
    ("resume_from_checkpoint", Rule::Read(resume)),
    ("overwrite_output_dir", Rule::NoEffect),
    ("max_steps", Rule::NoEffect),
    ("save_total_limit", Rule::NoEffect),
    ("warmup_steps", Rule::NoEffect),
    ("max_grad_norm", Rule::NoEffect),
    ("seed", Rule::NoEffect),
    ("dataloader_num_workers", Rule::NoEffect),
    ("ddp_timeout", Rule::NoEffect),
    (
        "ddp_find_unused_parameters",
        Rule::To("ddp_find_unused_parameters"),
    ),
    ("ddp_bucket_cap_mb", Rule::To("ddp_bucket_cap_mb")),
    ("ddp_broadcast_buffers", Rule::To("ddp_broadcast_buffers")),
    ("run_name", Rule::NoEffect),
    ("logging_dir", Rule::NoEffect),
    ("do_train", Rule::NoEffect),
    ("do_eval", Rule::NoEffect),
    ("push_to_hub", Rule::NoEffect),
    ("hub_model_id", Rule::NoEffect),
];

fn peft_type(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v.as_str().map(str::to_ascii_uppercase).as_deref() {
        Some("LORA") => {
            rd.set("finetuning_type", "lora")?;
            Ok(())
        }
        _ => Err(format!(
            "{}: {v} adapters are not planned (LORA is)",
            rd.key()
        )),
    }
}

fn empty_or(rd: &mut Reader, v: &Value, why: &str) -> Result<(), String> {
    if v.as_object().is_some_and(Map::is_empty) {
        rd.r.ignored.push(rd.key().to_string());
    } else {
        rd.not_modeled(why.to_string());
    }
    Ok(())
}

/// GRPOConfig's `use_vllm` and `vllm_mode` (read together): without vLLM, transformers'
/// generate (the default); with it, colocated (TRL's default mode) or a server on other GPUs.
/// `vllm_mode` without `use_vllm` is not used.
pub(super) fn use_vllm(rd: &mut Reader, _: &Value) -> Result<(), String> {
    let on = match rd.other("use_vllm") {
        Some(v) => flag("use_vllm", v)?,
        None => false,
    };
    if !on {
        rd.r.ignored.push(rd.key().to_string());
        return Ok(());
    }
    match rd
        .other("vllm_mode")
        .and_then(Value::as_str)
        .unwrap_or("colocate")
    {
        "server" => rd.set("generation", "vllm_server"),
        "colocate" => rd.set("generation", "vllm_colocate"),
        other => Err(format!(
            "{}: vllm_mode {other:?} is not TRL's (colocate or server)",
            rd.key()
        )),
    }
}

fn bias(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if v.as_str() == Some("none") {
        rd.r.ignored.push(rd.key().to_string());
    } else {
        rd.not_modeled(
            "trained biases: not planned (the families planned have none, or keep them frozen)",
        );
    }
    Ok(())
}

/// Trainer's `bf16` / `fp16`: mixed precision by autocast over the loaded weights.
pub(super) fn mixed(rd: &mut Reader, v: &Value, dtype: &str) -> Result<(), String> {
    if flag(rd.key(), v)? {
        rd.set("autocast", dtype)
    } else {
        rd.confirms("autocast");
        Ok(())
    }
}

/// Liger's kernels as `use_liger_kernel` / `enable_liger_kernel` install them: RMSNorm, SwiGLU
/// and RoPE in the decoder layers and the fused linear cross-entropy.
pub(super) fn liger(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if flag(rd.key(), v)? {
        rd.set("liger_kernel", "true")?;
        rd.set("fused_ce", "liger")?;
    } else {
        rd.confirms("liger_kernel");
        rd.confirms("fused_ce");
    }
    Ok(())
}

/// `deepspeed`: a path to its JSON (the strategy from the name until the file is read), or the
/// JSON itself.
fn deepspeed(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v {
        Value::String(path) => deepspeed_by_name(rd, path),
        Value::Object(_) => rd.section(v, &[super::deepspeed::TABLE]),
        _ => Err(format!("{}: expected a path or a JSON object", rd.key())),
    }
}

/// Trainer's `fsdp`: `"full_shard auto_wrap"`, `"shard_grad_op"`, `"hybrid_shard"`, with
/// `offload`.
pub(super) fn fsdp(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let words: Vec<String> = match v {
        Value::String(s) => s.split_whitespace().map(str::to_string).collect(),
        Value::Array(a) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        Value::Bool(false) => return Ok(()),
        _ => {
            return Err(format!(
                "{}: expected FSDP options (\"full_shard auto_wrap\")",
                rd.key()
            ))
        }
    };
    if words.is_empty() {
        return Ok(());
    }
    let strategy = if words.iter().any(|w| w == "shard_grad_op") {
        "fsdp_shard_grad_op"
    } else if words
        .iter()
        .any(|w| w == "hybrid_shard" || w == "hybrid_shard_zero2")
    {
        "fsdp_hybrid"
    } else {
        "fsdp"
    };
    rd.set("strategy", strategy)?;
    if words.iter().any(|w| w == "offload") {
        super::add_offload(rd, &["optimizer", "params"])?;
    }
    Ok(())
}

pub(super) fn read(o: &Map<String, Value>) -> Result<Reading, String> {
    let source = if o.contains_key("peft_type") && !o.contains_key("per_device_train_batch_size") {
        Source::AdapterConfig
    } else {
        Source::TrainingArguments
    };
    read_with(source, o, DEFAULTS, &[TABLE, GRPO, TRAINER], |rd| {
        assume_gpus(rd, "several GPUs (the arguments do not say how many)")
    })
}

/// `resume_from_checkpoint`: a checkpoint's path (or `true`, the last one) resumes; empty,
/// `null` or `false` does not.
fn resume(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let on = match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::String(t) => {
            let t = t.trim();
            !(t.is_empty() || t.eq_ignore_ascii_case("false") || t.eq_ignore_ascii_case("none"))
        }
        _ => return Err("a checkpoint's path, true or false".into()),
    };
    rd.set("resume_from_checkpoint", if on { "1" } else { "0" })
}

/// TRL's `packing`, `padding_free` and `packing_strategy` (`SFTConfig`): padding-free when
/// `padding_free` is set, or with `packing` and the `bfd` strategies (the default since 0.20),
/// as `SFTTrainer.__init__` decides (`self.padding_free = args.padding_free or (args.packing and
/// args.packing_strategy in {"bfd", "bfd_split"})`, `trl/trainer/sft_trainer.py:916` in 1.16);
/// the `wrapped` strategy cuts the concatenated samples into rows of `max_length` with one
/// attention over each row, planned as those rows. Each key sets the one setting from all three.
fn trl_packing(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let key = rd.key().to_string();
    let given = |name: &str| -> Result<Option<Value>, String> {
        Ok(if name == key {
            Some(v.clone())
        } else {
            rd.obj.get(name).cloned()
        })
    };
    let on = |name: &str, v: Option<Value>| -> Result<bool, String> {
        v.map_or(Ok(false), |v| flag(name, &v))
    };
    let padding_free = on("padding_free", given("padding_free")?)?;
    let packing = on("packing", given("packing")?)?;
    let strategy = match given("packing_strategy")? {
        Some(Value::String(s)) => s,
        Some(other) => return Err(format!("packing_strategy: expected a name, got {other}")),
        None => "bfd".into(),
    };
    let bfd = match strategy.as_str() {
        "bfd" | "bfd_split" | "bfd-requeue" => true,
        "wrapped" => false,
        other => {
            return Err(format!(
                "packing_strategy: {other:?} is not TRL's (bfd, bfd_split, wrapped)"
            ))
        }
    };
    rd.set(
        "packing",
        if padding_free || (packing && bfd) {
            "true"
        } else {
            "false"
        },
    )
}
