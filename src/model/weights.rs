//! Parameters and their memory: frozen base weights (incl. 4-bit packing and quantization
//! state), trainable LoRA / modules_to_save weights, their gradients and optimizer states.

use serde::Serialize;

use super::arch::LayerKind;
use super::ctx::{expert_param_shape, Ctx};
use super::dtype::Dtype;
use super::settings::{Optimizer, SavedModule};
use super::term::{bytes_of, f, named_bytes, Component, Term};

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

/// LoRA parameters of the fused expert parameters of one MoE layer (peft `target_parameters`:
/// `lora_A [r·E, in]`, `lora_B [out, r·E]` per adapted parameter).
pub fn expert_lora_params_per_layer(ctx: &Ctx) -> u128 {
    if !ctx.arch.is_moe() {
        return 0;
    }
    let e = ctx.arch.num_experts();
    ctx.expert_loras()
        .iter()
        .map(|l| {
            let (o, i) = expert_param_shape(ctx, l.param);
            u128::from(l.rank) * e * (o + i)
        })
        .sum()
}

/// `(in_features, out_features, count)` of the routed experts' Linear layers that peft's names
/// adapt in one decoder layer of `kind`, where those experts are Linear MLPs
/// ([`Ctx::sequential_experts`]: each expert's gate, up and down projections that the targets
/// name); none elsewhere.
fn adapted_expert_linears(ctx: &Ctx, kind: LayerKind) -> Vec<(u128, u128, u128)> {
    if !(kind.is_moe() && ctx.sequential_experts()) {
        return vec![];
    }
    let a = ctx.arch;
    let adapted = ctx.adapted_of(kind);
    a.expert_linears()
        .into_iter()
        .filter(|l| adapted.iter().any(|x| x.name == l.name))
        .map(|l| (l.in_features, l.out_features, a.num_experts()))
        .collect()
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
        .chain(
            adapted_expert_linears(ctx, kind)
                .iter()
                .map(|&(i, o, n)| n * (r * (i + o) + dora * o)),
        )
        .sum();
    linear
        + if kind.is_moe() {
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
            // The vision tower stays frozen (LLaMA-Factory's freeze_vision_tower).
            a.total_params() - a.vision_params()
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
                        .chain(
                            adapted_expert_linears(ctx, k)
                                .iter()
                                .map(|&(i, _, e)| e * r * i),
                        )
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

/// Optimizer states in total, for the step time's optimizer traffic. What the allocator and
/// managed memory hold, tensor by tensor, is the step program's (bitsandbytes:
/// [`crate::model::bnb_adamw`]).
pub fn optimizer_terms(ctx: &Ctx, p: &ParamCounts) -> Vec<Term> {
    let n = p.trainable_params;
    let a = ctx.arch;
    let expert_tensors = if a.is_moe() {
        ctx.expert_loras().len() as u128 * 2 * a.moe_layers()
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
        Optimizer::AdamwTorchFused | Optimizer::AdamwTorchForeach | Optimizer::AdamwTorch => vec![
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
        // bitsandbytes keeps fp32 states whatever the parameter's dtype.
        Optimizer::PagedAdamw32bit => vec![Term::product(
            Component::OptimizerStates,
            "32-bit AdamW: two fp32 states",
            &[f("2", 2), params.clone(), bytes_of(4)],
        )],
        Optimizer::Adamw8bit | Optimizer::PagedAdamw8bit => vec![Term::sum(
            Component::OptimizerStates,
            "8-bit AdamW: two uint8 states + fp32 absmax per 256 values",
            &[
                vec![f("2", 2), params.clone(), bytes_of(1)],
                vec![f("2", 2), f("⌈params/256⌉", n.div_ceil(256)), bytes_of(4)],
            ],
        )],
        Optimizer::AdamwTorch4bit | Optimizer::AdamwTorch8bit => {
            let (what, codes) = if opt == Optimizer::AdamwTorch4bit {
                (
                    "torchao 4-bit AdamW: two states of 4-bit codes + an fp32 scale per 256 values",
                    n / 2,
                )
            } else {
                (
                    "torchao 8-bit AdamW: two uint8 states + an fp32 scale per 256 values",
                    n,
                )
            };
            vec![Term::sum(
                Component::OptimizerStates,
                what,
                &[
                    vec![f("2", 2), f("codes", codes), bytes_of(1)],
                    vec![f("2", 2), f("⌈params/256⌉", n.div_ceil(256)), bytes_of(4)],
                ],
            )]
        }
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
            let experts: u128 = if a.is_moe() {
                ctx.expert_loras()
                    .iter()
                    .map(|l| {
                        let re = u128::from(l.rank) * a.num_experts();
                        let (o, i) = expert_param_shape(ctx, l.param);
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
    terms
}
