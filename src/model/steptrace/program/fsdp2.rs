//! One rank of FSDP2 (`torch.distributed.fsdp.fully_shard`, PyTorch 2.15) as accelerate 1.15
//! wraps a transformers model (`accelerate/utils/fsdp_utils.py:751-905`, `fsdp2_prepare_model`):
//! a unit per decoder layer — or none, for a peft model under transformers' Trainer
//! ([`crate::model::Settings::fsdp2_layer_units`]): the layers then stay in the root's unit,
//! gathered from the forward's start to the end of backward —, the input embedding alone (tied:
//! with the final norm and lm_head), `[final norm, lm_head]` as one unit that stays gathered
//! between forward and backward (`reshard_after_forward=False`), and the root. Mixed precision is
//! accelerate's `MixedPrecisionPolicy` with the training dtype as `param_dtype`, `reduce_dtype`
//! and `output_dtype` (`utils/dataclasses.py:2136-2142`).
//!
//! What each rank allocates (`torch/distributed/fsdp/_fully_shard/`):
//! - **setup**: each parameter's shard, `ceil(dim0 / world)` rows of it (`_fsdp_param.py`,
//!   `_init_sharded_param`: the padded chunk is what is stored), in the parameter's own dtype;
//!   the unsharded parameter, in `param_dtype`, has no memory until its first all-gather;
//! - **an all-gather** (`_fsdp_collectives.py`, `foreach_all_gather`, on the all-gather
//!   stream): the shards whose dtype is not `param_dtype` cast into one buffer, the output
//!   (`world` × every padded shard, `param_dtype`), the cast buffer freed; then, on the default
//!   stream, each unsharded parameter's storage allocated again and filled
//!   (`alloc_storage`, `foreach_all_gather_copy_out`). In forward the output is kept until the
//!   next all-gather has made its own (`AllGatherState`, freed at the next copy-in); in backward
//!   it is freed as soon as it is copied out;
//! - **reshard** (`free_storage`): every unsharded parameter's storage freed (`resize_(0)`),
//!   after each layer's forward and after each unit's backward;
//! - **backward prefetch**: a unit's pre-backward all-gathers the unit whose post-forward ran
//!   just before its own (FSDP2's `post_forward_order`: the last layer's in the tail's, the
//!   embedding's in the first layer's, which never runs backward when the embedding is frozen:
//!   freed when backward ends);
//! - **reduce-scatter** at a unit's post-backward (`foreach_reduce`): the last reduce-scatter's
//!   input freed, the unit resharded, the input allocated on the default stream
//!   (`world` × every padded shard with a gradient, `reduce_dtype`) and the unsharded
//!   gradients copied in and freed (last parameter first); on the reduce-scatter stream the
//!   output (one shard each) and, when the parameters are kept in another dtype, its cast —
//!   the sharded gradients, views of one buffer per unit, which `zero_grad` frees.
//!
//! The all-gather and reduce-scatter streams' allocations come from their own pools
//! ([`crate::model::steptrace::Event::Alloc`]'s stream), as the caching allocator keeps them.

use super::{bytes, Prog};
use crate::model::settings::Settings;
use crate::model::steptrace::tape::{G, T, X};
use crate::model::steptrace::What;

/// The default stream.
const DEFAULT_STREAM: u8 = 0;
/// FSDP2's all-gather copy-in stream (the first side stream the harness sees).
const ALL_GATHER_STREAM: u8 = 1;
/// FSDP2's reduce-scatter stream.
const REDUCE_SCATTER_STREAM: u8 = 2;

/// A unit `fully_shard` was applied to.
#[derive(Clone, Debug, Default)]
pub(super) struct Unit {
    /// Its parameters, in registration order.
    params: Vec<u32>,
    /// Freed after its forward (every unit but `[final norm, lm_head]` and the root).
    reshard_after_forward: bool,
    /// Its unsharded parameters have memory.
    unsharded: bool,
    /// The input of its first module needed a gradient in this forward: its post-backward runs
    /// when that gradient is made (`RegisterPostBackwardFunction`); else in the root's final
    /// callback.
    input_grad: bool,
    /// Its pre-backward and its post-backward ran in this backward.
    pre_done: bool,
    post_done: bool,
}

