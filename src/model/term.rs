//! A memory term that explains itself: a product of named factors, shown both as a
//! formula (`tokens × hidden × 4 B`) and with its numbers (`1024 × 4096 × 4 B`).

use serde::Serialize;

/// Which bar of the breakdown a term belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Frozen base weights (incl. embeddings, norms, lm_head).
    FrozenWeights,
    /// bitsandbytes absmax / code constants of 4-bit weights.
    QuantState,
    /// LoRA adapters and modules_to_save copies.
    TrainableWeights,
    /// Gradients of the trainable weights.
    Gradients,
    /// Optimizer states (AdamW moments, ...).
    OptimizerStates,
    /// Saved for backward by attention (q, k, v, output, softmax...).
    ActAttention,
    /// Saved for backward by the MLP (gate, up, activation).
    ActMlp,
    /// Saved for backward by RMSNorms (fp32 input copy, rsqrt).
    ActNorms,
    /// peft LoRA path (fp32 input copies, A outputs, autocast weight copies).
    ActLora,
    /// LoRA dropout outputs and masks.
    ActDropout,
    /// Embedding output, rotary tables, input ids.
    ActEmbeddings,
    /// Gradient-checkpointing boundaries (one hidden state per layer).
    ActCheckpoints,
    /// Low-precision copies of frozen fp32/fp16 weights that autocast makes and keeps for backward.
    ActWeightCopies,
    /// Logits, log-softmax and their gradients.
    LogitsLoss,
    /// Temporaries of the backward pass (recomputed layer, gradient buffers).
    BackwardTemps,
    /// Temporaries of the optimizer step.
    OptimizerTemps,
}

impl Component {
    /// Every component, in stacking order (bottom first).
    pub const ALL: [Component; 16] = [
        Component::FrozenWeights,
        Component::QuantState,
        Component::TrainableWeights,
        Component::Gradients,
        Component::OptimizerStates,
        Component::OptimizerTemps,
        Component::ActCheckpoints,
        Component::ActEmbeddings,
        Component::ActWeightCopies,
        Component::ActNorms,
        Component::ActAttention,
        Component::ActMlp,
        Component::ActLora,
        Component::ActDropout,
        Component::LogitsLoss,
        Component::BackwardTemps,
    ];

    /// Stable key (`frozen_weights`, `act_attention`, ...) used in JSON and `data-testid`s.
    pub fn key(self) -> &'static str {
        match self {
            Component::FrozenWeights => "frozen_weights",
            Component::QuantState => "quant_state",
            Component::TrainableWeights => "trainable_weights",
            Component::Gradients => "gradients",
            Component::OptimizerStates => "optimizer_states",
            Component::ActAttention => "act_attention",
            Component::ActMlp => "act_mlp",
            Component::ActNorms => "act_norms",
            Component::ActLora => "act_lora",
            Component::ActDropout => "act_dropout",
            Component::ActEmbeddings => "act_embeddings",
            Component::ActCheckpoints => "act_checkpoints",
            Component::ActWeightCopies => "act_weight_copies",
            Component::LogitsLoss => "logits_loss",
            Component::BackwardTemps => "backward_temps",
            Component::OptimizerTemps => "optimizer_temps",
        }
    }

    /// Human label.
    pub fn label(self) -> &'static str {
        match self {
            Component::FrozenWeights => "Frozen weights",
            Component::QuantState => "4-bit quantization state",
            Component::TrainableWeights => "Trainable weights",
            Component::Gradients => "Gradients",
            Component::OptimizerStates => "Optimizer states",
            Component::ActAttention => "Activations: attention",
            Component::ActMlp => "Activations: MLP",
            Component::ActNorms => "Activations: norms",
            Component::ActLora => "Activations: LoRA path",
            Component::ActDropout => "Activations: LoRA dropout",
            Component::ActEmbeddings => "Activations: embeddings, rotary, inputs",
            Component::ActCheckpoints => "Activations: checkpoint boundaries",
            Component::ActWeightCopies => "Activations: autocast weight copies",
            Component::LogitsLoss => "Logits and loss",
            Component::BackwardTemps => "Backward temporaries",
            Component::OptimizerTemps => "Optimizer step temporaries",
        }
    }
}

/// One named factor of a term.
#[derive(Clone, Debug)]
pub struct Factor {
    /// Symbol shown in the formula (`tokens`, `hidden`, `4 B`).
    pub name: String,
    /// Its value.
    pub value: u128,
}

/// Shorthand constructor for a factor.
pub fn f(name: impl Into<String>, value: u128) -> Factor {
    Factor {
        name: name.into(),
        value,
    }
}

/// Byte-size factor: shown as `4 B` in both the formula and the numbers.
pub fn bytes_of(n: u128) -> Factor {
    Factor {
        name: format!("{n} B"),
        value: n,
    }
}

/// One explained memory term.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Term {
    /// Component it stacks into.
    pub component: Component,
    /// What the tensor(s) are.
    pub label: String,
    /// Symbolic formula.
    pub formula: String,
    /// The same formula with numbers substituted.
    pub values: String,
    /// Result in bytes.
    pub bytes: u128,
}

impl Term {
    /// A product of factors (saturating, though validated inputs cannot reach u128's limit).
    pub fn product(component: Component, label: impl Into<String>, factors: &[Factor]) -> Term {
        let bytes = factors
            .iter()
            .fold(1u128, |acc, x| acc.saturating_mul(x.value));
        let formula = factors
            .iter()
            .map(|x| x.name.as_str())
            .collect::<Vec<_>>()
            .join(" × ");
        let values = factors
            .iter()
            .map(|x| {
                if x.name.ends_with(" B") {
                    x.name.clone()
                } else {
                    x.value.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(" × ");
        Term {
            component,
            label: label.into(),
            formula,
            values,
            bytes,
        }
    }

    /// A sum of sub-terms folded into one line (keeps each part's formula).
    pub fn sum(component: Component, label: impl Into<String>, parts: &[Term]) -> Term {
        let bytes = parts
            .iter()
            .fold(0u128, |acc, t| acc.saturating_add(t.bytes));
        let formula = parts
            .iter()
            .map(|t| format!("({})", t.formula))
            .collect::<Vec<_>>()
            .join(" + ");
        let values = parts
            .iter()
            .map(|t| format!("({})", t.values))
            .collect::<Vec<_>>()
            .join(" + ");
        Term {
            component,
            label: label.into(),
            formula,
            values,
            bytes,
        }
    }
}
