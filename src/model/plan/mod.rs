//! A plan: the step program's allocation sequence read for the peak, each phase's highest moment
//! and the tensors live then ([`steptrace::anatomy`]), with what a real GPU shows on top
//! ([`reserve`]: the allocator's reserve, the CUDA context).

use serde::Serialize;

use super::arch::Architecture;
use super::ctx::{Ctx, SdpaMask};
use super::distributed;
use super::error::PlanError;
use super::extended::EXTENDED;
use super::settings::{AttnImpl, Settings};
use super::steptrace::{self, anatomy};
use super::term::{Component, Term};
use super::weights::{self, ParamCounts};

pub mod reserve;

pub use reserve::{CachedBlock, CUDA_CONTEXT_BYTES};

/// A phase of the (second) training step, when optimizer states already exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// A preference trainer's reference log-probs computed before training
    /// (`precompute_ref_log_probs`).
    PrecomputeRef,
    /// A GRPO step's generation of its completions (`generate` on the training GPU).
    Generate,
    /// A GRPO step's scoring of its generated completions (no-grad log-prob passes).
    Score,
    /// Forward pass, at the loss (logits + log_softmax alive).
    Forward,
    /// A preference step's reference forward (no grad, adapters disabled), on top of what the
    /// policy forward saved.
    RefForward,
    /// Start of backward (log_softmax backward) or inside a recomputed layer.
    Backward,
    /// optimizer.step().
    Optimizer,
}

impl Phase {
    /// Lowercase name, as the reference data spells it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::PrecomputeRef => "precompute_ref",
            Phase::Generate => "generate",
            Phase::Score => "score",
            Phase::Forward => "forward",
            Phase::RefForward => "ref_forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// Memory at one moment of the step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhasePeak {
    /// Which phase.
    pub phase: Phase,
    /// Where exactly.
    pub moment: String,
    /// Live bytes.
    pub bytes: u128,
    /// The terms that add up to `bytes`.
    pub terms: Vec<Term>,
}

/// Bytes of one component at the peak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComponentBytes {
    /// Stable key.
    pub key: &'static str,
    /// Label.
    pub label: &'static str,
    /// Bytes.
    pub bytes: u128,
}

/// The full answer for one configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Parameter counts.
    pub params: ParamCounts,
    /// Peak of live tensor bytes (`torch.cuda.max_memory_allocated()`).
    pub peak_allocated_bytes: u128,
    /// Phase of the peak.
    pub peak_phase: Phase,
    /// Where in the phase.
    pub peak_moment: String,
    /// Per-component bytes at the peak (all components, zeros included, stacking order).
    pub breakdown: Vec<ComponentBytes>,
    /// Every term at the peak, with formula and numbers.
    pub terms: Vec<Term>,
    /// Highest memory of each phase.
    pub phases: Vec<PhasePeak>,
    /// Memory between steps (weights + optimizer states).
    pub steady_state_bytes: u128,
    /// `torch.cuda.max_memory_reserved()`: simulated (see `reserve_simulated`) or a quick
    /// allowance.
    pub peak_reserved_bytes: u128,
    /// How the reserved figure was reached.
    pub reserve_explanation: String,
    /// The reserved figure comes from the caching-allocator simulation ([`plan_simulated`]);
    /// false for [`plan`]'s quick allowance.
    pub reserve_simulated: bool,
    /// Largest cached-but-free blocks at the reserved peak (simulated plans only).
    pub cached_free_blocks: Vec<CachedBlock>,
    /// Estimated nvidia-smi "memory used": reserved + `outside_terms`.
    pub nvidia_smi_bytes: u128,
    /// Bytes outside PyTorch's allocator (the sum of `outside_terms`).
    pub outside_allocator_bytes: u128,
    /// What lies outside the allocator, explained (CUDA context and workspaces, paged optimizer
    /// states, NCCL buffers).
    pub outside_terms: Vec<Term>,
    /// GPUs in total (the numbers above are per GPU).
    pub world_size: u128,
    /// micro-batch × accumulation × data-parallel ranks.
    pub effective_batch: u128,
    /// CPU RAM one rank needs for offloaded tensors.
    pub cpu_bytes_per_rank: u128,
    /// CPU RAM one node needs (all its ranks).
    pub cpu_bytes_per_node: u128,
    /// What is offloaded, explained.
    pub cpu_terms: Vec<Term>,
    /// What the plan assumes beyond the settings as given (how transformers runs this model).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// What the warm training step's ops create (bytes by kind, storages): the step-time
    /// model's memory traffic and op count (`planning::time`).
    #[serde(skip)]
    pub work: steptrace::StepWork,
    /// A vision-language step's images: how each becomes patches and visual tokens, and the
    /// tower (its share of the peak is the breakdown's `vision_tower`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vision: Option<VisionPlan>,
}

/// The visual part of a vision-language plan.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct VisionPlan {
    /// Images per sample.
    pub images_per_sample: u64,
    /// Each image after LLaMA-Factory's resize (`image_max_pixels` / `image_min_pixels`).
    pub loaded_width: u64,
    /// See `loaded_width`.
    pub loaded_height: u64,
    /// Each image as the tower sees it (the processor's `smart_resize`).
    pub width: u64,
    /// See `width`.
    pub height: u64,
    /// Patches of one image.
    pub patches_per_image: u64,
    /// Visual tokens of one image.
    pub visual_tokens_per_image: u64,
    /// Tokens of each sample's `seq` the images take: visual tokens and each image's start and
    /// end markers.
    pub image_sequence_tokens: u64,
    /// The rest of `seq`: text.
    pub text_tokens: u64,
    /// Parameters of the vision tower (frozen).
    pub tower_params: u128,
}

impl Plan {
    /// The job's nvidia-smi memory across all its GPUs (every rank holds the same share).
    pub fn nvidia_smi_bytes_all_gpus(&self) -> u128 {
        self.nvidia_smi_bytes.saturating_mul(self.world_size)
    }
}

fn total(terms: &[Term]) -> u128 {
    terms.iter().fold(0u128, |a, t| a.saturating_add(t.bytes))
}

