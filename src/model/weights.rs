//! Parameters and their memory: frozen base weights (incl. 4-bit packing and quantization
//! state), trainable LoRA / modules_to_save weights, their gradients and optimizer states.

use serde::Serialize;

use super::activations::{expert_param_shape, Ctx};
use super::arch::LayerKind;
use super::dtype::Dtype;
use super::settings::{Optimizer, SavedModule};
use super::term::{bytes_of, f, named_bytes, Component, Term, TermKind};

/// Parameter counts of the planned model.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ParamCounts {
    /// Base model parameters (as `num_parameters()` before peft).
    pub base_params: u128,
    /// Trainable parameters (adapters + modules_to_save copies).
    pub trainable_params: u128,
    /// LoRA adapter parameters (with DoRA, the magnitude vectors too).
    pub lora_params: u128,
    /// Parameters of fully trained module copies.
    pub modules_to_save_params: u128,
    /// Of `lora_params`, those of LoRA on the fused expert parameters (`target_parameters`).
    pub expert_lora_params: u128,
    /// Routed-expert parameters of the base model (MoE; 0 for dense models).
    pub expert_params: u128,
    /// Base parameters one token runs through (MoE: the k routed experts it is sent to, not
    /// all E; equal to `base_params` for dense models).
    pub active_params: u128,
}

/// bitsandbytes 4-bit blocksize.
const QUANT_BLOCK: u128 = 64;
/// Double-quant groups this many absmax blocks under one fp32 constant.
const DQ_GROUP: u128 = 256;

/// LoRA parameters of the fused expert parameters of one MoE layer (peft `target_parameters`:
/// `lora_A [r·E, in]`, `lora_B [out, r·E]` per adapted parameter).
pub fn expert_lora_params_per_layer(ctx: &Ctx) -> u128 {
    if !ctx.arch.is_moe() {
        return 0;
    }
    let r = ctx.s.lora_r as u128;
    let e = ctx.arch.num_experts();
    ctx.s
        .target_parameters
        .iter()
        .map(|&p| {
            let (o, i) = expert_param_shape(ctx, p);
            r * e * (o + i)
        })
        .sum()
}

/// LoRA parameters of one decoder layer of `kind` (adapted Linear layers, and the experts').
fn lora_params_of(ctx: &Ctx, kind: LayerKind) -> u128 {
    let r = ctx.s.lora_r as u128;
    // DoRA adds a magnitude vector of out_features to every adapted Linear.
    let dora = u128::from(ctx.s.use_dora);
    let linear: u128 = ctx
        .adapted_of(kind)
        .iter()
        .map(|l| r * (l.in_features + l.out_features) + dora * l.out_features)
        .sum();
    linear
        + if kind == LayerKind::Moe {
            expert_lora_params_per_layer(ctx)
        } else {
            0
        }
}

/// Counts parameters.
pub fn param_counts(ctx: &Ctx) -> ParamCounts {
    let a = ctx.arch;
    let lora_params: u128 = a
        .layer_groups()
        .iter()
        .map(|&(k, n)| n * lora_params_of(ctx, k))
        .sum();
    let expert_lora_params = a.moe_layers() * expert_lora_params_per_layer(ctx);
    let modules_to_save_params: u128 = ctx
        .s
        .modules_to_save
        .iter()
        .map(|_| a.embedding_params())
        .sum();
    ParamCounts {
        base_params: a.total_params(),
        trainable_params: if ctx.s.outside_trained() {
            a.total_params()
        } else if ctx.s.base_trained() {
            // Freeze tuning: every parameter of the trained layers.
            ctx.s
                .trained_layers(a.num_hidden_layers)
                .map(|li| {
                    let k = a.layer_kind(li);
                    a.block_linear_params(k) + a.block_small_params(k)
                })
                .sum()
        } else if ctx.s.lora_fa {
            // LoRA-FA: every lora_A is frozen.
            let a_params: u128 = a
                .layer_groups()
                .iter()
                .map(|&(k, n)| {
                    let r = ctx.s.lora_r as u128;
                    n * ctx
                        .adapted_of(k)
                        .iter()
                        .map(|l| r * l.in_features)
                        .sum::<u128>()
                })
                .sum();
            lora_params - a_params + modules_to_save_params
        } else {
            lora_params + modules_to_save_params
        },
        lora_params,
        modules_to_save_params,
        expert_lora_params,
        expert_params: a.expert_params(),
        active_params: a.active_params(),
    }
}

