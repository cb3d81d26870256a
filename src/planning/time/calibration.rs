//! The step-time model's constants, each with what it was fitted on or where it comes from.
//!
//! Fitted (least squares on relative error, `tests/it/step_time.rs` prints the fit's rows) on
//! the 20 LoRA training steps timed on an NVIDIA H200 (`tests/data/reference/gpu_probe_h200.jsonl`:
//! the second of two steps, `torch.cuda.synchronize()` around it; torch 2.11, transformers 5.17,
//! peft 0.21; Llama-2-7B, Llama-3-8B, Mistral-7B, Qwen2-7B and Qwen2.5-0.5B, 1 to 8 sequences of
//! 1024 to 4096 tokens, sdpa and eager attention, with and without checkpointing), with the model
//! `seconds = FLOPs ÷ (tensor peak × GEMM efficiency) + traffic factor × bytes created ÷
//! bandwidth + storages created × overhead per op`:
//! - GEMM efficiency 0.57 on Hopper (0.5677 fitted);
//! - traffic factor 2.6 (2.629 fitted): each byte the step's ops create is moved about 2.6
//!   times (written once by its kernel, read by one or two ops);
//! - 12.5 µs per storage created (12.7 fitted): kernel launches and PyTorch's dispatch, paid
//!   per op, whatever the GPU.
//!
//! The fit leaves the timed steps within −25 % … +10 % (root mean square 8 %); the repeated
//! configurations of that file differ among themselves by up to 30 % (Qwen2.5-0.5B, 0.24 s and
//! 0.31 s), so the model is as close as the measurements repeat. Efficiency falling at small
//! token counts is not separately resolved by these steps (1024 tokens and more): the overhead
//! per op carries what small micro-batches lose.
//!
//! Ampere's GEMM efficiency, 0.71, is fitted on one published A100 run (fms-acceleration's
//! `a100_80gb.csv` row 32: Mistral-7B, LoRA, bf16, 4 × 4096 packed tokens, FlashAttention 2;
//! `tests/data/reference/published_gpu.jsonl`) with the traffic factor and overhead above; the
//! other published A100 runs of that table check it (QLoRA, Mixtral, two GPUs).
//!
//! The GEMM efficiencies are of the card's dense tensor figure from the catalog, which for
//! GeForce cards is the rate with fp32 accumulation (what PyTorch's bf16 and fp16 GEMMs use).

use crate::formats::catalog::{Generation, GpuEntry};

/// Share of the card's dense tensor rate a training step's GEMMs and attention kernels reach,
/// and what the figure rests on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GemmEfficiency {
    /// Share of the peak.
    pub value: f64,
    /// Where the value comes from.
    pub basis: &'static str,
    /// Whether it was fitted on runs measured on this generation.
    pub calibrated: bool,
}

/// Fitted on the H200's timed steps.
pub const HOPPER_GEMM_EFFICIENCY: f64 = 0.57;
/// Fitted on a published A100 run.
pub const AMPERE_GEMM_EFFICIENCY: f64 = 0.71;
/// Generations without a measured run: between the two fitted ones.
pub const UNCALIBRATED_GEMM_EFFICIENCY: f64 = 0.64;
/// Times each byte a step's ops create is moved through memory.
pub const TRAFFIC_FACTOR: f64 = 2.6;
/// Seconds of launch and dispatch per storage a step's ops create.
pub const OVERHEAD_PER_OP_S: f64 = 12.5e-6;

/// The GEMM efficiency of a card.
pub fn gemm_efficiency(gpu: &GpuEntry) -> GemmEfficiency {
    match gpu.generation {
        Some(Generation::Hopper) => GemmEfficiency {
            value: HOPPER_GEMM_EFFICIENCY,
            basis: "fitted on 20 LoRA steps timed on an NVIDIA H200",
            calibrated: true,
        },
        Some(Generation::Ampere) => GemmEfficiency {
            value: AMPERE_GEMM_EFFICIENCY,
            basis: "fitted on a published NVIDIA A100 run (fms-acceleration, Mistral-7B LoRA)",
            calibrated: true,
        },
        _ => GemmEfficiency {
            value: UNCALIBRATED_GEMM_EFFICIENCY,
            basis: "no measured run of this generation: between the Ampere (0.71) and Hopper (0.57) fits",
            calibrated: false,
        },
    }
}

/// Share of a link's nominal per-direction rate that NCCL's collectives and host copies
/// sustain (NCCL's tests on 8 A100s over NVLink report 190–230 GB/s bus bandwidth of the 300
/// GB/s per direction).
pub const LINK_EFFICIENCY: f64 = 0.75;

/// A GPU's PCIe x16 host link, GB/s per direction (PCI-SIG: 8, 16 and 32 GT/s per lane for
/// generations 3, 4 and 5, 128b/130b encoding: 15.75, 31.5 and 63 GB/s over 16 lanes), by the
/// generation of the cards of that chip generation.
pub fn pcie_gbs_per_direction(gpu: &GpuEntry) -> f64 {
    match gpu.generation {
        Some(Generation::Volta) | Some(Generation::Turing) => 15.75,
        Some(Generation::Hopper) | Some(Generation::Blackwell) | Some(Generation::Cdna3) => 63.0,
        _ => 31.5,
    }
}

/// Between nodes: one 200 Gb/s InfiniBand HDR port per GPU (25 GB/s per direction), the usual
/// rail of a training cluster; the catalog does not know a cluster's network.
pub const INTER_NODE_GBS_PER_DIRECTION: f64 = 25.0;

/// Bytes an AdamW-style update moves per trainable parameter beyond its states: the fp32
/// parameter read and written and its gradient read.
pub const OPTIMIZER_BYTES_PER_PARAM: u128 = 12;
