//! The step, op by op, as transformers 5 + peft + PyTorch run it: each function mirrors the Python
//! forward it names (which tensors it creates, in which order, and when its locals die); the
//! derivative formulas and the engine's order live in [`super::tape`].

use super::tape::{Edge, Mode, Op, Tape, G, NO_LAYER, T, X};
use super::{Block, Event, StepPhase, Trace, What};
use crate::model::arch::{
    AttentionKind, KwargsOrder, LayerKind, LinearShape, Mrope, NormKind, QkNorm, Target,
};
use crate::model::bnb_adamw;
use crate::model::ctx::{Ctx, SdpaMask};
use crate::model::dtype::{Dtype, Quant};
use crate::model::error::PlanError;
use crate::model::settings::{AttnImpl, ExpertParam, LossShift, Optimizer, SavedModule};
use crate::model::torchao_adamw;

/// A parameter of the model, in `named_parameters()` order.
#[derive(Clone, Copy, Debug)]
struct Param {
    x: X,
}

/// The parameters of one MoE block: the router's weight and the routed experts.
#[derive(Clone, Debug)]
struct MoeParams {
    router: Param,
    experts: Experts,
}

/// How a block's routed experts are held.
#[derive(Clone, Debug)]
enum Experts {
    /// transformers 5: fused 3-D parameters.
    Fused(FusedExperts),
    /// transformers 4: each expert's projections (and the router) as `nn.Linear` layers,
    /// 4-bit ones when the model is loaded in 4 bits.
    PerExpert(PerExpert),
}

/// transformers 5's fused expert parameters of one MoE block.
#[derive(Clone, Debug)]
struct FusedExperts {
    gate_up: Param,
    down: Param,
    /// LoRA A and B of each adapted expert parameter (peft `target_parameters`).
    lora: Vec<(ExpertParam, Param, Param)>,
}

/// One `nn.Linear` MLP per expert: transformers 4's MoE blocks, and Llama 4's experts loaded
/// from a checkpoint saved quantized (`SequentialLlama4TextExperts`).
#[derive(Clone, Debug)]
struct PerExpert {
    /// The router as a Linear layer (transformers 4: quantized with the rest); `None` where it
    /// stays a 16-bit parameter (Llama 4's `Llama4Router`, an `nn.Linear` subclass bitsandbytes
    /// passes over).
    router: Option<Lin>,
    /// gate, up, down of each expert (with LoRA where peft's names reach them: Llama 4).
    experts: Vec<[Lin; 3]>,
}

/// A Linear layer's LoRA adapter.
#[derive(Clone, Copy, Debug)]
struct Adapter {
    a: Param,
    b: Param,
    /// DoRA's magnitude vector (`lora_magnitude_vector`, one value per output feature).
    magnitude: Option<Param>,
}

/// The Linear layers of one block, with their LoRA adapters.
#[derive(Clone, Debug)]
struct Lin {
    shape: LinearShape,
    w: Param,
    /// Its bias's index in `params`, if it has one.
    bias: Option<usize>,
    lora: Option<Adapter>,
}

struct Prog<'c, 'a> {
    ctx: &'c Ctx<'a>,
    tp: Tape,
    /// FSDP2's units, shards and buffers when the rank runs it op by op
    /// ([`crate::model::Settings::fsdp2_op_by_op`]).
    fsdp2: Option<fsdp2::Fsdp2>,
    /// FSDP1's units when the rank runs it op by op
    /// ([`crate::model::Settings::fsdp1_op_by_op`]).
    fsdp1: Option<fsdp1::Fsdp1>,
    /// DistributedDataParallel's reducer (`ddp.rs`), under that strategy.
    ddp: Option<ddp::Ddp>,
    params: Vec<Param>,
    /// The module's buffers, in `named_buffers` order.
    buffers: Vec<X>,
    trainable: Vec<u32>,
    layers: Vec<Vec<Lin>>,
    /// Each layer's MoE block (None for a dense layer).
    moe: Vec<Option<MoeParams>>,
    lm_head: Option<Param>,
    /// The embedding table whose lookup takes a gradient: peft's trainable copy
    /// (`modules_to_save`) or the embedding itself trained in full.
    embed_trained: Option<Param>,
    /// Optimizer states per trainable parameter (created at the first step).
    states: Vec<u32>,
    phases: Vec<(usize, u8, StepPhase)>,
    /// Stored parameter gradients (param index → storage).
    grads: Vec<Option<u32>>,
    /// Checkpointed layers' inputs.
    ckpt_in: Vec<Option<CkptIn>>,
    /// Adafactor's `state["RMS"]` per trainable parameter.
    rms: Vec<Option<X>>,
    /// Last dimension of each trainable parameter.
    param_cols: Vec<u64>,
    /// The sliding-window mask of the current step (Gemma, eager), or Llama 4's chunked mask.
    sliding: Option<X>,
    /// The global layers' rotary tables (cos, sin) of the current forward, when the family
    /// computes one set per layer type (Gemma 3).
    rotary_global: Option<(X, X)>,
    /// Autocast's cached casts of trainable weights (freed when the context exits), with the
    /// storage each was cast from.
    ac_cache: Vec<(T, X)>,
    /// Each 8-bit Linear's `state.idx` (the outlier columns of its last call, kept by its
    /// `MatmulLtState` until the next call replaces them), by its weight's storage.
    int8_idx: Vec<(T, X)>,
    /// What 8-bit Linears keep as `ctx.tensors` and `ctx.tensor_states` (their input, `subA` and
    /// the outlier columns): Python attributes of the autograd node, not saved tensors, so they
    /// live until the graph is freed after backward, checkpointed layers' included.
    graph_held: Vec<X>,
    /// The embedding output as a leaf needing a gradient (checkpointing).
    emb_leaf: Option<X>,
    /// The vision tower's patch embedding output as a leaf needing a gradient (Qwen2.5-VL with
    /// checkpointing: `enable_input_require_grads` hooks `visual.patch_embed`).
    vision_leaf: Option<X>,
    /// Padding-free packing: the collator's position ids (one row), an input of the step; with
    /// neat packing, a row per sample.
    pub(super) packed_pos: Option<X>,
    /// Neat packing: the collator's additive 4-D mask, an input of the step.
    pub(super) neat_mask: Option<X>,
    /// The vision tower's parameters in registration order.
    vision_weights: Vec<X>,
    /// Checkpointed tower blocks' inputs (hidden states, the attention boundaries, cos, sin),
    /// by block.
    vision_ckpt: Vec<Option<(X, X, X, X)>>,
    /// The 4-D mask of the current step, if any.
    causal: Option<X>,
    /// Router logits the output recorder holds (`output_router_logits`).
    router_logits: Vec<X>,
    /// Full fine-tuning: each layer's trainable norm weights in the order its forward runs them
    /// (input norm, q/k norms, the rest), and the final norm's.
    norms: Vec<Vec<X>>,
    final_norm: Option<X>,
    /// q/k norm weights registered by the layer being set up.
    qk_norms: Vec<X>,
    /// The norm weights the current forward pass has yet to use, next last.
    norm_queue: Vec<X>,
    /// peft's `disable_adapter()` is in effect (a preference trainer's reference pass).
    adapters_off: bool,
    /// The reference pass of a trained base runs the reference model: a frozen copy of the
    /// weights (the same shapes; what differs is that autocast never caches their casts).
    ref_copy: bool,
    /// The evaluation loop keeps the logits `forward` returns (`kept_logits`) instead of
    /// freeing them with the model's output.
    keep_logits: bool,
    kept_logits: Option<X>,
    /// Each layer's 4-bit quantization states, by Linear name (what a 4-bit merge replaces).
    qstates: Vec<Vec<(&'static str, Vec<X>)>>,
    /// The Linear layer being run feeds a transpose whose gradient comes back strided across
    /// sequences: the views of its outputs copy in backward (Gated DeltaNet's in_proj_b).
    strided_grad: bool,
    /// The vision step's tensors that outlive it (freed at the model's return, or with its
    /// output).
    vision_locals: vision::VisionLocals,
    /// `Qwen3_5Model.rope_deltas`: kept by the model until the next step's replace them.
    rope_deltas: Option<X>,
    /// The input ids a trained embedding's backward keeps, where the step frees its own
    /// reference before the backward (GRPO's `_compute_loss` locals).
    embed_ids: Option<T>,
    /// A GRPO step's generation: the rows, the KV cache, the mask's length.
    gen: Option<generate::GenMode>,
    /// Every decode call of a generation op by op (a recording's sequence), not only the
    /// first and last [`generate::FULL_DECODE_CALLS`].
    exact_generation: bool,
    /// The loss is given `num_items_in_batch` (Trainer's evaluation): a summed cross-entropy
    /// divided by it, not a mean.
    loss_over_items: bool,
    /// The first of the extended ops (`model::extended`) this step ran.
    extended: Option<&'static str>,
}

/// An op of the extended set (`model::extended`: a vision tower and images, Gated DeltaNet
/// layers, mixture-of-experts layers, latent attention, attention sinks, DoRA, preference
/// training, a fused linear cross-entropy), run as `$op`; the step records `$what`
/// ([`Trace::extended`]). Built without the `extended-ops` feature (the planner page's first
/// bundle), the op is not there: the program goes on with `$otherwise` and [`run`] refuses the
/// step ([`PlanError::Unbundled`]), so no figure of such a step is ever read.
macro_rules! extended {
    ($p:ident, $what:expr, $op:expr, $otherwise:expr) => {{
        $p.extended.get_or_insert($what);
        #[cfg(feature = "extended-ops")]
        let r = $op;
        #[cfg(not(feature = "extended-ops"))]
        let r = $otherwise;
        r
    }};
}

/// The attention's q, k, v and o projections among a layer's Linear layers, by name.
fn qkvo(lins: &[Lin]) -> Option<[Lin; 4]> {
    let named = |n: &str| lins.iter().find(|l| l.shape.name == n).cloned();
    Some([
        named("q_proj")?,
        named("k_proj")?,
        named("v_proj")?,
        named("o_proj")?,
    ])
}

fn bytes(d: crate::model::dtype::Dtype) -> u64 {
    d.bytes() as u64
}

/// Whether a Linear layer of an MoE decoder layer belongs to its MoE block, registered after
/// the routed experts (the shared experts' MLP and gate).
fn in_moe_block(l: &LinearShape) -> bool {
    l.selected_by
        .iter()
        .any(|t| t.is_mlp() || *t == Target::SharedExpertGate)
}

/// A layer's Linear modules in the order the module registers them: the forward's order, except
/// that Phi-3's attention creates o_proj before qkv_proj (`Phi3Attention.__init__`), so its
/// parameters and its 4-bit quantization states come in that order.
fn module_order(a: &crate::model::arch::Architecture, kind: LayerKind) -> Vec<LinearShape> {
    let mut order = a.block_linears(kind);
    if a.family.layout().fused_projections && order.len() > 1 {
        order.swap(0, 1);
    }
    order
}

// The extended ops' modules: without `extended-ops` nothing calls most of their functions.
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod cce;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod ddp;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod dora;
mod fsdp1;
mod fsdp2;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod fused_ce;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod gdn;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod generate;
pub(super) use generate::FULL_DECODE_CALLS;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod grpo;
pub(super) mod job;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod liger;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod llama4;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod moe;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod packing;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod preference;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod trl_sft;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod vision;
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
mod vision_window;

impl<'c, 'a> Prog<'c, 'a> {
    /// Tokens of one forward pass: every sequence it sees (`2 × batch` for preference pairs).
    fn tokens(&self) -> u64 {
        self.ctx.s.sequences() * self.ctx.s.seq
    }
    fn h(&self) -> u64 {
        self.ctx.arch.hidden_size
    }

    fn phase(&mut self, step: u8, p: StepPhase) {
        self.phases.push((self.tp.events.len(), step, p));
    }

    fn t(&mut self, n: u64, es: u64, what: What) -> X {
        let t = self.tp.new_t_of(n * es, es, what);
        X { t, n, es, g: G::No }
    }

    fn edge(x: &X) -> Edge {
        Edge {
            to: x.g,
            n: x.n,
            es: x.es,
            sum_to: 0,
        }
    }

    /// A parameter of `n` elements of `es` bytes whose last dimension is `cols` (0: a vector).
    fn param(&mut self, n: u64, es: u64, cols: u64, trainable: bool, what: What) -> Param {
        let mut x = if self.fsdp2().is_some() {
            self.fsdp2_param(n, es, cols, trainable, what)
        } else if self.fsdp1().is_some() {
            // peft's wrapping policy: each leaf module with a trainable weight (a LoRA matrix)
            // is a unit of its own.
            let lora = trainable && !self.ctx.s.base_trained();
            self.fsdp1_param(n, es, trainable, lora)
        } else {
            self.t(n, es, what)
        };
        if trainable {
            x.g = G::Param(self.params.len() as u32);
            self.trainable.push(self.params.len() as u32);
            self.param_cols.push(cols);
        }
        self.params.push(Param { x });
        self.grads.push(None);
        Param { x }
    }

    /// A base-model parameter of the layer being set up (`tp.exec`, or none): frozen, or
    /// trainable under full fine-tuning and in a trained layer under freeze tuning (then `cols`
    /// is its last dimension, 0 for a vector).
    fn weight(&mut self, n: u64, es: u64, cols: u64) -> Param {
        let s = self.ctx.s;
        let trained = if self.tp.exec == NO_LAYER {
            s.outside_trained()
        } else {
            s.layer_trained(u64::from(self.tp.exec), self.ctx.arch.num_hidden_layers)
        };
        if trained {
            self.param(n, es, cols, true, What::Trainable)
        } else {
            self.param(n, es, cols, false, What::Weight)
        }
    }

    // ---------------------------------------------------------------- setup

