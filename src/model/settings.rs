//! What the user chooses for a run: precision, LoRA, training loop, optimizer, attention.
//! [`Settings`] is the typed, validated form; how each setting is spelled in JSON, links, the CLI
//! and the page is declared once in `crate::formats::fields`.

use serde::{Deserialize, Serialize};

use super::names::names;

use super::arch::Target;
use super::dtype::{Dtype, Quant, QuantStorage};
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
    /// bitsandbytes AdamW with 8-bit states (`crate::model::bnb_adamw`).
    Adamw8bit,
    /// bitsandbytes AdamW, 8-bit, its states of 1e5 values or more in CUDA managed memory.
    PagedAdamw8bit,
    /// bitsandbytes AdamW, fp32 states, those of 1e5 values or more in CUDA managed memory.
    PagedAdamw32bit,
    /// torchao's AdamW4bit (`adamw_torch_4bit`): 4-bit states, one fp32 scale per 256 values
    /// (`crate::model::torchao_adamw`).
    AdamwTorch4bit,
    /// torchao's AdamW8bit (`adamw_torch_8bit`): 8-bit states, one fp32 scale per 256 values.
    AdamwTorch8bit,
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
    AdamwTorch4bit => "adamw_torch_4bit",
    AdamwTorch8bit => "adamw_torch_8bit",
    Adafactor => "adafactor",
    Sgd => "sgd",
    SgdMomentum => "sgd_momentum",
});

impl Optimizer {}

/// What a run trains (LLaMA-Factory's `finetuning_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinetuningType {
    /// peft adapters on a frozen base (LoRA, QLoRA, DoRA).
    Lora,
    /// Every parameter trainable, no peft: a gradient and optimizer states per parameter, in the
    /// parameter's dtype (fp32 master weights when autocast computes in 16 bits).
    Full,
    /// Every parameter of some decoder layers trainable, the rest frozen
    /// ([`Settings::freeze_trainable_layers`]: LLaMA-Factory's freeze tuning).
    Freeze,
}

names!(FinetuningType {
    Lora => "lora",
    Full => "full",
    Freeze => "freeze",
});

/// The training objective (LLaMA-Factory's `stage`; the TRL trainer that runs it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stage {
    /// Supervised fine-tuning: the causal-LM loss on `batch` sequences.
    Sft,
    /// Direct preference optimization (TRL `DPOTrainer`): `batch` preference pairs, so the
    /// model sees `2 × batch` sequences (chosen, then rejected), and a reference pass.
    Dpo,
    /// ORPO (TRL `ORPOTrainer`, LLaMA-Factory `pref_loss: orpo`): pairs, no reference.
    Orpo,
    /// SimPO (TRL `CPOTrainer` `loss_type="simpo"`, LLaMA-Factory `pref_loss: simpo`): pairs, no
    /// reference.
    Simpo,
    /// KTO (TRL `KTOTrainer`): `batch` unpaired examples, a KL pass over mismatched
    /// completions and a reference pass.
    Kto,
    /// GRPO (TRL `GRPOTrainer`): each step scores generated completions (the old policy's and
    /// the reference's log-probs where the settings need them) and trains on `batch` of them.
    Grpo,
}

names!(Stage {
    Sft => "sft" | "pt",
    Dpo => "dpo",
    Orpo => "orpo",
    Simpo => "simpo" | "cpo",
    Kto => "kto",
    Grpo => "grpo",
});

impl Stage {
    /// The method's name as its papers and trainers write it (`DPO`, `SimPO`).
    pub fn label(self) -> &'static str {
        match self {
            Stage::Sft => "SFT",
            Stage::Dpo => "DPO",
            Stage::Orpo => "ORPO",
            Stage::Simpo => "SimPO",
            Stage::Kto => "KTO",
            Stage::Grpo => "GRPO",
        }
    }
}

/// The preference loss (LLaMA-Factory's `pref_loss`, TRL's `loss_type`). Every one of them is
/// a handful of per-sequence scalars; what changes memory is whether it needs a reference
/// model ([`PrefLoss::reference_free`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrefLoss {
    /// `-logsigmoid(β·Δ)` (DPO).
    Sigmoid,
    /// `relu(1 − β·Δ)`.
    Hinge,
    /// IPO's squared loss.
    Ipo,
    /// The rest of TRL's DPO losses that use a reference (robust, exo_pair, nca_pair, bco_pair,
    /// sppo_hard, aot, aot_unpaired, apo_zero, apo_down, discopop, LLaMA-Factory's kto_pair).
    OtherWithReference,
    /// ORPO's odds-ratio loss: no reference.
    Orpo,
    /// SimPO: no reference.
    Simpo,
}

names!(PrefLoss {
    Sigmoid => "sigmoid",
    Hinge => "hinge",
    Ipo => "ipo",
    OtherWithReference => "robust" | "exo_pair" | "nca_pair" | "bco_pair" | "sppo_hard" | "aot" | "aot_unpaired" | "apo_zero" | "apo_down" | "discopop" | "kto_pair",
    Orpo => "orpo",
    Simpo => "simpo",
});

impl PrefLoss {
    /// Whether the loss compares against no reference model (ORPO, SimPO).
    pub fn reference_free(self) -> bool {
        matches!(self, PrefLoss::Orpo | PrefLoss::Simpo)
    }
}

/// GRPO's loss aggregation (TRL `GRPOConfig.loss_type`, `trl/trainer/grpo_trainer.py:3153-3180`):
/// each is a few `[rows, completion]` fp32 tensors; they differ in the reductions they run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrpoLoss {
    /// The mean over each sequence's tokens, then over the sequences.
    Grpo,
    /// The sum over the batch's tokens divided by rows × `max_completion_length`.
    DrGrpo,
    /// The sum over the tokens divided by the generation batch's token count (TRL 1.16's
    /// default).
    Dapo,
    /// The mean over the batch's tokens.
    Bnpo,
}

names!(GrpoLoss {
    Grpo => "grpo",
    DrGrpo => "dr_grpo",
    Dapo => "dapo",
    Bnpo => "bnpo",
});

/// Where a GRPO step's completions are generated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Generation {
    /// transformers' `generate` on the training GPU (TRL's `use_vllm=False`, its default): the
    /// prefill and one forward per new token, the KV cache growing, the sampling buffers.
    Hf,
    /// vLLM on other GPUs (TRL's `vllm_mode="server"`): nothing is generated on the training
    /// GPU; the weight sync to the server runs on it.
    VllmServer,
    /// vLLM in the training process (TRL's `vllm_mode="colocate"`): it takes
    /// `vllm_gpu_memory_utilization` of the card's memory for its weights, activations, CUDA
    /// graphs and KV cache, through training too unless its sleep mode frees them.
    VllmColocate,
}

names!(Generation {
    Hf => "hf" | "generate" | "transformers",
    VllmServer => "vllm_server" | "server",
    VllmColocate => "vllm_colocate" | "colocate" | "vllm",
});

/// How the trainer turns the last hidden states into the loss: the per-token log-probabilities
/// of the scored tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Logits {
    /// TRL ≥ 1's fused LM head (`add_fused_lm_head`, `trl/trainer/utils.py:1548-1698`: SFTTrainer,
    /// DPOTrainer and KTOTrainer): the log-prob of each scored token from
    /// `[4096 tokens × 32768 vocab]` tiles, never the `[sequences, seq, vocab]` logits.
    Fused,
    /// The full logits in fp32 and a log-softmax over them: transformers' Trainer (and so
    /// LLaMA-Factory, axolotl, ms-swift), TRL 0.x, and TRL's ORPO and CPO (SimPO) trainers.
    Full,
}