/// Frozen weights (and 4-bit quantization state). MoE models: the routed experts (fused 3-D
/// parameters, never `nn.Linear`, so never 4-bit: in the load dtype, fp32 after
/// `prepare_model_for_kbit_training`) and the routers are terms of their own.
pub fn frozen_terms(ctx: &Ctx) -> Vec<Term> {
    let a = ctx.arch;
    let linear = a.linear_weight_params();
    let (experts, routers) = (a.expert_params(), a.router_params());
    let other = a.total_params() - linear - experts - routers;
    let mut out = vec![];
    match ctx.s.quant {
        None if !a.is_moe() => out.push(Term::product(
            Component::FrozenWeights,
            "base weights",
            &[f("params", a.total_params()), bytes_of(ctx.s.dtype.bytes())],
        )),
        None => out.push(Term::product(
            Component::FrozenWeights,
            "base weights (attention, norms, embeddings, dense and shared MLPs)",
            &[f("params", linear + other), bytes_of(ctx.s.dtype.bytes())],
        )),
        Some(q) => {
            out.push(Term::sum(
                Component::FrozenWeights,
                format!(
                    "{} Linear layers packed 2 per byte; embeddings, norms, biases, lm_head in {}",
                    q.name(),
                    ctx.aux_weight.name()
                ),
                &[
                    vec![f("⌈linear params / 2⌉", linear.div_ceil(2)), bytes_of(1)],
                    vec![f("other params", other), bytes_of(ctx.aux_weight.bytes())],
                ],
            ));
            // Per module: absmax per 64 weights (fp32, or uint8 + fp32 per 256 blocks with
            // double quant) plus the code tables (nf4 16 values fp32; double quant 256 fp32 + offset).
            let mut modules = 0u128;
            let mut blocks = 0u128;
            let mut groups = 0u128;
            let mut count = |weights: u128, times: u128| {
                let nb = weights.div_ceil(QUANT_BLOCK);
                modules += times;
                blocks += nb * times;
                groups += nb.div_ceil(DQ_GROUP) * times;
            };
            for (kind, layers) in a.layer_groups() {
                for l in a.block_linears(kind) {
                    count(l.in_features * l.out_features, layers);
                }
            }
            if ctx.s.experts_quantized() && a.is_moe() {
                // transformers 4: three Linear layers per expert and the router, per MoE layer.
                let (i, h) = (a.expert_width(), a.hidden_size as u128);
                count(i * h, 3 * a.num_experts() * a.moe_layers());
                count(a.router_params_per_layer(), a.moe_layers());
            }
            let t = if ctx.s.double_quant {
                Term::sum(
                    Component::QuantState,
                    "double-quant absmax (uint8 per 64 weights, fp32 per 256 blocks) + code tables",
                    &[
                        vec![f("blocks", blocks), bytes_of(1)],
                        vec![f("groups", groups), bytes_of(4)],
                        vec![f("modules", modules), f("(16 + 256 + 1)", 273), bytes_of(4)],
                    ],
                )
            } else {
                Term::sum(
                    Component::QuantState,
                    "absmax (fp32 per 64 weights) + code table",
                    &[
                        vec![f("blocks", blocks), bytes_of(4)],
                        vec![f("modules", modules), f("16", 16), bytes_of(4)],
                    ],
                )
            };
            out.push(t);
        }
    }
    if ctx.s.experts_quantized() && a.is_moe() {
        let q = ctx.s.quant.map_or("4-bit", |q| q.name());
        out.push(Term::product(
            Component::FrozenWeights,
            format!("routers (nn.Linear, {q} packed 2 per byte)"),
            &[f("⌈router params / 2⌉", routers.div_ceil(2)), bytes_of(1)],
        ));
        out.push(Term::product(
            Component::FrozenExperts,
            format!("routed experts: an nn.Linear per expert projection, {q} packed 2 per byte"),
            &[f("⌈expert params / 2⌉", experts.div_ceil(2)), bytes_of(1)],
        ));
    } else if let Some(m) = a.moe_layout() {
        // Experts' and routers' weights: nn.Linear weights stay in the load dtype.
        let expert_dtype = match ctx.s.experts_layout {
            crate::model::ExpertsLayout::PerExpert => ctx.s.dtype,
            crate::model::ExpertsLayout::Fused => ctx.expert,
        };
        let router = if m.fp32_router {
            Dtype::Fp32
        } else {
            expert_dtype
        };
        out.push(Term::product(
            Component::FrozenWeights,
            if m.fp32_router {
                "routers (kept in fp32)"
            } else {
                "routers"
            },
            &[
                f("MoE layers", a.moe_layers()),
                f("router params per layer", a.router_params_per_layer()),
                bytes_of(router.bytes()),
            ],
        ));
        out.push(Term::product(
            Component::FrozenExperts,
            match ctx.s.experts_layout {
                crate::model::ExpertsLayout::Fused => {
                    "routed experts: fused gate_up_proj + down_proj"
                }
                crate::model::ExpertsLayout::PerExpert => {
                    "routed experts: an nn.Linear per expert projection"
                }
            },
            &[
                f("MoE layers", a.moe_layers()),
                f("expert params per layer", a.expert_params_per_layer()),
                bytes_of(expert_dtype.bytes()),
            ],
        ));
    }
    out
}

