//! Fit solver: the largest micro-batch and the longest sequence that fit a capacity, found by
//! bisection over the (monotone) plan.

use std::cell::RefCell;
use std::rc::Rc;

use crate::model::{plan, plan_simulated, Architecture, Plan, PlanError, QuickSurface, Settings};

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

/// Whether a configuration's nvidia-smi figure fits in `capacity_bytes`: at quick fidelity read
/// off the configuration's [`QuickSurface`] where it answers (the same figure as the quick plan,
/// in microseconds instead of a plan's fraction of a millisecond).
fn fits(arch: &Architecture, s: &Settings, capacity_bytes: u128, how: Fidelity) -> bool {
    if how == Fidelity::Quick {
        if let Some(smi) = surface(arch, s).and_then(|q| q.nvidia_smi(s.batch, s.seq)) {
            return smi.is_ok_and(|b| b <= capacity_bytes);
        }
    }
    how.plan(arch, s)
        .map(|p| p.nvidia_smi_bytes <= capacity_bytes)
        .unwrap_or(false)
}

/// Surfaces kept for the configurations searched last: a search plans one configuration at many
/// batch sizes and lengths, and the page searches the same one again at every slider move.
const SURFACES_KEPT: usize = 16;

/// A configuration searched (batch and sequence zeroed) and its surface (`None` where there is
/// none).
type Kept = (Architecture, Settings, Option<Rc<QuickSurface>>);

thread_local! {
    /// The configurations searched last, newest last.
    static SURFACES: RefCell<Vec<Kept>> = const { RefCell::new(Vec::new()) };
}

/// The [`QuickSurface`] of `s`'s configuration, built once and kept.
fn surface(arch: &Architecture, s: &Settings) -> Option<Rc<QuickSurface>> {
    let key = Settings {
        batch: 0,
        seq: 0,
        ..s.clone()
    };
    SURFACES.with(|cell| {
        let mut kept = cell.borrow_mut();
        if let Some(i) = kept.iter().position(|(a, k, _)| a == arch && *k == key) {
            let hit = kept.remove(i);
            let q = hit.2.clone();
            kept.push(hit);
            return q;
        }
        let q = QuickSurface::build(arch, s).map(Rc::new);
        if kept.len() >= SURFACES_KEPT {
            kept.remove(0);
        }
        kept.push((arch.clone(), key, q.clone()));
        q
    })
}

/// Largest value in `[1, hi]` for which `ok` holds, assuming `ok` is monotone (true then false).
fn largest(hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(1) {
        return None;
    }
    if ok(hi) {
        return Some(hi);
    }
    Some(bisect(1, hi, &ok))
}

/// The last `v` in `[lo, up)` with `ok(v)`, given `ok(lo)` and `!ok(up)` (bisection).
fn bisect(mut lo: u64, mut up: u64, ok: &impl Fn(u64) -> bool) -> u64 {
    while up - lo > 1 {
        let mid = lo + (up - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            up = mid;
        }
    }
    lo
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
    Some(bisect(lo, up, &ok))
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
    how: Fidelity,
) -> Option<u64> {
    largest_near(max, guess, |v| {
        let mut t = s.clone();
        if batch {
            t.batch = v;
        } else {
            t.seq = v;
        }
        fits(arch, &t, capacity_bytes, how)
    })
}

/// Largest value of one setting (up to `max`) that fits, the others as they are.
fn largest_fitting(
    arch: &Architecture,
    s: &Settings,
    capacity_bytes: u128,
    max: u64,
    how: Fidelity,
    set: impl Fn(&mut Settings, u64),
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
    // A GRPO sequence is its prompt plus a completion: the completion is what gets shorter.
    let prompt = s.prompt_tokens();
    let completion_set = s.grpo() && s.max_completion_length > 0;
    largest_fitting(arch, s, capacity_bytes, max, how, move |t, v| {
        t.seq = v;
        if completion_set {
            t.max_completion_length = v.saturating_sub(prompt);
        }
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
        let q = Fidelity::Quick;
        let b = max_batch(&a, &s, cap, 512, q);
        let n = max_seq(&a, &s, cap, 131_072, q);
        for g in [None, Some(1), Some(3), Some(50), Some(4096)] {
            assert_eq!(max_near(&a, &s, cap, true, 512, g, q), b);
            assert_eq!(max_near(&a, &s, cap, false, 131_072, g, q), n);
        }
    }
}
