//! What the user chooses for a run: precision, LoRA, training loop, optimizer, attention.
//! [`Settings`] is the typed, validated form; [`RawSettings`] is the JSON schema of
//! `shared/reference/cases.jsonl` (and the CLI's `estimate --jsonl`), parsed into it.

use serde::{Deserialize, Serialize};

use super::names::names;

use super::arch::Target;
use super::dtype::{Dtype, Quant};
use super::error::PlanError;

/// Attention kernel, as `attn_implementation` selects it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttnImpl {
    /// Python matmul + softmax: keeps the B×H×S×S probabilities.
    Eager,
    /// `torch.nn.functional.scaled_dot_product_attention` (cuDNN / flash / mem-efficient kernels).
    Sdpa,
    /// flash-attn 2 (native GQA, O(S) memory).
    FlashAttention2,
}

names!(AttnImpl {
    Eager => "eager",
    Sdpa => "sdpa",
    FlashAttention2 => "flash_attention_2" | "fa2" | "flash",
});

impl AttnImpl {}

/// Optimizer (Trainer's `optim` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Optimizer {
    /// torch.optim.AdamW(fused=True): 2 fp32 states.
    AdamwTorchFused,
    /// torch.optim.AdamW(foreach=True): 2 fp32 states, plus a foreach temporary at the step.
    AdamwTorchForeach,
    /// torch.optim.AdamW for-loop implementation.
    AdamwTorch,
    /// bitsandbytes AdamW8bit: 2 × 1 byte + block constants.
    Adamw8bit,
    /// bitsandbytes paged AdamW 8-bit (states in unified memory).
    PagedAdamw8bit,
    /// bitsandbytes paged AdamW 32-bit.
    PagedAdamw32bit,
    /// Adafactor: factored second moment, no first moment.
    Adafactor,
    /// Plain SGD: no state.
    Sgd,
    /// SGD with momentum: 1 fp32 state.
    SgdMomentum,
}

names!(Optimizer {
    AdamwTorchFused => "adamw_torch_fused" | "adamw_fused",
    AdamwTorchForeach => "adamw_torch_foreach" | "adamw_foreach",
    AdamwTorch => "adamw_torch" | "adamw" | "adamw_torch_forloop" | "adamw_forloop",
    Adamw8bit => "adamw_8bit" | "adamw_bnb_8bit" | "adamw8bit",
    PagedAdamw8bit => "paged_adamw_8bit",
    PagedAdamw32bit => "paged_adamw_32bit",
    Adafactor => "adafactor",
    Sgd => "sgd",
    SgdMomentum => "sgd_momentum",
});

impl Optimizer {}

/// Modules trained in full next to the adapters (peft `modules_to_save`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SavedModule {
    /// The output projection (vocab × hidden).
    LmHead,
    /// The input embedding (vocab × hidden).
    EmbedTokens,
}

names!(SavedModule {
    LmHead => "lm_head",
    EmbedTokens => "embed_tokens",
});

/// A validated training configuration.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// Storage type of the frozen base weights (for 4-bit: of the non-quantized parts before
    /// `prepare_model_for_kbit_training`).
    pub dtype: Dtype,
    /// 4-bit quantization of the decoder Linear layers, if any.
    pub quant: Option<Quant>,
    /// bitsandbytes double quantization of the absmax constants.
    pub double_quant: bool,
    /// `prepare_model_for_kbit_training` (casts embeddings, norms and lm_head to fp32).
    pub prepare_kbit: bool,
    /// Mixed precision: `torch.autocast` dtype (Trainer `bf16=True` / `fp16=True`).
    pub autocast: Option<Dtype>,
    /// Adapter weight dtype (peft keeps fp32 by default).
    pub adapter_dtype: Dtype,
    /// Micro-batch size.
    pub batch: u64,
    /// Padded sequence length of the longest batch.
    pub seq: u64,
    /// LoRA rank.
    pub lora_r: u64,
    /// LoRA alpha (scaling only; no memory effect).
    pub lora_alpha: f64,
    /// LoRA dropout probability.
    pub lora_dropout: f64,
    /// Canonical targets adapted.
    pub targets: Vec<Target>,
    /// Fully trained modules.
    pub modules_to_save: Vec<SavedModule>,
    /// Gradient accumulation steps (no memory effect on activations).
    pub grad_accum: u64,
    /// Gradient checkpointing (non-reentrant).
    pub grad_ckpt: bool,
    /// Attention implementation.
    pub attn_impl: AttnImpl,
    /// An explicit padded 4-D attention mask is materialised.
    pub padded_mask: bool,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// A fused / chunked linear cross-entropy (e.g. Liger's) that never materialises the full
    /// [tokens × vocab] logits.
    #[serde(default)]
    pub fused_ce: bool,
    /// Multi-GPU layout (one GPU by default).
    #[serde(default)]
    pub parallel: super::parallel::Parallel,
}

