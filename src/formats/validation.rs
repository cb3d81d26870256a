//! The evidence: the model against every measured case the project carries
//! (`data/validation.json`, compacted from `tests/data/reference` by
//! `scripts/make_validation.py`), for `lorafit validate` and the page's "How accurate is this?"
//! view. Allocated against measured peaks of real steps; reserved against PyTorch's own
//! allocator replayed over them; nvidia-smi and out-of-memory calls against real-GPU runs
//! (published A100 runs, and runs on an H200 with `gpu_probe.py`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::catalog::resolve_model;
use super::fields::settings_from_json;
use crate::model::steptrace::Device;
use crate::model::{plan_simulated_on, Plan};

#[derive(Deserialize)]
struct Data {
    cases: Vec<Case>,
    published: Vec<Published>,
}

#[derive(Deserialize)]
struct Case {
    id: String,
    model: Value,
    settings: Value,
    peak_allocated_bytes: u64,
    peak_phase: String,
    #[serde(default)]
    replayed_max_reserved_bytes: Option<u64>,
}

#[derive(Deserialize)]
struct Published {
    id: String,
    gpu_mem_gib: f64,
    model: Value,
    settings: Value,
    max_allocated_bytes: Option<u64>,
    nvidia_smi_bytes: u64,
    oom: bool,
    software: String,
    /// The software versions, for a run whose settings are in the published schema: it is read
    /// as `estimate --jsonl` reads such a line ([`super::jsonl::read_line`]).
    #[serde(default)]
    versions: Option<Value>,
}

/// One measured case against the plan.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CaseRow {
    /// Case id.
    pub id: String,
    /// Measured peak allocated (live tensor bytes).
    pub measured_allocated_bytes: u64,
    /// Planned peak allocated.
    pub planned_allocated_bytes: u64,
    /// Signed error of allocated, %.
    pub allocated_error_pct: f64,
    /// Measured and planned phase of the peak agree.
    pub phase_agrees: bool,
    /// PyTorch's allocator replayed over the measured step: max_memory_reserved.
    pub replayed_reserved_bytes: Option<u64>,
    /// Planned peak reserved.
    pub planned_reserved_bytes: u64,
    /// Signed error of reserved, % (when a replay exists).
    pub reserved_error_pct: Option<f64>,
}

/// One published real-GPU run against the plan.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PublishedRow {
    /// Run id.
    pub id: String,
    /// The software it ran.
    pub software: String,
    /// Measured max_memory_allocated (None when the run ran out of memory).
    pub measured_allocated_bytes: Option<u64>,
    /// Measured nvidia-smi.
    pub measured_smi_bytes: u64,
    /// The run ran out of memory.
    pub measured_oom: bool,
    /// Planned figures, or why the plan could not be made.
    pub planned: Result<PublishedPlan, String>,
}

/// The plan's side of a published run.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PublishedPlan {
    /// Planned peak allocated.
    pub allocated_bytes: u64,
    /// Planned nvidia-smi.
    pub smi_bytes: u64,
    /// Signed error of nvidia-smi, % (meaningful for runs that finished).
    pub smi_error_pct: f64,
    /// The plan says the run does not fit the card.
    pub oom: bool,
}

/// Summary of signed errors.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ErrorStats {
    /// Rows compared.
    pub n: usize,
    /// Median |error|, %.
    pub median_abs_pct: f64,
    /// Largest |error|, %.
    pub max_abs_pct: f64,
    /// Most negative error (under-prediction), %.
    pub worst_under_pct: f64,
    /// Most positive error, %.
    pub worst_over_pct: f64,
}

impl ErrorStats {
    /// Statistics of signed percentage errors.
    pub fn of(errors: &[f64]) -> ErrorStats {
        if errors.is_empty() {
            return ErrorStats::default();
        }
        let mut abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
        abs.sort_by(f64::total_cmp);
        let mid = abs.len() / 2;
        let median = if abs.len() % 2 == 1 {
            abs[mid]
        } else {
            (abs[mid - 1] + abs[mid]) / 2.0
        };
        ErrorStats {
            n: errors.len(),
            median_abs_pct: median,
            max_abs_pct: abs[abs.len() - 1],
            worst_under_pct: errors.iter().copied().fold(0.0, f64::min),
            worst_over_pct: errors.iter().copied().fold(0.0, f64::max),
        }
    }
}

/// The whole comparison.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Validation {
    /// Measured training steps.
    pub cases: Vec<CaseRow>,
    /// Allocated errors.
    pub allocated: ErrorStats,
    /// Reserved errors (cases with an allocator replay).
    pub reserved: ErrorStats,
    /// Published real-GPU runs.
    pub published: Vec<PublishedRow>,
    /// nvidia-smi errors over published runs that finished and could be planned.
    pub smi: ErrorStats,
    /// Published out-of-memory runs the plan also calls out of memory / all OOM runs planned.
    pub oom_called: (usize, usize),
}

fn pct(planned: u64, measured: u64) -> f64 {
    (planned as f64 - measured as f64) / measured as f64 * 100.0
}

