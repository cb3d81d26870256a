//! What autograd keeps alive for backward, tensor by tensor, as transformers + peft + PyTorch
//! build a LoRA training step. Every rule here follows from an op's derivative formula (which
//! inputs or outputs it saves) and the dtype each tensor has; none is fitted per model.
//!
//! Key facts (see `shared/MEMORY-FACTS.md`):
//! - Frozen Linear layers save nothing for their own weight; RMSNorm saves an fp32 copy of its input.
//! - peft casts each adapted layer's input to the adapter dtype; with dropout it keeps the dropout
//!   output and a 1-byte mask per adapted module; lora_A / lora_B save their inputs.
//! - Layer 0's input (the frozen embedding) needs no gradient unless gradient checkpointing calls
//!   `enable_input_require_grads`, so layer 0 keeps no dropout masks for q/k/v and its first norm
//!   saves nothing.
//! - Under autocast, matmul inputs are cast and the casts are kept for backward; a frozen fp32
//!   weight gets a fresh low-precision copy at every use.

use super::arch::{Architecture, AttentionKind, LayerKind, LinearShape};
use super::dtype::Dtype;
use super::settings::{AttnImpl, SavedModule, Settings};
use super::term::{bytes_of, f, Component, Factor, Term};

mod experts;

pub use experts::{
    checkpointed_mask_terms, expert_param_shape, moe_backward_working, router_logit_terms,
};

/// Dtypes and sizes that every activation rule needs, derived once from arch + settings.
#[derive(Clone, Debug)]
pub struct Ctx<'a> {
    /// Architecture.
    pub arch: &'a Architecture,
    /// Settings.
    pub s: &'a Settings,
    /// Residual-stream dtype (fp32 for 4-bit after prepare_model_for_kbit_training).
    pub resid: Dtype,
    /// Dtype of a Linear module's output after peft casts it back.
    pub module_out: Dtype,
    /// Dtype attention computes in (after autocast's cast).
    pub attn: Dtype,
    /// Dtype of lm_head's output logits.
    pub logits: Dtype,
    /// Dtype of the frozen Linear weights (None when 4-bit).
    pub linear_weight: Option<Dtype>,
    /// Dtype of lm_head / embedding / norm weights.
    pub aux_weight: Dtype,
    /// Dtype of the fused expert weights, and of the experts' computation (`grouped_mm` runs
    /// in the weights' dtype): not `nn.Linear`, so never 4-bit; fp32 after
    /// `prepare_model_for_kbit_training`. Per-expert `nn.Linear` layers (transformers 4): their
    /// output dtype, as any Linear's.
    pub expert: Dtype,
    /// Dtype of the router logits.
    pub router_logits: Dtype,
    /// Dtype of the routing weights the expert outputs are multiplied by.
    pub routing: Dtype,
}

