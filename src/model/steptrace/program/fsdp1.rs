//! One rank of FSDP1 (`FullyShardedDataParallel`, PyTorch 2.15) as accelerate 1.15 prepares it
//! for `fsdp_version: 1`: `FULL_SHARD`, `BACKWARD_PRE` prefetch, `limit_all_gathers` (which
//! orders nothing the allocator sees), `use_orig_params`, the mixed precision of Trainer's bf16 /
//! fp16 flag (`param_dtype`, `reduce_dtype` and `buffer_dtype` the mixed dtype) or none. A peft
//! model is wrapped by the policy transformers' Trainer sets (`update_fsdp_plugin_peft`: peft's
//! `fsdp_auto_wrap_policy`, which FSDP1 applies): a unit per decoder layer and, inside it, a unit
//! per LoRA matrix (each leaf module with a trainable weight); full fine-tuning gets a unit per
//! decoder layer; the root unit holds the rest (embedding, final norm, lm_head).
//!
//! What each rank allocates (`torch/distributed/fsdp/`, `_flat_param.py` (F) and
//! `_runtime_utils.py` (R)):
//! - **a flat parameter per unit**: its parameters flattened in registration order, each start
//!   aligned to 16 bytes (`use_orig_params`), padded to a multiple of the world size; the rank
//!   keeps its `1 / world` shard in the parameters' own dtype. Each original parameter is a view
//!   of the shard, or — when none of it is in this rank's shard — of one size-0 tensor per unit
//!   (`_use_sharded_views`, F:2147-2183), which every reshard makes anew;
//! - **lazy init** at the first forward: the buffers cast to `buffer_dtype`, then per unit the
//!   mixed-precision shard, the padded unsharded parameter and its full-precision twin allocated
//!   and freed at once (F:1257-1302);
//! - **unshard** (R:276-306): on the pre-unshard stream the shard cast to `param_dtype` (when
//!   the unit's dtype is another), on the all-gather stream the padded unsharded flat parameter
//!   (`world` × the shard, `param_dtype`), the cast shard freed;
//! - **reshard** after each non-root unit's forward, at a trainable unit's post-backward, at a
//!   frozen unit's when the gradient of its input is made (`register_multi_grad_hook` on the
//!   inputs that need one; none for the first layer without checkpointing), and for what is left
//!   (the root) in the final callback: a size-0 tensor, then the padded parameter freed;
//! - **backward prefetch**: a unit's pre-backward hook (on its outputs) unshards it unless
//!   prefetched and then unshards the unit whose post-forward ran before its own
//!   (`_get_handle_to_prefetch`; a recomputed LoRA unit is recorded again, and the first unit of
//!   the step, whose index 0 reads as unset, gets a new index: `_exec_order_utils.py:130-147`);
//! - **post-backward** of a trainable unit (R:701-774): the split of the flat parameter into its
//!   views runs backward as a `cat` into one unsharded flat gradient (`param_dtype`, on the
//!   all-gather stream where the views were made; a zero tensor for each padding chunk first),
//!   the parameters' gradients freed, the unit
//!   resharded, then on the post-backward stream the sharded gradient (`reduce_dtype`) and its
//!   cast to the parameters' dtype, the flat gradient freed; each parameter's `.grad` is a view
//!   of the sharded gradient, which `zero_grad` frees;
//! - under checkpointing a recomputed layer runs its LoRA units' forward again (gathered and
//!   freed again) unless their pre-backward has run.

use super::Prog;
use crate::model::steptrace::tape::{Mode, G, T, X};
use crate::model::steptrace::What;

/// The default stream.
const DEFAULT_STREAM: u8 = 0;

/// FSDP1's side streams. An allocation names its stream by the order of first use (0 the
/// default stream), as the harness numbers them: without a mixed-precision cast the
/// pre-unshard stream allocates nothing, and the post-backward stream comes second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SideStream {
    /// `_unshard_stream`: the all-gathers.
    Unshard,
    /// `_pre_unshard_stream`: the mixed-precision cast of a shard.
    PreUnshard,
    /// `_post_backward_stream`: the reduce-scatters.
    PostBackward,
}

