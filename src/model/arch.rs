//! Decoder-only architectures: the config.json numbers the memory model needs, their
//! validation, and exact parameter counts derived from them.

use serde::{Deserialize, Serialize};

use super::names::names;

use super::error::PlanError;

pub use super::family::{
    AttentionKind, DenseLayers, Family, FamilyLayout, HybridLayout, KwargsOrder, MoeLayout, Mrope,
    NormKind, QkNorm, Renorm, SharedExperts, Sliding, VisionKind,
};

/// Which kind of decoder layer: its token mixer and its feed-forward block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LayerKind {
    /// Full attention and a dense MLP (gate, up, down Linear layers).
    Dense,
    /// Full attention, a router and routed experts (plus shared experts where the family has
    /// them).
    Moe,
    /// Gated DeltaNet linear attention and a dense MLP (a hybrid family's linear layers).
    Linear,
    /// Gated DeltaNet linear attention, a router and routed experts, and the shared expert
    /// (Qwen3.5-MoE's linear layers).
    LinearMoe,
}

impl LayerKind {
    /// Whether the layer's feed-forward block is a mixture of experts.
    pub fn is_moe(self) -> bool {
        matches!(self, LayerKind::Moe | LayerKind::LinearMoe)
    }

    /// Whether the layer's token mixer is Gated DeltaNet linear attention.
    pub fn is_linear(self) -> bool {
        matches!(self, LayerKind::Linear | LayerKind::LinearMoe)
    }
}

/// A hybrid model's token mixer of one layer (config.json's `layer_types` entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LayerType {
    /// Softmax attention over the whole sequence.
    #[serde(rename = "full_attention")]
    Full,
    /// Gated DeltaNet linear attention.
    #[serde(rename = "linear_attention")]
    Linear,
}

/// The config.json numbers of a hybrid linear-attention model (Qwen3.5's `text_config`), each
/// under its config.json key; a missing number takes the config class's default.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LinearAttnConfig {
    /// Each layer's token mixer.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_layer_types"
    )]
    pub layer_types: Option<Vec<LayerType>>,
    /// Without `layer_types`: every `full_attention_interval`-th layer is full attention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_attention_interval: Option<u64>,
    /// Gated DeltaNet query/key heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_num_key_heads: Option<u64>,
    /// Gated DeltaNet value heads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_num_value_heads: Option<u64>,
    /// Gated DeltaNet query/key head width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_key_head_dim: Option<u64>,
    /// Gated DeltaNet value head width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_value_head_dim: Option<u64>,
    /// The depthwise causal convolution's kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub linear_conv_kernel_dim: Option<u64>,
    /// Full attention's sigmoid output gate (q_proj twice as wide).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_output_gate: Option<bool>,
}

/// The config.json numbers of a family whose layers rotate or not by layer (Llama 4,
/// [`crate::model::family::AttentionKind::RotaryOrNope`]), each under its config.json key; a
/// missing number takes the config class's default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NopeConfig {
    /// One flag per layer: 1 where the layer rotates q and k, 0 where it does not (the name is
    /// transformers').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_rope_layers: Option<Vec<u64>>,
    /// Without `no_rope_layers`: every `no_rope_layer_interval`-th layer does not rotate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_rope_layer_interval: Option<u64>,
    /// The layers without rotary scale their queries by position.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attn_temperature_tuning: Option<bool>,
    /// The rotary layers attend within chunks of this many tokens (absent: the config class's
    /// 8192; 0: none, config.json's `null`, with which transformers makes every layer's
    /// `layer_types` entry `full_attention`, `configuration_llama4.py:187-191`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention_chunk_size: Option<u64>,
}

/// Gated DeltaNet widths with the config class's defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gdn {
    /// Query/key heads.
    pub key_heads: u64,
    /// Value heads (a multiple of the key heads).
    pub value_heads: u64,
    /// Query/key head width.
    pub key_dim: u64,
    /// Value head width.
    pub value_dim: u64,
    /// Convolution kernel.
    pub conv_kernel: u64,
    /// The input projections are Qwen3-Next's fused two (`HybridLayout::fused_in_proj`).
    pub fused_in_proj: bool,
}

impl Gdn {
    /// Width of all query (or key) heads.
    pub fn key_width(&self) -> u64 {
        self.key_heads * self.key_dim
    }
    /// Width of all value heads.
    pub fn value_width(&self) -> u64 {
        self.value_heads * self.value_dim
    }
    /// Channels of the causal convolution (q, k and v: `in_proj_qkv`'s output).
    pub fn conv_dim(&self) -> u64 {
        2 * self.key_width() + self.value_width()
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
    /// The part of each head that rotates, for families with a partial rotary
    /// ([`FamilyLayout::partial_rotary`]; `None`: the config class's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial_rotary_factor: Option<f64>,
    /// q/k RMSNorms, for families whose config switches them
    /// ([`FamilyLayout::qk_norm_by_config`]; `None`: the config class's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_qk_norm: Option<bool>,
    /// Mixture-of-experts numbers (config.json keys; empty for dense models).
    #[serde(flatten)]
    pub moe: MoeConfig,
    /// DeepSeek's multi-head latent attention numbers (config.json keys; empty otherwise).
    #[serde(flatten)]
    pub mla: MlaConfig,
    /// A hybrid model's linear-attention numbers (config.json keys; empty otherwise).
    #[serde(flatten)]
    pub linear: LinearAttnConfig,
    /// Which layers rotate, for Llama 4 (config.json keys; empty otherwise).
    #[serde(flatten)]
    pub nope: NopeConfig,
    /// A vision-language checkpoint's vision tower (`vision_config`): its weights load with the
    /// model whether or not a sample has an image.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        alias = "vision_config"
    )]
    pub vision: Option<crate::model::vision::VisionTower>,
}