    fn setup(&mut self) {
        let ctx = self.ctx;
        let a = ctx.arch;
        let s = ctx.s;
        let aux = bytes(ctx.aux_weight);
        let h = a.hidden_size;
        let v = a.vocab_size;
        if let Some(t) = &a.vision {
            extended!(self, "a vision tower", self.register_vision(t), {
                let _ = t;
            });
        }
        let mts_embed = s.modules_to_save.contains(&SavedModule::EmbedTokens);
        let embed_n = v * h;
        let embed = if mts_embed {
            self.param(embed_n, aux, h, false, What::Weight);
            self.param(embed_n, aux, h, true, What::Trainable)
        } else {
            self.weight(embed_n, aux, h)
        };
        self.embed_trained = embed.x.grad().then_some(embed);
        for li in 0..a.num_hidden_layers {
            // The layer's parameters belong to it (their optimizer states and updates too).
            self.tp.exec = li as u32;
            let kind = a.layer_kind(li);
            let adapted = ctx.adapted_of(kind);
            let mut lins = vec![];
            // Parameters are registered in module order (an MoE layer registers its shared
            // experts inside the MoE block); `lins` keeps the forward order.
            let order = module_order(a, kind);
            let (ffn_later, mut order): (Vec<LinearShape>, Vec<LinearShape>) = order
                .into_iter()
                .partition(|l| kind.is_moe() && in_moe_block(l));
            if kind.is_linear() {
                // Qwen3_5GatedDeltaNet's own parameters (dt_bias, A_log) come first, then its
                // modules in registration order: conv1d, the gated norm, out_proj, and the
                // input projections — Qwen3-Next's two fused projections right after conv1d,
                // then the gated norm and out_proj.
                if let Some(g) = a.gdn() {
                    self.weight(g.value_heads, aux, 0);
                    self.weight(g.value_heads, aux, 0);
                    self.weight(g.conv_dim() * g.conv_kernel, aux, 0);
                    if g.fused_in_proj {
                        let (inputs, rest) = order
                            .into_iter()
                            .partition(|l| l.name.starts_with("in_proj"));
                        for l in inputs {
                            self.register_linear(l, &adapted, &mut lins);
                        }
                        order = rest;
                    }
                    self.weight(g.value_dim, aux, 0);
                }
                if let Some(i) = order.iter().position(|l| l.name == "out_proj") {
                    let out = order.remove(i);
                    self.register_linear(out, &adapted, &mut lins);
                }
            }
            for l in order {
                self.register_linear(l, &adapted, &mut lins);
            }
            // (mixture-of-experts layers are the full planner's, `extended::needed`)
            if crate::model::extended::EXTENDED && kind.is_moe() {
                let moe = self.register_moe(&ffn_later, &adapted, &mut lins);
                self.moe.push(Some(moe));
            } else {
                self.moe.push(None);
            }
            let norms = a.family.norms_per_layer() as u64;
            let res: Vec<X> = (0..norms).map(|_| self.weight(h, aux, 0).x).collect();
            // A trained layer's norms in forward order: the input norm, then attention's q/k
            // norms, then the rest (none for a frozen layer).
            let qk = std::mem::take(&mut self.qk_norms);
            if s.layer_trained(li, a.num_hidden_layers) {
                let order = res.iter().take(1).chain(&qk).chain(res.iter().skip(1));
                self.norms.push(order.copied().collect());
            } else {
                self.norms.push(vec![]);
            }
            if a.family.layout().fused_projections && lins.len() > 1 {
                lins.swap(0, 1);
            }
            self.layers.push(lins);
        }
        self.tp.exec = NO_LAYER;
        let final_norm = self.weight(h, aux, 0);
        if s.outside_trained() {
            self.final_norm = Some(final_norm.x);
        }
        if !a.tie_word_embeddings {
            let head = self.weight(v * h, aux, h);
            self.lm_head = Some(head);
        }
        if s.modules_to_save.contains(&SavedModule::LmHead) {
            let copy = self.param(v * h, aux, h, true, What::Trainable);
            self.lm_head = Some(copy);
        }
        self.fsdp1_finish_setup();
        if a.family.layout().scaled_embedding {
            let b = self.t(1, aux, What::Buffer);
            self.buffers.push(b);
        }
        // The sigmoid routing's correction biases (fp32 buffers), layer by layer: the model is
        // moved to the GPU parameters first, then buffers.
        if crate::model::extended::EXTENDED && a.moe_layout().is_some_and(|m| m.sigmoid_groups) {
            let e = a.num_experts() as u64;
            for li in (0..a.num_hidden_layers).filter(|&li| a.layer_kind(li).is_moe()) {
                // (each its layer's: the short runs line up layer by layer)
                self.tp.exec = li as u32;
                let b = self.t(e, 4, What::Buffer);
                self.buffers.push(b);
            }
            self.tp.exec = NO_LAYER;
        }
        // Rotary inverse frequencies (+ the original copy): the vision tower's axial ones
        // (`head_dim / 4` each), then the language model's, of the rotating part of a head.
        if let Some(t) = &a.vision {
            for _ in 0..2 {
                let b = self.t(t.head_dim() / 4, 4, What::Buffer);
                self.buffers.push(b);
            }
        }
        let half = a.rotary_dim() / 2;
        let rotaries = if self.two_rotaries() { 2 } else { 1 };
        for _ in 0..rotaries * 2 {
            let b = self.t(half, 4, What::Buffer);
            self.buffers.push(b);
            if let Some(f) = self.fsdp1.as_mut() {
                f.buffers.push(b);
            }
        }
        if s.quant.is_some() {
            if a.vision.is_some() {
                extended!(self, "a vision tower", self.vision_quant_state(), ());
            }
            self.quant_state();
        }
        if s.base_trained() && s.reference_pass() {
            // TRL's reference model for a trained base (`dpo_trainer.py:907-925`): the model
            // loaded again from its path, in the policy's dtype, frozen.
            let copies: Vec<u64> = self.params.iter().map(|p| p.x.n * p.x.es).collect();
            for b in copies {
                self.t(b, 1, What::Weight);
            }
        }
        // Several GPUs: the buffers the rank's communication keeps through the step (FSDP2
        // allocates its own as it gathers and reduces).
        let comm = if self.fsdp2().is_some() || self.fsdp1().is_some() {
            vec![]
        } else {
            let grad_bytes: u128 = self
                .trainable
                .iter()
                .map(|&i| u128::from(self.params[i as usize].x.n * self.params[i as usize].x.es))
                .sum();
            crate::model::distributed::comm_buffers(ctx, grad_bytes)
        };
        for (kind, b) in comm {
            use crate::model::distributed::CommBuffer;
            let what = match kind {
                CommBuffer::Layer => What::GatheredLayer,
                CommBuffer::Root => What::GatheredRoot,
                CommBuffer::Bucket => What::CommBucket,
            };
            self.t(u64::try_from(b).unwrap_or(u64::MAX), 1, what);
        }
        if self.ctx.s.parallel.ddp_ranks() {
            extended!(self, "DistributedDataParallel", self.ddp_setup(), ());
        }
        // A real run's measured overhead, kept as a calibration: resident through the step.
        if s.measured_overhead_bytes > 0 {
            self.t(s.measured_overhead_bytes, 1, What::Overhead);
        }
    }

    /// A Linear layer's weight, bias and LoRA A/B, then the norms its attention module registers
    /// right after it (q/k norms after o_proj, MLA's latent norms after their projections);
    /// gpt-oss's sinks, the attention module's own parameter, come before its q_proj.
    fn register_linear(&mut self, l: LinearShape, adapted: &[LinearShape], lins: &mut Vec<Lin>) {
        let ctx = self.ctx;
        let a = ctx.arch;
        let s = ctx.s;
        let aux = bytes(ctx.aux_weight);
        let r = s.lora_r;
        let ad = bytes(s.adapter_dtype);
        let (inf, outf) = (l.in_features as u64, l.out_features as u64);
        if l.name == "q_proj" && a.family.layout().attention == AttentionKind::Sinks {
            // gpt-oss's sinks are the attention module's own parameter: the model's parameters
            // reach the device module by module, each module's own before its children's.
            self.param(a.num_attention_heads, aux, 0, false, What::Weight);
        }
        let w = match (s.quant, ctx.linear_weight) {
            (Some(Quant::Int8), _) => self.param(inf * outf, 1, inf, false, What::Weight),
            // bitsandbytes stores a 4-bit weight packed as `[n / 2, 1]` bytes, viewed as its
            // storage dtype.
            (Some(_), _) => {
                if s.fsdp_4bit() {
                    // How FSDP holds 4-bit weights (sharded, or not flattened at all in uint8)
                    // is the full planner's to say.
                    extended!(self, "a 4-bit base under FSDP", (), ());
                }
                let qs = s.quant_storage;
                self.param(
                    qs.packed_elements(inf * outf),
                    qs.bytes(),
                    1,
                    false,
                    What::Weight,
                )
            }
            (None, Some(d)) => self.weight(inf * outf, bytes(d), inf),
            (None, None) => self.weight(inf * outf, aux, inf),
        };
        let bias = l.bias.then(|| {
            self.weight(outf, aux, 0);
            self.params.len() - 1
        });
        let lora = adapted.iter().any(|x| x.name == l.name).then(|| {
            // LoRA-FA: lora_A frozen (no gradient, no state; its input is not saved for it).
            let a = self.param(r * inf, ad, inf, !s.lora_fa, What::Trainable);
            let b = self.param(outf * r, ad, r, true, What::Trainable);
            // peft registers `lora_magnitude_vector` after lora_B (`adapter_layer_names`).
            let magnitude = s
                .use_dora
                .then(|| self.param(outf, ad, 0, true, What::Trainable));
            Adapter { a, b, magnitude }
        });
        let name = l.name;
        lins.push(Lin {
            shape: l,
            w,
            bias,
            lora,
        });
        match name {
            "o_proj" if a.qk_norm() == QkNorm::Whole => {
                let q = self.weight(a.q_dim() as u64, aux, 0);
                let k = self.weight(a.kv_dim() as u64, aux, 0);
                self.qk_norms.extend([q.x, k.x]);
            }
            // (Llama 4's L2 norm has no weight.)
            "o_proj" if !matches!(a.qk_norm(), QkNorm::None | QkNorm::L2AfterRotary) => {
                // q_norm, k_norm are registered in the attention module after o_proj.
                let q = self.weight(a.head_dim(), aux, 0);
                let k = self.weight(a.head_dim(), aux, 0);
                self.qk_norms.extend([q.x, k.x]);
            }
            "q_a_proj" => {
                let m = a.mla().map_or(0, |m| m.q_rank.unwrap_or(0));
                self.param(m as u64, aux, 0, false, What::Weight);
            }
            "kv_a_proj_with_mqa" => {
                let m = a.mla().map_or(0, |m| m.kv_rank);
                self.param(m as u64, aux, 0, false, What::Weight);
            }
            _ => {}
        }
    }

    /// An MoE block's parameters in module order: Mixtral, OLMoE, DeepSeek and gpt-oss register
    /// the router before the experts, Qwen3-MoE after; the experts' LoRA (peft ParamWrapper)
    /// follows their base parameters; DeepSeek's shared experts come last.
    fn register_moe(
        &mut self,
        shared: &[LinearShape],
        adapted: &[LinearShape],
        lins: &mut Vec<Lin>,
    ) -> MoeParams {
        let ctx = self.ctx;
        let a = ctx.arch;
        let s = ctx.s;
        let layout = a.moe_layout().expect("MoE layer of an MoE family");
        let ed = bytes(ctx.expert);
        let (e, i, h) = (
            a.num_experts() as u64,
            a.expert_width() as u64,
            a.hidden_size,
        );
        if s.experts_layout == crate::model::settings::ExpertsLayout::PerExpert {
            if ctx.sequential_experts() {
                return self.register_sequential_experts(shared, adapted, lins);
            }
            return self.register_per_expert(shared, adapted, lins);
        }
        let router_es = if layout.fp32_router { 4 } else { ed };
        let router = |p: &mut Self| {
            let w = p.param(e * h, router_es, h, false, What::Weight);
            let b = layout
                .clamped_glu
                .then(|| p.param(e, router_es, 0, false, What::Weight));
            (w, b)
        };
        let router_first = a.moe_layout().is_none_or(|m| m.router_first);
        let (mut rw, mut rb) = (None, None);
        if router_first {
            let (w, b) = router(self);
            rw = Some(w);
            rb = b;
        }
        self.tp.block = Block::Experts;
        let gate_up = self.param(e * 2 * i * h, ed, h, false, What::Weight);
        let gate_up_bias = layout
            .clamped_glu
            .then(|| self.param(e * 2 * i, ed, 2 * i, false, What::Weight));
        let down = self.param(e * h * i, ed, i, false, What::Weight);
        let down_bias = layout
            .clamped_glu
            .then(|| self.param(e * h, ed, h, false, What::Weight));
        self.tp.block = Block::Other;
        let ad = bytes(s.adapter_dtype);
        let mut lora = vec![];
        for l in ctx.expert_loras() {
            let (o, n) = crate::model::ctx::expert_param_shape(ctx, l.param);
            let (o, n, r) = (o as u64, n as u64, l.rank);
            let la = self.param(r * e * n, ad, n, true, What::Trainable);
            let lb = self.param(o * r * e, ad, r * e, true, What::Trainable);
            lora.push((l.param, la, lb));
        }
        if !router_first {
            let (w, b) = router(self);
            rw = Some(w);
            rb = b;
        }
        for l in shared {
            self.register_linear(*l, adapted, lins);
        }
        let _ = (rb, gate_up_bias, down_bias);
        MoeParams {
            router: rw.expect("router registered"),
            experts: Experts::Fused(FusedExperts {
                gate_up,
                down,
                lora,
            }),
        }
    }

    /// transformers 4's MoE block (`MixtralSparseMoeBlock` and its kin): the router `gate`, then
    /// each expert's MLP (`gate_proj`/`w1`, `up_proj`/`w3`, `down_proj`/`w2`) as `nn.Linear`
    /// layers, which 4-bit loading quantizes; no adapter on them (the plan refuses MLP targets
    /// in this layout).
    fn register_per_expert(
        &mut self,
        shared: &[LinearShape],
        adapted: &[LinearShape],
        lins: &mut Vec<Lin>,
    ) -> MoeParams {
        let a = self.ctx.arch;
        let (e, h) = (a.num_experts(), u128::from(a.hidden_size));
        let router = LinearShape {
            name: "gate",
            in_features: h,
            out_features: e,
            selected_by: &[],
            bias: false,
        };
        let mut routers = vec![];
        self.register_linear(router, &[], &mut routers);
        let experts = self.register_expert_mlps(&[]);
        for l in shared {
            self.register_linear(*l, adapted, lins);
        }
        let router = routers.pop().expect("router registered");
        MoeParams {
            router: router.w,
            experts: Experts::PerExpert(PerExpert {
                router: Some(router),
                experts,
            }),
        }
    }

    /// Llama 4's MoE block loaded from a checkpoint saved quantized: `experts` rebuilt as
    /// `SequentialLlama4TextExperts` (transformers' `quantizers/base.py:383-414`), one
    /// `Llama4TextMLP` per expert whose Linear layers are quantized and, for peft's MLP names,
    /// adapted; then the router (16-bit: bitsandbytes replaces only modules whose type is
    /// `nn.Linear`) and the shared expert.
    fn register_sequential_experts(
        &mut self,
        shared: &[LinearShape],
        adapted: &[LinearShape],
        lins: &mut Vec<Lin>,
    ) -> MoeParams {
        let ctx = self.ctx;
        let a = ctx.arch;
        let experts = self.register_expert_mlps(adapted);
        let n = a.num_experts() as u64 * a.hidden_size;
        let router = self.param(n, bytes(ctx.aux_weight), a.hidden_size, false, What::Weight);
        for l in shared {
            self.register_linear(*l, adapted, lins);
        }
        MoeParams {
            router,
            experts: Experts::PerExpert(PerExpert {
                router: None,
                experts,
            }),
        }
    }

    /// Each routed expert's MLP as Linear layers (`gate_proj`, `up_proj`, `down_proj`) in module
    /// order, adapted where `adapted` names them.
    fn register_expert_mlps(&mut self, adapted: &[LinearShape]) -> Vec<[Lin; 3]> {
        let a = self.ctx.arch;
        self.tp.block = Block::Experts;
        let mut experts = vec![];
        for _ in 0..a.num_experts() {
            let mut mlp = vec![];
            for l in a.expert_linears() {
                self.register_linear(l, adapted, &mut mlp);
            }
            let three: [Lin; 3] = mlp.try_into().expect("three Linear layers");
            experts.push(three);
        }
        self.tp.block = Block::Other;
        experts
    }

    /// bitsandbytes quant state of every 4-bit Linear: absmax (uint8 with double quant), the
    /// nested fp32 absmax, and the code tables.
    fn quant_state(&mut self) {
        let ctx = self.ctx;
        for li in 0..ctx.arch.num_hidden_layers {
            self.tp.exec = li as u32;
            let a = ctx.arch;
            let kind = a.layer_kind(li);
            let mut ns = module_order(a, kind);
            // The per-expert layout: its router's (where quantized) and experts' Linear layers
            // (the full planner's), before what Llama 4's MoE block registers after its routed
            // experts (the shared expert), as the parameters are registered.
            if let Some(Some(MoeParams {
                experts: Experts::PerExpert(pe),
                ..
            })) = self
                .moe
                .get(li as usize)
                .filter(|_| crate::model::extended::EXTENDED)
            {
                let all_experts = a.moe_layout().is_some_and(|m| m.all_experts);
                let (block, rest): (Vec<LinearShape>, Vec<LinearShape>) =
                    ns.into_iter().partition(|l| all_experts && in_moe_block(l));
                ns = rest;
                ns.extend(
                    pe.router
                        .iter()
                        .chain(pe.experts.iter().flatten())
                        .map(|l| l.shape),
                );
                ns.extend(block);
            }
            let layer = ns
                .into_iter()
                .map(|l| {
                    let (inf, outf) = (l.in_features as u64, l.out_features as u64);
                    (l.name, self.new_quant_state(inf, outf))
                })
                .collect();
            self.qstates.push(layer);
        }
        self.tp.exec = NO_LAYER;
    }

    /// The bitsandbytes quantization state of a quantized `[outf, inf]` weight: for 4 bits, one
    /// absmax per 64-value block and the code tables; for LLM.int8, `SCB`, one fp32 scale per
    /// output row (`int8_vectorwise_quant`'s row statistics of the fp16 weight,
    /// bitsandbytes/nn/modules.py:737-746).
    fn new_quant_state(&mut self, inf: u64, outf: u64) -> Vec<X> {
        if self.ctx.s.quant == Some(Quant::Int8) {
            return vec![self.t(outf, 4, What::QuantState)];
        }
        let blocks = (inf * outf).div_ceil(64);
        if self.ctx.s.double_quant {
            // absmax (uint8), code, offset, nested absmax, nested code
            vec![
                self.t(blocks, 1, What::QuantState),
                self.t(16, 4, What::QuantState),
                self.t(1, 4, What::QuantState),
                self.t(blocks.div_ceil(256), 4, What::QuantState),
                self.t(256, 4, What::QuantState),
            ]
        } else {
            vec![
                self.t(blocks, 4, What::QuantState),
                self.t(16, 4, What::QuantState),
            ]
        }
    }

    /// Input ids, labels and (padded batches) the attention mask, alive through the run; no
    /// op reads their values.
    fn inputs(&mut self) {
        let n = self.tokens();
        let images = self.ctx.visual.is_some();
        if images {
            extended!(self, "images", self.vision_inputs_before(), ());
        }
        if crate::model::extended::EXTENDED && self.ctx.s.neat_packing {
            extended!(self, "packing", self.neat_inputs(), ());
        } else {
            self.t(n, 8, What::Input);
            self.t(n, 8, What::Input);
        }
        if self.ctx.s.padded_mask {
            self.t(n, 8, What::Input);
        }
        // (packing is the full planner's, `extended::needed`)
        if crate::model::extended::EXTENDED && self.ctx.s.packing {
            // `DataCollatorWithFlattening` (transformers `data_collator.py:1261-1380`): input
            // ids, labels, then position ids, each one row of every token.
            extended!(
                self,
                "packing",
                self.packed_pos = Some(self.t(n, 8, What::Input)),
                ()
            );
        }
        if images {
            extended!(self, "images", self.vision_inputs_after(), ());
        }
    }

    // -------------------------------------------------------------- ops

    fn drop(&mut self, x: X) {
        self.tp.drop_x(x);
    }

