//! LLaMA-Factory's training YAML (`llamafactory-cli train FILE`), with its defaults:
//! `hparams/finetuning_args.py` (`finetuning_type` lora, `lora_rank` 8, `lora_alpha` 2 × rank,
//! `lora_dropout` 0, `lora_target` all, `freeze_trainable_layers` 2, `pref_beta` 0.1),
//! `hparams/data_args.py` (`cutoff_len` 2048), `hparams/model_args.py` (`quantization_type`
//! nf4, `double_quantization` true, `flash_attn` auto), gradient checkpointing on unless
//! `disable_gradient_checkpointing` (`model/model_utils/checkpointing.py`), and Trainer's
//! `per_device_train_batch_size` 8. Trainable parameters are cast to fp32 unless `pure_bf16`
//! (`model/adapter.py`). A 4-bit model is not prepared by peft's `prepare_model_for_kbit_training`
//! (LLaMA-Factory never calls it): embeddings, norms and lm_head stay in the compute dtype.

use super::hf::{liger, mixed};
use super::{
    add_offload, assume, assume_gpus, flag, int_text, quant_bits, quant_method, read_with, targets,
    Default, Reader, Reading, Rule, Source, Table,
};
use serde_json::{Map, Value};

const DEFAULTS: &[Default] = &[
    ("batch", "8", "Trainer's per_device_train_batch_size"),
    (
        "optimizer",
        "adamw_torch_fused",
        "Trainer's optim with torch ≥ 2.8 (transformers/training_args.py)",
    ),
    (
        "dtype",
        "bf16",
        "LLaMA-Factory's compute dtype inferred from the checkpoint (bf16)",
    ),
    ("seq", "2048", "LLaMA-Factory's cutoff_len"),
    ("lora_r", "8", "LLaMA-Factory's lora_rank"),
    ("lora_dropout", "0", "LLaMA-Factory's lora_dropout"),
    (
        "target_modules",
        "all-linear",
        "LLaMA-Factory's lora_target (all)",
    ),
    (
        "grad_ckpt",
        "true",
        "LLaMA-Factory's gradient checkpointing (on unless disable_gradient_checkpointing)",
    ),
    (
        "prepare_kbit",
        "false",
        "LLaMA-Factory never calls peft's prepare_model_for_kbit_training: its own prepare_model_for_training (model/model_utils/checkpointing.py) keeps embeddings, norms and lm_head in the compute dtype unless upcast_layernorm",
    ),
];

const VIDEO: &str = "video frames: not planned yet (images are)";
const PACKING: &str =
    "packing without neat_packing: rows of cutoff_len tokens, one attention over each whole row, planned as such (the position ids restarting at each sample, one int64 per token, are not planned)";

/// How the evaluation's generation samples, whatever a config's sampling keys say.
const SAMPLING: &str = "the evaluation's generation is planned sampling with temperature, top-k 50 and top-p 0.7 (LLaMA-Factory's defaults): other processors make other [batch × vocab] buffers";