/// Refuses inputs the model cannot plan (ranges, and a rank above the hidden size).
fn check_inputs(arch: &Architecture, s: &Settings) -> Result<(), PlanError> {
    arch.validate()?;
    s.validate()?;
    if let Some((named, missing)) = crate::model::peft_targets::lone_gate_or_up(arch, s) {
        return Err(PlanError::InvalidSetting {
            field: "target_modules",
            why: format!(
                "peft 0.21 maps {named} of this model onto its fused experts' gate_up_proj, which it refuses without {missing} (\"Cannot convert PEFT target(s) {named} without also targeting {missing}\"): target both or neither"
            ),
        });
    }
    if EXTENDED
        && s.lora_dropout > 0.0
        && !crate::model::peft_targets::expert_loras(arch, s).is_empty()
    {
        let (field, why) = if s.target_parameters.is_empty() {
            (
                "lora_dropout",
                format!(
                    "peft 0.21 maps gate_proj, up_proj and down_proj of this model onto its fused experts (peft's ParamWrapper), which refuses lora_dropout {}: set it to 0, or leave those names out of target_modules",
                    s.lora_dropout
                ),
            )
        } else {
            (
                "target_parameters",
                format!(
                    "LoRA on the experts (peft's ParamWrapper) refuses lora_dropout {}: set it to 0",
                    s.lora_dropout
                ),
            )
        };
        return Err(PlanError::InvalidSetting { field, why });
    }
    if EXTENDED && arch.is_moe() && s.experts_layout == super::settings::ExpertsLayout::PerExpert {
        let sequential = arch.moe_layout().and_then(|m| m.prequantized_experts);
        let why = if arch.moe_layout().is_some_and(|m| m.mxfp4_checkpoint) {
            Some("gpt-oss's experts are fused 3-D parameters in every transformers release: plan the fused layout".to_string())
        } else if let Some(module) = sequential {
            // (LoRA on its experts' Linear layers is planned: peft's MLP names reach them.)
            (!s.quant.is_some_and(|q| q.is_4bit())).then(|| format!(
                "{}'s per-expert layout is transformers' {module}, built only when a checkpoint saved in 4 bits is loaded: plan it with quant nf4 (or fp4), or plan the fused layout",
                arch.family.name()
            ))
        } else if !s.target_parameters.is_empty() {
            Some("target_parameters adapts fused 3-D expert parameters, which transformers 4's per-expert layout does not have: use the fused layout, or leave target_parameters empty".to_string())
        } else if s.targets.iter().any(|t| t.is_mlp()) {
            Some("with transformers 4's per-expert layout, LoRA on the MLP (all-linear, gate/up/down) adapts every expert's Linear layers, which lorafit does not model: target the attention projections (q, k, v, o), or plan the fused layout of transformers 5".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(PlanError::InvalidSetting {
                field: "experts_layout",
                why,
            });
        }
    }
    if EXTENDED {
        steptrace::check_method(arch, s)?;
        crate::model::vision::visual(arch.tower(), &s.images, s.seq)
            .map_err(|(field, why)| PlanError::InvalidSetting { field, why })?;
    }
    if EXTENDED && (s.packing || s.neat_packing) {
        if let Some(why) = packing_unplanned(arch, s) {
            return Err(PlanError::InvalidSetting {
                field: if s.neat_packing {
                    "neat_packing"
                } else {
                    "packing"
                },
                why: why.into(),
            });
        }
    }
    let images = EXTENDED && s.images.images_per_sample > 0;
    if images && s.base_trained() {
        return Err(PlanError::InvalidSetting {
            field: "finetuning_type",
            why: "full and freeze fine-tuning with images (the embedding's gradient through the scattered visual tokens) are not planned yet: plan LoRA with images, or a text-only step".into(),
        });
    }
    if images && (s.preference() || s.parallel.world() > 1) {
        return Err(PlanError::InvalidSetting {
            field: "images_per_sample",
            why: "images are planned for supervised fine-tuning on one GPU so far (the preference trainers' and the sharded steps' handling of the vision tower is not measured yet): set 0 images, or plan SFT on one GPU".into(),
        });
    }
    if images && s.autocast.is_some() {
        return Err(PlanError::InvalidSetting {
            field: "autocast",
            why: "autocast over the vision tower's forward (its weights cast to the autocast dtype for every op) is not planned yet: plan the model in its training dtype without autocast".into(),
        });
    }
    if images && s.quant.is_some() {
        return Err(PlanError::InvalidSetting {
            field: "quant",
            why: "images through a quantized vision tower (bitsandbytes dequantizing its Linear layers for every image) are not planned yet: plan the images in 16 bits, or a text-only step quantized".into(),
        });
    }
    if s.quant == Some(super::dtype::Quant::Int8) {
        // (experts, linear attention and towers are the full planner's, `extended::needed`)
        let why = if EXTENDED
            && (arch.is_moe() || arch.linear_layers() > 0 || arch.vision.is_some())
        {
            Some("an 8-bit base is planned for dense decoder models (LLM.int8 on experts, linear-attention layers and vision towers is not measured): plan this model in 4 bits or 16 bits")
        } else if EXTENDED && s.use_dora {
            Some("DoRA on an 8-bit base (peft dequantizing the int8 weight for the weight norm) is not planned: plan DoRA on a 4-bit or 16-bit base")
        } else if s.parallel.param_shards() > 1 {
            Some("FSDP and ZeRO-3 cannot shard bitsandbytes' int8 weights (Int8Params): plan DDP or ZeRO-1/2, or a 4-bit base with its storage dtype")
        } else if EXTENDED && s.stage != super::settings::Stage::Sft {
            Some("an 8-bit base is measured for supervised fine-tuning: plan the preference and RL trainers in 4 bits or 16 bits")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(PlanError::InvalidSetting {
                field: "quant",
                why: why.into(),
            });
        }
    }
    if matches_nothing(arch, s) {
        let model = if arch.name.is_empty() {
            "this model"
        } else {
            &arch.name
        };
        let wanted = s
            .targets
            .iter()
            .map(|t| crate::model::arch::Target::module_name(*t))
            .collect::<Vec<_>>()
            .join(" or ");
        // (a mixture of experts is the full planner's, `extended::needed`)
        let why = if EXTENDED && arch.is_moe() {
            format!(
                "no module of {model} is named {wanted}: its experts are fused 3-D parameters and it has no dense MLP, so gate_proj, up_proj and down_proj do not exist (peft raises \"Target modules … not found in the base model\"); add attention projections (q, k, v, o) or target_parameters"
            )
        } else {
            let mut names: Vec<&str> = vec![];
            for l in arch
                .layer_groups()
                .iter()
                .flat_map(|&(k, _)| arch.block_linears(k))
            {
                if !names.contains(&l.name) {
                    names.push(l.name);
                }
            }
            format!(
                "no module of {model} is named {wanted} (peft raises \"Target modules … not found in the base model\"); its Linear layers are {}",
                names.join(", ")
            )
        };
        return Err(PlanError::InvalidSetting {
            field: "target_modules",
            why,
        });
    }
    if s.lora_r > arch.hidden_size && !s.base_trained() {
        return Err(PlanError::InvalidSetting {
            field: "lora_r",
            why: format!("rank {} exceeds hidden_size {}", s.lora_r, arch.hidden_size),
        });
    }
    Ok(())
}

/// Why packing — padding-free ([`Settings::packing`]) or LLaMA-Factory's neat packing
/// ([`Settings::neat_packing`]) — with these settings is not planned, if it is not: what it is
/// measured for is a dense SFT step whose attention is full (sdpa or eager with the documents'
/// mask, or flash-attention-2's variable-length kernel).
fn packing_unplanned(arch: &Architecture, s: &Settings) -> Option<&'static str> {
    let layout = arch.family.layout();
    if s.neat_packing {
        if s.packing {
            return Some("LLaMA-Factory's neat_packing keeps a row per packed sample; padding-free packing puts the batch in one row: plan one of them");
        } else if s.sft_fused_head() {
            return Some("neat_packing is LLaMA-Factory's, whose Trainer computes the full logits: plan logits full");
        } else if s.attn_impl == AttnImpl::FlashAttention2 && s.batch > 1 {
            return Some("LLaMA-Factory's neat_packing under flash_attention_2 unpads one row, and its collator asserts a batch of one (\"bsz should be 1 for neat packing\"): plan batch 1");
        }
    }
    if s.padded_mask {
        Some("a packed row has no padding: padding-free packing and a padded attention mask exclude each other")
    } else if s.stage != super::settings::Stage::Sft {
        Some("padding-free packing is planned for SFT steps: the preference and RL trainers' padding-free batches are not planned yet")
    } else if layout.sliding.is_some() {
        Some("the packed masks of sliding-window layers are not planned yet")
    } else if layout.hybrid.is_some() {
        Some("linear-attention layers read packed documents from seq_idx and cu_seqlens, which is not planned yet")
    } else if s.images.images_per_sample > 0 || arch.vision.is_some() {
        Some("TRL refuses packing for vision datasets (\"Packing is not supported for vision datasets\"): plan the images unpacked")
    } else {
        None
    }
}

