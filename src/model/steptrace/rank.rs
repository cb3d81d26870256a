//! One rank of a run on several GPUs: where each kind of storage of the step lives and which
//! share of it this rank holds. The step program is one rank's program; the tape asks
//! [`Rank::place`] at every allocation, so sharding and offload change the sequence the
//! allocator replays, the peak and the breakdown together.
//!
//! What is modelled (`Parallel`): parameters (frozen, 4-bit state, trainable) are split over the
//! parameter shards (FSDP full / hybrid shard, ZeRO-3), gradients are reduce-scattered to the
//! gradient shards as they arrive (FSDP, ZeRO-2/3), optimizer states and the optimizer step's
//! temporaries are split over the optimizer shards (everything but DDP); offloaded ones live in
//! host memory. Each rank runs the whole forward and backward of its own micro-batch. The
//! buffers of the communication itself (gathered layers, buckets) are the program's, allocated
//! at setup ([`crate::model::distributed::comm_buffers`]).

use super::What;
use crate::model::parallel::Parallel;

/// Where a new storage goes and which share of it this rank holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// The storage is split into this many shards, one per rank of its group.
    pub shards: u64,
    /// Its 16-bit elements are stored this many times wider (fp32 shards of a model computed
    /// in bf16).
    pub scale: u64,
    /// In host memory (offloaded): nothing on the GPU.
    pub host: bool,
}

impl Place {
    /// A whole storage on the GPU.
    pub const WHOLE: Place = Place {
        shards: 1,
        scale: 1,
        host: false,
    };

    /// This rank's bytes of a storage of `bytes` in elements of `elem_bytes`:
    /// `bytes × scale / shards`, rounded up (the scale applies to 16-bit elements only: a
    /// packed 4-bit weight is sharded as it is stored).
    pub fn share(self, bytes: u64, elem_bytes: u64) -> u64 {
        let scale = if elem_bytes > 1 { self.scale } else { 1 };
        bytes.saturating_mul(scale).div_ceil(self.shards.max(1))
    }
}

/// This rank's placement of each kind of storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rank {
    param: Place,
    opt: Place,
    grads_on_host: bool,
    /// Gradients are reduce-scattered to this many shards as they arrive.
    pub grad_shards: u64,
}

impl Rank {
    /// One GPU: everything whole, on the GPU.
    pub const ONE: Rank = Rank {
        param: Place::WHOLE,
        opt: Place::WHOLE,
        grads_on_host: false,
        grad_shards: 1,
    };

    /// The placement under `p`, a frozen weight's storage being `weight_scale` times the
    /// element size the step computes in (2: FSDP / ZeRO-3 keep fp32 shards of a model they
    /// gather and compute in bf16).
    pub fn of(p: &Parallel, weight_scale: u64) -> Rank {
        let shards = |n: u128| n.clamp(1, u128::from(u64::MAX)) as u64;
        let opt_on_host = p.offload_optimizer || p.offload_params && p.strategy.is_fsdp();
        Rank {
            param: Place {
                shards: shards(p.param_shards()),
                scale: weight_scale.max(1),
                host: p.offload_params,
            },
            opt: Place {
                shards: shards(p.opt_shards()),
                scale: 1,
                host: opt_on_host,
            },
            grads_on_host: p.offload_params,
            grad_shards: shards(p.grad_shards()),
        }
    }

    /// How many times the bytes of the compute dtype a weight is stored in (2: fp32 shards of a
    /// model computed in bf16, [`crate::model::distributed::compute_settings`]).
    pub fn weight_scale(&self) -> u64 {
        self.param.scale
    }

    /// Whether a parameter's gradient leaves the GPU whole as it arrives: reduce-scattered to
    /// this rank's shard, or offloaded with the parameters.
    pub fn scatters_grads(&self) -> bool {
        self.grad_shards > 1 || self.grads_on_host
    }

    /// Whether this rank holds only a share of each storage of `what`.
    pub fn splits(&self, what: What) -> bool {
        match what {
            What::ParamGrad => self.grad_shards > 1,
            w => self.place(w).shards > 1,
        }
    }

    /// Where a storage of `what` goes (a parameter gradient's shard is made by
    /// [`super::tape::Tape`] when it arrives).
    pub fn place(&self, what: What) -> Place {
        match what {
            What::Weight => self.param,
            What::QuantState | What::Trainable => Place {
                scale: 1,
                ..self.param
            },
            What::OptState | What::OptTemp => self.opt,
            What::ParamGrad => Place {
                host: self.grads_on_host,
                ..Place::WHOLE
            },
            _ => Place::WHOLE,
        }
    }
}