/// Alignment of each parameter's start in a flat parameter with `use_orig_params`, in bytes
/// (`_init_flat_param_and_metadata`).
const ALIGN_BYTES: u64 = 16;

/// What a unit wraps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UnitKind {
    /// The root: what no other unit holds.
    Root,
    /// Decoder layer `li` (its parameters but its LoRA matrices').
    Layer(u32),
    /// A LoRA matrix (`lora_A` or `lora_B`), a unit of its own inside its layer's.
    Lora,
}

/// A `FlatParamHandle`.
#[derive(Clone, Debug)]
pub(super) struct Unit {
    kind: UnitKind,
    /// Its parameters, in registration order, with their element counts.
    params: Vec<(u32, u64)>,
    /// Bytes per element of its parameters (and of its flat parameter).
    es: u64,
    /// The padded unsharded flat parameter (`_full_param_padded`), in `param_dtype`.
    padded: T,
    /// Its shard, and the size-0 tensor of the parameters outside this rank's shard.
    shard: Option<T>,
    empty: Option<T>,
    /// Elements of the flat parameter (padded) and of one shard.
    n: u64,
    s: u64,
    /// Parameters with a gradient.
    trainable: bool,
    unsharded: bool,
    prefetched: bool,
    needs_pre_backward_unshard: bool,
    /// Its pre-backward hook ran in this backward (`BACKWARD_PRE`).
    pre_done: bool,
    post_forward_index: Option<usize>,
    /// The forward's graph nodes it recorded (a LoRA unit's).
    nodes: (usize, usize),
}

impl Unit {
    /// A unit of `kind` whose padded unsharded flat parameter is `padded`, before its
    /// parameters (the first one sets its dtype).
    fn new(kind: UnitKind, padded: T) -> Unit {
        Unit {
            kind,
            params: vec![],
            es: 0,
            padded,
            shard: None,
            empty: None,
            n: 0,
            s: 0,
            trainable: false,
            unsharded: false,
            prefetched: false,
            needs_pre_backward_unshard: false,
            pre_done: false,
            post_forward_index: None,
            nodes: (0, 0),
        }
    }

    /// How its padded parameter is labelled: the root's (embedding, lm_head) or a layer's.
    fn what(kind: UnitKind) -> What {
        match kind {
            UnitKind::Root => What::GatheredRoot,
            _ => What::GatheredLayer,
        }
    }
}

/// What one rank's FSDP1 holds and does.
#[derive(Clone, Debug)]
pub(super) struct Fsdp1 {
    world: u64,
    /// The model's weights are stored in this many times the bytes of the dtype the step
    /// computes in (fp32 weights under bf16 mixed precision: 2): their shards keep the loaded
    /// dtype.
    weight_scale: u64,
    /// Bytes per element of `MixedPrecision.param_dtype` (and of `reduce_dtype` and
    /// `buffer_dtype`), when there is mixed precision.
    mixed_es: Option<u64>,
    units: Vec<Unit>,
    /// Each parameter's unit.
    unit_of: Vec<usize>,
    /// Each layer's unit.
    layer_units: Vec<usize>,
    /// The units in the order their post-forward ran (`handles_post_forward_order`).
    order: Vec<usize>,
    /// The buffers, cast to `buffer_dtype` at the first forward.
    pub(super) buffers: Vec<X>,
    lazy_init_done: bool,
    /// The layer whose nodes backward runs (for the reshard-only hooks).
    cur_layer: Option<usize>,
    /// Each layer's input took a gradient in this forward (its reshard-only hook is registered).
    input_grad: Vec<bool>,
    /// Trainable units whose pre-backward ran and whose post-backward has not.
    pending: Vec<usize>,
    /// The side streams in the order of their first allocation.
    streams: Vec<SideStream>,
}