/// With grouped-query attention and a mask, sdpa is given k and v repeated for every query head:
/// transformers uses sdpa's own grouped-query attention only without a mask
/// (`integrations/sdpa_attention.py`, `use_gqa_in_sdpa`), and the kernel keeps what it is given.
fn repeated_kv_note(arch: &Architecture, s: &Settings) -> Option<String> {
    let run = s.as_run(arch);
    let ctx = Ctx::new(arch, &run);
    let masked = matches!(
        ctx.sdpa_mask(),
        SdpaMask::Padded | SdpaMask::Packed | SdpaMask::Given
    );
    let heads = arch.num_attention_heads;
    let standard = arch.family.layout().attention == super::family::AttentionKind::Standard;
    if !masked || arch.kv_heads() >= heads || !standard {
        return None;
    }
    let tokens = u128::from(run.sequences()) * u128::from(run.seq);
    let per_layer = 2 * tokens * arch.q_dim() * ctx.attn.bytes();
    Some(format!(
        "with a mask, sdpa is given k and v repeated for each of the {heads} query heads (transformers uses sdpa's own grouped-query attention only without one): {:.0} MiB per layer, kept for backward",
        per_layer as f64 / f64::from(1u32 << 20)
    ))
}

/// What DistributedDataParallel adds on each GPU (`steptrace/program/ddp.rs`), and what of it
/// the plan leaves out.
fn ddp_note(s: &Settings) -> String {
    let (first, cap) = s.ddp_bucket_caps();
    let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
    let why = match s.ddp_find_unused_parameters {
        Some(_) => "as set",
        None if !s.base_trained() => "Trainer's default for a peft model",
        None => "Trainer's default for a full model",
    };
    let mut parts = vec![
        "DistributedDataParallel as accelerate wraps the model for Trainer: each GPU holds the whole model, its gradients and a second copy of every trainable gradient in the reducer's buckets".to_string(),
        if s.ddp_finds_unused() {
            format!("find_unused_parameters on ({why}): buckets of {:.0} then {:.0} MiB from the start, and the loss and logits cloned after every forward", mib(first), mib(cap))
        } else {
            format!("find_unused_parameters off ({why}): one bucket of every gradient, rebuilt before the second step into buckets of {:.0} then {:.0} MiB in the order the first backward made the gradients", mib(first), mib(cap))
        },
        format!(
            "at construction the module's states are sent from rank 0 in buckets of 250 MiB per dtype, each concatenated into a temporary the allocator keeps cached{}",
            if s.ddp_broadcast_buffers {
                ", and the buffers are sent again before every forward"
            } else {
                ""
            }
        ),
        "rank 0's first step measured under a fake process group matches to the byte; the rebuild and the clones follow PyTorch's source and a real run on the CPU".to_string(),
    ];
    if s.preference() || s.grpo() || s.sft_fused_head() {
        parts.push("under TRL's trainers the reducer's construction and buckets are planned, not what DDP does around each of their forwards (the buffers sent, the outputs cloned)".into());
    } else if s.output_router_logits && s.ddp_finds_unused() {
        parts.push("the router logits DDP clones with the outputs are not planned".into());
    }
    parts.join("; ")
}

/// What packing runs: padding-free, one row, and under sdpa the row's block-causal mask and each
/// layer's bias made from it; neat packing, each row's 4-D mask from the collator (sizes from
/// the step's own dtypes).
fn packing_note(arch: &Architecture, s: &Settings) -> String {
    let run = s.as_run(arch);
    let tokens = u128::from(run.seq);
    let mib = |b: u128| b as f64 / f64::from(1u32 << 20);
    if run.neat_packing {
        let es = run.neat_mask_dtype();
        let mask = u128::from(run.batch) * tokens * tokens * es.bytes();
        return format!(
            "LLaMA-Factory's neat_packing: each of the {} rows of {} tokens carries its documents' block-diagonal causal mask, which the collator builds on the host in {} ({:.0} MiB for the batch) and every layer's sdpa takes as it is; position ids restart at every document",
            run.batch,
            run.seq,
            es.name(),
            mib(mask)
        );
    }
    let row = format!(
        "padding-free packing: the {} samples of {} tokens run as one row of {} tokens, with position ids restarting at every packed document",
        s.batch, s.seq, run.seq
    );
    if run.attn_impl == AttnImpl::FlashAttention2 {
        return format!("{row}; flash_attention_2 takes the documents' boundaries into its variable-length kernel, with no mask (the per-layer boundary tensors, a few bytes per document, are not planned)");
    }
    let mask = tokens.saturating_mul(tokens);
    let bias = mask.saturating_mul(Ctx::new(arch, &run).attn.bytes());
    format!(
        "{row}; transformers finds the documents in the position ids and gives sdpa the row's block-causal mask ({tokens}² booleans, {:.0} MiB), which every layer's attention turns into a {:.0} MiB bias {}; flash_attention_2's variable-length kernel needs neither",
        mib(mask),
        mib(bias),
        if s.grad_ckpt {
            "(with checkpointing, one layer's at a time)"
        } else {
            "kept for backward"
        }
    )
}

/// Whether LoRA's target modules match nothing in the model: only MLP projections, on a
/// mixture of experts whose every layer routes to fused experts with no shared MLP.
/// LoRA whose `target_modules` name no Linear layer of the model (and no expert parameter is
/// targeted either): peft refuses it.
fn matches_nothing(arch: &Architecture, s: &Settings) -> bool {
    if s.base_trained() || !crate::model::peft_targets::expert_loras(arch, s).is_empty() {
        return false;
    }
    !arch
        .layer_groups()
        .iter()
        .flat_map(|&(k, _)| arch.block_linears(k))
        .any(|l| l.selected_by.iter().any(|t| s.targets.contains(t)))
}

/// Plans one configuration, with the quick reserve allowance: the allocated figures are the
/// step program's, its sequence run at two short depths and extrapolated to the model's
/// ([`steptrace::periodic::Short`]), on one GPU or as one rank of several.
pub fn plan(arch: &Architecture, s: &Settings) -> Result<Plan, PlanError> {
    plan_on(arch, s, steptrace::Device::Cuda)
}

/// [`plan`] for the step as `device` runs it (the harness's emulated device: where a real GPU
/// adds a gradient in place, fake tensors never do).
pub fn plan_on(
    arch: &Architecture,
    s: &Settings,
    device: steptrace::Device,
) -> Result<Plan, PlanError> {
    let (mut p, step) = plan_base(arch, s)?;
    let ctx = Ctx::new(arch, &step);
    let short = steptrace::periodic::Short::run(arch, s, device)?;
    from_program(&mut p, &ctx, s, short);
    Ok(p)
}

