//! One rank of DistributedDataParallel as accelerate prepares it for transformers' Trainer
//! (`DistributedDataParallel(model, device_ids=[rank], **Trainer's kwargs)`, torch 2.15:
//! `torch/nn/parallel/distributed.py`, the C++ reducer `torch/csrc/distributed/c10d/reducer.cpp`
//! and `comm.cpp`). What it allocates on the GPU beyond the one-GPU step:
//! - at construction: the parameter-shape check (`verify_params_across_processes`: the count
//!   and one copy per rank for its all-gather, then every parameter's sizes and strides, all
//!   freed on return); the module's states sent from rank 0 (`_sync_module_states` →
//!   `broadcast_coalesced`: parameters then buffers in 250 MiB buckets by dtype, each bucket of
//!   several tensors concatenated into one, two buckets in flight); the reducer's gradient
//!   buckets (one flat tensor per bucket, [`bucket_assignment`]: with `find_unused_parameters`
//!   buckets of 1 MiB then 25 MiB over the parameters in order, the list reversed; without, one
//!   bucket of every gradient, rebuilt later) and, looking for unused parameters, the
//!   used-parameter map (an int32 per trainable parameter);
//! - before every forward: the buffers sent from rank 0 (`broadcast_buffers`); before the
//!   second forward, without `find_unused_parameters`, the buckets rebuilt in the order the
//!   first backward produced the gradients (`rebuild_buckets`: the new assignment sent from rank
//!   0 as two int32 tensors, the old buckets freed, the new ones allocated);
//! - after every forward, looking for unused parameters: the outputs that need a gradient
//!   cloned (`_DDPSink`: the loss and the logits), the originals freed as DDP returns.
//!
//! The gradients are copied into the buckets and back (`gradient_as_bucket_view=False`, the
//! default), which allocates nothing. Measured (`ddp` in the harness,
//! `tests/data/steptrace/README.md`) through the first step on the emulated device, which
//! runs no collective that reads a tensor; the rebuild and the outputs' clones are read from
//! the source and a real CPU run of the same code.

use super::super::tape::{Mode, Op, G, T, X};
use super::super::What;
use super::Prog;

/// `broadcast_bucket_size` (`distributed.py`: 250 MiB).
const BROADCAST_BUCKET_BYTES: u64 = 250 * 1024 * 1024;

/// The reducer's state through the run.
pub(super) struct Ddp {
    /// The gradient buckets, one flat tensor each, in the reducer's order.
    buckets: Vec<X>,
    /// Trainable parameters (indices into `Prog::params`) in the order the first backward made
    /// their gradients (the reducer's `rebuilt_params_`).
    ready: Vec<u32>,
    /// Whether the buckets were rebuilt (once, before the second forward).
    rebuilt: bool,
}

/// `compute_bucket_assignment_by_size` (`reducer.cpp`): tensors of `sizes` (bytes, dtype key)
/// in order, grouped by dtype; a group becomes a bucket once it reaches its limit, the
/// `limits` taken in turn per dtype (the last one repeats); what is left forms the last buckets.
/// Sorted by their smallest index when `sort` (the tensors in model order; not for a
/// gradient-ready order).
pub(super) fn bucket_assignment(
    sizes: &[(u64, u64)],
    limits: &[u64],
    sort: bool,
) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = vec![];
    // open bucket per key: (key, indices, bytes, limit index)
    let mut open: Vec<(u64, Vec<usize>, u64, usize)> = vec![];
    for (i, &(bytes, key)) in sizes.iter().enumerate() {
        let k = match open.iter().position(|o| o.0 == key) {
            Some(k) => k,
            None => {
                open.push((key, vec![], 0, 0));
                open.len() - 1
            }
        };
        let o = &mut open[k];
        o.1.push(i);
        o.2 = o.2.saturating_add(bytes);
        let limit = limits[o.3.min(limits.len() - 1)];
        if o.2 >= limit {
            out.push(std::mem::take(&mut o.1));
            o.2 = 0;
            o.3 += 1;
        }
    }
    out.extend(open.into_iter().map(|o| o.1).filter(|b| !b.is_empty()));
    if sort {
        crate::model::order::sort_by_key(&mut out, |b| b.iter().copied().min().unwrap_or(0));
    }
    out
}

