//! What the mixture-of-experts families keep for backward beyond a dense decoder layer, as
//! transformers 5.24 + peft 0.21 build them (see `tests/data/reference/moe/MODELING.md`):
//! the router (softmax, top-k indices, renormalisation), the routed experts run by
//! `experts_implementation` (`grouped_mm`: the token–expert pairs sorted by expert; `eager`: a
//! loop over the experts; `batched_mm`: a weight copy per pair), LoRA on the fused expert
//! parameters (peft `target_parameters`: a full `W + B·A` copy of the expert stack per layer),
//! DeepSeek's latent attention and gpt-oss's attention with sinks.
//!
//! Notation in the formulas: `pairs` = tokens × top-k (every token–expert pair).

use super::{by, tok, Ctx, Layer};
use crate::model::arch::AttentionKind;
use crate::model::dtype::Dtype;
use crate::model::settings::{AttnImpl, ExpertParam, ExpertsImpl};
use crate::model::term::{bytes_of, f, Component, Term, TermKind};

const C: Component = Component::ActExperts;

/// `(out, in)` features of a fused expert parameter (per expert).
pub fn expert_param_shape(ctx: &Ctx, p: ExpertParam) -> (u128, u128) {
    let (i, h) = (ctx.arch.expert_width(), ctx.arch.hidden_size as u128);
    match p {
        ExpertParam::GateUp => (2 * i, h),
        ExpertParam::Down => (h, i),
    }
}

fn pairs(ctx: &Ctx) -> u128 {
    ctx.tokens() * ctx.arch.experts_per_tok()
}