names!(Logits {
    Fused => "fused" | "trl",
    Full => "full" | "logits" | "llamafactory" | "trl0",
});

/// How peft initialises the adapters (`LoraConfig.init_lora_weights`). Only the
/// initialisation differs; the step trains the same A and B.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LoraInit {
    /// Kaiming-uniform A, zero B (peft's default, `True`).
    Default,
    /// Gaussian A, zero B.
    Gaussian,
    /// PiSSA: A and B from the principal singular vectors of W (a full SVD per adapted weight),
    /// W replaced by the residual.
    Pissa,
    /// PiSSA with a fast randomized SVD (`pissa_niter_N`).
    PissaFast,
    /// OLoRA: A and B from a QR decomposition of W, W replaced by the residual.
    Olora,
    /// LoftQ: quantization-aware initialisation.
    Loftq,
    /// EVA: data-driven initialisation from activations before training.
    Eva,
    /// CorDA: data-driven initialisation from activations before training.
    Corda,
    /// Orthogonal A.
    Orthogonal,
    /// A and B both random (`False`: the adapter is not an identity at the start).
    Random,
}

names!(LoraInit {
    Default => "true" | "default" | "kaiming",
    Gaussian => "gaussian",
    Pissa => "pissa",
    PissaFast => "pissa_niter",
    Olora => "olora",
    Loftq => "loftq",
    Eva => "eva",
    Corda => "corda",
    Orthogonal => "orthogonal",
    Random => "false",
});

impl LoraInit {
    /// Reads peft's spellings, `pissa_niter_16` included.
    pub fn read(v: &str) -> Option<LoraInit> {
        let n = v.trim().to_ascii_lowercase();
        if n.starts_with("pissa_niter_") && n["pissa_niter_".len()..].parse::<u32>().is_ok() {
            return Some(LoraInit::PissaFast);
        }
        LoraInit::parse(&n)
    }
}

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

/// How transformers runs the routed experts (`experts_implementation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertsImpl {
    /// `torch._grouped_mm` over the token–expert pairs sorted by expert (transformers' default).
    GroupedMm,
    /// The Python loop over the experts that received tokens.
    Eager,
    /// A weight copy per token–expert pair and `bmm` (kept for backward: unusable for training).
    BatchedMm,
}

names!(ExpertsImpl {
    GroupedMm => "grouped_mm" | "grouped",
    Eager => "eager",
    BatchedMm => "batched_mm" | "batched",
});

/// How transformers holds a mixture-of-experts model's routed experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertsLayout {
    /// transformers 5: fused 3-D parameters (`gate_up_proj`, `down_proj`) run by
    /// `experts_implementation`; not `nn.Linear`, so bitsandbytes leaves them unquantized.
    Fused,
    /// transformers 4 (e.g. 4.48): one `nn.Linear` per expert projection (Mixtral's `w1`, `w3`,
    /// `w2`) and the router an `nn.Linear`, run by a Python loop over the experts; bitsandbytes
    /// quantizes them like any Linear layer.
    PerExpert,
}

names!(ExpertsLayout {
    Fused => "fused" | "transformers5",
    PerExpert => "per_expert" | "linear" | "transformers4",
});

/// How transformers' causal-LM loss lines up the logits with the next tokens
/// (`ForCausalLMLoss`, `transformers/loss/loss_utils.py`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossShift {
    /// transformers ≥ 4.49: the labels are padded by one and shifted
    /// (`labels = nn.functional.pad(labels, (0, 1), value=ignore_index)`); the fp32 logits are
    /// used whole.
    Labels,
    /// transformers < 4.49 (4.46–4.48: `loss_utils.py:36-39`, `shift_logits =
    /// logits[..., :-1, :].contiguous()` after `logits.float()`; earlier versions did the same in
    /// the model's forward): an fp32 copy of the logits without their last position, whose
    /// gradient comes back as a zero-filled tensor of the full size.
    Logits,
}

names!(LossShift {
    Labels => "labels" | "transformers5",
    Logits => "logits" | "transformers4",
});

/// A fused expert parameter that peft's `target_parameters` adapts (`ParamWrapper`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpertParam {
    /// `mlp.experts.gate_up_proj` `[E, 2I, H]`.
    GateUp,
    /// `mlp.experts.down_proj` `[E, H, I]`.
    Down,
}

names!(ExpertParam {
    GateUp => "gate_up_proj" | "mlp.experts.gate_up_proj" | "experts.gate_up_proj",
    Down => "down_proj" | "mlp.experts.down_proj" | "experts.down_proj",
});

/// Parses a `target_parameters` list (`experts` = both fused expert parameters).
pub fn parse_expert_params<'a>(
    names: impl IntoIterator<Item = &'a str>,
) -> Result<Vec<ExpertParam>, String> {
    let mut out = vec![];
    for n in names {
        let n = n.trim();
        match n.to_ascii_lowercase().as_str() {
            "" | "none" | "null" => continue,
            "experts" | "mlp.experts" | "all" => out.extend(ExpertParam::ALL),
            _ => out.push(ExpertParam::parse(n).ok_or_else(|| {
                format!(
                    "unknown expert parameter {n:?} (expected gate_up_proj, down_proj or experts)"
                )
            })?),
        }
    }
    super::order::sort(&mut out);
    out.dedup();
    Ok(out)
}

/// Which of Liger-Kernel's decoder kernels replace transformers' modules, as
/// `apply_liger_kernel_to_<model_type>(rms_norm=…, swiglu=…, rope=…)` installs them
/// (liger-kernel 0.8.5 `transformers/monkey_patch.py`; LLaMA-Factory's `enable_liger_kernel` and
/// Trainer's `use_liger_kernel` turn on all three with the fused linear cross-entropy).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Liger {
    /// `LigerRMSNorm`: saves its input and an fp32 inverse RMS per row; its backward writes the
    /// input's gradient into the incoming one.
    pub rms_norm: bool,
    /// `LigerSwiGLUMLP`: `silu(gate) * up` in one kernel that saves gate and up only; its
    /// backward writes their gradients into them.
    pub swiglu: bool,
    /// `liger_rotary_pos_emb`: q and k rotated in place, cos and sin saved.
    pub rope: bool,
}

impl Liger {
    /// None of the kernels.
    pub const NONE: Liger = Liger {
        rms_norm: false,
        swiglu: false,
        rope: false,
    };
    /// All three, as `enable_liger_kernel` / `use_liger_kernel` install them.
    pub const ALL: Liger = Liger {
        rms_norm: true,
        swiglu: true,
        rope: true,
    };

    /// Whether any kernel is on.
    pub fn any(self) -> bool {
        self.rms_norm || self.swiglu || self.rope
    }
}

/// A fused linear cross-entropy in place of lm_head and the loss: which library's, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FusedCe {
    /// lm_head's full `[tokens × vocab]` logits, then the loss.
    #[default]
    Off,
    /// Liger-Kernel's fused linear cross-entropy (`LigerFusedLinearCrossEntropyFunction`): the
    /// rows in chunks, each chunk's logits turned into the gradients in the forward, which keeps
    /// the hidden states' gradient for backward.
    Liger,
    /// Cut cross-entropy (Apple's `cut_cross_entropy`, as axolotl's plugin installs it from
    /// axolotl-ai-cloud/ml-cross-entropy): the log-sum-exp of every scored row in the forward,
    /// the gradients computed in the backward; no logits are stored.
    Cce,
}