/// The quick plan's nvidia-smi figure across micro-batches and sequence lengths, for searches
/// that plan one configuration at many of them: the step's live bytes as polynomials in both
/// ([`steptrace::surface`]) with the quick allowance and what lies outside the allocator.
#[derive(Clone, Debug)]
pub struct QuickSurface {
    surface: steptrace::surface::Surface,
    layers: u64,
    outside_bytes: u128,
    settings: Settings,
}

impl QuickSurface {
    /// The surface of `s`'s configuration (its batch and sequence are not read), where the step
    /// program's allocations do not change with the batch or the
    /// sequence.
    pub fn build(arch: &Architecture, s: &Settings) -> Option<QuickSurface> {
        let probe = Settings {
            batch: 2,
            seq: 1024,
            ..s.clone()
        };
        // What lies outside the allocator: with a paged optimizer the whole plan's (the program
        // decides which states are managed memory), else the base's (no step run).
        let outside_bytes = if crate::model::bnb_adamw::pages(s.optimizer) {
            plan(arch, &probe).ok()?.outside_allocator_bytes
        } else {
            plan_base(arch, &probe).ok()?.0.outside_allocator_bytes
        };
        Some(QuickSurface {
            surface: steptrace::surface::Surface::build(arch, &probe)?,
            layers: arch.num_hidden_layers,
            outside_bytes,
            settings: s.clone(),
        })
    }

    /// [`plan`]'s nvidia-smi figure at `batch` and `seq`: `None` where the surface does not
    /// answer (a sequence shorter than the sliding window, a batch whose part did not hold),
    /// `Some(Err)` where the plan refuses or the step passes what a sequence holds (which the
    /// terms plan, far beyond any GPU).
    pub fn nvidia_smi(&self, batch: u64, seq: u64) -> Option<Result<u128, PlanError>> {
        if !self.surface.answers(batch, seq) {
            return None;
        }
        let s = Settings {
            batch,
            seq,
            ..self.settings.clone()
        };
        if let Err(e) = s.validate() {
            return Some(Err(e));
        }
        let Some((peak, end)) = self.surface.peak_and_end(batch, seq) else {
            return Some(Err(steptrace::too_large()));
        };
        let (peak, end) = (u128::from(peak), u128::from(end));
        let (rounding, frag) = reserve::allowance(self.layers, peak, end);
        Some(Ok(peak + rounding + frag + self.outside_bytes))
    }
}

/// The quick reserve allowance over the plan's allocated figures (one GPU).
fn requote(p: &mut Plan, ctx: &Ctx) {
    let peak = PhasePeak {
        phase: p.peak_phase,
        moment: String::new(),
        bytes: p.peak_allocated_bytes,
        terms: vec![],
    };
    let r = reserve::quick(ctx, &peak, p.steady_state_bytes);
    p.peak_reserved_bytes = r.bytes;
    p.reserve_explanation = r.explanation;
    p.nvidia_smi_bytes = r.bytes + p.outside_allocator_bytes;
}

/// What a plan states before the step runs: the inputs checked, the notes, the parameter
/// counts, what lies outside the allocator (the CUDA context, paged optimizer states, NCCL);
/// the step's figures are the program's ([`from_program`]). Also returns the settings the step
/// computes with (sharded mixed precision computes in low precision while its shards stay
/// fp32: [`distributed::compute_settings`]).
fn plan_base(arch: &Architecture, s: &Settings) -> Result<(Plan, Settings), PlanError> {
    // Past this, a build without the extended ops sees no step that needs them: `EXTENDED &&`
    // leaves out what only such a step reads.
    super::extended::check(arch, s)?;
    check_inputs(arch, s)?;
    let notes = notes(arch, s);
    let run = s.as_run(arch);
    let s: &Settings = &run;
    let step = distributed::compute_settings(s).unwrap_or_else(|| s.clone());
    let ctx = Ctx::new(arch, &step);
    let params = weights::param_counts(&ctx);
    // Paged optimizer states (CUDA managed memory) are the program's: added by `from_program`.
    let outside_terms = reserve::outside_terms(s);
    let outside = total(&outside_terms);
    let par = &s.parallel;
    let plan = Plan {
        params,
        peak_allocated_bytes: 0,
        peak_phase: Phase::Forward,
        peak_moment: String::new(),
        breakdown: vec![],
        terms: vec![],
        phases: vec![],
        steady_state_bytes: 0,
        peak_reserved_bytes: 0,
        reserve_explanation: String::new(),
        reserve_simulated: false,
        cached_free_blocks: vec![],
        nvidia_smi_bytes: outside,
        outside_allocator_bytes: outside,
        outside_terms,
        world_size: par.world(),
        effective_batch: (s.batch as u128) * (s.grad_accum as u128) * par.world(),
        cpu_bytes_per_rank: 0,
        cpu_bytes_per_node: 0,
        cpu_terms: vec![],
        notes,
        work: Default::default(),
        vision: ctx.visual.map(|v| VisionPlan {
            images_per_sample: v.images,
            loaded_width: v.grid.loaded_width,
            loaded_height: v.grid.loaded_height,
            width: v.grid.width,
            height: v.grid.height,
            patches_per_image: v.grid.patches,
            visual_tokens_per_image: v.grid.tokens,
            image_sequence_tokens: v.sequence_tokens(),
            text_tokens: step.seq - v.sequence_tokens(),
            tower_params: arch.vision_params(),
        }),
    };
    Ok((plan, step))
}

/// Plans one configuration with PyTorch's caching allocator simulated over the step: the
/// reserved and nvidia-smi figures are the allocator's, not an allowance. Tens of
/// milliseconds for a 7B model (the sequence has tens of thousands of events); [`plan`] is the
/// microsecond version with a quick reserve allowance.
pub fn plan_simulated(arch: &Architecture, s: &Settings) -> Result<Plan, PlanError> {
    plan_simulated_on(arch, s, super::steptrace::Device::Cuda)
}

/// [`plan_simulated`] with the step run on `device`: the measuring harness's emulated device
/// for comparing with its allocator replays (`formats::validation`), a CUDA GPU otherwise.
pub fn plan_simulated_on(
    arch: &Architecture,
    s: &Settings,
    device: super::steptrace::Device,
) -> Result<Plan, PlanError> {
    let (mut p, step) = plan_base(arch, s)?;
    let ctx = Ctx::new(arch, &step);
    let trace = steptrace::generate_on(arch, s, device)?;
    let trace = from_program(
        &mut p,
        &ctx,
        s,
        steptrace::periodic::Short::full(arch, trace),
    );
    if let Some(r) = reserve::simulate(&trace, &ctx, &p) {
        p.peak_reserved_bytes = r.bytes;
        p.reserve_explanation = r.explanation;
        p.reserve_simulated = true;
        p.cached_free_blocks = r.cached_free;
        p.nvidia_smi_bytes = r.bytes + p.outside_allocator_bytes;
    }
    Ok(p)
}

