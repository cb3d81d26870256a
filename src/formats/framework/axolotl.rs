//! axolotl's YAML, with its defaults (`src/axolotl/utils/schemas/config.py`): no `adapter`
//! means every parameter is trained, `sequence_len` 2048, `micro_batch_size` 1, gradient
//! checkpointing off; a 4-bit base is NF4 with double quantization
//! (`src/axolotl/loaders/model.py`, `BitsAndBytesConfig`).

use super::hf::fsdp;
use super::{
    add_offload, assume, assume_gpus, deepspeed_by_name, flag, read_with, targets, Default, Reader,
    Reading, Rule, Source, Table,
};
use serde_json::{Map, Value};

const DEFAULTS: &[Default] = &[
    ("batch", "1", "axolotl's micro_batch_size"),
    (
        "optimizer",
        "adamw_torch_fused",
        "Trainer's optim with torch ≥ 2.8 (transformers/training_args.py)",
    ),
    ("lora_dropout", "0", "axolotl's lora_dropout"),
    (
        "dtype",
        "fp32",
        "axolotl's torch_dtype without bf16 or fp16",
    ),
    ("seq", "2048", "axolotl's sequence_len"),
    ("grad_ckpt", "false", "axolotl's gradient_checkpointing"),
    (
        "prepare_kbit",
        "false",
        "axolotl casts norms, embed_tokens and lm_head back to the load dtype after prepare_model_for_kbit_training, and skips it under FSDP and ZeRO-3 (axolotl 0.19 loaders/model.py:460-490, 1116-1175)",
    ),
];

const LAYER_NORM: &str =
    "Liger's LayerNorm: the planned families have RMSNorms, so it replaces nothing in them";
const LORA_KERNELS: &str =
    "axolotl's fused LoRA kernels (what they save for backward): planned as peft's modules";

/// axolotl's `trl:` section beyond GRPOConfig's keys ([`super::hf::GRPO`]).
const TRL: Table = &[
    ("beta", Rule::To("beta")),
    ("loss_type", Rule::To("grpo_loss")),
    (
        "vllm_device",
        Rule::NotModeled("vLLM on a GPU of its own (TRL 0.14-0.15's vllm_device): planned with vllm_mode as given (TRL 1.x's default, colocate)"),
    ),
    ("reward_funcs", Rule::NoEffect),
    ("reward_weights", Rule::NoEffect),
    ("log_completions", Rule::NoEffect),
    ("scale_rewards", Rule::NoEffect),
    ("temperature", Rule::NoEffect),
    ("top_p", Rule::NoEffect),
    ("top_k", Rule::NoEffect),
    ("min_p", Rule::NoEffect),
    ("repetition_penalty", Rule::NoEffect),
    ("epsilon", Rule::NoEffect),
    ("epsilon_high", Rule::NoEffect),
    ("vllm_server_host", Rule::NoEffect),
    ("vllm_server_port", Rule::NoEffect),
    ("vllm_server_timeout", Rule::NoEffect),
    ("vllm_dtype", Rule::NoEffect),
    ("vllm_max_model_len", Rule::NoEffect),
    ("vllm_enable_prefix_caching", Rule::NoEffect),
];