/// The config.json numbers of a mixture-of-experts model, each under its config.json key
/// (aliases: the other families' spellings). A missing number takes the transformers config
/// class's default for the family.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoeConfig {
    /// Routed experts per MoE layer (`num_experts`, `num_local_experts`, `n_routed_experts`).
    #[serde(
        default,
        alias = "num_local_experts",
        alias = "n_routed_experts",
        skip_serializing_if = "Option::is_none"
    )]
    pub num_experts: Option<u64>,
    /// Experts each token is routed to (top-k).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_experts_per_tok: Option<u64>,
    /// Expert width of Qwen3-MoE and DeepSeek (their `intermediate_size` is the dense layers').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_intermediate_size: Option<u64>,
    /// DeepSeek: shared experts (one MLP of `moe_intermediate_size × n_shared_experts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_shared_experts: Option<u64>,
    /// Qwen3.5-MoE: the width of the gated shared expert.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_expert_intermediate_size: Option<u64>,
    /// DeepSeek: the first layers keep a dense MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_k_dense_replace: Option<u64>,
    /// Qwen3-MoE: every `decoder_sparse_step`-th layer is MoE (Llama 4's
    /// `interleave_moe_layer_step`: its `moe_layers` default, `range(step - 1, layers, step)`,
    /// is the same rule).
    #[serde(
        default,
        alias = "interleave_moe_layer_step",
        skip_serializing_if = "Option::is_none"
    )]
    pub decoder_sparse_step: Option<u64>,
    /// Llama 4: the width of the dense layers' MLP between the MoE ones (Maverick's
    /// `intermediate_size_mlp`; `intermediate_size` is the experts' and the shared expert's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub intermediate_size_mlp: Option<u64>,
    /// Qwen3-MoE: layers that keep a dense MLP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mlp_only_layers: Option<Vec<u64>>,
    /// Renormalise the top-k routing weights (Qwen3-MoE, OLMoE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm_topk_prob: Option<bool>,
    /// GLM-4.5: the expert groups of the sigmoid routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_group: Option<u64>,
    /// GLM-4.5: the groups each token's experts are chosen from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topk_group: Option<u64>,
}

/// DeepSeek's multi-head latent attention (config.json keys).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MlaConfig {
    /// Rank of the query compression (`null`: a plain q_proj).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q_lora_rank: Option<u64>,
    /// Rank of the key/value compression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_lora_rank: Option<u64>,
    /// Per-head query/key width without rotary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qk_nope_head_dim: Option<u64>,
    /// Per-head query/key width with rotary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qk_rope_head_dim: Option<u64>,
    /// Per-head value width.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v_head_dim: Option<u64>,
}

/// MLA widths with the config class's defaults applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mla {
    /// q_lora_rank (None: plain q_proj).
    pub q_rank: Option<u128>,
    /// kv_lora_rank.
    pub kv_rank: u128,
    /// qk_nope_head_dim.
    pub nope: u128,
    /// qk_rope_head_dim.
    pub rope: u128,
    /// v_head_dim.
    pub v: u128,
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
    /// Gated DeltaNet's in_proj_qkv
    #[serde(rename = "in_proj_qkv")]
    InProjQkv,
    /// Gated DeltaNet's in_proj_z (the output gate)
    #[serde(rename = "in_proj_z")]
    InProjZ,
    /// Gated DeltaNet's in_proj_b (β)
    #[serde(rename = "in_proj_b")]
    InProjB,
    /// Gated DeltaNet's in_proj_a (the decay)
    #[serde(rename = "in_proj_a")]
    InProjA,
    /// Gated DeltaNet's out_proj
    #[serde(rename = "out_proj")]
    OutProj,
    /// Qwen3-Next's Gated DeltaNet in_proj_qkvz (q, k, v and the output gate, fused)
    #[serde(rename = "in_proj_qkvz")]
    InProjQkvz,
    /// Qwen3-Next's Gated DeltaNet in_proj_ba (β and the decay, fused)
    #[serde(rename = "in_proj_ba")]
    InProjBa,
    /// Qwen3.5-MoE's shared_expert_gate (`Linear(hidden, 1)`)
    #[serde(rename = "shared_expert_gate")]
    SharedExpertGate,
}

names!(Target {
    Q => "q" | "q_proj",
    K => "k" | "k_proj",
    V => "v" | "v_proj",
    O => "o" | "o_proj",
    Gate => "gate" | "gate_proj",
    Up => "up" | "up_proj",
    Down => "down" | "down_proj",
    InProjQkv => "in_proj_qkv",
    InProjZ => "in_proj_z",
    InProjB => "in_proj_b",
    InProjA => "in_proj_a",
    OutProj => "out_proj",
    InProjQkvz => "in_proj_qkvz",
    InProjBa => "in_proj_ba",
    SharedExpertGate => "shared_expert_gate",
});

