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

/// [`largest`] started from a guess (the previous answer while a slider moves): two checks when
/// the answer did not change, otherwise a doubling search from the guess, then bisection. Same
/// result as [`largest`] for a monotone `ok`.
fn largest_near(hi: u64, guess: Option<u64>, ok: impl Fn(u64) -> bool) -> Option<u64> {
    let Some(g) = guess.filter(|g| (1..=hi).contains(g)) else {
        return largest(hi, ok);
    };
    // Bracket the answer in [lo, up) with ok(lo) and !ok(up) (up = hi + 1 when hi fits).
    let (mut lo, mut up);
    if ok(g) {
        lo = g;
        let mut step = 1;
        loop {
            let next = lo.saturating_add(step).min(hi);
            if next == lo {
                return Some(lo);
            }
            if !ok(next) {
                up = next;
                break;
            }
            lo = next;
            step = step.saturating_mul(2);
        }
    } else {
        up = g;
        let mut step = 1;
        loop {
            if up == 1 {
                return None;
            }
            let next = up.saturating_sub(step).max(1);
            if ok(next) {
                lo = next;
                break;
            }
            up = next;
            step = step.saturating_mul(2);
        }
    }
    while up - lo > 1 {
        let mid = lo + (up - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            up = mid;
        }
    }
    Some(lo)
}

/// [`max_batch`] or [`max_seq`] started from a guess (the previous answer): the page calls it on
/// every slider move, where the answer rarely changes.
pub fn max_near(
    arch: &Architecture,
    s: &Settings,
    capacity_bytes: u128,
    batch: bool,
    max: u64,
    guess: Option<u64>,
) -> Option<u64> {
    largest_near(max, guess, |v| {
        let mut t = s.clone();
        if batch {
            t.batch = v;
        } else {
            t.seq = v;
        }
        fits(arch, &t, capacity_bytes)
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guess_never_changes_the_answer() {
        for limit in [0u64, 1, 2, 3, 7, 100, 511, 512] {
            let ok = |v: u64| v <= limit;
            let want = largest(512, ok);
            for guess in [
                None,
                Some(0),
                Some(1),
                Some(2),
                Some(5),
                Some(99),
                Some(100),
                Some(101),
                Some(512),
                Some(600),
            ] {
                assert_eq!(
                    largest_near(512, guess, ok),
                    want,
                    "limit {limit}, guess {guess:?}"
                );
            }
        }
        let a = crate::formats::catalog::find_model("llama2-7b")
            .unwrap()
            .arch
            .clone();
        let s = Settings::default();
        let cap = 24u128 << 30;
        let b = max_batch(&a, &s, cap, 512);
        let q = max_seq(&a, &s, cap, 131_072);
        for g in [None, Some(1), Some(3), Some(50), Some(4096)] {
            assert_eq!(max_near(&a, &s, cap, true, 512, g), b);
            assert_eq!(max_near(&a, &s, cap, false, 131_072, g), q);
        }
    }
}
