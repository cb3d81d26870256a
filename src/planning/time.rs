//! Compute of one LoRA training step and the time it takes: matmul FLOPs from the shapes
//! (forward; backward = activation gradients through frozen weights + both gradients of the small
//! LoRA matrices; the recomputed forward under gradient checkpointing; attention scores), over a
//! GPU's peak rate × an explained utilisation.

use serde::Serialize;

use crate::formats::catalog::GpuEntry;
use crate::model::Architecture;
use crate::model::{AttnImpl, Dtype, Settings};

/// FLOPs of one micro-batch, split the way the explanation shows them.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepFlops {
    /// Forward through frozen Linear layers and lm_head.
    pub forward_frozen: f64,
    /// Forward of the LoRA paths.
    pub forward_lora: f64,
    /// Attention scores and weighted sums, forward.
    pub forward_attention: f64,
    /// Backward: activation gradients through frozen weights (no weight gradients).
    pub backward_frozen: f64,
    /// Backward of the LoRA paths (input and weight gradients).
    pub backward_lora: f64,
    /// Backward of attention (about twice its forward).
    pub backward_attention: f64,
    /// Forward recomputed under gradient checkpointing.
    pub recompute: f64,
    /// Sum.
    pub total: f64,
}

/// FLOPs of one micro-batch step.
pub fn step_flops(a: &Architecture, s: &Settings) -> StepFlops {
    let t = (s.batch as f64) * (s.seq as f64);
    let layers = a.num_hidden_layers as f64;
    let lin = a.linear_weight_params_per_layer() as f64;
    let head = (a.vocab_size as f64) * (a.hidden_size as f64);
    let r = s.lora_r as f64;
    let lora_per_layer: f64 = a
        .linears()
        .iter()
        .filter(|l| l.selected_by.iter().any(|x| s.targets.contains(x)))
        .map(|l| r * (l.in_features + l.out_features) as f64)
        .sum();
    // QKᵀ and P·V: 2 matmuls × 2 FLOPs × batch × seq² × q_dim; causal kernels skip half.
    let causal = if s.attn_impl == AttnImpl::Eager {
        1.0
    } else {
        0.5
    };
    let attn_per_layer =
        4.0 * (s.batch as f64) * (s.seq as f64).powi(2) * a.q_dim() as f64 * causal;
    let forward_frozen = 2.0 * t * (lin * layers + head);
    let forward_lora = 2.0 * t * lora_per_layer * layers;
    let forward_attention = attn_per_layer * layers;
    let backward_frozen = forward_frozen;
    let backward_lora = 2.0 * forward_lora;
    let backward_attention = 2.0 * forward_attention;
    let recompute = if s.grad_ckpt {
        2.0 * t * lin * layers + forward_lora + forward_attention
    } else {
        0.0
    };
    let total = forward_frozen
        + forward_lora
        + forward_attention
        + backward_frozen
        + backward_lora
        + backward_attention
        + recompute;
    StepFlops {
        forward_frozen,
        forward_lora,
        forward_attention,
        backward_frozen,
        backward_lora,
        backward_attention,
        recompute,
        total,
    }
}

/// Default share of the peak rate a HF Trainer LoRA step achieves on tensor cores (matmuls of
/// a few thousand tokens reach 40–60 %, elementwise ops, norms and launches pull it down).
pub const DEFAULT_UTILIZATION: f64 = 0.40;
/// Slowdown of 4-bit layers (dequantise each weight before its matmul).
pub const QUANT_SLOWDOWN: f64 = 1.3;

/// Compute time per trained token of `after` relative to `before` (same model and GPU): FLOPs per
/// token × the 4-bit dequantisation slowdown, so the GPU's rate cancels. 1.3 means 30 % slower.
/// Not modelled: the lower efficiency of smaller matmuls, paging, a different tensor-core rate.
pub fn relative_time(a: &Architecture, before: &Settings, after: &Settings) -> f64 {
    let per_token = |s: &Settings| {
        let slowdown = if s.quant.is_some() {
            QUANT_SLOWDOWN
        } else {
            1.0
        };
        step_flops(a, s).total / ((s.batch as f64) * (s.seq as f64)).max(1.0) * slowdown
    };
    let b = per_token(before);
    if b > 0.0 && b.is_finite() {
        per_token(after) / b
    } else {
        1.0
    }
}

/// Time estimate of a planned run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimeEstimate {
    /// FLOPs of one micro-batch.
    pub flops: StepFlops,
    /// Peak rate used (TFLOP/s) and what it is.
    pub peak_tflops: f64,
    /// Which figure of the datasheet (or the fallback used).
    pub peak_kind: &'static str,
    /// Utilisation assumed.
    pub utilization: f64,
    /// Seconds per optimizer step (all micro-batches of the accumulation).
    pub seconds_per_step: f64,
    /// Training tokens per second over all GPUs.
    pub tokens_per_second: f64,
    /// Seconds per epoch for `dataset_tokens`.
    pub seconds_per_epoch: f64,
    /// How the numbers were made.
    pub explanation: String,
}

