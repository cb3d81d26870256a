//! Decoder-only architectures: the config.json numbers the memory model needs, their
//! validation, and exact parameter counts derived from them.

use serde::{Deserialize, Serialize};

use super::names::names;

use super::error::PlanError;

/// Model family: decides the layer layout (fused projections, extra norms, softcapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum Family {
    /// Llama 2 / 3 / 3.1 / 3.2 (and Yi, which shares the layout).
    Llama,
    /// Mistral (same layout as Llama).
    Mistral,
    /// Qwen2 / Qwen2.5: q, k, v biases.
    Qwen2,
    /// Qwen3: per-head q/k RMSNorm, no biases.
    Qwen3,
    /// Gemma 2: four norms per layer, scaled embeddings, GeLU-tanh, logit softcapping.
    Gemma2,
    /// Gemma 3 (text): four norms per layer, q/k norms, scaled embeddings, GeLU-tanh.
    Gemma3,
    /// Phi-3: fused qkv_proj and gate_up_proj.
    Phi3,
}

names!(Family {
    Llama => "llama" | "llama2" | "llama3" | "yi",
    Mistral => "mistral",
    Qwen2 => "qwen2" | "qwen2.5",
    Qwen3 => "qwen3",
    Gemma2 => "gemma2",
    Gemma3 => "gemma3" | "gemma3_text",
    Phi3 => "phi3" | "phi_3",
});

impl TryFrom<String> for Family {
    type Error = String;
    fn try_from(s: String) -> Result<Family, String> {
        Family::parse(&s).ok_or_else(|| {
            format!(
                "unsupported model family {s:?} (supported: {})",
                Family::choices()
            )
        })
    }
}

/// Everything that tells one family's layer layout from another's, in one row per family:
/// adding a family is a variant of [`Family`], its names in `names!` above, and its row in
/// [`Family::layout`]; the model, the import and the parameter counts read these flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyLayout {
    /// RMSNorms per decoder layer on the residual stream (Gemma adds post-attention and
    /// pre/post-feed-forward norms).
    pub norms_per_layer: u128,
    /// A per-head RMSNorm on q and k.
    pub qk_norm: bool,
    /// MLP activation GeLU-tanh rather than SiLU.
    pub gelu: bool,
    /// One fused `qkv_proj` and one fused `gate_up_proj` (Phi-3).
    pub fused_projections: bool,
    /// q, k, v carry biases unless the config says otherwise.
    pub qkv_bias: bool,
    /// Attention and final-logit softcapping unless the config turns them off (Gemma 2).
    pub softcapping: bool,
    /// `tie_word_embeddings` when config.json omits it.
    pub tie_default: bool,
    /// `head_dim` when config.json omits it (else hidden / heads).
    pub head_dim_default: Option<u64>,
}

impl Family {
    /// The family's layout flags.
    pub fn layout(self) -> FamilyLayout {
        let base = FamilyLayout {
            norms_per_layer: 2,
            qk_norm: false,
            gelu: false,
            fused_projections: false,
            qkv_bias: false,
            softcapping: false,
            tie_default: false,
            head_dim_default: None,
        };
        let gemma = FamilyLayout {
            norms_per_layer: 4,
            gelu: true,
            tie_default: true,
            ..base
        };
        match self {
            Family::Llama | Family::Mistral => base,
            Family::Qwen2 => FamilyLayout {
                qkv_bias: true,
                ..base
            },
            Family::Qwen3 => FamilyLayout {
                qk_norm: true,
                ..base
            },
            Family::Gemma2 => FamilyLayout {
                softcapping: true,
                ..gemma
            },
            Family::Gemma3 => FamilyLayout {
                qk_norm: true,
                head_dim_default: Some(256), // Gemma3TextConfig's default
                ..gemma
            },
            Family::Phi3 => FamilyLayout {
                fused_projections: true,
                ..base
            },
        }
    }

    /// RMSNorms per decoder layer on the residual stream.
    pub fn norms_per_layer(self) -> u128 {
        self.layout().norms_per_layer
    }

    /// Whether q and k get a per-head RMSNorm (Qwen3, Gemma 3).
    pub fn has_qk_norm(self) -> bool {
        self.layout().qk_norm
    }

    /// Whether the MLP activation is GeLU-tanh (Gemma) rather than SiLU.
    pub fn gelu(self) -> bool {
        self.layout().gelu
    }
}