impl<'a> Ctx<'a> {
    /// Derives the dtypes of the step.
    pub fn new(arch: &'a Architecture, s: &'a Settings) -> Ctx<'a> {
        let kbit = s.quant.is_some() && s.prepare_kbit;
        let aux_weight = if kbit { Dtype::Fp32 } else { s.dtype };
        let resid = aux_weight;
        // bitsandbytes casts a 4-bit layer's output back to its input dtype, even under autocast.
        let module_out = match (s.quant, s.autocast) {
            (Some(_), _) => resid,
            (None, Some(ac)) => ac,
            (None, None) => resid,
        };
        let rope_out = module_out.promote(resid);
        let attn = s.autocast.unwrap_or(rope_out);
        let logits = s.autocast.unwrap_or(aux_weight);
        let linear_weight = if s.quant.is_some() {
            None
        } else {
            Some(s.dtype)
        };
        let moe = arch.moe_layout();
        let router_in = if moe.is_some_and(|m| m.fp32_router) {
            Dtype::Fp32
        } else {
            resid
        };
        let router_logits = s.autocast.unwrap_or(router_in);
        let routing = if moe.is_some_and(|m| m.fp32_routing) {
            Dtype::Fp32
        } else {
            router_logits
        };
        Ctx {
            arch,
            s,
            resid,
            module_out,
            attn,
            logits,
            linear_weight,
            aux_weight,
            // Per-expert nn.Linear layers compute like any Linear (autocast, bitsandbytes'
            // cast back); fused experts compute in their weights' dtype.
            expert: match s.experts_layout {
                super::settings::ExpertsLayout::PerExpert => module_out,
                super::settings::ExpertsLayout::Fused => aux_weight,
            },
            router_logits,
            routing,
        }
    }

    /// Tokens of the micro-batch.
    pub fn tokens(&self) -> u128 {
        self.s.tokens()
    }

    fn h(&self) -> u128 {
        self.arch.hidden_size as u128
    }
    fn inter(&self) -> u128 {
        self.arch.intermediate_size as u128
    }
    fn heads(&self) -> u128 {
        self.arch.num_attention_heads as u128
    }

    /// Linear layers of a block that LoRA adapts.
    pub fn adapted(&self) -> Vec<LinearShape> {
        self.adapted_of(LayerKind::Dense)
    }

    /// Linear layers LoRA adapts in a decoder layer of `kind`.
    pub fn adapted_of(&self, kind: LayerKind) -> Vec<LinearShape> {
        if self.s.base_trained() {
            return vec![];
        }
        self.arch
            .block_linears(kind)
            .into_iter()
            .filter(|l| l.selected_by.iter().any(|t| self.s.targets.contains(t)))
            .collect()
    }

    fn dropout(&self) -> bool {
        self.s.lora_dropout > 0.0
    }

    /// Whether the sequence reaches the family's sliding window, so that sdpa needs the sliding
    /// mask materialised (Gemma 2: 4096; Gemma 3: 512 at 1B, 1024 above).
    pub fn sliding_window_reached(&self) -> bool {
        self.arch
            .sliding_window_tokens()
            .is_some_and(|w| self.s.seq >= w)
    }

    /// The 4-D mask transformers materialises for sdpa (`sdpa_mask`): for a padded batch, one for
    /// every layer; else, once the sequence reaches the window, the sliding-window layers' (Gemma).
    /// Eager builds its own additive masks; flash-attention-2 takes no 4-D mask (it is causal
    /// and windowed by itself, and a padded batch passes the 2-D `attention_mask`).
    pub fn sdpa_mask(&self) -> SdpaMask {
        if self.s.attn_impl != AttnImpl::Sdpa {
            SdpaMask::None
        } else if self.s.padded_mask {
            SdpaMask::Padded
        } else if self.sliding_window_reached() {
            SdpaMask::Sliding
        } else {
            SdpaMask::None
        }
    }

    /// Of layers `from..to`, how many give sdpa a materialised 4-D mask ([`Self::sdpa_mask`]).
    pub fn masked_layers(&self, from: u64, to: u64) -> u128 {
        match (self.sdpa_mask(), self.arch.family.layout().sliding) {
            (SdpaMask::Padded, _) => to.saturating_sub(from) as u128,
            (SdpaMask::Sliding, Some(w)) => (from..to).filter(|&li| w.local(li)).count() as u128,
            _ => 0,
        }
    }

    /// Whether eager attention's `matmul(p, v)` keeps a copy of v rather than v itself: it runs
    /// as a bmm over `v.reshape(batch × heads, seq, head_dim)`, and v — the (b, s, h, d)
    /// projection seen as (b, h, s, d) — merges into one batch dimension only with one row or one
    /// head; with GQA, repeat_kv's output is already contiguous.
    pub fn eager_matmul_copies_v(&self) -> bool {
        let heads = self.arch.num_attention_heads;
        let rep = heads / self.arch.kv_heads().max(1);
        rep == 1 && self.s.batch > 1 && heads > 1
    }

    fn efficient_kernel(&self) -> bool {
        self.s.attn_impl == AttnImpl::Sdpa && (self.attn == Dtype::Fp32 || self.s.padded_mask)
    }
}

/// Which 4-D mask sdpa is given ([`Ctx::sdpa_mask`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdpaMask {
    /// None is materialised.
    None,
    /// The padded batch's mask, shared by every layer.
    Padded,
    /// The sliding-window mask of the local layers.
    Sliding,
}

fn tok(ctx: &Ctx) -> Factor {
    f("tokens", ctx.tokens())
}

fn by(d: Dtype) -> Factor {
    bytes_of(d.bytes())
}

/// How many layers a per-layer term applies to.
#[derive(Clone, Copy, Debug)]
pub struct LayerCounts {
    /// All layers counted.
    pub all: u128,
    /// Layers whose input requires grad (layer 0 does not without checkpointing).
    pub grad_input: u128,
    /// Of `all`, the layers with a router and experts (0 for dense families).
    pub moe: u128,
    /// Of `all`, the layers whose sdpa gets a materialised mask ([`Ctx::masked_layers`]).
    pub masked: u128,
}

/// Input of an adapted module inside the block: (dtype, requires grad, shared group id).
fn module_input(ctx: &Ctx, l: &LinearShape) -> (Dtype, bool, &'static str) {
    match l.name {
        "q_proj" | "k_proj" | "v_proj" | "qkv_proj" | "q_a_proj" | "kv_a_proj_with_mqa" => {
            (ctx.resid, false, "attention-norm output")
        }
        "q_b_proj" => (ctx.resid, true, "q_a_layernorm output"),
        "kv_b_proj" => (ctx.resid, true, "kv_a_layernorm output"),
        "o_proj" => (ctx.attn, true, "attention output"),
        "gate_proj" | "up_proj" | "gate_up_proj" => (ctx.resid, true, "MLP-norm output"),
        _ => (ctx.module_out, true, "MLP product"),
    }
}

/// The per-layer factors every layer rule multiplies by.
struct Layer<'c, 'a> {
    ctx: &'c Ctx<'a>,
    /// `layers`: all layers counted.
    layers: Factor,
    /// `layers` or `(layers − 1)`: layers whose input requires grad.
    glayers: Factor,
    /// Appended to labels of per-group terms (MoE families: which layers or modules).
    scope: &'static str,
    /// Of the counted layers, those whose sdpa gets a materialised mask.
    masked: u128,
}

fn scoped(label: &str, scope: &str) -> String {
    format!("{label}{scope}")
}