    /// `x.to(dtype)`: a copy when the dtype changes.
    fn cast(&mut self, x: X, es: u64, what: What) -> X {
        if x.es == es {
            self.tp.keep_local(x.t);
            return x;
        }
        let mut y = self.t(x.n, es, what);
        y.g = self.tp.node(Op::Cast, x.n, es, &[Self::edge(&x)], &[]);
        y
    }

    /// Elementwise product of `a` and `b` (output `n` elements in `es`), saving what the
    /// derivative needs.
    fn mul(&mut self, a: X, b: X, n: u64, es: u64, what: What) -> X {
        let mut y = self.t(n, es, what);
        let mut ea = Self::edge(&a);
        let mut eb = Self::edge(&b);
        if a.n < n {
            ea.sum_to = a.n;
        }
        if b.n < n {
            eb.sum_to = b.n;
        }
        // MulBackward0 saves `other` for self's gradient and `self` for other's (release order:
        // other_, self_).
        let mut saved = vec![];
        if a.grad() {
            saved.push(b.t);
        }
        if b.grad() {
            saved.push(a.t);
        }
        let op = if a.grad() && b.grad() {
            Op::Mul
        } else {
            Op::MulConst
        };
        let ins = if a.grad() { [ea, eb] } else { [eb, ea] };
        y.g = self.tp.node(op, n, es, &ins, &saved);
        y
    }

    /// Product with a scalar or a constant tensor.
    fn mul_const(&mut self, a: X, what: What) -> X {
        let mut y = self.t(a.n, a.es, what);
        y.g = self
            .tp
            .node(Op::MulConst, a.n, a.es, &[Self::edge(&a)], &[]);
        y
    }

    fn add(&mut self, a: X, b: X, what: What) -> X {
        let es = a.es.max(b.es);
        let n = a.n.max(b.n);
        let mut y = self.t(n, es, what);
        y.g = self
            .tp
            .node(Op::Add, n, es, &[Self::edge(&a), Self::edge(&b)], &[]);
        y
    }

    fn unary(&mut self, a: X, out_es: u64, what: What, save_in: bool, save_out: bool) -> X {
        let mut y = self.t(a.n, out_es, what);
        let mut saved = vec![];
        if save_in {
            saved.push(a.t);
        }
        if save_out {
            saved.push(y.t);
        }
        y.g = self
            .tp
            .node(Op::Unary, a.n, out_es, &[Self::edge(&a)], &saved);
        y
    }

    /// `a + b` or `a − b` (`op`) over `n` elements, either side broadcast when smaller (its
    /// gradient summed down to its size); neither is saved, and `a − b`'s backward negates
    /// `b`'s gradient.
    pub(super) fn broadcast(&mut self, a: X, b: X, n: u64, op: Op, what: What) -> X {
        let mut y = self.t(n, a.es.max(b.es), what);
        let mut eb = Self::edge(&b);
        if b.n < n {
            eb.sum_to = b.n;
        }
        let mut ea = Self::edge(&a);
        if a.n < n {
            ea.sum_to = a.n;
        }
        y.g = self.tp.node(op, n, y.es, &[ea, eb], &[]);
        y
    }

    /// A copy of `x` into a new tensor (`clone`, `contiguous()`), whose backward hands the
    /// gradient on.
    fn copy_of(&mut self, x: X, what: What) -> X {
        let mut c = self.t(x.n, x.es, what);
        c.g = self.tp.node(Op::Pass, x.n, x.es, &[Self::edge(&x)], &[]);
        c
    }

    /// Eager attention's `attn_output.transpose(1, 2).contiguous()`: a copy, whose gradient is a
    /// transposed view, which the bmm's backward copies where it cannot view it (more than one
    /// sequence).
    fn eager_output(&mut self, o: X) -> X {
        let back = if self.ctx.eager_output_grad_copies() {
            Op::ViewClone
        } else {
            Op::Pass
        };
        let mut c = self.t(o.n, o.es, What::Attention);
        c.g = self.tp.node(back, o.n, o.es, &[Self::edge(&o)], &[]);
        c
    }

    /// An operand of eager attention's matmul: copied where matmul cannot view it (`copy`; the
    /// bmm saves the copy), else the tensor itself.
    fn matmul_operand(&mut self, x: X, copy: bool) -> X {
        if copy {
            self.copy_of(x, What::Attention)
        } else {
            self.tp.keep_local(x.t);
            x
        }
    }

    /// `torch.matmul(x, W.t())` with a weight: frozen (`w.g == No`) or trainable.
    fn linear(&mut self, x: X, w: X, out_n: u64, es: u64, what: What) -> X {
        self.linear_with(x, w, None, out_n, es, what)
    }

    /// `F.linear(x, w, bias)`: with a bias that takes a gradient (full and freeze tuning), an
    /// `addmm`, whose backward orders the gradients otherwise and sums the bias's; else the
    /// matrix product.
    fn linear_with(&mut self, x: X, w: X, bias: Option<X>, out_n: u64, es: u64, what: What) -> X {
        let mut y = self.t(out_n, es, what);
        self.tp.gemm(false);
        // MmBackward0 (AddmmBackward0 alike) saves mat2 (the weight) for the input's gradient
        // and self (the input) for the weight's; released as mat2_, self_.
        let mut saved = vec![];
        if x.grad() {
            saved.push(w.t);
        }
        if w.grad() {
            saved.push(x.t);
        }
        let ew = Edge {
            to: w.g,
            n: w.n,
            es,
            sum_to: 0,
        };
        let (w_n, ex) = (w.n, Self::edge(&x));
        y.g = match bias.filter(X::grad) {
            Some(b) => {
                let eb = Edge {
                    sum_to: b.n,
                    ..Self::edge(&b)
                };
                self.tp.node(
                    Op::Addmm { w_n, w_es: es },
                    out_n,
                    es,
                    &[ex, ew, eb],
                    &saved,
                )
            }
            None => self
                .tp
                .node(Op::Mm { w_n, w_es: es }, out_n, es, &[ex, ew], &saved),
        };
        y
    }

    /// `F.linear(x, w)`, under autocast with its operands cast to the autocast dtype first.
    fn matmul(&mut self, x: X, w: X, out_n: u64, what: What) -> X {
        self.matmul_with(x, w, None, out_n, what)
    }

    /// [`Prog::matmul`] with the layer's bias (see [`Prog::linear_with`]), which autocast casts
    /// like the weight.
    fn matmul_with(&mut self, x: X, w: X, bias: Option<X>, out_n: u64, what: What) -> X {
        match self.ctx.s.autocast {
            None => self.linear_with(x, w, bias, out_n, x.es, what),
            Some(ac) => {
                let es = bytes(ac);
                // The autocast wrapper casts `linear`'s arguments last to first (the bias, the
                // weight, then the input: as measured).
                let bc = bias.map(|b| self.autocast_leaf(b, es));
                let wc = self.autocast_leaf(w, es);
                let xc = self.cast(x, es, What::WeightCopy);
                let y = self.linear_with(xc, wc, bc, out_n, es, what);
                self.drop(xc);
                self.drop(wc);
                if let Some(b) = bc {
                    self.drop(b);
                }
                y
            }
        }
    }

    /// A parameter as autocast hands it to an op computing in `es`: cast, or its cast cached in
    /// this autocast region.
    fn autocast_leaf(&mut self, w: X, es: u64) -> X {
        match self.ac_cache.iter().find(|c| c.0 == w.t).map(|c| c.1) {
            // A leaf cast earlier in the same autocast region (DoRA uses lora_A twice).
            Some(c) => {
                self.tp.keep_local(c.t);
                c
            }
            None => {
                // Autocast caches the casts of trainable fp32 leaves until the context
                // exits, under no_grad too (`cached_cast`,
                // aten/src/ATen/autocast_mode.cpp: only inference mode is left out),
                // and such a cast keeps its graph (a later op with grad reuses it and
                // its gradient reaches the leaf: checked on PyTorch 2.15); not the
                // reference copy's frozen weights.
                let cached = w.grad() && !self.ref_copy;
                let mode = if cached && self.tp.mode == Mode::NoGrad {
                    std::mem::replace(&mut self.tp.mode, Mode::Grad)
                } else {
                    self.tp.mode
                };
                let wc = self.cast(w, es, What::WeightCopy);
                self.tp.mode = mode;
                if cached && wc.t != w.t {
                    self.tp.keep_local(wc.t);
                    self.ac_cache.push((w.t, wc));
                }
                wc
            }
        }
    }

    /// A q or k norm over heads of `hd` before their transpose: transformers' RMSNorm, or with
    /// `liger_copies_grad` Liger's norm that makes a new input gradient (Qwen3.5's), copying a
    /// strided input (`copy_in`) and, with several heads, the transposed incoming gradient.
    #[cfg_attr(not(feature = "extended-ops"), allow(unused_variables))]
    fn head_norm(
        &mut self,
        x: X,
        hd: u64,
        liger_copies_grad: bool,
        copy_in: bool,
        many: bool,
    ) -> X {
        if !liger_copies_grad {
            return self.rmsnorm(x, hd);
        }
        extended!(
            self,
            "Liger-Kernel's kernels",
            self.liger_rmsnorm_strided(x, hd, copy_in, many),
            x
        )
    }

    /// RMSNorm of a non-contiguous view (DeepSeek's latent part of the compressed kv, split
    /// from its rotary part): transformers' norm reads it strided (its fp32 cast is a new
    /// tensor anyway); Liger's `ensure_contiguous` copies it first and saves the copy.
    fn rmsnorm_of_view(&mut self, x: X, width: u64) -> X {
        if self.ctx.s.liger.rms_norm {
            return extended!(
                self,
                "Liger-Kernel's kernels",
                self.liger_rmsnorm_strided(x, width, true, false),
                x
            );
        }
        self.rmsnorm(x, width)
    }

    /// RMSNorm over rows of `width`: llama's (`hidden.to(fp32)`, variance, rsqrt, cast back,
    /// times the weight) or Gemma's (`x * rsqrt(mean(x²) + eps)` in fp32, times `1 + weight`).
    fn rmsnorm(&mut self, x: X, width: u64) -> X {
        if self.ctx.s.liger.rms_norm {
            return extended!(
                self,
                "Liger-Kernel's kernels",
                self.liger_rmsnorm(x, width),
                x
            );
        }
        if crate::model::extended::EXTENDED
            && self.ctx.arch.family.layout().norm == NormKind::OneExpression
        {
            // Llama 4's: its q/k L2 norm (no local but the result), then `output * weight`; a
            // trained weight saves the cast output.
            let c = self.l2_norm(x, width);
            let out = match self.norm_weight(width) {
                Some(w) => self.mul(c, w, c.n, c.es, What::Hidden),
                None => self.mul_const(c, What::Hidden),
            };
            self.drop(c);
            return out;
        }
        let rows = x.n / width;
        let gemma = self.ctx.arch.family.layout().norm == NormKind::Gemma;
        let hs = self.cast(x, 4, What::Norm);
        let p = {
            let mut y = self.t(hs.n, 4, What::Norm);
            y.g = self
                .tp
                .node(Op::PowLike, hs.n, 4, &[Self::edge(&hs)], &[hs.t]);
            y
        };
        let var = {
            let mut y = self.t(rows, 4, What::Norm);
            y.g = self.tp.node(Op::Mean, rows, 4, &[Self::edge(&p)], &[]);
            y
        };
        self.drop(p);
        let eps = {
            let mut y = self.t(rows, 4, What::Norm);
            y.g = self.tp.node(Op::Pass, rows, 4, &[Self::edge(&var)], &[]);
            y
        };
        if gemma {
            self.drop(var);
        }
        let rs = {
            let mut y = self.t(rows, 4, What::Norm);
            let g = self
                .tp
                .node(Op::PowLike, rows, 4, &[Self::edge(&eps)], &[y.t]);
            y.g = g;
            y
        };
        self.drop(eps);
        let normed = self.mul(hs, rs, hs.n, 4, What::Norm);
        self.drop(rs);
        if gemma {
            // `self._norm(x.float())`: the fp32 copy dies with `_norm`.
            self.drop(hs);
            // output * (1.0 + self.weight.float()), then .type_as(x)
            let trained = self.norm_weight(width);
            let wf = match trained {
                Some(w) => self.cast(w, 4, What::Norm),
                None => self.t(width, 4, What::Norm),
            };
            let mut w1 = self.t(width, 4, What::Norm);
            if trained.is_some() {
                w1.g = self.tp.node(Op::Pass, width, 4, &[Self::edge(&wf)], &[]);
            }
            self.drop(wf);
            let o = if trained.is_some() {
                self.mul(normed, w1, normed.n, 4, What::Norm)
            } else {
                let mut y = self.t(normed.n, 4, What::Norm);
                y.g = self
                    .tp
                    .node(Op::MulConst, normed.n, 4, &[Self::edge(&normed)], &[w1.t]);
                y
            };
            self.drop(w1);
            self.drop(normed);
            let o2 = self.cast(o, x.es, What::Hidden);
            self.drop(o);
            return o2;
        }
        self.drop(hs);
        if self.ctx.arch.family.layout().norm == NormKind::ProductInFp32 {
            // gpt-oss: `(self.weight * hidden_states).to(input_dtype)`: the product in fp32.
            let p = self.mul_const(normed, What::Norm);
            let out = self.cast(p, x.es, What::Hidden);
            self.drop(p);
            self.drop(normed);
            self.drop(var);
            return out;
        }
        let c = self.cast(normed, x.es, What::Hidden);
        // `self.weight * hidden_states.to(input_dtype)`: a trained weight saves the cast input.
        let out = match self.norm_weight(width) {
            Some(w) => self.mul(w, c, c.n, c.es, What::Hidden),
            None => self.mul_const(c, What::Hidden),
        };
        self.drop(c);
        self.drop(normed);
        self.drop(var);
        out
    }

    /// Gemma 3's q or k norm, run on the transposed head view `x` (`many`: more than one head,
    /// so the view is strided): Liger's norm copies such an input, and its incoming gradient
    /// when Liger's RoPE hands it back (`liger_rope`); transformers' norm is [`Self::rmsnorm`].
    #[cfg_attr(not(feature = "extended-ops"), allow(unused_variables))]
    fn head_norm_after_transpose(&mut self, x: X, hd: u64, many: bool, liger_rope: bool) -> X {
        if self.ctx.s.liger.rms_norm {
            extended!(
                self,
                "Liger-Kernel's kernels",
                self.liger_rmsnorm_strided(x, hd, many, liger_rope && many),
                x
            )
        } else {
            self.rmsnorm(x, hd)
        }
    }

    /// Under full fine-tuning, the trainable weight of the norm the forward runs next (of
    /// `width` values).
    fn norm_weight(&mut self, width: u64) -> Option<X> {
        let w = self.norm_queue.pop()?;
        debug_assert_eq!(w.n, width, "norm weights out of order");
        Some(w)
    }

    /// A Linear layer with its LoRA adapter (peft's `Linear.forward`).
    fn lora_linear(&mut self, x: X, lin: &Lin) -> X {
        let ctx = self.ctx;
        let s = ctx.s;
        let tokens = x.n / lin.shape.in_features as u64;
        let out_n = tokens * lin.shape.out_features as u64;
        let in_n = x.n;
        // A Linear no adapter wraps is bitsandbytes' own layer: no peft clone of its output.
        let mut result = if lin.lora.is_some() {
            self.base_linear(x, lin, out_n)
        } else {
            self.plain_linear(x, lin, out_n, What::LinearOut)
        };
        if self.strided_grad {
            let c = self.view_clone(result);
            self.drop(result);
            result = c;
        }
        let mod_es = result.es;
        let Some(adapter) = lin.lora.filter(|_| !self.adapters_off) else {
            return result;
        };
        let (la, lb) = (adapter.a, adapter.b);
        // peft casts the input to lora_A's dtype (`_cast_input_dtype`): the adapter dtype,
        // FSDP2's param_dtype for its unsharded copy, or under FSDP1 the dtype of the view the
        // weight is before its unit's forward (`Prog::fsdp1_lora_cast_es`).
        let ad = self.fsdp1_lora_cast_es(la.x).unwrap_or(la.x.es);
        // peft's bnb layers skip the input cast under autocast.
        let xc = if s.quant.is_some() && s.autocast.is_some() {
            self.tp.keep_local(x.t);
            x
        } else {
            self.cast(x, ad, What::LoraCast)
        };
        let d = if s.dropout_run() > 0.0 {
            // CUDA's native_dropout makes the mask first; the harness's fake kernel the output.
            let (mut y, mask) = if self.tp.emulated {
                let y = self.t(in_n, xc.es, What::Dropout);
                (y, self.t(in_n, 1, What::DropoutMask))
            } else {
                let mask = self.t(in_n, 1, What::DropoutMask);
                (self.t(in_n, xc.es, What::Dropout), mask)
            };
            y.g = self
                .tp
                .node(Op::Unary, in_n, xc.es, &[Self::edge(&xc)], &[mask.t]);
            self.drop(mask);
            y
        } else if s.lora_dropout > 0.0 && adapter.magnitude.is_some() {
            // A dropout disabled to p = 0 (a preference trainer's `disable_dropout`) returns its
            // input: DoRA's variant holds it under a second name.
            self.tp.keep_local(xc.t);
            xc
        } else {
            xc
        };
        if let Some(m) = adapter.magnitude {
            return extended!(
                self,
                "DoRA",
                self.dora_linear(result, xc, d, lin, (la, lb, m)),
                {
                    let _ = m;
                    result
                }
            );
        }
        let r = s.lora_r;
        self.fsdp1_lora_pre_forward(la.x);
        let a_out = self.matmul(d, la.x, tokens * r, What::Lora);
        self.fsdp1_lora_post_forward(la.x);
        if s.dropout_run() > 0.0 {
            self.drop(d);
        }
        self.fsdp1_lora_pre_forward(lb.x);
        let mut b_out = self.matmul(a_out, lb.x, out_n, What::Lora);
        self.fsdp1_lora_post_forward(lb.x);
        self.drop(a_out);
        if self.strided_grad {
            let c = self.view_clone(b_out);
            self.drop(b_out);
            b_out = c;
        }
        let mut scaled = self.mul_const(b_out, What::Lora);
        self.drop(b_out);
        if s.quant.is_some() && s.autocast.is_none() && scaled.es != result.es {
            // peft's bnb layer outside autocast: `output = output.to(expected_dtype)`.
            let c = self.cast(scaled, result.es, What::Lora);
            self.drop(scaled);
            scaled = c;
        }
        let sum = self.add(result, scaled, What::Lora);
        if s.quant.is_some() {
            // peft's bnb layer: `result = result + output` (no cast back).
            self.drop(result);
            self.drop(scaled);
            self.drop(xc);
            return sum;
        }
        self.drop(scaled);
        self.drop(result);
        let out = self.cast(sum, mod_es, What::LinearOut);
        self.drop(sum);
        self.drop(xc);
        out
    }

