//! Fits / tight / out of memory against a GPU's capacity.

use serde::Serialize;

use crate::model::Plan;

/// The answer to "will it fit".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// nvidia-smi estimate ≤ 90 % of capacity.
    Fits,
    /// Between 90 % and 100 %: allocator fragmentation or a longer batch can tip it over.
    Tight,
    /// Over capacity.
    Oom,
}

impl Status {
    /// `fits`, `tight`, `oom`.
    pub fn name(self) -> &'static str {
        match self {
            Status::Fits => "fits",
            Status::Tight => "tight",
            Status::Oom => "oom",
        }
    }
}

/// Verdict and headroom.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// fits / tight / oom.
    pub status: Status,
    /// Usable capacity in bytes.
    pub capacity_bytes: u128,
    /// capacity − nvidia-smi estimate (negative when out of memory).
    pub headroom_bytes: i128,
    /// The phase of the job whose peak decides (`train`, `eval`, `save`, `merge`).
    pub phase: &'static str,
}

/// Share of capacity under which a plan counts as fitting with margin.
pub const TIGHT_FRACTION: f64 = 0.90;

/// Compares the plan's nvidia-smi estimate with the capacity.
pub fn verdict(plan: &Plan, capacity_bytes: u128) -> Verdict {
    verdict_of(plan.nvidia_smi_bytes, capacity_bytes, "train")
}

/// The whole job's verdict: its largest phase's GPU peak against the capacity, that phase named.
pub fn job_verdict(job: &crate::model::job::Job, capacity_bytes: u128) -> Verdict {
    let p = job.deciding();
    verdict_of(p.gpu_peak_bytes, capacity_bytes, p.name)
}

/// The verdict of a need of `need` bytes (an nvidia-smi figure) in `phase` against the capacity.
pub(crate) fn verdict_of(need: u128, capacity_bytes: u128, phase: &'static str) -> Verdict {
    let status = if need as f64 <= capacity_bytes as f64 * TIGHT_FRACTION {
        Status::Fits
    } else if need <= capacity_bytes {
        Status::Tight
    } else {
        Status::Oom
    };
    let headroom = i128::try_from(capacity_bytes).unwrap_or(i128::MAX)
        - i128::try_from(need).unwrap_or(i128::MAX);
    Verdict {
        status,
        capacity_bytes,
        headroom_bytes: headroom,
        phase,
    }
}
