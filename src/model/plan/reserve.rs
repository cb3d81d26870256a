//! What a real GPU shows on top of the live tensors: the caching allocator's reserve (rounding
//! and fragmentation) and the CUDA context.

use super::PhasePeak;
use crate::model::activations::Ctx;
use crate::model::parallel::Strategy;
use crate::model::term::{Term, TermKind};

/// CUDA context + cuBLAS/cuDNN handles as nvidia-smi shows them (0.3–0.6 GiB measured).
pub const CUDA_CONTEXT_BYTES: u128 = 512 * 1024 * 1024;
/// 2 MiB: the caching allocator's large-segment granularity.
const SEGMENT_BYTES: u128 = 2 * 1024 * 1024;

/// Estimated `max_memory_reserved()` and how it was reached.
pub struct Reserve {
    /// Peak reserved bytes.
    pub bytes: u128,
    /// The allowance, explained.
    pub explanation: String,
}

/// Reserved: live bytes, each block rounded up (≤ 2 MiB lost per large segment, one segment per
/// saved tensor class per layer) plus fragmentation from tensors freed and re-allocated during
/// the step (5 % of the non-steady part, the allowance published 7B runs show: 1–2 GiB).
pub fn estimate(ctx: &Ctx, peak: &PhasePeak, steady_bytes: u128, comm: &[Term]) -> Reserve {
    let par = &ctx.s.parallel;
    let layers = ctx.arch.num_hidden_layers as u128;
    let dynamic = peak.bytes.saturating_sub(steady_bytes);
    let rounding = SEGMENT_BYTES * (layers + 8);
    let frag = dynamic / 20;
    // FSDP all-gathers on its own CUDA stream; the caching allocator keeps blocks per stream, so
    // the gathered units cycle through memory the compute stream cannot reuse.
    let fsdp_gathers = matches!(
        par.strategy,
        Strategy::FsdpFullShard | Strategy::FsdpHybridShard
    ) && par.param_shards() > 1;
    let stream_reserve: u128 = if fsdp_gathers {
        comm.iter()
            .filter(|t| t.kind == TermKind::GatheredLayers)
            .map(|t| t.bytes)
            .sum()
    } else {
        0
    };
    Reserve {
        bytes: peak.bytes + rounding + frag + stream_reserve,
        explanation: format!(
            "allocated + 2 MiB segment rounding × (layers + 8) = {} B + 5 % of the memory that changes during the step = {} B{}",
            rounding,
            frag,
            if stream_reserve > 0 { format!(" + FSDP all-gather stream blocks = {stream_reserve} B") } else { String::new() }
        ),
    }
}
