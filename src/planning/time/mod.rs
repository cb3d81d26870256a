//! How long a training step takes on a card, by op class, from the same step program the memory
//! comes from:
//! - the matrix products (frozen and LoRA GEMMs, attention, the recomputed forward) in FLOPs from
//!   the shapes ([`flops`]), at the card's dense tensor rate × its generation's GEMM efficiency;
//! - the memory-bound work (norms, activations, elementwise ops, the LoRA path's narrow products,
//!   dropout, the loss over the vocabulary, eager attention's scores, 4-bit dequantization's
//!   weight copies): the bytes of every storage the step's ops create (the step program's warm
//!   step, [`crate::model::steptrace::StepWork`]) × a traffic factor, over the memory bandwidth;
//! - launch and dispatch: a fixed cost per storage created (about one per op);
//! - the optimizer's update over the trainable parameters and their states, by bandwidth;
//! - on several GPUs, the collectives: the layers FSDP / ZeRO-3 gather (the program's gathered
//!   buffers) and the gradients reduced, over NVLink, PCIe or the network between nodes;
//! - offloading: what moves over the host's PCIe link.
//!
//! The constants and what they were fitted on are in [`calibration`]; `tests/it/step_time.rs`
//! holds the model to the timed H200 steps and the published A100 runs.

pub mod calibration;
mod flops;

pub use flops::{step_flops, StepFlops};

use serde::Serialize;

use self::calibration as cal;
use crate::formats::catalog::GpuEntry;
use crate::model::ctx::Ctx;
use crate::model::steptrace::{StepWork, What};
use crate::model::{Architecture, Dtype, Plan, Settings, Strategy};

/// The storages a step's kernels write to memory (the rest are the communication's buffers,
/// priced as communication).
fn traffic_bytes(w: &StepWork) -> u128 {
    let comm = [What::GatheredLayer, What::GatheredRoot, What::CommBucket];
    What::ALL
        .iter()
        .filter(|k| !comm.contains(k))
        .map(|&k| w.bytes(k) as u128)
        .sum()
}

/// The rate the step's GEMMs run at: the card's dense tensor figure for the step's compute dtype
/// (fp32 without autocast), and which figure it is.
fn peak_rate(s: &Settings, gpu: &GpuEntry) -> Option<(f64, &'static str)> {
    let low = s.autocast.or(match s.dtype {
        Dtype::Fp32 if s.quant.is_none() => None,
        d => Some(d),
    });
    // Without a tensor-core figure in the catalog, fall back to the fp32 rate (conservative).
    const FALLBACK: &str = "fp32 (no tensor figure in the catalog: conservative)";
    let fp32 = gpu.fp32_tflops.map(|p| (p, FALLBACK));
    match low {
        Some(Dtype::Bf16) if gpu.bf16_ok() => gpu
            .bf16_tflops_dense
            .or(gpu.fp16_tflops_dense)
            .map(|p| (p, "dense bf16 tensor"))
            .or(fp32),
        Some(Dtype::Bf16) | Some(Dtype::Fp16) => gpu
            .fp16_tflops_dense
            .map(|p| (p, "dense fp16 tensor"))
            .or(fp32),
        _ => gpu.fp32_tflops.map(|p| (p, "fp32")),
    }
    .filter(|(p, _)| p.is_finite() && *p > 0.0)
}

/// The seconds of one part of the step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimePart {
    /// Stable key (`gemm`, `memory`, `overhead`, `optimizer`, `communication`, `offload`).
    pub key: &'static str,
    /// What it is, in words.
    pub label: &'static str,
    /// Seconds per optimizer step (all micro-batches of the accumulation).
    pub seconds: f64,
    /// How it is computed, with its numbers.
    pub formula: String,
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
    /// Share of the peak the GEMMs reach.
    pub gemm_efficiency: f64,
    /// What that share rests on (fitted on measured runs, given, or not calibrated).
    pub efficiency_basis: String,
    /// Whether the card's generation has measured runs behind its efficiency (or it was given).
    pub calibrated: bool,
    /// Memory bandwidth used, GB/s (`None`: the catalog has none; memory-bound work uncounted).
    pub bandwidth_gbs: Option<f64>,
    /// Bytes of the storages one micro-batch's ops create.
    pub created_bytes: u128,
    /// Storages one micro-batch's ops create.
    pub ops: u64,
    /// The step's time by part; they add up to `seconds_per_step`.
    pub parts: Vec<TimePart>,
    /// Seconds per optimizer step (all micro-batches of the accumulation).
    pub seconds_per_step: f64,
    /// Training tokens per second over all GPUs.
    pub tokens_per_second: f64,
    /// Seconds per epoch for `dataset_tokens`.
    pub seconds_per_epoch: f64,
    /// Rental price per GPU-hour the cost is at (the catalog's, when it cites one).
    pub usd_per_gpu_hour: Option<f64>,
    /// What one epoch costs on every GPU of the run: hours × GPUs × price.
    pub usd_per_epoch: Option<f64>,
    /// How the numbers were made.
    pub explanation: String,
}

