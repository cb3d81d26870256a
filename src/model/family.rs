//! The model families and what tells one family's layers from another's, as transformers 5.24's
//! modeling code builds them: one row per family ([`Family::layout`]), read by the parameter
//! counts and the step program. Adding a family is a variant, its names and its row;
//! a genuinely new layer kind also needs its ops in the step.

use serde::{Deserialize, Serialize};

use super::names::names;

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
    /// Mixtral: 8 routed experts per layer (fused 3-D parameters), top-2, fp32 routing weights.
    Mixtral,
    /// Qwen3-MoE (Qwen3-30B-A3B, 235B-A22B): per-head q/k norms, `moe_intermediate_size`
    /// experts, dense layers by `mlp_only_layers` / `decoder_sparse_step`.
    Qwen3Moe,
    /// OLMoE: q/k RMSNorm over the whole projection, top-8 of 64 experts.
    Olmoe,
    /// DeepSeek-V2 (Lite): multi-head latent attention, shared experts, fp32 router, the first
    /// `first_k_dense_replace` layers dense.
    DeepseekV2,
    /// gpt-oss: eager attention with sinks and biases, clamped SwiGLU experts with biases
    /// (MXFP4 on the Hub, dequantized to bf16 for training).
    GptOss,
    /// Qwen3.5 (text): hybrid layers — Gated DeltaNet linear attention, with full attention
    /// (gated q, per-head q/k norms, partial multimodal rotary) every few layers — and
    /// zero-centred RMSNorms.
    Qwen35,
    /// Qwen3.5-MoE (Qwen3.5-35B-A3B, 397B-A17B; Qwen3.6-35B-A3B): Qwen3.5's hybrid layers, each
    /// with a mixture of experts — a router, fused routed experts and one shared expert scaled by
    /// a sigmoid gate — instead of a dense MLP.
    Qwen35Moe,
    /// Qwen3-Next (`qwen3_next`: Qwen3-Next-80B-A3B): Qwen3.5-MoE's forerunner, text only — the
    /// same hybrid layers, experts and gated shared expert, with the Gated DeltaNet's four input
    /// projections fused into two (`in_proj_qkvz`, `in_proj_ba`), a one-dimensional rotary, and
    /// dense layers by `mlp_only_layers` / `decoder_sparse_step`.
    Qwen3Next,
    /// GLM-4.5 / 4.6 / 4.7 and GLM-4.5-Air (`glm4_moe`): q/k/v biases, half the head rotating,
    /// optional q/k norms, the first layers dense, then sigmoid-scored group-limited routing over
    /// fused experts beside a shared expert.
    Glm4Moe,
    /// Qwen3-VL (`qwen3_vl`, 2B–32B): Qwen3's text layers with the multimodal rotary, and
    /// Qwen3.5's vision tower whose chosen blocks also feed deepstack mergers, whose features are
    /// added to the visual tokens' hidden states after each of the first decoder layers.
    Qwen3Vl,
    /// Qwen3-VL-MoE (`qwen3_vl_moe`: Qwen3-VL-30B-A3B, 235B-A22B): Qwen3-VL with Qwen3-MoE's
    /// experts in the text layers, their top-k weights always renormalised.
    Qwen3VlMoe,
    /// Qwen2.5-VL (`qwen2_5_vl`, 3B–72B): Qwen2's text layers with the multimodal rotary in
    /// sections, and a ViT of RMSNorms, SwiGLU MLPs and windowed attention (full attention in
    /// the blocks `fullatt_block_indexes` names).
    Qwen25Vl,
    /// Llama 4 (`llama4_text`: Llama-4-Scout-17B-16E's text model): every layer a mixture of
    /// 16 experts that all run on every token — its input repeated per expert and scaled by the
    /// sigmoid of its top-1 router logit, then two batched matmuls — beside a shared expert; a
    /// complex rotary on three layers of four, chunked attention there and q/k L2 norms after
    /// the rotary; no rotary on every fourth layer, whose queries are scaled by position
    /// (temperature tuning).
    Llama4,
}