/// What one rank's FSDP2 holds and does.
#[derive(Clone, Debug)]
pub(super) struct Fsdp2 {
    world: u64,
    /// The model's weights are stored in this many times the bytes of the dtype the step
    /// computes in (an fp32 model under bf16 mixed precision: 2).
    weight_scale: u64,
    /// The embedding is lm_head's weight: it is in the tail unit (accelerate's
    /// `[final norm, input embedding, output embedding]`), gathered from the embedding on.
    tied: bool,
    /// Bytes per element of `MixedPrecisionPolicy.param_dtype`, which is also its
    /// `reduce_dtype` (accelerate sets both to the mixed dtype).
    param_es: u64,
    /// Unit 0 the embedding, 1..=L the decoder layers, L + 1 the final norm and lm_head, L + 2
    /// the root (the parameters no other unit holds).
    units: Vec<Unit>,
    /// Each decoder layer is a unit of its own. Not for a peft model under transformers'
    /// Trainer: `update_fsdp_plugin_peft` (transformers/distributed/fsdp.py:267-285, called
    /// from trainer.py:1762) sets peft's `fsdp_auto_wrap_policy`, an `_or_policy`, for which
    /// accelerate's `fsdp2_prepare_auto_wrap_policy` (utils/fsdp_utils.py:921-970) returns None:
    /// the layers stay in the root's unit, gathered for the whole step.
    layer_units: bool,
    /// The units in the order their post-forward ran this forward (FSDP2's
    /// `post_forward_order`), and each unit's place in it: a unit's pre-backward prefetches the
    /// unit before it.
    order: Vec<usize>,
    order_idx: Vec<Option<usize>>,
    /// Each parameter's shard (its own dtype) and unit.
    shards: Vec<(X, usize)>,
    /// The forward's last all-gather output (freed by the next all-gather).
    ag_held: Option<T>,
    /// The last reduce-scatter's input (freed by the next one, or when backward ends).
    rs_held: Option<T>,
    /// A unit gathered ahead (backward prefetch) and its all-gather output.
    prefetched: Option<(usize, T)>,
    /// The forward's graph nodes: the first of the final norm's, and the first of the loss's
    /// (after lm_head's): which unit a node's backward belongs to.
    tail_nodes: (usize, usize),
}

impl Fsdp2 {
    pub(super) fn new(
        world: u64,
        param_es: u64,
        layers: u64,
        tied: bool,
        layer_units: bool,
        weight_scale: u64,
    ) -> Fsdp2 {
        let n = layers as usize + 3;
        let mut units = vec![Unit::default(); n];
        for (i, u) in units.iter_mut().enumerate() {
            u.reshard_after_forward = i + 2 < n;
        }
        Fsdp2 {
            world,
            weight_scale: weight_scale.max(1),
            tied,
            layer_units,
            order: vec![],
            order_idx: vec![None; n],
            param_es,
            units,
            shards: vec![],
            ag_held: None,
            rs_held: None,
            prefetched: None,
            tail_nodes: (usize::MAX, usize::MAX),
        }
    }

    /// The tail unit (final norm, lm_head).
    pub(super) fn tail(&self) -> usize {
        self.units.len() - 2
    }

    /// The root's unit.
    pub(super) fn root(&self) -> usize {
        self.units.len() - 1
    }

    /// The unit holding decoder layer `li`'s parameters.
    pub(super) fn layer_unit(&self, li: usize) -> usize {
        if self.layer_units {
            li + 1
        } else {
            self.root()
        }
    }

    /// The unit holding the input embedding.
    pub(super) fn embed_unit(&self) -> usize {
        if self.tied {
            self.tail()
        } else {
            0
        }
    }

