//! `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, judged with the caching allocator
//! simulated before and after.

use serde::Serialize;

use crate::model::{Architecture, Settings};
use crate::planning::Status;

/// `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`, measured with PyTorch's caching allocator
/// simulated over the step before and after: it changes no tensor, only how the allocator
/// reserves (segments that grow in place instead of a new segment per request that fits no
/// cached block), so its saving is in reserved and nvidia-smi, not in allocated memory.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AllocatorFix {
    /// The setting to add.
    pub alloc_conf: String,
    /// Simulated peak reserved today.
    pub reserved_before_bytes: u128,
    /// Simulated peak reserved with it.
    pub reserved_after_bytes: u128,
    /// nvidia-smi with it, of the job's deciding phase.
    pub nvidia_smi_bytes: u128,
    /// The job's phase that nvidia-smi figure and the verdict are of.
    pub phase: &'static str,
    /// Reserved memory saved.
    pub saved_bytes: i128,
    /// Verdict with it.
    pub status: Status,
}

/// The expandable-segments fix, when it is not set already, the plan can be simulated and the
/// simulation says it reserves less.
pub fn allocator_fix(arch: &Architecture, s: &Settings, capacity: u128) -> Option<AllocatorFix> {
    // Read as PyTorch reads it (a setting it cannot read gets no fix: the plan says why).
    if s.allocator_conf().ok()?.expandable_segments {
        return None;
    }
    let before = crate::model::plan_simulated(arch, s).ok()?;
    // The other options as given, with expandable segments on in place of any value it had.
    let mut items: Vec<&str> = s
        .alloc_conf
        .split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty() && !i.starts_with("expandable_segments"))
        .collect();
    items.push("expandable_segments:True");
    let conf = items.join(",");
    let t = Settings {
        alloc_conf: conf.clone(),
        ..s.clone()
    };
    let after = crate::model::plan_simulated(arch, &t).ok()?;
    // Offered only where it saves: on a real H200 it reserved more than the default on three
    // runs of four (tests/data/reference/gpu_probe_h200.jsonl), as the simulation does.
    if !(before.reserve_simulated && after.reserve_simulated)
        || after.peak_reserved_bytes >= before.peak_reserved_bytes
    {
        return None;
    }
    // Judged as every change is: by its whole job, over the simulated step just planned.
    let judged = super::judged_of(arch, &t, &after, capacity)?;
    Some(AllocatorFix {
        alloc_conf: conf,
        reserved_before_bytes: before.peak_reserved_bytes,
        reserved_after_bytes: after.peak_reserved_bytes,
        nvidia_smi_bytes: judged.need_bytes,
        phase: judged.phase,
        saved_bytes: before.peak_reserved_bytes as i128 - after.peak_reserved_bytes as i128,
        status: judged.verdict(capacity).status,
    })
}