    /// The frozen base layer of a Linear (bf16/fp32 weight, or bitsandbytes 4-bit).
    fn base_linear(&mut self, x: X, lin: &Lin, out_n: u64) -> X {
        match self.ctx.s.quant {
            None => {
                let bias = lin.bias.map(|i| self.params[i].x);
                return self.matmul_with(x, lin.w.x, bias, out_n, What::LinearOut);
            }
            // peft's 8-bit layer takes `self.base_layer(x)` as it is (no clone).
            Some(Quant::Int8) => return self.linear8bit(x, lin, out_n, What::LinearOut),
            Some(_) => {}
        }
        let o = self.linear4bit(x, lin, out_n, What::LinearOut);
        if self.adapters_off {
            // peft's disabled adapters: `self.base_layer(x)`, no defensive clone.
            return o;
        }
        // peft's `result.clone()`.
        let c = self.copy_of(o, What::LinearOut);
        self.drop(o);
        c
    }

    /// A Linear layer no adapter wraps: `F.linear`, or bitsandbytes' `Linear4bit` when the
    /// model is loaded in 4 bits.
    fn plain_linear(&mut self, x: X, lin: &Lin, out_n: u64, what: What) -> X {
        match self.ctx.s.quant {
            None => {
                let bias = lin.bias.map(|i| self.params[i].x);
                self.matmul_with(x, lin.w.x, bias, out_n, what)
            }
            Some(Quant::Int8) => self.linear8bit(x, lin, out_n, what),
            Some(_) => self.linear4bit(x, lin, out_n, what),
        }
    }

    /// bitsandbytes' `Linear8bitLt` (`MatMul8bitLt.forward`, bitsandbytes/autograd/_functions.py:
    /// 101-199, with transformers' default `llm_int8_threshold` 6.0 and int8 weights): the input
    /// cast to fp16 and quantized row-wise (`int8_vectorwise_quant`, backends/cuda/ops.py:213-254:
    /// row scales, int8 rows, and the outlier test `|A| >= 6` with its `any()`), the outlier columns
    /// (none found: see `Settings::quant`'s note) kept as `state.idx`, the int8 GEMM's int32
    /// product dequantized to fp16 and cast to the input's dtype (backends/default/ops.py:64-119,
    /// cuda/ops.py:171-210). The input itself is kept for backward (`ctx.tensors`), which
    /// dequantizes the whole weight ([`Op::Dequant8`]).
    fn linear8bit(&mut self, x: X, lin: &Lin, out_n: u64, what: What) -> X {
        let s = self.ctx.s;
        // `self.bias.data = self.bias.data.to(x.dtype)` (bitsandbytes/nn/modules.py:1185-1187).
        self.recast_bias(lin, x.es);
        let tokens = x.n / lin.shape.in_features as u64;
        let fp16 = x.es == 2 && s.autocast.unwrap_or(s.dtype) == Dtype::Fp16;
        let half = (!fp16).then(|| self.t(x.n, 2, What::Int8Quant));
        let row_stats = self.t(tokens, 4, What::Int8Quant);
        let rows = self.t(x.n, 1, What::Int8Quant);
        let abs = self.t(x.n, 2, What::Int8Quant);
        let outliers = self.t(x.n, 1, What::Int8Quant);
        self.drop(abs);
        let any = self.t(1, 1, What::Int8Quant);
        self.drop(any);
        let cols = self.t(0, 8, What::Int8Quant);
        self.drop(outliers);
        if let Some(h) = half {
            self.drop(h);
        }
        // `state.idx = outlier_cols`: the previous call's are let go (a recomputation's stay, as
        // the state keeps them past it; past a recomputation's early stop no call runs).
        if !self.tp.stopped {
            self.tp.keep(cols.t);
            match self.int8_idx.iter_mut().find(|e| e.0 == lin.w.x.t) {
                Some(e) => {
                    let old = std::mem::replace(&mut e.1, cols);
                    self.tp.drop_t(old.t);
                }
                None => self.int8_idx.push((lin.w.x.t, cols)),
            }
        }
        // `int8_mixed_scaled_mm`: no outlier column, so `subA` is empty.
        let sub_a = self.t(0, x.es, What::Int8Quant);
        let product = self.t(out_n, 4, What::Int8Quant);
        let dequant = self.t(out_n, 2, What::Int8Quant);
        let mut out = if fp16 {
            dequant
        } else {
            let o = self.t(out_n, x.es, what);
            self.drop(dequant);
            o
        };
        self.drop(product);
        let n = (lin.shape.in_features * lin.shape.out_features) as u64;
        out.g = self.tp.node(
            Op::Dequant8 {
                w_n: n,
                rows: lin.shape.out_features as u64,
            },
            out_n,
            x.es,
            &[Self::edge(&x)],
            &[],
        );
        if out.g != G::No {
            // `ctx.tensors = (CAt, subA, A)`, `ctx.tensor_states = (SCAt, state.idx)`.
            // A recomputation's graph is let go when it ends, with its Python frames' locals.
            for held in [x, sub_a, cols] {
                self.tp.keep_local(held.t);
                if self.tp.mode != Mode::Recompute {
                    self.graph_held.push(held);
                }
            }
        }
        self.drop(sub_a);
        self.drop(cols);
        self.drop(rows);
        self.drop(row_stats);
        out
    }

    /// bnb Linear4bit: x.to(compute_dtype), gemm_4bit (dequantizing the weight, again in
    /// backward), out.to(input dtype).
    fn linear4bit(&mut self, x: X, lin: &Lin, out_n: u64, what: What) -> X {
        let ce = bytes(self.ctx.s.dtype);
        let xc = self.cast(x, ce, What::LoraCast);
        // `bias.data = bias.data.to(x.dtype)` (bitsandbytes/nn/modules.py:631-634): a bias
        // prepare_model_for_kbit_training made fp32 becomes the compute dtype for good at its
        // first call.
        self.recast_bias(lin, ce);
        let n = (lin.shape.in_features * lin.shape.out_features) as u64;
        let absmax_n = self.nested_absmax(n);
        let mut g = self.t(out_n, ce, what);
        g.g = self.tp.node(
            Op::Dequant4 { w_n: n, absmax_n },
            out_n,
            ce,
            &[Self::edge(&xc)],
            &[],
        );
        let o = self.cast(g, x.es, what);
        self.drop(g);
        self.drop(xc);
        o
    }

    /// bitsandbytes' Linear layers cast their bias to the dtype they compute in at their first
    /// call, for good: a new storage in `es` replaces the parameter's (its graph kept).
    fn recast_bias(&mut self, lin: &Lin, es: u64) {
        let Some(i) = lin.bias else { return };
        let b = self.params[i].x;
        if b.es != es {
            let mut nb = self.t(b.n, es, What::Weight);
            nb.g = b.g;
            self.params[i].x = nb;
            self.drop(b);
        }
    }

    /// The fp32 absmax values bitsandbytes dequantizes first for a 4-bit weight of `n` values
    /// with double quantization (one per 64-value block), else none.
    fn nested_absmax(&self, n: u64) -> u64 {
        if self.ctx.s.double_quant {
            n.div_ceil(64)
        } else {
            0
        }
    }

    /// `q * cos + rotate_half(q) * sin`, with the family's copy of a partial rotary's `cat`.
    fn rope(&mut self, q: X, cos: X, sin: X) -> X {
        let out = self.rotate(q, cos, sin);
        if self.ctx.arch.family.layout().rotary_cat {
            // Partial rotary: cat([rotated, pass-through]) copies even when nothing passes.
            let c = self.copy_of(out, What::Rope);
            self.drop(out);
            return c;
        }
        out
    }

    /// `q * cos + rotate_half(q) * sin` into a new tensor (`q` is left to the caller).
    fn rotate(&mut self, q: X, cos: X, sin: X) -> X {
        let half = q.n / 2;
        let pe = q.es.max(cos.es);
        let m1 = {
            let mut y = self.t(q.n, pe, What::Rope);
            y.g = self
                .tp
                .node(Op::MulConst, q.n, pe, &[Self::edge(&q)], &[cos.t]);
            y
        };
        let slice =
            |p: &mut Self| -> G { p.tp.node(Op::Slice, half, q.es, &[Self::edge(&q)], &[]) };
        let x1g = slice(self);
        let x2g = slice(self);
        let neg = {
            let mut y = self.t(half, q.es, What::Rope);
            let e = Edge {
                to: x2g,
                n: half,
                es: q.es,
                sum_to: 0,
            };
            y.g = self.tp.node(Op::Unary, half, q.es, &[e], &[]);
            y
        };
        let cat = {
            let mut y = self.t(q.n, q.es, What::Rope);
            let e1 = Edge {
                to: x1g,
                n: half,
                es: q.es,
                sum_to: 0,
            };
            y.g = self
                .tp
                .node(Op::Split, q.n, q.es, &[Self::edge(&neg), e1], &[]);
            y
        };
        self.drop(neg);
        let m2 = {
            let mut y = self.t(q.n, pe, What::Rope);
            y.g = self
                .tp
                .node(Op::MulConst, q.n, pe, &[Self::edge(&cat)], &[sin.t]);
            y
        };
        self.drop(cat);
        let out = self.add(m1, m2, What::Rope);
        self.drop(m1);
        self.drop(m2);
        out
    }

    /// A view + transpose whose backward `reshape` must copy.
    pub(super) fn view_clone(&mut self, x: X) -> X {
        let mut y = x;
        self.tp.keep_local(x.t);
        y.g = self
            .tp
            .node(Op::ViewClone, x.n, x.es, &[Self::edge(&x)], &[]);
        y
    }

