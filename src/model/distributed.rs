//! Several GPUs: what each rank holds under DDP, FSDP (full shard, shard-grad-op, hybrid) and
//! DeepSpeed ZeRO-1/2/3, with CPU offload of optimizer states, parameters and checkpointed
//! activations. LoRA-aware: frozen weights are sharded by FSDP / ZeRO-3 but carry no gradients
//! or optimizer states (the published estimators count them as trainable, DeepSpeed#5304).

use super::ctx::Ctx;

use super::parallel::{FsdpVersion, Strategy};

/// DeepSpeed's default reduce bucket (elements).
const ZERO_REDUCE_BUCKET_ELEMENTS: u128 = 500_000_000;

/// The buffers one rank's communication keeps through the step, as the step program allocates
/// them at setup: two gathered decoder layers (the current and the prefetched one, FSDP /
/// ZeRO-3; under FSDP2 without a unit per layer,
/// [`crate::model::Settings::fsdp2_layer_units`], the whole decoder stack twice, its all-gather
/// output and its unsharded copy, as the measured FSDP2 ranks hold them at the forward's start),
/// FSDP's root unit beyond this rank's shard or DeepSpeed's reduce bucket (DDP's construction
/// and buckets are the step program's, `steptrace/program/ddp.rs`). `grad_bytes` are the step's gradients on one GPU.
pub fn comm_buffers(ctx: &Ctx, grad_bytes: u128) -> Vec<(CommBuffer, u128)> {
    let p = &ctx.s.parallel;
    let ps = p.param_shards();
    let mut out = vec![];
    if p.world() <= 1 {
        return out;
    }
    if ps > 1 {
        let stack =
            p.strategy.is_fsdp() && p.fsdp_version == FsdpVersion::V2 && !ctx.s.fsdp2_layer_units();
        let layer = if stack {
            gathered_layer_bytes(ctx) * u128::from(ctx.arch.num_hidden_layers)
        } else {
            gathered_layer_bytes(ctx)
        };
        out.push((CommBuffer::Layer, layer));
        out.push((CommBuffer::Layer, layer));
        if p.strategy.is_fsdp() {
            let a = ctx.arch;
            let root = (a.embedding_params() + a.lm_head_params() + a.hidden_size as u128)
                * ctx.aux_weight.bytes();
            out.push((CommBuffer::Root, ((ps - 1) * root).div_ceil(ps)));
        }
    }
    // (DDP's buckets are the step program's own, `steptrace/program/ddp.rs`)
    match p.strategy {
        Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3 => out.push((
            CommBuffer::Bucket,
            grad_bytes.min(ZERO_REDUCE_BUCKET_ELEMENTS * 2),
        )),
        _ => {}
    }
    out
}

/// A buffer of [`comm_buffers`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommBuffer {
    /// A decoder layer gathered whole.
    Layer,
    /// FSDP's root unit beyond this rank's shard.
    Root,
    /// A gradient bucket.
    Bucket,
}

/// One decoder layer gathered whole, in its storage dtype (4-bit layers stay packed, as
/// fsdp_qlora stores them); for a mixture of experts the largest kind of layer, whose routed
/// experts and router are gathered in their own dtype (never 4-bit).
pub fn gathered_layer_bytes(ctx: &Ctx) -> u128 {
    let a = ctx.arch;
    let unit = |linear: u128, small: u128| match ctx.s.quant {
        Some(super::dtype::Quant::Int8) => linear + small * ctx.aux_weight.bytes(),
        Some(_) => linear.div_ceil(2) + small * ctx.aux_weight.bytes(),
        None => (linear + small) * ctx.s.dtype.bytes(),
    };
    if a.is_moe() {
        a.layer_groups()
            .iter()
            .map(|&(k, _)| {
                let base = unit(a.block_linear_params(k), a.block_small_params(k));
                let experts = if k.is_moe() {
                    (a.expert_params_per_layer() + a.router_params_per_layer()) * ctx.expert.bytes()
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
    }
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