    /// The units in the order the root's final callback visits them (`all_states`, by
    /// `named_modules`: the root, the embedding's unit, the layers, the final norm's).
    fn final_order(&self) -> Vec<usize> {
        let (tail, root) = (self.tail(), self.root());
        let rest: Vec<usize> = if self.tied {
            std::iter::once(tail).chain(0..tail).collect()
        } else {
            (0..=tail).collect()
        };
        std::iter::once(root).chain(rest).collect()
    }

    /// Elements of a parameter's padded shard: `ceil(rows / world)` rows of `cols` (a vector
    /// when `cols` is 0).
    fn shard_elems(&self, n: u64, cols: u64) -> u64 {
        let cols = cols.max(1);
        let rows = n.div_ceil(cols);
        rows.div_ceil(self.world) * cols
    }

    /// The shard of every parameter of `unit`, as stored (its own dtype).
    pub(super) fn shard_of(&self, p: u32) -> X {
        self.shards[p as usize].0
    }

    /// Unit `u`'s all-gather shard elements with those not in `param_dtype` (cast first),
    /// and its shard elements with a gradient.
    fn unit_elems(&self, u: usize, grads: impl Fn(u32) -> bool) -> (u64, u64, u64) {
        let (mut all, mut cast, mut with_grad) = (0, 0, 0);
        for &p in &self.units[u].params {
            let x = self.shards[p as usize].0;
            all += x.n;
            if x.es != self.param_es {
                cast += x.n;
            }
            if grads(p) {
                with_grad += x.n;
            }
        }
        (all, cast, with_grad)
    }
}

impl<'c, 'a> Prog<'c, 'a> {
    /// The FSDP2 state, when the rank runs FSDP2 op by op. Never in the first bundle (no
    /// extended ops: [`crate::model::extended::needed`] names FSDP2 there), where every FSDP2
    /// op below is then dead code.
    pub(super) fn fsdp2(&self) -> Option<&Fsdp2> {
        self.fsdp2
            .as_ref()
            .filter(|_| crate::model::extended::EXTENDED)
    }

    fn fsdp2_mut(&mut self) -> Option<&mut Fsdp2> {
        if crate::model::extended::EXTENDED {
            self.fsdp2.as_mut()
        } else {
            None
        }
    }

    /// A parameter under FSDP2: its shard stored now (in its own dtype), its unsharded storage
    /// (in `param_dtype`) made by each all-gather. `cols` is its last dimension (0: a vector).
    ///
    /// With mixed precision accelerate keeps every trainable parameter in fp32 (it upcasts
    /// those that are not, `fsdp_utils.py:815-820`): their shards are fp32 master weights.
    pub(super) fn fsdp2_param(
        &mut self,
        n: u64,
        es: u64,
        cols: u64,
        trainable: bool,
        what: What,
    ) -> X {
        let f = self.fsdp2().expect("FSDP2 state");
        // A frozen weight keeps the dtype it was loaded in (fp32 under bf16 mixed precision:
        // `weight_scale` times the compute dtype's bytes).
        let es = if trainable && self.ctx.s.autocast.is_some() {
            4
        } else if what == What::Weight {
            es * f.weight_scale
        } else {
            es
        };
        let shard_n = f.shard_elems(n, cols);
        let (param_es, world) = (f.param_es, f.world);
        let after_layers = !self.layers.is_empty();
        let unit = if self.tp.exec != super::NO_LAYER {
            f.layer_unit(self.tp.exec as usize)
        } else if after_layers {
            f.tail()
        } else {
            f.embed_unit()
        };
        let whole_what = self.fsdp2_what(unit);
        let shard = self.t(shard_n, es, what);
        // The unsharded parameter is a view of its padded whole (`world` padded shards).
        let t = self
            .tp
            .new_resizable_t(world * shard_n * param_es, whole_what);
        let f = self.fsdp2_mut().expect("FSDP2 state");
        let p = f.shards.len() as u32;
        f.shards.push((shard, unit));
        if f.tied && unit == f.tail() && after_layers {
            // `fully_shard([norm, embed_tokens, lm_head])`: the norm's parameters first.
            f.units[unit].params.insert(0, p);
        } else {
            f.units[unit].params.push(p);
        }
        X {
            t,
            n,
            es: param_es,
            g: G::No,
        }
    }

