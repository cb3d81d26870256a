//! What the web page shows for one state, computed in one pure function so it is tested natively
//! and the page only draws it: the plan, the verdict on the chosen GPU, and the fit limits.

use crate::catalog;
use crate::model::{fit, plan, verdict, Architecture, Plan, Settings, Verdict};

/// Everything derived from (model, GPU, settings).
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluation {
    /// The memory plan.
    pub plan: Plan,
    /// Verdict on the selected GPU.
    pub verdict: Verdict,
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
pub fn evaluate(model: &str, gpu: &str, s: &Settings) -> Result<Evaluation, String> {
    let arch = catalog::find_model(model)?.arch.clone();
    let g = catalog::find_gpu(gpu)?;
    evaluate_arch(&arch, &g.name, g.capacity_bytes(), s)
}

/// Evaluates any architecture against a capacity.
pub fn evaluate_arch(
    arch: &Architecture,
    gpu_name: &str,
    capacity_bytes: u128,
    s: &Settings,
) -> Result<Evaluation, String> {
    let p = plan(arch, s).map_err(|e| e.to_string())?;
    let v = verdict(&p, capacity_bytes);
    Ok(Evaluation {
        max_batch: fit::max_batch(arch, s, capacity_bytes, BATCH_SEARCH_MAX),
        max_seq: fit::max_seq(arch, s, capacity_bytes, SEQ_SEARCH_MAX),
        plan: p,
        verdict: v,
        gpu_name: gpu_name.to_string(),
    })
}