/// Supported ranges (beyond these the planner refuses rather than extrapolating nonsense).
pub const MAX_BATCH: u64 = 1 << 16;
/// Longest supported sequence.
pub const MAX_SEQ: u64 = 1 << 24;
/// Largest supported rank.
pub const MAX_RANK: u64 = 1 << 16;

impl Default for Settings {
    fn default() -> Self {
        Settings {
            dtype: Dtype::Bf16,
            quant: None,
            double_quant: true,
            prepare_kbit: true,
            autocast: None,
            adapter_dtype: Dtype::Fp32,
            batch: 1,
            seq: 1024,
            lora_r: 16,
            lora_alpha: 32.0,
            lora_dropout: 0.05,
            targets: Target::ALL.to_vec(),
            modules_to_save: vec![],
            grad_accum: 1,
            grad_ckpt: false,
            attn_impl: AttnImpl::Sdpa,
            padded_mask: false,
            optimizer: Optimizer::AdamwTorchFused,
            fused_ce: false,
            parallel: Default::default(),
        }
    }
}

impl Settings {
    /// Range checks independent of the architecture.
    pub fn validate(&self) -> Result<(), PlanError> {
        let bad = |field: &'static str, why: String| Err(PlanError::InvalidSetting { field, why });
        if self.batch == 0 || self.batch > MAX_BATCH {
            return bad(
                "batch",
                format!("{} must be between 1 and {MAX_BATCH}", self.batch),
            );
        }
        if self.seq == 0 || self.seq > MAX_SEQ {
            return bad(
                "seq",
                format!("{} must be between 1 and {MAX_SEQ}", self.seq),
            );
        }
        if self.lora_r == 0 || self.lora_r > MAX_RANK {
            return bad(
                "lora_r",
                format!("{} must be between 1 and {MAX_RANK}", self.lora_r),
            );
        }
        if !(0.0..1.0).contains(&self.lora_dropout) {
            return bad(
                "lora_dropout",
                format!("{} must be in [0, 1)", self.lora_dropout),
            );
        }
        if !self.lora_alpha.is_finite() {
            return bad("lora_alpha", "must be a finite number".into());
        }
        if self.grad_accum == 0 {
            return bad("grad_accum", "must be at least 1".into());
        }
        self.parallel.validate(self.grad_ckpt)?;
        if self.targets.is_empty() && self.modules_to_save.is_empty() {
            return bad(
                "target_modules",
                "nothing is trainable: choose at least one target module".into(),
            );
        }
        Ok(())
    }

    /// The base-weights choice as one name: `bf16`, `fp16`, `fp32`, or `nf4` / `fp4` for 4-bit.
    pub fn base_weights(&self) -> &'static str {
        match self.quant {
            Some(q) => q.name(),
            None => self.dtype.name(),
        }
    }

    /// Sets the base weights from [`Settings::base_weights`]'s names; false (and no change) for an
    /// unknown name. Choosing 4-bit sets the canonical base dtype (bf16: the non-quantized parts
    /// are fp32 after prepare_model_for_kbit_training anyway), so every state has one name.
    pub fn set_base_weights(&mut self, name: &str) -> bool {
        if let Some(q) = Quant::parse(name) {
            self.quant = Some(q);
            self.dtype = Dtype::Bf16;
            true
        } else if let Some(d) = Dtype::parse(name) {
            self.quant = None;
            self.dtype = d;
            true
        } else {
            false
        }
    }

    /// Tokens in one micro-batch.
    pub fn tokens(&self) -> u128 {
        self.batch as u128 * self.seq as u128
    }
}