names!(FusedCe {
    Off => "off" | "false" | "0" | "no" | "none",
    Liger => "liger" | "true" | "1" | "yes" | "on",
    Cce => "cce" | "cut_cross_entropy",
});

impl FusedCe {
    /// Whether the logits are fused away (either library).
    pub fn any(self) -> bool {
        self != FusedCe::Off
    }
}

/// Reads `fused_ce` as a JSON boolean (true: Liger's, the setting's meaning before cut
/// cross-entropy) or one of the names.
impl<'de> Deserialize<'de> for FusedCe {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Bool(bool),
            Text(String),
        }
        // (A boolean is read as its name: the aliases `true` and `false`.)
        let t = match Raw::deserialize(d)? {
            Raw::Bool(b) => b.to_string(),
            Raw::Text(t) => t,
        };
        FusedCe::parse(&t).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "fused_ce: unknown {t:?} (expected {})",
                FusedCe::choices()
            ))
        })
    }
}

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
    /// The dtype a packed 4-bit weight is stored in (`bnb_4bit_quant_storage`): a float one lets
    /// FSDP shard the 4-bit weights with the rest of their layer.
    pub quant_storage: QuantStorage,
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
    /// Padding-free packing: the micro-batch's `batch` samples of `seq` tokens flattened into
    /// one row of `batch × seq` tokens, with no attention mask and position ids that restart at
    /// every packed document (transformers' `DataCollatorWithFlattening`, TRL's `packing=True`
    /// with its default `bfd` strategy or `padding_free=True`). The step runs on that one row
    /// ([`Settings::as_run`]); sdpa then builds the documents' block-causal mask.
    #[serde(default)]
    pub packing: bool,
    /// LLaMA-Factory's `neat_packing` under sdpa: rows of `seq` tokens of packed documents with
    /// their position ids, and the block-diagonal causal 4-D mask its collator builds on the host
    /// in the compute dtype (`prepare_4d_attention_mask`, `data/collator.py`) given to sdpa as
    /// it is. Under flash-attention-2 LLaMA-Factory unpads one row instead: padding-free
    /// packing ([`Settings::as_run`]).
    #[serde(default)]
    pub neat_packing: bool,
    /// The documents of the packed row the step runs ([`Settings::as_run`] sets it: one per
    /// packed sample, two in a row of one sample — the fewest that make a row packed; 0 in the
    /// settings as given). Not a setting.
    #[serde(skip)]
    pub packed_documents: u64,
    /// Optimizer.
    pub optimizer: Optimizer,
    /// A fused linear cross-entropy (Liger's or cut cross-entropy) that never materialises the
    /// full [tokens × vocab] logits.
    #[serde(default)]
    pub fused_ce: FusedCe,
    /// Liger-Kernel's kernels in the decoder layers (its fused linear cross-entropy is
    /// `fused_ce`).
    #[serde(default)]
    pub liger: Liger,
    /// peft's DoRA (`use_dora=True`): a magnitude vector per adapted Linear, the weight norm of
    /// `W + B·A` in every forward (planned by the step program only).
    #[serde(default)]
    pub use_dora: bool,
    /// rsLoRA (`use_rslora`): scaling α/√r instead of α/r (no memory effect).
    #[serde(default)]
    pub use_rslora: bool,
    /// How peft initialises the adapters (PiSSA, OLoRA, …): an initialisation-time cost only.
    #[serde(default = "default_lora_init")]
    pub init_lora_weights: LoraInit,
    /// LoRA+ (`loraplus_lr_ratio`, 0 = off): B's learning rate a multiple of A's, two
    /// optimizer parameter groups (no memory effect).
    #[serde(default)]
    pub loraplus_lr_ratio: f64,
    /// LoRA-FA (peft's `create_lorafa_optimizer`): lora_A frozen after initialisation, so A
    /// takes no gradient or optimizer state and its input is not saved for A's gradient.
    #[serde(default)]
    pub lora_fa: bool,
    /// What the run trains: peft adapters, every parameter, or some layers' parameters.
    #[serde(default = "default_finetuning_type")]
    pub finetuning_type: FinetuningType,
    /// Freeze tuning: the last N decoder layers are trained (the first |N| when negative), as
    /// LLaMA-Factory's `freeze_trainable_layers` (default 2).
    #[serde(default = "default_freeze_layers")]
    pub freeze_trainable_layers: i64,
    /// The training objective: SFT or a preference method.
    #[serde(default = "default_stage")]
    pub stage: Stage,
    /// The preference loss (DPO: TRL `loss_type`, LLaMA-Factory `pref_loss`).
    #[serde(default = "default_pref_loss")]
    pub pref_loss: PrefLoss,
    /// β: for a preference loss a scale (no memory effect); for GRPO the KL weight, whose
    /// non-zero value adds a reference pass. `None`: the trainer's default ([`Settings::beta_run`]).
    #[serde(default)]
    pub beta: Option<f64>,
    /// GRPO's loss aggregation (TRL `loss_type`).
    #[serde(default = "default_grpo_loss")]
    pub grpo_loss: GrpoLoss,
    /// GRPO: completions generated per prompt (TRL `num_generations`, default 8); the generation
    /// batch must be a multiple of it.
    #[serde(default = "default_num_generations")]
    pub num_generations: u64,
    /// GRPO: completion tokens of each sequence (TRL `max_completion_length`); the rest of `seq`
    /// is the prompt. 0: half of `seq`.
    #[serde(default)]
    pub max_completion_length: u64,
    /// GRPO: policy updates per generation (TRL `num_iterations`, μ); above 1 the old policy's
    /// log-probs are scored before training.
    #[serde(default = "default_one")]
    pub num_iterations: u64,
    /// GRPO: micro-steps each generation serves (TRL `steps_per_generation`); `None`: the
    /// gradient accumulation, or what `generation_batch_size` makes it. The generation batch
    /// on one GPU is `batch × steps_per_generation` ([`Settings::steps_per_generation_run`]).
    #[serde(default)]
    pub steps_per_generation: Option<u64>,
    /// GRPO: sequences generated at once over every GPU (TRL `generation_batch_size`, a
    /// multiple of `batch × GPUs`); exclusive with `steps_per_generation`, as in TRL.
    #[serde(default)]
    pub generation_batch_size: Option<u64>,
    /// GRPO: where the completions are generated.
    #[serde(default = "default_generation")]
    pub generation: Generation,
    /// GRPO with vLLM colocated: the fraction of the card's memory vLLM takes (TRL's
    /// `vllm_gpu_memory_utilization`, 0.3 by default).
    #[serde(default = "default_vllm_utilization")]
    pub vllm_gpu_memory_utilization: f64,
    /// GRPO with vLLM colocated: TRL's `vllm_enable_sleep_mode` (vLLM's memory freed between
    /// generations).
    #[serde(default)]
    pub vllm_enable_sleep_mode: bool,
    /// GRPO with vLLM: TRL's `vllm_importance_sampling_correction` (on by default), which
    /// scores the old policy's log-probs in every step to correct for vLLM's sampling.
    #[serde(default = "default_true")]
    pub vllm_importance_sampling_correction: bool,
    /// TRL `precompute_ref_log_probs`: the reference log-probs are computed once before
    /// training (a no-grad pass over the batch), so the step has no reference pass.
    #[serde(default)]
    pub precompute_ref_log_probs: bool,
    /// Prompt tokens of each preference sequence (the rest of `seq` is the completion, whose
    /// tokens are scored); 0 = half of `seq`.
    #[serde(default)]
    pub max_prompt_length: u64,
    /// TRL's `completion_only_loss` on a prompt-completion dataset: SFTTrainer's labels are -100
    /// over each sample's prompt (`max_prompt_length` tokens, 0 = half of `seq`), and its fused
    /// LM head scores only the completion.
    #[serde(default)]
    pub completion_only_loss: bool,
    /// TRL's `disable_dropout`: every `nn.Dropout`, LoRA's included, gets `p = 0`. `None`: the
    /// trainer's default (on for preference trainers, off for GRPO; [`Settings::dropout_run`]).
    #[serde(default)]
    pub disable_dropout: Option<bool>,
    /// How the scored tokens' log-probs are computed (TRL's fused head or the full logits);
    /// `None`: what the stage's usual trainer does ([`Settings::logits_run`]).
    #[serde(default, alias = "pref_logits")]
    pub logits: Option<Logits>,
    /// Multi-GPU layout (one GPU by default).
    #[serde(default)]
    pub parallel: super::parallel::Parallel,
    /// DistributedDataParallel's `find_unused_parameters` (Trainer's
    /// `ddp_find_unused_parameters`); `None`: Trainer's choice ([`Settings::ddp_finds_unused`]).
    #[serde(default)]
    pub ddp_find_unused_parameters: Option<bool>,
    /// DistributedDataParallel's `bucket_cap_mb` (Trainer's `ddp_bucket_cap_mb`); `None`:
    /// PyTorch's 25 MiB, with a first bucket of 1 MiB ([`Settings::ddp_bucket_caps`]).
    #[serde(default)]
    pub ddp_bucket_cap_mb: Option<u64>,
    /// DistributedDataParallel's `broadcast_buffers` (Trainer's `ddp_broadcast_buffers`): the
    /// module's buffers sent from rank 0 before every forward.
    #[serde(default = "default_true")]
    pub ddp_broadcast_buffers: bool,
    /// The phases around the training step: evaluation, checkpoint saving, the merge.
    #[serde(default)]
    pub job: super::job_settings::JobSettings,
    /// `PYTORCH_CUDA_ALLOC_CONF` (e.g. `expandable_segments:True`); empty = PyTorch's defaults.
    #[serde(default)]
    pub alloc_conf: String,
    /// `CUBLAS_WORKSPACE_CONFIG` (`:SIZE_KiB:COUNT` pairs, e.g. `:4096:8`); empty = PyTorch's
    /// default, taken as Hopper's 32 MiB ([`DEFAULT_CUBLAS_WORKSPACE_BYTES`]).
    #[serde(default)]
    pub cublas_workspace_config: String,
    /// Bytes a real run held beyond its plan (from a memory snapshot: measured − planned peak),
    /// kept as a calibration: resident through the whole step, its own component.
    #[serde(default)]
    pub measured_overhead_bytes: u64,
    /// Fused expert parameters adapted by LoRA (peft `target_parameters`; MoE models).
    #[serde(default)]
    pub target_parameters: Vec<ExpertParam>,
    /// `output_router_logits`: the router logits are kept and the load-balancing loss added.
    #[serde(default)]
    pub output_router_logits: bool,
    /// How the routed experts run (`experts_implementation`).
    #[serde(default = "default_experts_impl")]
    pub experts_impl: ExpertsImpl,
    /// How the routed experts are stored (transformers 5 fused, or 4's per-expert Linears).
    #[serde(default = "default_experts_layout")]
    pub experts_layout: ExpertsLayout,
    /// How the loss shifts logits and labels (the transformers version).
    #[serde(default = "default_loss_shift")]
    pub loss_shift: LossShift,
    /// The images each sample shows a vision-language model.
    #[serde(default)]
    pub images: super::vision::ImageSettings,
}