/// Takes the allocated figures of `p` from the step's allocation sequence lined up with the
/// model (`short`): the peak of live bytes, its phase and moment, each phase's highest moment,
/// the breakdown and the terms (the tensors live then, grouped by [`steptrace::anatomy`]), the
/// memory between steps, and the quick reserve allowance over them. Where two short runs'
/// storages do not add up to a moment (a structure [`steptrace::periodic`] does not know), the
/// full run answers, generated from the settings as given (`s`; `ctx` holds those the step
/// computes with). Returns the sequence it read (the longer short run, or the full one).
fn from_program(
    p: &mut Plan,
    ctx: &Ctx,
    s: &Settings,
    short: steptrace::periodic::Short,
) -> steptrace::Trace {
    let m = &short.moments;
    let terms = |mo: &anatomy::Moment| {
        short
            .live_at(mo.event, mo.bytes)
            .map(|l| anatomy::terms_of(ctx, &short.trace.labels, &m.alloc_phase, &l))
    };
    let at = |mo: &anatomy::Moment| {
        Some(PhasePeak {
            phase: phase_of(mo.phase),
            moment: mo.words(),
            bytes: u128::from(mo.bytes),
            terms: terms(mo)?,
        })
    };
    let phases: Option<Vec<PhasePeak>> = m.phases.iter().map(at).collect();
    let (Some(peak), Some(phases)) = (at(&m.peak), phases) else {
        // Only short runs can miss (a full run's storages add up by construction).
        return match steptrace::generate_on(ctx.arch, s, short.trace.device) {
            Ok(t) if short.how != steptrace::periodic::How::Full => {
                from_program(p, ctx, s, steptrace::periodic::Short::full(ctx.arch, t))
            }
            _ => short.trace,
        };
    };
    p.peak_allocated_bytes = peak.bytes;
    p.peak_phase = peak.phase;
    p.peak_moment = peak.moment.clone();
    p.breakdown = breakdown(&peak);
    p.terms = peak.terms;
    p.phases = phases;
    p.steady_state_bytes = u128::from(m.end_bytes);
    p.cpu_terms = short
        .work
        .host
        .iter()
        .map(|&(what, bytes)| anatomy::host_term(what, bytes))
        .collect();
    p.cpu_bytes_per_rank = total(&p.cpu_terms);
    p.work = short.work.clone();
    p.cpu_bytes_per_node = p.cpu_bytes_per_rank * u128::from(ctx.s.parallel.gpus_per_node);
    if short.work.paged_bytes > 0 {
        // On the GPU but outside the allocator's statistics: beside the CUDA context.
        let paged = reserve::paged_term(u128::from(short.work.paged_bytes));
        p.outside_allocator_bytes += paged.bytes;
        p.outside_terms.insert(1.min(p.outside_terms.len()), paged);
    }
    requote(p, ctx);
    short.trace
}

/// The plan's phase of a phase of the sequence (setup and inputs come before the forward, zero_grad
/// ends the optimizer's part).
fn phase_of(p: steptrace::StepPhase) -> Phase {
    use steptrace::StepPhase as S;
    match p {
        S::Precompute => Phase::PrecomputeRef,
        S::RefForward => Phase::RefForward,
        S::Generate => Phase::Generate,
        S::Score => Phase::Score,
        S::Setup | S::Inputs | S::Forward => Phase::Forward,
        S::Backward => Phase::Backward,
        // The job's phases after the steps are in the job's sequences only, which the job
        // reads itself (`model::job`).
        S::Optimizer | S::ZeroGrad | S::Eval | S::Merge => Phase::Optimizer,
    }
}

/// The memory effect of each LoRA variant the settings use: none in the step for rsLoRA and
/// LoRA+, an initialisation-time cost for PiSSA and OLoRA, no gradient or state for A with
/// LoRA-FA (planned by the step program).
fn lora_variant_notes(arch: &Architecture, s: &Settings) -> Vec<String> {
    use super::settings::LoraInit;
    let mut out = vec![];
    if s.use_rslora {
        out.push(
            "rsLoRA (use_rslora): the adapters are scaled by α/√r instead of α/r; no memory effect"
                .into(),
        );
    }
    if s.loraplus_lr_ratio > 0.0 {
        out.push(format!(
            "LoRA+ (loraplus_lr_ratio {}): lora_B learns at that multiple of lora_A's rate, in a second optimizer parameter group with the same states; no memory effect",
            s.loraplus_lr_ratio
        ));
    }
    // The largest adapted weight, whose decomposition at initialisation is the largest (only
    // for the initialisations that decompose: every plan reads these notes).
    let largest = || {
        Ctx::new(arch, s)
            .adapted_of_every_kind()
            .iter()
            .map(|l| (l.out_features, l.in_features))
            .max_by_key(|&(o, i)| o * i)
    };
    let decomposes = matches!(s.init_lora_weights, LoraInit::Pissa | LoraInit::Olora);
    match (s.init_lora_weights, if decomposes { largest() } else { None }) {
        (LoraInit::Pissa, Some((o, i))) => {
            // torch.linalg.svd(W.float(), full_matrices=False): W in fp32, U, S, Vh.
            let k = o.min(i);
            let bytes = 4 * (o * i + o * k + k + k * i);
            out.push(format!(
                "PiSSA (init_lora_weights pissa): peft takes a full SVD of each adapted weight when it builds the adapters, before training (up to {:.2} GiB for the largest, {o} × {i}: the weight in fp32 and its factors); the base weights become W − B·A, the same size; nothing in the step",
                bytes as f64 / (1u64 << 30) as f64
            ));
        }
        (LoraInit::PissaFast, _) => out.push("PiSSA with a randomized SVD (pissa_niter_N): a low-rank decomposition of each adapted weight when peft builds the adapters, before training; nothing in the step".into()),
        (LoraInit::Olora, Some((o, i))) => out.push(format!(
            "OLoRA (init_lora_weights olora): a QR decomposition of each adapted weight in fp32 when peft builds the adapters, before training (the largest {o} × {i}); the base weights become W − B·A, the same size; nothing in the step"
        )),
        (LoraInit::Loftq | LoraInit::Eva | LoraInit::Corda, _) => out.push(format!(
            "init_lora_weights {}: the adapters are initialised before training (from the quantization error or from activations); the step trains the same A and B",
            s.init_lora_weights.name()
        )),
        _ => {}
    }
    if s.lora_fa {
        out.push("LoRA-FA: lora_A stays frozen after initialisation, so it takes no gradient and no optimizer state, and A's input is not saved for its gradient; only lora_B trains (peft's create_lorafa_optimizer)".into());
    }
    out
}