const TABLE: Table = &[
    ("base_model", Rule::Model),
    ("adapter", Rule::Read(adapter)),
    ("load_in_4bit", Rule::Read(|rd, v| {
        if flag(rd.key(), v)? {
            rd.set("quant", "nf4")
        } else {
            rd.confirms("quant");
            Ok(())
        }
    })),
    ("load_in_8bit", Rule::Read(|rd, v| {
        if flag(rd.key(), v)? {
            rd.set("quant", "int8")
        } else {
            rd.confirms("quant");
            Ok(())
        }
    })),
    ("lora_r", Rule::To("lora_r")),
    ("lora_alpha", Rule::To("lora_alpha")),
    ("lora_dropout", Rule::To("lora_dropout")),
    ("lora_target_modules", Rule::Read(targets)),
    ("lora_target_linear", Rule::Read(|rd, v| {
        if flag(rd.key(), v)? {
            // (axolotl's find_all_linear_names: every nn.Linear instance by name, which the
            // check of the model read afterwards holds against routers that subclass it)
            rd.r.axolotl_linear_names = true;
            rd.set("target_modules", "all-linear")
        } else {
            rd.confirms("target_modules");
            Ok(())
        }
    })),
    ("lora_modules_to_save", Rule::To("modules_to_save")),
    ("peft_use_dora", Rule::To("use_dora")),
    ("peft_use_rslora", Rule::To("use_rslora")),
    ("loraplus_lr_ratio", Rule::To("loraplus_lr_ratio")),
    ("unfrozen_parameters", Rule::Read(unfrozen)),
    ("rl", Rule::Read(rl)),
    // GRPO's arguments, TRL's GRPOConfig names (axolotl's TRLConfig,
    // `src/axolotl/utils/schemas/trl.py`).
    ("trl", Rule::Read(|rd, v| rd.section(v, &[TRL, super::hf::GRPO]))),
    ("rl_beta", Rule::To("beta")),
    ("precompute_ref_log_probs", Rule::To("precompute_ref_log_probs")),
    ("sequence_len", Rule::To("seq")),
    ("micro_batch_size", Rule::To("batch")),
    ("gradient_accumulation_steps", Rule::To("grad_accum")),
    ("sample_packing", Rule::NotModeled("sample packing: planned as rows of sequence_len tokens with padding (the same tokens per row)")),
    ("pad_to_sequence_len", Rule::NoEffect),
    ("gradient_checkpointing", Rule::Read(checkpointing)),
    (
        "attn_implementation",
        Rule::Read(|rd, v| super::attention(rd, v.as_str().unwrap_or_default())),
    ),
    ("flash_attention", Rule::Read(|rd, v| attention(rd, v, "flash_attention_2"))),
    ("sdp_attention", Rule::Read(|rd, v| attention(rd, v, "sdpa"))),
    ("eager_attention", Rule::Read(|rd, v| attention(rd, v, "eager"))),
    ("xformers_attention", Rule::NotModeled("xformers attention: planned as sdpa")),
    ("bf16", Rule::Read(bf16)),
    ("fp16", Rule::Read(|rd, v| {
        if flag(rd.key(), v)? {
            rd.set("dtype", "fp16")?;
            rd.set("autocast", "fp16")
        } else {
            rd.confirms("autocast");
            Ok(())
        }
    })),
    ("optimizer", Rule::Read(super::optimizer)),
    ("fsdp", Rule::Read(fsdp)),
    (
        "fsdp_config",
        Rule::Read(|rd, v| {
            // axolotl's newer spelling enables FSDP by its fsdp_config alone (FULL_SHARD
            // unless reshard_after_forward says otherwise).
            if rd.other("fsdp").is_none() && v.as_object().is_some_and(|o| !o.is_empty()) {
                rd.set("strategy", "fsdp")?;
            }
            rd.section(v, &[FSDP_CONFIG])
        }),
    ),
    ("fsdp_version", Rule::Read(fsdp_version)),
    ("deepspeed", Rule::Read(|rd, v| match v.as_str() {
        Some(p) => deepspeed_by_name(rd, p),
        None => Err(format!("{}: expected the path of a DeepSpeed JSON", rd.key())),
    })),
    ("plugins", Rule::NoEffect),
    ("liger_fused_linear_cross_entropy", Rule::Read(|rd, v| fused_ce(rd, v, "liger"))),
    ("cut_cross_entropy", Rule::Read(|rd, v| fused_ce(rd, v, "cce"))),
    ("liger_rms_norm", Rule::Read(|rd, v| liger_part(rd, v, "rms_norm"))),
    ("liger_glu_activation", Rule::Read(|rd, v| liger_part(rd, v, "swiglu"))),
    ("liger_rope", Rule::Read(|rd, v| liger_part(rd, v, "rope"))),
    ("liger_layer_norm", Rule::Read(|rd, v| kernel(rd, v, LAYER_NORM))),
    ("lora_mlp_kernel", Rule::Read(|rd, v| kernel(rd, v, LORA_KERNELS))),
    ("lora_qkv_kernel", Rule::Read(|rd, v| kernel(rd, v, LORA_KERNELS))),
    ("lora_o_kernel", Rule::Read(|rd, v| kernel(rd, v, LORA_KERNELS))),
    ("eval_batch_size", Rule::To("eval_batch")),
    ("model_type", Rule::NoEffect),
    ("tokenizer_type", Rule::NoEffect),
    ("datasets", Rule::NoEffect),
    ("dataset_prepared_path", Rule::NoEffect),
    ("val_set_size", Rule::NoEffect),
    ("num_epochs", Rule::NoEffect),
    ("lr_scheduler", Rule::NoEffect),
    ("evals_per_epoch", Rule::NoEffect),
    ("saves_per_epoch", Rule::NoEffect),
    ("special_tokens", Rule::NoEffect),
    ("tf32", Rule::NoEffect),
    ("gradient_checkpointing_kwargs", Rule::NoEffect),
    ("train_on_inputs", Rule::NoEffect),
    ("group_by_length", Rule::NoEffect),
    ("strict", Rule::NoEffect),
    ("chat_template", Rule::NoEffect),
    // After gradient_checkpointing: with it, the checkpoints are what is offloaded.
    ("activation_offloading", Rule::Read(activation_offload)),
];

