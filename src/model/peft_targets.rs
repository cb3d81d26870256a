//! What peft 0.21 adapts for a LoRA target list on a mixture-of-experts model under
//! transformers 5: for the families whose checkpoints transformers 5 converts from the v4
//! per-expert layout with the `qwen2_moe` pattern (Qwen3-MoE, OLMoE, DeepSeek-V2, GLM-4.5), peft
//! rewrites `target_modules` before it injects anything (`peft/utils/transformers_weight_conversion.py`
//! `_convert_peft_config_moe`, :402-481, its tables :332-352): `gate_proj` and `up_proj` become
//! the fused experts' `gate_up_proj` — at twice the rank and alpha (`rank_pattern`), and only
//! together (one without the other raises) — and `down_proj` becomes the experts' `down_proj`,
//! both added to `target_parameters`; the names leave `target_modules`, so no Linear layer
//! named so (a dense layer's MLP, the shared experts) is adapted.

use super::arch::{Architecture, Target};
use super::settings::{ExpertParam, ExpertsLayout, Settings};

/// A fused expert parameter LoRA adapts, with its rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExpertLora {
    /// The parameter.
    pub param: ExpertParam,
    /// LoRA's rank on it (`r`, or `2r` for a `gate_up_proj` reached through `gate_proj` and
    /// `up_proj`).
    pub rank: u64,
}

/// Whether the target list's MLP names (`gate_proj`, `up_proj`, `down_proj`) reach the fused
/// experts instead of Linear layers.
pub fn mlp_names_reach_experts(arch: &Architecture, s: &Settings) -> bool {
    // (a build without the extended ops plans no mixture of experts)
    super::extended::EXTENDED
        && !s.base_trained()
        && s.experts_layout == ExpertsLayout::Fused
        && arch.moe_layout().is_some_and(|m| m.peft_maps_mlp_names)
        && s.targets.iter().any(|t| t.is_mlp())
}

/// Whether peft's `target_modules="all-linear"` for these targets would also adapt the routers'
/// weights, which no plan does: every target named, LoRA, on a family whose MLP names peft maps
/// onto the fused experts — its resolution of the string against the `qwen2_moe` table also
/// matches `gate` → `gate.weight` (measured on Qwen3-Next, `tests/data/harness/MODELS26.md`).
pub fn all_linear_reaches_routers(arch: &Architecture, s: &Settings) -> bool {
    !s.base_trained()
        && s.targets.len() == Target::ALL.len()
        && arch.moe_layout().is_some_and(|m| m.peft_maps_mlp_names)
}

/// Whether peft's `target_modules="all-linear"` for these targets would wrap a router whose
/// forward a LoRA layer cannot run: every target named, LoRA, on a family whose router is an
/// `nn.Linear` subclass returning a tuple (Llama 4's `Llama4Router`; peft 0.21's all-linear takes
/// every `nn.Linear` but the output layer, `tuners/tuners_utils.py`
/// `_maybe_include_all_linear_layers`), so the first forward fails in `lora.Linear.forward`
/// (`'tuple' object has no attribute 'dtype'`, measured with the harness).
pub fn all_linear_breaks_router(arch: &Architecture, s: &Settings) -> bool {
    !s.base_trained()
        && s.targets.len() == Target::ALL.len()
        && arch.moe_layout().is_some_and(|m| m.router_returns_tuple)
}

/// The targets that name only one of `gate_proj` and `up_proj`, which peft refuses to map onto
/// their fused `gate_up_proj` ("Cannot convert PEFT target(s) … without also targeting …").
pub fn lone_gate_or_up(arch: &Architecture, s: &Settings) -> Option<(&'static str, &'static str)> {
    if !mlp_names_reach_experts(arch, s) {
        return None;
    }
    match (
        s.targets.contains(&Target::Gate),
        s.targets.contains(&Target::Up),
    ) {
        (true, false) => Some(("gate_proj", "up_proj")),
        (false, true) => Some(("up_proj", "gate_proj")),
        _ => None,
    }
}

/// The fused expert parameters LoRA adapts, each with its rank: `target_parameters`, and those
/// the target list's MLP names reach ([`mlp_names_reach_experts`]).
pub fn expert_loras(arch: &Architecture, s: &Settings) -> Vec<ExpertLora> {
    if !super::extended::EXTENDED || !arch.is_moe() || s.base_trained() {
        return vec![];
    }
    let mapped = mlp_names_reach_experts(arch, s);
    let both = s.targets.contains(&Target::Gate) && s.targets.contains(&Target::Up);
    let named = |p: ExpertParam| match p {
        ExpertParam::GateUp => mapped && both,
        ExpertParam::Down => mapped && s.targets.contains(&Target::Down),
    };
    // In the parameters' order (peft wraps gate_up_proj, then down_proj).
    [ExpertParam::GateUp, ExpertParam::Down]
        .into_iter()
        .filter(|&p| s.target_parameters.contains(&p) || named(p))
        .map(|param| ExpertLora {
            param,
            // peft's rank_pattern for the fused pair applies to the parameter whatever
            // listed it.
            rank: if named(param) && param == ExpertParam::GateUp {
                2 * s.lora_r
            } else {
                s.lora_r
            },
        })
        .collect()
}