/// What a preference step runs, in the plan's numbers, one note per fact: the sequences and
/// scored tokens, the reference, KTO's KL pass, the log-probs, the disabled dropout.
fn preference_notes(arch: &Architecture, s: &Settings) -> Vec<String> {
    use super::settings::{Logits, Stage};
    let seqs = s.sequences();
    let name = s.stage.label();
    let mut out = vec![if s.paired() {
        format!(
            "{name}: batch {} counts preference pairs: the model sees {seqs} sequences (chosen, then rejected) of {} tokens ({} prompt, {} completion)",
            s.batch,
            s.seq,
            s.prompt_tokens(),
            s.completion_tokens()
        )
    } else {
        format!(
            "{name}: batch {} counts unpaired examples of {} tokens ({} prompt, {} completion)",
            s.batch,
            s.seq,
            s.prompt_tokens(),
            s.completion_tokens()
        )
    }];
    out.push(
        if !s.uses_reference() {
            "no reference model: the loss compares the chosen and rejected completions directly"
        } else if s.precompute_ref_log_probs {
            "the reference log-probs are computed once before training (a no-grad pass over the batch), so the step has no reference forward"
        } else if s.base_trained() {
            "the reference model is a second, frozen copy of the weights, run under no_grad after the policy forward, on top of what the policy saved"
        } else {
            "the reference is the model with its adapters disabled, run under no_grad without checkpointing after the policy forward, on top of what the policy saved"
        }
        .into(),
    );
    if s.stage == Stage::Kto {
        out.push("KTO first runs the policy under no_grad over mismatched completions (its KL term), and the reference over both".into());
    }
    let scored = seqs.saturating_mul(s.completion_tokens());
    out.push(match s.logits_run() {
        Logits::Fused => format!(
            "TRL's fused head scores the {scored} completion tokens in [{} × 32768] tiles, never the [{seqs} × {} × {}] logits",
            scored.min(4096),
            s.seq,
            arch.vocab_size
        ),
        Logits::Full => format!(
            "the full [{seqs} × {} × {}] logits are cast to fp32 and log-softmaxed (LLaMA-Factory, TRL 0.x, TRL's ORPO and CPO trainers)",
            s.seq, arch.vocab_size
        ),
    });
    if s.dropout_disabled() && s.lora_dropout > 0.0 {
        out.push(
            "dropout is disabled (TRL's disable_dropout), so lora_dropout keeps no mask".into(),
        );
    }
    out
}

/// The code paths a hybrid or vision-language model runs that the settings do not name: the
/// linear attention's kernels, the images' way to visual tokens, the tower.
fn model_notes(arch: &Architecture, s: &Settings) -> Vec<String> {
    let mut out = vec![];
    // (hybrid and vision-language models are the full planner's, `extended::needed`)
    if !EXTENDED {
        return out;
    }
    if arch.family.layout().hybrid.is_some() {
        out.push(
            "linear attention (Gated DeltaNet) is planned as transformers runs it without flash-linear-attention and causal-conv1d installed (its PyTorch fallback: fp32 copies of q, k, v, β and the decay per layer, padded to 64-token chunks); with the fla kernels a GPU keeps less, which lorafit does not plan yet"
                .into(),
        );
    }
    let Some((tower, kind)) = arch.tower() else {
        return out;
    };
    let params = tower.params(kind);
    if s.quant.is_some() {
        out.push(
            "4-bit loading quantizes the vision tower's Linear layers with the language model's (transformers keeps only lm_head in 16 bits); prepare_model_for_kbit_training casts its other parameters to fp32"
                .into(),
        );
    }
    match crate::model::vision::visual(Some((tower, kind)), &s.images, s.seq) {
        Ok(Some(v)) => {
            let g = v.grid;
            out.push(format!(
                "each image ({} per sample, {}×{}) is scaled to {}×{} (image_max_pixels {}, image_min_pixels {}) and by the processor to {}×{}: {} patches, {} visual tokens; with its start and end markers the images take {} of the {} tokens of each sample, {} are text",
                v.images,
                s.images.image_width,
                s.images.image_height,
                g.loaded_width,
                g.loaded_height,
                s.images.image_max_pixels,
                s.images.image_min_pixels,
                g.width,
                g.height,
                g.patches,
                g.tokens,
                v.sequence_tokens(),
                s.seq,
                s.seq - v.sequence_tokens()
            ));
            if s.grad_ckpt && kind.input_hooked() {
                out.push(format!(
                    "the vision tower ({params} parameters, {} blocks) is frozen with no LoRA, but with gradient checkpointing transformers' enable_input_require_grads also hooks its patch embedding: the tower builds a graph (each block checkpointed, its input kept), the merger keeps what its backward needs, and backward runs through every block again, recomputed, down to the patch embedding",
                    tower.depth
                ));
            } else {
                out.push(format!(
                    "the vision tower ({params} parameters, {} blocks) is frozen with no LoRA and runs without a graph: its temporaries are freed during the forward; only the pixel values and its two outputs outlive it until the loss",
                    tower.depth
                ));
            }
            if kind.windowed() {
                let side = tower.window_side();
                let windows = tower.windows(&g).len();
                out.push(if tower.fullatt_block_indexes.is_empty() {
                    format!("its attention runs within windows of {side}×{side} visual tokens ({windows} per image) in every block; the merger's output is put back in image order")
                } else {
                    let blocks: Vec<String> =
                        tower.fullatt_block_indexes.iter().map(u64::to_string).collect();
                    format!(
                        "its attention runs within windows of {side}×{side} visual tokens ({windows} per image), but over each whole image in blocks {}; the merger's output is put back in image order",
                        blocks.join(", ")
                    )
                });
            }
            let deep = tower.deepstack_visual_indexes.len();
            if deep > 0 {
                out.push(format!(
                    "its {deep} deepstack mergers add {deep} features of {} visual tokens × {} to its output, held until the loss; a copy of each is added to the visual tokens' hidden states after each of the first {deep} decoder layers, which clones the hidden states there (the addition's backward makes three gradients of their size)",
                    s.sequences().saturating_mul(v.images).saturating_mul(g.tokens),
                    tower.out_hidden_size
                ));
            }
        }
        _ => out.push(format!(
            "this checkpoint carries a vision tower: its {params} parameters load with the model even for text-only samples (set images_per_sample to plan images)"
        )),
    }
    out
}