    /// The all-gather of `unit` on its stream: the cast buffer, the output (returned), the
    /// cast buffer freed.
    fn fsdp2_all_gather(&mut self, unit: usize) -> T {
        let f = self.fsdp2().expect("FSDP2 state");
        let (all, cast, _) = f.unit_elems(unit, |_| false);
        let (world, es) = (f.world, f.param_es);
        let what = self.fsdp2_what(unit);
        self.tp.stream = ALL_GATHER_STREAM;
        let cast_buf = (cast > 0).then(|| self.t(cast, es, what));
        let out = self.t(world * all, es, what);
        if let Some(c) = cast_buf {
            self.drop(c);
        }
        self.tp.stream = DEFAULT_STREAM;
        out.t
    }

    fn fsdp2_what(&self, unit: usize) -> What {
        let f = self.fsdp2().expect("FSDP2 state");
        if unit == 0 || unit == f.tail() {
            What::GatheredRoot
        } else {
            What::GatheredLayer
        }
    }

    /// The copy-out: each unsharded parameter's storage allocated again.
    fn fsdp2_copy_out(&mut self, unit: usize) {
        let f = self.fsdp2_mut().expect("FSDP2 state");
        f.units[unit].unsharded = true;
        let ps = f.units[unit].params.clone();
        for p in ps {
            let t = self.params[p as usize].x.t;
            self.tp.resize_alloc(t);
        }
    }

    /// Marks where the tail unit's nodes begin (its pre-forward) and end (after lm_head, its
    /// post-forward).
    pub(super) fn fsdp2_mark_tail(&mut self, end: bool) {
        let n = self.tp.node_count();
        let Some(f) = self.fsdp2_mut() else {
            return;
        };
        if end {
            f.tail_nodes.1 = n;
            let tail = f.tail();
            self.fsdp2_post_forward(tail);
        } else {
            f.tail_nodes.0 = n;
        }
    }

    /// The unit whose backward node `i` is (None: the loss's, the root's).
    fn fsdp2_unit_of_node(&self, i: usize) -> Option<usize> {
        let f = self.fsdp2()?;
        let tag = self.tp.node_tag(i);
        if tag != super::NO_LAYER {
            return Some(f.layer_unit(tag as usize));
        }
        let (from, to) = f.tail_nodes;
        if i >= to {
            None
        } else if i >= from {
            Some(f.tail())
        } else {
            Some(f.embed_unit())
        }
    }

    /// Backward begins: the root's pre-backward (its hook on the loss).
    pub(super) fn fsdp2_backward_start(&mut self) {
        let Some(f) = self.fsdp2() else {
            return;
        };
        let root = f.root();
        if !f.units[root].params.is_empty() {
            self.fsdp2_pre_backward(root);
        }
    }

    /// Before backward runs node `i`: when it is the first of another unit, the unit that ran
    /// until now has its post-backward and this one its pre-backward. `cur` is the unit
    /// running.
    pub(super) fn fsdp2_before_node(&mut self, i: usize, cur: &mut Option<usize>) {
        let Some(u) = self.fsdp2_unit_of_node(i) else {
            return;
        };
        if *cur == Some(u) {
            return;
        }
        if let Some(c) = cur.take() {
            if self.fsdp2().is_some_and(|f| f.units[c].input_grad) {
                self.fsdp2_post_backward(c);
            }
        }
        // A unit's pre-backward hook fires once (the tied embedding's backward comes after its
        // unit's lm_head).
        if !self.fsdp2().is_some_and(|f| f.units[u].pre_done) {
            self.fsdp2_pre_backward(u);
        }
        *cur = Some(u);
    }

    /// `unit`'s pre-forward: gathered unless it still is. `input_grad`: the input of its first
    /// module needs a gradient.
    pub(super) fn fsdp2_pre_forward(&mut self, unit: usize, input_grad: bool) {
        let Some(f) = self.fsdp2_mut() else {
            return;
        };
        if f.units[unit].unsharded || f.units[unit].params.is_empty() {
            return;
        }
        f.units[unit].input_grad = input_grad;
        let out = self.fsdp2_all_gather(unit);
        let f = self.fsdp2_mut().expect("FSDP2 state");
        if let Some(old) = f.ag_held.replace(out) {
            self.tp.drop_t(old);
        }
        self.fsdp2_copy_out(unit);
    }