/// ModulesToSaveWrapper copies the original module, keeping its dtype.
fn trainable_dtype(ctx: &Ctx) -> Dtype {
    ctx.aux_weight
}

/// Trainable weights (LoRA adapters + modules_to_save copies).
pub fn trainable_terms(ctx: &Ctx, p: &ParamCounts) -> Vec<Term> {
    let mut out = vec![Term::product(
        Component::TrainableWeights,
        "LoRA A and B (rank × (in + out) per adapted module)",
        &[
            f("lora params", p.lora_params - p.expert_lora_params),
            bytes_of(ctx.s.adapter_dtype.bytes()),
        ],
    )];
    if p.expert_lora_params > 0 {
        out.push(Term::product(
            Component::TrainableWeights,
            "expert LoRA A and B (rank × experts × (in + out) per adapted expert parameter)",
            &[
                f("expert lora params", p.expert_lora_params),
                bytes_of(ctx.s.adapter_dtype.bytes()),
            ],
        ));
    }
    for &m in &ctx.s.modules_to_save {
        out.push(Term::product(
            Component::TrainableWeights,
            format!("{} full trainable copy", saved_name(m)),
            &[
                f("vocab × hidden", ctx.arch.embedding_params()),
                bytes_of(trainable_dtype(ctx).bytes()),
            ],
        ));
    }
    out.retain(|t| t.bytes > 0);
    out
}

fn saved_name(m: SavedModule) -> &'static str {
    match m {
        SavedModule::LmHead => "lm_head",
        SavedModule::EmbedTokens => "embed_tokens",
    }
}

/// Gradients, in each parameter's dtype (alive from their backward until zero_grad): LoRA
/// gradients of `lora_layers` layers, lm_head's (produced first in backward) and, when
/// `with_embedding`, embed_tokens' (produced last).
pub fn gradient_terms(
    ctx: &Ctx,
    p: &ParamCounts,
    lora_layers: u128,
    with_embedding: bool,
) -> Vec<Term> {
    let layers = ctx.arch.num_hidden_layers as u128;
    let per_layer = p.lora_params / layers.max(1);
    let mut out = vec![];
    if ctx.arch.is_moe() {
        // Layers differ (dense / MoE, expert LoRA): the lowest layers' own counts are
        // subtracted.
        let (n, label) = if lora_layers >= layers {
            (p.lora_params, "gradients of the LoRA weights")
        } else {
            let below: u128 = (0..(layers - lora_layers) as u64)
                .map(|li| lora_params_of(ctx, ctx.arch.layer_kind(li)))
                .sum();
            (
                p.lora_params.saturating_sub(below),
                if lora_layers + 1 == layers {
                    "gradients of the LoRA weights of the layers above the first"
                } else {
                    "gradients of the LoRA weights of the layers above"
                },
            )
        };
        if n > 0 && lora_layers > 0 {
            out.push(Term::product(
                Component::Gradients,
                label,
                &[f("lora params", n), bytes_of(ctx.s.adapter_dtype.bytes())],
            ));
        }
    } else if per_layer > 0 && lora_layers > 0 {
        let (name, label) = if lora_layers == layers {
            ("layers", "gradients of the LoRA weights")
        } else {
            (
                "(layers − 1)",
                "gradients of the LoRA weights of the layers above",
            )
        };
        out.push(Term::product(
            Component::Gradients,
            label,
            &[
                f(name, lora_layers),
                f("lora params per layer", per_layer),
                bytes_of(ctx.s.adapter_dtype.bytes()),
            ],
        ));
    }
    for &m in &ctx.s.modules_to_save {
        if m == SavedModule::EmbedTokens && !with_embedding {
            continue;
        }
        let kind = match m {
            SavedModule::LmHead => TermKind::LmHeadGradient,
            SavedModule::EmbedTokens => TermKind::EmbeddingGradient,
        };
        out.push(
            Term::product(
                Component::Gradients,
                format!("gradient of the trainable {}", saved_name(m)),
                &[
                    f("vocab × hidden", ctx.arch.embedding_params()),
                    bytes_of(trainable_dtype(ctx).bytes()),
                ],
            )
            .of_kind(kind),
        );
    }
    out
}