/// What a GRPO step runs, in the plan's numbers: the rows and their completions, the scoring
/// passes, the fused head, dropout; and what the plan leaves out (the generation itself).
fn grpo_notes(arch: &Architecture, s: &Settings) -> Vec<String> {
    let rows = s.batch;
    let c = s.completion_tokens();
    let mut out = vec![format!(
        "GRPO (TRL 1.16's GRPOTrainer): each step trains on {rows} generated sequences of {} tokens ({} prompt, {c} completion; num_generations {} per prompt), after scoring them under no_grad",
        s.seq,
        s.prompt_tokens(),
        s.num_generations
    )];
    if s.grpo_old_logps() {
        let why = if s.generation != super::settings::Generation::Hf
            && s.vllm_importance_sampling_correction
        {
            "vLLM's importance-sampling correction".to_string()
        } else if s.num_iterations > 1 {
            format!("num_iterations {} reuses each generation", s.num_iterations)
        } else {
            format!(
                "each generation serves steps_per_generation {} micro-steps, which do not divide the gradient accumulation {}",
                s.steps_per_generation_run(),
                s.grad_accum
            )
        };
        out.push(format!(
            "the scoring phase runs the old policy's log-probs under no_grad without checkpointing, in chunks of {rows} rows ({why})"
        ));
    }
    if s.reference_pass() {
        out.push(format!(
            "the scoring phase runs the reference's log-probs under no_grad without checkpointing, in chunks of {rows} rows: {} (β {})",
            if s.base_trained() {
                "a second, frozen copy of the weights"
            } else {
                "the model with its adapters disabled"
            },
            s.beta_run()
        ));
    }
    out.push(if s.grpo_old_logps() || s.reference_pass() {
        "the scoring phase's peak is reported as the phase \"score\"".into()
    } else {
        "the scoring runs no model pass: with β 0 and one iteration per generation TRL reuses the step's own log-probs (grpo_trainer.py:2642-2656)".into()
    });
    let generated = s.generation_rows();
    if generated != rows {
        out.push(format!(
            "each generation makes and scores {generated} rows at once (batch {rows} × steps_per_generation {}), kept shuffled until the next generation; the step trains on {rows} of them",
            s.steps_per_generation_run()
        ));
    }
    let scored = rows.saturating_mul(c);
    out.push(format!(
        "TRL's fused head scores the {scored} completion tokens in [{} × 32768] tiles (log-probs and entropy), never the [{rows} × {} × {}] logits; the loss ({}) adds a few [{rows} × {c}] fp32 tensors",
        scored.min(4096),
        s.seq,
        arch.vocab_size,
        s.grpo_loss.name()
    ));
    if s.lora_dropout > 0.0 && !s.base_trained() {
        out.push(if s.dropout_disabled() {
            "dropout is disabled (disable_dropout), so lora_dropout keeps no mask".into()
        } else {
            "GRPOTrainer keeps dropout on (disable_dropout is False by default): lora_dropout's masks are made in the scoring passes too".into()
        });
    }
    match s.generation {
        super::settings::Generation::Hf => {
            out.push(format!(
                "the generation phase (\"generate\"): transformers' generate over the {generated} rows, from the {}-token prompts to {c} new tokens each (no row stops early), in train mode (dropout on), without checkpointing; each layer's KV cache grows to keys and values of [{generated} × {} × {} × {}], and each new token's logits are copied to fp32 [{generated} × {}] for the softmax and sampling",
                s.prompt_tokens(),
                arch.kv_heads(),
                s.seq.saturating_sub(1),
                arch.head_dim(),
                arch.vocab_size
            ));
            if !s.base_trained() && s.autocast.is_some() {
                out.push("the peft model generates without autocast (PeftModel.generate calls the inner model, which accelerate did not wrap)".into());
            }
            if c > 2 * 4 {
                out.push(format!(
                    "the generation's first and last 4 decode calls are simulated op by op, the {} between them as the cache's growth (their transients are the same in every call)",
                    c - 8
                ));
            }
        }
        super::settings::Generation::VllmServer => out.push(
            "the completions are generated by vLLM on other GPUs (server mode): nothing of the generation runs on this GPU but the weight sync".into(),
        ),
        super::settings::Generation::VllmColocate => out.push(format!(
            "vLLM colocated: it takes vllm_gpu_memory_utilization {} of the card (its weights, CUDA graphs and a KV cache sized to fill its share), {}; the verdict counts it on the chosen GPU, the training step's own figures leave it out",
            s.vllm_gpu_memory_utilization,
            if s.vllm_enable_sleep_mode {
                "released after each generation (sleep mode), so it shares the card with the trainer's weights and optimizer states only while generating"
            } else {
                "kept through training (no sleep mode)"
            }
        )),
    }
    if s.vllm_syncs_adapters() {
        out.push("before each generation, TRL's weight sync to vLLM (phase \"generate\") merges peft's adapters into the weights, hands them over and unmerges them: each adapted Linear's B·A is made twice on this GPU (trl/generation/vllm_generation.py:436-475)".into());
        if s.vllm_sync_gathers_model() {
            out.push("under ZeRO-3 the weight sync first gathers the whole model on every GPU (peft cannot merge into shards)".into());
        }
    }
    if s.generation != super::settings::Generation::Hf && s.vllm_importance_sampling_correction {
        out.push("vLLM's importance-sampling correction scores the old policy's log-probs in every step, moves vLLM's sampling log-probs to the GPU and keeps both with the per-sequence ratios (TRL's sequence_mask mode) in the buffer; the loss is scaled by the ratios".into());
    }
    out
}

/// How transformers 5.24 + peft run a mixture-of-experts model, where it differs from the
/// settings as given.
/// What an LLM.int8 base does that a 4-bit one does not (bitsandbytes 0.50
/// `autograd/_functions.py:101-241`), with the largest weight backward dequantizes.
fn int8_note(arch: &Architecture, s: &Settings) -> String {
    let ctx = Ctx::new(arch, s);
    let widest = arch
        .block_linears(super::arch::LayerKind::Dense)
        .iter()
        .map(|l| l.in_features * l.out_features)
        .max()
        .unwrap_or(0);
    let es = ctx.resid.bytes();
    format!(
        "LLM.int8 (bitsandbytes Linear8bitLt, llm_int8_threshold 6.0): every 8-bit Linear keeps its input as a plain attribute of its autograd node, so the input lives until backward ends, checkpointing or not; backward dequantizes each weight into a {:.0} MiB copy at most (the input's dtype); no outlier column is planned (a GPU splits off the input columns holding a value ≥ 6, a handful in large models, and keeps a [tokens × columns] slice of each)",
        (widest * es) as f64 / 1048576.0
    )
}