    /// Self-attention; returns the output and the eager attention probabilities (which the
    /// decoder layer keeps in `_` until it returns).
    fn attention(
        &mut self,
        x: X,
        lins: &[Lin],
        (cos, sin): (X, X),
        mask: Option<X>,
        li: usize,
    ) -> (X, Option<X>) {
        // (only Llama 4's attention, an extended op, reads the layer's index)
        #[cfg(not(feature = "extended-ops"))]
        let _ = li;
        match self.ctx.arch.family.layout().attention {
            AttentionKind::RotaryOrNope => {
                return extended!(
                    self,
                    "Llama 4's attention",
                    self.rotary_or_nope_attention(x, lins, cos, mask, li),
                    (x, None)
                )
            }
            AttentionKind::Latent => {
                return extended!(
                    self,
                    "latent attention",
                    self.latent_attention(x, lins, cos, mask),
                    (x, None)
                )
            }
            AttentionKind::Sinks => {
                return extended!(
                    self,
                    "attention sinks",
                    self.sink_attention(x, lins, cos, sin, mask),
                    (x, None)
                )
            }
            AttentionKind::Standard => {}
        }
        let ctx = self.ctx;
        let a = ctx.arch;
        let s = ctx.s;
        let (b, sq) = (s.sequences(), s.seq);
        let heads = a.num_attention_heads;
        let hd = a.head_dim();
        let ad = bytes(ctx.attn);
        let eager = s.attn_impl == AttnImpl::Eager;
        // Qwen3 norms q and k right after each projection; Gemma 3 after all three.
        // OLMoE norms the whole projection before the view into heads.
        let qk = a.qk_norm();
        let whole_norm = qk == QkNorm::Whole;
        let qk_norm = qk == QkNorm::PerHead;
        let late_norm = qk == QkNorm::PerHeadAfterProjections;
        // (GLM-4.5's, a mixture of experts: the extended ops')
        let view_norm = crate::model::extended::EXTENDED && qk == QkNorm::PerHeadAfterViews;
        // Liger's RoPE hands on gradients laid out like q and k: the head views' backward
        // reshapes them without a copy. Gemma 3 norms q and k after their transpose: Liger's
        // norm copies such an input (when it has more than one head) into a (batch, heads, seq,
        // dim) output, which Liger's RoPE copies back, and whose gradient the norm's backward
        // copies before the head view's reshape copies it again.
        let liger_rope = s.liger.rope;
        let liger_late = late_norm && s.liger.rms_norm;
        // Liger's norm that makes a new input gradient (Qwen3.5's, `in_place=False`) on the head
        // views: its `ensure_contiguous` copies the transposed gradient, so the head view's
        // backward has a contiguous one to reshape.
        let liger_copies_grad = qk_norm
            && s.liger.rms_norm
            && a.family.layout().liger.is_some_and(|l| !l.norm_in_place);
        let multi = (a.num_attention_heads > 1, a.kv_heads() > 1);
        // (A single head's tensor is contiguous in either layout: its view never copies.)
        let view_copies = |many: bool| many && (!liger_rope || liger_late) && !liger_copies_grad;
        // q_proj(x).view(...) [→ q_norm] .transpose(1, 2): the view's backward copies the
        // transposed gradient.
        // Phi-3 projects q, k, v at once and slices the fused output (views).
        let fused = a.family.layout().fused_projections;
        let qkv = fused.then(|| self.lora_linear(x, &lins[0]));
        let tokens_ = s.sequences() * s.seq;
        let (qd, kvd) = (a.q_dim() as u64, a.kv_dim() as u64);
        let q = match qkv {
            Some(f) => self.slice_of(f, tokens_ * qd),
            None => self.lora_linear(x, &lins[0]),
        };
        // Qwen3.5: `query, gate = chunk(q_proj(x).view(..., head_dim * 2), 2)`; the gate's
        // reshape copies it; the query view goes to q_norm as it is.
        let gated = a.attn_output_gate();
        let (q, gate) = if gated {
            let (qh, gv) = self.split2(q, tokens_ * qd, tokens_ * qd);
            self.drop(q);
            let gate = self.copy_of(gv, What::Attention);
            self.drop(gv);
            (qh, Some(gate))
        } else {
            (q, None)
        };
        let q = if whole_norm {
            let n = self.rmsnorm(q, qd);
            self.drop(q);
            n
        } else {
            q
        };
        // OLMoE and Qwen2.5-VL view q and k into heads after all three projections.
        // (Qwen2.5-VL is the full planner's, `extended::needed`: its multimodal rotary)
        let views_late =
            crate::model::extended::EXTENDED && a.family.layout().views_after_projections;
        let mut qv = if whole_norm || views_late || gated || !view_copies(multi.0) {
            q
        } else {
            let t = self.view_clone(q);
            self.drop(q);
            t
        };
        if qk_norm {
            // Qwen3.5's query is a chunk of q_proj's output (strided): Liger's norm copies it.
            let n = self.head_norm(qv, hd, liger_copies_grad, gated, multi.0);
            self.drop(qv);
            qv = n;
        }
        let k = match qkv {
            Some(f) => self.slice_of(f, tokens_ * kvd),
            None => self.lora_linear(x, &lins[1]),
        };
        let k = if whole_norm {
            let n = self.rmsnorm(k, kvd);
            self.drop(k);
            n
        } else {
            k
        };
        let mut kv = if whole_norm || views_late || !view_copies(multi.1) {
            k
        } else {
            let t = self.view_clone(k);
            self.drop(k);
            t
        };
        if qk_norm {
            let n = self.head_norm(kv, hd, liger_copies_grad, false, multi.1);
            self.drop(kv);
            kv = n;
        }
        let v = match qkv {
            Some(f) => {
                let v = self.slice_of(f, tokens_ * kvd);
                self.drop(f);
                v
            }
            None => self.lora_linear(x, &lins[2]),
        };
        if view_norm {
            // GLM-4.5: q_norm and k_norm on the head views, once v is projected too.
            let n = self.rmsnorm(qv, hd);
            self.drop(qv);
            qv = n;
            let n = self.rmsnorm(kv, hd);
            self.drop(kv);
            kv = n;
        }
        if whole_norm {
            let t = self.view_clone(qv);
            self.drop(qv);
            qv = t;
            let t = self.view_clone(kv);
            self.drop(kv);
            kv = t;
        }
        if views_late {
            if view_copies(multi.0) {
                let t = self.view_clone(qv);
                self.drop(qv);
                qv = t;
            }
            if view_copies(multi.1) {
                let t = self.view_clone(kv);
                self.drop(kv);
                kv = t;
            }
        }
        // v's view also copies its gradient back when it arrives contiguous in (b, h, s, d):
        // from eager matmuls or from repeat_kv's reduction (a masked sdpa with GQA).
        let rep = heads / a.kv_heads().max(1);
        // (A single kv head's tensor is contiguous in either layout: nothing to copy.)
        let vv = if (eager || (mask.is_some() && rep > 1)) && multi.1 {
            let t = self.view_clone(v);
            self.drop(v);
            t
        } else {
            v
        };
        let (qn, kn) = if late_norm {
            let qn = self.head_norm_after_transpose(qv, hd, multi.0, liger_rope);
            self.drop(qv);
            let kn = self.head_norm_after_transpose(kv, hd, multi.1, liger_rope);
            self.drop(kv);
            (qn, kn)
        } else {
            (qv, kv)
        };
        let (qe, ke) = if liger_rope {
            extended!(
                self,
                "Liger-Kernel's kernels",
                self.liger_rope(
                    (qn, kn),
                    (cos, sin),
                    // (Phi-3's q and k are slices of the fused projection: strided too)
                    (
                        (liger_late || fused) && multi.0,
                        (liger_late || fused) && multi.1
                    ),
                    // (a single head's tensor is contiguous in either layout)
                    (
                        eager && multi.0,
                        (eager || mask.is_some() && rep > 1) && multi.1
                    )
                ),
                (qn, kn)
            )
        } else if a.rotary_dim() < hd {
            self.rope_partial(qn, kn, cos, sin)
        } else {
            (self.rope(qn, cos, sin), self.rope(kn, cos, sin))
        };
        self.drop(qn);
        self.drop(kn);
        // generate: the keys and values go into the layer's cache, which the attention reads.
        let (ke, vv) = self.cache_update(ke, vv);
        let tokens = b * sq;
        let mut weights = None;
        let out = if eager {
            let (o, w) = self.eager_attention(qe, ke, vv, mask);
            weights = Some(w);
            o
        } else {
            let efficient = ctx.attn == crate::model::dtype::Dtype::Fp32;
            let early_bias = a.family.layout().bias_before_repeat_kv;
            // A masked sdpa with GQA: `sdpa_attention_forward` repeats k and v before the call,
            // in their own dtype, and autocast casts the repeated ones.
            let repeat_first = mask.is_some() && rep > 1 && !early_bias;
            let (kr, vr) = if repeat_first {
                (self.repeat_kv(ke, rep), self.repeat_kv(vv, rep))
            } else {
                self.tp.keep_local(ke.t);
                self.tp.keep_local(vv.t);
                (ke, vv)
            };
            // Under autocast the kernel's inputs are cast to the autocast dtype (kept for backward).
            // (autocast's wrapper casts the arguments right to left)
            let vc = self.cast(vr, ad, What::Attention);
            let kc = self.cast(kr, ad, What::Attention);
            let qc = self.cast(qe, ad, What::Attention);
            // A boolean mask becomes an additive bias in the attention dtype (Gemma 3 converts
            // it before repeating k, v; the others after).
            let mut bias = None;
            // The boolean mask broadcasts over the batch (an expanded view); its bias is made for
            // every sequence (`zeros_like` of an expanded tensor is dense).
            // (an additive mask the batch brings is used as it is)
            let additive = crate::model::extended::EXTENDED && ctx.sdpa_mask() == SdpaMask::Given;
            let make_bias = |p: &mut Self| {
                mask.filter(|_| !additive).map(|m| {
                    let s1 = p.t(1, ad, What::Attention);
                    let s2 = p.t(1, ad, What::Attention);
                    let w = p.t(m.n.max(b * sq * sq), ad, What::Mask);
                    p.drop(s2);
                    p.drop(s1);
                    w
                })
            };
            if early_bias {
                bias = make_bias(self);
            }
            let (kk, vk) = if mask.is_some() && rep > 1 && !repeat_first {
                (self.repeat_kv(kc, rep), self.repeat_kv(vc, rep))
            } else {
                self.tp.keep_local(kc.t);
                self.tp.keep_local(vc.t);
                (kc, vc)
            };
            self.drop(kc);
            self.drop(vc);
            if !early_bias {
                bias = make_bias(self);
            }
            let qe = qc;
            let mut o = self.t(tokens * heads * hd, ad, What::Attention);
            // The memory-efficient kernel computes the logsumexp only for backward
            // (`compute_log_sumexp`): under no_grad its output has no columns.
            let rows = if efficient && self.tp.mode == Mode::NoGrad {
                0
            } else if efficient {
                sq.div_ceil(32) * 32
            } else {
                sq
            };
            let lse = self.t(b * heads * rows, 4, What::Attention);
            let seed = self.t(1, 8, What::Attention);
            let off = self.t(1, 8, What::Attention);
            let mut saved = vec![kk.t, qe.t, vk.t, lse.t, o.t, off.t, seed.t];
            if let Some(b) = bias {
                saved.insert(0, b.t);
            }
            o.g = self.tp.node(
                Op::Attention,
                o.n,
                ad,
                &[Self::edge(&qe), Self::edge(&kk), Self::edge(&vk)],
                &saved,
            );
            self.drop(lse);
            self.drop(seed);
            self.drop(off);
            self.drop(kk);
            self.drop(vk);
            self.drop(qe);
            // (the repeated k and v are `sdpa_attention_forward`'s locals until it returns)
            self.drop(kr);
            self.drop(vr);
            if let Some(b) = bias {
                self.drop(b);
            }
            if a.family.layout().rotary_cat && !efficient && !liger_rope {
                // q comes from a cat, contiguous in (b, h, s, d): so does cuDNN's output, and
                // `transpose(1, 2).contiguous()` copies it (the memory-efficient kernel, fp32,
                // writes (b, s, h, d) whatever q's layout: no copy; nor after Liger's RoPE,
                // whose q is contiguous in (b, s, h, d)).
                let c = self.copy_of(o, What::Attention);
                self.drop(o);
                c
            } else {
                o
            }
        };
        let o_idx = if fused { 1 } else { 3 };
        let out = match gate {
            // `attn_output * torch.sigmoid(gate)`
            Some(gate) => {
                let sig = self.unary(gate, gate.es, What::Attention, false, true);
                let y = self.mul(out, sig, out.n, out.es, What::Attention);
                self.drop(out);
                self.drop(sig);
                y
            }
            None => out,
        };
        let o = self.lora_linear(out, &lins[o_idx]);
        self.drop(out);
        if let Some(g) = gate {
            self.drop(g);
        }
        self.drop(qe);
        self.drop(ke);
        self.drop(vv);
        (o, weights)
    }

    /// `repeat_kv`: expand + reshape, a copy unless there is a single kv head (then a view).
    pub(super) fn repeat_kv(&mut self, x: X, rep: u64) -> X {
        let mut y = if self.ctx.arch.kv_heads() == 1 {
            self.tp.keep_local(x.t);
            X { n: x.n * rep, ..x }
        } else {
            self.t(x.n * rep, x.es, What::Attention)
        };
        let e = Edge {
            to: x.g,
            n: x.n,
            es: x.es,
            sum_to: x.n,
        };
        y.g = self.tp.node(Op::Pass, x.n * rep, x.es, &[e], &[]);
        y
    }

    /// Eager attention; returns the output and the probabilities (`attn_weights`, which the
    /// attention module holds until it returns).
    fn eager_attention(&mut self, q: X, k: X, v: X, mask: Option<X>) -> (X, X) {
        let ctx = self.ctx;
        let a = ctx.arch;
        let s = ctx.s;
        let (b, sq) = (s.sequences(), s.seq);
        let heads = a.num_attention_heads;
        let rep = heads / a.kv_heads().max(1);
        let es = q.es;
        let (kk, vv) = if rep > 1 {
            (self.repeat_kv(k, rep), self.repeat_kv(v, rep))
        } else {
            self.tp.keep_local(k.t);
            self.tp.keep_local(v.t);
            (k, v)
        };
        let sn = b * heads * sq * sq;
        // matmul's copies of its operands where it cannot view them (saved in their place).
        let (copy_q, copy_k) = ctx.eager_matmul_copies_qk();
        let qb = self.matmul_operand(q, copy_q);
        let kb = self.matmul_operand(kk, copy_k);
        let mut sc = self.t(sn, es, What::Scores);
        sc.g = self.tp.node(
            Op::Bmm,
            sn,
            es,
            &[Self::edge(&qb), Self::edge(&kb)],
            &[kb.t, qb.t],
        );
        self.drop(qb);
        self.drop(kb);
        let scaled = self.mul_const(sc, What::Scores);
        self.drop(sc);
        let mut cur = scaled;
        if a.attn_softcap() {
            let d = self.mul_const(cur, What::Scores);
            self.drop(cur);
            let t = self.unary(d, es, What::Scores, false, true);
            self.drop(d);
            let m = self.mul_const(t, What::Scores);
            self.drop(t);
            cur = m;
        }
        let masked = {
            let mut y = self.t(sn, es, What::Scores);
            y.g = self.tp.node(Op::Pass, sn, es, &[Self::edge(&cur)], &[]);
            y
        };
        let _ = mask;
        self.drop(cur);
        let f = self.cast(masked, 4, What::Scores);
        let sm = {
            let mut y = self.t(sn, 4, What::Scores);
            y.g = self.tp.node(Op::Softmax, sn, 4, &[Self::edge(&f)], &[y.t]);
            y
        };
        self.drop(f);
        let p = self.cast(sm, es, What::Scores);
        self.drop(masked);
        self.drop(sm);
        let on = v.n * rep;
        // The bmm keeps a copy of v where reshaping it for the bmm copies it.
        let vb = self.matmul_operand(vv, ctx.eager_matmul_copies_v());
        let mut o = self.t(on, es, What::Attention);
        o.g = self.tp.node(
            Op::Bmm,
            on,
            es,
            &[Self::edge(&p), Self::edge(&vb)],
            &[vb.t, p.t],
        );
        self.drop(vb);
        let c = self.eager_output(o);
        self.drop(o);
        self.drop(kk);
        self.drop(vv);
        (c, p)
    }

    /// A view slicing `n` elements out of `full` (its backward is a full-size `slice_backward`).
    fn slice_of(&mut self, full: X, n: u64) -> X {
        self.tp.keep_local(full.t);
        let g = self
            .tp
            .node(Op::Slice, n, full.es, &[Self::edge(&full)], &[]);
        X {
            t: full.t,
            n,
            es: full.es,
            g,
        }
    }

    fn mlp(&mut self, x: X, lins: &[Lin]) -> X {
        if self.ctx.arch.family.layout().fused_projections {
            // up_states = gate_up_proj(x); gate, up = chunk(2); up * act(gate): one
            // SplitBackward node, whose backward concatenates the two gradients.
            let gu = self.lora_linear(x, &lins[2]);
            let half = gu.n / 2;
            let (gate, up) = self.split2(gu, half, half);
            self.drop(gu);
            if self.ctx.s.liger.swiglu {
                // LigerPhi3SwiGLUMLP (liger-kernel 0.8.5 transformers/swiglu.py:134-137): the
                // chunks go to the SiLU-mul, which copies them (they are strided).
                return extended!(
                    self,
                    "Liger-Kernel's kernels",
                    {
                        // (the chunks are locals of the forward until it returns)
                        let prod = self.liger_swiglu(gate, up, true);
                        let down = self.lora_linear(prod, &lins[3]);
                        self.drop(prod);
                        self.drop(gate);
                        self.drop(up);
                        down
                    },
                    x
                );
            }
            let act = self.unary(gate, gate.es, What::Mlp, true, false);
            let prod = self.mul(up, act, act.n, act.es, What::Mlp);
            self.drop(up);
            self.drop(act);
            self.drop(gate);
            let down = self.lora_linear(prod, &lins[3]);
            self.drop(prod);
            return down;
        }
        let named = |n: &str| lins.iter().find(|l| l.shape.name == n).cloned();
        let (Some(g), Some(u), Some(d)) =
            (named("gate_proj"), named("up_proj"), named("down_proj"))
        else {
            return x;
        };
        // (Qwen3-MoE's, Mixtral's and Qwen3.5-MoE's dense MLP stays transformers'.)
        let liger_mlp = self
            .ctx
            .arch
            .family
            .layout()
            .liger
            .is_some_and(|l| l.dense_mlp);
        if self.ctx.s.liger.swiglu && liger_mlp {
            return extended!(
                self,
                "Liger-Kernel's kernels",
                {
                    let gate = self.lora_linear(x, &g);
                    let up = self.lora_linear(x, &u);
                    let prod = self.liger_swiglu(gate, up, false);
                    self.drop(gate);
                    self.drop(up);
                    let down = self.lora_linear(prod, &d);
                    self.drop(prod);
                    down
                },
                x
            );
        }
        let gate = self.lora_linear(x, &g);
        let act = self.unary(gate, gate.es, What::Mlp, true, false);
        self.drop(gate);
        let up = self.lora_linear(x, &u);
        let prod = self.mul(act, up, act.n, act.es, What::Mlp);
        self.drop(act);
        self.drop(up);
        let down = self.lora_linear(prod, &d);
        self.drop(prod);
        down
    }

    fn layer(&mut self, h: X, li: usize, cos: X, sin: X, mask: Option<X>) -> X {
        let lins = self.layers[li].clone();
        if let Some(norms) = self.norms.get(li) {
            self.norm_queue = norms.iter().rev().copied().collect();
        }
        let width = self.h();
        let sandwich = self.ctx.arch.family.norms_per_layer() > 2;
        let normed = self.rmsnorm(h, width);
        self.tp.block = Block::Attention;
        let (mut attn, weights) = if self.ctx.arch.is_linear_layer(li as u64) {
            (
                extended!(
                    self,
                    "Gated DeltaNet layers",
                    self.gated_delta_net(normed, &lins),
                    normed
                ),
                None,
            )
        } else {
            self.attention(normed, &lins, (cos, sin), mask, li)
        };
        self.tp.block = Block::Other;
        let attention_local = crate::model::extended::EXTENDED
            && self.ctx.arch.family.layout().attention_output_local;
        if !attention_local {
            self.drop(normed);
        }
        if sandwich {
            let n = self.rmsnorm(attn, width);
            self.drop(attn);
            attn = n;
        }
        let h2 = self.add(h, attn, What::Hidden);
        if attention_local {
            self.drop(normed);
        } else {
            self.drop(attn);
        }
        let normed2 = self.rmsnorm(h2, width);
        let mut weights = weights;
        let mut m = if self.moe.get(li).is_some_and(|m| m.is_some()) {
            self.tp.block = Block::Experts;
            let (out, scores) = extended!(
                self,
                "mixture-of-experts layers",
                self.moe_block(normed2, li, &lins),
                (normed2, None)
            );
            self.tp.block = Block::Other;
            if let Some(sc) = scores {
                // gpt-oss: `hidden_states, _ = self.mlp(...)` rebinds `_` from the attention
                // weights to the router scores.
                if let Some(w) = weights.replace(sc) {
                    self.drop(w);
                }
            }
            out
        } else {
            self.tp.block = Block::Mlp;
            let out = self.mlp(normed2, &lins);
            self.tp.block = Block::Other;
            out
        };
        self.drop(normed2);
        if sandwich {
            let n = self.rmsnorm(m, width);
            self.drop(m);
            m = n;
        }
        let h3 = self.add(h2, m, What::Hidden);
        self.drop(m);
        self.drop(h2);
        if attention_local {
            self.drop(attn);
        }
        if let Some(w) = weights {
            self.drop(w);
        }
        h3
    }

    /// The mask layer `li` attends with: Gemma's local (sliding-window) layers use the sliding
    /// mask (Gemma 2: every other layer from the first; Gemma 3: five of every six).
    /// Whether layer `li` attends through a sliding window (the family's `Sliding` pattern).
    fn is_local(&self, li: usize) -> bool {
        self.ctx
            .arch
            .family
            .layout()
            .sliding
            .is_some_and(|w| w.local(li as u64))
    }

    fn mask_for(&self, li: usize) -> Option<X> {
        // Llama 4's rotary layers attend through the chunked mask (from the chunk on).
        let a = self.ctx.arch;
        if a.attention_chunk().is_some() && a.rotates(li as u64) {
            return self.sliding;
        }
        match (self.is_local(li), self.sliding) {
            (true, Some(w)) => Some(w),
            _ => self.causal,
        }
    }