/// A storage's bytes and element bytes, the (size, dtype key) [`bucket_assignment`] takes (the
/// element size stands for the dtype: a model's tensors of one size share one).
fn size_key(x: X) -> (u64, u64) {
    (x.n * x.es, x.es)
}

impl<'c, 'a> Prog<'c, 'a> {
    /// DDP's construction (see the module's doc), after the model is on the GPU.
    pub(super) fn ddp_setup(&mut self) {
        let s = self.ctx.s;
        let world = u64::try_from(s.parallel.world()).unwrap_or(u64::MAX);
        let trainable: Vec<u32> = self.trainable.clone();
        // verify_params_across_processes: the count (1 int64) and its all-gather's outputs,
        // then the trainable parameters' sizes and strides (2 int64 per dimension) on the GPU.
        // (Past 65,536 ranks the outputs are planned as 65,536 blocks of 512 bytes: 32 MiB.)
        let count = self.t(1, 8, What::CommBucket);
        let gathered: Vec<X> = (0..world.min(1 << 16))
            .map(|_| self.t(1, 8, What::CommBucket))
            .collect();
        let dims: u64 = (0..trainable.len()).map(|k| 2 * self.param_dims(k)).sum();
        let meta = self.t(dims, 8, What::CommBucket);
        self.drop(meta);
        for g in gathered {
            self.drop(g);
        }
        self.drop(count);
        // _sync_module_states: parameters, then buffers, 250 MiB buckets by dtype.
        let states: Vec<(u64, u64)> = self
            .params
            .iter()
            .map(|p| p.x)
            .chain(self.buffers.iter().copied())
            .map(size_key)
            .collect();
        self.broadcast_coalesced(&states);
        // The reducer's buckets over the trainable parameters.
        let find_unused = s.ddp_finds_unused();
        let sizes = self.sizes_of(&trainable);
        let order = if find_unused {
            let (first, cap) = s.ddp_bucket_caps();
            let mut b = bucket_assignment(&sizes, &[first, cap], true);
            b.reverse();
            b
        } else {
            bucket_assignment(&sizes, &[u64::MAX], true)
        };
        let buckets = self.ddp_buckets(&order, &trainable);
        if find_unused {
            // initialize_local_used_map: its device copy, an int32 per parameter.
            let n = trainable.len() as u64;
            self.t(n, 4, What::CommBucket);
        }
        self.ddp = Some(Ddp {
            buckets,
            ready: vec![],
            rebuilt: false,
        });
    }

    /// Trainable parameter `k`'s number of dimensions as the module holds it: 1 for a norm's
    /// or bias's vector (no columns), 2 for a matrix. (A trained Gated DeltaNet's convolution
    /// weight has 3, counted as 1: 32 bytes per layer less in a transient the check frees.)
    fn param_dims(&self, k: usize) -> u64 {
        if self.param_cols.get(k).copied().unwrap_or(0) > 0 {
            2
        } else {
            1
        }
    }

    /// The (bytes, element bytes) of parameters `of` (indices into `params`).
    fn sizes_of(&self, of: &[u32]) -> Vec<(u64, u64)> {
        of.iter()
            .map(|&i| size_key(self.params[i as usize].x))
            .collect()
    }

    /// One flat tensor per bucket of `order` (indices into `params_of`).
    fn ddp_buckets(&mut self, order: &[Vec<usize>], params_of: &[u32]) -> Vec<X> {
        let mut out = vec![];
        for b in order {
            let es = b
                .first()
                .map_or(4, |&k| self.params[params_of[k] as usize].x.es);
            let n: u64 = b
                .iter()
                .map(|&k| self.params[params_of[k] as usize].x.n)
                .sum();
            out.push(self.t(n, es, What::CommBucket));
        }
        out
    }