/// The settings object of `shared/reference/cases.jsonl` (unknown fields ignored).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawSettings {
    /// Base dtype name.
    pub dtype: Option<String>,
    /// `nf4` / `fp4` / null.
    pub quant: Option<String>,
    /// Double quantization.
    pub double_quant: Option<bool>,
    /// prepare_model_for_kbit_training.
    pub prepare_kbit: Option<bool>,
    /// Autocast dtype or null.
    pub autocast: Option<String>,
    /// autocast_adapter_dtype (true = fp32 adapters).
    pub autocast_adapter_dtype: Option<bool>,
    /// Adapter dtype name (overrides autocast_adapter_dtype).
    pub adapter_dtype: Option<String>,
    /// Micro-batch.
    pub batch: Option<u64>,
    /// Sequence length.
    pub seq: Option<u64>,
    /// Rank.
    pub lora_r: Option<u64>,
    /// Alpha.
    pub lora_alpha: Option<f64>,
    /// Dropout.
    pub lora_dropout: Option<f64>,
    /// `all-linear` or a list.
    pub target_modules: Option<serde_json::Value>,
    /// Explicit list of module names.
    pub target_modules_list: Option<Vec<String>>,
    /// List of module names or null.
    pub modules_to_save: Option<Vec<String>>,
    /// Gradient accumulation steps.
    pub grad_accum: Option<u64>,
    /// Gradient checkpointing.
    pub grad_ckpt: Option<bool>,
    /// eager / sdpa / flash_attention_2.
    pub attn_impl: Option<String>,
    /// Optimizer name.
    pub optimizer: Option<String>,
    /// `none` / `padded`.
    pub attention_mask: Option<String>,
    /// Fused / chunked cross-entropy.
    pub fused_ce: Option<bool>,
    /// Multi-GPU layout.
    pub parallel: Option<super::parallel::Parallel>,
}

