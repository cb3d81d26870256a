//! Assembles the terms into the memory of each phase of a training step, picks the peak, and
//! adds what a real GPU shows on top (allocator reserve, CUDA context).

use serde::Serialize;

use super::activations::{self, Ctx, LayerCounts};
use super::arch::Architecture;
use super::distributed;
use super::error::PlanError;
use super::settings::{SavedModule, Settings};
use super::term::{Component, Term};
use super::weights::{self, ParamCounts};

/// A phase of the (second) training step, when optimizer states already exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Forward pass, at the loss (logits + log_softmax alive).
    Forward,
    /// Start of backward (log_softmax backward) or inside a recomputed layer.
    Backward,
    /// optimizer.step().
    Optimizer,
}

impl Phase {
    /// Lowercase name, as the reference data spells it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "forward",
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
    /// Estimated `torch.cuda.max_memory_reserved()`.
    pub peak_reserved_bytes: u128,
    /// The allowance added for allocator rounding and fragmentation, and why.
    pub reserve_explanation: String,
    /// Estimated nvidia-smi "memory used".
    pub nvidia_smi_bytes: u128,
    /// Bytes outside PyTorch's allocator (CUDA context, paged optimizer states).
    pub outside_allocator_bytes: u128,
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
}

/// CUDA context + cuBLAS/cuDNN handles as nvidia-smi shows them (0.3–0.6 GiB measured).
pub const CUDA_CONTEXT_BYTES: u128 = 512 * 1024 * 1024;
/// 2 MiB: the caching allocator's large-segment granularity.
const SEGMENT_BYTES: u128 = 2 * 1024 * 1024;

fn total(terms: &[Term]) -> u128 {
    terms.iter().fold(0u128, |a, t| a.saturating_add(t.bytes))
}