names!(Family {
    Llama => "llama" | "llama2" | "llama3" | "yi",
    Mistral => "mistral",
    Qwen2 => "qwen2" | "qwen2.5",
    Qwen3 => "qwen3",
    Gemma2 => "gemma2",
    Gemma3 => "gemma3" | "gemma3_text",
    Phi3 => "phi3" | "phi_3",
    Mixtral => "mixtral",
    Qwen3Moe => "qwen3_moe",
    Olmoe => "olmoe",
    DeepseekV2 => "deepseek_v2",
    GptOss => "gpt_oss" | "gptoss",
    Qwen35 => "qwen3_5" | "qwen3_5_text" | "qwen3.5",
    Qwen35Moe => "qwen3_5_moe" | "qwen3_5_moe_text" | "qwen3.5_moe",
    Qwen3Next => "qwen3_next",
    Glm4Moe => "glm4_moe" | "glm4.5",
    Qwen3Vl => "qwen3_vl" | "qwen3_vl_text",
    Qwen3VlMoe => "qwen3_vl_moe" | "qwen3_vl_moe_text",
    Qwen25Vl => "qwen2_5_vl" | "qwen2_5_vl_text" | "qwen2.5_vl",
    Llama4 => "llama4_text" | "llama4",
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
    /// Where q and k are RMS-normalised, if at all.
    pub qk_norm: QkNorm,
    /// The q/k norms exist only when `use_qk_norm` is true, and this is its value when
    /// config.json omits it (GLM-4.5's config class defaults to false, Llama 4's to true).
    /// `None`: the family always has its `qk_norm`.
    pub qk_norm_by_config: Option<bool>,
    /// Only part of each head rotates: the config class's `partial_rotary_factor` (numerator,
    /// denominator) where config.json does not give it; q and k are sliced, the rotating part
    /// rotated and concatenated back with the rest. `None`: the whole head rotates.
    pub partial_rotary: Option<(u64, u64)>,
    /// How the family's RMSNorm computes its output.
    pub norm: NormKind,
    /// The embedding output is scaled by `embed_scale`, a buffer (Gemma).
    pub scaled_embedding: bool,
    /// Partial rotary through `cat([rotated, pass-through])` (Phi-3): the rotary output is a
    /// copy, so q is contiguous in (batch, heads, seq, dim) and cuDNN attention's output too,
    /// which `transpose(1, 2).contiguous()` then copies (the memory-efficient kernel's fp32
    /// output is (batch, seq, heads, dim) already).
    pub rotary_cat: bool,
    /// Local (sliding-window) attention layers, where the family has them.
    pub sliding: Option<Sliding>,
    /// The model builds its masks through a `mask_kwargs` dict (Qwen2, Qwen3, Gemma, gpt-oss),
    /// which releases the embedding output before the position ids at the end of forward.
    pub mask_kwargs: bool,
    /// Under checkpointing, the decoder layer's keyword arguments in the order the checkpoint
    /// releases them.
    pub checkpoint_kwargs: KwargsOrder,
    /// Eager attention builds the mask bias before repeating k and v (Gemma 3), not after.
    pub bias_before_repeat_kv: bool,
    /// MLP activation GeLU-tanh rather than SiLU.
    pub gelu: bool,
    /// One fused `qkv_proj` and one fused `gate_up_proj` (Phi-3).
    pub fused_projections: bool,
    /// q, k and v are all projected before any is viewed into heads (Qwen2.5-VL's attention,
    /// `modeling_qwen2_5_vl.py:646-652`): backward then copies the q and k views' gradients
    /// before it runs through any projection.
    pub views_after_projections: bool,
    /// q, k, v carry biases unless the config says otherwise.
    pub qkv_bias: bool,
    /// Attention and final-logit softcapping unless the config turns them off (Gemma 2).
    pub softcapping: bool,
    /// `tie_word_embeddings` when config.json omits it.
    pub tie_default: bool,
    /// `bos_token_id` is set when config.json omits it (transformers' config class default):
    /// `generate` then makes it a tensor with the pad and eos ids.
    pub bos_default: bool,
    /// `head_dim` when config.json omits it (else hidden / heads).
    pub head_dim_default: Option<u64>,
    /// `intermediate_size` when config.json omits it (the config class's default: Qwen3-Next's
    /// 5632, `configuration_qwen3_next.py:93`, the width of a layer `mlp_only_layers` keeps dense).
    pub intermediate_default: Option<u64>,
    /// `attention_bias` also gives o_proj a bias (gpt-oss, OLMoE, Qwen3-MoE).
    pub o_bias: bool,
    /// How attention is built.
    pub attention: AttentionKind,
    /// `_supports_sdpa`: without it transformers runs eager attention (gpt-oss).
    pub sdpa: bool,
    /// The mixture-of-experts block, for MoE families.
    pub moe: Option<MoeLayout>,
    /// Linear-attention layers between the full-attention ones, for hybrid families.
    pub hybrid: Option<HybridLayout>,
    /// The vision tower a vision-language checkpoint of the family carries, when lorafit plans it.
    pub vision: Option<VisionKind>,
    /// The rotary tables are the positions times the inverse frequencies, an elementwise product
    /// rather than a GEMM (`Qwen3NextRotaryEmbedding.forward`, `modeling_qwen3_next.py:117-123`).
    pub rotary_product: bool,
    /// The rotary tables are multimodal (M-RoPE: three position grids, Qwen2.5-VL, Qwen3.5 and
    /// Qwen3-VL), computed as `[3, batch, seq, rotary/2]` products rather than a GEMM.
    pub mrope: Option<Mrope>,
    /// One rotary embedding per layer type (Gemma 3: the sliding layers' `rope_local_base_freq`
    /// and the global layers' `rope_theta`), each with its inverse frequencies, and its tables
    /// computed in every forward, when the model has both kinds of layer.
    pub rotary_per_layer_type: bool,
    /// Liger-Kernel's modules for the family, where lorafit plans them: its RMSNorm, its SwiGLU
    /// or GeGLU MLP and `apply_rotary_pos_emb`, as `apply_liger_kernel_to_<model_type>` installs
    /// them (liger-kernel 0.8.5 `transformers/monkey_patch.py`: llama :259-323, mistral
    /// :723-784, qwen2 :1750-1814, qwen3 :1817-1873 — q/k norms included — gemma2 :1142-1213,
    /// gemma3_text :1216-1297, phi3 :2371-2432 — Llama's norm and RoPE, and `LigerPhi3SwiGLUMLP`,
    /// `transformers/swiglu.py:118-137`: the fused gate_up output chunked into the SiLU-mul),
    /// and the MoE, Qwen3.5 and gpt-oss rows' (each cited there). None: liger-kernel 0.8.5 has
    /// no function for the family, or (`liger_unimportable`) one that fails to import.
    pub liger: Option<LigerLayout>,
    /// Liger-Kernel's switch for the family fails before training: liger-kernel 0.8.5's
    /// `apply_liger_kernel_to_qwen2_5_vl` / `_qwen3_vl` import their fused-loss forward
    /// (`transformers/model/qwen2_5_vl.py:14`, `qwen3_vl.py`), which imports an output class
    /// `model/output_classes.py` defines only when transformers has the family's
    /// `…CausalLMOutputWithPast` — transformers 5.24 has none — so the call raises ImportError
    /// (checked in the harness's environment, 2026-12-07).
    pub liger_unimportable: bool,
    /// The decoder layer binds the attention's output to its own local (`attention_states`,
    /// `Llama4TextDecoderLayer.forward`, `modeling_llama4.py:421-433`): the normed input then
    /// lives until the residual add, the attention's output until the layer returns.
    pub attention_output_local: bool,
    /// Liger-Kernel's function for the family, which lorafit does not plan yet, not having
    /// measured it (`apply_liger_kernel_to_llama4`, liger-kernel 0.8.5 `monkey_patch.py:470-560`).
    pub liger_unplanned: Option<&'static str>,
    /// Every `n`-th layer has no rotary when config.json has no `no_rope_layers`
    /// (`no_rope_layer_interval`, Llama 4's default 4); its queries are temperature-scaled
    /// instead ([`AttentionKind::RotaryOrNope`]). `None`: every layer rotates.
    pub nope_interval_default: Option<u64>,
    /// `chunk_mem_const` of Liger's fused linear cross-entropy in the family's causal-LM forward:
    /// its chunks hold at most this many times the hidden states' bytes of logits (1, Liger's
    /// default; gpt-oss's forward passes 8, liger-kernel 0.8.5 `transformers/model/gpt_oss.py:14`).
    pub flce_chunk_mem_const: u64,
}

/// What happens to Liger-Kernel's switch on a family whose `liger_unimportable` is set.
pub fn liger_import_failure(f: Family) -> String {
    format!("liger-kernel 0.8.5's apply_liger_kernel_to_{0} raises ImportError under transformers 5.24 (its fused-loss forward imports an output class Liger defines only when transformers has {0}'s CausalLMOutputWithPast, which 5.x removed): the run stops before training; plan without liger_kernel, or with the transformers and Liger versions that pair", f.name())
}

/// How Liger-Kernel's modules run for a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LigerLayout {
    /// `LigerRMSNorm`'s backward writes the input's gradient into the incoming one
    /// (`in_place=True`, Llama's casting); Gemma's norms (`in_place=False`, Gemma's casting and
    /// offset) make it a new tensor.
    pub norm_in_place: bool,
    /// Liger's RoPE for the family: what its switch installs for `rope=True`, and whether that
    /// is planned.
    pub rope: LigerRope,
    /// Whether its SwiGLU replaces the fused experts (`LigerExperts`, transformers 5).
    pub experts: bool,
    /// Whether its patch leaves the vision tower as transformers builds it (Qwen3.5's: its ViT's
    /// LayerNorms and rotary are not the classes Liger replaces), so that steps with images are
    /// planned: the tower's ops as without Liger, the text layers' under it.
    pub tower_untouched: bool,
    /// Whether its SwiGLU replaces the dense MLP modules (a dense family's MLP; DeepSeek-V2's
    /// first dense layers and shared experts, `LigerQwen3MoeSwiGLUMLP`). Qwen3-MoE's, Mixtral's
    /// and Qwen3.5-MoE's keep transformers' module for theirs.
    pub dense_mlp: bool,
}