/// The architecture numbers of one model, as in its config.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Architecture {
    /// Short catalog name (e.g. `llama2-7b`); empty for pasted configs.
    #[serde(default)]
    pub name: String,
    /// Family / model_type.
    pub family: Family,
    /// d_model.
    pub hidden_size: u64,
    /// MLP inner width.
    pub intermediate_size: u64,
    /// Decoder layers.
    pub num_hidden_layers: u64,
    /// Query heads.
    pub num_attention_heads: u64,
    /// Key/value heads (GQA); defaults to the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<u64>,
    /// Per-head width; defaults to hidden / heads.
    #[serde(default)]
    pub head_dim: Option<u64>,
    /// Vocabulary size.
    pub vocab_size: u64,
    /// Whether lm_head shares the embedding matrix.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Biases on q, k, v (Qwen2 has them; `None` = the family default).
    #[serde(default, alias = "attention_bias")]
    pub qkv_bias: Option<bool>,
    /// Gemma-2 attention-logit softcapping.
    #[serde(default)]
    pub attn_logit_softcapping: Option<f64>,
    /// Gemma-2 final-logit softcapping.
    #[serde(default)]
    pub final_logit_softcapping: Option<f64>,
}

/// One Linear layer of a decoder block that LoRA can adapt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinearShape {
    /// Module name as peft targets it (`q_proj`, `qkv_proj`, ...).
    pub name: &'static str,
    /// Input features.
    pub in_features: u128,
    /// Output features.
    pub out_features: u128,
    /// Which of the canonical targets (q,k,v,o,gate,up,down) select this module.
    pub selected_by: &'static [Target],
    /// Whether the layer has a bias.
    pub bias: bool,
}

/// Canonical LoRA target names; fused families map several onto one module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Target {
    /// q_proj
    Q,
    /// k_proj
    K,
    /// v_proj
    V,
    /// o_proj
    O,
    /// gate_proj
    Gate,
    /// up_proj
    Up,
    /// down_proj
    Down,
}

names!(Target {
    Q => "q" | "q_proj",
    K => "k" | "k_proj",
    V => "v" | "v_proj",
    O => "o" | "o_proj",
    Gate => "gate" | "gate_proj",
    Up => "up" | "up_proj",
    Down => "down" | "down_proj",
});

impl Target {}

/// Upper bounds that keep every byte count far from overflow (u128 arithmetic).
const MAX_DIM: u64 = 1 << 20;
const MAX_LAYERS: u64 = 4096;
const MAX_VOCAB: u64 = 1 << 24;

impl Architecture {
    /// Checks that the numbers describe a buildable model.
    pub fn validate(&self) -> Result<(), PlanError> {
        let bad =
            |field: &'static str, why: String| Err(PlanError::InvalidArchitecture { field, why });
        let positive = [
            ("hidden_size", self.hidden_size, MAX_DIM),
            ("intermediate_size", self.intermediate_size, MAX_DIM * 4),
            ("num_hidden_layers", self.num_hidden_layers, MAX_LAYERS),
            ("num_attention_heads", self.num_attention_heads, MAX_DIM),
            ("vocab_size", self.vocab_size, MAX_VOCAB),
        ];
        for (field, v, max) in positive {
            if v == 0 {
                return bad(field, "must be at least 1".into());
            }
            if v > max {
                return bad(
                    field,
                    format!("{v} is larger than the supported maximum {max}"),
                );
            }
        }
        let kv = self.kv_heads();
        if kv == 0 || kv > self.num_attention_heads {
            return bad(
                "num_key_value_heads",
                format!(
                    "{kv} must be between 1 and num_attention_heads ({})",
                    self.num_attention_heads
                ),
            );
        }
        if self.num_attention_heads % kv != 0 {
            return bad(
                "num_key_value_heads",
                format!(
                    "{kv} does not divide num_attention_heads ({})",
                    self.num_attention_heads
                ),
            );
        }
        match self.head_dim {
            Some(0) => return bad("head_dim", "must be at least 1".into()),
            Some(d) if d > MAX_DIM => {
                return bad("head_dim", format!("{d} is larger than {MAX_DIM}"))
            }
            Some(_) => {}
            None => {
                if self.hidden_size % self.num_attention_heads != 0 {
                    return bad(
                        "num_attention_heads",
                        format!(
                            "{} heads do not divide hidden_size {} (and no head_dim is given)",
                            self.num_attention_heads, self.hidden_size
                        ),
                    );
                }
            }
        }
        for (field, v) in [
            ("attn_logit_softcapping", self.attn_logit_softcapping),
            ("final_logit_softcapping", self.final_logit_softcapping),
        ] {
            if let Some(x) = v {
                if !x.is_finite() || x < 0.0 {
                    return bad(field, format!("{x} must be a finite non-negative number"));
                }
            }
        }
        Ok(())
    }