/// FSDP's options, with accelerate's `fsdp_` prefix (accelerate configs, axolotl's older
/// spelling) or without it (Trainer's `fsdp_config`, ms-swift's FSDP JSON, axolotl's newer one).
pub(super) const FSDP_CONFIG: Table = &[
    ("fsdp_offload_params", Rule::Read(fsdp_offload)),
    ("offload_params", Rule::Read(fsdp_offload)),
    ("fsdp_sharding_strategy", Rule::Read(sharding)),
    ("sharding_strategy", Rule::Read(sharding)),
    ("fsdp_version", Rule::Read(fsdp_version)),
    ("version", Rule::Read(fsdp_version)),
    (
        "fsdp_activation_checkpointing",
        Rule::Read(activation_checkpointing),
    ),
    (
        "activation_checkpointing",
        Rule::Read(activation_checkpointing),
    ),
    (
        "fsdp_reshard_after_forward",
        Rule::Read(reshard_after_forward),
    ),
    ("reshard_after_forward", Rule::Read(reshard_after_forward)),
    // After activation_checkpointing: with it, the checkpoints are what is offloaded.
    ("activation_cpu_offload", Rule::Read(activation_offload)),
    ("fsdp_backward_prefetch", Rule::NoEffect),
    ("backward_prefetch", Rule::NoEffect),
    ("fsdp_forward_prefetch", Rule::NoEffect),
    ("forward_prefetch", Rule::NoEffect),
    ("fsdp_limit_all_gathers", Rule::NoEffect),
    ("limit_all_gathers", Rule::NoEffect),
    ("fsdp_sync_module_states", Rule::NoEffect),
    ("sync_module_states", Rule::NoEffect),
    ("fsdp_use_orig_params", Rule::NoEffect),
    ("use_orig_params", Rule::NoEffect),
    ("fsdp_cpu_ram_efficient_loading", Rule::NoEffect),
    ("cpu_ram_efficient_loading", Rule::NoEffect),
    ("fsdp_auto_wrap_policy", Rule::NoEffect),
    ("auto_wrap_policy", Rule::NoEffect),
    ("fsdp_transformer_layer_cls_to_wrap", Rule::NoEffect),
    ("transformer_layer_cls_to_wrap", Rule::NoEffect),
    ("fsdp_state_dict_type", Rule::To("fsdp_state_dict_type")),
    ("state_dict_type", Rule::To("fsdp_state_dict_type")),
];

/// `fsdp_version`: 1 (`FullyShardedDataParallel`) or 2 (FSDP2's `fully_shard`).
pub(super) fn fsdp_version(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let text = match v {
        Value::Number(n) => n.to_string(),
        Value::String(t) => t.clone(),
        _ => return Err(format!("{}: expected 1 or 2", rd.key())),
    };
    rd.set("fsdp_version", &text)
}

/// FSDP's own activation checkpointing: checkpointing of every wrapped layer.
fn activation_checkpointing(rd: &mut Reader, v: &Value) -> Result<(), String> {
    super::on_or_confirm(rd, v, "grad_ckpt")
}

