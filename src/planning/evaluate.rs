//! What the web page shows for one state, computed in one pure function so it is tested natively
//! and the page only draws it: the plan, the verdict on the chosen GPU, and the fit limits.

use crate::formats::catalog;
use crate::model::job::{plan_job_within, Job};
use crate::model::{plan, Architecture, Plan, Settings};
use crate::planning::fit::{self, Fidelity};
use crate::planning::{job_verdict, Verdict};

/// Everything derived from (model, GPU, settings).
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The memory plan.
    pub plan: Plan,
    /// Verdict on the selected GPU: the whole job's when [`Evaluation::job`] is planned (its
    /// largest phase decides), else the training step's.
    pub verdict: Verdict,
    /// The job around the training step (evaluation, saving, a merge), when planned: always
    /// for the simulated evaluation; for the quick one only when no phase after training runs
    /// on the GPU ([`crate::model::job::JobSettings::runs_on_gpu_after_training`]), since such a
    /// phase is a run of its own (milliseconds, over a slider move's budget).
    pub job: Option<Job>,
    /// Whether [`Evaluation::verdict`] is the whole job's: false while a phase after training
    /// that runs on the GPU is not planned yet (the verdict is then the training step's and the
    /// phases planned by formula).
    pub whole_job: bool,
    /// GPU display name.
    pub gpu_name: String,
    /// Largest micro-batch that fits (None: not even 1).
    pub max_batch: Option<u64>,
    /// Longest sequence that fits (None: not even 1 token).
    pub max_seq: Option<u64>,
}

/// Upper end of the batch search (the UI's slider range).
pub const BATCH_SEARCH_MAX: u64 = 512;
/// Upper end of the sequence search.
pub const SEQ_SEARCH_MAX: u64 = 131_072;

/// Evaluates a catalog model on a catalog GPU.
pub fn evaluate(model: &str, gpu: &str, s: &Settings, how: Fidelity) -> Result<Evaluation, String> {
    let arch = catalog::find_model(model)?.arch.clone();
    let g = catalog::find_gpu(gpu)?;
    evaluate_arch(&arch, &g.name, g.capacity_bytes(), s, how)
}

/// Evaluates any architecture against a capacity.
pub fn evaluate_arch(
    arch: &Architecture,
    gpu_name: &str,
    capacity_bytes: u128,
    s: &Settings,
    how: Fidelity,
) -> Result<Evaluation, String> {
    let p = how.plan(arch, s).map_err(|e| e.to_string())?;
    let (job, verdict) = match how {
        Fidelity::Simulated => {
            let j = plan_job_within(arch, s, &p, capacity_bytes).map_err(|e| e.to_string())?;
            let v = job_verdict(&j, capacity_bytes);
            (Some(j), v)
        }
        Fidelity::Quick => (None, formula_verdict(arch, s, &p, capacity_bytes)),
    };
    let whole_job = how == Fidelity::Simulated || !s.job.runs_on_gpu_after_training();
    Ok(Evaluation {
        max_batch: fit::max_batch(arch, s, capacity_bytes, BATCH_SEARCH_MAX, how),
        max_seq: fit::max_seq(arch, s, capacity_bytes, SEQ_SEARCH_MAX, how),
        verdict,
        plan: p,
        job,
        whole_job,
        gpu_name: gpu_name.to_string(),
    })
}

/// The verdict of the training step `p` and the phases written as formulas over it
/// ([`crate::model::job::formula_phases_gpu_peak`]): the whole job's unless a phase after
/// training runs on the GPU, which is a run of its own (milliseconds, over a slider move's
/// budget, and not in the planner page's first bundle).
pub fn formula_verdict(
    arch: &Architecture,
    s: &Settings,
    p: &Plan,
    capacity_bytes: u128,
) -> Verdict {
    let (need, phase) = crate::model::job::formula_phases_gpu_peak(arch, s, p);
    let (need, phase) = crate::model::job::need_with_vllm(s, p, need, phase, capacity_bytes);
    crate::planning::verdict::verdict_of(need, capacity_bytes, phase)
}

/// One point of the memory-vs-length (or vs-batch) curve.
#[derive(Clone, Debug, PartialEq)]
pub struct CurvePoint {
    /// Sequence length or micro-batch at this point.
    pub x: u64,
    /// Breakdown at the peak.
    pub components: Vec<crate::model::plan::ComponentBytes>,
    /// Peak allocated bytes.
    pub allocated_bytes: u128,
    /// nvidia-smi estimate.
    pub smi_bytes: u128,
}

/// Which quantity the curve chart sweeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Axis {
    /// Peak vs sequence length.
    Seq,
    /// Peak vs micro-batch.
    Batch,
}

/// Sweeps powers of two of the sequence length (128 … 131072) or the micro-batch (1 … 512).
pub fn curve(arch: &Architecture, s: &Settings, axis: Axis) -> Vec<CurvePoint> {
    let xs: Vec<u64> = match axis {
        Axis::Seq => (7..=17).map(|p| 1u64 << p).collect(),
        Axis::Batch => (0..=9).map(|p| 1u64 << p).collect(),
    };
    xs.into_iter()
        .filter_map(|x| {
            let s2 = match axis {
                Axis::Seq => Settings {
                    seq: x,
                    ..s.clone()
                },
                Axis::Batch => Settings {
                    batch: x,
                    ..s.clone()
                },
            };
            plan(arch, &s2).ok().map(|p| CurvePoint {
                x,
                allocated_bytes: p.peak_allocated_bytes,
                smi_bytes: p.nvidia_smi_bytes,
                components: p.breakdown,
            })
        })
        .collect()
}

/// The catalog GPU with the least memory on which the plan is not out of memory.
pub fn smallest_gpu(arch: &Architecture, s: &Settings) -> Option<&'static catalog::GpuEntry> {
    let p = plan(arch, s).ok()?;
    let mut gpus: Vec<&catalog::GpuEntry> = catalog::gpus()
        .iter()
        .filter(|g| !g.unified_memory)
        .collect();
    crate::model::order::sort_by_key(&mut gpus, |g| g.capacity_bytes());
    gpus.into_iter()
        .find(|g| p.nvidia_smi_bytes <= g.capacity_bytes())
}
