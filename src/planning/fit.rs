//! Fit solver: the largest micro-batch and the longest sequence that fit a capacity, found by
//! bisection over the (monotone) plan.

use crate::model::{plan, Architecture, Settings};

/// Whether a configuration's nvidia-smi estimate fits in `capacity_bytes`.
fn fits(arch: &Architecture, s: &Settings, capacity_bytes: u128) -> bool {
    plan(arch, s)
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

/// Largest micro-batch (up to `max`) that fits at the current sequence length.
pub fn max_batch(arch: &Architecture, s: &Settings, capacity_bytes: u128, max: u64) -> Option<u64> {
    largest(max, |b| {
        fits(
            arch,
            &Settings {
                batch: b,
                ..s.clone()
            },
            capacity_bytes,
        )
    })
}

/// Longest sequence (up to `max`) that fits at the current micro-batch.
pub fn max_seq(arch: &Architecture, s: &Settings, capacity_bytes: u128, max: u64) -> Option<u64> {
    largest(max, |t| {
        fits(
            arch,
            &Settings {
                seq: t,
                ..s.clone()
            },
            capacity_bytes,
        )
    })
}