impl Target {
    /// Whether it names an MLP projection (`gate_proj`, `up_proj`, `down_proj`).
    pub fn is_mlp(self) -> bool {
        matches!(self, Target::Gate | Target::Up | Target::Down)
    }

    /// The module name peft matches (`q_proj`, `in_proj_qkv`, …).
    pub fn module_name(self) -> &'static str {
        match self {
            Target::Q => "q_proj",
            Target::K => "k_proj",
            Target::V => "v_proj",
            Target::O => "o_proj",
            Target::Gate => "gate_proj",
            Target::Up => "up_proj",
            Target::Down => "down_proj",
            Target::InProjQkv => "in_proj_qkv",
            Target::InProjZ => "in_proj_z",
            Target::InProjB => "in_proj_b",
            Target::InProjA => "in_proj_a",
            Target::OutProj => "out_proj",
            Target::InProjQkvz => "in_proj_qkvz",
            Target::InProjBa => "in_proj_ba",
            Target::SharedExpertGate => "shared_expert_gate",
        }
    }
}

/// config.json's `layer_types`, read leniently: a list of names (`linear_attention` is a Gated
/// DeltaNet layer, any other kind — full, sliding, chunked — attends), anything else nothing.
/// Only hybrid families read it.
fn lenient_layer_types<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Vec<LayerType>>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.and_then(|v| {
        v.as_array().and_then(|a| {
            a.iter()
                .map(|t| {
                    t.as_str().map(|s| {
                        if s == "linear_attention" {
                            LayerType::Linear
                        } else {
                            LayerType::Full
                        }
                    })
                })
                .collect()
        })
    }))
}