fn default_finetuning_type() -> FinetuningType {
    FinetuningType::Lora
}

fn default_lora_init() -> LoraInit {
    LoraInit::Default
}

fn default_stage() -> Stage {
    Stage::Sft
}

fn default_pref_loss() -> PrefLoss {
    PrefLoss::Sigmoid
}

fn default_grpo_loss() -> GrpoLoss {
    GrpoLoss::Dapo
}

fn default_num_generations() -> u64 {
    8
}

fn default_one() -> u64 {
    1
}

fn default_generation() -> Generation {
    Generation::Hf
}

fn default_vllm_utilization() -> f64 {
    0.3
}

fn default_true() -> bool {
    true
}

fn default_freeze_layers() -> i64 {
    2
}

fn default_experts_layout() -> ExpertsLayout {
    ExpertsLayout::Fused
}

fn default_loss_shift() -> LossShift {
    LossShift::Labels
}

fn default_experts_impl() -> ExpertsImpl {
    ExpertsImpl::GroupedMm
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
            quant_storage: QuantStorage::Uint8,
            prepare_kbit: false,
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
            packing: false,
            neat_packing: false,
            packed_documents: 0,
            optimizer: Optimizer::AdamwTorchFused,
            fused_ce: FusedCe::Off,
            liger: Liger::NONE,
            use_dora: false,
            use_rslora: false,
            init_lora_weights: LoraInit::Default,
            loraplus_lr_ratio: 0.0,
            lora_fa: false,
            finetuning_type: FinetuningType::Lora,
            freeze_trainable_layers: 2,
            stage: Stage::Sft,
            pref_loss: PrefLoss::Sigmoid,
            beta: None,
            grpo_loss: GrpoLoss::Dapo,
            num_generations: 8,
            max_completion_length: 0,
            num_iterations: 1,
            steps_per_generation: None,
            generation_batch_size: None,
            generation: Generation::Hf,
            vllm_gpu_memory_utilization: 0.3,
            vllm_enable_sleep_mode: false,
            vllm_importance_sampling_correction: true,
            precompute_ref_log_probs: false,
            max_prompt_length: 0,
            completion_only_loss: false,
            disable_dropout: None,
            logits: None,
            parallel: Default::default(),
            ddp_find_unused_parameters: None,
            ddp_bucket_cap_mb: None,
            ddp_broadcast_buffers: true,
            job: Default::default(),
            alloc_conf: String::new(),
            cublas_workspace_config: String::new(),
            measured_overhead_bytes: 0,
            target_parameters: vec![],
            output_router_logits: false,
            experts_impl: ExpertsImpl::GroupedMm,
            experts_layout: ExpertsLayout::Fused,
            loss_shift: LossShift::Labels,
            images: Default::default(),
        }
    }
}

impl Settings {
    /// How the routed experts run: transformers 4's per-expert layout only had the eager loop.
    pub fn experts_run(&self) -> ExpertsImpl {
        match self.experts_layout {
            ExpertsLayout::Fused => self.experts_impl,
            ExpertsLayout::PerExpert => ExpertsImpl::Eager,
        }
    }

    /// Whether base parameters are trained rather than adapters: every one (full) or some
    /// layers' (freeze).
    pub fn base_trained(&self) -> bool {
        self.finetuning_type != FinetuningType::Lora
    }

    /// Whether decoder layer `li` of `layers` is trained: every layer under full fine-tuning,
    /// the chosen ones under freeze tuning (LLaMA-Factory's `trainable_layer_ids`), none under
    /// LoRA (its adapters are not the layer's parameters).
    pub fn layer_trained(&self, li: u64, layers: u64) -> bool {
        match self.finetuning_type {
            FinetuningType::Lora => false,
            FinetuningType::Full => true,
            FinetuningType::Freeze => {
                let n = self.freeze_trainable_layers;
                if n >= 0 {
                    li >= layers.saturating_sub(n.unsigned_abs())
                } else {
                    li < n.unsigned_abs()
                }
            }
        }
    }