/// Saved tensors of decoder layers (per-layer terms already multiplied by the layer counts):
/// norms, attention, MLP, the LoRA path and autocast weight copies.
pub fn layer_terms(ctx: &Ctx, n: LayerCounts) -> Vec<Term> {
    let glayers_name = if n.grad_input == n.all {
        "layers"
    } else {
        "(layers − 1)"
    };
    let l = Layer {
        ctx,
        layers: f("layers", n.all),
        glayers: f(glayers_name, n.grad_input),
        scope: "",
        masked: n.masked,
    };
    let mut out = vec![];
    norm_terms(&l, &mut out);
    match ctx.arch.family.layout().attention {
        AttentionKind::Standard => attention_terms(&l, &mut out),
        AttentionKind::Latent => experts::latent_attention_terms(&l, &mut out),
        AttentionKind::Sinks => experts::sink_attention_terms(&l, &mut out),
    }
    if !ctx.arch.is_moe() {
        mlp_terms(&l, ctx.inter(), &mut out);
        lora_terms(&l, ctx.adapted(), &mut out);
        weight_copy_terms(&l, ctx.arch.linear_weight_params_per_layer(), &mut out);
    } else {
        moe_family_layer_terms(&l, n, &mut out);
    }
    out.retain(|t| t.bytes > 0);
    out
}

/// The layer terms of an MoE family past attention: dense MLPs in the dense layers, router,
/// experts (and shared experts) in the MoE layers, the LoRA path of each group of modules, and
/// autocast weight copies.
fn moe_family_layer_terms(l: &Layer, n: LayerCounts, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let a = ctx.arch;
    let dense = n.all - n.moe;
    let is_ffn = |m: &LinearShape| {
        m.selected_by.iter().any(|t| {
            matches!(
                t,
                super::arch::Target::Gate | super::arch::Target::Up | super::arch::Target::Down
            )
        })
    };
    let ffn_of = |kind: LayerKind| -> Vec<LinearShape> {
        ctx.adapted_of(kind)
            .into_iter()
            .filter(|m| is_ffn(m))
            .collect()
    };
    let attention_params: u128 = a
        .attention_linears()
        .iter()
        .map(|m| m.in_features * m.out_features)
        .sum();
    let attn_l = Layer {
        ctx,
        layers: l.layers.clone(),
        glayers: l.glayers.clone(),
        scope: " (attention)",
        masked: l.masked,
    };
    let attn_modules: Vec<LinearShape> = ctx
        .adapted_of(LayerKind::Dense)
        .into_iter()
        .filter(|m| !is_ffn(m))
        .collect();
    lora_terms(&attn_l, attn_modules, out);
    weight_copy_terms(&attn_l, attention_params, out);
    if dense > 0 {
        let dense_l = Layer {
            ctx,
            layers: f("dense layers", dense),
            glayers: f("dense layers", dense),
            scope: " (dense MLP layers)",
            masked: 0,
        };
        mlp_terms(&dense_l, ctx.inter(), out);
        lora_terms(&dense_l, ffn_of(LayerKind::Dense), out);
        let p = a.block_linear_params(LayerKind::Dense) - attention_params;
        weight_copy_terms(&dense_l, p, out);
    }
    if n.moe > 0 {
        let moe_l = Layer {
            ctx,
            layers: f("MoE layers", n.moe),
            glayers: f("MoE layers", n.moe),
            scope: " (shared experts)",
            masked: 0,
        };
        if a.shared_width() > 0 {
            mlp_terms(&moe_l, a.shared_width(), out);
            lora_terms(&moe_l, ffn_of(LayerKind::Moe), out);
            let p = a.block_linear_params(LayerKind::Moe) - attention_params;
            weight_copy_terms(&moe_l, p, out);
        }
        let moe_l = Layer {
            scope: " (MoE layers)",
            ..moe_l
        };
        experts::moe_terms(&moe_l, out);
    }
}