/// The catalog card a time ratio is computed on when no card is named ([`relative_time`]):
/// the A100 80 GB, whose efficiency a published run calibrates.
pub const REFERENCE_GPU: &str = "a100-80";

/// Tokens per epoch a time estimate assumes when none are given.
pub const DEFAULT_DATASET_TOKENS: f64 = 1e8;

/// A card's memory bandwidth from the catalog, GB/s, when it gives a usable one.
fn bandwidth_gbs(gpu: &GpuEntry) -> Option<f64> {
    gpu.mem_bandwidth_gbs.filter(|b| b.is_finite() && *b > 0.0)
}

/// What the model needs of a card.
#[derive(Clone, Copy, Debug)]
struct Card {
    peak_tflops: f64,
    efficiency: f64,
    bandwidth_gbs: Option<f64>,
}

impl Card {
    /// `gpu` running the step `s` at its calibrated GEMM efficiency, or None without a peak.
    fn calibrated(s: &Settings, gpu: &GpuEntry) -> Option<Card> {
        let (peak, _) = peak_rate(s, gpu)?;
        Some(Card {
            peak_tflops: peak,
            efficiency: cal::gemm_efficiency(gpu).value,
            bandwidth_gbs: bandwidth_gbs(gpu),
        })
    }
}

/// The seconds of one micro-batch's compute, memory traffic and launches.
fn micro_parts(
    a: &Architecture,
    s: &Settings,
    w: &StepWork,
    c: Card,
) -> (StepFlops, f64, f64, f64) {
    let flops = step_flops(a, s);
    let gemm = flops.total / (c.peak_tflops * 1e12 * c.efficiency);
    let memory = c.bandwidth_gbs.map_or(0.0, |bw| {
        cal::TRAFFIC_FACTOR * traffic_bytes(w) as f64 / (bw * 1e9)
    });
    let overhead = w.allocations as f64 * cal::OVERHEAD_PER_OP_S;
    (flops, gemm, memory, overhead)
}

/// Compute time per trained token of `after` relative to `before` (same model), each with the
/// work its plan's step program does, on `gpu` (`None`: an A100 80 GB). 1.3 means 30 % slower.
/// The balance of GEMMs, memory traffic and launches differs between cards, and so does the
/// ratio: a longer sequence saves more per token where launches weigh more. Communication is in
/// it on several GPUs (the gathers and gradient reductions of each layout, [`communication`]),
/// offloading is not.
pub fn relative_time(
    a: &Architecture,
    before: &Settings,
    before_work: &StepWork,
    after: &Settings,
    after_work: &StepWork,
    gpu: Option<&GpuEntry>,
) -> f64 {
    // The reference card at its dense bf16 rate, whatever the step's dtype (a ratio on it
    // compares the steps' work, not their precisions).
    let reference = crate::formats::catalog::find_gpu(REFERENCE_GPU)
        .ok()
        .and_then(|g| {
            Some(Card {
                peak_tflops: g.bf16_tflops_dense?,
                efficiency: cal::gemm_efficiency(g).value,
                bandwidth_gbs: bandwidth_gbs(g),
            })
        });
    let card = |s: &Settings| gpu.and_then(|g| Card::calibrated(s, g)).or(reference);
    let link = gpu.or_else(|| crate::formats::catalog::find_gpu(REFERENCE_GPU).ok());
    let per_token = |s: &Settings, w: &StepWork| {
        let (_, g, m, o) = micro_parts(a, s, w, card(s)?);
        let comm = link.map_or(0.0, |l| step_communication(a, s, l) / s.grad_accum as f64);
        Some((g + m + o + comm) / ((s.sequences() as f64) * (s.seq as f64)).max(1.0))
    };
    match (per_token(before, before_work), per_token(after, after_work)) {
        (Some(b), Some(x)) if b > 0.0 && (x / b).is_finite() => x / b,
        _ => 1.0,
    }
}