    /// `broadcast_coalesced` (`comm.cpp`) of tensors of `sizes` (bytes, element bytes): each
    /// 250 MiB bucket of several tensors concatenated into one (a single tensor is sent as it
    /// is), at most two in flight, each freed once its copy back is done.
    fn broadcast_coalesced(&mut self, sizes: &[(u64, u64)]) {
        let buckets = bucket_assignment(sizes, &[BROADCAST_BUCKET_BYTES], true);
        let mut in_flight: std::collections::VecDeque<Option<T>> = Default::default();
        for b in buckets {
            if in_flight.len() >= 2 {
                if let Some(Some(t)) = in_flight.pop_front() {
                    self.tp.drop_t(t);
                }
            }
            let flat = (b.len() > 1).then(|| {
                let bytes: u64 = b.iter().map(|&i| sizes[i].0).sum();
                let es = sizes[b[0]].1.max(1);
                self.t(bytes / es, es, What::CommBucket).t
            });
            in_flight.push_back(flat);
        }
        for t in in_flight.into_iter().flatten() {
            self.tp.drop_t(t);
        }
    }

    /// DDP's `_pre_forward` of step `step`: the buckets rebuilt before the second forward
    /// (without `find_unused_parameters`, once the first backward gave the order), then the
    /// buffers sent from rank 0.
    pub(super) fn ddp_pre_forward(&mut self) {
        let Some(d) = self.ddp.as_mut() else {
            return;
        };
        let s = self.ctx.s;
        if !s.ddp_finds_unused()
            && !d.rebuilt
            && !d.ready.is_empty()
            && self.tp.mode != Mode::NoGrad
        {
            d.rebuilt = true;
            let ready = d.ready.clone();
            let old = std::mem::take(&mut d.buckets);
            let (first, cap) = s.ddp_bucket_caps();
            let sizes = self.sizes_of(&ready);
            let order = bucket_assignment(&sizes, &[first, cap], false);
            // sync_bucket_indices: every index and the bucket count, then the bucket sizes, as
            // int32 on the GPU, freed on return.
            let indices = self.t(ready.len() as u64 + 1, 4, What::CommBucket);
            let counts = self.t(order.len() as u64, 4, What::CommBucket);
            self.drop(counts);
            self.drop(indices);
            // initialize_buckets: the old buckets cleared, the new ones allocated.
            for b in old {
                self.drop(b);
            }
            let buckets = self.ddp_buckets(&order, &ready);
            if let Some(d) = self.ddp.as_mut() {
                d.buckets = buckets;
            }
        }
        if s.ddp_broadcast_buffers && !self.buffers.is_empty() {
            let sizes: Vec<(u64, u64)> = self.buffers.iter().copied().map(size_key).collect();
            self.broadcast_coalesced(&sizes);
        }
    }

    /// The order the first backward made the trainable parameters' gradients in (the
    /// reducer's rebuilt order); `grads` as the tape gave them, in the order they were made.
    pub(super) fn ddp_record_ready(&mut self, grads: &[(u32, T)]) {
        let n = self.params.len() as u32;
        if let Some(d) = self
            .ddp
            .as_mut()
            .filter(|d| d.ready.is_empty() && !d.rebuilt)
        {
            d.ready = grads.iter().map(|&(p, _)| p).filter(|&p| p < n).collect();
        }
    }

    /// DDP's `_post_forward` looking for unused parameters: `_DDPSink` clones the outputs that
    /// need a gradient (the loss, then the logits when the output holds them); the returned
    /// loss is the clone, whose gradient passes through to `g`, the original's graph, and the
    /// originals are freed as DDP returns. Returns the loss's node, the loss and the logits to
    /// use after.
    pub(super) fn ddp_sink(&mut self, g: G, loss: X, logits: Option<X>) -> (G, X, Option<X>) {
        if self.ddp.is_none() || !self.ctx.s.ddp_finds_unused() || self.tp.mode == Mode::NoGrad {
            return (g, loss, logits);
        }
        let mut l = self.t(loss.n, loss.es, What::Loss);
        l.g = self.tp.node(
            Op::Pass,
            loss.n,
            loss.es,
            &[Self::edge(&X { g, ..loss })],
            &[],
        );
        let clone = logits.map(|x| self.t(x.n, x.es, What::Logits));
        self.drop(loss);
        if let Some(x) = logits {
            self.drop(x);
        }
        (l.g, l, clone)
    }
}
