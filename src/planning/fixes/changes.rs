//! The candidate changes the advice searches: each one's typed id and kind, its words and cost
//! weight, and the edit it makes to the settings.

use serde::Serialize;

use crate::model::{
    Architecture, AttnImpl, Dtype, ExpertsImpl, ExpertsLayout, FinetuningType, FusedCe, Liger,
    Optimizer, Quant, Settings, Target,
};

/// The stable id of a change, of a combination (`combined`) and of the last resort
/// (`shorter_seq`): JSON, `data-testid`s and tests name fixes by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FixId {
    /// experts_implementation → grouped_mm.
    GroupedMm,
    /// output_router_logits=False.
    NoRouterLogits,
    /// No LoRA on the fused experts.
    NoExpertLora,
    /// Eager attention → sdpa.
    Sdpa,
    /// fp32 weights → 16-bit.
    Bf16Weights,
    /// lora_dropout → 0.
    Dropout0,
    /// 8-bit AdamW.
    Adamw8bit,
    /// Paged 8-bit AdamW.
    Paged,
    /// torchao's 4-bit AdamW.
    Adamw4bit,
    /// Liger's fused linear cross-entropy.
    FusedCe,
    /// Cut cross-entropy.
    Cce,
    /// Liger-Kernel's RMSNorm, SwiGLU and RoPE.
    Liger,
    /// Gradient checkpointing.
    GradCkpt,
    /// A smaller micro-batch, more accumulation.
    SmallerBatch,
    /// QLoRA.
    Qlora,
    /// A checkpoint saved in 4 bits, whose experts transformers rebuilds as quantized Linear
    /// MLPs (Llama 4: `SequentialLlama4TextExperts`).
    Prequantized,
    /// LoRA on q_proj and v_proj only.
    FewerTargets,
    /// Plain LoRA instead of DoRA.
    NoDora,
    /// LoRA instead of full fine-tuning.
    Lora,
    /// A preference step's reference log-probs computed once before training.
    PrecomputeRef,
    /// TRL's fused log-prob head instead of the full logits.
    FusedLogprobs,
    /// GRPO: β 0, no reference pass (and no reference copy of a trained base).
    GrpoBeta0,
    /// GRPO: one update per generation, no old-policy pass.
    OneIteration,
    /// GRPO: a smaller generation batch (fewer micro-steps per generation).
    SmallerGenerationBatch,
    /// GRPO: the generation on vLLM servers on other GPUs.
    VllmServer,
    /// GRPO with vLLM colocated: a smaller share of the card for vLLM.
    VllmShare,
    /// GRPO with vLLM colocated: its sleep mode.
    VllmSleep,
    /// Evaluation: the kept outputs leave the GPU after every batch (`eval_accumulation_steps=1`).
    EvalAccumulation,
    /// Evaluation: only the loss is kept (`prediction_loss_only=True`).
    LossOnly,
    /// Evaluation: a smaller `per_device_eval_batch_size`.
    SmallerEvalBatch,
    /// Evaluation with `predict_with_generate`: fewer new tokens (`max_new_tokens`).
    ShorterEvalGeneration,
    /// The merge in host memory instead of on the GPU (`export_device: cpu`).
    CpuExport,
    /// FSDP1 instead of FSDP2 for a peft model under Trainer (which gathers FSDP2's whole
    /// decoder stack).
    Fsdp1,
    /// FSDP (full shard, accelerate's FSDP1) instead of DDP.
    Fsdp,
    /// DeepSpeed ZeRO-3 instead of ZeRO-1 / ZeRO-2.
    Zero3,
    /// The last resort: a shorter sequence.
    ShorterSeq,
    /// Several changes together.
    Combined,
}

/// What a change edits; a combination takes at most one change of each kind (two optimizers,
/// two weight formats, two micro-batches exclude each other).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// experts_implementation.
    Experts,
    /// The router's outputs.
    Router,
    /// LoRA on the experts.
    ExpertLora,
    /// The attention kernel.
    Attention,
    /// The base weights' format (16-bit, 4-bit).
    Weights,
    /// LoRA dropout.
    Dropout,
    /// The optimizer.
    Optimizer,
    /// The loss.
    Loss,
    /// The decoder layers' norm, MLP and rotary kernels.
    Kernels,
    /// Gradient checkpointing.
    Checkpointing,
    /// The micro-batch.
    MicroBatch,
    /// The adapted modules.
    Targets,
    /// The training method (DoRA, full fine-tuning).
    Method,
    /// What the evaluation keeps on the GPU (its outputs moved sooner, or only the loss).
    EvalOutputs,
    /// The evaluation's batch.
    EvalBatch,
    /// How long the evaluation generates.
    EvalGeneration,
    /// Where the merge after training runs.
    Export,
    /// How the ranks share the model (the strategy, FSDP's version).
    Sharding,
    /// A preference or GRPO step's reference pass.
    Reference,
    /// GRPO's old-policy pass.
    OldPolicy,
    /// GRPO's generation batch (`steps_per_generation`).
    GenerationBatch,
    /// Where GRPO generates.
    Generation,
    /// vLLM's share of the card (a sized kind: the largest that fits).
    VllmShare,
    /// The sequence length (the last resort) or several kinds at once (a combination).
    Several,
}