impl Fsdp1 {
    /// The state of a rank of `world`, with `param_dtype` of `mixed_es` bytes if any; `root_padded`
    /// is the root unit's padded parameter (unit 0: its first parameter, the embedding, comes
    /// first).
    pub(super) fn new(
        world: u64,
        mixed_es: Option<u64>,
        weight_scale: u64,
        root_padded: T,
    ) -> Fsdp1 {
        Fsdp1 {
            world,
            weight_scale: weight_scale.max(1),
            mixed_es,
            units: vec![Unit::new(UnitKind::Root, root_padded)],
            unit_of: vec![],
            layer_units: vec![],
            order: vec![],
            buffers: vec![],
            lazy_init_done: false,
            cur_layer: None,
            input_grad: vec![],
            pending: vec![],
            streams: vec![],
        }
    }

    /// The dtype a unit computes in: `param_dtype`, or its own.
    fn compute_es(&self, u: usize) -> u64 {
        self.mixed_es.unwrap_or(self.units[u].es)
    }

    /// The unit needs its shard cast before the all-gather (`_uses_param_mixed_precision`).
    fn casts(&self, u: usize) -> bool {
        self.mixed_es.is_some_and(|m| m != self.units[u].es)
    }

    /// Each parameter's offset in its unit's flat parameter, and the unit's padded size.
    fn layout(&self, u: usize) -> (Vec<u64>, u64) {
        let unit = &self.units[u];
        let align = (ALIGN_BYTES / unit.es).max(1);
        let mut off = 0u64;
        let mut offsets = vec![];
        for &(_, n) in &unit.params {
            let pad = (align - off % align) % align;
            off += pad;
            offsets.push(off);
            off += n;
        }
        (offsets, off.div_ceil(self.world) * self.world)
    }

    /// The parameter's elements in this rank's (rank 0's) shard.
    pub(super) fn numel_in_shard(&self, p: u32) -> u64 {
        let u = self.unit_of[p as usize];
        let (offsets, _) = self.layout(u);
        let unit = &self.units[u];
        let k = unit
            .params
            .iter()
            .position(|&(q, _)| q == p)
            .expect("the parameter is its unit's");
        let (off, n) = (offsets[k], unit.params[k].1);
        unit.s.saturating_sub(off).min(n)
    }

    /// Bytes per element of parameter `p` as stored (its shard's dtype).
    pub(super) fn param_es(&self, p: u32) -> u64 {
        self.units[self.unit_of[p as usize]].es
    }

    /// The unit of a parameter.
    pub(super) fn unit_of(&self, p: u32) -> usize {
        self.unit_of[p as usize]
    }

    /// The innermost unit whose backward node `i` is: a LoRA unit's, its layer's, the root's.
    fn unit_of_node(&self, i: usize, tag: u32) -> usize {
        if tag == super::NO_LAYER {
            return 0;
        }
        let lu = self.layer_units[tag as usize];
        // A layer's LoRA units follow its own.
        self.units[lu + 1..]
            .iter()
            .take_while(|u| u.kind == UnitKind::Lora)
            .position(|u| (u.nodes.0..u.nodes.1).contains(&i))
            .map_or(lu, |k| lu + 1 + k)
    }
}

impl<'c, 'a> Prog<'c, 'a> {
    /// The FSDP1 state, when the rank runs FSDP1 op by op (never in the first bundle, whose
    /// every FSDP1 op is then dead code).
    pub(super) fn fsdp1(&self) -> Option<&Fsdp1> {
        self.fsdp1
            .as_ref()
            .filter(|_| crate::model::extended::EXTENDED)
    }

    fn fsdp1_mut(&mut self) -> Option<&mut Fsdp1> {
        if crate::model::extended::EXTENDED {
            self.fsdp1.as_mut()
        } else {
            None
        }
    }