const TABLE: Table = &[
    ("model_name_or_path", Rule::Model),
    ("stage", Rule::Read(stage)),
    ("finetuning_type", Rule::To("finetuning_type")),
    ("freeze_trainable_layers", Rule::To("freeze_trainable_layers")),
    // The evaluation's generation (predict_with_generate): its length, and the sampling,
    // planned as LLaMA-Factory's defaults.
    ("max_new_tokens", Rule::To("max_new_tokens")),
    (
        "do_sample",
        Rule::NotModeled(SAMPLING),
    ),
    (
        "top_k",
        Rule::NotModeled(SAMPLING),
    ),
    (
        "top_p",
        Rule::NotModeled(SAMPLING),
    ),
    ("temperature", Rule::NoEffect),
    // An export config (`llamafactory-cli export`): the merge of the adapters after training,
    // where it runs and its shards.
    ("export_dir", Rule::Read(|rd, _| rd.set("merge", "1"))),
    ("export_device", Rule::To("export_device")),
    ("export_size", Rule::To("export_size")),
    ("export_legacy_format", Rule::NoEffect),
    (
        "export_quantization_bit",
        Rule::NotModeled("the merged model's quantization for export (GPTQ with its calibration data): not planned"),
    ),
    ("freeze_trainable_modules", Rule::Read(freeze_modules)),
    ("freeze_extra_modules", Rule::NotModeled("extra modules trained in freeze tuning: not planned")),
    ("lora_rank", Rule::To("lora_r")),
    ("lora_alpha", Rule::To("lora_alpha")),
    ("lora_dropout", Rule::To("lora_dropout")),
    ("lora_target", Rule::Read(targets)),
    ("additional_target", Rule::To("modules_to_save")),
    ("use_dora", Rule::To("use_dora")),
    ("use_rslora", Rule::To("use_rslora")),
    ("pissa_init", Rule::Read(pissa)),
    ("pissa_iter", Rule::NoEffect),
    ("loraplus_lr_ratio", Rule::To("loraplus_lr_ratio")),
    ("pref_loss", Rule::Read(pref_loss)),
    ("pref_beta", Rule::To("beta")),
    ("pref_ftx", Rule::NoEffect),
    ("quantization_type", Rule::NoEffect),
    ("quantization_bit", Rule::Read(quantization)),
    ("quantization_method", Rule::Read(|rd, v| quant_method(rd, v, &["bnb", "bitsandbytes"]))),
    ("double_quantization", Rule::To("double_quant")),
    ("cutoff_len", Rule::To("seq")),
    ("disable_gradient_checkpointing", Rule::Read(|rd, v| {
        let off = flag(rd.key(), v)?;
        rd.set("grad_ckpt", if off { "false" } else { "true" })
    })),
    ("use_unsloth_gc", Rule::Read(unsloth_gc)),
    ("flash_attn", Rule::Read(flash_attn)),
    ("bf16", Rule::Read(|rd, v| mixed(rd, v, "bf16"))),
    ("fp16", Rule::Read(|rd, v| mixed(rd, v, "fp16"))),
    ("pure_bf16", Rule::Read(pure_bf16)),
    (
        "upcast_layernorm",
        Rule::NotModeled("norm weights upcast to fp32: planned in the compute dtype"),
    ),
    (
        "upcast_lmhead_output",
        Rule::NotModeled("lm_head's output cast to fp32 by a forward hook: the logits are planned in the compute dtype until the loss upcasts them"),
    ),
    ("enable_liger_kernel", Rule::Read(liger)),
    ("use_unsloth", Rule::NotModeled("Unsloth's patched model (its own kernels and checkpointing): planned as transformers + peft")),
    ("packing", Rule::Read(packing)),
    // data_args.py: neat_packing sets packing (its rows, and the collator's block-diagonal
    // 4D mask, SFTDataCollatorWith4DAttentionMask)
    ("neat_packing", Rule::To("neat_packing")),
    ("image_max_pixels", Rule::To("image_max_pixels")),
    ("image_min_pixels", Rule::To("image_min_pixels")),
    ("freeze_vision_tower", Rule::To("freeze_vision_tower")),
    ("freeze_multi_modal_projector", Rule::To("freeze_multi_modal_projector")),
    ("video_max_pixels", Rule::NotModeled(VIDEO)),
    ("video_min_pixels", Rule::NotModeled(VIDEO)),
    ("video_fps", Rule::NotModeled(VIDEO)),
    ("video_maxlen", Rule::NotModeled(VIDEO)),
    ("trust_remote_code", Rule::NoEffect),
    ("dataset", Rule::NoEffect),
    ("dataset_dir", Rule::NoEffect),
    ("template", Rule::NoEffect),
    ("max_samples", Rule::NoEffect),
    ("overwrite_cache", Rule::NoEffect),
    ("preprocessing_num_workers", Rule::NoEffect),
    ("plot_loss", Rule::NoEffect),
    ("val_size", Rule::NoEffect),
];

fn stage(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some("rm" | "ppo") => Err(format!(
            "{}: {v} (a reward model or PPO) is not planned: sft, pt, dpo and kto are",
            rd.key()
        )),
        Some(s) => rd.set("stage", s),
        None => Err(format!("{}: expected a stage name", rd.key())),
    }
}

/// `pref_loss`: ORPO and SimPO are stages of their own in the plan (no reference pass).
fn pref_loss(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match v.as_str() {
        Some("orpo") => rd.set("stage", "orpo"),
        Some("simpo") => rd.set("stage", "simpo"),
        Some(l) => rd.set("pref_loss", l),
        None => Err(format!("{}: expected a loss name", rd.key())),
    }
}

fn freeze_modules(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if v.as_str() == Some("all") {
        rd.confirms("finetuning_type");
    } else {
        rd.not_modeled("freeze tuning of some modules of the trained layers: planned with every module of those layers");
    }
    Ok(())
}