impl FixId {
    /// The id as JSON and `data-testid`s spell it.
    pub fn name(self) -> &'static str {
        match self {
            FixId::GroupedMm => "grouped_mm",
            FixId::NoRouterLogits => "no_router_logits",
            FixId::NoExpertLora => "no_expert_lora",
            FixId::Sdpa => "sdpa",
            FixId::Bf16Weights => "bf16_weights",
            FixId::Dropout0 => "dropout0",
            FixId::Adamw8bit => "adamw8bit",
            FixId::Paged => "paged",
            FixId::Adamw4bit => "adamw4bit",
            FixId::FusedCe => "fused_ce",
            FixId::Cce => "cce",
            FixId::Liger => "liger_kernel",
            FixId::GradCkpt => "grad_ckpt",
            FixId::SmallerBatch => "smaller_batch",
            FixId::Qlora => "qlora",
            FixId::Prequantized => "prequantized_checkpoint",
            FixId::FewerTargets => "fewer_targets",
            FixId::NoDora => "no_dora",
            FixId::Lora => "lora",
            FixId::PrecomputeRef => "precompute_ref",
            FixId::FusedLogprobs => "fused_logprobs",
            FixId::GrpoBeta0 => "grpo_beta0",
            FixId::OneIteration => "one_iteration",
            FixId::SmallerGenerationBatch => "smaller_generation_batch",
            FixId::VllmServer => "vllm_server",
            FixId::VllmShare => "vllm_share",
            FixId::VllmSleep => "vllm_sleep",
            FixId::EvalAccumulation => "eval_accumulation",
            FixId::LossOnly => "prediction_loss_only",
            FixId::SmallerEvalBatch => "smaller_eval_batch",
            FixId::ShorterEvalGeneration => "shorter_eval_generation",
            FixId::CpuExport => "cpu_export",
            FixId::Fsdp1 => "fsdp1",
            FixId::Fsdp => "fsdp",
            FixId::Zero3 => "zero3",
            FixId::ShorterSeq => "shorter_seq",
            FixId::Combined => "combined",
        }
    }

    /// What the change edits.
    pub fn kind(self) -> ChangeKind {
        match self {
            FixId::GroupedMm => ChangeKind::Experts,
            FixId::NoRouterLogits => ChangeKind::Router,
            FixId::NoExpertLora => ChangeKind::ExpertLora,
            FixId::Sdpa => ChangeKind::Attention,
            FixId::Bf16Weights | FixId::Qlora | FixId::Prequantized => ChangeKind::Weights,
            FixId::Dropout0 => ChangeKind::Dropout,
            FixId::Adamw8bit | FixId::Paged | FixId::Adamw4bit => ChangeKind::Optimizer,
            FixId::FusedCe | FixId::Cce | FixId::FusedLogprobs => ChangeKind::Loss,
            FixId::Liger => ChangeKind::Kernels,
            FixId::PrecomputeRef | FixId::GrpoBeta0 => ChangeKind::Reference,
            FixId::OneIteration => ChangeKind::OldPolicy,
            FixId::SmallerGenerationBatch => ChangeKind::GenerationBatch,
            FixId::VllmServer | FixId::VllmSleep => ChangeKind::Generation,
            FixId::VllmShare => ChangeKind::VllmShare,
            FixId::GradCkpt => ChangeKind::Checkpointing,
            FixId::SmallerBatch => ChangeKind::MicroBatch,
            FixId::FewerTargets => ChangeKind::Targets,
            FixId::NoDora | FixId::Lora => ChangeKind::Method,
            FixId::EvalAccumulation | FixId::LossOnly => ChangeKind::EvalOutputs,
            FixId::SmallerEvalBatch => ChangeKind::EvalBatch,
            FixId::ShorterEvalGeneration => ChangeKind::EvalGeneration,
            FixId::CpuExport => ChangeKind::Export,
            FixId::Fsdp1 | FixId::Fsdp | FixId::Zero3 => ChangeKind::Sharding,
            FixId::ShorterSeq | FixId::Combined => ChangeKind::Several,
        }
    }
}