    /// A parameter under FSDP1: a view of its unit's padded unsharded flat parameter (in
    /// `param_dtype`), whose memory the unit's all-gathers make. `lora`: a LoRA matrix (a unit of
    /// its own).
    pub(super) fn fsdp1_param(&mut self, n: u64, es: u64, trainable: bool, lora: bool) -> X {
        let exec = self.tp.exec;
        let p = self.params.len() as u32;
        let f = self.fsdp1.as_mut().expect("FSDP1 state");
        // A model weight keeps the dtype it was loaded in (a LoRA matrix is made in its own).
        let es = if lora { es } else { es * f.weight_scale };
        let kind = if lora {
            UnitKind::Lora
        } else if exec == super::NO_LAYER {
            UnitKind::Root
        } else {
            UnitKind::Layer(exec)
        };
        let existing = match kind {
            UnitKind::Lora => None,
            UnitKind::Root => Some(0),
            UnitKind::Layer(li) => f.layer_units.get(li as usize).copied(),
        };
        let u = match existing {
            Some(u) => u,
            None => {
                let padded = self.tp.new_resizable_t(0, Unit::what(kind));
                let f = self.fsdp1.as_mut().expect("FSDP1 state");
                f.units.push(Unit::new(kind, padded));
                let u = f.units.len() - 1;
                if let UnitKind::Layer(li) = kind {
                    f.layer_units.resize(li as usize + 1, usize::MAX);
                    f.layer_units[li as usize] = u;
                }
                u
            }
        };
        let f = self.fsdp1.as_mut().expect("FSDP1 state");
        let unit = &mut f.units[u];
        if unit.params.is_empty() {
            unit.es = es;
        }
        unit.params.push((p, n));
        unit.trainable |= trainable;
        f.unit_of.push(u);
        let ces = f.compute_es(u);
        X {
            t: f.units[u].padded,
            n,
            es: ces,
            g: G::No,
        }
    }

    /// Every parameter is registered: each unit's sizes are known, and its shard (and size-0
    /// tensor) is allocated in the order the parameters first name them.
    pub(super) fn fsdp1_finish_setup(&mut self) {
        let Some(f) = self.fsdp1_mut() else {
            return;
        };
        for u in 0..f.units.len() {
            let (_, n) = f.layout(u);
            let unit = &mut f.units[u];
            unit.n = n;
            unit.s = n / f.world;
        }
        let sizes: Vec<(T, u64)> = f
            .units
            .iter()
            .enumerate()
            .map(|(u, unit)| (unit.padded, unit.n * f.compute_es(u)))
            .collect();
        for (t, b) in sizes {
            self.tp.set_unallocated_bytes(t, b);
        }
        let f = self.fsdp1.as_ref().expect("FSDP1 state");
        let mut firsts = vec![];
        let mut seen = vec![(false, false); f.units.len()];
        for p in 0..f.unit_of.len() {
            let u = f.unit_of[p];
            if !seen[u].0 {
                seen[u].0 = true;
                firsts.push((u, false));
            }
            if f.numel_in_shard(p as u32) == 0 && !seen[u].1 {
                seen[u].1 = true;
                firsts.push((u, true));
            }
        }
        for (u, empty) in firsts {
            let f = self.fsdp1.as_ref().expect("FSDP1 state");
            let (s, es, trainable) = (f.units[u].s, f.units[u].es, f.units[u].trainable);
            let what = if trainable {
                What::Trainable
            } else {
                What::Weight
            };
            let x = if empty {
                self.t(0, es, what)
            } else {
                self.t(s, es, what)
            };
            let f = self.fsdp1.as_mut().expect("FSDP1 state");
            if empty {
                f.units[u].empty = Some(x.t);
            } else {
                f.units[u].shard = Some(x.t);
            }
        }
    }

    /// The parameter as the optimizer sees it: its view of the shard (`numel_in_shard`
    /// elements, its own dtype).
    pub(super) fn fsdp1_opt_param(&self, p: u32) -> Option<X> {
        let f = self.fsdp1()?;
        let u = f.unit_of(p);
        Some(X {
            t: f.units[u].shard.expect("shards are allocated"),
            n: f.numel_in_shard(p),
            es: f.param_es(p),
            g: self.params[p as usize].x.g,
        })
    }

