//! The multi-GPU layout a user chooses (strategy, GPUs, nodes, offload) and its validation: a
//! setting like any other. What each rank then holds is [`super::distributed`]'s job.

use serde::{Deserialize, Serialize};

use super::names::names;

use super::error::PlanError;

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

names!(Strategy {
    Single => "single" | "none" | "1",
    Ddp => "ddp",
    FsdpFullShard => "fsdp" | "fsdp_full_shard" | "full_shard",
    FsdpShardGradOp => "fsdp_shard_grad_op" | "shard_grad_op",
    FsdpHybridShard => "fsdp_hybrid" | "fsdp_hybrid_shard" | "hybrid_shard" | "hybrid",
    Zero1 => "zero1" | "zero_1",
    Zero2 => "zero2" | "zero_2",
    Zero3 => "zero3" | "zero_3",
});

impl Strategy {
    /// FSDP in any sharding mode.
    pub fn is_fsdp(self) -> bool {
        matches!(
            self,
            Strategy::FsdpFullShard | Strategy::FsdpShardGradOp | Strategy::FsdpHybridShard
        )
    }

    /// DeepSpeed ZeRO at any stage.
    pub fn is_zero(self) -> bool {
        matches!(self, Strategy::Zero1 | Strategy::Zero2 | Strategy::Zero3)
    }
}

/// Which FSDP implementation wraps the model (accelerate's `fsdp_version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsdpVersion {
    /// `FullyShardedDataParallel`: flat parameters per wrapped unit (accelerate's default).
    #[default]
    #[serde(rename = "1")]
    V1,
    /// `fully_shard` (FSDP2): each parameter a DTensor sharded on its first dimension; a unit
    /// is gathered before its forward and backward, freed after each
    /// ([`crate::model::steptrace`]'s FSDP2 ops).
    #[serde(rename = "2")]
    V2,
}

names!(FsdpVersion {
    V1 => "1" | "fsdp1",
    V2 => "2" | "fsdp2",
});

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
    /// FSDP's implementation (FSDP strategies only).
    #[serde(default)]
    pub fsdp_version: FsdpVersion,
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
            fsdp_version: FsdpVersion::V1,
        }
    }
}

/// Most GPUs per node / nodes accepted.
pub const MAX_GPUS_PER_NODE: u64 = 64;
/// Most nodes accepted.
pub const MAX_NODES: u64 = 4096;

impl Parallel {
    /// Ranks in total.
    pub fn world(&self) -> u128 {
        self.gpus_per_node as u128 * self.nodes as u128
    }

    /// DistributedDataParallel over several GPUs: what DDP's settings and its reducer
    /// (`steptrace/program/ddp.rs`) apply to.
    pub fn ddp_ranks(&self) -> bool {
        self.strategy == Strategy::Ddp && self.world() > 1
    }

    /// Ranks one tensor is sharded over.
    pub fn group(&self) -> u128 {
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