impl std::fmt::Display for FixId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl PartialEq<&str> for FixId {
    fn eq(&self, other: &&str) -> bool {
        self.name() == *other
    }
}

impl Serialize for FixId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// What one change edits in the settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Patch {
    /// Eager attention → sdpa.
    Sdpa,
    /// fp32 base weights → this 16-bit dtype (autocast to it if none).
    Weights16(Dtype),
    /// LoRA dropout → 0.
    Dropout0,
    /// Another optimizer.
    Optimizer(Optimizer),
    /// This fused linear cross-entropy.
    FusedCe(FusedCe),
    /// These Liger-Kernel kernels on.
    Liger(Liger),
    /// Gradient checkpointing on.
    GradCkpt,
    /// This micro-batch (a divisor of the current one), accumulating more so the effective batch
    /// stays the same.
    MicroBatch(u64),
    /// QLoRA: nf4 with double quantisation, this autocast dtype.
    Qlora(Dtype),
    /// A checkpoint saved in 4 bits: its experts are Linear MLPs (`experts_layout` per_expert),
    /// 4-bit (QLoRA's settings with this autocast dtype where the base was not 4-bit).
    Prequantized(Dtype),
    /// Adapt only q_proj and v_proj.
    QvOnly,
    /// MoE: transformers' default grouped_mm experts.
    GroupedMm,
    /// MoE: no router logits / load-balancing loss.
    NoRouterLogits,
    /// MoE: no LoRA on the fused experts (attention and Linear layers only).
    NoExpertLora,
    /// Plain LoRA: DoRA off.
    NoDora,
    /// LoRA (the settings' rank and targets) instead of full fine-tuning.
    Lora,
    /// `precompute_ref_log_probs=True`.
    PrecomputeRef,
    /// TRL's fused log-prob head.
    FusedLogprobs,
    /// GRPO's `beta=0.0`.
    Beta0,
    /// GRPO's `num_iterations=1`.
    OneIteration,
    /// GRPO's `steps_per_generation` (`generation_batch_size` unset).
    StepsPerGeneration(u64),
    /// GRPO's `use_vllm=True, vllm_mode="server"`.
    VllmServer,
    /// This `vllm_gpu_memory_utilization` (in hundredths).
    VllmShare(u32),
    /// `vllm_enable_sleep_mode=True`.
    VllmSleep,
    /// `eval_accumulation_steps=1`.
    EvalAccumulation1,
    /// `prediction_loss_only=True`.
    LossOnly,
    /// This `per_device_eval_batch_size`.
    EvalBatch(u64),
    /// This `max_new_tokens` of the evaluation's generation.
    MaxNewTokens(u64),
    /// `export_device: cpu`.
    CpuExport,
    /// This `fsdp_version`.
    FsdpVersion(crate::model::FsdpVersion),
    /// FSDP full shard, version 1 (accelerate's default).
    Fsdp,
    /// DeepSpeed ZeRO-3.
    Zero3,
}

impl Patch {
    /// Applies the change.
    pub fn apply(self, t: &mut Settings) {
        match self {
            Patch::Sdpa => t.attn_impl = AttnImpl::Sdpa,
            Patch::Weights16(d) => {
                t.dtype = d;
                if t.autocast.is_none() {
                    t.autocast = Some(d);
                }
            }
            Patch::Dropout0 => t.lora_dropout = 0.0,
            Patch::Optimizer(o) => t.optimizer = o,
            Patch::FusedCe(f) => t.fused_ce = f,
            Patch::Liger(l) => t.liger = l,
            Patch::GradCkpt => t.grad_ckpt = true,
            Patch::MicroBatch(b) => {
                let b = b.clamp(1, t.batch);
                t.grad_accum = t.grad_accum.saturating_mul(t.batch / b);
                t.batch = b;
            }
            Patch::Qlora(d) => {
                t.quant = Some(Quant::Nf4);
                t.double_quant = true;
                t.dtype = d;
                t.autocast = Some(d);
            }
            Patch::Prequantized(d) => {
                if !t.quant.is_some_and(Quant::is_4bit) {
                    Patch::Qlora(d).apply(t);
                }
                t.experts_layout = ExpertsLayout::PerExpert;
            }
            Patch::QvOnly => t.targets = vec![Target::Q, Target::V],
            Patch::GroupedMm => t.experts_impl = ExpertsImpl::GroupedMm,
            Patch::NoRouterLogits => t.output_router_logits = false,
            Patch::NoExpertLora => {
                t.target_parameters.clear();
                if t.targets.is_empty() {
                    t.targets = vec![Target::Q, Target::K, Target::V, Target::O];
                }
            }
            Patch::NoDora => t.use_dora = false,
            Patch::Lora => t.finetuning_type = FinetuningType::Lora,
            Patch::PrecomputeRef => t.precompute_ref_log_probs = true,
            Patch::Beta0 => t.beta = Some(0.0),
            Patch::OneIteration => t.num_iterations = 1,
            Patch::StepsPerGeneration(n) => {
                t.steps_per_generation = Some(n.max(1));
                t.generation_batch_size = None;
            }
            Patch::VllmServer => t.generation = crate::model::Generation::VllmServer,
            Patch::VllmShare(h) => t.vllm_gpu_memory_utilization = f64::from(h) / 100.0,
            Patch::VllmSleep => t.vllm_enable_sleep_mode = true,
            Patch::FusedLogprobs => t.logits = Some(crate::model::Logits::Fused),
            Patch::EvalAccumulation1 => t.job.eval_accumulation_steps = Some(1),
            Patch::LossOnly => t.job.prediction_loss_only = true,
            Patch::EvalBatch(b) => t.job.eval_batch = Some(b.max(1)),
            Patch::MaxNewTokens(n) => t.job.max_new_tokens = Some(n.max(1)),
            Patch::CpuExport => t.job.export_device = crate::model::job::ExportDevice::Cpu,
            Patch::FsdpVersion(v) => t.parallel.fsdp_version = v,
            Patch::Fsdp => {
                t.parallel.strategy = crate::model::Strategy::FsdpFullShard;
                t.parallel.fsdp_version = crate::model::FsdpVersion::V1;
            }
            Patch::Zero3 => t.parallel.strategy = crate::model::Strategy::Zero3,
        }
    }
}

