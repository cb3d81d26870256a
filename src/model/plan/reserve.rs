//! What a real GPU shows on top of the live tensors: what PyTorch's caching allocator reserves
//! (its block rounding and the cached-but-free blocks the step leaves behind) and the memory
//! outside the allocator (CUDA context and library workspaces, paged optimizer states, NCCL).
//!
//! Two ways to the reserved figure:
//! - [`simulate`] — exact: the step's allocation sequence ([`crate::model::steptrace`]) replayed
//!   through the allocator port ([`crate::model::allocator`]); equal to PyTorch's own replay to
//!   the byte on every reference case. Used by the CLI, `validate`, and the page once it has
//!   settled on a configuration.
//! - [`quick`] — an allowance computed in microseconds for slider drags and fit searches
//!   (allocated + 2 MiB per layer + 5 % of what changes during the step); the page marks it as
//!   an estimate until the simulation replaces it.

use super::{PhasePeak, Plan};
use crate::model::ctx::Ctx;
use crate::model::parallel::Strategy;
use crate::model::settings::Settings;
use crate::model::steptrace;
use crate::model::term::{bytes_of, f, Component, Term};

const MIB: u128 = 1024 * 1024;
/// 2 MiB: the caching allocator's large-segment granularity.
const SEGMENT_BYTES: u128 = 2 * MIB;

/// CUDA context, loaded kernel images, library handles and cuDNN / attention scratch as
/// nvidia-smi shows them beyond `max_memory_reserved()`: 1 GiB. (cuBLAS's workspaces are not
/// here: PyTorch takes them from its caching allocator, so they are in the step's sequence and
/// the plan's `CublasWorkspace` term.)
///
/// Calibration (the one place real-GPU readings enter the model): on the A100-80GB runs of
/// fms-acceleration (tests/data/reference/published_gpu.jsonl, torch 2.4.1) nvidia-smi minus
/// the simulated reserved memory is 1.18 GiB for the single-GPU QLoRA run (row 56, whose planned
/// allocated memory matches the measured one within 0.3 %) and 1.72 GiB for the LoRA run (row
/// 32, whose allocated memory the plan puts 1.1 GiB lower: its older transformers keeps more);
/// on a real H200 (tests/data/reference/gpu_probe_h200.jsonl: driver 580, CUDA 13.0, torch 2.11)
/// nvidia-smi's process memory exceeded `max_memory_reserved()` by 767 MiB on every run (the
/// context alone 529 MiB; 751 MiB with eager attention). 1 GiB sits between them without being
/// fitted to any.
pub const CUDA_CONTEXT_BYTES: u128 = 1024 * MIB;

/// NCCL's communication buffers on each rank of a multi-GPU run, outside PyTorch's allocator:
/// `NCCL_BUFFSIZE` (4 MiB) per channel and peer for ring / tree protocols; 0.5 GiB is the
/// order nvidia-smi shows on NVLink nodes (an estimate: no published reading isolates it).
pub const NCCL_BUFFER_BYTES: u128 = 512 * MIB;

/// The reserved figure and how it was reached.
pub struct Reserve {
    /// Peak reserved bytes (`max_memory_reserved()`).
    pub bytes: u128,
    /// How it was computed, in words.
    pub explanation: String,
    /// Whether it comes from the allocator simulation.
    pub simulated: bool,
    /// Largest cached-but-free blocks at the reserved peak, named by the tensor last freed there.
    pub cached_free: Vec<CachedBlock>,
}

/// A cached block the allocator holds but no tensor uses.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CachedBlock {
    /// Block size.
    pub bytes: u128,
    /// What left it: "LoRA dropout output (layer 12)", or "never used" for a fresh segment's tail.
    pub left_by: String,
}

/// The allowance used where no simulation runs.
pub fn quick(ctx: &Ctx, peak: &PhasePeak, steady_bytes: u128) -> Reserve {
    let (rounding, frag) = allowance(ctx.arch.num_hidden_layers, peak.bytes, steady_bytes);
    let stream = fsdp_stream_reserve(ctx);
    Reserve {
        bytes: peak.bytes + rounding + frag + stream,
        explanation: format!(
            "quick estimate: allocated + 2 MiB segment rounding × (layers + 8) = {rounding} B + 5 % of the memory that changes during the step = {frag} B{}",
            if stream > 0 { format!(" + FSDP all-gather stream blocks = {stream} B") } else { String::new() }
        ),
        simulated: false,
        cached_free: vec![],
    }
}

