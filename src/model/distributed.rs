//! Several GPUs: what each rank holds under DDP, FSDP (full shard, shard-grad-op, hybrid) and
//! DeepSpeed ZeRO-1/2/3, with CPU offload of optimizer states, parameters and checkpointed
//! activations. LoRA-aware: frozen weights are sharded by FSDP / ZeRO-3 but carry no gradients
//! or optimizer states (the published estimators count them as trainable, DeepSpeed#5304).

use super::activations::Ctx;

use super::parallel::Strategy;
use super::term::{bytes_of, f, Component, Term, TermKind};

/// DeepSpeed's default reduce bucket (elements).
const ZERO_REDUCE_BUCKET_ELEMENTS: u128 = 500_000_000;
/// DDP's bucket cap (25 MiB) — buckets together hold every gradient once.
const DDP_BUCKET_BYTES: u128 = 25 * 1024 * 1024;

/// Per-rank memory after sharding and offload.
#[derive(Clone, Debug, Default)]
pub struct RankTerms {
    /// Frozen weights + quant state + trainable weights + optimizer states on this GPU.
    pub statics: Vec<Term>,
    /// Gradients on this GPU at the optimizer step.
    pub grads: Vec<Term>,
    /// Buffers alive through the step (gathered units, buckets).
    pub comm: Vec<Term>,
    /// What this rank keeps in CPU RAM.
    pub cpu: Vec<Term>,
}

fn shard(terms: &[Term], n: u128) -> Vec<Term> {
    terms.iter().cloned().map(|t| t.per_rank(n)).collect()
}

/// Shards and offloads the weight-like terms of one rank.
pub fn apply(
    ctx: &Ctx,
    frozen: &[Term],
    trainable: &[Term],
    grads: &[Term],
    opt: &[Term],
) -> RankTerms {
    let p = &ctx.s.parallel;
    let (ps, gs, os) = (p.param_shards(), p.grad_shards(), p.opt_shards());
    let mut r = RankTerms::default();
    let frozen_s = shard(frozen, ps);
    let trainable_s = shard(trainable, ps);
    if p.offload_params {
        r.cpu.extend(frozen_s);
        r.cpu.extend(trainable_s.iter().cloned());
        r.cpu.extend(shard(grads, gs));
    } else {
        r.statics.extend(frozen_s);
        r.statics.extend(trainable_s);
        r.grads.extend(shard(grads, gs));
    }
    if p.offload_optimizer || p.offload_params && p.strategy.is_fsdp() {
        r.cpu.extend(shard(opt, os));
    } else {
        r.statics.extend(shard(opt, os));
    }
    let a = ctx.arch;
    let grad_bytes: u128 = grads.iter().map(|t| t.bytes).sum();
    if ps > 1 {
        // FSDP / ZeRO-3 gather one decoder layer at a time and prefetch the next: two unsharded
        // units in their storage dtype (4-bit layers stay packed, as fsdp_qlora stores them).
        let unit = |linear: u128, small: u128| match ctx.s.quant {
            Some(_) => linear.div_ceil(2) + small * ctx.aux_weight.bytes(),
            None => (linear + small) * ctx.s.dtype.bytes(),
        };
        let layer_bytes = if a.is_moe() {
            // The largest kind of layer; an MoE layer gathers its routed experts and router
            // too, in their own dtype (never 4-bit).
            a.layer_groups()
                .iter()
                .map(|&(k, _)| {
                    let base = unit(a.block_linear_params(k), a.block_small_params(k));
                    let experts = if k == super::arch::LayerKind::Moe {
                        (a.expert_params_per_layer() + a.router_params_per_layer())
                            * ctx.expert.bytes()
                    } else {
                        0
                    };
                    base + experts
                })
                .max()
                .unwrap_or(0)
        } else {
            unit(
                a.linear_weight_params_per_layer(),
                a.small_params_per_layer(),
            )
        };
        r.comm.push(
            Term::product(
                Component::CommBuffers,
                "gathered decoder layers (current + prefetched)",
                &[f("2", 2), f("layer bytes", layer_bytes), bytes_of(1)],
            )
            .of_kind(TermKind::GatheredLayers),
        );
        if p.strategy.is_fsdp() {
            // The root unit (embeddings, final norm, lm_head) stays gathered for the whole step.
            let root = (a.embedding_params() + a.lm_head_params() + a.hidden_size as u128)
                * ctx.aux_weight.bytes();
            r.comm.push(
                Term::product(
                    Component::CommBuffers,
                    "root unit (embeddings, lm_head) gathered, beyond this rank's shard",
                    &[
                        f("(shards − 1)", ps - 1),
                        f("root bytes", root),
                        bytes_of(1),
                    ],
                )
                .per_rank(ps)
                .of_kind(TermKind::GatheredRoot),
            );
        }
    }
    match p.strategy {
        Strategy::Ddp if p.world() > 1 => r.comm.push(Term::product(
            Component::CommBuffers,
            format!(
                "DDP gradient buckets (≤ {} MiB each, all gradients once)",
                DDP_BUCKET_BYTES >> 20
            ),
            &[f("gradient bytes", grad_bytes), bytes_of(1)],
        )),
        Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 if p.world() > 1 => {
            r.comm.push(Term::product(
                Component::CommBuffers,
                "ZeRO reduce bucket (reduce_bucket_size 5e8 elements, capped by the gradients)",
                &[
                    f(
                        "min(gradient bytes, 5e8 × 2 B)",
                        grad_bytes.min(ZERO_REDUCE_BUCKET_ELEMENTS * 2),
                    ),
                    bytes_of(1),
                ],
            ))
        }
        _ => {}
    }
    r
}

/// FSDP / ZeRO-3 with fp32 weights and bf16/fp16 mixed precision keep fp32 shards but gather and
/// compute in the low-precision dtype (FSDP MixedPrecision param_dtype, DeepSpeed bf16): the
/// step's activations are those of a low-precision model. Returns the settings that describe
/// the computation (the frozen shards keep the original dtype).
pub fn compute_settings(s: &super::settings::Settings) -> Option<super::settings::Settings> {
    match (
        s.parallel.param_shards() > 1 || s.parallel.strategy == Strategy::FsdpShardGradOp,
        s.dtype,
        s.autocast,
        s.quant,
    ) {
        (true, super::dtype::Dtype::Fp32, Some(ac), None) => Some(super::settings::Settings {
            dtype: ac,
            ..s.clone()
        }),
        _ => None,
    }
}
