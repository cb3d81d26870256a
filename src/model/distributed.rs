//! Several GPUs: what each rank holds under DDP, FSDP (full shard, shard-grad-op, hybrid) and
//! DeepSpeed ZeRO-1/2/3, with CPU offload of optimizer states, parameters and checkpointed
//! activations. LoRA-aware: frozen weights are sharded by FSDP / ZeRO-3 but carry no gradients
//! or optimizer states (the published estimators count them as trainable, DeepSpeed#5304).

use serde::{Deserialize, Serialize};

use super::activations::Ctx;
use super::error::PlanError;
use super::term::{bytes_of, f, Component, Term};

/// How the training is spread over GPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// One GPU.
    Single,
    /// DistributedDataParallel: a full replica per GPU plus gradient buckets.
    Ddp,
    /// FSDP FULL_SHARD: parameters, gradients and optimizer states sharded over all ranks.
    FsdpFullShard,
    /// FSDP SHARD_GRAD_OP: gradients and optimizer states sharded; parameters stay gathered
    /// between forward and backward.
    FsdpShardGradOp,
    /// FSDP HYBRID_SHARD: full shard inside a node, replicated across nodes.
    FsdpHybridShard,
    /// DeepSpeed ZeRO-1: optimizer states sharded.
    Zero1,
    /// DeepSpeed ZeRO-2: optimizer states and gradients sharded.
    Zero2,
    /// DeepSpeed ZeRO-3: parameters too.
    Zero3,
}

impl Strategy {
    /// All strategies.
    pub const ALL: [Strategy; 8] = [
        Strategy::Single,
        Strategy::Ddp,
        Strategy::FsdpFullShard,
        Strategy::FsdpShardGradOp,
        Strategy::FsdpHybridShard,
        Strategy::Zero1,
        Strategy::Zero2,
        Strategy::Zero3,
    ];

    /// Parses CLI / URL names.
    pub fn parse(s: &str) -> Option<Strategy> {
        match s.trim().to_ascii_lowercase().replace('-', "_").as_str() {
            "single" | "none" | "1" => Some(Strategy::Single),
            "ddp" => Some(Strategy::Ddp),
            "fsdp" | "fsdp_full_shard" | "full_shard" => Some(Strategy::FsdpFullShard),
            "fsdp_shard_grad_op" | "shard_grad_op" => Some(Strategy::FsdpShardGradOp),
            "fsdp_hybrid" | "fsdp_hybrid_shard" | "hybrid_shard" | "hybrid" => {
                Some(Strategy::FsdpHybridShard)
            }
            "zero1" | "zero_1" => Some(Strategy::Zero1),
            "zero2" | "zero_2" => Some(Strategy::Zero2),
            "zero3" | "zero_3" => Some(Strategy::Zero3),
            _ => None,
        }
    }

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Single => "single",
            Strategy::Ddp => "ddp",
            Strategy::FsdpFullShard => "fsdp",
            Strategy::FsdpShardGradOp => "fsdp_shard_grad_op",
            Strategy::FsdpHybridShard => "fsdp_hybrid",
            Strategy::Zero1 => "zero1",
            Strategy::Zero2 => "zero2",
            Strategy::Zero3 => "zero3",
        }
    }

    fn is_fsdp(self) -> bool {
        matches!(
            self,
            Strategy::FsdpFullShard | Strategy::FsdpShardGradOp | Strategy::FsdpHybridShard
        )
    }

    fn is_zero(self) -> bool {
        matches!(self, Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3)
    }
}

/// The multi-GPU layout of a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Parallel {
    /// GPUs per node.
    pub gpus_per_node: u64,
    /// Nodes.
    pub nodes: u64,
    /// Strategy.
    pub strategy: Strategy,
    /// Optimizer states (and the optimizer step) on the CPU (ZeRO-Offload; FSDP cpu_offload).
    pub offload_optimizer: bool,
    /// Parameters (and gradients) on the CPU (ZeRO-3 offload_param; FSDP cpu_offload).
    pub offload_params: bool,
    /// Gradient-checkpoint boundaries on the CPU (activation offloading).
    pub offload_activations: bool,
}