/// Time of one epoch of `dataset_tokens` (padded tokens) on `gpu` for the step `plan` planned,
/// or None without a peak figure. `efficiency` replaces the calibrated GEMM efficiency.
pub fn estimate(
    a: &Architecture,
    s: &Settings,
    plan: &Plan,
    gpu: &GpuEntry,
    efficiency: Option<f64>,
    dataset_tokens: f64,
) -> Option<TimeEstimate> {
    let (peak, kind) = peak_rate(s, gpu)?;
    let eff_ok = efficiency.is_none_or(|e| e.is_finite() && e > 0.0 && e <= 1.0);
    if !eff_ok {
        return None;
    }
    let fitted = cal::gemm_efficiency(gpu);
    let rate = match efficiency {
        Some(e) => (peak, kind, e, "given", true),
        None => (peak, kind, fitted.value, fitted.basis, fitted.calibrated),
    };
    estimate_at(a, s, plan, gpu, rate, dataset_tokens)
}

/// [`estimate`] with the step's GEMMs at `measured_tflops`, the rate the visitor's own GPU
/// reached in the WebGPU benchmark, and the rest (memory traffic, launches, communication) as
/// on `gpu`.
pub fn estimate_measured(
    a: &Architecture,
    s: &Settings,
    plan: &Plan,
    gpu: &GpuEntry,
    measured_tflops: f64,
    dataset_tokens: f64,
) -> Option<TimeEstimate> {
    if !(measured_tflops.is_finite() && measured_tflops > 0.0) {
        return None;
    }
    let rate = (
        measured_tflops,
        "measured on your GPU",
        1.0,
        "the rate of the WebGPU benchmark's matrix product",
        true,
    );
    estimate_at(a, s, plan, gpu, rate, dataset_tokens)
}

