//! The remedies forums repeat, and what the model says each changes for this configuration.

use serde::Serialize;

use crate::model::{plan, Architecture, AttnImpl, Dtype, Optimizer, PlanError, Settings};

/// A remedy forums repeat, and what the model says it changes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Myth {
    /// The claim.
    pub claim: &'static str,
    /// Change of the peak allocated bytes if you follow it (None: not a memory setting at all).
    pub delta_bytes: Option<i128>,
    /// Why.
    pub why: String,
}

/// What the popular remedies change for this configuration. A remedy whose comparison the
/// planner refuses for this model (eager attention where only sdpa is planned, say) gets no
/// figure and the refusal's reason as its why, never a difference with a refused plan.
pub fn myths(arch: &Architecture, s: &Settings) -> Vec<Myth> {
    let peak = |t: &Settings| -> Result<i128, String> {
        plan(arch, t)
            .map(|p| p.peak_allocated_bytes as i128)
            .map_err(|e| match e {
                // (the reason alone, as the setting's refusals are written and translated)
                PlanError::InvalidSetting { why, .. }
                | PlanError::InvalidArchitecture { why, .. } => why,
                e => e.to_string(),
            })
    };
    let base = peak(s);
    // `a − b`, or the first refusal.
    let diff = |a: &Result<i128, String>, b: &Result<i128, String>| -> Result<i128, String> {
        Ok(a.clone()? - b.clone()?)
    };
    let myth = |claim: &'static str, d: Result<i128, String>, why: &dyn Fn(i128) -> String| match d
    {
        Ok(d) => Myth {
            claim,
            delta_bytes: Some(d),
            why: why(d),
        },
        Err(e) => Myth {
            claim,
            delta_bytes: None,
            why: e,
        },
    };
    let gib = |b: i128| format!("{:+.2} GiB", b as f64 / (1u64 << 30) as f64);
    let half_r = Settings {
        lora_r: (s.lora_r / 2).max(1),
        ..s.clone()
    };
    let double_r = Settings {
        lora_r: (s.lora_r * 2).min(arch.hidden_size),
        ..s.clone()
    };
    let ga1 = Settings {
        grad_accum: 1,
        ..s.clone()
    };
    let fp16 = Settings {
        dtype: Dtype::Fp16,
        quant: None,
        autocast: None,
        ..s.clone()
    };
    let sdpa = Settings {
        attn_impl: AttnImpl::Sdpa,
        ..s.clone()
    };
    let eager = Settings {
        attn_impl: AttnImpl::Eager,
        ..s.clone()
    };
    let (p_half, p_double) = (diff(&peak(&half_r), &base), diff(&peak(&double_r), &base));
    let adam8 = Settings {
        optimizer: Optimizer::Adamw8bit,
        ..s.clone()
    };
    let adam32 = Settings {
        optimizer: Optimizer::AdamwTorchFused,
        ..s.clone()
    };
    let (bf16, fp16w) = (
        Settings {
            dtype: Dtype::Bf16,
            ..s.clone()
        },
        Settings {
            dtype: Dtype::Fp16,
            ..s.clone()
        },
    );
    let trainable = plan(arch, s)
        .map(|p| p.params.trainable_params)
        .unwrap_or(0);
    let lora_path: u128 = plan(arch, s)
        .map(|p| {
            p.terms
                .iter()
                .filter(|t| t.component == crate::model::Component::ActLora)
                .map(|t| t.bytes)
                .sum()
        })
        .unwrap_or(0);
    let dd = u128::from(arch.hidden_size).pow(2) * 2;
    let d16 = diff(&peak(&fp16), &base);
    let fp32_base = base.as_ref().ok().copied().unwrap_or(0);
    let fp16_why = |d: i128| {
        if s.quant.is_none() && s.dtype == Dtype::Fp32 {
            format!("fp32 → fp16 weights: {} of {:.2} GiB: the weights halve, but adapters, their gradients and optimizer states stay fp32, and norms and logits are computed in fp32", gib(d), fp32_base as f64 / (1u64 << 30) as f64)
        } else if s.quant.is_none() {
            format!("{} → fp16 weights: {}: both are 2 bytes per weight, so switching saves nothing; only fp32 → 16-bit halves the weights (and never the fp32 adapters, gradients, optimizer states, norms or logits)", s.dtype.name(), gib(d))
        } else if s.quant == Some(crate::model::Quant::Int8) {
            format!(
                "8-bit → fp16 weights: {}: fp16 is twice the int8 weights, not half of anything",
                gib(d)
            )
        } else {
            format!("4-bit → fp16 weights: {}: fp16 is four times the 4-bit weights, not half of anything", gib(d))
        }
    };
    // (both rank changes, or the first refusal)
    let rank = p_half.and_then(|h| Ok((h, p_double?)));
    vec![
        Myth {
            claim: "Call torch.cuda.empty_cache() to fix the OOM",
            delta_bytes: Some(0),
            why: "it only returns cached, unused blocks to the driver; every live tensor at the peak stays, so max_memory_allocated is unchanged (it can lower reserved memory seen by other processes)".into(),
        },
        myth(
            "Lower gradient_accumulation_steps to save memory",
            diff(&peak(&ga1), &base),
            &|_| "accumulation adds the micro-batch gradients into the same LoRA .grad tensors; activations are per micro-batch, so the peak does not depend on it".into(),
        ),
        myth(
            "Use a smaller (or bigger) LoRA rank to save memory",
            rank.clone().map(|(h, _)| h),
            &|h| {
                let d = rank.as_ref().map_or(0, |&(_, d)| d);
                format!("rank {} → {}: {}; rank {} → {}: {}. Adapters are a few MB; the peak is weights, activations and logits", s.lora_r, half_r.lora_r, gib(h), s.lora_r, double_r.lora_r, gib(d))
            },
        ),
        Myth { claim: "Upgrade peft to fix the OOM", delta_bytes: None, why: "the memory of a step follows from the settings above (dtype, dropout, targets, checkpointing, attention); a peft upgrade changes none of them".into() },
        myth("fp16 halves everything", d16, &fp16_why),
        myth(
            "The KV cache grows with sequence length squared",
            diff(&peak(&eager), &peak(&sdpa)),
            &|d| format!("training keeps no KV cache (use_cache=False); the only S² term is eager attention's saved probabilities: eager vs sdpa here is {}", gib(d)),
        ),
        Myth {
            claim: "LoRA's forward builds a d × d temporary (B·A) for every adapted module",
            delta_bytes: Some(0),
            why: format!("peft computes lora_B(lora_A(dropout(x))): the extra tensors are tokens × rank, here {} for the whole LoRA path; a d × d product B·A would be {:.1} MiB per module and is never formed in training (only merge_and_unload forms it, once, afterwards)", gib(lora_path as i128).trim_start_matches('+'), dd as f64 / (1u64 << 20) as f64),
        },
        myth(
            "8-bit Adam (Adam8bit) still takes 4 bytes per parameter",
            diff(&peak(&adam8), &peak(&adam32)),
            &|d| format!("AdamW8bit keeps exp_avg and exp_avg_sq in 1 byte each (plus block-wise constants): about 2 bytes per trainable parameter instead of 8; for {:.1} M LoRA parameters, 8-bit vs 32-bit AdamW here is {}: the optimizer is a small part of a LoRA peak", trainable as f64 / 1e6, gib(d)),
        ),
        myth(
            "RTX 30/40 series cards do not support BF16",
            diff(&peak(&bf16), &peak(&fp16w)),
            &|d| format!("Ampere (RTX 30, A100, A10) and Ada (RTX 40, L4) run bf16 natively; Turing (RTX 20, T4) and older do not. bf16 and fp16 both take 2 bytes, so the choice changes no memory: bf16 vs fp16 here is {}", gib(d)),
        ),
        Myth {
            claim: "With DDP, GPU 0 using more memory than the others is normal",
            delta_bytes: None,
            why: "under DDP every rank holds the same replica, gradient buckets and activations, so the plan is the same on every GPU; extra memory on GPU 0 is other ranks' CUDA contexts (about 0.3–1 GiB each) created on device 0 when a process touches CUDA before torch.cuda.set_device(local_rank), or evaluation and saving gathered on rank 0: set the device first".into(),
        },
    ]
}