/// RMSNorms: an fp32 copy of the input + rsqrt per token.
fn norm_terms(l: &Layer, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let a = ctx.arch;
    let h = ctx.h();
    let heads = ctx.heads();
    let qd = a.q_dim();
    let kvd = a.kv_dim();
    let layers = l.layers.clone();
    let glayers = l.glayers.clone();
    let fp32 = bytes_of(4);

    // --- Norms: fp32 copy of the input + rsqrt per token.
    out.push(Term::product(
        Component::ActNorms,
        "input RMSNorm: fp32 input copy + rsqrt",
        &[
            glayers.clone(),
            tok(ctx),
            f("(hidden + 1)", h + 1),
            fp32.clone(),
        ],
    ));
    let other_norms = a.family.norms_per_layer() - 1;
    out.push(Term::product(
        Component::ActNorms,
        if other_norms == 1 {
            "post-attention RMSNorm: fp32 input copy + rsqrt"
        } else {
            "other RMSNorms (post-attn, pre/post-FFN): fp32 input copy + rsqrt"
        },
        &[
            layers.clone(),
            f("norms", other_norms),
            tok(ctx),
            f("(hidden + 1)", h + 1),
            fp32.clone(),
        ],
    ));
    if a.family.layout().qk_norm == crate::model::arch::QkNorm::Whole {
        // OLMoE: q_norm / k_norm over the whole projection, before the view into heads.
        out.push(Term::product(
            Component::ActNorms,
            "q/k RMSNorm over the whole projections: fp32 copies + rsqrt",
            &[
                layers.clone(),
                tok(ctx),
                f("(q_dim + kv_dim + 2)", qd + kvd + 2),
                fp32.clone(),
            ],
        ));
    } else if a.family.has_qk_norm() {
        let kvh = a.kv_heads() as u128;
        out.push(Term::product(
            Component::ActNorms,
            "q/k RMSNorm: fp32 copies + rsqrt",
            &[
                layers.clone(),
                tok(ctx),
                f(
                    "(q_dim + kv_dim + heads + kv_heads)",
                    qd + kvd + heads + kvh,
                ),
                fp32.clone(),
            ],
        ));
    }
    if let Some(m) = a.mla() {
        // kv_a_layernorm (and q_a_layernorm): their inputs need a gradient in every layer when
        // the projection before them is adapted, else only above the first layer.
        let adapted = ctx.adapted();
        let kv_a = adapted.iter().any(|x| x.name == "kv_a_proj_with_mqa");
        out.push(Term::product(
            Component::ActNorms,
            "kv_a_layernorm: fp32 input copy + rsqrt",
            &[
                if kv_a {
                    layers.clone()
                } else {
                    glayers.clone()
                },
                tok(ctx),
                f("(kv_lora_rank + 1)", m.kv_rank + 1),
                fp32.clone(),
            ],
        ));
        if let Some(qr) = m.q_rank {
            let q_a = adapted.iter().any(|x| x.name == "q_a_proj");
            out.push(Term::product(
                Component::ActNorms,
                "q_a_layernorm: fp32 input copy + rsqrt",
                &[
                    if q_a { layers.clone() } else { glayers.clone() },
                    tok(ctx),
                    f("(q_lora_rank + 1)", qr + 1),
                    fp32.clone(),
                ],
            ));
        }
    }
}

/// Attention: q, k, v (repeated for eager / masked kernels), scores or output + logsumexp.
fn attention_terms(l: &Layer, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let a = ctx.arch;
    let heads = ctx.heads();
    let qd = a.q_dim();
    let kvd = a.kv_dim();
    let b = ctx.s.batch as u128;
    let t = ctx.s.seq as u128;
    let layers = l.layers.clone();
    let fp32 = bytes_of(4);

    // --- Attention.
    let ad = ctx.attn;
    let expand = match ctx.s.attn_impl {
        AttnImpl::Eager => true,
        AttnImpl::Sdpa => ctx.s.padded_mask,
        AttnImpl::FlashAttention2 => false,
    };
    let kv_saved = if expand { qd } else { kvd };
    out.push(Term::product(
        Component::ActAttention,
        if expand && kvd != qd {
            "q, and k, v repeated to all heads (repeat_kv)"
        } else {
            "q (after RoPE), k (after RoPE), v"
        },
        &[
            layers.clone(),
            tok(ctx),
            f(
                if expand {
                    "(q_dim + 2 × q_dim)"
                } else {
                    "(q_dim + 2 × kv_dim)"
                },
                qd + 2 * kv_saved,
            ),
            by(ad),
        ],
    ));
    // A fused qkv_proj (Phi-3): q, k, v are sliced out of one output. Where the kernel saves v
    // as that view, the whole fused output stays alive (its q and k parts on top of the rotated
    // copies counted above); repeat_kv's copy (GQA with a mask or eager) or the copy eager's
    // matmul makes of v for more than one row (`v.reshape(batch × heads, …)`) frees it.
    let rep = heads / (a.kv_heads() as u128).max(1);
    let v_is_view = match ctx.s.attn_impl {
        AttnImpl::Eager => rep == 1 && !ctx.eager_matmul_copies_v(),
        AttnImpl::Sdpa | AttnImpl::FlashAttention2 => !(ctx.s.padded_mask && rep > 1),
    };
    if a.family.layout().fused_projections && v_is_view {
        out.push(Term::product(
            Component::ActAttention,
            "rest of the fused qkv output kept alive by the v view",
            &[
                layers.clone(),
                tok(ctx),
                f("(q_dim + kv_dim)", qd + kvd),
                by(ctx.module_out),
            ],
        ));
    }
    if l.masked > 0 {
        // sdpa takes a boolean 4-D mask (padding, or Gemma's sliding window) as an additive bias
        // in the attention dtype, made in every layer and saved by the kernel (measured:
        // tests/data/reference/crosscheck).
        out.push(Term::product(
            Component::ActAttention,
            "attention mask as an additive bias, one per layer (saved by sdpa)",
            &[
                f("masked layers", l.masked),
                f("batch", b),
                f("seq", t),
                f("seq", t),
                by(ad),
            ],
        ));
    }
    match ctx.s.attn_impl {
        AttnImpl::Eager => {
            let probs_bytes = 4 + ad.bytes() + if a.attn_softcap() { ad.bytes() } else { 0 };
            out.push(Term::product(
                Component::ActAttention,
                if a.attn_softcap() {
                    "eager scores: softmax fp32 + probabilities + softcap tanh (O(S²))"
                } else {
                    "eager scores: softmax fp32 + probabilities (O(S²))"
                },
                &[
                    layers.clone(),
                    f("batch", b),
                    f("heads", heads),
                    f("seq", t),
                    f("seq", t),
                    bytes_of(probs_bytes),
                ],
            ));
        }
        AttnImpl::Sdpa | AttnImpl::FlashAttention2 => {
            out.push(Term::product(
                Component::ActAttention,
                "attention output",
                &[layers.clone(), tok(ctx), f("q_dim", qd), by(ad)],
            ));
            let rows = if ctx.efficient_kernel() {
                t.div_ceil(32) * 32
            } else {
                t
            };
            out.push(Term::product(
                Component::ActAttention,
                if ctx.efficient_kernel() {
                    "logsumexp (rows padded to 32)"
                } else {
                    "logsumexp"
                },
                &[
                    layers.clone(),
                    f("batch", b),
                    f("heads", heads),
                    f(
                        if ctx.efficient_kernel() {
                            "seq₃₂"
                        } else {
                            "seq"
                        },
                        rows,
                    ),
                    fp32.clone(),
                ],
            ));
        }
    }
}