    /// The decoder layers of `layers` whose weights are trained ([`Settings::layer_trained`]).
    pub fn trained_layers(&self, layers: u64) -> impl Iterator<Item = u64> + '_ {
        (0..layers).filter(move |&li| self.layer_trained(li, layers))
    }

    /// Whether the parameters outside the decoder layers (embeddings, final norm, lm_head) are
    /// trained: only under full fine-tuning.
    pub fn outside_trained(&self) -> bool {
        self.finetuning_type == FinetuningType::Full
    }

    /// Whether the run is a preference method (DPO, ORPO, SimPO, KTO).
    pub fn preference(&self) -> bool {
        !matches!(self.stage, Stage::Sft | Stage::Grpo)
    }

    /// Whether the run is GRPO (scored completions, then training on them).
    pub fn grpo(&self) -> bool {
        self.stage == Stage::Grpo
    }

    /// β as the trainer runs it: as set, else TRL's default (0.1 for the preference trainers,
    /// 0 for GRPO since TRL 1.x: `trl/trainer/grpo_config.py:681-682`).
    pub fn beta_run(&self) -> f64 {
        self.beta.unwrap_or(if self.grpo() { 0.0 } else { 0.1 })
    }

    /// GRPO's `steps_per_generation` as `GRPOConfig.__post_init__` settles it
    /// (`trl/trainer/grpo_config.py:1096-1116`): as set; else `generation_batch_size / (batch ×
    /// GPUs)`; else the gradient accumulation.
    pub fn steps_per_generation_run(&self) -> u64 {
        match (self.steps_per_generation, self.generation_batch_size) {
            (Some(n), _) => n.max(1),
            (None, Some(g)) => {
                let global = u128::from(self.batch.max(1)) * self.parallel.world().max(1);
                u64::try_from(u128::from(g) / global)
                    .unwrap_or(u64::MAX)
                    .max(1)
            }
            (None, None) => self.grad_accum.max(1),
        }
    }

    /// GRPO's generation batch on one GPU: `per_device_train_batch_size × steps_per_generation`
    /// rows generated and scored together.
    pub fn generation_rows(&self) -> u64 {
        self.batch.saturating_mul(self.steps_per_generation_run())
    }

    /// GRPO with vLLM colocated: the bytes vLLM takes of a card of `total_bytes`
    /// (`requested_memory = ceil(total × gpu_memory_utilization)`, vLLM 0.31
    /// `vllm/v1/worker/utils.py:539-557`).
    pub fn vllm_share_bytes(&self, total_bytes: u128) -> u128 {
        // (GRPO is the full planner's, `extended::needed`: the first bundle never gets here)
        if crate::model::extended::EXTENDED
            && self.grpo()
            && self.generation == Generation::VllmColocate
        {
            (total_bytes as f64 * self.vllm_gpu_memory_utilization).ceil() as u128
        } else {
            0
        }
    }

    /// Whether GRPO's weight sync to vLLM merges and unmerges peft's adapters on the training
    /// GPU before each generation (`trl/generation/vllm_generation.py:436-475`); a trained base
    /// is handed over as it is.
    pub fn vllm_syncs_adapters(&self) -> bool {
        self.grpo() && self.generation != Generation::Hf && !self.base_trained()
    }

    /// Whether GRPO's weight sync gathers the whole model on every GPU first: under DeepSpeed
    /// ZeRO-3, whose shards peft cannot merge into (`vllm_generation.py:440-444`).
    pub fn vllm_sync_gathers_model(&self) -> bool {
        self.vllm_syncs_adapters()
            && self.parallel.strategy == super::parallel::Strategy::Zero3
            && self.parallel.param_shards() > 1
    }

    /// Whether a GRPO step runs vLLM's importance-sampling correction (TRL's
    /// `vllm_importance_sampling_correction`, on by default): vLLM generates.
    pub fn vllm_importance_sampling(&self) -> bool {
        self.grpo() && self.generation != Generation::Hf && self.vllm_importance_sampling_correction
    }

    /// Whether a GRPO step scores the old policy's log-probs before training: when the
    /// generation is reused (`num_iterations` > 1) or does not fall on an accumulation boundary
    /// (`gradient_accumulation_steps % (steps_per_generation × num_iterations) != 0`,
    /// `grpo_trainer.py:2642-2656`: a generation that serves more micro-steps than one optimizer
    /// step, or fewer that do not divide it), and always with vLLM's importance-sampling
    /// correction.
    pub fn grpo_old_logps(&self) -> bool {
        self.grpo() && {
            let ga = self.grad_accum.max(1);
            let every = self
                .steps_per_generation_run()
                .saturating_mul(self.num_iterations.max(1));
            self.vllm_importance_sampling() || ga % every != 0
        }
    }

    /// Whether each example is a chosen + rejected pair, so the model sees two sequences per
    /// example (DPO, ORPO, SimPO; not KTO's unpaired examples).
    pub fn paired(&self) -> bool {
        matches!(self.stage, Stage::Dpo | Stage::Orpo | Stage::Simpo)
    }

    /// Sequences of `seq` tokens one forward pass sees: `2 × batch` for paired preferences.
    pub fn sequences(&self) -> u64 {
        if self.paired() {
            self.batch.saturating_mul(2)
        } else {
            self.batch
        }
    }

    /// Prompt tokens of each preference sequence (half of `seq` unless set); of a GRPO
    /// sequence, what its completion leaves.
    pub fn prompt_tokens(&self) -> u64 {
        if self.grpo() && self.max_completion_length > 0 {
            self.seq.saturating_sub(self.max_completion_length)
        } else if self.max_prompt_length > 0 {
            self.max_prompt_length
        } else {
            self.seq / 2
        }
    }

    /// Completion tokens of each preference sequence: the ones scored.
    pub fn completion_tokens(&self) -> u64 {
        self.seq.saturating_sub(self.prompt_tokens())
    }

    /// Whether the step compares against a reference model's log-probs: DPO and KTO with a
    /// reference-using loss (not ORPO or SimPO).
    pub fn uses_reference(&self) -> bool {
        match self.stage {
            Stage::Sft | Stage::Orpo | Stage::Simpo => false,
            Stage::Dpo => !self.pref_loss.reference_free(),
            Stage::Kto => true,
            Stage::Grpo => self.beta_run() != 0.0,
        }
    }

    /// Whether each step runs the reference forward (it uses a reference that was not
    /// precomputed).
    pub fn reference_pass(&self) -> bool {
        self.uses_reference() && !self.precompute_ref_log_probs
    }

    /// How the scored tokens' log-probs are computed: as set, else what the stage's usual
    /// trainer does: Trainer's full logits for SFT (LLaMA-Factory, axolotl, ms-swift), TRL's
    /// fused head for DPO and KTO, the full logits for ORPO and CPO/SimPO.
    pub fn logits_run(&self) -> Logits {
        self.logits.unwrap_or(match self.stage {
            Stage::Sft | Stage::Orpo | Stage::Simpo => Logits::Full,
            _ if self.pref_loss.reference_free() => Logits::Full,
            _ => Logits::Fused,
        })
    }

    /// Whether an SFT step's loss runs through TRL's fused LM head (SFTTrainer).
    pub fn sft_fused_head(&self) -> bool {
        self.stage == Stage::Sft && self.logits_run() == Logits::Fused
    }

    /// Tokens of each sequence whose next-token log-prob the loss scores: the completion of a
    /// preference sequence or of an SFT sample with `completion_only_loss`, every position but
    /// the last of another SFT row (of a packed row: every document's but the first).
    pub fn scored_tokens(&self) -> u64 {
        if self.preference() || self.grpo() || self.completion_only_loss {
            self.completion_tokens()
        } else if crate::model::extended::EXTENDED && self.packing {
            // TRL's padding-free labels are -100 at every document's first token
            // (`sft_trainer.py:208`): the row's first is not scored anyway.
            self.seq.saturating_sub(self.packed_documents.max(1))
        } else {
            self.seq.saturating_sub(1)
        }
    }

    /// Whether the trainer sets every dropout to 0: as set, else TRL's default (on for the
    /// preference trainers, off for GRPO and SFT).
    pub fn dropout_disabled(&self) -> bool {
        (self.preference() || self.grpo()) && self.disable_dropout.unwrap_or(self.preference())
    }

    /// LoRA dropout as the step runs it: 0 when a preference trainer disables dropout.
    pub fn dropout_run(&self) -> f64 {
        if self.dropout_disabled() {
            0.0
        } else {
            self.lora_dropout
        }
    }

    /// GRPO's own checks, TRL's where it has them (`GRPOConfig.__post_init__`,
    /// `trl/trainer/grpo_config.py:1098-1141`).
    fn validate_grpo(&self) -> Result<(), PlanError> {
        let bad = |field: &'static str, why: String| Err(PlanError::InvalidSetting { field, why });
        let c = self.completion_tokens();
        if c == 0 || c >= self.seq {
            return bad(
                "max_completion_length",
                format!(
                    "{} completion tokens in a sequence of {}: seq is the prompt plus the completion, so the completion must be shorter",
                    c, self.seq
                ),
            );
        }
        if self.max_completion_length > 0
            && self.max_prompt_length > 0
            && self.max_prompt_length + self.max_completion_length != self.seq
        {
            return bad(
                "max_prompt_length",
                format!(
                    "{} prompt + {} completion tokens ≠ seq {}: GRPO's sequences are prompt + completion (TRL 1.16 has no max_prompt_length; leave it 0)",
                    self.max_prompt_length, self.max_completion_length, self.seq
                ),
            );
        }
        if self.num_generations < 2 {
            return bad(
                "num_generations",
                format!("{} must be at least 2: GRPO's advantages compare the completions of one prompt", self.num_generations),
            );
        }
        let global_batch = u128::from(self.batch) * self.parallel.world();
        match (self.steps_per_generation, self.generation_batch_size) {
            (Some(_), Some(_)) => {
                return bad(
                    "generation_batch_size",
                    "generation_batch_size and steps_per_generation cannot both be set (TRL's GRPOConfig refuses them together): set one".into(),
                )
            }
            (Some(n), None) if n == 0 || n > 1 << 20 => {
                return bad(
                    "steps_per_generation",
                    format!("{n} must be between 1 and 1048576"),
                )
            }
            (None, Some(g)) if g == 0 || u128::from(g) % global_batch != 0 => {
                return bad(
                    "generation_batch_size",
                    format!(
                        "{g} must be a positive multiple of the global batch (batch {} × {} GPUs = {global_batch}), as TRL's GRPOConfig checks",
                        self.batch,
                        self.parallel.world()
                    ),
                )
            }
            _ => {}
        }
        let spg = self.steps_per_generation_run();
        let generation_batch = global_batch * u128::from(spg);
        if generation_batch % u128::from(self.num_generations) != 0 {
            let how = match (self.steps_per_generation, self.generation_batch_size) {
                (None, Some(_)) => format!("generation_batch_size {generation_batch}"),
                (Some(_), _) => format!(
                    "batch {} × steps_per_generation {spg} × {} GPUs = {generation_batch}",
                    self.batch,
                    self.parallel.world()
                ),
                (None, None) => format!(
                    "batch {} × gradient accumulation {spg} × {} GPUs = {generation_batch}",
                    self.batch,
                    self.parallel.world()
                ),
            };
            return bad(
                "num_generations",
                format!(
                    "the generation batch ({how}) must be a multiple of num_generations {} (TRL's check)",
                    self.num_generations
                ),
            );
        }
        if self.num_iterations == 0 || self.num_iterations > 1024 {
            return bad(
                "num_iterations",
                format!("{} must be between 1 and 1024", self.num_iterations),
            );
        }
        if self.logits == Some(Logits::Full) {
            return bad(
                "logits",
                "GRPO is planned as TRL ≥ 1's GRPOTrainer runs it, through its fused LM head (TRL 0.x's full-logits log-probs are not modelled): use logits auto or fused".into(),
            );
        }
        if !(self.vllm_gpu_memory_utilization > 0.0 && self.vllm_gpu_memory_utilization <= 1.0) {
            return bad(
                "vllm_gpu_memory_utilization",
                format!(
                    "{} must be in (0, 1]: the fraction of the card's memory vLLM takes",
                    self.vllm_gpu_memory_utilization
                ),
            );
        }
        if self.generation != Generation::Hf && self.quant.is_some() {
            return bad(
                "generation",
                "TRL's weight sync to vLLM merges peft's adapters into the 4-bit base and hands vLLM the merged weights still packed, which vLLM's weight loader refuses (huggingface/trl#3654, #4973): a 4-bit base generates with generation hf".into(),
            );
        }
        if self.precompute_ref_log_probs {
            return bad(
                "precompute_ref_log_probs",
                "GRPO scores each generation's reference log-probs after generating it; there is nothing to precompute".into(),
            );
        }
        Ok(())
    }

    /// Range checks independent of the architecture.
    pub fn validate(&self) -> Result<(), PlanError> {
        self.cublas_workspace_bytes()?;
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
        if self.base_trained() {
            let conflict = [
                (self.quant.is_some(), "quant", "a quantized base cannot be trained in full (bitsandbytes' Params4bit and Int8Params take no gradient): use finetuning_type lora for QLoRA"),
                (self.freeze_trainable_layers == 0 && self.finetuning_type == FinetuningType::Freeze, "freeze_trainable_layers", "0 layers would train nothing: the last N layers train for N > 0, the first |N| for N < 0"),
                // (DoRA is the full planner's, `extended::needed`)
                (crate::model::extended::EXTENDED && self.use_dora, "use_dora", "DoRA is an adapter: it needs finetuning_type lora"),
                (self.use_rslora, "use_rslora", "rsLoRA scales an adapter: it needs finetuning_type lora"),
                (self.init_lora_weights != LoraInit::Default, "init_lora_weights", "an adapter initialisation needs finetuning_type lora"),
                (self.loraplus_lr_ratio != 0.0, "loraplus_lr_ratio", "LoRA+ sets the adapters' learning rates: it needs finetuning_type lora"),
                (self.lora_fa, "lora_fa", "LoRA-FA freezes lora_A: it needs finetuning_type lora"),
                (!self.modules_to_save.is_empty(), "modules_to_save", "full fine-tuning already trains every module: leave modules_to_save empty"),
                (!self.target_parameters.is_empty(), "target_parameters", "full fine-tuning already trains the experts: leave target_parameters empty"),
            ];
            if let Some((_, field, why)) = conflict.iter().find(|c| c.0) {
                return bad(field, (*why).into());
            }
        }
        if self.completion_only_loss && self.stage != Stage::Sft {
            return bad(
                "completion_only_loss",
                "is SFTTrainer's: the preference and RL trainers score their completions already"
                    .into(),
            );
        }
        if (self.preference() || self.completion_only_loss)
            && (self.prompt_tokens() >= self.seq || self.prompt_tokens() == 0)
        {
            return bad(
                "max_prompt_length",
                format!(
                    "{} prompt tokens leave no completion in a sequence of {}: the prompt must be shorter than seq",
                    self.prompt_tokens(),
                    self.seq
                ),
            );
        }
        if self.beta.is_some_and(|b| !b.is_finite()) {
            return bad("beta", "must be a finite number".into());
        }
        // (a build without the extended ops refuses GRPO steps before their checks: left out)
        if crate::model::extended::EXTENDED && self.grpo() {
            self.validate_grpo()?;
        }
        if !(0.0..1.0).contains(&self.lora_dropout) {
            return bad(
                "lora_dropout",
                format!("{} must be in [0, 1)", self.lora_dropout),
            );
        }
        if crate::model::extended::EXTENDED && self.lora_fa && self.use_dora {
            return bad(
                "lora_fa",
                "LoRA-FA's optimizer (peft create_lorafa_optimizer) takes plain LoRA adapters, not DoRA".into(),
            );
        }
        if !self.loraplus_lr_ratio.is_finite() || self.loraplus_lr_ratio < 0.0 {
            return bad(
                "loraplus_lr_ratio",
                "must be a finite number ≥ 0 (0: off)".into(),
            );
        }
        if !self.lora_alpha.is_finite() {
            return bad("lora_alpha", "must be a finite number".into());
        }
        if self.grad_accum == 0 {
            return bad("grad_accum", "must be at least 1".into());
        }
        self.parallel.validate(self.grad_ckpt)?;
        self.allocator_conf()?;
        if self.targets.is_empty()
            && self.modules_to_save.is_empty()
            && self.target_parameters.is_empty()
        {
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

    /// The caching allocator's configuration parsed from [`Settings::alloc_conf`].
    pub fn allocator_conf(&self) -> Result<super::allocator::AllocConf, PlanError> {
        super::allocator::AllocConf::parse(&self.alloc_conf).map_err(|e| {
            PlanError::InvalidSetting {
                field: "alloc_conf",
                why: e.to_string(),
            }
        })
    }

    /// Bytes of the cuBLAS workspace each thread's handle allocates through the caching
    /// allocator at its first GEMM, from [`Settings::cublas_workspace_config`].
    pub fn cublas_workspace_bytes(&self) -> Result<u64, PlanError> {
        parse_cublas_workspace_config(&self.cublas_workspace_config).map_err(|why| {
            PlanError::InvalidSetting {
                field: "cublas_workspace_config",
                why,
            }
        })
    }

    /// Whether FSDP2 gives each decoder layer a unit of its own, as accelerate 1.15 wraps a
    /// model for `fsdp_version: 2` (`fsdp2_prepare_model`, `utils/fsdp_utils.py:842-846`): for
    /// full and freeze tuning. Not for a peft model trained by transformers' Trainer (as
    /// LLaMA-Factory, ms-swift and TRL train it): `update_fsdp_plugin_peft`
    /// (`transformers/distributed/fsdp.py:267-285`, called from `trainer.py:1762`) sets peft's
    /// `fsdp_auto_wrap_policy`, an `_or_policy`, for which accelerate's
    /// `fsdp2_prepare_auto_wrap_policy` (`utils/fsdp_utils.py:921-970`) returns None: the
    /// decoder layers stay in the root's unit, gathered whole for the whole step.
    pub fn fsdp2_layer_units(&self) -> bool {
        self.finetuning_type != FinetuningType::Lora
    }

    /// Whether the step is planned as FSDP2 runs it, op by op (`steptrace`'s FSDP2 ops,
    /// measured rank by rank): `fsdp_version` 2 in a set-up [`Settings::fsdp_ops_know`], on a 16-bit
    /// base or a sharded 4-bit one ([`Settings::sharded_4bit`]). Other
    /// FSDP2 set-ups are planned with the rank model (`steptrace::rank`: two gathered layers
    /// held through the step).
    pub fn fsdp2_op_by_op(&self, arch: &super::arch::Architecture) -> bool {
        self.parallel.fsdp_version == super::parallel::FsdpVersion::V2
            && self.fsdp_ops_know(arch)
            && (self.quant.is_none() || self.sharded_4bit())
    }

    /// Whether the rank's FSDP1 step is planned op by op (`steptrace::program::fsdp1`):
    /// `fsdp_version` 1 in a set-up [`Settings::fsdp_ops_know`], without LoRA-FA or freeze
    /// tuning, with torch's AdamW, on a 16-bit base or a sharded 4-bit one
    /// ([`Settings::sharded_4bit`]). Other FSDP1 set-ups are planned with the rank model.
    pub fn fsdp1_op_by_op(&self, arch: &super::arch::Architecture) -> bool {
        self.parallel.fsdp_version == super::parallel::FsdpVersion::V1
            && self.fsdp_ops_know(arch)
            && (self.quant.is_none() || self.sharded_4bit())
            && !self.lora_fa
            && matches!(
                self.finetuning_type,
                FinetuningType::Lora | FinetuningType::Full
            )
            && matches!(
                self.optimizer,
                Optimizer::AdamwTorch | Optimizer::AdamwTorchFused | Optimizer::AdamwTorchForeach
            )
    }

    /// The dtype of lm_head, the embedding and the norms: fp32 after peft's
    /// `prepare_model_for_kbit_training` (which upcasts every non-quantized 16-bit parameter,
    /// `peft/utils/other.py`), else the weights' dtype.
    pub fn aux_weight_dtype(&self) -> Dtype {
        if self.quant.is_some() && self.prepare_kbit {
            Dtype::Fp32
        } else {
            self.dtype
        }
    }

    /// A 4-bit base as TRL's "sharded QLoRA" runs it under FSDP: LoRA on 4-bit weights stored
    /// in the 16-bit model's own dtype (`bnb_4bit_quant_storage`), without
    /// `prepare_model_for_kbit_training`, so that each unit's parameters share one dtype and
    /// FSDP flattens and shards the 4-bit weights like any other.
    pub fn sharded_4bit(&self) -> bool {
        self.quant.is_some_and(Quant::is_4bit)
            && self.quant_storage.dtype() == Some(self.dtype)
            && self.dtype.bytes() == 2
            && self.finetuning_type == FinetuningType::Lora
            && !self.prepare_kbit
    }

    /// A 4-bit base sharded by FSDP over several GPUs (the full planner's: `extended::needed`).
    pub fn fsdp_4bit(&self) -> bool {
        self.parallel.strategy.is_fsdp()
            && self.parallel.world() > 1
            && self.quant.is_some_and(Quant::is_4bit)
    }

    /// The set-ups the op-by-op FSDP steps know: full sharding over several GPUs without
    /// offload, a dense text model, an SFT step with LoRA (no DoRA or trained copies) or with
    /// the base trained, without Liger or a fused loss (each FSDP version says which bases).
    fn fsdp_ops_know(&self, arch: &super::arch::Architecture) -> bool {
        let p = &self.parallel;
        p.strategy == super::parallel::Strategy::FsdpFullShard
            && p.world() > 1
            && !p.offload_optimizer
            && !p.offload_params
            && !p.offload_activations
            && arch.is_dense_text()
            && self.images.images_per_sample == 0
            && !self.use_dora
            && self.modules_to_save.is_empty()
            && !self.preference()
            && !self.grpo()
            && !self.sft_fused_head()
            && !self.fused_ce.any()
            && !self.liger.any()
    }

    /// The settings as transformers runs them for `arch`: a family without sdpa support
    /// (gpt-oss, `_supports_sdpa = False`) runs eager attention when sdpa is asked for, and
    /// padding-free packing ([`Settings::packing`]) runs the micro-batch as one row.
    pub fn as_run(&self, arch: &super::arch::Architecture) -> std::borrow::Cow<'_, Settings> {
        let eager = self.attn_impl == AttnImpl::Sdpa && !arch.family.layout().sdpa;
        // Padding-free packing runs one row of every token of the micro-batch, with the fewest
        // documents that make it a packed row: one per sample, two in a row of one sample;
        // LLaMA-Factory's neat_packing under flash-attention-2 unpads its one row (its
        // collator asserts a batch of one): padding-free packing too. (Packing is the full
        // planner's, `extended::needed`; the settings of a run are run as they are.)
        let neat_fa2 = self.neat_packing && self.attn_impl == AttnImpl::FlashAttention2;
        let flatten = crate::model::extended::EXTENDED
            && (self.packing || neat_fa2)
            && self.packed_documents == 0;
        if !eager && !flatten {
            return std::borrow::Cow::Borrowed(self);
        }
        let mut run = self.clone();
        if eager {
            run.attn_impl = AttnImpl::Eager;
        }
        if flatten {
            run.neat_packing = false;
            run.packing = true;
            run.seq = self.batch.saturating_mul(self.seq);
            run.packed_documents = self.batch.max(2);
            run.batch = 1;
        }
        std::borrow::Cow::Owned(run)
    }

    /// The dtype of the 4-D mask LLaMA-Factory's collator builds for `neat_packing`: its compute
    /// dtype (`prepare_4d_attention_mask(…, self.compute_dtype)`), the autocast dtype or else the
    /// model's.
    pub fn neat_mask_dtype(&self) -> Dtype {
        self.autocast.unwrap_or(self.dtype)
    }

    /// Whether DistributedDataParallel looks for unused parameters: as set, or as transformers'
    /// Trainer decides (`trainer.py:749-756`, transformers 5.24): a peft model is no
    /// `PreTrainedModel`, so yes; a transformers model, only without gradient checkpointing.
    pub fn ddp_finds_unused(&self) -> bool {
        self.ddp_find_unused_parameters
            .unwrap_or(!self.base_trained() || !self.grad_ckpt)
    }

    /// DistributedDataParallel's bucket size limits in bytes, `(first bucket, the others)`:
    /// PyTorch's 1 MiB and 25 MiB when `bucket_cap_mb` is not given, else that size for both
    /// (`torch/nn/parallel/distributed.py` `_BucketCapacityConfig.create`).
    pub fn ddp_bucket_caps(&self) -> (u64, u64) {
        const MIB: u64 = 1024 * 1024;
        match self.ddp_bucket_cap_mb {
            None => (MIB, 25 * MIB),
            Some(mb) => {
                let cap = mb.saturating_mul(MIB);
                (cap, cap)
            }
        }
    }

    /// Tokens in one micro-batch.
    pub fn tokens(&self) -> u128 {
        self.batch as u128 * self.seq as u128
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
        // peft matches a name by its end: `self_attn.q_proj` is every q_proj under self_attn.
        let n = match n.rsplit_once('.') {
            Some((_, last)) if !n.contains(['(', '[', '*', '|', '\\', '^', '$', '+']) => last,
            _ => n,
        };
        match n.to_ascii_lowercase().as_str() {
            "all-linear" | "all_linear" | "all" => out.extend(Target::ALL),
            "qkv" | "qkv_proj" => out.extend([Target::Q, Target::K, Target::V]),
            "gate_up" | "gate_up_proj" => out.extend([Target::Gate, Target::Up]),
            "attn" | "attention" => out.extend([Target::Q, Target::K, Target::V, Target::O]),
            "mlp" => out.extend([Target::Gate, Target::Up, Target::Down]),
            // DeepSeek's latent attention: the q path and the compressed k/v path.
            "q_a_proj" | "q_b_proj" => out.push(Target::Q),
            "kv_a_proj_with_mqa" | "kv_a_proj" | "kv_b_proj" => out.extend([Target::K, Target::V]),
            _ => out.push(Target::parse(n).ok_or_else(|| PlanError::InvalidSetting {
                field: "target_modules",
                why: format!(
                    "unknown module {n:?} (expected q, k, v, o, gate, up, down or all-linear)"
                ),
            })?),
        }
    }
    super::order::sort(&mut out);
    out.dedup();
    Ok(out)
}