    /// The model's forward begins: the post-forward order starts again, and the root is
    /// gathered (its pre-forward runs before every other unit's).
    pub(super) fn fsdp2_forward_start(&mut self) {
        let Some(f) = self.fsdp2_mut() else {
            return;
        };
        f.order.clear();
        f.order_idx.iter_mut().for_each(|i| *i = None);
        let root = f.root();
        self.fsdp2_pre_forward(root, false);
    }

    /// Whether each decoder layer has a unit (and so its own pre- and post-forward).
    pub(super) fn fsdp2_layer_units(&self) -> bool {
        self.fsdp2().is_some_and(|f| f.layer_units)
    }

    /// `unit`'s post-forward: resharded unless it stays gathered for backward; its place in the
    /// post-forward order recorded.
    pub(super) fn fsdp2_post_forward(&mut self, unit: usize) {
        let Some(f) = self.fsdp2_mut() else {
            return;
        };
        if f.units[unit].params.is_empty() {
            return;
        }
        f.order_idx[unit] = Some(f.order.len());
        f.order.push(unit);
        if f.units[unit].reshard_after_forward {
            self.fsdp2_reshard(unit);
        }
    }

    fn fsdp2_reshard(&mut self, unit: usize) {
        let f = self.fsdp2_mut().expect("FSDP2 state");
        if !f.units[unit].unsharded {
            return;
        }
        f.units[unit].unsharded = false;
        let ps = f.units[unit].params.clone();
        for p in ps {
            let t = self.params[p as usize].x.t;
            self.tp.resize_free(t);
        }
    }

    /// The root's post-forward: its place in the post-forward order, and the forward's last
    /// all-gather output freed (the caller casts the loss to [`Prog::fsdp2_output_es`]).
    pub(super) fn fsdp2_root_post_forward(&mut self) {
        let Some(f) = self.fsdp2() else {
            return;
        };
        let root = f.root();
        self.fsdp2_post_forward(root);
        let f = self.fsdp2_mut().expect("FSDP2 state");
        if let Some(t) = f.ag_held.take() {
            self.tp.drop_t(t);
        }
    }

    /// `MixedPrecisionPolicy.output_dtype` of the root's output (the loss).
    pub(super) fn fsdp2_output_es(&self) -> Option<u64> {
        self.fsdp2().map(|f| f.param_es)
    }

    /// `unit`'s pre-backward: gathered (from its prefetch when there is one) unless it still
    /// is, then the unit whose backward comes next prefetched.
    pub(super) fn fsdp2_pre_backward(&mut self, unit: usize) {
        let Some(f) = self.fsdp2_mut() else {
            return;
        };
        f.units[unit].pre_done = true;
        if !f.units[unit].unsharded {
            let out = match f.prefetched.take() {
                Some((u, t)) if u == unit => t,
                other => {
                    f.prefetched = other;
                    self.fsdp2_all_gather(unit)
                }
            };
            self.fsdp2_copy_out(unit);
            self.tp.drop_t(out);
        }
        let f = self.fsdp2_mut().expect("FSDP2 state");
        let target = f.order_idx[unit]
            .take()
            .filter(|&i| i > 0)
            .map(|i| f.order[i - 1]);
        if let Some(next) = target {
            let f = self.fsdp2().expect("FSDP2 state");
            let u = &f.units[next];
            if f.prefetched.is_none() && !u.unsharded && !u.params.is_empty() {
                let out = self.fsdp2_all_gather(next);
                self.fsdp2_mut().expect("FSDP2 state").prefetched = Some((next, out));
            }
        }
    }