/// MLP: gate output (saved by the activation), activation output and up output (saved by mul).
fn mlp_terms(l: &Layer, i: u128, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let a = ctx.arch;
    let layers = l.layers.clone();

    // --- MLP: gate output (saved by the activation), activation output and up output (saved by mul).
    out.push(Term::product(
        Component::ActMlp,
        scoped(
            if a.family.gelu() {
                "gate, GeLU(gate), up"
            } else {
                "gate, SiLU(gate), up"
            },
            l.scope,
        ),
        &[
            layers.clone(),
            f("3", 3),
            tok(ctx),
            f(
                if a.shared_width() == i && l.scope.contains("shared") {
                    "shared width"
                } else {
                    "intermediate"
                },
                i,
            ),
            by(ctx.module_out),
        ],
    ));
}

/// Sums over the adapted Linear layers of one block.
struct Adapted {
    modules: Vec<LinearShape>,
    sum_in: u128,
    /// Σ in_features of modules whose input needs a gradient.
    sum_in_grad: u128,
    sum_out: u128,
}

/// The peft LoRA path: dropout outputs and masks, adapter-dtype input copies, lora_A outputs,
/// autocast copies.
fn lora_terms(l: &Layer, modules: Vec<LinearShape>, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    if modules.is_empty() {
        return;
    }
    let a = Adapted {
        sum_in: modules.iter().map(|m| m.in_features).sum(),
        sum_in_grad: modules
            .iter()
            .filter(|m| module_input(ctx, m).1)
            .map(|m| m.in_features)
            .sum(),
        sum_out: modules.iter().map(|m| m.out_features).sum(),
        modules,
    };
    match ctx.s.autocast {
        None => lora_plain_terms(l, &a, out),
        Some(ac) => lora_autocast_terms(l, &a, ac, out),
    }
}

/// native_dropout keeps a 1-byte mask only when its input needs a gradient (q/k/v of layer 0 do
/// not without checkpointing).
fn dropout_mask_terms(l: &Layer, a: &Adapted, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let sum_in_nograd = a.sum_in - a.sum_in_grad;
    out.push(Term::product(
        Component::ActDropout,
        scoped("dropout masks (1 B), inputs needing grad", l.scope),
        &[
            l.layers.clone(),
            tok(ctx),
            f("Σ in_features", a.sum_in_grad),
            bytes_of(1),
        ],
    ));
    if sum_in_nograd > 0 {
        out.push(Term::product(
            Component::ActDropout,
            scoped(
                "dropout masks of q/k/v (1 B), layers after the first",
                l.scope,
            ),
            &[
                l.glayers.clone(),
                tok(ctx),
                f("Σ in_features(q,k,v)", sum_in_nograd),
                bytes_of(1),
            ],
        ));
    }
}

/// Without autocast: dropout outputs (or adapter-dtype input copies), lora_A outputs.
fn lora_plain_terms(l: &Layer, a: &Adapted, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let layers = l.layers.clone();
    let (sum_in, r, lora) = (a.sum_in, ctx.s.lora_r as u128, ctx.s.adapter_dtype);
    let adapted = &a.modules;
    let modules = adapted.len() as u128;
    if ctx.dropout() {
        out.push(Term::product(
            Component::ActDropout,
            scoped(
                "dropout outputs in adapter dtype, one per adapted module",
                l.scope,
            ),
            &[
                layers.clone(),
                tok(ctx),
                f("Σ in_features", sum_in),
                by(lora),
            ],
        ));
        dropout_mask_terms(l, a, out);
    } else {
        // Cast copies per module when the input is not already in the adapter dtype;
        // otherwise lora_A saves the (shared) input itself, once per distinct input.
        let mut cast_in = 0u128;
        let mut shared: Vec<(&str, u128)> = vec![];
        for l in adapted {
            let (dt, _, group) = module_input(ctx, l);
            if dt != lora {
                cast_in += l.in_features;
            } else if !shared.iter().any(|(g, _)| *g == group) {
                shared.push((group, l.in_features));
            }
        }
        if cast_in > 0 {
            out.push(Term::product(
                Component::ActLora,
                scoped(
                    "adapter-dtype copies of module inputs, one per adapted module",
                    l.scope,
                ),
                &[
                    layers.clone(),
                    tok(ctx),
                    f("Σ in_features", cast_in),
                    by(lora),
                ],
            ));
        }
        let shared_in: u128 = shared.iter().map(|(_, w)| w).sum();
        if shared_in > 0 {
            out.push(Term::product(
                Component::ActLora,
                scoped(
                    "module inputs kept by lora_A (shared by modules reading the same input)",
                    l.scope,
                ),
                &[
                    layers.clone(),
                    tok(ctx),
                    f("Σ distinct in_features", shared_in),
                    by(lora),
                ],
            ));
        }
    }
    out.push(Term::product(
        Component::ActLora,
        scoped("lora_A outputs (saved by lora_B)", l.scope),
        &[
            layers.clone(),
            tok(ctx),
            f("modules", modules),
            f("rank", r),
            by(lora),
        ],
    ));
}