/// Router, routed experts and expert LoRA of the MoE layers (`l.layers` = MoE layers).
pub(super) fn moe_terms(l: &Layer, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let a = ctx.arch;
    let Some(m) = a.moe_layout() else { return };
    let layers = l.layers.clone();
    let (e, k, i, h) = (
        a.num_experts(),
        a.experts_per_tok(),
        a.expert_width(),
        a.hidden_size as u128,
    );
    let p = || f("pairs", pairs(ctx));
    let ed = || by(ctx.expert);
    let push = |out: &mut Vec<Term>, label: &str, factors: Vec<crate::model::term::Factor>| {
        let mut all = vec![layers.clone()];
        all.extend(factors);
        out.push(Term::product(C, label.to_string(), &all));
    };
    // --- Router.
    if m.softmax_after_topk {
        push(
            out,
            "router top-k indices (int64)",
            vec![tok(ctx), f("top-k", k), bytes_of(8)],
        );
        push(
            out,
            "router softmax over the top-k logits",
            vec![tok(ctx), f("top-k", k), by(ctx.router_logits)],
        );
    } else {
        push(
            out,
            "router softmax over the experts (fp32)",
            vec![tok(ctx), f("experts", e), bytes_of(4)],
        );
        push(
            out,
            "router top-k indices (int64)",
            vec![tok(ctx), f("top-k", k), bytes_of(8)],
        );
    }
    if a.renorm_topk() {
        push(
            out,
            "top-k renormalisation: sum + pre-division copy (fp32)",
            vec![tok(ctx), f("(top-k + 1)", k + 1), bytes_of(4)],
        );
    }
    // --- Dispatch to the experts.
    match ctx.s.experts_run() {
        ExpertsImpl::GroupedMm => {
            push(
                out,
                "sort permutation, gather index, inverse permutation (int64)",
                vec![p(), f("3", 3), bytes_of(8)],
            );
            push(
                out,
                "routing weights sorted by expert",
                vec![p(), by(ctx.routing)],
            );
            push(
                out,
                "group offsets (int32)",
                vec![f("experts", e), bytes_of(4)],
            );
        }
        ExpertsImpl::Eager => {
            if ctx.s.experts_quantized() {
                // bitsandbytes' 4-bit matmul keeps its input, cast to the compute dtype by each
                // Linear4bit: one copy per projection unless the input already has that dtype.
                let compute = ctx.s.dtype;
                let (copies, what) = if ctx.expert == compute {
                    (h + i, "hidden + expert width")
                } else {
                    (2 * h + i, "2 × hidden + expert width")
                };
                push(
                    out,
                    "expert inputs kept by the 4-bit matmuls (w1, w3: the gathered rows; w2: the product), in the compute dtype",
                    vec![p(), f(what, copies), by(compute)],
                );
                push(
                    out,
                    "router input kept by the 4-bit gate, in the compute dtype",
                    vec![tok(ctx), f("hidden", h), by(compute)],
                );
            }
            push(
                out,
                "token and slot ids of each expert (nonzero, int64)",
                vec![p(), f("2", 2), bytes_of(8)],
            );
            push(
                out,
                "routing weights gathered per expert",
                vec![p(), by(ctx.routing)],
            );
            push(
                out,
                "index_add_ sources (weighted outputs in the hidden dtype)",
                vec![p(), f("hidden", h), by(ctx.resid)],
            );
        }
        ExpertsImpl::BatchedMm => {
            push(out, "top-k routing weights", vec![p(), by(ctx.routing)]);
            push(
                out,
                "expert weights gathered per pair, kept by bmm (3 × width × hidden each)",
                vec![p(), f("3 × expert width × hidden", 3 * i * h), ed()],
            );
        }
    }
    // --- The experts' computation.
    push(
        out,
        "expert gate_up outputs",
        vec![p(), f("2 × expert width", 2 * i), ed()],
    );
    if m.clamped_glu {
        push(
            out,
            "clamped SwiGLU: clamp(gate), sigmoid, glu, up + 1",
            vec![p(), f("4", 4), f("expert width", i), ed()],
        );
    } else {
        push(
            out,
            "SiLU(gate) of the experts",
            vec![p(), f("expert width", i), ed()],
        );
    }
    push(
        out,
        "expert outputs (kept for the routing weights' gradient)",
        vec![p(), f("hidden", h), ed()],
    );
    if let Some(t) = out.last_mut() {
        t.kind = TermKind::ExpertOutputs;
    }
    // --- LoRA on the fused expert parameters (peft ParamWrapper).
    let r = ctx.s.lora_r as u128;
    for &param in &ctx.s.target_parameters {
        let (o, n) = expert_param_shape(ctx, param);
        let name = param.name();
        push(
            out,
            &format!("W + scaling·B·A of the whole expert stack ({name}, baddbmm)"),
            vec![f("experts", e), f("out × in", o * n), ed()],
        );
        if ctx.s.adapter_dtype != ctx.expert {
            push(
                out,
                &format!("{} copies of the LoRA factors ({name})", ctx.expert.name()),
                vec![f("experts", e), f("rank", r), f("(out + in)", o + n), ed()],
            );
        }
        let (label, width, wname) = match param {
            ExpertParam::GateUp => (
                "gathered expert inputs (kept for W′'s gradient)",
                h,
                "hidden",
            ),
            ExpertParam::Down => (
                "expert activations (kept for W′'s gradient)",
                i,
                "expert width",
            ),
        };
        push(out, label, vec![p(), f(wname, width), ed()]);
    }
}