fn notes(arch: &Architecture, s: &Settings) -> Vec<String> {
    let mut out = vec![];
    match s.finetuning_type {
        super::settings::FinetuningType::Full => out.push(
            "full fine-tuning: every parameter is trained, so the LoRA settings (lora_r, lora_alpha, lora_dropout, target modules) do not apply".into(),
        ),
        super::settings::FinetuningType::Freeze => out.push(format!(
            "freeze tuning: every parameter of the {} {} decoder layers is trained, the rest (embeddings and lm_head included) is frozen; the LoRA settings (lora_r, lora_alpha, lora_dropout, target modules) do not apply",
            if s.freeze_trainable_layers > 0 { "last" } else { "first" },
            s.freeze_trainable_layers.unsigned_abs().min(arch.num_hidden_layers),
        )),
        super::settings::FinetuningType::Lora => {}
    }
    if s.parallel.strategy.is_fsdp() && s.parallel.world() > 1 {
        // (FSDP2 op by op is the full planner's, `extended::needed`)
        out.push(if EXTENDED && s.fsdp2_op_by_op(arch) {
            if s.fsdp2_layer_units() {
                "FSDP2 (fully_shard) as accelerate wraps the model: each decoder layer is gathered before its forward and its backward and freed after, the next layer's gather allocated while the last one's is alive; the all-gathers and reduce-scatters allocate on their own CUDA streams, whose blocks the allocator keeps apart (rank 0 steps measured under the fake process group match to the byte)".into()
            } else {
                "FSDP2 (fully_shard) under transformers' Trainer: for a peft model it sets peft's auto-wrap policy, which accelerate's FSDP2 cannot apply, so no decoder layer gets a unit of its own and each GPU gathers the whole decoder stack from the forward's start to the end of backward (only the embedding and lm_head are gathered apart); the all-gathers and reduce-scatters allocate on their own CUDA streams (rank 0 steps measured under the fake process group match to the byte). FSDP1 wraps each layer".into()
            }
        } else if EXTENDED && s.fsdp1_op_by_op(arch) {
            if s.base_trained() {
                "FSDP1 (FullyShardedDataParallel) as accelerate prepares it: a flat parameter per decoder layer and one for the rest (embedding, norm, lm_head), each rank keeping its shard; a layer is gathered before its forward and freed after, gathered again in backward with the next one prefetched, and the rest stays gathered from the forward's start to the end of backward, when its flat gradient is concatenated beside its parameters' gradients; the all-gathers and reduce-scatters allocate on their own CUDA streams (rank 0 steps measured under the fake process group match to the byte)".into()
            } else {
                "FSDP1 (FullyShardedDataParallel) under transformers' Trainer: peft's wrapping policy gives each decoder layer a unit and each LoRA matrix one of its own; a layer is gathered before its forward and freed after, gathered again in backward with the next one prefetched, each LoRA matrix gathered around its forward and its backward (and again in a recomputed layer), and the embedding, norm and lm_head stay gathered from the forward's start to the end of backward; the all-gathers and reduce-scatters allocate on their own CUDA streams (rank 0 steps measured under the fake process group match to the byte)".into()
            }
        } else if s.parallel.fsdp_version == super::parallel::FsdpVersion::V2 {
            "FSDP2 with this set-up (offload, hybrid or grad-op sharding, an 8-bit base or a 4-bit one stored in uint8 or prepared by prepare_model_for_kbit_training, experts, linear attention, images, DoRA, modules_to_save, preference or RL training, Liger or a fused loss) is planned with the rank model: two gathered decoder layers held through the step, not FSDP2's per-layer gathers".into()
        } else {
            "FSDP1 with this set-up (offload, hybrid or grad-op sharding, an 8-bit base or a 4-bit one stored in uint8 or prepared by prepare_model_for_kbit_training, experts, linear attention, images, DoRA, LoRA-FA, modules_to_save, freeze tuning, preference or RL training, Liger or a fused loss, an optimizer other than torch's AdamW) is planned with the rank model: two gathered decoder layers held through the step, not FSDP1's per-unit gathers".into()
        });
    }
    // DDP's reducer is the full planner's (`extended::needed`).
    if EXTENDED && s.parallel.ddp_ranks() {
        out.push(ddp_note(s));
    }
    // Packing is the full planner's (`extended::needed`).
    if EXTENDED && (s.packing || s.neat_packing) {
        out.push(packing_note(arch, s));
    }
    // (the full planner's note: the first bundle's budget)
    if EXTENDED {
        out.extend(repeated_kv_note(arch, s));
    }
    // A 4-bit base under FSDP is the full planner's (`extended::needed`).
    if EXTENDED && s.fsdp_4bit() {
        if s.quant_storage.dtype() != Some(s.dtype) {
            out.push(format!(
                "a 4-bit base under FSDP stored as {}: FSDP1 flattens a layer's parameters into one tensor and refuses parameters of two dtypes, so frameworks set bnb_4bit_quant_storage to the model's dtype ({}) for FSDP; planned as given",
                s.quant_storage.name(),
                s.dtype.name()
            ));
        } else if s.sharded_4bit() {
            out.push(format!(
                "a 4-bit base under FSDP (\"sharded QLoRA\"): bnb_4bit_quant_storage={} packs the 4-bit weights into {} tensors, which FSDP shards with the rest of their layer; each GPU keeps every quantization state (absmax, code tables) whole, as they are neither parameters nor buffers",
                s.quant_storage.name(),
                s.dtype.name()
            ));
        }
    }
    if EXTENDED && s.preference() {
        out.extend(preference_notes(arch, s));
    }
    if EXTENDED && s.grpo() {
        out.extend(grpo_notes(arch, s));
    }
    if EXTENDED && s.sft_fused_head() {
        let scored = s.sequences().saturating_mul(s.scored_tokens());
        let tail = if s.completion_only_loss {
            format!("; completion_only_loss: the {} prompt tokens of each sample are not scored, which shrinks the head's per-token outputs, not its tiles", s.prompt_tokens())
        } else {
            "; a prompt-completion dataset (completion_only_loss) scores only the completions"
                .to_string()
        };
        out.push(format!(
            "TRL's SFTTrainer scores the {scored} next-token positions through its fused LM head in [{} × 32768] tiles (log-probs, entropy and top-1 for its logged metrics), never the [{} × {} × {}] logits{tail}",
            scored.min(4096),
            s.sequences(),
            s.seq,
            arch.vocab_size
        ));
    }
    out.extend(lora_variant_notes(arch, s));
    if s.quant == Some(super::dtype::Quant::Int8) {
        out.push(int8_note(arch, s));
    }
    if EXTENDED {
        out.extend(model_notes(arch, s));
    }
    let Some(m) = arch.moe_layout().filter(|_| EXTENDED) else {
        if !s.target_parameters.is_empty() {
            out.push("target_parameters ignored: this model has no fused expert parameters".into());
        }
        return out;
    };
    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
    if m.mxfp4_checkpoint {
        out.push(
            "gpt-oss ships its experts in MXFP4, which transformers 5.24 cannot train (Mxfp4HfQuantizer.is_trainable is False, Trainer refuses the model): load it with Mxfp4Config(dequantize=True), which turns the experts into bf16 — planned as such"
                .into(),
        );
    }
    if !arch.family.layout().sdpa && s.attn_impl == AttnImpl::Sdpa {
        out.push(
            "gpt-oss has no sdpa support in transformers 5.24 (_supports_sdpa = False): its eager attention with sinks is planned"
                .into(),
        );
    }
    if let Some(module) = m
        .prequantized_experts
        .filter(|_| s.experts_layout == super::settings::ExpertsLayout::PerExpert)
    {
        out.push(format!(
            "a checkpoint saved in 4 bits: transformers rebuilds the experts as {module}, one Linear MLP per expert (quantized, and adapted where the LoRA targets name gate, up or down projections), each run on every token one after another; the router stays 16-bit"
        ));
    } else if s.experts_layout == super::settings::ExpertsLayout::PerExpert {
        out.push(
            "transformers 4 layout: every expert's projections and the router are nn.Linear layers (4-bit loading quantizes them) run by a Python loop over the experts hit"
                .into(),
        );
    } else if s.quant.is_some() {
        let ctx = Ctx::new(arch, s);
        out.push(format!(
            "bitsandbytes quantizes only nn.Linear layers: the fused experts and routers stay unquantized{} ({:.1} GiB of experts)",
            if s.prepare_kbit {
                ", and prepare_model_for_kbit_training casts them to fp32"
            } else {
                ""
            },
            gib(arch.expert_params() * ctx.expert.bytes())
        ));
        if let Some(module) = m.prequantized_experts {
            out.push(format!(
                "planned as a 16-bit checkpoint quantized on load; a checkpoint saved in 4 bits is loaded with its experts rebuilt as {module} (one quantized Linear MLP per expert, each run on every token: transformers' quantizers/base.py:383-414): plan it with experts_layout per_expert"
            ));
        }
    }
    // transformers 4's per-expert layout has no experts_implementation (its note says so).
    if s.experts_layout == super::settings::ExpertsLayout::Fused {
        match s.experts_impl {
            super::settings::ExpertsImpl::Eager => out.push(
                "experts_implementation=eager: what is saved does not depend on the routing; the experts' backward is planned with its worst case, one expert receiving every token"
                    .into(),
            ),
            super::settings::ExpertsImpl::BatchedMm => out.push(
                "experts_implementation=batched_mm copies its experts' weights for every token–expert pair and keeps them for backward; grouped_mm (the default) does not"
                    .into(),
            ),
            super::settings::ExpertsImpl::GroupedMm => {}
        }
    }
    let _ = m;
    out
}

/// Bytes of every component at the peak, zeros included, in stacking order.
fn breakdown(peak: &PhasePeak) -> Vec<ComponentBytes> {
    Component::ALL
        .iter()
        .map(|&c| ComponentBytes {
            key: c.key(),
            label: c.label(),
            bytes: peak
                .terms
                .iter()
                .filter(|t| t.component == c)
                .fold(0u128, |a, t| a.saturating_add(t.bytes)),
        })
        .collect()
}