/// Under autocast: masks, autocast copies of lora_A inputs, lora_A outputs, adapter weight copies.
fn lora_autocast_terms(l: &Layer, a: &Adapted, ac: Dtype, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let layers = l.layers.clone();
    let (sum_in, sum_out, r) = (a.sum_in, a.sum_out, ctx.s.lora_r as u128);
    let modules = a.modules.len() as u128;
    if ctx.dropout() {
        dropout_mask_terms(l, a, out);
    }
    out.push(Term::product(
        Component::ActLora,
        scoped("autocast copies of lora_A inputs", l.scope),
        &[layers.clone(), tok(ctx), f("Σ in_features", sum_in), by(ac)],
    ));
    out.push(Term::product(
        Component::ActLora,
        scoped("lora_A outputs (autocast dtype)", l.scope),
        &[
            layers.clone(),
            tok(ctx),
            f("modules", modules),
            f("rank", r),
            by(ac),
        ],
    ));
    out.push(Term::product(
        Component::ActWeightCopies,
        scoped("autocast copies of the LoRA A and B weights", l.scope),
        &[
            layers.clone(),
            f("rank", r),
            f("Σ (in + out)", sum_in + sum_out),
            by(ac),
        ],
    ));
}

/// Autocast copies of frozen Linear weights that are not in the autocast dtype already.
fn weight_copy_terms(l: &Layer, linear_params: u128, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let layers = l.layers.clone();

    // Autocast copies of frozen weights (every Linear, adapted or not) when they are not in the
    // autocast dtype already: each use makes a fresh copy, which matmul keeps for backward.
    if let (Some(ac), Some(w)) = (ctx.s.autocast, ctx.linear_weight) {
        if w != ac {
            out.push(Term::product(
                Component::ActWeightCopies,
                scoped("autocast copies of frozen Linear weights", l.scope),
                &[
                    layers.clone(),
                    f("linear params per layer", linear_params),
                    by(ac),
                ],
            ));
        }
    }
}

/// The rotary tables the layers share: cos + sin (gpt-oss: of half the head width), or
/// DeepSeek's complex `freqs_cis`.
fn rotary_term(ctx: &Ctx) -> Term {
    let a = ctx.arch;
    let t = ctx.s.seq as u128;
    match a.family.layout().attention {
        AttentionKind::Latent => Term::product(
            Component::ActEmbeddings,
            "rotary freqs_cis (complex64)",
            &[
                f("seq", t),
                f("rope_head_dim / 2", a.head_dim() as u128 / 2),
                bytes_of(8),
            ],
        ),
        AttentionKind::Sinks => Term::product(
            Component::ActEmbeddings,
            "rotary cos + sin tables (half the head width)",
            &[
                f("2", 2),
                f("seq", t),
                f("head_dim / 2", a.head_dim() as u128 / 2),
                by(ctx.resid),
            ],
        ),
        AttentionKind::Standard => Term::product(
            Component::ActEmbeddings,
            "rotary cos + sin tables",
            &[
                f("2", 2),
                f("seq", t),
                f("head_dim", a.head_dim() as u128),
                by(ctx.resid),
            ],
        ),
    }
}

/// Saved tensors outside the decoder layers that live through forward and backward.
pub fn global_terms(ctx: &Ctx) -> Vec<Term> {
    let a = ctx.arch;
    let h = ctx.h();
    let mut out = vec![
        Term::product(
            Component::ActEmbeddings,
            "input_ids + labels (int64)",
            &[f("2", 2), tok(ctx), bytes_of(8)],
        ),
        rotary_term(ctx),
        Term::product(
            Component::ActNorms,
            "final RMSNorm: fp32 input copy + rsqrt",
            &[tok(ctx), f("(hidden + 1)", h + 1), bytes_of(4)],
        ),
    ];
    if ctx.s.padded_mask {
        out.push(Term::product(
            Component::ActEmbeddings,
            "attention_mask (int64)",
            &[tok(ctx), bytes_of(8)],
        ));
    }
    if let Some(ac) = ctx.s.autocast {
        if ctx.aux_weight != ac {
            out.push(Term::product(
                Component::ActWeightCopies,
                "autocast copy of the lm_head weight",
                &[f("vocab", a.vocab_size as u128), f("hidden", h), by(ac)],
            ));
        }
    }
    if ctx.s.modules_to_save.contains(&SavedModule::LmHead) {
        out.push(Term::product(
            Component::ActEmbeddings,
            "lm_head input (saved for the trainable lm_head's gradient)",
            &[
                tok(ctx),
                f("hidden", h),
                by(ctx.s.autocast.unwrap_or(ctx.resid)),
            ],
        ));
    }
    out.retain(|t| t.bytes > 0);
    out
}