/// Gradients in flight at the peak of one recomputed MoE layer's backward (its expert outputs
/// already released): through the experts' activation (the activation's gradient and the
/// product's two input gradients; clamped SwiGLU one more), or, with LoRA on the experts, at the
/// first expert `grouped_mm` backward (down_proj's when adapted): the dense gradient of its `W′`,
/// the gradients of its input and output; plus the residual stream's gradient.
pub fn moe_backward_working(ctx: &Ctx) -> Term {
    let a = ctx.arch;
    let (i, h) = (a.expert_width(), a.hidden_size as u128);
    let e = a.num_experts();
    let ed = ctx.expert.bytes();
    let residual = vec![tok(ctx), f("hidden", h), by(ctx.resid)];
    let first = [ExpertParam::Down, ExpertParam::GateUp]
        .into_iter()
        .find(|p| ctx.s.target_parameters.contains(p));
    match first {
        Some(p) => {
            let (o, n) = expert_param_shape(ctx, p);
            let (win, wout) = match p {
                ExpertParam::Down => (i, h),
                ExpertParam::GateUp => (h, 2 * i),
            };
            Term::sum(
                Component::BackwardTemps,
                format!(
                    "gradients at the experts' {} backward: dense gradient of W′, of its input and output, and the residual's",
                    p.name()
                ),
                &[
                    vec![f("experts", e), f("out × in", o * n), bytes_of(ed)],
                    vec![f("pairs", pairs(ctx)), f("(in + out)", win + wout), bytes_of(ed)],
                    residual,
                ],
            )
        }
        None => {
            let acts = if a.moe_layout().is_some_and(|m| m.clamped_glu) {
                4
            } else {
                3
            };
            // The eager loop back-propagates one expert at a time: at worst one expert received
            // every token (a token picks an expert once), so `tokens` rows rather than `pairs`.
            let (rows, rows_name) = if ctx.s.experts_run() == ExpertsImpl::Eager {
                (ctx.tokens(), "tokens (one expert, worst case)")
            } else {
                (pairs(ctx), "pairs")
            };
            Term::sum(
                Component::BackwardTemps,
                "gradients through the experts' activation (its gradient and the product's) and the residual's",
                &[
                    vec![
                        f(rows_name, rows),
                        f(if acts == 4 { "4" } else { "3" }, acts),
                        f("expert width", i),
                        bytes_of(ed),
                    ],
                    residual,
                ],
            )
        }
    }
}

/// gpt-oss under gradient checkpointing: the eager causal and sliding-window masks (additive,
/// `[batch, 1, seq, seq]`) are inputs of every checkpointed layer, kept until backward.
pub fn checkpointed_mask_terms(ctx: &Ctx) -> Vec<Term> {
    let a = ctx.arch;
    if a.family.layout().attention != AttentionKind::Sinks
        || ctx.s.attn_impl != AttnImpl::Eager
        || !ctx.s.grad_ckpt
    {
        return vec![];
    }
    let (b, t) = (ctx.s.batch as u128, ctx.s.seq as u128);
    vec![Term::product(
        Component::ActCheckpoints,
        "causal + sliding-window masks kept by the checkpoints",
        &[
            f("2", 2),
            f("batch", b),
            f("seq", t),
            f("seq", t),
            by(ctx.attn),
        ],
    )]
}

/// With `output_router_logits`: every MoE layer's router logits, held for the load-balancing
/// loss through the forward and replaced by their gradients at the start of backward.
pub fn router_logit_terms(ctx: &Ctx) -> Vec<Term> {
    let a = ctx.arch;
    if !ctx.s.output_router_logits || !a.is_moe() {
        return vec![];
    }
    vec![Term::product(
        C,
        "router logits for the load-balancing loss (their gradients in backward)",
        &[
            f("MoE layers", a.moe_layers()),
            tok(ctx),
            f("experts", a.num_experts()),
            by(ctx.router_logits),
        ],
    )]
}