/// One candidate change. Changes of the same `kind` exclude each other (two optimizers, two
/// weight formats, two micro-batches); a combination takes at most one of each kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// Stable id; its [`FixId::kind`] says what it changes.
    pub id: FixId,
    /// In the words of the training arguments.
    pub title: String,
    /// In a few words.
    pub short: String,
    /// What it costs, in words.
    pub cost: String,
    /// Cost weight, roughly "per cent slower, or a quality risk judged comparable": sdpa 1,
    /// 16-bit weights 1, no dropout 2, 8-bit AdamW 2, fused cross-entropy 3, paged AdamW 4,
    /// micro-batch 4 per halving, plain LoRA instead of DoRA 10, fewer targets 25, checkpointing
    /// 30, QLoRA 40, LoRA instead of full fine-tuning 40, Llama 4 from a checkpoint saved in 4
    /// bits 5 (from a 4-bit base quantized on load; 40 from 16 bits); several GPUs: FSDP1 for LoRA under FSDP2
    /// 3, FSDP instead of DDP 10, ZeRO-3 instead of ZeRO-1/2 10. The job's phases after training: the
    /// eval outputs moved every batch 1, a smaller eval batch 1 per halving, a merge in host
    /// memory 3, the loss only (no metrics) 10.
    pub weight: u32,
    /// The edit.
    pub patch: Patch,
}

impl Change {
    /// What the change edits: changes of one kind exclude each other.
    pub fn kind(&self) -> ChangeKind {
        self.id.kind()
    }

    /// `s` with this change.
    pub fn applied(&self, s: &Settings) -> Settings {
        let mut t = s.clone();
        self.patch.apply(&mut t);
        t
    }
}

/// Micro-batches offered below `batch`: the largest divisor at or under batch/2, batch/4, …, 1,
/// so the effective batch (micro-batch × accumulation) stays exactly the same.
pub fn micro_batches(batch: u64) -> Vec<u64> {
    let mut out: Vec<u64> = vec![];
    let mut cap = batch / 2;
    while cap >= 1 {
        if let Some(d) = (1..=cap).rev().find(|d| batch % d == 0) {
            if !out.contains(&d) {
                out.push(d);
            }
        }
        cap /= 2;
    }
    out
}

fn halvings(from: u64, to: u64) -> u32 {
    let mut n = 0;
    let mut b = from;
    while b > to {
        b = b.div_ceil(2);
        n += 1;
    }
    n
}