impl Default for Parallel {
    fn default() -> Self {
        Parallel {
            gpus_per_node: 1,
            nodes: 1,
            strategy: Strategy::Single,
            offload_optimizer: false,
            offload_params: false,
            offload_activations: false,
        }
    }
}

/// Most GPUs per node / nodes accepted.
pub const MAX_GPUS_PER_NODE: u64 = 64;
/// Most nodes accepted.
pub const MAX_NODES: u64 = 4096;
/// DeepSpeed's default reduce bucket (elements).
const ZERO_REDUCE_BUCKET_ELEMENTS: u128 = 500_000_000;
/// DDP's bucket cap (25 MiB) — buckets together hold every gradient once.
const DDP_BUCKET_BYTES: u128 = 25 * 1024 * 1024;

impl Parallel {
    /// Ranks in total.
    pub fn world(&self) -> u128 {
        self.gpus_per_node as u128 * self.nodes as u128
    }

    fn group(&self) -> u128 {
        if self.strategy == Strategy::FsdpHybridShard {
            self.gpus_per_node as u128
        } else {
            self.world()
        }
    }

    /// Ranks the parameters are sharded over.
    pub fn param_shards(&self) -> u128 {
        match self.strategy {
            Strategy::FsdpFullShard | Strategy::FsdpHybridShard | Strategy::Zero3 => self.group(),
            _ => 1,
        }
    }

    /// Ranks the gradients are sharded over.
    pub fn grad_shards(&self) -> u128 {
        match self.strategy {
            Strategy::FsdpFullShard
            | Strategy::FsdpShardGradOp
            | Strategy::FsdpHybridShard
            | Strategy::Zero2
            | Strategy::Zero3 => self.group(),
            _ => 1,
        }
    }

    /// Ranks the optimizer states are sharded over.
    pub fn opt_shards(&self) -> u128 {
        match self.strategy {
            Strategy::Single | Strategy::Ddp => 1,
            _ => self.group(),
        }
    }

    /// Checks the combination.
    pub fn validate(&self, grad_ckpt: bool) -> Result<(), PlanError> {
        let bad = |why: String| {
            Err(PlanError::InvalidSetting {
                field: "parallel",
                why,
            })
        };
        if self.gpus_per_node == 0 || self.gpus_per_node > MAX_GPUS_PER_NODE {
            return bad(format!(
                "GPUs per node must be between 1 and {MAX_GPUS_PER_NODE}, got {}",
                self.gpus_per_node
            ));
        }
        if self.nodes == 0 || self.nodes > MAX_NODES {
            return bad(format!(
                "nodes must be between 1 and {MAX_NODES}, got {}",
                self.nodes
            ));
        }
        if self.strategy == Strategy::Single && self.world() > 1 {
            return bad(format!(
                "{} GPUs need a strategy (ddp, fsdp, zero1/2/3)",
                self.world()
            ));
        }
        if self.offload_params
            && !matches!(
                self.strategy,
                Strategy::Zero3 | Strategy::FsdpFullShard | Strategy::FsdpHybridShard
            )
        {
            return bad("parameter offload needs ZeRO-3 or FSDP full/hybrid shard".into());
        }
        if self.offload_optimizer && !(self.strategy.is_zero() || self.strategy.is_fsdp()) {
            return bad("optimizer offload needs DeepSpeed ZeRO or FSDP".into());
        }
        if self.offload_activations && !grad_ckpt {
            return bad("activation offloading moves gradient-checkpoint boundaries: turn on gradient checkpointing".into());
        }
        Ok(())
    }
}

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
        let linear = a.linear_weight_params_per_layer();
        let small = a.small_params_per_layer();
        let layer_bytes = match ctx.s.quant {
            Some(_) => linear.div_ceil(2) + small * ctx.aux_weight.bytes(),
            None => (linear + small) * ctx.s.dtype.bytes(),
        };
        r.comm.push(Term::product(
            Component::CommBuffers,
            "gathered decoder layers (current + prefetched)",
            &[f("2", 2), f("layer bytes", layer_bytes), bytes_of(1)],
        ));
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
                .per_rank(ps),
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
