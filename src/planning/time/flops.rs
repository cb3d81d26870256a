//! The matrix products of one training step, in FLOPs from the shapes: forward; backward =
//! activation gradients through frozen weights + both gradients of the small LoRA matrices; the
//! recomputed forward under gradient checkpointing; attention's scores and weighted sums; a
//! preference step's no-grad reference forward. The step-time model ([`super`]) prices them at
//! the card's tensor rate × its generation's GEMM efficiency.

use serde::Serialize;

use crate::model::arch::LayerKind;
use crate::model::Architecture;
use crate::model::{AttnImpl, Settings};

/// FLOPs of one micro-batch, split the way the explanation shows them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepFlops {
    /// Forward through frozen Linear layers and lm_head.
    pub forward_frozen: f64,
    /// Forward of the LoRA paths.
    pub forward_lora: f64,
    /// Attention scores and weighted sums, forward.
    pub forward_attention: f64,
    /// Backward: activation gradients through the base weights, and the weight gradients of
    /// those full or freeze tuning trains.
    pub backward_frozen: f64,
    /// Backward of the LoRA paths (input and weight gradients).
    pub backward_lora: f64,
    /// Backward of attention (about twice its forward).
    pub backward_attention: f64,
    /// Forward recomputed under gradient checkpointing.
    pub recompute: f64,
    /// No-grad forwards of a preference step: the reference's (adapters off) and KTO's KL pass.
    pub reference: f64,
    /// Sum.
    pub total: f64,
}