    /// `sdpa_mask`'s index tensors (`masking_utils`): its batch_arange (one int64 per row),
    /// head_arange (one), then the query and key positions (each an arange plus its offset, the
    /// arange freed): (batch, head, query, key).
    pub(super) fn mask_indices(&mut self, rows: u64, sq: u64) -> [X; 4] {
        let batch = self.t(rows, 8, What::Input);
        let head = self.t(1, 8, What::Input);
        let a1 = self.t(sq, 8, What::Input);
        let q = self.t(sq, 8, What::Input);
        self.drop(a1);
        let a2 = self.t(sq, 8, What::Input);
        let kv = self.t(sq, 8, What::Input);
        self.drop(a2);
        [batch, head, q, kv]
    }

    /// The boolean 4-D mask sdpa receives: causal and padding (`padded`) or causal and window.
    fn sdpa_mask(&mut self, padded: bool) -> X {
        let s = self.ctx.s;
        let (b, sq) = (s.sequences(), s.seq);
        let tc = padded.then(|| self.t(b * sq, 1, What::Input));
        let [t1, t2, b1, b2] = self.mask_indices(b, sq);
        let one = self.t(1, 1, What::Input);
        let out = if padded {
            let le = self.t(sq * sq, 1, What::Mask);
            let and1 = self.t(sq * sq, 1, What::Mask);
            self.drop(le);
            self.drop(one);
            let idx = self.t(b * sq, 1, What::Input);
            let and2 = self.t(b * sq * sq, 1, What::Mask);
            self.drop(idx);
            self.drop(and1);
            and2
        } else {
            let sub = self.t(sq, 8, What::Input);
            let gt = self.t(sq * sq, 1, What::Mask);
            self.drop(sub);
            let and1 = self.t(sq * sq, 1, What::Mask);
            self.drop(gt);
            self.drop(one);
            let le = self.t(sq * sq, 1, What::Mask);
            let and2 = self.t(sq * sq, 1, What::Mask);
            self.drop(le);
            self.drop(and1);
            and2
        };
        self.drop(t1);
        self.drop(t2);
        self.drop(b1);
        self.drop(b2);
        if let Some(t) = tc {
            self.drop(t);
        }
        out
    }

    /// `create_sliding_window_causal_mask` for eager attention: a boolean window, then the
    /// additive mask.
    fn sliding_mask(&mut self) -> X {
        let s = self.ctx.s;
        // The boolean window broadcasts over the batch unless a padding mask is folded in; the
        // additive mask is expanded to every sequence.
        let bool_ss = s.seq * s.seq * if s.padded_mask { s.sequences() } else { 1 };
        let ss = s.sequences() * s.seq * s.seq;
        let es = bytes(self.ctx.attn);
        let [t1, t2, b1, b2] = self.mask_indices(s.sequences(), s.seq);
        let one = self.t(1, 1, What::Input);
        let sub = self.t(s.seq, 8, What::Input);
        let gt = self.t(bool_ss, 1, What::Mask);
        self.drop(sub);
        let and1 = self.t(bool_ss, 1, What::Mask);
        self.drop(gt);
        self.drop(one);
        let le = self.t(bool_ss, 1, What::Mask);
        let and2 = self.t(bool_ss, 1, What::Mask);
        self.drop(le);
        self.drop(and1);
        self.drop(t1);
        self.drop(t2);
        self.drop(b1);
        self.drop(b2);
        let z = self.t(1, es, What::Input);
        let st = self.t(1, es, What::Input);
        let w = self.t(ss, es, What::Mask);
        self.drop(st);
        self.drop(z);
        self.drop(and2);
        w
    }

    /// Whether the model computes a second set of rotary tables for its global layers
    /// (`FamilyLayout::rotary_per_layer_type` with both kinds of layer present).
    fn two_rotaries(&self) -> bool {
        let a = self.ctx.arch;
        let l = a.family.layout();
        let layers = a.num_hidden_layers;
        l.rotary_per_layer_type
            && l.sliding.is_some_and(|w| {
                (0..layers).any(|i| w.local(i)) && (0..layers).any(|i| !w.local(i))
            })
    }

    /// Releases the global layers' rotary tables with the sliding layers'.
    fn drop_global_rotary(&mut self) {
        if let Some((c, s)) = self.rotary_global.take() {
            self.drop(c);
            self.drop(s);
        }
    }

    fn rotary(&mut self, es: u64) -> (X, X) {
        let sq = self.ctx.s.seq;
        let hd = self.ctx.arch.head_dim();
        match self.ctx.arch.family.layout().attention {
            AttentionKind::Latent | AttentionKind::RotaryOrNope => {
                // DeepSeek: freqs [seq, rope/2] fp32, polar(ones_like(freqs), freqs) complex64,
                // times attention_scaling: one complex table for q and k. Llama 4 alike
                // (`Llama4TextRotaryEmbedding.forward`, `modeling_llama4.py:217-222`), its
                // frequencies a product rather than a GEMM.
                let pos = self.t(sq, 4, What::Rotary);
                let freqs = self.t(sq * hd / 2, 4, What::Rotary);
                if !self.ctx.arch.family.layout().rotary_product {
                    self.tp.gemm(false); // inv_freq @ positions: the forward's first GEMM
                }
                self.drop(pos);
                let ones = self.t(sq * hd / 2, 4, What::Rotary);
                let polar = self.t(sq * hd / 2, 8, What::Rotary);
                self.drop(ones);
                let fc = self.t(sq * hd / 2, 8, What::Rotary);
                self.drop(polar);
                self.drop(freqs);
                self.tp.keep_local(fc.t);
                return (fc, fc);
            }
            AttentionKind::Sinks => {
                // gpt-oss: cos and sin of the half-width frequencies (no cat).
                let pos = self.t(sq, 4, What::Rotary);
                let freqs = self.t(sq * hd / 2, 4, What::Rotary);
                self.tp.gemm(false); // inv_freq @ positions: the forward's first GEMM
                self.drop(pos);
                let c = self.t(sq * hd / 2, 4, What::Rotary);
                let cs = self.t(sq * hd / 2, 4, What::Rotary);
                self.drop(c);
                let sn = self.t(sq * hd / 2, 4, What::Rotary);
                let ss = self.t(sq * hd / 2, 4, What::Rotary);
                self.drop(sn);
                let cos = self.cast(cs, es, What::Rotary);
                let sin = self.cast(ss, es, What::Rotary);
                self.drop(freqs);
                self.drop(cs);
                self.drop(ss);
                return (cos, sin);
            }
            AttentionKind::Standard => {}
        }
        // (the multimodal rotary is the full planner's, `extended::needed`)
        if let Some(kind) = self.ctx.arch.family.layout().mrope {
            #[cfg(not(feature = "extended-ops"))]
            let _ = kind;
            if let Some(tables) = extended!(
                self,
                "the multimodal rotary",
                Some(self.rotary_mrope(es, kind)),
                None
            ) {
                return tables;
            }
        }
        // generate's position ids have a row per sequence: so have the tables. Their width is
        // the rotating part of a head (all of it but for a partial rotary).
        // (neat packing's position ids have a row per sample too)
        let rows = match &self.gen {
            Some(g) => g.rows,
            None if crate::model::extended::EXTENDED && self.ctx.s.neat_packing => {
                self.ctx.s.sequences()
            }
            None => 1,
        };
        let sq = sq * rows;
        let hd = self.ctx.arch.rotary_dim();
        let pos = self.t(sq, 4, What::Rotary);
        // `inv_freq.float()` copies buffers FSDP1's mixed precision cast (`buffer_dtype`).
        let inv = self
            .fsdp1_buffers_cast()
            .then(|| self.t(self.ctx.arch.rotary_dim() / 2, 4, What::Rotary));
        let freqs = self.t(sq * hd / 2, 4, What::Rotary);
        if !self.ctx.arch.family.layout().rotary_product {
            self.tp.gemm(false); // inv_freq @ positions: the forward's first GEMM
        }
        self.drop(pos);
        if let Some(i) = inv {
            self.drop(i);
        }
        let emb = self.t(sq * hd, 4, What::Rotary);
        let c = self.t(sq * hd, 4, What::Rotary);
        let cs = self.t(sq * hd, 4, What::Rotary);
        self.drop(c);
        let sn = self.t(sq * hd, 4, What::Rotary);
        let ss = self.t(sq * hd, 4, What::Rotary);
        self.drop(sn);
        let cos = if es == 4 {
            self.tp.keep_local(cs.t);
            cs
        } else {
            self.t(sq * hd, es, What::Rotary)
        };
        let sin = if es == 4 {
            self.tp.keep_local(ss.t);
            ss
        } else {
            self.t(sq * hd, es, What::Rotary)
        };
        self.drop(freqs);
        self.drop(emb);
        self.drop(cs);
        self.drop(ss);
        (cos, sin)
    }

    /// Qwen3.5's multimodal rotary tables (`Qwen3_5TextRotaryEmbedding.forward`,
    /// `modeling_qwen3_5.py:177-198`): the positions of three grids in fp32, their products with
    /// the inverse frequencies (no GEMM), cos and sin scaled, each recomposed by a `cat` into
    /// `[batch, seq, rotary]`, then cast to the model's dtype.
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    fn rotary_mrope(&mut self, es: u64, kind: Mrope) -> (X, X) {
        let s = self.ctx.s;
        let bs = s.sequences() * s.seq;
        let rd = self.ctx.arch.rotary_dim();
        let pos = self.t(3 * bs, 4, What::Rotary);
        let freqs = self.t(3 * bs * rd / 2, 4, What::Rotary);
        self.drop(pos);
        let c = self.t(freqs.n, 4, What::Rotary);
        let cs = self.t(freqs.n, 4, What::Rotary);
        self.drop(c);
        let sn = self.t(freqs.n, 4, What::Rotary);
        let ss = self.t(freqs.n, 4, What::Rotary);
        self.drop(sn);
        let (sin_cat, cos_cat) = match kind {
            Mrope::Interleaved => {
                let sin_cat = self.t(bs * rd, 4, What::Rotary);
                self.drop(ss);
                let cos_cat = self.t(bs * rd, 4, What::Rotary);
                self.drop(cs);
                (sin_cat, cos_cat)
            }
            Mrope::Sections => {
                // Each of sin, then cos: its sections' `cat` (half the table), that half
                // concatenated with itself; the half dies when the helper returns, the scaled
                // products when the caller rebinds its name.
                let mut cats = vec![];
                for x in [ss, cs] {
                    let half = self.t(bs * rd / 2, 4, What::Rotary);
                    let full = self.t(bs * rd, 4, What::Rotary);
                    self.drop(half);
                    self.drop(x);
                    cats.push(full);
                }
                (cats[0], cats[1])
            }
        };
        let cos = self.cast(cos_cat, es, What::Rotary);
        let sin = self.cast(sin_cat, es, What::Rotary);
        self.drop(freqs);
        self.drop(cos_cat);
        self.drop(sin_cat);
        (cos, sin)
    }

    /// Partial rotary of q and k (`apply_rotary_pos_emb` of Qwen3.5, `modeling_qwen3_5.py:
    /// 667-702`): the rotating slice of each rotated (`x·cos + rotate_half(x)·sin`), q's then
    /// k's, then each concatenated with its pass-through slice into a new tensor.
    fn rope_partial(&mut self, q: X, k: X, cos: X, sin: X) -> (X, X) {
        let hd = self.ctx.arch.head_dim();
        let rd = self.ctx.arch.rotary_dim();
        // q_rot, q_pass, k_rot, k_pass: views.
        let mut views = vec![];
        for x in [q, k] {
            let nr = x.n / hd * rd;
            let rot = self.tp.node(Op::Slice, nr, x.es, &[Self::edge(&x)], &[]);
            let pass = self
                .tp
                .node(Op::Slice, x.n - nr, x.es, &[Self::edge(&x)], &[]);
            views.push((rot, pass));
        }
        let mut embs = vec![];
        for (x, &(rot_g, _)) in [q, k].into_iter().zip(&views) {
            self.tp.keep_local(x.t);
            let rot = X {
                n: x.n / hd * rd,
                g: rot_g,
                ..x
            };
            let emb = self.rotate(rot, cos, sin);
            self.drop(rot);
            embs.push(emb);
        }
        let mut outs = vec![];
        for ((x, emb), &(_, pass_g)) in [q, k].into_iter().zip(embs).zip(&views) {
            let pass = Edge {
                to: pass_g,
                n: x.n - emb.n,
                es: x.es,
                sum_to: 0,
            };
            let mut y = self.t(x.n, emb.es, What::Rope);
            y.g = self
                .tp
                .node(Op::Split, x.n, emb.es, &[Self::edge(&emb), pass], &[]);
            self.drop(emb);
            outs.push(y);
        }
        (outs[0], outs[1])
    }