/// Eager attention's softmax backward in one decoder layer (the top one, back-propagated first):
/// what of the layer is still saved once its MLP, o_proj and `probs @ v` have run backward (the
/// input RMSNorm and q/k norms, the LoRA path of the projections before attention, q and k as
/// the QKᵀ matmul saved them), the scores at their widest — the saved fp32 softmax output, the
/// probabilities' gradient cast to fp32, `_softmax_backward_data`'s output (fp16 for an fp16
/// model) and the `grad × output` temporary CUDA's kernel allocates, each batch × heads × seq² —
/// and the gradients in flight (residual stream, v's). Measured on an H200: 16 bytes per score
/// for a bf16 model (tests/data/reference/gpu_probe_h200.jsonl). Empty unless the attention is
/// eager over the standard layout.
pub fn eager_softmax_backward_terms(ctx: &Ctx) -> Vec<Term> {
    let a = ctx.arch;
    if ctx.s.attn_impl != AttnImpl::Eager || a.family.layout().attention != AttentionKind::Standard
    {
        return vec![];
    }
    let top = ctx.arch.num_hidden_layers.saturating_sub(1);
    let l = Layer {
        ctx,
        layers: f("layers", 1),
        glayers: f("layers", 1),
        scope: "",
        masked: ctx.masked_layers(top, top + 1),
    };
    let mut out = vec![];
    norm_terms(&l, &mut out);
    // norm_terms' second term is the post-attention norm(s), whose backward has run.
    if out.len() > 1 {
        out.remove(1);
    }
    let before_attention =
        |m: &LinearShape| matches!(m.name, "q_proj" | "k_proj" | "v_proj" | "qkv_proj");
    let adapted: Vec<LinearShape> = ctx.adapted().into_iter().filter(before_attention).collect();
    lora_terms(&l, adapted, &mut out);
    let qkv_params = a
        .block_linears(LayerKind::Dense)
        .iter()
        .filter(|m| before_attention(m))
        .map(|m| m.in_features * m.out_features)
        .sum();
    weight_copy_terms(&l, qkv_params, &mut out);
    let (b, t, heads, qd) = (
        ctx.s.batch as u128,
        ctx.s.seq as u128,
        ctx.heads(),
        a.q_dim(),
    );
    let ad = ctx.attn;
    out.push(Term::product(
        Component::ActAttention,
        "q and k as QKᵀ saved them (k repeated to all heads)",
        &[tok(ctx), f("2 × q_dim", 2 * qd), by(ad)],
    ));
    let output = if ad == Dtype::Fp16 { 2 } else { 4 };
    let softcap = if a.attn_softcap() { ad.bytes() } else { 0 };
    out.push(Term::product(
        Component::ActAttention,
        if softcap > 0 {
            "eager softmax backward: fp32 softmax + fp32 gradient + its output + CUDA's grad × output temporary + softcap tanh (O(S²))"
        } else {
            "eager softmax backward: fp32 softmax + fp32 gradient + its output + CUDA's grad × output temporary (O(S²))"
        },
        &[
            f("batch", b),
            f("heads", heads),
            f("seq", t),
            f("seq", t),
            bytes_of(12 + output + softcap),
        ],
    ));
    out.push(Term::sum(
        Component::BackwardTemps,
        "gradients in flight: residual stream + v's (repeated to all heads)",
        &[
            vec![tok(ctx), f("hidden", ctx.h()), by(ctx.resid)],
            vec![tok(ctx), f("q_dim", qd), by(ad)],
        ],
    ));
    if ctx.s.grad_ckpt {
        out.push(Term::product(
            Component::ActCheckpoints,
            "causal mask kept by the checkpoints",
            &[f("batch", b), f("seq", t), f("seq", t), by(ad)],
        ));
    }
    out.retain(|t| t.bytes > 0);
    out
}

/// Gradient-checkpoint boundaries: the input of every layer (embedding output + L−1 hidden states).
pub fn checkpoint_terms(ctx: &Ctx, layers_alive: u128) -> Vec<Term> {
    vec![Term::product(
        Component::ActCheckpoints,
        "layer inputs kept as checkpoints",
        &[
            f("layers alive", layers_alive),
            tok(ctx),
            f("hidden", ctx.h()),
            by(ctx.resid),
        ],
    )]
}