    /// The buffers are in `buffer_dtype` (FSDP1's mixed precision).
    pub(super) fn fsdp1_buffers_cast(&self) -> bool {
        self.fsdp1().is_some_and(|f| f.mixed_es.is_some())
    }

    /// Bytes per element peft casts a LoRA input to (`_cast_input_dtype` reads the weight
    /// before the unit's forward gathers it: its shard's dtype).
    pub(super) fn fsdp1_lora_cast_es(&self, w: X) -> Option<u64> {
        let f = self.fsdp1()?;
        match w.g {
            // Gathered already (prefetched by the pre-backward of the unit after it, before a
            // recomputation), the weight is a view of the padded parameter, in `param_dtype`.
            G::Param(p) if f.units[f.unit_of(p)].unsharded => Some(f.compute_es(f.unit_of(p))),
            G::Param(p) => Some(f.param_es(p)),
            _ => None,
        }
    }

    /// Unshards unit `u` unless it is (`_unshard`).
    fn fsdp1_unshard(&mut self, u: usize) {
        let f = self.fsdp1().expect("FSDP1 state");
        if f.units[u].unsharded {
            return;
        }
        let casts = f.casts(u);
        let (s, mixed, padded) = (f.units[u].s, f.mixed_es.unwrap_or(0), f.units[u].padded);
        let what = self.fsdp1_what(u);
        let low = casts.then(|| {
            self.fsdp1_stream(SideStream::PreUnshard);
            self.t(s, mixed, what)
        });
        self.fsdp1_stream(SideStream::Unshard);
        self.tp.resize_alloc(padded);
        if let Some(l) = low {
            self.drop(l);
        }
        self.tp.stream = DEFAULT_STREAM;
        self.fsdp1_mut().expect("FSDP1 state").units[u].unsharded = true;
    }

    /// Makes `side` the current stream.
    fn fsdp1_stream(&mut self, side: SideStream) {
        let f = self.fsdp1_mut().expect("FSDP1 state");
        let k = match f.streams.iter().position(|&x| x == side) {
            Some(k) => k,
            None => {
                f.streams.push(side);
                f.streams.len() - 1
            }
        };
        self.tp.stream = u8::try_from(k + 1).unwrap_or(u8::MAX);
    }

    fn fsdp1_what(&self, u: usize) -> What {
        Unit::what(self.fsdp1().expect("FSDP1 state").units[u].kind)
    }

    /// `_reshard`: the sharded views made again (a size-0 tensor, kept for the parameters outside
    /// this rank's shard), then, when `free`, the padded parameter freed.
    fn fsdp1_reshard(&mut self, u: usize, free: bool) {
        let f = self.fsdp1().expect("FSDP1 state");
        let es = f.units[u].es;
        let keeps = f.units[u].empty.is_some();
        let z = self.t(0, es, What::GatheredLayer);
        if keeps {
            let f = self.fsdp1_mut().expect("FSDP1 state");
            let old = f.units[u].empty.replace(z.t);
            if let Some(o) = old {
                self.tp.drop_t(o);
            }
        } else {
            self.drop(z);
        }
        let f = self.fsdp1_mut().expect("FSDP1 state");
        f.units[u].prefetched = false;
        if free && f.units[u].unsharded {
            f.units[u].unsharded = false;
            let padded = f.units[u].padded;
            self.tp.resize_free(padded);
        }
    }

