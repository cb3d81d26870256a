//! Fit solver: the largest micro-batch and the longest sequence that fit a capacity, found by
//! bisection over the (monotone) plan.

use crate::model::{plan, plan_simulated, Architecture, Plan, PlanError, Settings};

/// How the reserved and nvidia-smi figures are computed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fidelity {
    /// The quick reserve allowance (microseconds per plan): slider drags, property tests.
    Quick,
    /// PyTorch's caching allocator simulated over the step (milliseconds per plan).
    Simulated,
}

impl Fidelity {
    /// Plans at this fidelity.
    pub fn plan(self, arch: &Architecture, s: &Settings) -> Result<Plan, PlanError> {
        match self {
            Fidelity::Quick => plan(arch, s),
            Fidelity::Simulated => plan_simulated(arch, s),
        }
    }
}

/// Whether a configuration's nvidia-smi figure fits in `capacity_bytes`.
fn fits(arch: &Architecture, s: &Settings, capacity_bytes: u128, how: Fidelity) -> bool {
    how.plan(arch, s)
        .map(|p| p.nvidia_smi_bytes <= capacity_bytes)
        .unwrap_or(false)
}

/// Largest value in `[1, hi]` for which `ok` holds, assuming `ok` is monotone (true then false).
fn largest(hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(1) {
        return None;
    }
    let (mut lo, mut hi) = (1u64, hi);
    if ok(hi) {
        return Some(hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// Largest value of one setting (up to `max`) that fits, the others as they are.
fn largest_fitting(
    arch: &Architecture,
    s: &Settings,
    capacity_bytes: u128,
    max: u64,
    how: Fidelity,
    set: fn(&mut Settings, u64),
) -> Option<u64> {
    largest(max, |v| {
        let mut t = s.clone();
        set(&mut t, v);
        fits(arch, &t, capacity_bytes, how)
    })
}

/// Largest micro-batch (up to `max`) that fits at the current sequence length.
pub fn max_batch(
    arch: &Architecture,
    s: &Settings,
    capacity_bytes: u128,
    max: u64,
    how: Fidelity,
) -> Option<u64> {
    largest_fitting(arch, s, capacity_bytes, max, how, |t, v| t.batch = v)
}

/// Longest sequence (up to `max`) that fits at the current micro-batch.
pub fn max_seq(
    arch: &Architecture,
    s: &Settings,
    capacity_bytes: u128,
    max: u64,
    how: Fidelity,
) -> Option<u64> {
    largest_fitting(arch, s, capacity_bytes, max, how, |t, v| t.seq = v)
}