/// Working set of the backward pass through one layer's MLP + LoRA (gradient buffers in flight,
/// at the down_proj LoRA backward): adapter-dtype gradients of the LoRA path
/// (tokens × (intermediate + 2·hidden)), the residual-dtype gradient of the MLP product
/// (tokens × intermediate) and three hidden-wide gradients in the compute dtype.
pub fn layer_backward_working(ctx: &Ctx) -> Term {
    let (h, i) = (ctx.h(), ctx.inter());
    let lora = ctx.s.adapter_dtype.bytes();
    let res = ctx.resid.bytes();
    let compute = ctx.s.autocast.unwrap_or(ctx.resid).bytes();
    Term::sum(
        Component::BackwardTemps,
        "gradient buffers while back-propagating one layer",
        &[
            vec![
                tok(ctx),
                f("(intermediate + 2 × hidden)", i + 2 * h),
                bytes_of(lora),
            ],
            vec![tok(ctx), f("intermediate", i), bytes_of(res)],
            vec![tok(ctx), f("3 × hidden", 3 * h), bytes_of(compute)],
        ],
    )
}

/// Rows per chunk of a fused linear cross-entropy (Liger's heuristic:
/// next power of two of tokens / ⌈vocab / hidden⌉).
pub fn fused_ce_chunk(ctx: &Ctx) -> u128 {
    let v = ctx.arch.vocab_size as u128;
    let h = ctx.h().max(1);
    ctx.tokens()
        .div_ceil(v.div_ceil(h))
        .max(1)
        .next_power_of_two()
        .min(ctx.tokens().max(1))
}

fn fused_ce_terms(ctx: &Ctx) -> Vec<Term> {
    let v = ctx.arch.vocab_size as u128;
    vec![
        Term::product(
            Component::LogitsLoss,
            "fused CE: logits chunk and its gradient (fp32)",
            &[
                f("2", 2),
                f("chunk rows", fused_ce_chunk(ctx)),
                f("vocab", v),
                bytes_of(4),
            ],
        ),
        Term::product(
            Component::LogitsLoss,
            "fused CE: gradient of the hidden states, computed in forward",
            &[tok(ctx), f("hidden", ctx.h()), by(ctx.resid)],
        ),
    ]
}

/// Logits and loss at the start of backward: log_softmax output (saved), the nll_loss gradient and
/// the log_softmax gradient, all fp32 [tokens × vocab]; plus Gemma-2's saved tanh of the final softcap.
pub fn loss_backward_terms(ctx: &Ctx) -> Vec<Term> {
    if ctx.s.fused_ce {
        return fused_ce_terms(ctx);
    }
    let v = ctx.arch.vocab_size as u128;
    let mut out = vec![Term::product(
        Component::LogitsLoss,
        "log_softmax output + nll_loss grad + log_softmax grad (fp32)",
        &[f("3", 3), tok(ctx), f("vocab", v), bytes_of(4)],
    )];
    if ctx.arch.final_softcap() {
        out.push(Term::product(
            Component::LogitsLoss,
            "final-logit softcap tanh (saved)",
            &[tok(ctx), f("vocab", v), by(ctx.logits)],
        ));
    }
    out
}

/// Logits and loss at the end of forward (inside the loss): the logits, their fp32 upcast,
/// log_softmax output, and lm_head's input hidden state.
pub fn loss_forward_terms(ctx: &Ctx) -> Vec<Term> {
    if ctx.s.fused_ce {
        let mut out = fused_ce_terms(ctx);
        out.push(Term::product(
            Component::BackwardTemps,
            "final hidden state (lm_head input)",
            &[tok(ctx), f("hidden", ctx.h()), by(ctx.resid)],
        ));
        return out;
    }
    let v = ctx.arch.vocab_size as u128;
    let mut out = vec![Term::product(
        Component::LogitsLoss,
        "logits",
        &[tok(ctx), f("vocab", v), by(ctx.logits)],
    )];
    if ctx.logits != Dtype::Fp32 {
        out.push(Term::product(
            Component::LogitsLoss,
            "logits.float()",
            &[tok(ctx), f("vocab", v), bytes_of(4)],
        ));
    }
    out.push(Term::product(
        Component::LogitsLoss,
        "log_softmax output (fp32)",
        &[tok(ctx), f("vocab", v), bytes_of(4)],
    ));
    if ctx.arch.final_softcap() {
        out.push(Term::product(
            Component::LogitsLoss,
            "final-logit softcap tanh",
            &[tok(ctx), f("vocab", v), by(ctx.logits)],
        ));
    }
    out.push(Term::product(
        Component::BackwardTemps,
        "final hidden state (lm_head input)",
        &[tok(ctx), f("hidden", ctx.h()), by(ctx.resid)],
    ));
    out
}

/// Gradients in flight right after lm_head's backward: the logits gradient (logits dtype) and the
/// gradient of lm_head's input.
pub fn lm_head_backward_terms(ctx: &Ctx) -> Vec<Term> {
    let v = ctx.arch.vocab_size as u128;
    vec![
        Term::product(
            Component::BackwardTemps,
            "gradient of the logits",
            &[tok(ctx), f("vocab", v), by(ctx.logits)],
        ),
        Term::product(
            Component::BackwardTemps,
            "gradient of lm_head's input",
            &[tok(ctx), f("hidden", ctx.h()), by(ctx.logits)],
        ),
    ]
}