/// DeepSeek's multi-head latent attention: the concatenated query, the key assembled in a new
/// tensor, the kv_b_proj output the values are a view of, and the kernel's output and logsumexp
/// (eager: the scores).
pub(super) fn latent_attention_terms(l: &Layer, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let a = ctx.arch;
    let Some(m) = a.mla() else { return };
    let heads = a.num_attention_heads as u128;
    let qk = m.nope + m.rope;
    let ad = ctx.attn;
    let layers = l.layers.clone();
    let (b, t) = (ctx.s.batch as u128, ctx.s.seq as u128);
    out.push(Term::product(
        Component::ActAttention,
        "query: cat(q_nope, rotated q_pe) and key: new_empty filled with k_nope and k_pe",
        &[
            layers.clone(),
            f("2", 2),
            tok(ctx),
            f("heads × (nope + rope)", heads * qk),
            by(ad),
        ],
    ));
    out.push(Term::product(
        Component::ActAttention,
        "kv_b_proj output (the values are a view of it)",
        &[
            layers.clone(),
            tok(ctx),
            f("heads × (nope + v_head_dim)", heads * (m.nope + m.v)),
            by(ctx.module_out),
        ],
    ));
    match ctx.s.attn_impl {
        AttnImpl::Eager => out.push(Term::product(
            Component::ActAttention,
            "eager scores: softmax fp32 + probabilities (O(S²))",
            &[
                layers,
                f("batch", b),
                f("heads", heads),
                f("seq", t),
                f("seq", t),
                bytes_of(4 + ad.bytes()),
            ],
        )),
        AttnImpl::Sdpa | AttnImpl::FlashAttention2 => {
            let efficient =
                ctx.s.attn_impl == AttnImpl::Sdpa && (ad == Dtype::Fp32 || ctx.s.padded_mask);
            out.push(Term::product(
                Component::ActAttention,
                "attention output",
                &[
                    layers.clone(),
                    tok(ctx),
                    f("heads × v_head_dim", heads * m.v),
                    by(ad),
                ],
            ));
            let rows = if efficient { t.div_ceil(32) * 32 } else { t };
            out.push(Term::product(
                Component::ActAttention,
                "logsumexp",
                &[
                    layers,
                    f("batch", b),
                    f("heads", heads),
                    f("seq", rows),
                    bytes_of(4),
                ],
            ));
        }
    }
}

/// gpt-oss's eager attention with one sink logit per head: q after RoPE, k and v repeated to all
/// heads, the max over `[scores | sink]` (indices) and the softmax over it, `(seq + 1)` wide.
/// (flash kernels with sinks, from the Hub: q, k, v, output and logsumexp.)
pub(super) fn sink_attention_terms(l: &Layer, out: &mut Vec<Term>) {
    let ctx = l.ctx;
    let a = ctx.arch;
    debug_assert_eq!(a.family.layout().attention, AttentionKind::Sinks);
    let heads = a.num_attention_heads as u128;
    let (qd, kvd) = (a.q_dim(), a.kv_dim());
    let ad = ctx.attn;
    let layers = l.layers.clone();
    let (b, t) = (ctx.s.batch as u128, ctx.s.seq as u128);
    if ctx.s.attn_impl == AttnImpl::FlashAttention2 {
        out.push(Term::product(
            Component::ActAttention,
            "q, k (after RoPE), v, output and logsumexp of the flash kernel",
            &[
                layers,
                tok(ctx),
                f("(2 × q_dim + 2 × kv_dim + heads)", 2 * qd + 2 * kvd + heads),
                by(ad),
            ],
        ));
        return;
    }
    let kv = if kvd != qd { qd } else { kvd };
    out.push(Term::product(
        Component::ActAttention,
        if kvd != qd {
            "q after RoPE, k and v repeated to all heads (repeat_kv)"
        } else {
            "q, k after RoPE, v"
        },
        &[
            layers.clone(),
            tok(ctx),
            f("(q_dim + 2 × q_dim)", qd + 2 * kv),
            by(ad),
        ],
    ));
    out.push(Term::product(
        Component::ActAttention,
        "max over [scores | sink]: indices (int64)",
        &[
            layers.clone(),
            f("batch", b),
            f("heads", heads),
            f("seq", t),
            bytes_of(8),
        ],
    ));
    out.push(Term::product(
        Component::ActAttention,
        "softmax over [scores | sink] (O(S²))",
        &[
            layers,
            f("batch", b),
            f("heads", heads),
            f("seq", t),
            f("(seq + 1)", t + 1),
            by(ad),
        ],
    ));
}