    /// The decoder stack: the embedding, every layer and the final norm; returns the final
    /// norm's output and the rotary tables. `pref`: a preference trainer's call, with the
    /// collator's attention mask, whose rotary tables are released when the model's forward
    /// returns (not after the loss).
    fn body(&mut self, pref: bool) -> (X, X, X) {
        let ctx = self.ctx;
        let s = ctx.s;
        let a = ctx.arch;
        let tokens = self.tokens();
        let h = a.hidden_size;
        let aux = bytes(ctx.aux_weight);
        self.fsdp2_forward_start();
        self.fsdp1_forward_start();
        let embed_unit = self.fsdp2().map_or(0, |f| f.embed_unit());
        self.fsdp2_pre_forward(embed_unit, false);
        let mut emb = self.t(tokens * h, aux, What::Hidden);
        if let Some(table) = self.embed_trained {
            // The trainable copy of embed_tokens (or the embedding itself, trained in full): its
            // gradient is a dense [vocab, hidden] tensor.
            let w = table.x;
            let e = Edge {
                to: w.g,
                n: w.n,
                es: w.es,
                sum_to: 0,
            };
            // Its backward reads the ids: kept for it where the step lets them go earlier (GRPO).
            let ids: Vec<T> = self.embed_ids.into_iter().collect();
            emb.g = self.tp.node(Op::Embedding, emb.n, emb.es, &[e], &ids);
        }
        self.fsdp2_post_forward(embed_unit);
        if a.family.layout().scaled_embedding {
            // The scaled embedding: `embedding(ids) * embed_scale` (a buffer).
            let e2 = if emb.grad() {
                self.mul_const(emb, What::Hidden)
            } else {
                self.t(tokens * h, aux, What::Hidden)
            };
            self.drop(emb);
            emb = e2;
        }
        // torch.no_grad() passes (a reference or KL pass) run without checkpointing: TRL turns
        // it off around them (`disable_gradient_checkpointing`).
        let ckpt = s.grad_ckpt && self.tp.mode != Mode::NoGrad;
        if ckpt && !emb.grad() {
            // enable_input_require_grads: the embedding output becomes a leaf needing a gradient;
            // its AccumulateGrad node keeps it until the graph is freed (a trained embedding's
            // output — trained in full, or peft's modules_to_save copy — already needs one, and
            // requires_grad_ changes nothing: its gradient goes on to the embedding's backward).
            emb.g = G::Param(u32::MAX);
            self.tp.keep_local(emb.t);
            self.emb_leaf = Some(emb);
        }
        let (emb, locals) = if self.ctx.visual.is_some() {
            extended!(
                self,
                "images",
                self.vision_forward(emb),
                (emb, Default::default())
            )
        } else {
            (emb, Default::default())
        };
        self.vision_locals = locals;
        // cache_position / position_ids (with images: get_rope_index's `[3, batch, seq]`);
        // generate passes its own position ids.
        let generating = self.gen.is_some();
        let pos = if generating {
            None
        } else if self.ctx.visual.is_some() {
            extended!(self, "images", Some(self.rope_index()), None)
        } else if let Some(p) = self.packed_pos {
            // The collator's position ids: the model makes none (`modeling_llama.py:377-380`).
            self.tp.keep_local(p.t);
            Some(p)
        } else {
            let ar = self.t(s.seq, 8, What::Input);
            let pos = self.t(s.seq, 8, What::Input);
            self.drop(ar);
            Some(pos)
        };
        let eager = s.attn_impl == AttnImpl::Eager;
        if pref && !eager && ctx.sdpa_mask() == SdpaMask::None {
            // The collator's all-ones attention_mask: transformers reads it as booleans
            // (`masking_utils`), finds no padding and drops it (SDPA `is_causal`).
            let mask_tokens = self.gen.as_ref().map_or(tokens, |g| g.rows * g.mask_len);
            let m = self.t(mask_tokens, 1, What::Input);
            self.drop(m);
        }
        if let Some(c) = a
            .attention_chunk()
            .filter(|_| (0..a.num_hidden_layers).any(|li| a.rotates(li)))
        {
            // (Llama 4's rotary layers: an extended step's)
            #[cfg(not(feature = "extended-ops"))]
            let _ = c;
            let chunked = extended!(self, "Llama 4's attention", self.chunked_mask(c), None);
            self.sliding = chunked;
        }
        let causal = if !eager {
            match ctx.sdpa_mask() {
                SdpaMask::Padded => Some(self.sdpa_mask(true)),
                SdpaMask::Packed => extended!(
                    self,
                    "packing",
                    {
                        let (mask, docs) = self.packed_mask();
                        self.drop(docs);
                        Some(mask)
                    },
                    None
                ),
                SdpaMask::Given => self.neat_mask.inspect(|m| self.tp.keep_local(m.t)),
                SdpaMask::Sliding => {
                    let w = self.sdpa_mask(false);
                    self.sliding = Some(w);
                    None
                }
                SdpaMask::None => None,
            }
        } else if crate::model::extended::EXTENDED && (s.packing || s.neat_packing) {
            extended!(self, "packing", self.packed_eager_mask(), None)
        } else if eager {
            let [t1, t2, b1, b2] = self.mask_indices(s.sequences(), s.seq);
            // The boolean causal mask broadcasts over the batch unless a padding mask is
            // folded in; the additive mask is expanded to every sequence.
            let rows = if s.padded_mask { s.sequences() } else { 1 };
            let le = self.t(rows * s.seq * s.seq, 1, What::Mask);
            self.drop(t1);
            self.drop(t2);
            self.drop(b1);
            self.drop(b2);
            let z = self.t(1, bytes(ctx.attn), What::Input);
            let st = self.t(1, bytes(ctx.attn), What::Input);
            let w = self.t(s.sequences() * s.seq * s.seq, bytes(ctx.attn), What::Mask);
            self.drop(st);
            self.drop(z);
            self.drop(le);
            if a.family.layout().sliding.is_some() {
                // The sliding-window mask of the local layers.
                let sw = self.sliding_mask();
                self.sliding = Some(sw);
            }
            Some(w)
        } else {
            None
        };
        let (cos, sin) = self.rotary(bytes(ctx.resid));
        // Gemma 3 with both kinds of layer: the global layers' tables too (the first pair is
        // the sliding layers').
        let global = self.two_rotaries().then(|| self.rotary(bytes(ctx.resid)));
        self.rotary_global = global;
        self.causal = causal;
        self.tp.keep_local(emb.t);
        let mut hcur = emb;
        let saved_mode = self.tp.mode;
        let mut layer_output: Option<X> = None;
        for li in 0..self.layers.len() {
            self.tp.exec = li as u32;
            let (cos, sin) = match global {
                Some(g) if !self.is_local(li) => g,
                _ => (cos, sin),
            };
            if ckpt {
                self.tp.mode = Mode::Discard;
                self.tp.layer = Some(li as u32);
                // The checkpoint releases the layer's keyword arguments in call order, a tuple's
                // items last first (the position embeddings): `keeps` is that order reversed.
                // The multimodal position ids (`[3, batch, seq]`) leave no text position ids
                // for the layers (`Qwen3_5TextModel.forward`): nothing to keep.
                let pos_t = pos.filter(|_| self.ctx.visual.is_none()).map(|p| p.t);
                let keeps: Vec<T> = if a.family.layout().checkpoint_kwargs
                    == KwargsOrder::PositionEmbeddingsFirst
                {
                    [Some(hcur.t), Some(cos.t), Some(sin.t), pos_t]
                } else {
                    [Some(hcur.t), pos_t, Some(cos.t), Some(sin.t)]
                }
                .into_iter()
                .flatten()
                .collect();
                let mut keeps = keeps;
                let m = self.mask_for(li);
                if let Some(c) = m {
                    keeps.push(c.t);
                }
                if s.parallel.offload_activations {
                    // The checkpoint's input goes to host memory as it is saved; the GPU copy
                    // dies with the program's last reference (after the next layer's forward).
                    keeps[0] = self.tp.new_host_t(hcur.n * hcur.es, What::Hidden);
                }
                self.tp.begin_checkpoint(li as u32, &keeps);
                if self.ckpt_in.len() <= li {
                    self.ckpt_in.resize(li + 1, None);
                }
                self.ckpt_in[li] = Some((hcur, cos, sin, m));
            }
            let m = self.mask_for(li);
            let unit = self.fsdp2().map(|f| f.layer_unit(li));
            if let Some(u) = unit.filter(|_| self.fsdp2_layer_units()) {
                self.fsdp2_pre_forward(u, hcur.grad());
            }
            self.fsdp1_layer_pre_forward(li, hcur.grad());
            let hn = self.layer(hcur, li, cos, sin, m);
            self.fsdp1_layer_post_forward(li);
            if let Some(u) = unit.filter(|_| self.fsdp2_layer_units()) {
                self.fsdp2_post_forward(u);
            }
            self.tp.mode = saved_mode;
            self.tp.layer = None;
            // `layer_outputs` is rebound: a previous layer's output that a deepstack addition
            // replaced in `hidden_states` dies now.
            if let Some(x) = layer_output.take() {
                self.drop(x);
            }
            self.drop(hcur);
            self.tp.exec = NO_LAYER;
            hcur = if self.vision_locals.deepstack.len() > li {
                layer_output = Some(hn);
                extended!(self, "deepstack", self.deepstack_process(hn, li), hn)
            } else {
                hn
            };
        }
        if let Some(x) = layer_output {
            self.drop(x);
        }
        self.norm_queue = self.final_norm.into_iter().collect();
        if let Some(tail) = self.fsdp2().map(|f| f.tail()) {
            self.fsdp2_pre_forward(tail, hcur.grad());
            self.fsdp2_mark_tail(false);
        }
        let fin = self.rmsnorm(hcur, h);
        self.drop(hcur);
        // Locals die in declaration order; families that gather the mask arguments in a dict
        // (`mask_kwargs`) release the embedding output before the position ids.
        let mask_kwargs = a.family.layout().mask_kwargs;
        if mask_kwargs {
            if let Some(c) = causal {
                self.drop(c);
            }
            if let Some(w) = self.sliding.take() {
                self.drop(w);
            }
            // With images the position ids are the model's own argument, which outlives the
            // language model's locals.
            if self.ctx.visual.is_some() {
                self.drop_opt(pos);
                self.drop(emb);
            } else {
                self.drop(emb);
                self.drop_opt(pos);
            }
        } else {
            self.drop_opt(pos);
            self.drop(emb);
            if let Some(c) = causal {
                self.drop(c);
            }
        }
        for x in std::mem::take(&mut self.vision_locals.at_return) {
            self.drop(x);
        }
        for x in std::mem::take(&mut self.vision_locals.deepstack) {
            self.drop(x);
        }
        if pref {
            self.drop(sin);
            self.drop(cos);
            self.drop_global_rotary();
        }
        (fin, cos, sin)
    }

    /// One forward pass through the loss; returns the loss's node and the loss tensor.
    fn forward(&mut self) -> (G, X) {
        let ctx = self.ctx;
        let (fin, cos, sin) = self.body(false);
        // Under no_grad nothing saves the rotary tables: they die as the model's forward
        // returns (with grad, the graph keeps them until the loss is done).
        let no_grad = self.tp.mode == Mode::NoGrad;
        if no_grad {
            self.drop(sin);
            self.drop(cos);
            self.drop_global_rotary();
        }
        let (mut g, loss, logits) = if ctx.s.fused_ce.any() {
            let (g, loss) = extended!(
                self,
                "a fused linear cross-entropy",
                match ctx.s.fused_ce {
                    crate::model::FusedCe::Cce => self.cce(fin),
                    _ => self.fused_ce(fin),
                },
                (G::No, fin)
            );
            (g, loss, None)
        } else {
            let logits = self.head_logits(fin);
            self.fsdp2_mark_tail(true);
            let (g, loss) = self.loss(logits);
            (g, loss, Some(logits))
        };
        // output_router_logits: the load-balancing loss over every MoE layer's logits, added
        // to the loss in place.
        let recorded = std::mem::take(&mut self.router_logits);
        let aux = if recorded.is_empty() {
            None
        } else {
            extended!(
                self,
                "mixture-of-experts layers",
                self.load_balancing(&recorded),
                None
            )
        };
        if let Some(aux) = aux {
            let scaled = self.mul_const(aux, What::Loss);
            self.drop(aux);
            g = self.tp.node(
                Op::Add,
                1,
                4,
                &[
                    Edge {
                        to: g,
                        n: 1,
                        es: 4,
                        sum_to: 0,
                    },
                    Self::edge(&scaled),
                ],
                &[],
            );
            self.drop(scaled);
        }
        self.drop(fin);
        // FSDP2's root post-forward: the last all-gather freed, the loss cast to the mixed
        // precision's output dtype.
        self.fsdp2_root_post_forward();
        self.fsdp1_root_post_forward();
        let (g, loss) = match self.fsdp2_output_es() {
            Some(es) if es != loss.es => {
                let c = self.cast(loss, es, What::Loss);
                self.drop(loss);
                (c.g, c)
            }
            _ => (g, loss),
        };
        if !no_grad {
            self.drop(cos);
            self.drop(sin);
            self.drop_global_rotary();
        }
        // DistributedDataParallel's post-forward: the outputs cloned when it looks for unused
        // parameters.
        let (g, loss, logits) = if crate::model::extended::EXTENDED {
            self.ddp_sink(g, loss, logits)
        } else {
            (g, loss, logits)
        };
        // Leaving `with autocast:` clears its cache; `del out` then frees the logits (and the
        // router logits it holds).
        self.clear_autocast_cache();
        if let Some(l) = logits {
            if self.keep_logits {
                self.kept_logits = Some(l);
            } else {
                self.drop(l);
            }
        }
        for x in recorded {
            self.drop(x);
        }
        for x in std::mem::take(&mut self.vision_locals.in_output) {
            self.drop(x);
        }
        (g, loss)
    }

    /// lm_head over the final hidden states `fin` (and Gemma 2's final softcap).
    fn head_logits(&mut self, fin: X) -> X {
        let ctx = self.ctx;
        let a = ctx.arch;
        let v = a.vocab_size;
        let head = self.lm_head.map(|p| p.x).unwrap_or(self.params[0].x);
        let logits_es = bytes(ctx.logits);
        let mut logits = self.matmul(fin, head, self.tokens() * v, What::Logits);
        debug_assert_eq!(logits.es, logits_es);
        if a.final_softcap() {
            // logits / cap, tanh, * cap (each reassigning `logits`)
            let d = self.mul_const(logits, What::Logits);
            self.drop(logits);
            let t = self.unary(d, d.es, What::Logits, false, true);
            self.drop(d);
            let m = self.mul_const(t, What::Logits);
            self.drop(t);
            logits = m;
        }
        logits
    }

    fn clear_autocast_cache(&mut self) {
        for (_, x) in std::mem::take(&mut self.ac_cache) {
            self.drop(x);
        }
    }

    /// transformers' `ForCausalLMLoss` over the logits: their fp32 upcast, the shift
    /// ([`LossShift`]), `log_softmax` and `nll_loss`.
    fn loss(&mut self, logits: X) -> (G, X) {
        let s = self.ctx.s;
        let f = self.cast(logits, 4, What::Logits);
        let rows = s.sequences();
        // What the log-softmax reads (`input`, with whether it holds a reference of its own) and
        // the labels tensors the loss makes (the one it reads last).
        // `labels[..., 1:].contiguous()` copies unless the batch is a single row.
        let (input, own, labels) = match s.loss_shift {
            // ≥ 4.49: the labels are padded and shifted, the logits used whole.
            LossShift::Labels => {
                let pad = self.t(rows * (s.seq + 1), 8, What::Loss);
                let shift = if rows > 1 {
                    vec![pad, self.t(rows * s.seq, 8, What::Loss)]
                } else {
                    vec![pad]
                };
                (f, false, shift)
            }
            // Before: `logits[..., :-1, :]` is two slices (of the positions, then the whole last
            // dimension), each a view whose gradient is a zero-filled tensor of its input's
            // size; `.contiguous()` copies them unless the batch is a single row.
            LossShift::Logits => {
                let n = rows * s.seq.saturating_sub(1) * self.ctx.arch.vocab_size;
                let g1 = self.tp.node(Op::Slice, n, 4, &[Self::edge(&f)], &[]);
                self.tp.keep_local(f.t);
                let v1 = X { n, g: g1, ..f };
                let g2 = self.tp.node(Op::Slice, n, 4, &[Self::edge(&v1)], &[]);
                let v2 = X { g: g2, ..v1 };
                let input = if rows > 1 {
                    let mut c = self.t(n, 4, What::Loss);
                    c.g = self.tp.node(Op::Pass, n, 4, &[Self::edge(&v2)], &[]);
                    self.drop(v2);
                    c
                } else {
                    v2
                };
                let shift = if rows > 1 {
                    vec![self.t(rows * s.seq.saturating_sub(1), 8, What::Loss)]
                } else {
                    vec![]
                };
                (input, true, shift)
            }
        };
        let ls = {
            let mut y = self.t(input.n, 4, What::Loss);
            y.g = self
                .tp
                .node(Op::LogSoftmax, input.n, 4, &[Self::edge(&input)], &[y.t]);
            y
        };
        let mut loss = self.t(1, 4, What::Loss);
        let tw = self.t(1, 4, What::Loss);
        let mut saved = vec![ls.t];
        saved.extend(labels.last().map(|x| x.t));
        saved.push(tw.t);
        loss.g = self.tp.node(Op::NllLoss, 1, 4, &[Self::edge(&ls)], &saved);
        // `cross_entropy` returns: its log-softmax and total weight die (what the graph saves
        // lives on).
        self.drop(tw);
        self.drop(ls);
        if self.loss_over_items && self.tp.mode == Mode::NoGrad {
            // reduction="sum", then `loss / num_items_in_batch` (`loss_utils.py`,
            // fixed_cross_entropy).
            let div = self.t(1, 4, What::Loss);
            self.drop(loss);
            loss = div;
        }
        self.drop(f);
        if own {
            self.drop(input);
        }
        for x in labels {
            self.drop(x);
        }
        (loss.g, loss)
    }

    // ------------------------------------------------------------ backward

    fn backward(&mut self, root: G, loss: X) {
        // `loss.backward()` seeds a one of the loss's dtype: fp32, or FSDP2's output dtype.
        let seed_es = self.fsdp2_output_es().unwrap_or(4);
        let one = self.t(1, seed_es, What::Grad);
        self.tp.keep(one.t);
        self.tp.seed(root, one.t);
        let mut i = self.tp.node_count();
        let mut unit = None;
        self.fsdp2_backward_start();
        while i > 0 {
            i -= 1;
            if !self.tp.has_grad(i) {
                continue;
            }
            if self.fsdp2().is_some() {
                self.fsdp2_before_node(i, &mut unit);
            }
            if self.fsdp1().is_some() {
                self.fsdp1_before_node(i);
            }
            if let Some(l) = self.tp.needs_recompute(i) {
                self.recompute(l);
            }
            self.tp.run(i);
        }
        if self.fsdp2().is_some() {
            self.fsdp2_backward_end(unit, self.emb_leaf.is_some());
        }
        self.fsdp1_backward_end();
        self.tp.drop_t(one.t);
        self.ckpt_in.clear();
        // Parameter gradients: the first one for a parameter is stored as is.
        let pg = self.tp.take_param_grads();
        if crate::model::extended::EXTENDED {
            self.ddp_record_ready(&pg);
        }
        let mut leaf = vec![];
        for (p, t) in pg {
            if p >= super::tape::VISION_LEAF {
                leaf.push((p, t));
                continue;
            }
            match self.grads[p as usize] {
                None => self.grads[p as usize] = Some(t),
                Some(_) => self.tp.drop_t(t),
            }
        }
        // `del loss` frees the graph: the vision tower's leaf and the embedding leaf (each its
        // .grad first), saved tensors of nodes that never ran, then the loss itself.
        // (a tower is the full planner's, `extended::needed`)
        let tower_leaf = self
            .vision_leaf
            .take()
            .filter(|_| crate::model::extended::EXTENDED);
        for (which, x) in [
            (super::tape::VISION_LEAF, tower_leaf),
            (u32::MAX, self.emb_leaf.take()),
        ] {
            for &(_, t) in leaf.iter().filter(|(p, _)| *p == which) {
                self.tp.drop_t(t);
            }
            if let Some(x) = x {
                self.drop(x);
            }
        }
        self.vision_ckpt.clear();
        for x in std::mem::take(&mut self.graph_held) {
            self.drop(x);
        }
        self.tp.free_graph();
        self.drop(loss);
    }

    /// Recomputes checkpointed `layer` from its saved input until its last saved tensor exists.
    fn recompute(&mut self, layer: u32) {
        // (a tower is the full planner's, `extended::needed`)
        if crate::model::extended::EXTENDED && layer >= super::tape::TOWER_BLOCKS {
            self.recompute_tower_block(layer);
            return;
        }
        let Some((h, cos, sin, mask)) = self.ckpt_in.get(layer as usize).copied().flatten() else {
            return;
        };
        // An offloaded checkpoint input comes back to the GPU for the recomputation.
        let offloaded = self.ctx.s.parallel.offload_activations;
        let h = if offloaded {
            self.tp.layer = Some(layer);
            let mut back = self.t(h.n, h.es, What::Hidden);
            back.g = h.g;
            self.tp.mark_checkpoint(back.t);
            back
        } else {
            h
        };
        self.tp.begin_recompute(layer);
        self.tp.layer = Some(layer);
        let out = self.layer(h, layer as usize, cos, sin, mask);
        self.drop(out);
        self.clear_autocast_cache();
        self.tp.layer = None;
        self.tp.end_recompute();
        if offloaded {
            self.drop(h);
        }
    }