    /// Key/value heads (defaults to the query heads).
    pub fn kv_heads(&self) -> u64 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width.
    pub fn head_dim(&self) -> u64 {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Width of the query projection output (heads × head_dim).
    pub fn q_dim(&self) -> u128 {
        self.num_attention_heads as u128 * self.head_dim() as u128
    }

    /// Width of the key (and value) projection output (kv heads × head_dim).
    pub fn kv_dim(&self) -> u128 {
        self.kv_heads() as u128 * self.head_dim() as u128
    }

    fn has_qkv_bias(&self) -> bool {
        self.qkv_bias.unwrap_or(self.family.layout().qkv_bias)
    }

    /// Attention-logit softcapping (Gemma 2).
    pub fn attn_softcap(&self) -> bool {
        self.family.layout().softcapping && self.attn_logit_softcapping.unwrap_or(50.0) > 0.0
    }

    /// Final-logit softcapping (Gemma 2).
    pub fn final_softcap(&self) -> bool {
        self.family.layout().softcapping && self.final_logit_softcapping.unwrap_or(30.0) > 0.0
    }

    /// The Linear layers of one decoder block, in forward order.
    pub fn linears(&self) -> Vec<LinearShape> {
        let h = self.hidden_size as u128;
        let i = self.intermediate_size as u128;
        let (qd, kvd) = (self.q_dim(), self.kv_dim());
        let bias = self.has_qkv_bias();
        use Target::*;
        if self.family.layout().fused_projections {
            vec![
                LinearShape {
                    name: "qkv_proj",
                    in_features: h,
                    out_features: qd + 2 * kvd,
                    selected_by: &[Q, K, V],
                    bias,
                },
                LinearShape {
                    name: "o_proj",
                    in_features: qd,
                    out_features: h,
                    selected_by: &[O],
                    bias: false,
                },
                LinearShape {
                    name: "gate_up_proj",
                    in_features: h,
                    out_features: 2 * i,
                    selected_by: &[Gate, Up],
                    bias: false,
                },
                LinearShape {
                    name: "down_proj",
                    in_features: i,
                    out_features: h,
                    selected_by: &[Down],
                    bias: false,
                },
            ]
        } else {
            vec![
                LinearShape {
                    name: "q_proj",
                    in_features: h,
                    out_features: qd,
                    selected_by: &[Q],
                    bias,
                },
                LinearShape {
                    name: "k_proj",
                    in_features: h,
                    out_features: kvd,
                    selected_by: &[K],
                    bias,
                },
                LinearShape {
                    name: "v_proj",
                    in_features: h,
                    out_features: kvd,
                    selected_by: &[V],
                    bias,
                },
                LinearShape {
                    name: "o_proj",
                    in_features: qd,
                    out_features: h,
                    selected_by: &[O],
                    bias: false,
                },
                LinearShape {
                    name: "gate_proj",
                    in_features: h,
                    out_features: i,
                    selected_by: &[Gate],
                    bias: false,
                },
                LinearShape {
                    name: "up_proj",
                    in_features: h,
                    out_features: i,
                    selected_by: &[Up],
                    bias: false,
                },
                LinearShape {
                    name: "down_proj",
                    in_features: i,
                    out_features: h,
                    selected_by: &[Down],
                    bias: false,
                },
            ]
        }
    }

    /// Parameters of the Linear weights (no biases) of one decoder block.
    pub fn linear_weight_params_per_layer(&self) -> u128 {
        self.linears()
            .iter()
            .map(|l| l.in_features * l.out_features)
            .sum()
    }

    /// Everything in one decoder block that is not a Linear weight: biases and norm weights.
    pub fn small_params_per_layer(&self) -> u128 {
        let h = self.hidden_size as u128;
        let biases: u128 = self
            .linears()
            .iter()
            .filter(|l| l.bias)
            .map(|l| l.out_features)
            .sum();
        let qk_norm = if self.family.has_qk_norm() {
            2 * self.head_dim() as u128
        } else {
            0
        };
        biases + self.family.norms_per_layer() * h + qk_norm
    }

    /// Embedding matrix parameters (vocab × hidden).
    pub fn embedding_params(&self) -> u128 {
        self.vocab_size as u128 * self.hidden_size as u128
    }

    /// Separate lm_head parameters (0 when tied to the embedding).
    pub fn lm_head_params(&self) -> u128 {
        if self.tie_word_embeddings {
            0
        } else {
            self.embedding_params()
        }
    }

    /// Total parameters of the base model (what `model.num_parameters()` reports).
    pub fn total_params(&self) -> u128 {
        let layers = self.num_hidden_layers as u128;
        layers * (self.linear_weight_params_per_layer() + self.small_params_per_layer())
            + self.embedding_params()
            + self.lm_head_params()
            + self.hidden_size as u128
    }
}