/// PyTorch's cuBLAS workspace per handle when `CUBLAS_WORKSPACE_CONFIG` is unset, on Hopper
/// (H100 / H200: `4096 × 8 KiB`, `aten/src/ATen/cuda/CublasHandlePool.cpp`); other GPUs get
/// `4096 × 2 + 16 × 8` KiB = 8.125 MiB. The plan does not know the GPU, so it takes the larger:
/// at most 2 × 24 MiB over on other cards.
pub const DEFAULT_CUBLAS_WORKSPACE_BYTES: u64 = 32 * 1024 * 1024;

/// `CUBLAS_WORKSPACE_CONFIG`'s value as PyTorch reads it: the sum of `:SIZE:COUNT` pairs (SIZE
/// in KiB); empty for the default. Text PyTorch would ignore with a warning is refused here
/// instead. (The settings table strips a pasted `CUBLAS_WORKSPACE_CONFIG=`.)
pub fn parse_cublas_workspace_config(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(DEFAULT_CUBLAS_WORKSPACE_BYTES);
    }
    let bad = || {
        format!("{text:?} is not a list of :SIZE_KiB:COUNT pairs (e.g. :4096:8, or :0:0 for no workspace)")
    };
    let rest = text.strip_prefix(':').ok_or_else(bad)?;
    let nums: Vec<&str> = rest.split(':').collect();
    if nums.len() % 2 != 0 {
        return Err(bad());
    }
    let mut total: u64 = 0;
    for pair in nums.chunks(2) {
        let kib: u64 = pair[0].parse().map_err(|_| bad())?;
        let count: u64 = pair[1].parse().map_err(|_| bad())?;
        total = kib
            .checked_mul(1024)
            .and_then(|b| b.checked_mul(count))
            .and_then(|b| total.checked_add(b))
            .filter(|&b| b <= 1 << 40)
            .ok_or_else(|| format!("{text:?} asks for more than 1 TiB of workspace"))?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cublas_workspace_config_reads_as_pytorch_does() {
        // PyTorch's own defaults, written out: Hopper's 4096 KiB × 8, other GPUs' 4096 KiB × 2 +
        // 16 KiB × 8 = 8 519 680 B (CublasHandlePool.cpp).
        assert_eq!(parse_cublas_workspace_config(""), Ok(32 << 20));
        assert_eq!(parse_cublas_workspace_config(":4096:8"), Ok(32 << 20));
        assert_eq!(
            parse_cublas_workspace_config(" :4096:2:16:8 "),
            Ok(8_519_680)
        );
        assert_eq!(parse_cublas_workspace_config(":0:0"), Ok(0));
        for bad in [
            "4096:8",
            ":4096",
            ":a:8",
            ":4096:8:",
            "none",
            ":99999999999:99999999",
        ] {
            let e = parse_cublas_workspace_config(bad).expect_err(bad);
            assert!(e.contains(bad.trim()), "{bad}: {e}");
        }
    }
}