/// Every change the search may use for `s` (each applicable to `s`, none touching the sequence
/// length), in cost order within each kind.
pub fn changes(arch: &Architecture, s: &Settings, bf16_ok: bool) -> Vec<Change> {
    let mut out = vec![];
    let low = if bf16_ok { Dtype::Bf16 } else { Dtype::Fp16 };
    let mut shares: Vec<Change> = vec![];
    let mut push = |id, title: String, short: &str, cost: &str, weight, patch| {
        out.push(Change {
            id,
            title,
            short: short.into(),
            cost: cost.into(),
            weight,
            patch,
        })
    };
    if s.experts_layout == ExpertsLayout::Fused && s.experts_impl != ExpertsImpl::GroupedMm {
        push(
            FixId::GroupedMm,
            format!(
                "experts_implementation: {} → grouped_mm (transformers' default)",
                s.experts_impl.name()
            ),
            "grouped_mm experts",
            "none: one grouped matmul per projection over the tokens sorted by expert",
            1,
            Patch::GroupedMm,
        );
    }
    if s.output_router_logits {
        push(
            FixId::NoRouterLogits,
            "output_router_logits=False".into(),
            "no router logits",
            "no load-balancing loss: the routing may drift towards fewer experts",
            10,
            Patch::NoRouterLogits,
        );
    }
    if !s.target_parameters.is_empty() {
        push(
            FixId::NoExpertLora,
            "target_parameters: none (LoRA on attention and the Linear layers only)".into(),
            "no expert LoRA",
            "the experts are not adapted; each layer no longer keeps a W + B·A copy of its experts",
            30,
            Patch::NoExpertLora,
        );
    }
    if s.attn_impl == AttnImpl::Eager {
        push(
            FixId::Sdpa,
            "attn_implementation: eager → sdpa".into(),
            "sdpa attention",
            "none: same math, O(S) memory instead of O(S²), usually faster",
            1,
            Patch::Sdpa,
        );
    }
    if s.dtype == Dtype::Fp32 && s.quant.is_none() {
        push(
            FixId::Bf16Weights,
            format!(
                "load the base model in {} (torch_dtype={}) instead of fp32",
                low.name(),
                if bf16_ok {
                    "torch.bfloat16"
                } else {
                    "torch.float16"
                }
            ),
            if bf16_ok { "bf16 weights" } else { "fp16 weights" },
            "none for frozen weights under autocast: the copies autocast made were already low precision",
            1,
            Patch::Weights16(low),
        );
    }
    if s.use_dora {
        push(
            FixId::NoDora,
            "use_dora=False (plain LoRA)".into(),
            "plain LoRA",
            "DoRA's magnitude vectors go: LoRA usually trains a little less well per parameter",
            10,
            Patch::NoDora,
        );
    }
    if s.base_trained() {
        push(
            FixId::Lora,
            format!(
                "finetuning_type: {} → lora (r {}, the LoRA target modules)",
                s.finetuning_type.name(),
                s.lora_r
            ),
            "LoRA adapters",
            "only the adapters train: no gradient or optimizer state for the base weights; often close to full fine-tuning for instruction tuning, less so for new knowledge",
            40,
            Patch::Lora,
        );
    }
    if s.grpo() && s.reference_pass() {
        push(
            FixId::GrpoBeta0,
            "beta=0.0 (no KL term)".into(),
            "β 0",
            "no KL penalty toward the reference (TRL 1.x's default): no reference pass, and for a trained base no reference copy; the policy may drift further from where it started",
            8,
            Patch::Beta0,
        );
    }
    if s.grpo_old_logps() && s.num_iterations > 1 {
        push(
            FixId::OneIteration,
            format!("num_iterations {} → 1", s.num_iterations),
            "one update per generation",
            "no old-policy pass: each generation is trained on once, so the same number of updates needs more generation time",
            12,
            Patch::OneIteration,
        );
    }
    if let Some(n) = fewer_steps_per_generation(s) {
        push(
            FixId::SmallerGenerationBatch,
            format!(
                "steps_per_generation {} → {n}",
                s.steps_per_generation_run()
            ),
            "a smaller generation batch",
            "batch × GPUs × steps_per_generation rows are generated and scored at once: fewer rows, generated more often (more, smaller generation calls per optimizer step)",
            5,
            Patch::StepsPerGeneration(n),
        );
    }
    if s.grpo() && s.generation == crate::model::Generation::VllmColocate {
        if !s.vllm_enable_sleep_mode {
            push(
                FixId::VllmSleep,
                "vllm_enable_sleep_mode=True".into(),
                "vLLM sleep mode",
                "vLLM frees its weights and KV cache after each generation and loads them again before the next (seconds per step)",
                6,
                Patch::VllmSleep,
            );
        }
        // Each smaller share, largest first: the fixes keep the largest that fits.
        let now = (s.vllm_gpu_memory_utilization * 100.0).round() as u32;
        for h in (1..=19u32).rev().map(|k| k * 5).filter(|&h| h < now) {
            shares.push(Change {
                id: FixId::VllmShare,
                title: format!(
                    "vllm_gpu_memory_utilization {} → {:.2}",
                    s.vllm_gpu_memory_utilization,
                    f64::from(h) / 100.0
                ),
                short: format!("vLLM's share {:.2}", f64::from(h) / 100.0),
                cost: "a smaller KV cache for vLLM: fewer sequences generated at once when completions are long (slower generation), none if its cache still holds the generation batch".into(),
                weight: 2,
                patch: Patch::VllmShare(h),
            });
        }
    }
    if s.grpo() && s.generation != crate::model::Generation::VllmServer {
        push(
            FixId::VllmServer,
            "use_vllm=True, vllm_mode=\"server\" (trl vllm-serve on other GPUs)".into(),
            "generation on vLLM servers",
            "the completions are generated on other GPUs (at least one more); the weights are sent to the server after every optimizer step",
            20,
            Patch::VllmServer,
        );
    }
    if s.preference() && s.reference_pass() {
        push(
            FixId::PrecomputeRef,
            "precompute_ref_log_probs=True".into(),
            "precomputed reference",
            "one no-grad pass over the dataset before training (minutes to hours), its log-probs stored with the data; no reference forward, and for a trained base no reference copy, in the step",
            2,
            Patch::PrecomputeRef,
        );
    }
    if s.logits_run() == crate::model::Logits::Full && !s.fused_ce.any() {
        let (title, cost) = if s.preference() {
            ("TRL ≥ 1's fused log-prob head (DPOTrainer / KTOTrainer)", "none in the result: the same log-probs from [4096 × 32768] tiles instead of the fp32 logits; needs TRL's trainer instead of LLaMA-Factory's")
        } else {
            ("TRL ≥ 1's SFTTrainer (its fused LM head)", "none in the result: the same loss from log-probs scored in [4096 × 32768] tiles instead of the fp32 logits, with TRL's SFTTrainer in place of Trainer's or LLaMA-Factory's")
        };
        push(
            FixId::FusedLogprobs,
            title.into(),
            "fused log-probs",
            cost,
            3,
            Patch::FusedLogprobs,
        );
    }
    if s.fsdp2_op_by_op(arch) && !s.fsdp2_layer_units() {
        push(
            FixId::Fsdp1,
            "fsdp_version 2 → 1".into(),
            "FSDP1 for LoRA",
            "FSDP1 applies Trainer's peft wrapping (each decoder layer and each LoRA module a unit of its own), so a layer is gathered at a time instead of the whole stack",
            3,
            Patch::FsdpVersion(crate::model::FsdpVersion::V1),
        );
    }
    if s.parallel.ddp_ranks() {
        push(
            FixId::Fsdp,
            "strategy: ddp → fsdp (FULL_SHARD, fsdp_version 1)".into(),
            "FSDP instead of DDP",
            "each GPU keeps its share of the weights, gradients and optimizer states and gathers each unit before its forward and again before its backward (the gathers are counted in the time)",
            10,
            Patch::Fsdp,
        );
    }
    if s.parallel.world() > 1
        && matches!(
            s.parallel.strategy,
            crate::model::Strategy::Zero1 | crate::model::Strategy::Zero2
        )
    {
        push(
            FixId::Zero3,
            format!("strategy: {} → zero3", s.parallel.strategy.name()),
            "ZeRO-3",
            "the parameters are sharded too, each layer gathered for its forward and again for its backward (the gathers are counted in the time); ZeRO-3 is planned with two gathered layers held through the step",
            10,
            Patch::Zero3,
        );
    }
    if s.dropout_run() > 0.0 && !s.targets.is_empty() && !s.base_trained() {
        push(
            FixId::Dropout0,
            format!("lora_dropout {} → 0", s.lora_dropout),
            "LoRA dropout 0",
            "less regularisation; without dropout peft keeps no dropout output or mask per adapted module",
            2,
            Patch::Dropout0,
        );
    }
    // An AdamW with 32-bit states.
    let adamw32 = matches!(
        s.optimizer,
        Optimizer::AdamwTorchFused
            | Optimizer::AdamwTorchForeach
            | Optimizer::AdamwTorch
            | Optimizer::PagedAdamw32bit
    );
    if adamw32 {
        push(
            FixId::Adamw8bit,
            format!("optim {} → adamw_8bit (bitsandbytes)", s.optimizer.name()),
            "8-bit AdamW",
            "states in 8 bits: indistinguishable loss curves in most LoRA runs",
            2,
            Patch::Optimizer(Optimizer::Adamw8bit),
        );
    }
    if adamw32
        || matches!(
            s.optimizer,
            Optimizer::Adamw8bit | Optimizer::AdamwTorch8bit
        )
    {
        push(
            FixId::Adamw4bit,
            format!("optim {} → adamw_torch_4bit (torchao)", s.optimizer.name()),
            "4-bit AdamW (torchao)",
            "states in 4 bits, one scale per 256 values: torchao reports loss curves close to 32-bit AdamW; each parameter's update is a torch.compile'd kernel (compiled at the first step)",
            3,
            Patch::Optimizer(Optimizer::AdamwTorch4bit),
        );
    }
    if !matches!(
        s.optimizer,
        Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit | Optimizer::Sgd
    ) {
        push(
            FixId::Paged,
            format!("optim {} → paged_adamw_8bit", s.optimizer.name()),
            "paged 8-bit AdamW",
            "states of 100000 values or more in CUDA managed memory, evicted to CPU under pressure (slower when it pages); smaller ones stay in PyTorch's allocator",
            4,
            Patch::Optimizer(Optimizer::PagedAdamw8bit),
        );
    }
    if !s.fused_ce.any() && !s.preference() && !s.sft_fused_head() {
        push(
            FixId::FusedCe,
            "use a fused / chunked cross-entropy (e.g. Liger's FusedLinearCrossEntropy)".into(),
            "fused cross-entropy",
            "an extra dependency; the [tokens × vocab] logits are never materialised",
            3,
            Patch::FusedCe(FusedCe::Liger),
        );
    }
    // Cut cross-entropy needs a 16-bit head (the plan refuses it otherwise); it is the full
    // planner's (`extended::needed`).
    if crate::model::extended::EXTENDED
        && s.fused_ce != FusedCe::Cce
        && !s.preference()
        && !s.grpo()
        && !s.sft_fused_head()
        && s.aux_weight_dtype().bytes() == 2
    {
        push(
            FixId::Cce,
            "use cut cross-entropy (axolotl's cut_cross_entropy plugin)".into(),
            "cut cross-entropy",
            "axolotl's plugin (or its cut-cross-entropy package patched in); no logits are stored: each row's log-sum-exp in the forward, the gradients in one blockwise backward kernel",
            3,
            Patch::FusedCe(FusedCe::Cce),
        );
    }
    // Liger's RMSNorm with trained norm weights is not planned (its weight gradient's buffer is
    // sized by the GPU): full and freeze tuning get the other two; a family without Liger's
    // RoPE kernel gets none, one without its SwiGLU (gpt-oss) none of that.
    let liger = Liger {
        rms_norm: !s.base_trained(),
        rope: arch.family.layout().liger.is_none_or(|l| l.rope_planned()),
        swiglu: arch.family.layout().liger.is_none_or(|l| l.swiglu()),
    };
    // (A build without the extended ops cannot plan Liger's kernels: it offers no such fix.)
    if crate::model::extended::EXTENDED && arch.family.layout().liger.is_some() && s.liger != liger
    {
        push(
            FixId::Liger,
            "use_liger_kernel=True (Liger's RMSNorm, SwiGLU / GeGLU and RoPE)".into(),
            "Liger kernels",
            "an extra dependency (liger-kernel, Triton); each layer saves fewer activations for backward",
            3,
            Patch::Liger(liger),
        );
    }
    if !s.grad_ckpt {
        push(
            FixId::GradCkpt,
            "gradient_checkpointing=True".into(),
            "gradient checkpointing",
            "recomputes each layer's forward during the backward (one more forward per step)",
            30,
            Patch::GradCkpt,
        );
    }
    for b in micro_batches(s.batch) {
        let accum = s.grad_accum.saturating_mul(s.batch / b);
        out.push(Change {
            id: FixId::SmallerBatch,
            title: format!(
                "per_device_train_batch_size {} → {b}, gradient_accumulation_steps {} → {accum}",
                s.batch, s.grad_accum
            ),
            short: format!("micro-batch {b} × accumulation {accum}"),
            cost: format!(
                "same effective batch ({}); smaller matmuls use the GPU less efficiently",
                s.batch.saturating_mul(s.grad_accum)
            ),
            weight: 4 * halvings(s.batch, b),
            patch: Patch::MicroBatch(b),
        });
    }
    // From no quantization, or from an 8-bit base (LLM.int8 keeps a byte per weight).
    if !s.quant.is_some_and(Quant::is_4bit) && !s.base_trained() {
        out.push(Change {
            id: FixId::Qlora,
            title: format!(
                "QLoRA: load_in_4bit (nf4, double quant), {} autocast",
                low.name()
            ),
            short: "QLoRA (4-bit nf4)".into(),
            cost: "dequantises the 4-bit weights in every forward and backward; small quality cost reported for nf4"
                .into(),
            weight: 40,
            patch: Patch::Qlora(low),
        });
    }
    // Llama 4: a checkpoint saved in 4 bits has 4-bit experts; quantized on load they stay
    // 16-bit (bitsandbytes replaces nn.Linear modules only).
    if let Some(module) = arch
        .moe_layout()
        .and_then(|m| m.prequantized_experts)
        .filter(|_| s.experts_layout == ExpertsLayout::Fused && !s.base_trained())
    {
        let four = s.quant.is_some_and(Quant::is_4bit);
        out.push(Change {
            id: FixId::Prequantized,
            title: format!(
                "a checkpoint saved in 4 bits (bitsandbytes{}): transformers loads its experts as {module}, 4-bit",
                if four { "" } else { " nf4, double quant" }
            ),
            short: "a 4-bit checkpoint (4-bit experts)".into(),
            cost: "needs the model published already quantized with bitsandbytes (its config.json carries the quantization_config); the experts then run one after another instead of in one batched matmul"
                .into(),
            weight: if four { 5 } else { 40 },
            patch: Patch::Prequantized(low),
        });
    }
    if s.targets.len() > 2
        && s.targets.contains(&Target::Q)
        && s.targets.contains(&Target::V)
        && !s.base_trained()
    {
        out.push(Change {
            id: FixId::FewerTargets,
            title: "target_modules: only q_proj, v_proj".into(),
            short: "LoRA on q_proj, v_proj only".into(),
            cost: "fewer adapted modules: usually slightly lower quality than all-linear".into(),
            weight: 25,
            patch: Patch::QvOnly,
        });
    }
    out.extend(shares);
    out.extend(job_changes(s));
    out
}