/// Liger-Kernel's RoPE for a family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LigerRope {
    /// Installed for `rope=True` and planned.
    Planned,
    /// Installed for `rope=True` (off by default) but not planned, not being measured
    /// (`apply_liger_kernel_to_qwen3_next`: over the rotating quarter of each head).
    Unplanned,
    /// None: `rope=True` installs no RoPE (`apply_liger_kernel_to_qwen3_5` raises
    /// NotImplementedError, `_deepseek_v2` warns and skips it; both default to off).
    Absent,
}

impl LigerLayout {
    /// Whether Liger's RoPE is planned for the family.
    pub fn rope_planned(self) -> bool {
        self.rope == LigerRope::Planned
    }

    /// Whether Liger has a SwiGLU kernel for the family: for its experts or its dense MLP
    /// (gpt-oss's `apply_liger_kernel_to_gpt_oss` patches none for its clamped experts).
    pub fn swiglu(self) -> bool {
        self.experts || self.dense_mlp
    }
}

/// How a multimodal rotary recomposes its three grids' frequencies into one table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mrope {
    /// Interleaved (`apply_interleaved_mrope`, Qwen3.5 and Qwen3-VL): one `cat` of the
    /// recomposed half for each of cos and sin, cos first.
    Interleaved,
    /// In `mrope_section` sections (Qwen2.5-VL, `recomposition_frequencies`,
    /// `modeling_qwen2_5_vl.py:542-548`): each of sin and cos — sin first — is its sections'
    /// `cat`, then that half concatenated with itself.
    Sections,
}

/// How a family's vision tower runs (what [`crate::model::vision::VisionTower`]'s numbers build).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VisionKind {
    /// Qwen3.5's ViT (`Qwen3_5VisionModel`): a Conv3d patch embedding, learned position
    /// embeddings resampled bilinearly to each image, blocks of full attention over each image
    /// with an axial rotary, LayerNorm and a GELU-tanh MLP, and a 2×2 patch merger.
    Qwen35,
    /// Qwen3-VL's (`Qwen3VLVisionModel`): Qwen3.5's, plus a deepstack merger after each block
    /// `deepstack_visual_indexes` names.
    Qwen3Vl,
    /// Qwen2.5-VL's (`Qwen2_5_VisionTransformerPretrainedModel`, `modeling_qwen2_5_vl.py:
    /// 386-489`): a Conv3d patch embedding without bias, no learned positions, the patches
    /// reordered into windows of `window_size` pixels, blocks of RMSNorm, attention within each
    /// window (over each image in the `fullatt_block_indexes` blocks) and a SwiGLU MLP with
    /// biases, and a 2×2 patch merger behind an RMSNorm, reordered back. A PreTrainedModel
    /// whose `_input_embed_layer` is `patch_embed`, so `enable_input_require_grads` hooks it.
    Qwen25Vl,
}

