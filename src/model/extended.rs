//! The step program's extended ops, and the builds that leave them out. Every build but the
//! planner page's first bundle (`index.html`) has the `extended-ops` feature: a vision tower
//! and images, Gated DeltaNet layers, mixture-of-experts layers, the multimodal rotary (M-RoPE:
//! Qwen3.5, Qwen3-VL), latent attention, attention
//! sinks, DoRA, padding-free and neat packing, DistributedDataParallel's reducer, preference training, GRPO, a fused linear cross-entropy, TRL's fused LM head for SFT,
//! Liger-Kernel's decoder kernels. The first bundle plans the
//! other steps — a dense decoder's LoRA / QLoRA / full or freeze tuning SFT step, the steps a
//! first visit plans — and refuses these with [`PlanError::Unbundled`], which the page answers
//! by reloading itself as the full planner (`web::full`).
//!
//! Two guards keep a first-bundle plan from ever being a wrong one: [`needed`] refuses such a
//! step up front (the plan's input checks and notes for those features are then left out of
//! that build: [`EXTENDED`] is a constant, so `EXTENDED && …` drops a branch only an extended
//! step takes), and each extended op in the program (`extended!` in `steptrace::program`)
//! refuses the step it is reached in, should [`needed`] ever miss one (`tests/it/extended.rs`
//! holds the two equal over the catalog).

use super::family::AttentionKind;
use super::{Architecture, PlanError, Settings};

/// Whether this build plans the extended ops (`extended-ops`).
pub const EXTENDED: bool = cfg!(feature = "extended-ops");

/// The first extended op a step of `arch` with `s` runs, if any.
pub fn needed(arch: &Architecture, s: &Settings) -> Option<&'static str> {
    let layout = arch.family.layout();
    if arch.vision.is_some() {
        Some("a vision tower")
    } else if s.images.images_per_sample > 0 {
        Some("images")
    } else if layout.hybrid.is_some() {
        Some("Gated DeltaNet layers")
    } else if layout.moe.is_some() {
        Some("mixture-of-experts layers")
    } else if layout.mrope.is_some() {
        Some("the multimodal rotary")
    } else if layout.attention == AttentionKind::Latent {
        Some("latent attention")
    } else if layout.attention == AttentionKind::Sinks {
        Some("attention sinks")
    } else if s.use_dora {
        Some("DoRA")
    } else if s.preference() {
        Some("preference training")
    } else if s.grpo() {
        Some("GRPO")
    } else if s.fused_ce.any() {
        Some("a fused linear cross-entropy")
    } else if s.sft_fused_head() {
        Some("TRL's fused LM head")
    } else if s.liger.any() {
        Some("Liger-Kernel's kernels")
    } else if s.fsdp2_op_by_op(arch) {
        Some("FSDP2's per-layer gathers")
    } else if s.fsdp1_op_by_op(arch) {
        Some("FSDP1's per-unit gathers")
    } else if s.fsdp_4bit() {
        Some("a 4-bit base under FSDP")
    } else if super::torchao_adamw::is_torchao(s.optimizer) {
        Some("torchao's low-bit AdamW")
    } else if s.packing || s.neat_packing {
        Some("packing")
    } else if s.parallel.ddp_ranks() {
        Some("DistributedDataParallel")
    } else {
        None
    }
}

/// Without the extended ops, refuses a step that needs them ([`needed`]).
pub fn check(arch: &Architecture, s: &Settings) -> Result<(), PlanError> {
    // The first bundle reads no allocator configuration but expandable segments
    // (`AllocConf::first_bundle`); the others' parser is the full planner's.
    if !EXTENDED && super::allocator::AllocConf::first_bundle(&s.alloc_conf).is_none() {
        return Err(PlanError::Unbundled {
            ops: "an allocator configuration",
        });
    }
    match needed(arch, s).filter(|_| !EXTENDED) {
        Some(ops) => Err(PlanError::Unbundled { ops }),
        None => Ok(()),
    }
}