/// `reshard_after_forward`: false keeps the gathered parameters from the forward to the
/// backward (SHARD_GRAD_OP); accelerate's FSDP1 spelling names the sharding strategy.
fn reshard_after_forward(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v {
        Value::String(s) if crate::formats::fields::boolean(s).is_err() => sharding(rd, v),
        _ if flag(rd.key(), v)? => {
            rd.confirms("strategy");
            Ok(())
        }
        _ => rd.set("strategy", "fsdp_shard_grad_op"),
    }
}

/// Activations offloaded to the host (axolotl's `activation_offloading`, ms-swift's
/// `activation_cpu_offload`, swift/callbacks/activation_cpu_offload.py): with checkpointing
/// (read before it), the checkpoints are what is offloaded; without it every saved activation
/// would be.
fn activation_offload(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if !flag(rd.key(), v)? {
        rd.r.ignored.push(rd.key().to_string());
        return Ok(());
    }
    if rd.r.settings.grad_ckpt {
        add_offload(rd, &["activations"])
    } else {
        rd.not_modeled(
            "every saved activation offloaded to the host (no checkpointing): planned on the GPU",
        );
        Ok(())
    }
}

/// `adapter`: lora, qlora (a 4-bit base); none trains every parameter.
fn adapter(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some("lora") => rd.set("finetuning_type", "lora"),
        Some("qlora") => {
            rd.set("finetuning_type", "lora")?;
            rd.set("quant", "nf4")
        }
        Some("") => rd.set("finetuning_type", "full"),
        _ => Err(format!(
            "{}: {v} adapters are not planned (lora and qlora are)",
            rd.key()
        )),
    }
}

fn checkpointing(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v {
        Value::String(s) if s == "offload" => {
            rd.set("grad_ckpt", "true")?;
            add_offload(rd, &["activations"])
        }
        Value::String(s) if s == "offload_disk" => {
            rd.set("grad_ckpt", "true")?;
            rd.not_modeled("checkpoints offloaded to disk: planned as checkpoints kept on the GPU");
            Ok(())
        }
        _ => {
            let on = flag(rd.key(), v)?;
            rd.set("grad_ckpt", if on { "true" } else { "false" })
        }
    }
}

fn attention(rd: &mut Reader, v: &Value, impl_: &str) -> Result<(), String> {
    if flag(rd.key(), v)? {
        rd.set("attn_impl", impl_)
    } else {
        rd.r.ignored.push(rd.key().to_string());
        Ok(())
    }
}

/// `bf16`: true or auto (bf16 weights and autocast to bf16 on a card that has it), `full` (bf16
/// weights, no autocast); axolotl loads the model in the dtype these name
/// (`utils/config/__init__.py`, `normalize_config`: `torch_dtype`).
fn bf16(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v {
        Value::String(s) if s == "full" => {
            rd.set("dtype", "bf16")?;
            rd.set("autocast", "none")
        }
        Value::String(s) if s == "auto" => {
            rd.set("dtype", "bf16")?;
            rd.set("autocast", "bf16")
        }
        _ if flag(rd.key(), v)? => {
            rd.set("dtype", "bf16")?;
            rd.set("autocast", "bf16")
        }
        _ => {
            rd.confirms("autocast");
            Ok(())
        }
    }
}

/// A fused loss's switch: on, `fused_ce` is `which` (`liger` for LigerPlugin's
/// `liger_fused_linear_cross_entropy`; `cce` for the CutCrossEntropyPlugin's
/// `cut_cross_entropy`, `cce_patch` of the model type with its defaults,
/// `integrations/cut_cross_entropy/__init__.py`).
fn fused_ce(rd: &mut Reader, v: &Value, which: &str) -> Result<(), String> {
    if super::flag(rd.key(), v)? {
        rd.set("fused_ce", which)
    } else {
        rd.confirms("fused_ce");
        Ok(())
    }
}

/// One of Liger's decoder kernels (axolotl's LigerPlugin: `liger_rms_norm`,
/// `liger_glu_activation`, `liger_rope`), added to those already on.
fn liger_part(rd: &mut Reader, v: &Value, part: &str) -> Result<(), String> {
    if flag(rd.key(), v)? {
        let on = rd.r.setting("liger_kernel").unwrap_or_default();
        let parts = if on.is_empty() {
            part.to_string()
        } else {
            format!("{on},{part}")
        };
        rd.set("liger_kernel", &parts)
    } else {
        rd.confirms("liger_kernel");
        Ok(())
    }
}