    /// `unit`'s post-backward: the last reduce-scatter's input freed, the unit resharded, its
    /// gradients reduce-scattered into its sharded gradients.
    pub(super) fn fsdp2_post_backward(&mut self, unit: usize) {
        let Some(f) = self.fsdp2_mut() else {
            return;
        };
        f.units[unit].post_done = true;
        let ps = f.units[unit].params.clone();
        let grads = self.tp.take_grads_of(|p| ps.contains(&p));
        let f = self.fsdp2_mut().expect("FSDP2 state");
        if !grads.is_empty() {
            if let Some(t) = f.rs_held.take() {
                self.tp.drop_t(t);
            }
        }
        self.fsdp2_reshard(unit);
        if grads.is_empty() {
            return;
        }
        let f = self.fsdp2().expect("FSDP2 state");
        let with: Vec<u32> = grads.iter().map(|g| g.0).collect();
        let (_, _, n) = f.unit_elems(unit, |p| with.contains(&p));
        let (world, res) = (f.world, f.param_es);
        let orig_es = f.shards[with[0] as usize].0.es;
        let input = self.t(world * n, res, What::CommBucket);
        let mut sorted = grads;
        sorted.sort_by_key(|g| std::cmp::Reverse(g.0));
        for (_, t) in sorted {
            self.tp.drop_t(t);
        }
        self.tp.stream = REDUCE_SCATTER_STREAM;
        let out = self.t(n, res, What::CommBucket);
        let sharded = if orig_es != res {
            let c = self.t(n, orig_es, What::ParamGrad);
            self.drop(out);
            c
        } else {
            out
        };
        self.tp.stream = DEFAULT_STREAM;
        let f = self.fsdp2_mut().expect("FSDP2 state");
        f.rs_held = Some(input.t);
        for &p in &with {
            self.tp.keep(sharded.t);
            self.grads[p as usize] = Some(sharded.t);
        }
        self.tp.drop_t(sharded.t);
    }

    /// The end of backward: the running unit's post-backward; when the embedding's output took
    /// a gradient (a leaf under checkpointing, `enable_input_require_grads`) the embedding's
    /// pre-backward (its hook on that output) and post-backward; then (the root's final
    /// callback) a prefetched all-gather no backward used and the last reduce-scatter's input
    /// freed.
    pub(super) fn fsdp2_backward_end(&mut self, cur: Option<usize>, embedding_output_grad: bool) {
        let Some(f) = self.fsdp2() else {
            return;
        };
        if let Some(c) = cur.filter(|&c| f.units[c].input_grad) {
            self.fsdp2_post_backward(c);
        }
        let f = self.fsdp2().expect("FSDP2 state");
        if embedding_output_grad && !f.tied && cur != Some(0) {
            self.fsdp2_pre_backward(0);
        }
        // The final callback: every unit whose post-backward has not run, in its order.
        let f = self.fsdp2().expect("FSDP2 state");
        for u in f.final_order() {
            if !self.fsdp2().expect("FSDP2 state").units[u].post_done {
                self.fsdp2_post_backward(u);
            }
        }
        let f = self.fsdp2_mut().expect("FSDP2 state");
        for u in &mut f.units {
            u.pre_done = false;
            u.post_done = false;
        }
        let pre = f.prefetched.take();
        let rs = f.rs_held.take();
        for t in [pre.map(|p| p.1), rs].into_iter().flatten() {
            self.tp.drop_t(t);
        }
    }

    /// The parameter as the optimizer sees it: its shard under FSDP2, its view of its unit's
    /// shard under FSDP1.
    pub(super) fn opt_param(&self, p: u32) -> X {
        if let Some(x) = self.fsdp1_opt_param(p) {
            return x;
        }
        match self.fsdp2() {
            Some(f) => {
                let x = f.shard_of(p);
                X {
                    g: self.params[p as usize].x.g,
                    ..x
                }
            }
            None => self.params[p as usize].x,
        }
    }

    /// Bytes per element of `param_dtype` for these settings: the autocast dtype when mixed
    /// precision is on, else the training dtype.
    pub(super) fn fsdp2_param_es(s: &Settings) -> u64 {
        bytes(s.autocast.unwrap_or(s.dtype))
    }
}