impl RawSettings {
    /// Parses into validated [`Settings`]; missing fields take the defaults.
    pub fn into_settings(self) -> Result<Settings, PlanError> {
        let d = Settings::default();
        let unknown = |field: &'static str, value: &str, allowed: &str| PlanError::InvalidSetting {
            field,
            why: format!("unknown value {value:?} (expected one of {allowed})"),
        };
        let dtype = match &self.dtype {
            None => d.dtype,
            Some(s) => Dtype::parse(s).ok_or_else(|| unknown("dtype", s, "fp32, bf16, fp16"))?,
        };
        let quant = match self.quant.as_deref() {
            None | Some("") | Some("none") | Some("null") => None,
            Some(s) => Some(Quant::parse(s).ok_or_else(|| unknown("quant", s, "nf4, fp4, none"))?),
        };
        let autocast = match self.autocast.as_deref() {
            None | Some("") | Some("none") | Some("null") | Some("no") => None,
            Some(s) => match Dtype::parse(s) {
                Some(Dtype::Fp32) | None => return Err(unknown("autocast", s, "bf16, fp16, none")),
                x => x,
            },
        };
        let adapter_dtype = match (&self.adapter_dtype, self.autocast_adapter_dtype) {
            (Some(s), _) => {
                Dtype::parse(s).ok_or_else(|| unknown("adapter_dtype", s, "fp32, bf16, fp16"))?
            }
            (None, Some(false)) => dtype,
            (None, _) => Dtype::Fp32,
        };
        let targets = parse_targets(
            self.target_modules_list.as_ref(),
            self.target_modules.as_ref(),
        )?;
        let mut modules_to_save = vec![];
        for m in self.modules_to_save.unwrap_or_default() {
            modules_to_save.push(match m.trim() {
                "lm_head" => SavedModule::LmHead,
                "embed_tokens" => SavedModule::EmbedTokens,
                other => return Err(unknown("modules_to_save", other, "lm_head, embed_tokens")),
            });
        }
        let attn_impl = match &self.attn_impl {
            None => d.attn_impl,
            Some(s) => AttnImpl::parse(s)
                .ok_or_else(|| unknown("attn_impl", s, "eager, sdpa, flash_attention_2"))?,
        };
        let optimizer = match &self.optimizer {
            None => d.optimizer,
            Some(s) => Optimizer::parse(s).ok_or_else(|| {
                unknown("optimizer", s, "adamw_torch_fused, adamw_torch_foreach, adamw_torch, adamw_8bit, paged_adamw_8bit, paged_adamw_32bit, adafactor, sgd, sgd_momentum")
            })?,
        };
        let padded_mask = match self.attention_mask.as_deref() {
            None | Some("none") | Some("") => false,
            Some("padded") => true,
            Some(s) => return Err(unknown("attention_mask", s, "none, padded")),
        };
        let s = Settings {
            dtype,
            quant,
            double_quant: self.double_quant.unwrap_or(true),
            prepare_kbit: self.prepare_kbit.unwrap_or(true),
            autocast,
            adapter_dtype,
            batch: self.batch.unwrap_or(d.batch),
            seq: self.seq.unwrap_or(d.seq),
            lora_r: self.lora_r.unwrap_or(d.lora_r),
            lora_alpha: self.lora_alpha.unwrap_or(d.lora_alpha),
            lora_dropout: self.lora_dropout.unwrap_or(d.lora_dropout),
            targets,
            modules_to_save,
            grad_accum: self.grad_accum.unwrap_or(1),
            grad_ckpt: self.grad_ckpt.unwrap_or(false),
            attn_impl,
            padded_mask,
            optimizer,
            fused_ce: self.fused_ce.unwrap_or(false),
            parallel: self.parallel.unwrap_or_default(),
        };
        s.validate()?;
        Ok(s)
    }
}

/// Parses a target list: `all-linear`, or names such as `q_proj`, `q`, `qkv_proj`, `gate_up_proj`.
pub fn parse_target_names<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<Target>, PlanError> {
    let mut out = vec![];
    for n in names {
        let n = n.trim();
        if n.is_empty() {
            continue;
        }
        match n.to_ascii_lowercase().as_str() {
            "all-linear" | "all_linear" | "all" => out.extend(Target::ALL),
            "qkv" | "qkv_proj" => out.extend([Target::Q, Target::K, Target::V]),
            "gate_up" | "gate_up_proj" => out.extend([Target::Gate, Target::Up]),
            _ => out.push(Target::parse(n).ok_or_else(|| PlanError::InvalidSetting {
                field: "target_modules",
                why: format!(
                    "unknown module {n:?} (expected q, k, v, o, gate, up, down or all-linear)"
                ),
            })?),
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn parse_targets(
    list: Option<&Vec<String>>,
    spec: Option<&serde_json::Value>,
) -> Result<Vec<Target>, PlanError> {
    if let Some(list) = list {
        return parse_target_names(list.iter().map(String::as_str));
    }
    match spec {
        None | Some(serde_json::Value::Null) => Ok(Target::ALL.to_vec()),
        Some(serde_json::Value::String(s)) => parse_target_names(s.split(',')),
        Some(serde_json::Value::Array(items)) => {
            let mut names = vec![];
            for it in items {
                match it.as_str() {
                    Some(s) => names.push(s),
                    None => {
                        return Err(PlanError::InvalidSetting {
                            field: "target_modules",
                            why: "list items must be strings".into(),
                        })
                    }
                }
            }
            parse_target_names(names)
        }
        Some(_) => Err(PlanError::InvalidSetting {
            field: "target_modules",
            why: "must be a string or a list of strings".into(),
        }),
    }
}