    // ----------------------------------------------------------- optimizer

    fn optimizer(&mut self, step: u8) {
        let s = self.ctx.s;
        // Under FSDP1 a parameter outside this rank's shard has no gradient: the optimizer
        // skips it (no state, no update).
        let tr: Vec<X> = self
            .trainable
            .iter()
            .map(|&p| self.opt_param(p))
            .filter(|x| self.fsdp1().is_none() || x.n > 0)
            .collect();
        let first = step == 1;
        match s.optimizer {
            Optimizer::AdamwTorchFused => {
                // step (a device scalar), exp_avg, exp_avg_sq per parameter; the fused kernel
                // updates in place.
                if first {
                    for x in &tr {
                        self.tp.on_behalf_of(x.t);
                        for (n, es) in [(1, 4), (x.n, x.es), (x.n, x.es)] {
                            let t = self.t(n, es, What::OptState);
                            self.states.push(t.t);
                        }
                    }
                }
            }
            Optimizer::AdamwTorchForeach | Optimizer::AdamwTorch => {
                if first {
                    for x in &tr {
                        self.tp.on_behalf_of(x.t);
                        for _ in 0..2 {
                            let t = self.t(x.n, x.es, What::OptState);
                            self.states.push(t.t);
                        }
                    }
                }
                // torch's default (`adamw_torch`) takes the foreach implementation for
                // parameters of the types it lists (`_default_to_fused_or_foreach`,
                // torch/optim/optimizer.py:170-193), FSDP2's DTensors among them
                // (torch/distributed/tensor/__init__.py:78).
                let foreach = s.optimizer == Optimizer::AdamwTorchForeach || self.fsdp2().is_some();
                if foreach {
                    // _foreach_sqrt(exp_avg_sqs): one list for all parameters, freed (as a
                    // Python list) from its end.
                    let list: Vec<X> = tr
                        .iter()
                        .map(|x| {
                            self.tp.on_behalf_of(x.t);
                            self.t(x.n, x.es, What::OptTemp)
                        })
                        .collect();
                    for x in list.into_iter().rev() {
                        self.drop(x);
                    }
                } else {
                    // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps), per
                    // parameter; the previous denom dies when the name is rebound.
                    let mut prev: Option<X> = None;
                    for x in &tr {
                        self.tp.on_behalf_of(x.t);
                        let sq = self.t(x.n, x.es, What::OptTemp);
                        let d = self.t(x.n, x.es, What::OptTemp);
                        self.drop(sq);
                        if let Some(p) = prev.replace(d) {
                            self.drop(p);
                        }
                    }
                    if let Some(p) = prev {
                        self.drop(p);
                    }
                }
            }
            Optimizer::SgdMomentum => {
                if first {
                    for x in &tr {
                        self.tp.on_behalf_of(x.t);
                        let b = self.t(x.n, x.es, What::OptState);
                        self.states.push(b.t);
                    }
                }
            }
            Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit => {
                if first {
                    self.bnb_adamw_states(&tr);
                }
            }
            // torchao's compiled update works in place ([`crate::model::torchao_adamw`]).
            Optimizer::AdamwTorch4bit | Optimizer::AdamwTorch8bit => {
                if first {
                    extended!(
                        self,
                        "torchao's low-bit AdamW",
                        self.torchao_adamw_states(&tr),
                        ()
                    );
                }
            }
            Optimizer::Adafactor => self.adafactor(&tr, first),
            Optimizer::Sgd => {}
        }
        self.tp.exec = NO_LAYER;
    }

    /// torchao's low-bit AdamW creating each parameter's states at the first step
    /// ([`crate::model::torchao_adamw`]): an extended op, unused in the first bundle.
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    fn torchao_adamw_states(&mut self, tr: &[X]) {
        let opt = self.ctx.s.optimizer;
        for x in tr {
            self.tp.on_behalf_of(x.t);
            for (values, es) in torchao_adamw::states(opt, x.n, x.es) {
                let t = self.t(values, es, What::OptState);
                self.states.push(t.t);
            }
        }
    }

    /// bitsandbytes' AdamW creating each parameter's states at the first step
    /// ([`crate::model::bnb_adamw`]): the quantization maps with the first 8-bit one, managed
    /// memory (outside the allocator) for a paged optimizer's large states.
    fn bnb_adamw_states(&mut self, tr: &[X]) {
        let opt = self.ctx.s.optimizer;
        let embedding = self.embed_trained.map(|p| p.x.t);
        let mut maps = false;
        for x in tr {
            self.tp.on_behalf_of(x.t);
            let is_embedding = embedding == Some(x.t);
            if !maps && bnb_adamw::eight_bit(opt, x.n, is_embedding) {
                maps = true;
                for _ in 0..2 {
                    let m = self.t(bnb_adamw::QMAP_VALUES, 4, What::OptState);
                    self.states.push(m.t);
                }
            }
            for b in bnb_adamw::states(opt, x.n, is_embedding) {
                if b.paged {
                    self.tp.paged(b.bytes());
                } else {
                    let t = self.t(b.values, b.bytes_per_value, What::OptState);
                    self.states.push(t.t);
                }
            }
        }
    }

    /// transformers' Adafactor (no first moment), parameter by parameter
    /// (`transformers/optimization.py`, `Adafactor.step`): a matrix's second moment factored
    /// into a row and a column vector, a vector's kept whole; a 16-bit parameter's gradient and
    /// the parameter itself are copied to fp32 for its update. The loop's locals (`grad`,
    /// `p_data_fp32`, `update`) die when the next parameter rebinds them, the last ones when
    /// `step()` returns.
    fn adafactor(&mut self, tr: &[X], first: bool) {
        if self.rms.len() < tr.len() {
            self.rms.resize(tr.len(), None);
        }
        let (mut prev_grad, mut prev_p32, mut prev_update): (Option<X>, Option<X>, Option<X>) =
            (None, None, None);
        for (i, x) in tr.iter().enumerate() {
            self.tp.on_behalf_of(x.t);
            let p = self
                .trainable
                .get(i)
                .map(|&k| self.opt_param(k))
                .unwrap_or(*x);
            let half = p.es != 4;
            // grad = p.grad, .float() for a 16-bit one
            if let Some(g) = prev_grad.take() {
                self.drop(g);
            }
            prev_grad = half.then(|| self.t(p.n, 4, What::OptTemp));
            // A matrix is factored (rows × last dimension); a vector is not (`cols` 0).
            let cols = self.cols_of(i);
            let factored = cols > 0;
            let cols = cols.max(1);
            let rows = (p.n / cols).max(1);
            if first {
                let shapes: &[u64] = if factored { &[rows, cols] } else { &[p.n] };
                for &k in shapes {
                    let st = self.t(k, 4, What::OptState);
                    self.states.push(st.t);
                }
            }
            // p_data_fp32 = p, .float() for a 16-bit one
            if let Some(q) = prev_p32.take() {
                self.drop(q);
            }
            prev_p32 = half.then(|| self.t(p.n, 4, What::OptTemp));
            // state["RMS"] = self._rms(p_data_fp32)
            let norm = self.t(1, 4, What::OptTemp);
            let rms = self.t(1, 4, What::OptState);
            self.drop(norm);
            if let Some(old) = self.rms[i].replace(rms) {
                self.drop(old);
            }
            // update = grad**2 + eps
            let pw = self.t(p.n, 4, What::OptTemp);
            let upd = self.t(p.n, 4, What::OptTemp);
            self.drop(pw);
            if let Some(u) = prev_update.take() {
                self.drop(u);
            }
            let u2 = if factored {
                for k in [rows, cols] {
                    let m = self.t(k, 4, What::OptTemp);
                    self.drop(m);
                }
                // _approx_sq_grad: row / row.mean(), rsqrt; col rsqrt; outer product
                let mm = self.t(1, 4, What::OptTemp);
                let rf = self.t(rows, 4, What::OptTemp);
                self.drop(mm);
                let cf = self.t(cols, 4, What::OptTemp);
                let u2 = self.t(p.n, 4, What::OptTemp);
                self.drop(rf);
                self.drop(cf);
                u2
            } else {
                // update = exp_avg_sq.rsqrt().mul_(grad)
                self.t(p.n, 4, What::OptTemp)
            };
            self.drop(upd);
            // update.div_((self._rms(update) / clip).clamp_(min=1.0))
            let n2 = self.t(1, 4, What::OptTemp);
            let d1 = self.t(1, 4, What::OptTemp);
            self.drop(n2);
            let d2 = self.t(1, 4, What::OptTemp);
            self.drop(d1);
            self.drop(d2);
            // p_data_fp32.add_(-update)
            let ng = self.t(p.n, 4, What::OptTemp);
            self.drop(ng);
            prev_update = Some(u2);
        }
        for x in [prev_grad, prev_p32, prev_update].into_iter().flatten() {
            self.drop(x);
        }
    }

    /// Columns (last dimension) of trainable parameter `i`.
    fn cols_of(&self, i: usize) -> u64 {
        self.param_cols.get(i).copied().unwrap_or(1)
    }

    fn zero_grad(&mut self) {
        // Under FSDP1 `zero_grad` lets the original parameters' views go, but each unit's flat
        // parameter keeps its sharded gradient until the next forward's start.
        if self.fsdp1().is_some() {
            return;
        }
        let tr = self.trainable.clone();
        self.release_grads(tr);
    }

    /// The gradients of parameters `ps` let go, in that order.
    fn release_grads(&mut self, ps: impl IntoIterator<Item = u32>) {
        for p in ps {
            if let Some(t) = self.grads[p as usize].take() {
                self.tp.drop_t(t);
            }
        }
    }
}

/// What a checkpointed layer's recomputation runs from: its input, the rotary tables and its
/// mask. The checkpoint keeps the layer's keyword arguments, so a recomputed sliding-window layer
/// sees the sliding mask even after forward has let it go.
type CkptIn = (X, X, X, Option<X>);

/// Runs setup, inputs and two training steps, then what runs after them (`AFTER`: an
/// [`job::After::code`], a constant so that each is generated on its own).
pub(super) fn run<const AFTER: u8>(
    ctx: &Ctx,
    device: super::Device,
    rank: super::rank::Rank,
    exact: bool,
) -> Result<Trace, PlanError> {
    let after = job::After::of_code(AFTER);
    let eval_s = (after == job::After::Eval).then(|| job::eval_settings(ctx.s));
    let eval_ctx = eval_s.as_ref().map(|s| Ctx::new(ctx.arch, s));
    // predict_with_generate: the evaluation's generate, over the eval batch's prompts.
    let eval_gen_s = eval_s
        .as_ref()
        .filter(|e| e.job.generates_in_eval())
        .map(|e| generate::contexts_of(e, e.batch, e.prompt_tokens()));
    let eval_gen_ctx = eval_gen_s
        .as_ref()
        .map(|(pre, dec)| (Ctx::new(ctx.arch, pre), Ctx::new(ctx.arch, dec)));
    // GRPO's generation on this GPU: the prefill's context (the prompts) and each new token's.
    let gen_s = (ctx.s.grpo() && ctx.s.generation == crate::model::settings::Generation::Hf)
        .then(|| generate::contexts(ctx.s));
    let gen_ctx = gen_s
        .as_ref()
        .map(|(pre, dec)| (Ctx::new(ctx.arch, pre), Ctx::new(ctx.arch, dec)));
    let mut p = Prog {
        ctx,
        tp: Tape::new(ctx.arch.num_hidden_layers),
        fsdp2: None,
        fsdp1: None,
        ddp: None,
        params: vec![],
        buffers: vec![],
        trainable: vec![],
        layers: vec![],
        moe: vec![],
        lm_head: None,
        embed_trained: None,
        states: vec![],
        phases: vec![],
        grads: vec![],
        ckpt_in: vec![],
        vision_leaf: None,
        packed_pos: None,
        neat_mask: None,
        vision_weights: vec![],
        vision_ckpt: vec![],
        emb_leaf: None,
        ac_cache: vec![],
        int8_idx: vec![],
        graph_held: vec![],
        sliding: None,
        rotary_global: None,
        router_logits: vec![],
        norms: vec![],
        final_norm: None,
        qk_norms: vec![],
        norm_queue: vec![],
        rms: vec![],
        param_cols: vec![],
        causal: None,
        adapters_off: false,
        ref_copy: false,
        keep_logits: false,
        kept_logits: None,
        qstates: vec![],
        strided_grad: false,
        vision_locals: Default::default(),
        extended: None,
        rope_deltas: None,
        embed_ids: None,
        gen: None,
        exact_generation: exact,
        loss_over_items: false,
    };
    p.tp.emulated = device == super::Device::Emulated;
    if crate::model::extended::EXTENDED && ctx.s.fsdp1_op_by_op(ctx.arch) {
        let mixed = ctx.s.autocast.map(bytes);
        let root_padded = p.tp.new_resizable_t(0, What::GatheredRoot);
        p.fsdp1 = Some(fsdp1::Fsdp1::new(
            u64::try_from(ctx.s.parallel.world()).unwrap_or(u64::MAX),
            mixed,
            rank.weight_scale(),
            root_padded,
        ));
    } else if crate::model::extended::EXTENDED && ctx.s.fsdp2_op_by_op(ctx.arch) {
        p.fsdp2 = Some(fsdp2::Fsdp2::new(
            u64::try_from(ctx.s.parallel.world()).unwrap_or(u64::MAX),
            Prog::fsdp2_param_es(ctx.s),
            ctx.arch.num_hidden_layers,
            ctx.arch.tie_word_embeddings,
            ctx.s.fsdp2_layer_units(),
            rank.weight_scale(),
        ));
    } else {
        p.tp.set_rank(rank);
    }
    p.tp.workspace_bytes = ctx
        .s
        .cublas_workspace_bytes()
        .unwrap_or(crate::model::settings::DEFAULT_CUBLAS_WORKSPACE_BYTES);
    p.phase(0, StepPhase::Setup);
    p.setup();
    p.phase(0, StepPhase::Inputs);
    let pref = ctx.s.preference();
    let fused_sft = ctx.s.sft_fused_head();
    let grpo = ctx.s.grpo();
    if grpo {
        // GRPO's batches are made by each step's scoring.
    } else if fused_sft {
        // TRL's collator: input ids, labels and an attention mask, as a preference batch's.
        extended!(p, "TRL's fused LM head", p.pref_inputs(), ());
    } else if pref {
        extended!(p, "preference training", p.pref_inputs(), ());
        if ctx.s.uses_reference() && ctx.s.precompute_ref_log_probs {
            extended!(p, "preference training", p.precompute(), ());
        }
    } else {
        p.inputs();
    }
    // Without the extended ops a GRPO step is refused up front (`model::extended`).
    #[cfg_attr(not(feature = "extended-ops"), allow(unused_mut))]
    let mut rollout: Option<grpo::Rollout> = None;
    for step in 1..=2u8 {
        if let Some((pre, dec)) = &gen_ctx {
            extended!(p, "GRPO", p.grpo_generate(step, pre, dec), {
                let _ = (pre, dec);
            });
        } else if grpo && ctx.s.vllm_syncs_adapters() {
            extended!(p, "GRPO", p.vllm_weight_sync(step), ());
        }
        if grpo {
            extended!(
                p,
                "GRPO",
                {
                    let r = p.grpo_score(step);
                    if let Some(last) = rollout.replace(r) {
                        p.grpo_release(last);
                    }
                },
                ()
            );
        }
        p.phase(step, StepPhase::Forward);
        if crate::model::extended::EXTENDED && !grpo && !pref && !fused_sft {
            p.ddp_pre_forward();
        }
        let (root, loss) = if let Some(r) = rollout.as_ref().filter(|_| grpo) {
            extended!(p, "GRPO", p.grpo_forward(r), {
                let _ = r;
                p.forward()
            })
        } else if pref {
            extended!(p, "preference training", p.pref_forward(step), p.forward())
        } else if fused_sft {
            extended!(p, "TRL's fused LM head", p.sft_fused_forward(), p.forward())
        } else {
            p.forward()
        };
        p.phase(step, StepPhase::Backward);
        p.backward(root, loss);
        p.phase(step, StepPhase::Optimizer);
        p.optimizer(step);
        p.phase(step, StepPhase::ZeroGrad);
        p.zero_grad();
    }
    if let Some(e) = &eval_ctx {
        p.eval_loop(e, eval_gen_ctx.as_ref());
    }
    if after == job::After::Merge {
        p.merge();
    }
    if let Some(ops) = p.extended.filter(|_| !crate::model::extended::EXTENDED) {
        return Err(PlanError::Unbundled { ops });
    }
    let peak = p.tp.peak;
    let _ = Event::Free { id: 0 };
    Ok(Trace {
        extended: p.extended,
        events: p.tp.events,
        event_tags: p.tp.event_tags,
        labels: p.tp.labels,
        phases: p.phases,
        peak_live_bytes: peak,
        device,
        host: What::ALL
            .iter()
            .map(|&w| (w, p.tp.host_peak_by[w as usize]))
            .filter(|h| h.1 > 0)
            .collect(),
        paged_bytes: p.tp.paged_bytes,
    })
}