/// The estimate with the GEMMs at `(peak TFLOP/s, its kind, efficiency, basis, calibrated)`.
fn estimate_at(
    a: &Architecture,
    s: &Settings,
    plan: &Plan,
    gpu: &GpuEntry,
    (peak, kind, eff, basis, calibrated): (f64, &'static str, f64, &str, bool),
    dataset_tokens: f64,
) -> Option<TimeEstimate> {
    if !(dataset_tokens.is_finite() && dataset_tokens >= 0.0) {
        return None;
    }
    let basis = basis.to_string();
    let bw = bandwidth_gbs(gpu);
    let card = Card {
        peak_tflops: peak,
        efficiency: eff,
        bandwidth_gbs: bw,
    };
    let w = &plan.work;
    let (flops, gemm, memory, overhead) = micro_parts(a, s, w, card);
    let accum = s.grad_accum as f64;
    let par = &s.parallel;
    let world = par.world() as f64;
    let created = traffic_bytes(w);
    let mut parts = vec![
        TimePart {
            key: "gemm",
            label: "GEMMs and attention",
            seconds: gemm * accum,
            formula: format!(
                "{:.3} PFLOP per micro-batch ÷ ({peak} TFLOP/s {kind} × {eff:.2} GEMM efficiency, {basis}) × {} micro-batches",
                flops.total / 1e15,
                s.grad_accum
            ),
        },
        TimePart {
            key: "memory",
            label: "memory traffic",
            seconds: memory * accum,
            formula: match bw {
                Some(b) => format!(
                    "{} × {:.1} GB the micro-batch's ops create ÷ {b} GB/s × {} micro-batches",
                    cal::TRAFFIC_FACTOR,
                    created as f64 / 1e9,
                    s.grad_accum
                ),
                None => "no memory bandwidth in the catalog for this card: not counted".into(),
            },
        },
        TimePart {
            key: "overhead",
            label: "launch and dispatch",
            seconds: overhead * accum,
            formula: format!(
                "{} ops × {} µs × {} micro-batches",
                w.allocations,
                cal::OVERHEAD_PER_OP_S * 1e6,
                s.grad_accum
            ),
        },
    ];
    // The optimizer's update (on the GPU unless offloaded): each trainable parameter of this
    // rank read and written with its gradient, its states read and written.
    let run = s.as_run(a);
    let ctx = Ctx::new(a, &run);
    let state_terms = crate::model::weights::optimizer_terms(&ctx, &plan.params);
    let sharded = par.strategy.is_zero() || par.strategy.is_fsdp();
    let share = if sharded { world } else { 1.0 };
    let trainable = plan.params.trainable_params as f64 / share;
    let states: f64 = state_terms.iter().map(|t| t.bytes as f64).sum::<f64>() / share;
    if let (Some(b), false) = (bw, par.offload_optimizer) {
        let bytes = trainable * cal::OPTIMIZER_BYTES_PER_PARAM as f64 + 2.0 * states;
        parts.push(TimePart {
            key: "optimizer",
            label: "optimizer update",
            seconds: bytes / (b * 1e9),
            formula: format!(
                "({:.2} M trainable parameters × {} bytes + 2 × {:.2} GB of states) ÷ {b} GB/s",
                trainable / 1e6,
                cal::OPTIMIZER_BYTES_PER_PARAM,
                states / 1e9
            ),
        });
    }
    if par.world() > 1 {
        parts.push(communication_part(
            a,
            s,
            gpu,
            Some(plan.params.trainable_params),
        ));
    }
    if par.offload_optimizer || par.offload_params || par.offload_activations {
        parts.push(offload(s, w, gpu, trainable));
    }
    let seconds_per_step: f64 = parts.iter().map(|p| p.seconds).sum();
    let tokens_per_step = (s.sequences() as f64) * (s.seq as f64) * accum * world;
    let tokens_per_second = tokens_per_step / seconds_per_step;
    let seconds_per_epoch = (dataset_tokens / tokens_per_step).ceil() * seconds_per_step;
    let price = gpu.usd_per_gpu_hour.filter(|p| p.is_finite() && *p >= 0.0);
    let usd_per_epoch = price.map(|p| seconds_per_epoch / 3600.0 * world * p);
    let active = if a.is_moe() && a.experts_run_per_tok() > a.experts_per_tok() {
        format!(
            "; FLOPs of all {} experts for every token, as transformers runs them ({:.2} B active of {:.2} B parameters by the routing, {} of {} experts per token)",
            a.num_experts(),
            a.active_params() as f64 / 1e9,
            a.total_params() as f64 / 1e9,
            a.experts_per_tok(),
            a.num_experts()
        )
    } else if a.is_moe() {
        format!(
            "; FLOPs from the {:.2} B active of {:.2} B parameters ({} of {} experts per token)",
            a.active_params() as f64 / 1e9,
            a.total_params() as f64 / 1e9,
            a.experts_per_tok(),
            a.num_experts()
        )
    } else {
        String::new()
    };
    let explanation = format!(
        "{}{active}; {} GC recompute{}; {} GPU(s) in parallel",
        parts
            .iter()
            .map(|p| format!("{} {:.3} s: {}", p.label, p.seconds, p.formula))
            .collect::<Vec<_>>()
            .join("; "),
        if s.grad_ckpt { "with" } else { "no" },
        if flops.reference > 0.0 && s.grpo() {
            ", with GRPO's no-grad scoring passes (not its generation)"
        } else if flops.reference > 0.0 {
            ", with the reference's no-grad forward"
        } else if s.grpo() {
            ", not GRPO's generation"
        } else {
            ""
        },
        par.world()
    );
    Some(TimeEstimate {
        flops,
        peak_tflops: peak,
        peak_kind: kind,
        gemm_efficiency: eff,
        efficiency_basis: basis,
        calibrated,
        bandwidth_gbs: bw,
        created_bytes: created,
        ops: w.allocations,
        parts,
        seconds_per_step,
        tokens_per_second,
        seconds_per_epoch,
        usd_per_gpu_hour: price,
        usd_per_epoch,
        explanation,
    })
}

/// [`communication`] of `s`'s layout: layers gathered whole in the dtype the step computes with
/// (FSDP's mixed precision), the embedding and lm_head as FSDP's root, the gradients of the
/// trainable parameters reduced (`trainable_params`, the plan's count, or counted here).
fn communication_part(
    a: &Architecture,
    s: &Settings,
    gpu: &GpuEntry,
    trainable_params: Option<u128>,
) -> TimePart {
    let run = s.as_run(a);
    let step = crate::model::distributed::compute_settings(&run);
    let step_ctx = Ctx::new(a, step.as_ref().unwrap_or(&run));
    let layer = crate::model::distributed::gathered_layer_bytes(&step_ctx) as f64;
    let root = ((a.embedding_params() + a.lm_head_params()) * step_ctx.aux_weight.bytes()) as f64;
    let trainable = trainable_params
        .unwrap_or_else(|| crate::model::weights::param_counts(&step_ctx).trainable_params);
    communication(s, a, layer, root, gpu, trainable as f64)
}

/// Seconds of communication per optimizer step on several GPUs (0 on one).
fn step_communication(a: &Architecture, s: &Settings, gpu: &GpuEntry) -> f64 {
    if s.parallel.world() > 1 {
        communication_part(a, s, gpu, None).seconds
    } else {
        0.0
    }
}

/// The collectives of one optimizer step on this rank: under FSDP FULL_SHARD / HYBRID_SHARD and
/// ZeRO-3 each decoder layer gathered whole (`layer` bytes, [`crate::model::distributed::gathered_layer_bytes`])
/// for the forward and again for the backward, FSDP's root unit (embeddings, lm_head: `root`)
/// once, of which this rank receives all but its own shard; and the gradients reduced
/// (reduce-scatter per micro-batch when sharded, one all-reduce per optimizer step for DDP and
/// ZeRO-1/2). Added to the compute, not overlapped: the published two-GPU FSDP runs take longer
/// than their compute alone.
fn communication(
    s: &Settings,
    a: &Architecture,
    layer: f64,
    root: f64,
    gpu: &GpuEntry,
    all_trainable: f64,
) -> TimePart {
    let par = &s.parallel;
    let n = par.world() as f64;
    let shards = par.param_shards() as f64;
    let intra = gpu
        .nvlink_gbs_per_direction
        .unwrap_or_else(|| cal::pcie_gbs_per_direction(gpu));
    let (link, link_name) = if par.nodes > 1 && par.strategy != Strategy::FsdpHybridShard {
        (
            cal::INTER_NODE_GBS_PER_DIRECTION,
            "the network between nodes",
        )
    } else if gpu.nvlink_gbs_per_direction.is_some() {
        (intra, "NVLink")
    } else {
        (intra, "PCIe")
    };
    let rate = link * 1e9 * cal::LINK_EFFICIENCY;
    let gathered = if shards > 1.0 {
        let fsdp_root = if par.strategy.is_fsdp() { root } else { 0.0 };
        (2.0 * layer * a.num_hidden_layers as f64 + fsdp_root) * (shards - 1.0) / shards
    } else {
        0.0
    };
    // Every trainable parameter's gradient, in fp32 (peft's adapters; FSDP reduces in the
    // parameters' dtype).
    let grads = all_trainable * 4.0;
    let accum = s.grad_accum as f64;
    let (sync, how) = match par.strategy {
        Strategy::Ddp | Strategy::Zero1 | Strategy::Zero2 => {
            (2.0 * grads * (n - 1.0) / n, "all-reduce once per step")
        }
        _ => (
            grads * (n - 1.0) / n * accum,
            "reduce-scatter per micro-batch",
        ),
    };
    let bytes = gathered * accum + sync;
    TimePart {
        key: "communication",
        label: "communication",
        seconds: bytes / rate,
        formula: format!(
            "({:.2} GB gathered per micro-batch × {} + {:.3} GB of gradients, {how}) ÷ ({link} GB/s over {link_name} × {})",
            gathered / 1e9,
            s.grad_accum,
            sync / 1e9,
            cal::LINK_EFFICIENCY
        ),
    }
}

/// What offloading moves over the host's PCIe link per optimizer step: offloaded checkpoints to
/// the host and back each micro-batch, offloaded parameters brought for the forward and the
/// backward, and with the optimizer offloaded the gradients out and the updated parameters back
/// (the CPU's own update is not timed).
fn offload(s: &Settings, w: &StepWork, gpu: &GpuEntry, trainable: f64) -> TimePart {
    let par = &s.parallel;
    let accum = s.grad_accum as f64;
    let rate = cal::pcie_gbs_per_direction(gpu) * 1e9 * cal::LINK_EFFICIENCY;
    let states = [
        What::Weight,
        What::QuantState,
        What::Trainable,
        What::OptState,
        What::ParamGrad,
    ];
    let activations = w
        .host
        .iter()
        .filter(|h| !states.contains(&h.0))
        .map(|h| h.1 as f64)
        .sum::<f64>();
    let params = w.host_bytes(&[What::Weight, What::QuantState]) as f64;
    let mut bytes = 2.0 * activations * accum + 2.0 * params * accum;
    if par.offload_optimizer {
        bytes += trainable * (4.0 + 4.0);
    }
    TimePart {
        key: "offload",
        label: "offload over PCIe",
        seconds: bytes / rate,
        formula: format!(
            "(2 × {:.2} GB of checkpoints + 2 × {:.2} GB of parameters) × {} micro-batches{} ÷ ({} GB/s PCIe × {})",
            activations / 1e9,
            params / 1e9,
            s.grad_accum,
            if par.offload_optimizer {
                format!(
                    " + {:.2} M parameters' gradients out and values back, 8 bytes each, the CPU's update not timed",
                    trainable / 1e6
                )
            } else {
                String::new()
            },
            cal::pcie_gbs_per_direction(gpu),
            cal::LINK_EFFICIENCY
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::flops::tests::llama;
    use super::*;
    use crate::formats::catalog::find_gpu;
    use crate::model::plan;

    #[test]
    fn time_follows_peak_and_accumulation() {
        let a = llama();
        let h100 = find_gpu("h100-80").unwrap();
        let a100 = find_gpu("a100-80").unwrap();
        let s = Settings {
            autocast: Some(Dtype::Bf16),
            ..Settings::default()
        };
        let p = plan(&a, &s).unwrap();
        let fast = estimate(&a, &s, &p, h100, None, 1e6).unwrap();
        let slow = estimate(&a, &s, &p, a100, None, 1e6).unwrap();
        assert!(slow.seconds_per_step > fast.seconds_per_step);
        let acc_s = Settings {
            grad_accum: 4,
            ..s.clone()
        };
        let acc = estimate(&a, &acc_s, &plan(&a, &acc_s).unwrap(), h100, None, 1e6).unwrap();
        // The micro-batches repeat; the optimizer's update runs once.
        let opt = |t: &TimeEstimate| {
            t.parts
                .iter()
                .find(|p| p.key == "optimizer")
                .map_or(0.0, |p| p.seconds)
        };
        let micro = fast.seconds_per_step - opt(&fast);
        assert!((acc.seconds_per_step - opt(&acc) - 4.0 * micro).abs() < 1e-9 * micro);
        assert!(acc.tokens_per_second > fast.tokens_per_second);
        assert!(estimate(&a, &s, &p, h100, Some(0.0), 1e6).is_none());
        assert!(estimate(&a, &s, &p, h100, Some(f64::NAN), 1e6).is_none());
        // The parts add up to the step.
        let sum: f64 = fast.parts.iter().map(|p| p.seconds).sum();
        assert!((sum - fast.seconds_per_step).abs() < 1e-12);
        // A GPU the catalog gives no tensor figure for (the A10G): its fp32 rate, labelled.
        let a10g = find_gpu("a10g").unwrap();
        assert!(a10g.bf16_tflops_dense.is_none() && a10g.fp16_tflops_dense.is_none());
        let fallback = estimate(&a, &s, &p, a10g, None, 1e6).unwrap();
        assert_eq!(Some(fallback.peak_tflops), a10g.fp32_tflops);
        assert!(fallback.peak_kind.contains("no tensor figure"));
        let rtx = find_gpu("rtx4090").unwrap();
        let with_tensor = estimate(&a, &s, &p, rtx, None, 1e6).unwrap();
        assert_eq!(Some(with_tensor.peak_tflops), rtx.bf16_tflops_dense);
        assert!(!with_tensor.calibrated, "no measured Ada run");
        assert!(fast.calibrated && slow.calibrated);
    }

    #[test]
    fn a_given_efficiency_scales_only_the_gemms() {
        let a = llama();
        let s = Settings {
            autocast: Some(Dtype::Bf16),
            ..Settings::default()
        };
        let p = plan(&a, &s).unwrap();
        let h200 = find_gpu("h200").unwrap();
        let part = |t: &TimeEstimate, k: &str| t.parts.iter().find(|p| p.key == k).unwrap().seconds;
        let x = estimate(&a, &s, &p, h200, Some(0.3), 0.0).unwrap();
        let y = estimate(&a, &s, &p, h200, Some(0.6), 0.0).unwrap();
        assert!((part(&x, "gemm") / part(&y, "gemm") - 2.0).abs() < 1e-9);
        assert_eq!(part(&x, "memory"), part(&y, "memory"));
        assert_eq!(part(&x, "overhead"), part(&y, "overhead"));
    }
}