/// FLOPs of one micro-batch step. Mixture-of-experts models count the parameters a token
/// runs through (its k routed experts and the router), not all of them.
pub fn step_flops(a: &Architecture, s: &Settings) -> StepFlops {
    // The step as it runs (a packed micro-batch is one row).
    let run = s.as_run(a);
    let s = &*run;
    // Every sequence the forward sees: 2 × batch for preference pairs.
    let seqs = s.sequences() as f64;
    let t = seqs * (s.seq as f64);
    let layers = a.num_hidden_layers as f64;
    let head = (a.vocab_size as f64) * (a.hidden_size as f64);
    let r = s.lora_r as f64;
    let lora_of = |kind: LayerKind| -> f64 {
        a.block_linears(kind)
            .iter()
            .filter(|l| l.selected_by.iter().any(|x| s.targets.contains(x)))
            .map(|l| r * (l.in_features + l.out_features) as f64)
            .sum()
    };
    // Per-layer averages over the layer kinds (dense / MoE), so `× layers` gives the total.
    let groups = a.layer_groups();
    let avg = |f: &dyn Fn(LayerKind) -> f64| -> f64 {
        match groups.as_slice() {
            [(k, _)] => f(*k),
            _ => groups.iter().map(|&(k, n)| n as f64 * f(k)).sum::<f64>() / layers.max(1.0),
        }
    };
    // (the experts that compute for each token: Llama 4's run all of them)
    let (e, k, i, h) = (
        a.num_experts() as f64,
        a.experts_run_per_tok() as f64,
        a.expert_width() as f64,
        a.hidden_size as f64,
    );
    let active_experts = |kind: LayerKind| -> f64 {
        if kind.is_moe() {
            // k experts of 3 × width × hidden each, and the router.
            k * 3.0 * i * h + e * h
        } else {
            0.0
        }
    };
    let lin = avg(&|kind| a.block_linear_params(kind) as f64 + active_experts(kind));
    let mut lora_per_layer = avg(&lora_of);
    // LoRA on the fused experts: each token's k experts see their LoRA path (r × (in + out)).
    let expert_params: Vec<(f64, f64, f64)> = crate::model::peft_targets::expert_loras(a, s)
        .iter()
        .map(|l| {
            let (o, n) = match l.param {
                crate::model::ExpertParam::GateUp => (2.0 * i, h),
                crate::model::ExpertParam::Down => (h, i),
            };
            (o, n, l.rank as f64)
        })
        .collect();
    let moe_share = a.moe_layers() as f64 / layers.max(1.0);
    lora_per_layer += moe_share
        * expert_params
            .iter()
            .map(|(o, n, rank)| k * rank * (o + n))
            .sum::<f64>();
    // Queries × keys and weights × values; DeepSeek's latent attention has wider q/k heads.
    let (qk_dim, v_dim) = match a.mla() {
        Some(m) => {
            let heads = a.num_attention_heads as f64;
            (heads * (m.nope + m.rope) as f64, heads * m.v as f64)
        }
        None => (a.q_dim() as f64, a.q_dim() as f64),
    };
    // QKᵀ and P·V: 2 matmuls × 2 FLOPs × batch × seq² × q_dim; causal kernels skip half.
    let causal = if s.attn_impl == AttnImpl::Eager || !a.family.layout().sdpa {
        1.0
    } else {
        0.5
    };
    // A packed row (`Settings::as_run`): flash-attention-2's variable-length kernel attends
    // within each document; sdpa's kernel is given the documents' mask and computes the whole
    // square.
    let packed = crate::model::extended::EXTENDED && s.packing;
    let (rows, len, causal) = match (packed, s.attn_impl) {
        (true, AttnImpl::FlashAttention2) => {
            let docs = s.packed_documents.max(1) as f64;
            (seqs * docs, s.seq as f64 / docs, causal)
        }
        (true, _) => (seqs, s.seq as f64, 1.0),
        // LLaMA-Factory's neat_packing: sdpa is given each row's mask and computes its square.
        (false, _) if crate::model::extended::EXTENDED && s.neat_packing => {
            (seqs, s.seq as f64, 1.0)
        }
        (false, _) => (seqs, s.seq as f64, causal),
    };
    let attn_per_layer = 2.0 * rows * len.powi(2) * (qk_dim + v_dim) * causal;
    let forward_frozen = 2.0 * t * (lin * layers + head);
    let forward_lora = 2.0 * t * lora_per_layer * layers;
    let forward_attention = attn_per_layer * layers;
    // Expert LoRA's W′ = W + B·A of every expert (its backward twice that) and W′'s dense
    // gradient (2 × pairs × in × out).
    let expert_lora_fixed: f64 = expert_params
        .iter()
        .map(|(o, n, rank)| 2.0 * e * o * n * rank)
        .sum::<f64>()
        * a.moe_layers() as f64;
    let expert_lora_grad: f64 = expert_params
        .iter()
        .map(|(o, n, _)| 2.0 * t * k * o * n)
        .sum::<f64>()
        * a.moe_layers() as f64;
    let forward_lora = forward_lora + expert_lora_fixed;
    // Activation gradients through every base weight; full and freeze tuning also compute the
    // trained layers' weight gradients (another 2 × tokens × their weights), and full tuning
    // lm_head's.
    let trained_layers = (0..a.num_hidden_layers)
        .filter(|&li| s.layer_trained(li, a.num_hidden_layers))
        .count() as f64;
    let head_trained = if s.finetuning_type == crate::model::settings::FinetuningType::Full {
        head
    } else {
        0.0
    };
    let backward_frozen = forward_frozen + 2.0 * t * (lin * trained_layers + head_trained);
    let backward_lora = 2.0 * forward_lora + expert_lora_grad;
    let backward_attention = 2.0 * forward_attention;
    let recompute = if s.grad_ckpt {
        2.0 * t * lin * layers + forward_lora + forward_attention
    } else {
        0.0
    };
    // The reference forward (the frozen weights and attention; its head scores only the
    // completion), KTO's KL pass of the policy and of the reference, GRPO's old-policy pass.
    let passes = match (s.reference_pass(), s.stage == crate::model::Stage::Kto) {
        (true, true) => 3.0,
        (false, true) => 1.0,
        (true, false) => 1.0,
        (false, false) => 0.0,
    } + if s.grpo_old_logps() { 1.0 } else { 0.0 };
    let reference = passes * (2.0 * t * lin * layers + forward_attention);
    let total = forward_frozen
        + forward_lora
        + forward_attention
        + backward_frozen
        + backward_lora
        + backward_attention
        + recompute
        + reference;
    StepFlops {
        forward_frozen,
        forward_lora,
        forward_attention,
        backward_frozen,
        backward_lora,
        backward_attention,
        recompute,
        reference,
        total,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Llama-2-7B from the catalog.
    pub(in crate::planning::time) fn llama() -> Architecture {
        crate::formats::catalog::find_model("llama2-7b")
            .unwrap()
            .arch
            .clone()
    }

    /// A packed micro-batch attends as it runs: under sdpa the whole square of its one row
    /// (the documents' mask is given to a kernel that computes every block), under
    /// flash-attention-2 within each document (one per sample), causally.
    #[test]
    fn packed_attention_counts_what_each_kernel_computes() {
        let a = llama();
        let (b, l) = (4.0, 1024.0);
        let qd = a.q_dim() as f64;
        let layers = a.num_hidden_layers as f64;
        let packed = Settings {
            batch: 4,
            seq: 1024,
            packing: true,
            ..Settings::default()
        };
        let sdpa = step_flops(&a, &packed).forward_attention;
        assert_eq!(sdpa, 2.0 * (b * l) * (b * l) * 2.0 * qd * layers);
        let fa2 = step_flops(
            &a,
            &Settings {
                attn_impl: AttnImpl::FlashAttention2,
                ..packed.clone()
            },
        )
        .forward_attention;
        assert_eq!(fa2, 2.0 * b * l * l * 2.0 * qd * 0.5 * layers);
    }

    #[test]
    fn forward_is_two_flops_per_parameter_per_token() {
        // The classic 2·N·T forward estimate: N here is every matmul weight (no embedding lookup).
        let a = llama();
        let s = Settings {
            batch: 1,
            seq: 1,
            ..Settings::default()
        };
        let f = step_flops(&a, &s);
        let n = (a.linear_weight_params_per_layer() * a.num_hidden_layers as u128
            + a.lm_head_params()) as f64;
        assert!((f.forward_frozen - 2.0 * n).abs() < 1.0);
        // Without checkpointing and ignoring the small LoRA and attention parts, a LoRA step is
        // about 2× forward (activation gradients only), not the 3× of full fine-tuning.
        let big = step_flops(
            &a,
            &Settings {
                seq: 512,
                ..Settings::default()
            },
        );
        let ratio = big.total / (big.forward_frozen + big.forward_lora + big.forward_attention);
        assert!((1.95..2.2).contains(&ratio), "{ratio}");
    }

    #[test]
    fn checkpointing_costs_about_one_forward_and_attention_grows_quadratically() {
        let a = llama();
        let s = Settings {
            seq: 2048,
            ..Settings::default()
        };
        let no = step_flops(&a, &s);
        let gc = step_flops(
            &a,
            &Settings {
                grad_ckpt: true,
                ..s.clone()
            },
        );
        let extra =
            (gc.total - no.total) / (no.forward_frozen + no.forward_lora + no.forward_attention);
        assert!((0.9..1.0).contains(&extra), "{extra}");
        let long = step_flops(
            &a,
            &Settings {
                seq: 4096,
                ..s.clone()
            },
        );
        assert!(
            (long.forward_attention / no.forward_attention - 4.0).abs() < 1e-9,
            "twice the length, four times the scores"
        );
    }

    /// A catalog model, one token's step of it and its FLOPs, and the parameters that are no
    /// matmul weight (the embedding and the small ones: norms, biases, …).
    fn one_token(name: &str) -> (Architecture, Settings, StepFlops, f64) {
        let a = crate::formats::catalog::find_model(name)
            .unwrap()
            .arch
            .clone();
        let s = Settings {
            batch: 1,
            seq: 1,
            ..Settings::default()
        };
        let f = step_flops(&a, &s);
        let embed = a.embedding_params() as f64;
        let small =
            (a.total_params() - a.linear_weight_params() - a.expert_params() - a.router_params())
                as f64
                - embed
                - a.lm_head_params() as f64;
        (a, s, f, embed + small)
    }

    #[test]
    fn moe_models_count_active_parameters() {
        // Mixtral-8x7B runs 2 of 8 experts per token: the forward is 2 × active params × tokens
        // (its 12.9 B active matmul weights), not 2 × 46.7 B.
        let (a, s, f, not_matmul) = one_token("mixtral-8x7b");
        let active_matmul = a.active_params() as f64 - not_matmul;
        assert!(
            (f.forward_frozen / 2.0 - active_matmul).abs() < 1.0,
            "{} vs {active_matmul}",
            f.forward_frozen / 2.0
        );
        assert!(f.forward_frozen < 0.3 * 2.0 * a.total_params() as f64);
        // LoRA on the experts adds W + B·A per layer and W′'s gradient.
        let with = step_flops(
            &a,
            &Settings {
                target_parameters: vec![crate::model::ExpertParam::GateUp],
                lora_dropout: 0.0,
                ..s.clone()
            },
        );
        assert!(with.forward_lora > f.forward_lora && with.backward_lora > f.backward_lora);
    }

    #[test]
    fn llama4_runs_every_expert_for_every_token() {
        // transformers' Llama 4 multiplies every token by all 16 experts (the unchosen ones on an
        // input scaled to zero): the forward is 2 × every matmul weight × tokens, experts and all,
        // though a token's routing picks one.
        let (a, _, f, not_matmul) = one_token("llama-4-scout-17b-16e");
        let every_matmul = a.total_params() as f64 - not_matmul;
        assert!(
            (f.forward_frozen / 2.0 - every_matmul).abs() < 1.0,
            "{} vs {every_matmul}",
            f.forward_frozen / 2.0
        );
        assert!(a.active_params() < a.total_params() / 5);
    }
}