/// The changes aimed at the job's phases after training: what the evaluation keeps on the GPU,
/// its batch, and where the merge runs. Each applies only to a job that has the phase, so a
/// plan without evaluation or a merge on the GPU searches exactly what it did before.
fn job_changes(s: &Settings) -> Vec<Change> {
    let js = &s.job;
    let mut out = vec![];
    if js.evaluates() && !js.prediction_loss_only {
        if js.eval_batches_on_gpu() > 1 {
            out.push(Change {
                id: FixId::EvalAccumulation,
                title: format!(
                    "eval_accumulation_steps {} → 1",
                    js.eval_accumulation_steps
                        .map_or("unset".to_string(), |n| n.to_string())
                ),
                short: "eval outputs off the GPU every batch".into(),
                cost: format!(
                    "a device-to-host copy of each batch's logits ({} batches kept on the GPU before); the host then holds them (fp32)",
                    js.eval_batches_on_gpu()
                ),
                weight: 1,
                patch: Patch::EvalAccumulation1,
            });
        }
        out.push(Change {
            id: FixId::LossOnly,
            title: "prediction_loss_only=True (no compute_metrics)".into(),
            short: "eval loss only".into(),
            cost: "compute_metrics gets nothing: only the evaluation loss is reported".into(),
            weight: 10,
            patch: Patch::LossOnly,
        });
    }
    if js.evaluates() {
        let from = js.eval_batch();
        let mut b = from / 2;
        while b >= 1 {
            out.push(Change {
                id: FixId::SmallerEvalBatch,
                title: format!("per_device_eval_batch_size {from} → {b}"),
                short: format!("eval batch {b}"),
                cost: "evaluation takes more, smaller batches (training is unchanged)".into(),
                weight: halvings(from, b),
                patch: Patch::EvalBatch(b),
            });
            b /= 2;
        }
    }
    if js.generates_in_eval() {
        let from = js.eval_new_tokens(s);
        let to = from / 2;
        if to >= 1 {
            out.push(Change {
                id: FixId::ShorterEvalGeneration,
                title: format!("max_new_tokens {from} → {to}"),
                short: format!("eval generates {to} tokens"),
                cost: "the evaluation's generated answers are cut shorter (training is unchanged)"
                    .into(),
                weight: 6,
                patch: Patch::MaxNewTokens(to),
            });
        }
    }
    if js.merge && js.export_device == crate::model::job::ExportDevice::Gpu {
        out.push(Change {
            id: FixId::CpuExport,
            title: "export_device: cpu (merge in host memory after training)".into(),
            short: "merge on the CPU".into(),
            cost: "a slower merge, and the model in host memory while it runs".into(),
            weight: 3,
            patch: Patch::CpuExport,
        });
    }
    out
}

/// GRPO's smallest `steps_per_generation` below the one it runs that keeps whole prompt
/// groups in the generation batch (`batch × GPUs × steps_per_generation` a multiple of
/// `num_generations`, TRL's check), if there is one.
fn fewer_steps_per_generation(s: &Settings) -> Option<u64> {
    if !s.grpo() {
        return None;
    }
    let now = s.steps_per_generation_run();
    let global = u128::from(s.batch.max(1)) * s.parallel.world().max(1);
    let groups = u128::from(s.num_generations.max(1));
    (1..now).find(|&n| (global * u128::from(n)) % groups == 0)
}