    /// The root's pre-forward: at the first forward the buffers cast to `buffer_dtype` and each
    /// unit's buffers made and freed (lazy init); the last step's sharded gradients let go; the
    /// root unsharded. (The post-forward order starts again from the last final callback.)
    pub(super) fn fsdp1_forward_start(&mut self) {
        let Some(f) = self.fsdp1_mut() else {
            return;
        };
        if !f.lazy_init_done {
            f.lazy_init_done = true;
            if let Some(m) = f.mixed_es {
                let bufs = std::mem::take(&mut f.buffers);
                let mut cast = vec![];
                for b in bufs {
                    let c = self.t(b.n, m, What::Buffer);
                    self.drop(b);
                    cast.push(c);
                }
                self.fsdp1_mut().expect("FSDP1 state").buffers = cast;
            }
            let f = self.fsdp1().expect("FSDP1 state");
            let plan: Vec<(bool, u64, u64, u64, u64)> = (0..f.units.len())
                .map(|u| {
                    let unit = &f.units[u];
                    (f.casts(u), unit.s, unit.n, f.compute_es(u), unit.es)
                })
                .collect();
            let mixed = f.mixed_es.unwrap_or(0);
            for (casts, s, n, ces, es) in plan {
                if casts {
                    let x = self.t(s, mixed, What::GatheredLayer);
                    self.drop(x);
                }
                let x = self.t(n, ces, What::GatheredLayer);
                self.drop(x);
                if casts {
                    let x = self.t(n, es, What::GatheredLayer);
                    self.drop(x);
                }
            }
        }
        // `_reset_flat_param_grad_info_if_needed` (F:2466-2492): the flat gradients whose
        // original parameters' `.grad` are all gone (after `zero_grad`) are let go, unit by unit.
        let f = self.fsdp1().expect("FSDP1 state");
        let order: Vec<u32> = f
            .units
            .iter()
            .flat_map(|u| u.params.iter().map(|&(p, _)| p))
            .collect();
        self.release_grads(order);
        self.fsdp1_pre_forward(0);
    }

    /// Whether a unit's forward hooks run now: not in a recomputation once its pre-backward has
    /// run (`_pre_forward` / `_post_forward` return at once in `BACKWARD_PRE`).
    fn fsdp1_runs(&self, u: usize) -> bool {
        self.tp.mode != Mode::Recompute || !self.fsdp1().expect("FSDP1 state").units[u].pre_done
    }

    /// Unit `u`'s pre-forward: unsharded unless prefetched.
    pub(super) fn fsdp1_pre_forward(&mut self, u: usize) {
        if !self.fsdp1_runs(u) {
            return;
        }
        let n = self.tp.node_count();
        let recompute = self.tp.mode == Mode::Recompute;
        let f = self.fsdp1_mut().expect("FSDP1 state");
        if !recompute {
            f.units[u].nodes.0 = n;
        }
        if !f.units[u].prefetched {
            self.fsdp1_unshard(u);
        }
    }

    /// Unit `u`'s post-forward: recorded in the post-forward order, resharded (the root keeps
    /// its padded parameter), its outputs' pre-backward hooks registered.
    pub(super) fn fsdp1_post_forward(&mut self, u: usize) {
        if !self.fsdp1_runs(u) {
            return;
        }
        let n = self.tp.node_count();
        let grad = self.tp.mode != Mode::NoGrad;
        let recompute = self.tp.mode == Mode::Recompute;
        let f = self.fsdp1_mut().expect("FSDP1 state");
        if !recompute {
            f.units[u].nodes.1 = n;
        }
        match f.units[u].post_forward_index {
            Some(i) if i > 0 => f.order.push(u),
            _ => {
                f.units[u].post_forward_index = Some(f.order.len());
                f.order.push(u);
            }
        }
        f.units[u].needs_pre_backward_unshard = grad;
        self.fsdp1_reshard(u, u != 0);
    }

    /// Decoder layer `li`'s pre-forward (`input_grad`: its input takes a gradient).
    pub(super) fn fsdp1_layer_pre_forward(&mut self, li: usize, input_grad: bool) {
        let Some(f) = self.fsdp1_mut() else {
            return;
        };
        if f.input_grad.len() <= li {
            f.input_grad.resize(li + 1, false);
        }
        f.input_grad[li] = input_grad;
        let u = f.layer_units[li];
        self.fsdp1_pre_forward(u);
    }

    /// Decoder layer `li`'s post-forward.
    pub(super) fn fsdp1_layer_post_forward(&mut self, li: usize) {
        if let Some(u) = self.fsdp1().map(|f| f.layer_units[li]) {
            self.fsdp1_post_forward(u);
        }
    }