/// Upper bounds that keep every byte count far from overflow (u128 arithmetic).
const MAX_DIM: u64 = 1 << 20;
pub(crate) const MAX_LAYERS: u64 = 4096;
const MAX_VOCAB: u64 = 1 << 24;
const MAX_EXPERTS: u128 = 1 << 12;

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
        // A vision tower, experts and linear attention are extended steps' (model::extended:
        // a build without them refuses those architectures before it reads them).
        let extended = super::extended::EXTENDED;
        if let Some(t) = self.vision.as_ref().filter(|_| extended) {
            let Some(kind) = self.family.layout().vision else {
                return bad(
                    "vision_config",
                    format!("lorafit plans no vision tower for {}", self.family.name()),
                );
            };
            t.validate(kind)
                .map_err(|why| PlanError::InvalidArchitecture {
                    field: "vision_config",
                    why,
                })?;
            if !t.deepstack_visual_indexes.is_empty() && kind.default_deepstack().is_none() {
                return bad(
                    "vision_config",
                    format!(
                        "{}'s vision tower has no deepstack mergers (deepstack_visual_indexes must be empty)",
                        self.family.name()
                    ),
                );
            }
            if t.out_hidden_size != self.hidden_size {
                return bad(
                    "vision_config",
                    format!(
                        "out_hidden_size {} must equal the language model's hidden_size {}",
                        t.out_hidden_size, self.hidden_size
                    ),
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
        if extended {
            // (a partial rotary is the hybrid and MoE families', the extended steps')
            self.validate_rotary()?;
            self.validate_moe()?;
            self.validate_linear()?;
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

    /// Range checks of the MoE and MLA numbers (absent ones take the family's defaults).
    fn validate_moe(&self) -> Result<(), PlanError> {
        let bad =
            |field: &'static str, why: String| Err(PlanError::InvalidArchitecture { field, why });
        if !self.is_moe() {
            return Ok(());
        }
        let e = self.num_experts();
        if e == 0 || e > MAX_EXPERTS {
            return bad(
                "num_experts",
                format!("{e} must be between 1 and {MAX_EXPERTS}"),
            );
        }
        if let Some((g, kg)) = self.expert_groups() {
            if g == 0 || e % u128::from(g) != 0 || e / u128::from(g) < 2 {
                return bad(
                    "n_group",
                    format!("{g} must divide num_experts ({e}) into groups of at least 2"),
                );
            }
            if kg == 0 || kg > g {
                return bad(
                    "topk_group",
                    format!("{kg} must be between 1 and n_group ({g})"),
                );
            }
        }
        let k = self.experts_per_tok();
        if k == 0 || k > e {
            return bad(
                "num_experts_per_tok",
                if k == 0 {
                    "is required and must be at least 1".into()
                } else {
                    format!("{k} must not exceed the number of experts ({e})")
                },
            );
        }
        for (field, v) in [
            ("moe_intermediate_size", self.moe.moe_intermediate_size),
            ("n_shared_experts", self.moe.n_shared_experts),
            (
                "shared_expert_intermediate_size",
                self.moe.shared_expert_intermediate_size,
            ),
            ("decoder_sparse_step", self.moe.decoder_sparse_step),
            ("intermediate_size_mlp", self.moe.intermediate_size_mlp),
            ("q_lora_rank", self.mla.q_lora_rank),
            ("kv_lora_rank", self.mla.kv_lora_rank),
            ("qk_nope_head_dim", self.mla.qk_nope_head_dim),
            ("qk_rope_head_dim", self.mla.qk_rope_head_dim),
            ("v_head_dim", self.mla.v_head_dim),
        ] {
            match v {
                Some(0) if field != "n_shared_experts" => {
                    return bad(field, "must be at least 1".into())
                }
                Some(x) if x > MAX_DIM => {
                    return bad(field, format!("{x} is larger than {MAX_DIM}"))
                }
                _ => {}
            }
        }
        if self.expert_width() == 0 || self.expert_width() > (MAX_DIM * 4) as u128 {
            return bad(
                "moe_intermediate_size",
                format!("expert width {} is out of range", self.expert_width()),
            );
        }
        if let Some(m) = self.mla() {
            if m.rope % 2 == 1 {
                return bad("qk_rope_head_dim", format!("{} must be even", m.rope));
            }
        }
        if self
            .moe
            .mlp_only_layers
            .as_ref()
            .is_some_and(|v| v.len() > MAX_LAYERS as usize)
        {
            return bad("mlp_only_layers", "lists too many layers".into());
        }
        Ok(())
    }

    /// Range checks of a hybrid model's linear-attention numbers.
    fn validate_linear(&self) -> Result<(), PlanError> {
        let bad =
            |field: &'static str, why: String| Err(PlanError::InvalidArchitecture { field, why });
        let Some(g) = self.gdn() else {
            return Ok(());
        };
        let l = &self.linear;
        for (field, v) in [
            ("linear_num_key_heads", g.key_heads),
            ("linear_num_value_heads", g.value_heads),
            ("linear_key_head_dim", g.key_dim),
            ("linear_value_head_dim", g.value_dim),
            ("linear_conv_kernel_dim", g.conv_kernel),
            (
                "full_attention_interval",
                l.full_attention_interval.unwrap_or(1),
            ),
        ] {
            if v == 0 {
                return bad(field, "must be at least 1".into());
            }
            if v > MAX_DIM {
                return bad(field, format!("{v} is larger than {MAX_DIM}"));
            }
        }
        if g.value_heads % g.key_heads != 0 {
            return bad(
                "linear_num_value_heads",
                format!(
                    "{} is not a multiple of linear_num_key_heads ({})",
                    g.value_heads, g.key_heads
                ),
            );
        }
        if let Some(t) = &l.layer_types {
            if t.len() as u64 != self.num_hidden_layers {
                return bad(
                    "layer_types",
                    format!(
                        "lists {} layers; num_hidden_layers is {}",
                        t.len(),
                        self.num_hidden_layers
                    ),
                );
            }
        }
        Ok(())
    }

    /// Range checks of the rotating part of each head (families with a partial rotary).
    fn validate_rotary(&self) -> Result<(), PlanError> {
        let bad =
            |field: &'static str, why: String| Err(PlanError::InvalidArchitecture { field, why });
        if self.family.layout().partial_rotary.is_none() {
            return Ok(());
        }
        if let Some(f) = self.partial_rotary_factor {
            if !(f > 0.0 && f <= 1.0) {
                return bad(
                    "partial_rotary_factor",
                    format!("{f} must be above 0 and at most 1"),
                );
            }
        }
        if self.rotary_dim() % 2 == 1 || self.rotary_dim() == 0 {
            return bad(
                "partial_rotary_factor",
                format!(
                    "rotates {} of head_dim {}: must be a positive even width",
                    self.rotary_dim(),
                    self.head_dim()
                ),
            );
        }
        Ok(())
    }

    /// The Gated DeltaNet widths of a hybrid family, with the config class's defaults.
    pub fn gdn(&self) -> Option<Gdn> {
        let h = self.family.layout().hybrid?;
        let l = &self.linear;
        Some(Gdn {
            key_heads: l.linear_num_key_heads.unwrap_or(h.default_key_heads),
            value_heads: l.linear_num_value_heads.unwrap_or(h.default_value_heads),
            key_dim: l.linear_key_head_dim.unwrap_or(h.default_key_head_dim),
            value_dim: l.linear_value_head_dim.unwrap_or(h.default_value_head_dim),
            conv_kernel: l.linear_conv_kernel_dim.unwrap_or(h.default_conv_kernel),
            fused_in_proj: h.fused_in_proj,
        })
    }

    /// Whether layer `li` (0-based) is a Gated DeltaNet layer of a hybrid model: as
    /// `layer_types` says, else every layer but each `full_attention_interval`-th.
    pub fn is_linear_layer(&self, li: u64) -> bool {
        let Some(h) = self.family.layout().hybrid else {
            return false;
        };
        match &self.linear.layer_types {
            Some(t) => t.get(li as usize) == Some(&LayerType::Linear),
            None => {
                let every = self
                    .linear
                    .full_attention_interval
                    .unwrap_or(h.default_interval)
                    .max(1);
                (li + 1) % every != 0
            }
        }
    }

    /// Whether layer `li` (0-based) rotates q and k: always, but for the layers a family with
    /// layers without rotary leaves out (Llama 4: `no_rope_layers`, else every
    /// `no_rope_layer_interval`-th layer, `configuration_llama4.py:169-172`).
    pub fn rotates(&self, li: u64) -> bool {
        // (a build without the extended ops plans no Llama 4: every layer rotates there)
        let Some(default) = self
            .family
            .layout()
            .nope_interval_default
            .filter(|_| super::extended::EXTENDED)
        else {
            return true;
        };
        match &self.nope.no_rope_layers {
            Some(l) => l.get(li as usize).is_none_or(|f| *f != 0),
            None => (li + 1) % self.nope.no_rope_layer_interval.unwrap_or(default).max(1) != 0,
        }
    }

    /// Whether the layers without rotary scale their queries by position
    /// (`attn_temperature_tuning`, default true).
    pub fn temperature_tuned(&self) -> bool {
        self.family.layout().nope_interval_default.is_some()
            && self.nope.attn_temperature_tuning.unwrap_or(true)
    }

    /// The chunk the rotary layers attend within, for Llama 4 (`attention_chunk_size`, default
    /// 8192); `None` for the families without chunks, and for a Llama 4 without them.
    pub fn attention_chunk(&self) -> Option<u64> {
        self.family
            .layout()
            .nope_interval_default
            .filter(|_| super::extended::EXTENDED)
            .map(|_| self.nope.attention_chunk_size.unwrap_or(8192))
            .filter(|&c| c > 0)
    }

    /// Full attention's q_proj also projects the sigmoid output gate (Qwen3.5).
    pub fn attn_output_gate(&self) -> bool {
        self.family
            .layout()
            .hybrid
            .is_some_and(|h| self.linear.attn_output_gate.unwrap_or(h.output_gate))
    }

    /// The rotating part of each head (`head_dim × partial_rotary_factor` for families with a
    /// partial rotary, else the whole head).
    pub fn rotary_dim(&self) -> u64 {
        match self.family.layout().partial_rotary {
            Some((n, d)) => match self.partial_rotary_factor {
                // transformers: `int(head_dim * partial_rotary_factor)`.
                Some(f) => (self.head_dim() as f64 * f) as u64,
                None => self.head_dim() * n / d.max(1),
            },
            None => self.head_dim(),
        }
    }

    /// Where q and k are RMS-normalised: the family's place, unless its config switches the
    /// norms and config.json leaves them off.
    pub fn qk_norm(&self) -> QkNorm {
        let l = self.family.layout();
        if l.qk_norm_by_config
            .is_some_and(|default| !self.use_qk_norm.unwrap_or(default))
        {
            QkNorm::None
        } else {
            l.qk_norm
        }
    }

    /// Key/value heads (defaults to the query heads).
    pub fn kv_heads(&self) -> u64 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width (of the rotary part for MLA: DeepSeek's config sets `head_dim =
    /// qk_rope_head_dim`).
    pub fn head_dim(&self) -> u64 {
        if let Some(m) = self.mla() {
            return m.rope as u64;
        }
        let moe_default = if self.is_moe() {
            self.family.layout().head_dim_default
        } else {
            None
        };
        self.head_dim
            .or(moe_default)
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

    /// The family's MoE block, if it is an MoE family.
    pub fn moe_layout(&self) -> Option<MoeLayout> {
        self.family.layout().moe
    }

    /// Whether this is a mixture-of-experts model.
    pub fn is_moe(&self) -> bool {
        self.moe_layout().is_some()
    }

    /// Routed experts per MoE layer (the config class's default when config.json omits it).
    pub fn num_experts(&self) -> u128 {
        let default = self.moe_layout().map_or(0, |m| m.default_experts);
        self.moe.num_experts.unwrap_or(default) as u128
    }

    /// Experts per token (top-k; DeepSeek's config class has no default).
    pub fn experts_per_tok(&self) -> u128 {
        let default = self
            .moe_layout()
            .and_then(|m| m.default_experts_per_tok)
            .unwrap_or(0);
        self.moe.num_experts_per_tok.unwrap_or(default) as u128
    }

    /// Width of one routed expert (`moe_intermediate_size` or `intermediate_size` by family).
    pub fn expert_width(&self) -> u128 {
        match self.moe_layout() {
            Some(m) if m.moe_width => self
                .moe
                .moe_intermediate_size
                .unwrap_or(m.default_moe_width) as u128,
            _ => self.intermediate_size as u128,
        }
    }

    /// The MLP width of a dense full-attention layer: `intermediate_size`, or Llama 4's
    /// `intermediate_size_mlp` where its dense layers sit between MoE ones (Maverick).
    pub fn dense_width(&self) -> u128 {
        // (Llama 4 is the full planner's, `extended::needed`)
        let llama4 =
            crate::model::extended::EXTENDED && self.moe_layout().is_some_and(|m| m.all_experts);
        u128::from(
            self.moe
                .intermediate_size_mlp
                .filter(|_| llama4)
                .unwrap_or(self.intermediate_size),
        )
    }

    /// Width of the shared-experts MLP (0 without shared experts).
    pub fn shared_width(&self) -> u128 {
        match self.moe_layout().map(|m| m.shared) {
            Some(SharedExperts::Added { default_count }) => {
                self.expert_width() * self.moe.n_shared_experts.unwrap_or(default_count) as u128
            }
            Some(SharedExperts::Summed) => self.expert_width(),
            Some(SharedExperts::Gated { default_width }) => {
                self.moe
                    .shared_expert_intermediate_size
                    .unwrap_or(default_width) as u128
            }
            _ => 0,
        }
    }

    /// The sigmoid routing's (`n_group`, `topk_group`), with the config class's defaults (1, 1),
    /// for families that route that way.
    pub fn expert_groups(&self) -> Option<(u64, u64)> {
        self.moe_layout().filter(|m| m.sigmoid_groups).map(|_| {
            (
                self.moe.n_group.unwrap_or(1),
                self.moe.topk_group.unwrap_or(1),
            )
        })
    }

    /// Whether the shared expert runs before the router and is scaled by a sigmoid gate
    /// (Qwen3.5-MoE's `shared_expert_gate`).
    pub fn gated_shared_expert(&self) -> bool {
        matches!(
            self.moe_layout().map(|m| m.shared),
            Some(SharedExperts::Gated { .. })
        )
    }

    /// The sliding window of the family's local attention layers, in tokens, if it has them.
    pub fn sliding_window_tokens(&self) -> Option<u64> {
        self.family
            .layout()
            .sliding
            .and_then(|w| w.window(self.hidden_size))
    }

    /// Whether the top-k routing weights are renormalised.
    pub fn renorm_topk(&self) -> bool {
        match self.moe_layout().map(|m| m.renorm) {
            Some(Renorm::Always) => true,
            Some(Renorm::Config { default }) => self.moe.norm_topk_prob.unwrap_or(default),
            _ => false,
        }
    }

    /// A text model whose decoder layers are all [`LayerKind::Dense`].
    pub fn is_dense_text(&self) -> bool {
        self.vision.is_none()
            && self.moe_layout().is_none()
            && (0..self.num_hidden_layers).all(|li| !self.is_linear_layer(li))
    }

    /// The kind of decoder layer `li` (0-based).
    pub fn layer_kind(&self, li: u64) -> LayerKind {
        let linear = self.is_linear_layer(li);
        let Some(m) = self.moe_layout() else {
            return if linear {
                LayerKind::Linear
            } else {
                LayerKind::Dense
            };
        };
        let moe = match m.dense {
            DenseLayers::None => true,
            DenseLayers::SparseStep => {
                let step = self.moe.decoder_sparse_step.unwrap_or(1).max(1);
                let only = self.moe.mlp_only_layers.as_deref().unwrap_or(&[]);
                !only.contains(&li) && self.num_experts() > 0 && (li + 1) % step == 0
            }
            DenseLayers::FirstK { default } => {
                li >= self.moe.first_k_dense_replace.unwrap_or(default)
            }
        };
        match (linear, moe) {
            (true, true) => LayerKind::LinearMoe,
            (true, false) => LayerKind::Linear,
            (false, true) => LayerKind::Moe,
            (false, false) => LayerKind::Dense,
        }
    }

    /// Decoder layers whose kind passes `f`.
    fn layers_where(&self, f: impl Fn(LayerKind) -> bool) -> u128 {
        let l = self.num_hidden_layers.min(MAX_LAYERS);
        (0..l).filter(|&i| f(self.layer_kind(i))).count() as u128
    }

    /// Decoder layers of `kind`.
    fn layers_of(&self, kind: LayerKind) -> u128 {
        self.layers_where(|k| k == kind)
    }

    /// Decoder layers with a router and experts (whatever their token mixer).
    pub fn moe_layers(&self) -> u128 {
        if !self.is_moe() {
            return 0;
        }
        self.layers_where(LayerKind::is_moe)
    }

    /// Gated DeltaNet layers (hybrid families), whatever their feed-forward block.
    pub fn linear_layers(&self) -> u128 {
        if self.family.layout().hybrid.is_none() {
            return 0;
        }
        self.layers_where(LayerKind::is_linear)
    }

    /// Full-attention decoder layers with a dense MLP.
    pub fn dense_layers(&self) -> u128 {
        self.layers_of(LayerKind::Dense)
    }

    /// Each kind of layer present with its count (dense first).
    pub fn layer_groups(&self) -> Vec<(LayerKind, u128)> {
        [
            LayerKind::Dense,
            LayerKind::Moe,
            LayerKind::Linear,
            LayerKind::LinearMoe,
        ]
        .into_iter()
        .map(|k| (k, self.layers_of(k)))
        .filter(|(_, n)| *n > 0)
        .collect()
    }

    /// MLA widths (DeepSeek), with the config class's defaults.
    pub fn mla(&self) -> Option<Mla> {
        if self.family.layout().attention != AttentionKind::Latent {
            return None;
        }
        let m = &self.mla;
        Some(Mla {
            q_rank: m.q_lora_rank.map(|x| x as u128),
            kv_rank: m.kv_lora_rank.unwrap_or(512) as u128,
            nope: m.qk_nope_head_dim.unwrap_or(128) as u128,
            rope: m.qk_rope_head_dim.unwrap_or(64) as u128,
            v: m.v_head_dim.unwrap_or(128) as u128,
        })
    }

    /// The Linear layers of attention, in forward order.
    pub fn attention_linears(&self) -> Vec<LinearShape> {
        self.block_linears(LayerKind::Dense)
            .into_iter()
            .filter(|l| !l.selected_by.iter().any(|t| t.is_mlp()))
            .collect()
    }

    /// The Linear layers of one decoder block, in forward order (for MoE families, of a dense
    /// layer: see [`Architecture::block_linears`]).
    pub fn linears(&self) -> Vec<LinearShape> {
        self.block_linears(LayerKind::Dense)
    }

    /// The Linear layers (what LoRA's `target_modules` and 4-bit quantization reach) of a decoder
    /// layer of `kind`, in forward order: attention, then the dense MLP or, in an MoE layer, the
    /// shared experts (routed experts and routers are not `nn.Linear`).
    pub fn block_linears(&self, kind: LayerKind) -> Vec<LinearShape> {
        let h = self.hidden_size as u128;
        let i = match kind {
            LayerKind::Dense => self.dense_width(),
            LayerKind::Linear => self.intermediate_size as u128,
            LayerKind::Moe | LayerKind::LinearMoe => self.shared_width(),
        };
        let (qd, kvd) = (self.q_dim(), self.kv_dim());
        // Qwen3.5's q_proj also projects the output gate.
        let q_out = if self.attn_output_gate() { 2 * qd } else { qd };
        let bias = self.has_qkv_bias();
        let o_bias = self.family.layout().o_bias && bias;
        use Target::*;
        if self.family.layout().fused_projections {
            return vec![
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
            ];
        }
        let mut out = match self.mla() {
            Some(m) => {
                let heads = self.num_attention_heads as u128;
                let qk = m.nope + m.rope;
                let mut v = vec![];
                match m.q_rank {
                    None => v.push(LinearShape {
                        name: "q_proj",
                        in_features: h,
                        out_features: heads * qk,
                        selected_by: &[Q],
                        bias: false,
                    }),
                    Some(qr) => {
                        v.push(LinearShape {
                            name: "q_a_proj",
                            in_features: h,
                            out_features: qr,
                            selected_by: &[Q],
                            bias,
                        });
                        v.push(LinearShape {
                            name: "q_b_proj",
                            in_features: qr,
                            out_features: heads * qk,
                            selected_by: &[Q],
                            bias: false,
                        });
                    }
                }
                v.push(LinearShape {
                    name: "kv_a_proj_with_mqa",
                    in_features: h,
                    out_features: m.kv_rank + m.rope,
                    selected_by: &[K, V],
                    bias,
                });
                v.push(LinearShape {
                    name: "kv_b_proj",
                    in_features: m.kv_rank,
                    out_features: heads * (m.nope + m.v),
                    selected_by: &[K, V],
                    bias: false,
                });
                v.push(LinearShape {
                    name: "o_proj",
                    in_features: heads * m.v,
                    out_features: h,
                    selected_by: &[O],
                    bias: o_bias,
                });
                v
            }
            None if kind.is_linear() => {
                let g = self.gdn().unwrap_or(Gdn {
                    key_heads: 1,
                    value_heads: 1,
                    key_dim: 1,
                    value_dim: 1,
                    conv_kernel: 1,
                    fused_in_proj: false,
                });
                let (conv, vw, vh) = (
                    g.conv_dim() as u128,
                    g.value_width() as u128,
                    g.value_heads as u128,
                );
                let lin = |name, in_features, out_features, selected_by| LinearShape {
                    name,
                    in_features,
                    out_features,
                    selected_by,
                    bias: false,
                };
                if g.fused_in_proj {
                    vec![
                        lin("in_proj_qkvz", h, conv + vw, &[InProjQkvz]),
                        lin("in_proj_ba", h, 2 * vh, &[InProjBa]),
                        lin("out_proj", vw, h, &[OutProj]),
                    ]
                } else {
                    vec![
                        lin("in_proj_qkv", h, conv, &[InProjQkv]),
                        lin("in_proj_z", h, vw, &[InProjZ]),
                        lin("in_proj_b", h, vh, &[InProjB]),
                        lin("in_proj_a", h, vh, &[InProjA]),
                        lin("out_proj", vw, h, &[OutProj]),
                    ]
                }
            }
            None => vec![
                LinearShape {
                    name: "q_proj",
                    in_features: h,
                    out_features: q_out,
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
                    bias: o_bias,
                },
            ],
        };
        if i > 0 {
            out.extend([
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
            ]);
        }
        if super::extended::EXTENDED && kind.is_moe() && self.gated_shared_expert() {
            out.push(LinearShape {
                name: "shared_expert_gate",
                in_features: h,
                out_features: 1,
                selected_by: &[SharedExpertGate],
                bias: false,
            });
        }
        out
    }

    /// Parameters of the Linear weights (no biases) of one decoder block of `kind`.
    pub fn block_linear_params(&self, kind: LayerKind) -> u128 {
        self.block_linears(kind)
            .iter()
            .map(|l| l.in_features * l.out_features)
            .sum()
    }

    /// Parameters of the Linear weights (no biases) of one decoder block (for MoE families the
    /// largest kind of block).
    pub fn linear_weight_params_per_layer(&self) -> u128 {
        self.layer_groups()
            .iter()
            .map(|&(k, _)| self.block_linear_params(k))
            .max()
            .unwrap_or(0)
    }

    /// Parameters of every decoder Linear weight (no biases), all layers.
    pub fn linear_weight_params(&self) -> u128 {
        self.layer_groups()
            .iter()
            .map(|&(k, n)| n * self.block_linear_params(k))
            .sum()
    }

    /// Everything in one decoder block of `kind` that is neither a Linear weight nor an expert
    /// or router parameter: biases, norm weights, attention sinks.
    pub fn block_small_params(&self, kind: LayerKind) -> u128 {
        let h = self.hidden_size as u128;
        let biases: u128 = self
            .block_linears(kind)
            .iter()
            .filter(|l| l.bias)
            .map(|l| l.out_features)
            .sum();
        let layout = self.family.layout();
        if kind.is_linear() {
            // conv1d's weight [conv_dim, 1, kernel], dt_bias and A_log [value heads], the gated
            // norm's weight [value head width]; no q/k norms.
            let g = self.gdn().map_or(0, |g| {
                g.conv_dim() as u128 * g.conv_kernel as u128
                    + 2 * g.value_heads as u128
                    + g.value_dim as u128
            });
            return biases + self.family.norms_per_layer() * h + g;
        }
        let qk_norm = match self.qk_norm() {
            // (Llama 4's L2 norm has no weight.)
            QkNorm::None | QkNorm::L2AfterRotary => 0,
            QkNorm::PerHead | QkNorm::PerHeadAfterProjections | QkNorm::PerHeadAfterViews => {
                2 * self.head_dim() as u128
            }
            QkNorm::Whole => self.q_dim() + self.kv_dim(),
        };
        let latent_norms = self.mla().map_or(0, |m| m.kv_rank + m.q_rank.unwrap_or(0));
        let sinks = if layout.attention == AttentionKind::Sinks {
            self.num_attention_heads as u128
        } else {
            0
        };
        biases + self.family.norms_per_layer() * h + qk_norm + latent_norms + sinks
    }

    /// Small parameters of one decoder block (biases, norms; the largest kind for MoE families).
    pub fn small_params_per_layer(&self) -> u128 {
        self.layer_groups()
            .iter()
            .map(|&(k, _)| self.block_small_params(k))
            .max()
            .unwrap_or(0)
    }

    /// Routed-expert parameters of one MoE layer: `gate_up_proj [E, 2I, H]` and `down_proj
    /// [E, H, I]` (gpt-oss adds their biases `[E, 2I]`, `[E, H]`).
    pub fn expert_params_per_layer(&self) -> u128 {
        let Some(m) = self.moe_layout() else { return 0 };
        let (e, i, h) = (
            self.num_experts(),
            self.expert_width(),
            self.hidden_size as u128,
        );
        let bias = if m.clamped_glu { e * (2 * i + h) } else { 0 };
        e * 3 * i * h + bias
    }

    /// One routed expert's MLP as Linear layers, in module order (`gate_proj`, `up_proj`,
    /// `down_proj`: transformers 4's per-expert layout, Llama 4's sequential experts); no target
    /// selects them by itself, their names decide whether LoRA wraps them.
    pub fn expert_linears(&self) -> [LinearShape; 3] {
        let (i, h) = (self.expert_width(), self.hidden_size as u128);
        let linear = |name, in_features, out_features| LinearShape {
            name,
            in_features,
            out_features,
            selected_by: &[],
            bias: false,
        };
        [
            linear("gate_proj", h, i),
            linear("up_proj", h, i),
            linear("down_proj", i, h),
        ]
    }

    /// Router parameters of one MoE layer: `weight [E, H]` (gpt-oss: and `bias [E]`).
    pub fn router_params_per_layer(&self) -> u128 {
        let Some(m) = self.moe_layout() else { return 0 };
        let e = self.num_experts();
        e * self.hidden_size as u128 + if m.clamped_glu { e } else { 0 }
    }

    /// Routed-expert parameters of the whole model.
    pub fn expert_params(&self) -> u128 {
        self.moe_layers() * self.expert_params_per_layer()
    }

    /// Router parameters of the whole model.
    pub fn router_params(&self) -> u128 {
        self.moe_layers() * self.router_params_per_layer()
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
        let small: u128 = self
            .layer_groups()
            .iter()
            .map(|&(k, n)| n * self.block_small_params(k))
            .sum();
        self.linear_weight_params()
            + small
            + self.expert_params()
            + self.router_params()
            + self.embedding_params()
            + self.lm_head_params()
            + self.hidden_size as u128
            + self.vision_params()
    }

    /// Parameters of the vision tower (0 without one).
    pub fn vision_params(&self) -> u128 {
        self.tower().map_or(0, |(t, k)| u128::from(t.params(k)))
    }

    /// The vision tower and how the family builds it, when the model has one lorafit plans.
    pub fn tower(&self) -> Option<(&crate::model::vision::VisionTower, VisionKind)> {
        Some((self.vision.as_ref()?, self.family.layout().vision?))
    }

    /// Routed experts whose matmuls run for each token: its top-k, or every expert where the
    /// family runs them all on every token (Llama 4 in transformers, [`MoeLayout::all_experts`]:
    /// the unchosen ones on inputs scaled to zero).
    pub fn experts_run_per_tok(&self) -> u128 {
        if self.moe_layout().is_some_and(|m| m.all_experts) {
            self.num_experts()
        } else {
            self.experts_per_tok()
        }
    }

    /// Parameters one token runs through: all but the routed experts it is not sent to
    /// (`total − (E − k)/E × routed-expert parameters`).
    pub fn active_params(&self) -> u128 {
        let e = self.num_experts();
        if e == 0 {
            return self.total_params();
        }
        let k = self.experts_per_tok().min(e);
        self.total_params() - self.expert_params() / e * (e - k)
    }
}