/// The measured cases ran on the harness's emulated device (their reserved figures are its
/// allocator replays); the published and H200 runs on real GPUs.
fn plan_of(model: &Value, settings: &Value, device: Device) -> Result<Plan, String> {
    let arch = resolve_model(model)?.value;
    let s = settings_from_json(settings)
        .map_err(|e| e.to_string())?
        .value;
    plan_simulated_on(&arch, &s, device).map_err(|e| e.to_string())
}

fn data(json: &str) -> Result<Data, String> {
    serde_json::from_str(json).map_err(|e| format!("validation.json: {e}"))
}

/// Runs the model over every committed measurement (`data/validation.json`, compiled in; the
/// page fetches the file instead and calls [`validate_json`], so the planner's wasm does not
/// carry it).
#[cfg(not(target_arch = "wasm32"))]
pub fn validate() -> Result<Validation, String> {
    validate_json(include_str!("../../data/validation.json"))
}

fn case_row(c: &Case) -> Result<CaseRow, String> {
    let p =
        plan_of(&c.model, &c.settings, Device::Emulated).map_err(|e| format!("{}: {e}", c.id))?;
    let allocated = u64::try_from(p.peak_allocated_bytes).unwrap_or(u64::MAX);
    let reserved = u64::try_from(p.peak_reserved_bytes).unwrap_or(u64::MAX);
    Ok(CaseRow {
        id: c.id.clone(),
        measured_allocated_bytes: c.peak_allocated_bytes,
        planned_allocated_bytes: allocated,
        allocated_error_pct: pct(allocated, c.peak_allocated_bytes),
        phase_agrees: p.peak_phase.name() == c.peak_phase,
        replayed_reserved_bytes: c.replayed_max_reserved_bytes,
        planned_reserved_bytes: reserved,
        reserved_error_pct: c.replayed_max_reserved_bytes.map(|r| pct(reserved, r)),
    })
}

fn published_row(r: &Published) -> PublishedRow {
    let capacity = (r.gpu_mem_gib * (1u64 << 30) as f64) as u64;
    let planned = match &r.versions {
        Some(versions) => {
            let line =
                serde_json::json!({"model": r.model, "settings": r.settings, "software": versions});
            super::jsonl::read_line(&line.to_string())
                .map_err(|(_, e)| e)
                .and_then(|(_, arch, s, _)| {
                    plan_simulated_on(&arch, &s, Device::Cuda).map_err(|e| e.to_string())
                })
        }
        None => plan_of(&r.model, &r.settings, Device::Cuda),
    };
    let planned = planned.map(|p| {
        let smi = u64::try_from(p.nvidia_smi_bytes).unwrap_or(u64::MAX);
        PublishedPlan {
            allocated_bytes: u64::try_from(p.peak_allocated_bytes).unwrap_or(u64::MAX),
            smi_bytes: smi,
            smi_error_pct: pct(smi, r.nvidia_smi_bytes),
            oom: smi > capacity,
        }
    });
    PublishedRow {
        id: r.id.clone(),
        software: r.software.clone(),
        measured_allocated_bytes: r.max_allocated_bytes,
        measured_smi_bytes: r.nvidia_smi_bytes,
        measured_oom: r.oom,
        planned,
    }
}

/// Runs the model over the measurements in `json` (the format of `data/validation.json`).
pub fn validate_json(json: &str) -> Result<Validation, String> {
    let d = data(json)?;
    let cases = d
        .cases
        .iter()
        .map(case_row)
        .collect::<Result<Vec<_>, _>>()?;
    let published: Vec<PublishedRow> = d.published.iter().map(published_row).collect();
    let allocated: Vec<f64> = cases.iter().map(|c| c.allocated_error_pct).collect();
    let reserved: Vec<f64> = cases.iter().filter_map(|c| c.reserved_error_pct).collect();
    let smi: Vec<f64> = published
        .iter()
        .filter(|r| !r.measured_oom)
        .filter_map(|r| r.planned.as_ref().ok().map(|p| p.smi_error_pct))
        .collect();
    let oom_runs: Vec<&PublishedRow> = published
        .iter()
        .filter(|r| r.measured_oom && r.planned.is_ok())
        .collect();
    let oom_called = oom_runs
        .iter()
        .filter(|r| r.planned.as_ref().is_ok_and(|p| p.oom))
        .count();
    Ok(Validation {
        allocated: ErrorStats::of(&allocated),
        reserved: ErrorStats::of(&reserved),
        smi: ErrorStats::of(&smi),
        oom_called: (oom_called, oom_runs.len()),
        cases,
        published,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_statistics_are_signed_and_ordered() {
        let s = ErrorStats::of(&[-3.0, 1.0, 2.0, -0.5]);
        assert_eq!(s.n, 4);
        assert_eq!(s.median_abs_pct, 1.5);
        assert_eq!(s.max_abs_pct, 3.0);
        assert_eq!(s.worst_under_pct, -3.0);
        assert_eq!(s.worst_over_pct, 2.0);
        assert_eq!(ErrorStats::of(&[]).n, 0);
    }
}