/// Plans one configuration.
pub fn plan(arch: &Architecture, s: &Settings) -> Result<Plan, PlanError> {
    arch.validate()?;
    s.validate()?;
    if s.lora_r > arch.hidden_size {
        return Err(PlanError::InvalidSetting {
            field: "lora_r",
            why: format!("rank {} exceeds hidden_size {}", s.lora_r, arch.hidden_size),
        });
    }
    // Sharded mixed precision computes in low precision while the shards stay fp32.
    let compute = distributed::compute_settings(s);
    let storage_ctx = Ctx::new(arch, s);
    let ctx = Ctx::new(arch, compute.as_ref().unwrap_or(s));
    let layers = arch.num_hidden_layers as u128;
    let params = weights::param_counts(&ctx);
    let frozen = weights::frozen_terms(&storage_ctx);
    let trainable = weights::trainable_terms(&ctx, &params);
    let grads = weights::gradient_terms(&ctx, &params, layers, true);
    let (opt_states, paged) = weights::optimizer_terms(&ctx, &params);
    // Paged optimizer states live in CUDA unified memory, outside torch's allocator statistics.
    let opt_in_allocator: Vec<Term> = if paged { vec![] } else { opt_states.clone() };
    // Sharding and offload across GPUs (a no-op on one GPU): what this rank holds.
    let rank = distributed::apply(&ctx, &frozen, &trainable, &grads, &opt_in_allocator);
    let statics: Vec<Term> = rank.statics.iter().chain(&rank.comm).cloned().collect();
    let grads = rank.grads.clone();
    let mut cpu = rank.cpu.clone();
    let par = &s.parallel;
    let shard_grads = |t: Vec<Term>| -> Vec<Term> {
        if par.offload_params {
            vec![]
        } else {
            t.into_iter()
                .map(|x| x.per_rank(par.grad_shards()))
                .collect()
        }
    };
    // Activation offloading keeps two checkpoints on the GPU (current + prefetched).
    let ckpt_on_gpu = |alive: u128| -> Vec<Term> {
        if par.offload_activations {
            activations::checkpoint_terms(&ctx, alive.min(2))
        } else {
            activations::checkpoint_terms(&ctx, alive)
        }
    };
    if par.offload_activations {
        cpu.extend(activations::checkpoint_terms(&ctx, layers));
    }
    let global = activations::global_terms(&ctx);

    let mut phases = vec![];
    if s.grad_ckpt {
        // Forward keeps only each layer's input; backward recomputes one layer at a time.
        let ckpt_all = ckpt_on_gpu(layers);
        let saved: Vec<Term> = ckpt_all.iter().chain(&global).cloned().collect();
        phases.push(loss_forward(&ctx, &statics, &saved));
        phases.push(loss_backward(&ctx, &statics, &saved));
        let one_layer = activations::layer_terms(
            &ctx,
            LayerCounts {
                all: 1,
                grad_input: 1,
            },
        );
        let working = activations::layer_backward_working(&ctx);
        let small_global: Vec<Term> = global
            .iter()
            .filter(|t| t.component == Component::ActEmbeddings)
            .cloned()
            .collect();
        // Top layer: every checkpoint alive, no gradient yet.
        let mut top: Vec<Term> = statics.clone();
        top.extend(ckpt_on_gpu(layers));
        top.extend(small_global.iter().cloned());
        top.extend(one_layer.iter().cloned());
        top.push(working.clone());
        phases.push(PhasePeak {
            phase: Phase::Backward,
            moment: "recomputed top layer".into(),
            bytes: total(&top),
            terms: top,
        });
        // Bottom layer: one checkpoint, the gradients of all layers above.
        let mut bottom: Vec<Term> = statics.clone();
        bottom.extend(ckpt_on_gpu(1));
        bottom.extend(small_global);
        bottom.extend(one_layer);
        bottom.push(working);
        bottom.extend(shard_grads(weights::gradient_terms(
            &ctx,
            &params,
            layers.saturating_sub(1),
            false,
        )));
        phases.push(PhasePeak {
            phase: Phase::Backward,
            moment: "recomputed first layer".into(),
            bytes: total(&bottom),
            terms: bottom,
        });
    } else {
        // Layer 0's input is the frozen embedding's output: it needs no gradient unless the
        // embedding itself is trained (modules_to_save), so layer 0 saves less.
        let grad_input = if s.modules_to_save.contains(&SavedModule::EmbedTokens) {
            layers
        } else {
            layers.saturating_sub(1)
        };
        let lt = activations::layer_terms(
            &ctx,
            LayerCounts {
                all: layers,
                grad_input,
            },
        );
        let saved: Vec<Term> = lt.into_iter().chain(global).collect();
        phases.push(loss_forward(&ctx, &statics, &saved));
        phases.push(loss_backward(&ctx, &statics, &saved));
        if s.modules_to_save.contains(&SavedModule::LmHead) {
            // Right after lm_head's backward: its full weight gradient exists while every
            // activation is still saved.
            let mut terms: Vec<Term> = statics.iter().chain(&saved).cloned().collect();
            terms.extend(
                grads
                    .iter()
                    .filter(|t| t.label.contains("lm_head"))
                    .cloned(),
            );
            terms.extend(activations::lm_head_backward_terms(&ctx));
            phases.push(PhasePeak {
                phase: Phase::Backward,
                moment: "lm_head backward (trainable lm_head)".into(),
                bytes: total(&terms),
                terms,
            });
        }
    }
    let mut opt: Vec<Term> = statics.clone();
    opt.extend(grads.iter().cloned());
    if !(par.offload_optimizer || par.offload_params) {
        opt.extend(weights::optimizer_step_terms(&ctx, &params));
    }
    phases.push(PhasePeak {
        phase: Phase::Optimizer,
        moment: "optimizer.step()".into(),
        bytes: total(&opt),
        terms: opt,
    });

    // The peak: the highest moment; each phase reports its own highest.
    let peak_idx = phases
        .iter()
        .enumerate()
        .max_by_key(|(i, p)| (p.bytes, usize::MAX - i))
        .map(|(i, _)| i)
        .unwrap_or(0);
    let peak = phases[peak_idx].clone();
    let mut per_phase: Vec<PhasePeak> = vec![];
    for p in phases {
        match per_phase.iter_mut().find(|q| q.phase == p.phase) {
            Some(q) if q.bytes >= p.bytes => {}
            Some(q) => *q = p,
            None => per_phase.push(p),
        }
    }
    let breakdown = Component::ALL
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
        .collect();
    let steady = total(&statics);

    // Reserved: live bytes, each block rounded up (≤ 2 MiB lost per large segment, one segment per
    // saved tensor class per layer) plus fragmentation from tensors freed and re-allocated during
    // the step (5 % of the non-steady part, the allowance published 7B runs show: 1–2 GiB).
    let dynamic = peak.bytes.saturating_sub(steady);
    let rounding = SEGMENT_BYTES * (layers + 8);
    let frag = dynamic / 20;
    // FSDP all-gathers on its own CUDA stream; the caching allocator keeps blocks per stream, so
    // the gathered units cycle through memory the compute stream cannot reuse.
    let stream_reserve: u128 = if matches!(
        par.strategy,
        super::parallel::Strategy::FsdpFullShard | super::parallel::Strategy::FsdpHybridShard
    ) && par.param_shards() > 1
    {
        rank.comm
            .iter()
            .filter(|t| t.label.starts_with("gathered"))
            .map(|t| t.bytes)
            .sum()
    } else {
        0
    };
    let reserved = peak.bytes + rounding + frag + stream_reserve;
    let paged_bytes = if paged { total(&opt_states) } else { 0 };
    let outside = CUDA_CONTEXT_BYTES + paged_bytes;
    Ok(Plan {
        params,
        peak_allocated_bytes: peak.bytes,
        peak_phase: peak.phase,
        peak_moment: peak.moment.clone(),
        breakdown,
        terms: peak.terms.clone(),
        phases: per_phase,
        steady_state_bytes: steady,
        peak_reserved_bytes: reserved,
        reserve_explanation: format!(
            "allocated + 2 MiB segment rounding × (layers + 8) = {} B + 5 % of the memory that changes during the step = {} B{}",
            rounding,
            frag,
            if stream_reserve > 0 { format!(" + FSDP all-gather stream blocks = {stream_reserve} B") } else { String::new() }
        ),
        nvidia_smi_bytes: reserved + outside,
        outside_allocator_bytes: outside,
        world_size: par.world(),
        effective_batch: (s.batch as u128) * (s.grad_accum as u128) * par.world(),
        cpu_bytes_per_rank: total(&cpu),
        cpu_bytes_per_node: total(&cpu) * par.gpus_per_node as u128,
        cpu_terms: cpu,
    })
}

fn loss_forward(ctx: &Ctx, statics: &[Term], saved: &[Term]) -> PhasePeak {
    let mut terms: Vec<Term> = statics.iter().chain(saved).cloned().collect();
    terms.extend(activations::loss_forward_terms(ctx));
    PhasePeak {
        phase: Phase::Forward,
        moment: "loss (log_softmax)".into(),
        bytes: total(&terms),
        terms,
    }
}

fn loss_backward(ctx: &Ctx, statics: &[Term], saved: &[Term]) -> PhasePeak {
    let mut terms: Vec<Term> = statics.iter().chain(saved).cloned().collect();
    terms.extend(activations::loss_backward_terms(ctx));
    PhasePeak {
        phase: Phase::Backward,
        moment: "start of backward (log_softmax backward)".into(),
        bytes: total(&terms),
        terms,
    }
}