impl VisionKind {
    /// `deepstack_visual_indexes` when config.json omits it (`Qwen3VLVisionConfig`'s
    /// `(8, 16, 24)`, `configuration_qwen3_vl.py:55`). `None`: the tower builds no deepstack
    /// mergers whatever config.json says (Qwen3.5's config class has no such key).
    pub fn default_deepstack(self) -> Option<&'static [u64]> {
        match self {
            VisionKind::Qwen35 | VisionKind::Qwen25Vl => None,
            VisionKind::Qwen3Vl => Some(&[8, 16, 24]),
        }
    }

    /// The tower is a PreTrainedModel whose input embedding is its `patch_embed`
    /// (`_input_embed_layer`, Qwen2.5-VL): `enable_input_require_grads` hooks it too, so with
    /// gradient checkpointing the frozen tower builds a graph.
    pub fn input_hooked(self) -> bool {
        self == VisionKind::Qwen25Vl
    }

    /// Windowed attention (Qwen2.5-VL): `window_size` and `fullatt_block_indexes` are read.
    pub fn windowed(self) -> bool {
        self == VisionKind::Qwen25Vl
    }

    /// The image processor's pixel limits (`min_pixels`, `max_pixels` of the published
    /// `preprocessor_config.json`): Qwen3.5's and Qwen3-VL's `size` (64 to 16384 visual tokens),
    /// Qwen2.5-VL's 3136 and 12845056 (4 to 16384 visual tokens of 28 × 28 pixels).
    pub fn processor_pixels(self) -> (u64, u64) {
        match self {
            VisionKind::Qwen35 | VisionKind::Qwen3Vl => (65_536, 16_777_216),
            VisionKind::Qwen25Vl => (3_136, 12_845_056),
        }
    }
}

/// A hybrid family's Gated DeltaNet layers and the full-attention layers between them, as
/// transformers 5.24 builds them (`modeling_qwen3_5.py`): the config class's defaults where
/// config.json omits a number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HybridLayout {
    /// Every `interval`-th layer is full attention when config.json has no `layer_types`
    /// (`full_attention_interval`, default 4).
    pub default_interval: u64,
    /// `linear_num_key_heads`, `linear_num_value_heads`, `linear_key_head_dim`,
    /// `linear_value_head_dim`, `linear_conv_kernel_dim` defaults.
    pub default_key_heads: u64,
    /// See `default_key_heads`.
    pub default_value_heads: u64,
    /// See `default_key_heads`.
    pub default_key_head_dim: u64,
    /// See `default_key_heads`.
    pub default_value_head_dim: u64,
    /// See `default_key_heads`.
    pub default_conv_kernel: u64,
    /// Full attention's q_proj also projects a sigmoid output gate (twice the width), unless
    /// config.json says `attn_output_gate: false`.
    pub output_gate: bool,
    /// The four input projections are two (Qwen3-Next, `modeling_qwen3_next.py:606-611`):
    /// `in_proj_qkvz` (q, k, v and the output gate z) and `in_proj_ba` (β's and the decay's
    /// inputs), their outputs grouped per key head and untangled by
    /// `fix_query_key_value_ordering` (:620-646): views and splits, reshapes that copy v, z, b
    /// and a, then q, k and v flattened (copies of q and k) and concatenated for the convolution.
    pub fused_in_proj: bool,
}

/// Where a family RMS-normalises q and k.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QkNorm {
    /// Not at all.
    None,
    /// Per head, right after each projection (Qwen3, Qwen3-MoE).
    PerHead,
    /// Per head, after q, k and v are all projected and transposed (Gemma 3).
    PerHeadAfterProjections,
    /// Per head, after q, k and v are all projected, on the head views before their transpose
    /// (GLM-4.5 with `use_qk_norm`).
    PerHeadAfterViews,
    /// Over the whole projection, before the view into heads (OLMoE).
    Whole,
    /// Llama 4's `Llama4TextL2Norm` (`modeling_llama4.py:106-118`): per head, without a weight,
    /// after the rotary, on the layers that rotate only.
    L2AfterRotary,
}

/// How a family's RMSNorm computes (`x * rsqrt(mean(x²) + eps)` in fp32 for all of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormKind {
    /// Llama's: `weight * x.to(input_dtype)`.
    Llama,
    /// Gemma's: `x * (1 + weight)` in fp32, then cast.
    Gemma,
    /// gpt-oss's: `(weight * x).to(input_dtype)`, the product in fp32.
    ProductInFp32,
    /// Llama 4's (`Llama4TextRMSNorm`, `modeling_llama4.py:121-138`): `x * rsqrt(mean(x²) +
    /// eps)` in one expression (the mean is no local), cast back, then `output * weight`.
    OneExpression,
}

/// Which layers attend through a sliding window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sliding {
    /// Of every `period` layers the last is global and the others local (Gemma 2 and gpt-oss
    /// alternate, 2; Gemma 3 has five local layers to one global, 6).
    pub period: u64,
    /// The window in tokens as the family's published configs set it, by size: the first
    /// `(largest hidden_size, window)` entry that covers the model (Gemma 3: 512 at 1B, 1024
    /// above). `None`: the family never runs sdpa, so its window never decides a mask.
    pub windows: Option<&'static [(u64, u64)]>,
}

impl Sliding {
    /// Whether layer `li` (0-based) is a local layer.
    pub fn local(self, li: u64) -> bool {
        (li + 1) % self.period != 0
    }

    /// The window of a model of `hidden_size`.
    pub fn window(self, hidden_size: u64) -> Option<u64> {
        self.windows?
            .iter()
            .find(|(h, _)| hidden_size <= *h)
            .map(|(_, w)| *w)
    }
}

/// The order in which a checkpointed decoder layer's keyword arguments are released.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KwargsOrder {
    /// Hidden states, position ids, then the position embeddings (cos, sin).
    PositionIdsFirst,
    /// Hidden states, the position embeddings, then the position ids (Mixtral, Qwen3-MoE).
    PositionEmbeddingsFirst,
}

/// How a family builds attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttentionKind {
    /// q, k, v, o projections (GQA).
    Standard,
    /// DeepSeek's multi-head latent attention: q (or q_a → q_b), kv_a_proj_with_mqa → kv_a_layernorm
    /// → kv_b_proj, rotary on a separate slice.
    Latent,
    /// gpt-oss: eager softmax over the scores and one learned sink logit per head.
    Sinks,
    /// Llama 4 (`Llama4TextAttention`, `modeling_llama4.py:301-391`): q and k viewed into heads
    /// (v transposed too), on the rotary layers rotated as complex numbers
    /// (`apply_rotary_emb`: fp32 copies times the complex table) and L2-normalised; on the
    /// others (`no_rope_layers`) the queries scaled by `log1p(floor((pos + 1) / floor_scale)) ×
    /// attn_scale + 1` in fp32 (`attn_temperature_tuning`).
    RotaryOrNope,
}