/// Time of one epoch of `dataset_tokens` (padded tokens) on `gpu`, or None without a peak figure.
pub fn estimate(
    a: &Architecture,
    s: &Settings,
    gpu: &GpuEntry,
    utilization: f64,
    dataset_tokens: f64,
) -> Option<TimeEstimate> {
    let low = s.autocast.or(match s.dtype {
        Dtype::Fp32 if s.quant.is_none() => None,
        d => Some(d),
    });
    // Without a tensor-core figure in the catalog, fall back to the fp32 rate (conservative).
    const FALLBACK: &str = "fp32 (no tensor figure in the catalog: conservative)";
    let fp32 = gpu.fp32_tflops.map(|p| (p, FALLBACK));
    let (peak, kind) = match low {
        Some(Dtype::Bf16) if gpu.bf16 != Some(false) => gpu
            .bf16_tflops_dense
            .or(gpu.fp16_tflops_dense)
            .map(|p| (p, "dense bf16 tensor"))
            .or(fp32)?,
        Some(Dtype::Bf16) | Some(Dtype::Fp16) => gpu
            .fp16_tflops_dense
            .map(|p| (p, "dense fp16 tensor"))
            .or(fp32)?,
        _ => (gpu.fp32_tflops?, "fp32"),
    };
    let util_ok = utilization.is_finite() && utilization > 0.0 && utilization <= 1.0;
    let data_ok = dataset_tokens.is_finite() && dataset_tokens >= 0.0;
    if !util_ok || !data_ok {
        return None;
    }
    let flops = step_flops(a, s);
    let slowdown = if s.quant.is_some() {
        QUANT_SLOWDOWN
    } else {
        1.0
    };
    let micro = flops.total / (peak * 1e12 * utilization) * slowdown;
    let accum = s.grad_accum as f64;
    let world = s.parallel.world() as f64;
    let seconds_per_step = micro * accum;
    let tokens_per_step = (s.batch as f64) * (s.seq as f64) * accum * world;
    let tokens_per_second = tokens_per_step / seconds_per_step;
    let seconds_per_epoch = (dataset_tokens / tokens_per_step).ceil() * seconds_per_step;
    let explanation = format!(
        "{:.3} PFLOP per micro-batch ({} GC recompute) ÷ ({peak} TFLOP/s {kind} × {:.0} % utilisation){}; × {} accumulation steps; {} GPU(s) in parallel",
        flops.total / 1e15,
        if s.grad_ckpt { "with" } else { "no" },
        utilization * 100.0,
        if slowdown > 1.0 { format!(" × {slowdown} for 4-bit dequantisation") } else { String::new() },
        s.grad_accum,
        s.parallel.world()
    );
    Some(TimeEstimate {
        flops,
        peak_tflops: peak,
        peak_kind: kind,
        utilization,
        seconds_per_step,
        tokens_per_second,
        seconds_per_epoch,
        explanation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama() -> Architecture {
        crate::formats::catalog::find_model("llama2-7b")
            .unwrap()
            .arch
            .clone()
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

    #[test]
    fn time_follows_peak_and_accumulation() {
        let a = llama();
        let h100 = crate::formats::catalog::find_gpu("h100-80").unwrap();
        let a100 = crate::formats::catalog::find_gpu("a100-80").unwrap();
        let s = Settings {
            autocast: Some(Dtype::Bf16),
            ..Settings::default()
        };
        let fast = estimate(&a, &s, h100, 0.4, 1e6).unwrap();
        let slow = estimate(&a, &s, a100, 0.4, 1e6).unwrap();
        assert!(slow.seconds_per_step > fast.seconds_per_step);
        let acc = estimate(
            &a,
            &Settings {
                grad_accum: 4,
                ..s.clone()
            },
            h100,
            0.4,
            1e6,
        )
        .unwrap();
        assert!((acc.seconds_per_step / fast.seconds_per_step - 4.0).abs() < 1e-9);
        assert!(
            (acc.tokens_per_second - fast.tokens_per_second).abs() / fast.tokens_per_second < 1e-9
        );
        assert!(estimate(&a, &s, h100, 0.0, 1e6).is_none());
        // A GPU the catalog gives no tensor figure for (the A10G): its fp32 rate, labelled.
        let a10g = crate::formats::catalog::find_gpu("a10g").unwrap();
        assert!(a10g.bf16_tflops_dense.is_none() && a10g.fp16_tflops_dense.is_none());
        let fallback = estimate(&a, &s, a10g, 0.4, 1e6).unwrap();
        assert_eq!(Some(fallback.peak_tflops), a10g.fp32_tflops);
        assert!(fallback.peak_kind.contains("no tensor figure"));
        // The RTX 4090 now has its datasheet tensor figure.
        let rtx = crate::formats::catalog::find_gpu("rtx4090").unwrap();
        let with_tensor = estimate(&a, &s, rtx, 0.4, 1e6).unwrap();
        assert_eq!(Some(with_tensor.peak_tflops), rtx.bf16_tflops_dense);
        assert!(estimate(&a, &s, h100, f64::NAN, 1e6).is_none());
    }
}
