//! The dtypes and sizes of one step, derived once from the architecture and the settings: what
//! the step program ([`super::steptrace`]) allocates each tensor in, and the named widths the
//! breakdown's formulas use.
//!
//! Key facts (see `shared/MEMORY-FACTS.md`):
//! - The residual stream is fp32 for a 4-bit model after `prepare_model_for_kbit_training`.
//! - Under autocast, matmuls run in the autocast dtype; a Linear's output is cast back to its
//!   module's dtype by peft.

use super::arch::{Architecture, LayerKind, LinearShape};
use super::dtype::Dtype;
use super::settings::{AttnImpl, ExpertParam, Settings};

/// Dtypes and sizes of the step, derived once from arch + settings.
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
    /// The images of each sample, as the vision tower sees them (None: a text-only step, or
    /// settings the plan's checks refuse).
    pub visual: Option<crate::model::vision::Visual>,
}

impl<'a> Ctx<'a> {
    /// Derives the dtypes of the step.
    pub fn new(arch: &'a Architecture, s: &'a Settings) -> Ctx<'a> {
        let aux_weight = s.aux_weight_dtype();
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
            // Images are an extended step's (model::extended): none without those ops.
            visual: if crate::model::extended::EXTENDED {
                crate::model::vision::visual(arch.tower(), &s.images, s.seq)
                    .ok()
                    .flatten()
            } else {
                None
            },
        }
    }

    /// Tokens of the micro-batch.
    pub fn tokens(&self) -> u128 {
        self.s.tokens()
    }

    /// Whether the routed experts are transformers' per-expert Linear MLPs of a checkpoint saved
    /// quantized (Llama 4's `SequentialLlama4TextExperts`, `experts_layout` per_expert; an
    /// extended step's).
    pub fn sequential_experts(&self) -> bool {
        crate::model::extended::EXTENDED
            && self.s.experts_layout == super::settings::ExpertsLayout::PerExpert
            && self
                .arch
                .moe_layout()
                .is_some_and(|m| m.prequantized_experts.is_some())
    }

    /// Linear layers of a block that LoRA adapts.
    pub fn adapted(&self) -> Vec<LinearShape> {
        self.adapted_of(LayerKind::Dense)
    }

    /// The adapted Linear layers of every kind of decoder layer the model has (a layer kind's
    /// once).
    pub fn adapted_of_every_kind(&self) -> Vec<LinearShape> {
        self.arch
            .layer_groups()
            .iter()
            .flat_map(|&(k, _)| self.adapted_of(k))
            .collect()
    }

    /// Linear layers LoRA adapts in a decoder layer of `kind` (for the families where peft
    /// maps the MLP names onto the fused experts, no Linear layer named so,
    /// [`crate::model::peft_targets`]).
    pub fn adapted_of(&self, kind: LayerKind) -> Vec<LinearShape> {
        if self.s.base_trained() {
            return vec![];
        }
        let to_experts = crate::model::peft_targets::mlp_names_reach_experts(self.arch, self.s);
        let reaches =
            |t: &super::arch::Target| self.s.targets.contains(t) && !(to_experts && t.is_mlp());
        self.arch
            .block_linears(kind)
            .into_iter()
            .filter(|l| l.selected_by.iter().any(reaches))
            .collect()
    }

    /// The fused expert parameters LoRA adapts, with their ranks
    /// ([`crate::model::peft_targets::expert_loras`]).
    pub fn expert_loras(&self) -> Vec<crate::model::peft_targets::ExpertLora> {
        crate::model::peft_targets::expert_loras(self.arch, self.s)
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
        } else if crate::model::extended::EXTENDED && self.s.packing {
            SdpaMask::Packed
        } else if crate::model::extended::EXTENDED && self.s.neat_packing {
            SdpaMask::Given
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
            (SdpaMask::Padded | SdpaMask::Packed | SdpaMask::Given, _) => {
                to.saturating_sub(from) as u128
            }
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

    /// Whether eager attention's `matmul(q, kᵀ)` copies its operands: with more than one
    /// sequence, q after the rotary embedding keeps the (batch, seq, heads, dim) layout of its
    /// projection, which `matmul` cannot view as (batch·heads, seq, dim), so it clones q — and kᵀ
    /// too when k is a view of its projection (no grouped-query `repeat_kv` copy). The bmm saves
    /// the clones instead of the originals. Returns (q copied, k copied). DeepSeek's latent
    /// attention makes both new tensors, contiguous in (batch, heads, seq, dim): no copy.
    pub fn eager_matmul_copies_qk(&self) -> (bool, bool) {
        if self.arch.family.layout().attention == crate::model::family::AttentionKind::Latent {
            return (false, false);
        }
        let rep = self.arch.num_attention_heads / self.arch.kv_heads().max(1);
        let copies = self.eager_output_grad_copies();
        (copies, copies && rep == 1)
    }

    /// Whether the gradient of eager attention's `transpose(1, 2).contiguous()`, a transposed
    /// view, is copied by the bmm's backward, which cannot view it as (batch·heads, seq, dim)
    /// with more than one sequence.
    pub fn eager_output_grad_copies(&self) -> bool {
        self.s.batch > 1 && self.arch.num_attention_heads > 1
    }
}

/// Which 4-D mask sdpa is given ([`Ctx::sdpa_mask`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdpaMask {
    /// None is materialised.
    None,
    /// The padded batch's mask, shared by every layer.
    Padded,
    /// Padding-free packing's block-causal mask over the one packed row, found from its
    /// position ids (`find_packed_sequence_indices`), shared by every layer.
    Packed,
    /// An additive 4-D mask the batch brings (LLaMA-Factory's neat_packing), used as it is.
    Given,
    /// The sliding-window mask of the local layers.
    Sliding,
}

/// `(out, in)` features of a fused expert parameter (per expert).
pub fn expert_param_shape(ctx: &Ctx, p: ExpertParam) -> (u128, u128) {
    let (i, h) = (ctx.arch.expert_width(), ctx.arch.hidden_size as u128);
    match p {
        ExpertParam::GateUp => (2 * i, h),
        ExpertParam::Down => (h, i),
    }
}