/// Optimizer states, and whether they live in paged (unified) memory outside PyTorch's allocator.
pub fn optimizer_terms(ctx: &Ctx, p: &ParamCounts) -> (Vec<Term>, bool) {
    let n = p.trainable_params;
    let a = ctx.arch;
    let expert_tensors = if a.is_moe() {
        ctx.s.target_parameters.len() as u128 * 2 * a.moe_layers()
    } else {
        0
    };
    let tensors = a
        .layer_groups()
        .iter()
        .map(|&(k, n)| ctx.adapted_of(k).len() as u128 * 2 * n)
        .sum::<u128>()
        + expert_tensors
        + ctx.s.modules_to_save.len() as u128;
    let params = f("trainable params", n);
    let step = Term::product(
        Component::OptimizerStates,
        "step counters (one fp32 scalar per tensor)",
        &[f("tensors", tensors), bytes_of(4)],
    );
    let opt = ctx.s.optimizer;
    // torch optimizers create states with zeros_like(param): same dtype as each parameter.
    let trainable_bytes: u128 = trainable_terms(ctx, p).iter().map(|t| t.bytes).sum();
    let terms = match opt {
        Optimizer::AdamwTorchFused
        | Optimizer::AdamwTorchForeach
        | Optimizer::AdamwTorch
        | Optimizer::PagedAdamw32bit => vec![
            Term::product(
                Component::OptimizerStates,
                "AdamW exp_avg + exp_avg_sq (zeros_like each parameter)",
                &[
                    f("2", 2),
                    named_bytes("trainable weight bytes", trainable_bytes),
                ],
            ),
            step,
        ],
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => vec![Term::sum(
            Component::OptimizerStates,
            "8-bit AdamW: two uint8 states + fp32 absmax per 256 values",
            &[
                vec![f("2", 2), params.clone(), bytes_of(1)],
                vec![f("2", 2), f("⌈params/256⌉", n.div_ceil(256)), bytes_of(4)],
            ],
        )],
        Optimizer::Adafactor => {
            // Factored second moment: a row and a column vector per matrix, no first moment.
            let r = ctx.s.lora_r as u128;
            let per_kind = |k: LayerKind| -> u128 {
                ctx.adapted_of(k)
                    .iter()
                    .map(|l| (r + l.in_features) + (l.out_features + r))
                    .sum()
            };
            // Expert LoRA: lora_A [r·E, in], lora_B [out, r·E].
            let re = r * a.num_experts();
            let experts: u128 = if a.is_moe() {
                ctx.s
                    .target_parameters
                    .iter()
                    .map(|&p| {
                        let (o, i) = expert_param_shape(ctx, p);
                        (re + i) + (o + re)
                    })
                    .sum::<u128>()
                    * a.moe_layers()
            } else {
                0
            };
            let rows_cols = a
                .layer_groups()
                .iter()
                .map(|&(k, n)| n * per_kind(k))
                .sum::<u128>()
                + experts
                + ctx.s.modules_to_save.len() as u128
                    * (ctx.arch.vocab_size as u128 + ctx.arch.hidden_size as u128);
            vec![Term::product(
                Component::OptimizerStates,
                "Adafactor factored second moment (row + column per matrix)",
                &[f("Σ (rows + cols)", rows_cols), bytes_of(4)],
            )]
        }
        Optimizer::Sgd => vec![],
        Optimizer::SgdMomentum => vec![Term::product(
            Component::OptimizerStates,
            "momentum buffer (zeros_like each parameter)",
            &[named_bytes("trainable weight bytes", trainable_bytes)],
        )],
    };
    let paged = matches!(opt, Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit);
    (terms, paged)
}

/// Temporaries of the optimizer step itself.
pub fn optimizer_step_terms(ctx: &Ctx, p: &ParamCounts) -> Vec<Term> {
    let n = p.trainable_params;
    match ctx.s.optimizer {
        // foreach AdamW materialises a list of denominators (sqrt(v)/bc + eps) for all params at once.
        Optimizer::AdamwTorchForeach => vec![Term::product(
            Component::OptimizerTemps,
            "foreach denominators (fp32, all params at once)",
            &[f("trainable params", n), bytes_of(4)],
        )],
        // Adafactor builds a full-size update per parameter (one at a time; the largest matters).
        Optimizer::Adafactor => vec![Term::product(
            Component::OptimizerTemps,
            "update of the largest parameter (fp32)",
            &[
                f("largest param", largest_param(ctx)),
                f("2", 2),
                bytes_of(4),
            ],
        )],
        _ => vec![],
    }
}

fn largest_param(ctx: &Ctx) -> u128 {
    let r = ctx.s.lora_r as u128;
    let a = ctx.arch;
    let linear = a
        .layer_groups()
        .iter()
        .flat_map(|&(k, _)| ctx.adapted_of(k))
        .map(|l| r * l.in_features.max(l.out_features))
        .max()
        .unwrap_or(0);
    let experts = if a.is_moe() {
        ctx.s
            .target_parameters
            .iter()
            .map(|&p| {
                let (o, i) = expert_param_shape(ctx, p);
                r * a.num_experts() * o.max(i)
            })
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    let lora = linear.max(experts);
    if ctx.s.modules_to_save.is_empty() {
        lora
    } else {
        lora.max(ctx.arch.embedding_params())
    }
}