/// Which layers of an MoE family keep a dense MLP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseLayers {
    /// Every layer is MoE.
    None,
    /// Qwen3-MoE: layer `i` is dense if listed in `mlp_only_layers` or `(i+1) % decoder_sparse_step != 0`.
    SparseStep,
    /// DeepSeek-V2, GLM-4.5: the first `first_k_dense_replace` layers are dense.
    FirstK {
        /// `first_k_dense_replace` when config.json omits it.
        default: u64,
    },
}

/// The MoE block of a family, as transformers 5.24 builds it (every family stores its routed
/// experts as two fused 3-D parameters per layer, `gate_up_proj` and `down_proj`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoeLayout {
    /// The expert width is `moe_intermediate_size` (Qwen3-MoE, DeepSeek) rather than `intermediate_size`.
    pub moe_width: bool,
    /// The routing weights stay fp32 (Mixtral's softmax of `logits.float()`, DeepSeek's fp32 router),
    /// rather than being cast back to the logits' dtype.
    pub fp32_routing: bool,
    /// The router weight is stored in fp32 (DeepSeek's `_keep_in_fp32_modules_strict`).
    pub fp32_router: bool,
    /// The top-k weights are renormalised: always (Mixtral), per `norm_topk_prob`, or never.
    pub renorm: Renorm,
    /// Top-k of the raw logits, then a softmax over the k (gpt-oss): no `[tokens, experts]` softmax.
    pub softmax_after_topk: bool,
    /// DeepSeek-V3's `noaux_tc` routing as GLM-4.5 runs it (`Glm4MoeTopkRouter`,
    /// `modeling_glm4_moe.py:269-308`): sigmoid scores of fp32 logits, a per-expert correction
    /// bias (an fp32 buffer) for the choice only, the best `topk_group` of `n_group` groups by
    /// their two best scores, top-k among those, the chosen scores gathered, renormalised and
    /// scaled by `routed_scaling_factor`.
    pub sigmoid_groups: bool,
    /// gpt-oss's clamped SwiGLU (`clamp`, `sigmoid`, `glu`, `up + 1` kept) and biases on the
    /// experts and the router.
    pub clamped_glu: bool,
    /// The expert parameters are stored transposed, `[experts, in, out]` (gpt-oss), so LoRA on
    /// them sees the other orientation.
    pub transposed_experts: bool,
    /// The router is registered before the experts (all but Qwen3-MoE).
    pub router_first: bool,
    /// The router is an `nn.Linear` subclass whose forward returns (scores, logits)
    /// (`Llama4Router`, `modeling_llama4.py:141-153`): peft's all-linear wraps it, and LoRA's
    /// forward then fails ([`crate::model::peft_targets::all_linear_breaks_router`]).
    pub router_returns_tuple: bool,
    /// The module transformers rebuilds the experts as when it loads a checkpoint saved
    /// quantized (bitsandbytes, compressed-tensors: `MODULES_TO_PATCH_FOR_QUANTIZATION`,
    /// `quantizers/base.py:383-414`, only for a pre-quantized checkpoint), a different step from
    /// a 16-bit checkpoint quantized on load, whose fused experts stay 16-bit.
    pub prequantized_experts: Option<&'static str>,
    /// Every expert runs on every token (Llama 4, `Llama4TextMoe.forward`,
    /// `modeling_llama4.py:166-175`): the router's top-k logits scattered into a row of −∞ and
    /// passed through a sigmoid (`Llama4Router`, :141-153), the input repeated once per expert
    /// and scaled by its score, two batched matmuls over all experts, the outputs summed.
    pub all_experts: bool,
    /// Shared experts next to the routed ones, if any, and how the block runs them.
    pub shared: SharedExperts,
    /// Which layers stay dense.
    pub dense: DenseLayers,
    /// The config class's defaults where config.json omits a number: routed experts, experts
    /// per token (`None`: the class has none, so config.json must give it — DeepSeek), and the
    /// expert width of families with `moe_width`.
    pub default_experts: u64,
    /// See `default_experts`.
    pub default_experts_per_tok: Option<u64>,
    /// See `default_experts`.
    pub default_moe_width: u64,
    /// peft 0.21 maps the MLP names of a target list onto the fused experts
    /// ([`crate::model::peft_targets`]): transformers 5 converts the family's checkpoints with
    /// the `qwen2_moe` pattern (`conversion_mapping.py`).
    pub peft_maps_mlp_names: bool,
    /// The Hub's checkpoints hold the experts in MXFP4, which transformers cannot train: they are
    /// loaded dequantized to bf16 (`Mxfp4Config(dequantize=True)`), and every transformers
    /// release stores them as fused 3-D parameters (gpt-oss).
    pub mxfp4_checkpoint: bool,
}

/// A family's shared experts: an MLP every token goes through beside its routed experts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SharedExperts {
    /// None.
    None,
    /// DeepSeek's `shared_experts`: one MLP of `moe_intermediate_size × n_shared_experts`, run
    /// after the routed experts and added to their output.
    Added {
        /// `n_shared_experts` when config.json omits it.
        default_count: u64,
    },
    /// Qwen3.5-MoE's `shared_expert` (`Qwen3NextSparseMoeBlock`, `modeling_qwen3_5_moe.py:913-933`):
    /// one MLP of `shared_expert_intermediate_size` (the class default when config.json omits
    /// it), run before the router, then scaled by `sigmoid(shared_expert_gate(x))` — a
    /// `Linear(hidden, 1)` — and added to the routed experts' output.
    Gated {
        /// `shared_expert_intermediate_size` when config.json omits it.
        default_width: u64,
    },
    /// Llama 4's `shared_expert`: one MLP of the experts' width, run after the routed experts;
    /// their output summed over the experts is added into its output in place
    /// (`out.add_(routed_out….sum(dim=0))`, `modeling_llama4.py:173-174`).
    Summed,
}