fn kernel(rd: &mut Reader, v: &Value, why: &str) -> Result<(), String> {
    if flag(rd.key(), v)? {
        rd.not_modeled(why.to_string());
    } else {
        rd.r.ignored.push(rd.key().to_string());
    }
    Ok(())
}

fn rl(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some("ipo") => {
            rd.set("stage", "dpo")?;
            rd.set("pref_loss", "ipo")
        }
        Some(s @ ("dpo" | "orpo" | "kto" | "simpo" | "grpo")) => rd.set("stage", s),
        _ => Err(format!(
            "{}: {v} is not read from axolotl (dpo, ipo, orpo, kto, simpo and grpo are)",
            rd.key()
        )),
    }
}

fn fsdp_offload(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if flag(rd.key(), v)? {
        add_offload(rd, &["optimizer", "params"])
    } else {
        rd.confirms("offload");
        Ok(())
    }
}

fn sharding(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let s = v.as_str().unwrap_or_default().to_ascii_lowercase();
    let strategy = match s.as_str() {
        "full_shard" | "1" => "fsdp",
        "shard_grad_op" | "2" => "fsdp_shard_grad_op",
        "hybrid_shard" | "4" => "fsdp_hybrid",
        "no_shard" | "3" => "ddp",
        _ => return Err(format!("{}: unknown sharding strategy {v}", rd.key())),
    };
    rd.set("strategy", strategy)
}

/// `unfrozen_parameters`: `^model.layers.N.*` patterns of the last layers are freeze tuning;
/// other patterns are not planned.
fn unfrozen(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let pats: Vec<&str> = v
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let layers: Option<Vec<u64>> = pats
        .iter()
        .map(|p| {
            p.strip_prefix("^model.layers.")
                .and_then(|r| r.strip_suffix(".*"))
                .and_then(|n| n.parse().ok())
        })
        .collect();
    match layers {
        Some(mut l) if !l.is_empty() => {
            l.sort_unstable();
            l.dedup();
            rd.set("finetuning_type", "freeze")?;
            rd.set("freeze_trainable_layers", &l.len().to_string())?;
            // Which layers: the plan trains the last N; say so when they are others.
            let consecutive = l.windows(2).all(|w| w[1] == w[0] + 1);
            if !consecutive {
                rd.not_modeled("unfrozen layers that are not the last ones in a row: planned as the last layers, as many");
            }
            Ok(())
        }
        _ => {
            rd.not_modeled(
                "unfrozen parameters by pattern: planned as the config's adapter or full tuning",
            );
            Ok(())
        }
    }
}

pub(super) fn read(o: &Map<String, Value>) -> Result<Reading, String> {
    read_with(
        Source::Axolotl,
        o,
        DEFAULTS,
        &[TABLE, super::hf::TRAINER],
        |rd| {
            if rd.other("adapter").is_none() && rd.other("unfrozen_parameters").is_none() {
                assume(
                    rd,
                    "finetuning_type",
                    "full",
                    "axolotl without `adapter` (every parameter trained)",
                )?;
            }
            let st = &rd.r.settings;
            if st.base_trained() && st.dtype == crate::model::Dtype::Bf16 && st.autocast.is_none() {
                // `bf16: full` trains the parameters themselves in bf16 (no fp32 copy).
                assume(
                    rd,
                    "adapter_dtype",
                    "bf16",
                    "axolotl's bf16: full with every parameter trained",
                )?;
            }
            if rd
                .r
                .settings
                .quant
                .is_some_and(crate::model::Quant::is_4bit)
            {
                assume(
                    rd,
                    "bnb_4bit_quant_storage",
                    "bf16",
                    "axolotl's qlora BitsAndBytesConfig stores a 4-bit weight in bf16 (loaders/model.py, _set_quantization_config: \"bnb_4bit_quant_storage\": torch.bfloat16)",
                )?;
            }
            assume_gpus(rd, "several GPUs (axolotl's YAML does not say how many)")
        },
    )
}