/// The quick allowance's two parts over `peak_bytes` allocated: 2 MiB segment rounding ×
/// (layers + 8), and 5 % of what changes during the step (above `steady_bytes`).
pub fn allowance(layers: u64, peak_bytes: u128, steady_bytes: u128) -> (u128, u128) {
    let rounding = SEGMENT_BYTES * (u128::from(layers) + 8);
    (rounding, peak_bytes.saturating_sub(steady_bytes) / 20)
}

/// FSDP all-gathers on its own CUDA stream; the caching allocator keeps blocks per stream, so
/// the gathered units (the current and the prefetched layer) cycle through memory the compute
/// stream cannot reuse.
fn fsdp_stream_reserve(ctx: &Ctx) -> u128 {
    let par = &ctx.s.parallel;
    let gathers = matches!(
        par.strategy,
        Strategy::FsdpFullShard | Strategy::FsdpHybridShard
    ) && par.param_shards() > 1
        && par.world() > 1;
    if !gathers {
        return 0;
    }
    2 * crate::model::distributed::gathered_layer_bytes(ctx)
}

/// Reserved memory from the allocator simulation of `trace`, this rank's step: exact, plus on
/// several GPUs FSDP's stream blocks ([`fsdp_stream_reserve`]) unless the step allocates on
/// FSDP's streams itself ([`crate::model::Settings::fsdp2_op_by_op`],
/// [`crate::model::Settings::fsdp1_op_by_op`]).
pub fn simulate(trace: &steptrace::Trace, ctx: &Ctx, plan: &Plan) -> Option<Reserve> {
    let s = ctx.s;
    let conf = s.allocator_conf().ok()?;
    let sim = steptrace::replay(trace, &conf);
    let cached_free = sim
        .cached_free
        .iter()
        .map(|b| CachedBlock {
            bytes: b.bytes as u128,
            left_by: match b.label {
                Some(l) => match l.layer {
                    Some(layer) => format!("{} (layer {layer})", l.what.name()),
                    None => l.what.name().to_string(),
                },
                None => "never used (the rest of a new segment)".into(),
            },
        })
        .collect();
    let conf_words = if s.alloc_conf.is_empty() {
        "default settings".to_string()
    } else {
        format!("PYTORCH_CUDA_ALLOC_CONF={}", s.alloc_conf)
    };
    let stream = if s.fsdp2_op_by_op(ctx.arch) || s.fsdp1_op_by_op(ctx.arch) {
        0
    } else {
        fsdp_stream_reserve(ctx)
    };
    Some(Reserve {
        bytes: (sim.peak_reserved as u128).max(plan.peak_allocated_bytes) + stream,
        explanation: format!(
            "PyTorch's caching allocator ({conf_words}) simulated over the step's {} allocations and frees: max_memory_reserved {} B, max_memory_allocated {} B (blocks rounded to 512 B){}",
            sim.events,
            sim.peak_reserved,
            sim.peak_allocated,
            if stream > 0 { format!(", + FSDP all-gather stream blocks = {stream} B") } else { String::new() }
        ),
        simulated: true,
        cached_free,
    })
}

/// A paged optimizer's states of 1e5 values or more (`bitsandbytes` `get_state_buffer`): CUDA
/// managed memory, resident on the GPU, outside the allocator ([`crate::model::bnb_adamw`]).
pub fn paged_term(paged_bytes: u128) -> Term {
    Term::product(
        Component::CudaContext,
        "paged optimizer states of 100000 values or more (CUDA managed memory, resident on the GPU)",
        &[bytes_of(paged_bytes)],
    )
}

/// Memory nvidia-smi shows outside PyTorch's allocator statistics.
/// The step program's CUDA managed memory (a paged optimizer's large states) is added by the
/// plan ([`paged_term`]).
pub fn outside_terms(s: &Settings) -> Vec<Term> {
    let mut out = vec![Term::product(
        Component::CudaContext,
        "CUDA context, kernel images, library handles, cuDNN / attention scratch",
        &[bytes_of(CUDA_CONTEXT_BYTES)],
    )];
    if s.parallel.world() > 1 {
        out.push(Term::product(
            Component::CudaContext,
            "NCCL communication buffers",
            &[f("ranks > 1", 1), bytes_of(NCCL_BUFFER_BYTES)],
        ));
    }
    out
}