/// Whether the top-k routing weights are renormalised to sum to one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Renorm {
    /// Always (Mixtral).
    Always,
    /// When `norm_topk_prob` is true.
    Config {
        /// `norm_topk_prob` when config.json omits it (the config class's default).
        default: bool,
    },
    /// Never (DeepSeek-V2 scales by `routed_scaling_factor`).
    Never,
}

/// Every family's row ([`Family::row`]), in [`Family::ALL`]'s order, which is the variants'.
static ROWS: [FamilyLayout; Family::ALL.len()] = {
    let mut rows = [Family::Llama.row(); Family::ALL.len()];
    let mut i = 0;
    while i < Family::ALL.len() {
        rows[Family::ALL[i] as usize] = Family::ALL[i].row();
        i += 1;
    }
    rows
};

impl FamilyLayout {
    /// A Qwen3-VL text model's layers: these, with the multimodal rotary and Qwen3-VL's tower.
    const fn multimodal(self) -> FamilyLayout {
        FamilyLayout {
            mrope: Some(Mrope::Interleaved),
            vision: Some(VisionKind::Qwen3Vl),
            ..self
        }
    }
}

impl Family {
    /// The families whose row has what `has` asks for, by model type, for the messages that
    /// list them.
    pub fn names_where(has: impl Fn(&FamilyLayout) -> bool) -> String {
        Family::ALL
            .iter()
            .filter(|f| has(&f.layout()))
            .map(|f| f.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The families whose Liger-Kernel modules are planned (a [`LigerLayout`] in their row).
    pub fn with_liger() -> String {
        Family::names_where(|l| l.liger.is_some())
    }

    /// The family's layout flags: its row of [`ROWS`].
    pub fn layout(self) -> FamilyLayout {
        ROWS[self as usize]
    }

    /// The family's row as the table is built (at compile time, into [`ROWS`]: one copy of
    /// the data, rather than the code that builds every row, in each binary).
    const fn row(self) -> FamilyLayout {
        let base = FamilyLayout {
            norms_per_layer: 2,
            qk_norm: QkNorm::None,
            qk_norm_by_config: None,
            partial_rotary: None,
            norm: NormKind::Llama,
            scaled_embedding: false,
            rotary_cat: false,
            sliding: None,
            mask_kwargs: false,
            checkpoint_kwargs: KwargsOrder::PositionIdsFirst,
            bias_before_repeat_kv: false,
            gelu: false,
            fused_projections: false,
            views_after_projections: false,
            qkv_bias: false,
            softcapping: false,
            tie_default: false,
            bos_default: true,
            head_dim_default: None,
            intermediate_default: None,
            o_bias: false,
            attention: AttentionKind::Standard,
            sdpa: true,
            moe: None,
            hybrid: None,
            vision: None,
            mrope: None,
            rotary_product: false,
            rotary_per_layer_type: false,
            liger: None,
            liger_unimportable: false,
            liger_unplanned: None,
            attention_output_local: false,
            nope_interval_default: None,
            flce_chunk_mem_const: 1,
        };
        let moe = MoeLayout {
            moe_width: false,
            fp32_routing: false,
            fp32_router: false,
            renorm: Renorm::Config { default: false },
            softmax_after_topk: false,
            sigmoid_groups: false,
            clamped_glu: false,
            transposed_experts: false,
            router_first: true,
            all_experts: false,
            router_returns_tuple: false,
            prequantized_experts: None,
            shared: SharedExperts::None,
            dense: DenseLayers::None,
            default_experts: 64,
            default_experts_per_tok: Some(8),
            default_moe_width: 768,
            peft_maps_mlp_names: false,
            mxfp4_checkpoint: false,
        };
        // Liger's modules for the families that share Llama's (its llama casting, in place).
        let liger_llama = Some(LigerLayout {
            tower_untouched: false,
            norm_in_place: true,
            rope: LigerRope::Planned,
            experts: false,
            dense_mlp: true,
        });
        // `apply_liger_kernel_to_qwen3_moe` / `_mixtral` (monkey_patch.py:834-906, 1876-1940):
        // Llama's norm and RoPE, and `LigerExperts` for the fused experts.
        let liger_experts = Some(LigerLayout {
            tower_untouched: false,
            norm_in_place: true,
            rope: LigerRope::Planned,
            experts: true,
            dense_mlp: false,
        });
        let gemma = FamilyLayout {
            liger: Some(LigerLayout {
                tower_untouched: false,
                norm_in_place: false,
                rope: LigerRope::Planned,
                experts: false,
                dense_mlp: true,
            }),
            norms_per_layer: 4,
            norm: NormKind::Gemma,
            scaled_embedding: true,
            mask_kwargs: true,
            gelu: true,
            tie_default: true,
            ..base
        };
        let qwen35 = FamilyLayout {
            qk_norm: QkNorm::PerHead,
            bos_default: false,
            norm: NormKind::Gemma,
            mask_kwargs: true,
            rotary_cat: true,
            head_dim_default: Some(256),
            hybrid: Some(HybridLayout {
                default_interval: 4,
                default_key_heads: 16,
                default_value_heads: 32,
                default_key_head_dim: 128,
                default_value_head_dim: 128,
                default_conv_kernel: 4,
                output_gate: true,
                fused_in_proj: false,
            }),
            mrope: Some(Mrope::Interleaved),
            partial_rotary: Some((1, 4)),
            vision: Some(VisionKind::Qwen35),
            // `apply_liger_kernel_to_qwen3_5` (liger-kernel 0.8.5 `monkey_patch.py:3219-3316`):
            // `LigerRMSNormForQwen3Next` (offset 1, Gemma's casting, not in place) for
            // Qwen3_5RMSNorm — the layers' norms, attention's q/k norms, the final norm, not
            // the Gated DeltaNet's gated norm — and `LigerQwen3MoeSwiGLUMLP` for the MLP; no RoPE.
            // Its tower's LayerNorms, MLP and rotary are none of those classes.
            liger: Some(LigerLayout {
                tower_untouched: true,
                norm_in_place: false,
                rope: LigerRope::Absent,
                experts: false,
                dense_mlp: true,
            }),
            ..base
        };
        match self {
            Family::Llama | Family::Mistral => FamilyLayout {
                liger: liger_llama,
                ..base
            },
            Family::Qwen2 => FamilyLayout {
                qkv_bias: true,
                bos_default: false,
                mask_kwargs: true,
                liger: liger_llama,
                ..base
            },
            // Qwen2.5-VL's text layers are Qwen2's (a `mask_kwargs` dict too; Liger's switch
            // fails to import for it), with the multimodal rotary in sections and its own tower.
            // `Llama4TextModel` (`modeling_llama4.py:475-569`) and its config class's defaults
            // (`configuration_llama4.py:129-163`: Scout's numbers).
            Family::Llama4 => FamilyLayout {
                norm: NormKind::OneExpression,
                qk_norm: QkNorm::L2AfterRotary,
                qk_norm_by_config: Some(true),
                attention: AttentionKind::RotaryOrNope,
                rotary_product: true,
                mask_kwargs: true,
                head_dim_default: Some(128),
                intermediate_default: Some(8192),
                nope_interval_default: Some(4),
                moe: Some(MoeLayout {
                    // `Llama4TextMoe.__init__` builds the experts, the router, then the shared
                    // expert (:157-164).
                    router_first: false,
                    all_experts: true,
                    router_returns_tuple: true,
                    prequantized_experts: Some("SequentialLlama4TextExperts"),
                    shared: SharedExperts::Summed,
                    // Maverick's dense layers between the MoE ones: `moe_layers` defaults to
                    // `range(interleave_moe_layer_step - 1, layers, step)`
                    // (configuration_llama4.py:175-183), Qwen3-MoE's sparse-step rule; a
                    // listed `moe_layers` leaves the others dense (config.json reads both).
                    dense: DenseLayers::SparseStep,
                    default_experts: 16,
                    default_experts_per_tok: Some(1),
                    ..moe
                }),
                liger_unplanned: Some("apply_liger_kernel_to_llama4"),
                attention_output_local: true,
                ..base
            },
            Family::Qwen25Vl => FamilyLayout {
                mrope: Some(Mrope::Sections),
                views_after_projections: true,
                vision: Some(VisionKind::Qwen25Vl),
                liger: None,
                liger_unimportable: true,
                ..Family::Qwen2.row()
            },
            Family::Qwen3 => FamilyLayout {
                qk_norm: QkNorm::PerHead,
                bos_default: false,
                mask_kwargs: true,
                liger: liger_llama,
                ..base
            },
            // Qwen3-VL's text layers are Qwen3's, run by a text model without a `mask_kwargs`
            // dict (Liger's switch fails to import for it); its MoE sibling's are Qwen3-MoE's, whose
            // router always renormalises and whose experts peft maps no MLP names onto
            // (transformers' conversion of `qwen3_vl_moe` only transposes them).
            Family::Qwen3Vl => FamilyLayout {
                o_bias: true,
                head_dim_default: Some(128),
                mask_kwargs: false,
                liger: None,
                liger_unimportable: true,
                ..Family::Qwen3.row().multimodal()
            },
            Family::Qwen3VlMoe => {
                let text = Family::Qwen3Moe.row();
                FamilyLayout {
                    tie_default: true,
                    moe: match text.moe {
                        Some(m) => Some(MoeLayout {
                            renorm: Renorm::Always,
                            peft_maps_mlp_names: false,
                            default_experts: 60,
                            default_experts_per_tok: Some(4),
                            default_moe_width: 1408,
                            ..m
                        }),
                        None => None,
                    },
                    ..text.multimodal()
                }
            }
            Family::Gemma2 => FamilyLayout {
                softcapping: true,
                sliding: Some(Sliding {
                    period: 2,
                    windows: Some(&[(u64::MAX, 4096)]),
                }),
                ..gemma
            },
            Family::Gemma3 => FamilyLayout {
                rotary_per_layer_type: true,
                qk_norm: QkNorm::PerHeadAfterProjections,
                bias_before_repeat_kv: true,
                head_dim_default: Some(256), // Gemma3TextConfig's default
                sliding: Some(Sliding {
                    period: 6,
                    windows: Some(&[(1152, 512), (u64::MAX, 1024)]),
                }),
                ..gemma
            },
            Family::Phi3 => FamilyLayout {
                fused_projections: true,
                rotary_cat: true,
                liger: liger_llama,
                ..base
            },
            Family::Mixtral => FamilyLayout {
                liger: liger_experts,
                checkpoint_kwargs: KwargsOrder::PositionEmbeddingsFirst,
                moe: Some(MoeLayout {
                    fp32_routing: true,
                    renorm: Renorm::Always,
                    default_experts: 8,
                    default_experts_per_tok: Some(2),
                    ..moe
                }),
                ..base
            },
            Family::Qwen3Moe => FamilyLayout {
                liger: liger_experts,
                qk_norm: QkNorm::PerHead,
                bos_default: false,
                o_bias: true,
                checkpoint_kwargs: KwargsOrder::PositionEmbeddingsFirst,
                moe: Some(MoeLayout {
                    peft_maps_mlp_names: true,
                    moe_width: true,
                    router_first: false,
                    dense: DenseLayers::SparseStep,
                    default_experts: 128,
                    ..moe
                }),
                ..base
            },
            Family::Olmoe => FamilyLayout {
                qk_norm: QkNorm::Whole,
                o_bias: true,
                moe: Some(MoeLayout {
                    peft_maps_mlp_names: true,
                    ..moe
                }),
                ..base
            },
            Family::DeepseekV2 => FamilyLayout {
                o_bias: true,
                attention: AttentionKind::Latent,
                moe: Some(MoeLayout {
                    peft_maps_mlp_names: true,
                    moe_width: true,
                    fp32_routing: true,
                    fp32_router: true,
                    // `DeepseekV2Moe.__init__` builds its experts before its router
                    // (modeling_deepseek_v2.py:124-125).
                    router_first: false,
                    renorm: Renorm::Never,
                    shared: SharedExperts::Added { default_count: 2 },
                    dense: DenseLayers::FirstK { default: 0 },
                    default_experts_per_tok: None,
                    default_moe_width: 1407,
                    ..moe
                }),
                // `apply_liger_kernel_to_deepseek_v2` (monkey_patch.py:3548-3652): Llama's norm
                // (the latent attention's q_a / kv_a norms too), `LigerExperts`, and
                // `LigerQwen3MoeSwiGLUMLP` for the dense layers and the shared experts; no RoPE
                // (its interleaved partial rotary: `rope=True` warns and is skipped).
                liger: Some(LigerLayout {
                    tower_untouched: false,
                    norm_in_place: true,
                    rope: LigerRope::Absent,
                    experts: true,
                    dense_mlp: true,
                }),
                ..base
            },
            Family::Qwen35 => qwen35,
            Family::Glm4Moe => FamilyLayout {
                qk_norm: QkNorm::PerHeadAfterViews,
                qk_norm_by_config: Some(false),
                partial_rotary: Some((1, 2)),
                rotary_cat: true,
                bos_default: false,
                checkpoint_kwargs: KwargsOrder::PositionEmbeddingsFirst,
                moe: Some(MoeLayout {
                    peft_maps_mlp_names: true,
                    moe_width: true,
                    fp32_routing: true,
                    fp32_router: true,
                    sigmoid_groups: true,
                    router_first: false,
                    renorm: Renorm::Config { default: true },
                    shared: SharedExperts::Added { default_count: 1 },
                    dense: DenseLayers::FirstK { default: 1 },
                    default_experts: 128,
                    default_experts_per_tok: Some(8),
                    default_moe_width: 1408,
                    ..moe
                }),
                ..base
            },
            Family::Qwen35Moe => FamilyLayout {
                moe: Some(MoeLayout {
                    moe_width: true,
                    renorm: Renorm::Always,
                    shared: SharedExperts::Gated { default_width: 512 },
                    default_experts: 256,
                    default_experts_per_tok: Some(8),
                    default_moe_width: 512,
                    ..moe
                }),
                // `apply_liger_kernel_to_qwen3_5_moe` (monkey_patch.py:3319-3424) installed before
                // the model is built, as LLaMA-Factory does: Qwen3.5's norm and `LigerExperts`;
                // the shared expert keeps transformers' MLP (Trainer's `use_liger_kernel` patches
                // the built model and swaps it too).
                liger: Some(LigerLayout {
                    tower_untouched: true,
                    norm_in_place: false,
                    rope: LigerRope::Absent,
                    experts: true,
                    dense_mlp: false,
                }),
                ..qwen35
            },
            // Qwen3-Next's text model: Qwen3.5-MoE's layers (`modular_qwen3_5_moe.py` builds them from
            // these), a plain rotary of position products, and the `qwen2_moe` conversion pattern
            // (`conversion_mapping.py:72`), so peft maps the MLP names onto the experts.
            Family::Qwen3Next => {
                let q35moe = Family::Qwen35Moe.row();
                FamilyLayout {
                    intermediate_default: Some(5632),
                    mrope: None,
                    rotary_product: true,
                    vision: None,
                    hybrid: match qwen35.hybrid {
                        Some(h) => Some(HybridLayout {
                            fused_in_proj: true,
                            ..h
                        }),
                        None => None,
                    },
                    moe: match q35moe.moe {
                        Some(m) => Some(MoeLayout {
                            renorm: Renorm::Config { default: true },
                            dense: DenseLayers::SparseStep,
                            peft_maps_mlp_names: true,
                            default_experts: 512,
                            default_experts_per_tok: Some(10),
                            ..m
                        }),
                        None => None,
                    },
                    // `apply_liger_kernel_to_qwen3_next` (monkey_patch.py:3117-3214) before the model
                    // is built: `LigerRMSNormForQwen3Next` for the norms (not the gated one),
                    // `LigerExperts` for the fused experts; the shared expert and a dense layer's MLP
                    // keep transformers' module. Liger's RoPE (off by default; `rope=True` installs
                    // `liger_rotary_pos_emb`, which rotates the leading quarter of each head the
                    // width of cos gives) is not planned: not measured.
                    liger: Some(LigerLayout {
                        tower_untouched: false,
                        norm_in_place: false,
                        rope: LigerRope::Unplanned,
                        experts: true,
                        dense_mlp: false,
                    }),
                    ..q35moe
                }
            }
            Family::GptOss => FamilyLayout {
                qkv_bias: true,
                o_bias: true,
                head_dim_default: Some(64),
                attention: AttentionKind::Sinks,
                sdpa: false,
                norm: NormKind::ProductInFp32,
                mask_kwargs: true,
                sliding: Some(Sliding {
                    period: 2,
                    windows: None,
                }),
                moe: Some(MoeLayout {
                    renorm: Renorm::Never,
                    softmax_after_topk: true,
                    clamped_glu: true,
                    transposed_experts: true,
                    default_experts: 128,
                    default_experts_per_tok: Some(4),
                    mxfp4_checkpoint: true,
                    ..moe
                }),
                // `apply_liger_kernel_to_gpt_oss` (monkey_patch.py:1943-2013): Llama's norm and
                // RoPE over the whole head (`liger_rotary_pos_emb_gpt_oss`); no SwiGLU kernel
                // for its clamped experts.
                liger: Some(LigerLayout {
                    tower_untouched: false,
                    norm_in_place: true,
                    rope: LigerRope::Planned,
                    experts: false,
                    dense_mlp: false,
                }),
                flce_chunk_mem_const: 8,
                ..base
            },
        }
    }

    /// RMSNorms per decoder layer on the residual stream.
    pub fn norms_per_layer(self) -> u128 {
        self.layout().norms_per_layer
    }

    /// Whether the MLP activation is GeLU-tanh (Gemma) rather than SiLU.
    pub fn gelu(self) -> bool {
        self.layout().gelu
    }
}