fn pissa(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if !flag(rd.key(), v)? {
        rd.confirms("init_lora_weights");
        return Ok(());
    }
    // pissa_iter -1 runs a full SVD; other values the randomized one (default 16).
    let full = rd
        .other("pissa_iter")
        .is_some_and(|i| i.as_i64() == Some(-1));
    rd.set(
        "init_lora_weights",
        if full { "pissa" } else { "pissa_niter" },
    )
}

fn quantization(rd: &mut Reader, v: &Value) -> Result<(), String> {
    match int_text(rd.key(), v)? {
        bits @ (2..=6 | 8) => quant_bits(rd, bits, "quantization_type"),
        bits => Err(format!(
            "{}: {bits} bits is not a quantization LLaMA-Factory offers",
            rd.key()
        )),
    }
}

/// Unsloth's offloaded gradient checkpointing: the checkpoints' inputs go to host memory.
fn unsloth_gc(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if flag(rd.key(), v)? {
        rd.set("grad_ckpt", "true")?;
        add_offload(rd, &["activations"])
    } else {
        rd.confirms("offload");
        Ok(())
    }
}

/// `flash_attn`: auto (transformers' default, sdpa), sdpa, fa2, disabled (eager).
fn flash_attn(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let impl_ = match v.as_str() {
        Some("auto" | "sdpa") => "sdpa",
        Some("fa2") => "flash_attention_2",
        Some("disabled") => "eager",
        _ => {
            return Err(format!(
                "{}: expected auto, sdpa, fa2 or disabled, got {v}",
                rd.key()
            ))
        }
    };
    rd.set("attn_impl", impl_)
}

/// `pure_bf16`: bf16 weights, no autocast, the trainable parameters kept in bf16.
fn pure_bf16(rd: &mut Reader, v: &Value) -> Result<(), String> {
    if flag(rd.key(), v)? {
        rd.set("dtype", "bf16")?;
        rd.set("autocast", "none")?;
        rd.set("adapter_dtype", "bf16")
    } else {
        rd.confirms("adapter_dtype");
        Ok(())
    }
}

pub(super) fn read(o: &Map<String, Value>) -> Result<Reading, String> {
    read_with(
        Source::LlamaFactory,
        o,
        DEFAULTS,
        &[TABLE, super::hf::TRAINER],
        |rd| {
            if rd.other("lora_alpha").is_none() {
                let alpha = 2 * rd.r.settings.lora_r;
                assume(
                    rd,
                    "lora_alpha",
                    &alpha.to_string(),
                    "LLaMA-Factory's lora_alpha (2 × lora_rank)",
                )?;
            }
            if rd
                .r
                .settings
                .quant
                .is_some_and(crate::model::Quant::is_4bit)
            {
                let dtype = rd.r.settings.dtype.name();
                assume(
                    rd,
                    "bnb_4bit_quant_storage",
                    dtype,
                    "LLaMA-Factory stores a 4-bit weight in its compute dtype (model/model_utils/quantization.py:173-179, BitsAndBytesConfig(bnb_4bit_quant_storage=model_args.compute_dtype), \"crucial for fsdp+qlora\")",
                )?;
            }
            if rd.r.settings.finetuning_type == crate::model::FinetuningType::Lora
                && rd.other("ddp_find_unused_parameters").is_none()
            {
                assume(
                    rd,
                    "ddp_find_unused_parameters",
                    "false",
                    "LLaMA-Factory turns DDP's find_unused_parameters off for LoRA (hparams/parser.py, get_train_args: \"`ddp_find_unused_parameters` needs to be set as False for LoRA in DDP training\")",
                )?;
            }
            assume_gpus(
                rd,
                "several GPUs (LLaMA-Factory's YAML does not say how many)",
            )
        },
    )
}

/// `packing`: rows of cutoff_len tokens of packed samples, whose position ids restart at each
/// sample; without `neat_packing` one causal attention over each whole row (the all-ones
/// attention mask), planned as rows of cutoff_len tokens; with it, `neat_packing`'s rows.
fn packing(rd: &mut Reader, v: &Value) -> Result<(), String> {
    let neat = rd
        .obj
        .get("neat_packing")
        .map_or(Ok(false), |n| flag("neat_packing", n))?;
    if neat || !flag(rd.key(), v)? {
        rd.r.ignored.push(rd.key().to_string());
    } else {
        rd.not_modeled(PACKING);
    }
    Ok(())
}