    /// The unit of a LoRA matrix `w` (a trainable parameter).
    fn fsdp1_unit_of_weight(&self, w: X) -> Option<usize> {
        let f = self.fsdp1()?;
        match w.g {
            G::Param(p) => Some(f.unit_of(p)),
            _ => None,
        }
    }

    /// A LoRA matrix's pre-forward (`w` its weight).
    pub(super) fn fsdp1_lora_pre_forward(&mut self, w: X) {
        if let Some(u) = self.fsdp1_unit_of_weight(w) {
            self.fsdp1_pre_forward(u);
        }
    }

    /// A LoRA matrix's post-forward.
    pub(super) fn fsdp1_lora_post_forward(&mut self, w: X) {
        if let Some(u) = self.fsdp1_unit_of_weight(w) {
            self.fsdp1_post_forward(u);
        }
    }

    /// The root's post-forward (when the model's forward returns).
    pub(super) fn fsdp1_root_post_forward(&mut self) {
        if self.fsdp1().is_some() {
            self.fsdp1_post_forward(0);
        }
    }

    /// A unit's pre-backward hook: unsharded unless prefetched, then the unit whose
    /// post-forward came before its own prefetched.
    fn fsdp1_pre_backward(&mut self, u: usize) {
        let f = self.fsdp1_mut().expect("FSDP1 state");
        if f.units[u].pre_done {
            return;
        }
        f.units[u].pre_done = true;
        if f.units[u].trainable {
            f.pending.push(u);
        }
        if f.units[u].needs_pre_backward_unshard && !f.units[u].prefetched {
            self.fsdp1_unshard(u);
        }
        let f = self.fsdp1_mut().expect("FSDP1 state");
        f.units[u].needs_pre_backward_unshard = false;
        let target = f.units[u]
            .post_forward_index
            .filter(|&i| i > 0)
            .map(|i| f.order[i - 1]);
        if let Some(t) = target {
            let tu = &f.units[t];
            if tu.needs_pre_backward_unshard && !tu.prefetched {
                self.fsdp1_unshard(t);
                self.fsdp1_mut().expect("FSDP1 state").units[t].prefetched = true;
            }
        }
    }

    /// Before backward runs node `i`: the pre-backward hook of the unit it belongs to, and
    /// when it leaves a frozen layer whose input took a gradient, that layer's reshard.
    pub(super) fn fsdp1_before_node(&mut self, i: usize) {
        self.fsdp1_post_backwards_before(Some(i));
        let tag = self.tp.node_tag(i);
        let f = self.fsdp1().expect("FSDP1 state");
        let u = f.unit_of_node(i, tag);
        let layer = (tag != super::NO_LAYER).then_some(tag as usize);
        let left = f.cur_layer.filter(|&l| Some(l) != layer);
        // The unit's layer first (its hook is on the layer's output), then the unit.
        if let Some(l) = layer {
            let lu = f.layer_units[l];
            self.fsdp1_pre_backward(lu);
        }
        self.fsdp1_pre_backward(u);
        if let Some(l) = left {
            self.fsdp1_leave_layer(l);
        }
        if layer.is_some() {
            self.fsdp1_mut().expect("FSDP1 state").cur_layer = layer;
        }
    }

    /// Backward has left layer `l`: a frozen layer whose input takes a gradient is resharded
    /// (its hook on the input).
    fn fsdp1_leave_layer(&mut self, l: usize) {
        let f = self.fsdp1().expect("FSDP1 state");
        let lu = f.layer_units[l];
        if !f.units[lu].trainable && f.input_grad.get(l).copied().unwrap_or(false) {
            self.fsdp1_reshard(lu, true);
        }
    }

    /// Before backward runs node `i` (or, with `None`, when it ends): the post-backward of each
    /// trainable unit whose parameters all have their gradients and whose flat parameter's split
    /// into views — made when its forward gathered it, before its first node — comes next
    /// (autograd runs the ready node made last first).
    fn fsdp1_post_backwards_before(&mut self, i: Option<usize>) {
        let f = self.fsdp1().expect("FSDP1 state");
        let due: Vec<usize> = f
            .pending
            .iter()
            .copied()
            .filter(|&u| {
                let unit = &f.units[u];
                i.is_none_or(|i| unit.nodes.0 > i)
                    && unit.params.iter().all(|&(p, _)| {
                        !self.params[p as usize].x.grad() || self.tp.has_param_grad(p)
                    })
            })
            .collect();
        for u in due {
            self.fsdp1_mut()
                .expect("FSDP1 state")
                .pending
                .retain(|&q| q != u);
            self.fsdp1_post_backward(u);
        }
    }

    /// A trainable unit's post-backward: the flat gradient (`cat`), the parameters' gradients
    /// freed, the unit resharded, the sharded gradient and its cast, the flat gradient freed.
    fn fsdp1_post_backward(&mut self, u: usize) {
        let f = self.fsdp1().expect("FSDP1 state");
        let ps: Vec<u32> = f.units[u].params.iter().map(|&(p, _)| p).collect();
        let (n, s, es, ces) = (f.units[u].n, f.units[u].s, f.units[u].es, f.compute_es(u));
        let grads = self.tp.take_grads_of(|p| ps.contains(&p));
        if grads.is_empty() {
            return;
        }
        // The split's backward: a zero tensor for each chunk without a gradient (the alignment
        // padding before a parameter, the padding to the world size), then their `cat`.
        let f = self.fsdp1().expect("FSDP1 state");
        let (offsets, _) = f.layout(u);
        let mut pads = vec![];
        let mut end = 0;
        for (k, &(_, numel)) in f.units[u].params.iter().enumerate() {
            pads.push(offsets[k] - end);
            end = offsets[k] + numel;
        }
        pads.push(n - end);
        self.fsdp1_stream(SideStream::Unshard);
        let zeros: Vec<X> = pads
            .into_iter()
            .filter(|&z| z > 0)
            .map(|z| self.t(z, ces, What::Grad))
            .collect();
        let flat = self.t(n, ces, What::Grad);
        for z in zeros {
            self.drop(z);
        }
        for (_, t) in grads {
            self.tp.drop_t(t);
        }
        self.fsdp1_reshard(u, true);
        self.fsdp1_stream(SideStream::PostBackward);
        let reduced = self.t(s, ces, What::CommBucket);
        let sharded = if ces != es {
            let c = self.t(s, es, What::ParamGrad);
            self.drop(reduced);
            c
        } else {
            reduced
        };
        self.drop(flat);
        self.tp.stream = DEFAULT_STREAM;
        // A parameter outside this rank's shard keeps no gradient (`_use_sharded_grad_views`).
        for &p in &ps {
            let f = self.fsdp1().expect("FSDP1 state");
            if self.params[p as usize].x.grad() && f.numel_in_shard(p) > 0 {
                self.tp.keep(sharded.t);
                self.grads[p as usize] = Some(sharded.t);
            }
        }
        self.tp.drop_t(sharded.t);
    }

    /// The end of backward: the last layer left (its reshard hook), then the root's final
    /// callback: every unit still unsharded resharded, in module order.
    pub(super) fn fsdp1_backward_end(&mut self) {
        if self.fsdp1().is_none() {
            return;
        }
        self.fsdp1_post_backwards_before(None);
        let f = self.fsdp1_mut().expect("FSDP1 state");
        if let Some(l) = f.cur_layer.take() {
            self.fsdp1_leave_layer(l);
        }
        let f = self.fsdp1().expect("FSDP1 state");
        for u in 0..f.units.len() {
            if self.fsdp1().expect("FSDP1 state").units[u].unsharded {
                self.fsdp1_reshard(u, true);
            }
        }
        let f = self.fsdp1_mut().expect("FSDP1 state");
        f.order.clear();
        f.pending.clear();
        for unit in &mut f.units {
            unit.pre_done = false;
            unit.post_forward_index = None;
            unit.prefetched = false;
            unit.needs_pre_backward_unshard = false;
        }
    }
}
