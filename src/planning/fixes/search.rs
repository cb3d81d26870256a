//! The cheapest combination of changes that makes a plan fit: every combination taking at most
//! one change of each kind, planned in cost order.

use super::{changes, fits_in, judge, replan, truncation, Change, ChangeKind, Fix, FixId};
use crate::formats::catalog::GpuEntry;
use crate::model::{Architecture, Settings};
use crate::planning::fit::{self, Fidelity};
use crate::planning::Status;

/// Every combination of `changes` taking at most one change of each kind (the empty one
/// excluded), cheapest first: by total weight, then fewer changes, then the order of `changes`.
pub fn combinations(changes: &[Change]) -> Vec<Vec<usize>> {
    let mut kinds: Vec<ChangeKind> = vec![];
    for c in changes {
        if !kinds.contains(&c.kind()) {
            kinds.push(c.kind());
        }
    }
    let mut combos: Vec<Vec<usize>> = vec![vec![]];
    for kind in kinds {
        let of_kind: Vec<usize> = (0..changes.len())
            .filter(|&i| changes[i].kind() == kind)
            .collect();
        let mut next = Vec::with_capacity(combos.len() * (of_kind.len() + 1));
        for c in &combos {
            next.push(c.clone());
            for &i in &of_kind {
                let mut d = c.clone();
                d.push(i);
                next.push(d);
            }
        }
        combos = next;
    }
    combos.retain(|c| !c.is_empty());
    // Sort keys (weight, changes, position): the position keeps the order deterministic.
    let mut keys: Vec<(u32, usize, usize)> = combos
        .iter()
        .enumerate()
        .map(|(n, c)| (c.iter().map(|&i| changes[i].weight).sum(), c.len(), n))
        .collect();
    crate::model::order::sort(&mut keys);
    keys.into_iter()
        .map(|k| std::mem::take(&mut combos[k.2]))
        .collect()
}

/// The cheapest combination of [`changes`] that makes the plan fit at its sequence length and
/// effective batch: the combinations are planned in cost order ([`combinations`]: weight, then
/// fewer changes) and the first that fits is returned, so none cheaper fits. An out-of-memory
/// plan that no combination makes fit gets the cheapest that makes it tight; failing that, the
/// last resort: the combination with the lowest nvidia-smi estimate plus the longest sequence
/// that then fits (`last_resort`). None when the plan already fits, or nothing can make it.
pub fn best_combination(
    arch: &Architecture,
    s: &Settings,
    capacity: u128,
    bf16_ok: bool,
) -> Option<Fix> {
    best_combination_with(arch, s, capacity, bf16_ok, None, Fidelity::Quick)
}

/// [`best_combination`] with each combination judged at fidelity `how`. Simulated, only the
/// combinations that could fit are simulated (see [`QUICK_ABOVE_SIMULATED_MAX`]), in cost order,
/// so the answer is still the cheapest that fits; the last resort picks its combination with
/// the quick figures and confirms its sequence length with the simulation.
pub fn best_combination_with(
    arch: &Architecture,
    s: &Settings,
    capacity: u128,
    bf16_ok: bool,
    gpu: Option<&GpuEntry>,
    how: Fidelity,
) -> Option<Fix> {
    let base = judge(arch, s, capacity, how)?;
    let status = base.verdict(capacity).status;
    if status == Status::Fits {
        return None;
    }
    let all = changes(arch, s, bf16_ok);
    let combos = combinations(&all);
    let with = |combo: &[usize]| {
        let mut t = s.clone();
        for &i in combo {
            all[i].patch.apply(&mut t);
        }
        t
    };
    let mut tight: Option<&Vec<usize>> = None;
    let mut found = None;
    for combo in &combos {
        let Some(p) = judge(arch, &with(combo), capacity, how) else {
            continue;
        };
        match p.verdict(capacity).status {
            Status::Fits => {
                found = Some(combo);
                break;
            }
            Status::Tight if tight.is_none() => tight = Some(combo),
            _ => {}
        }
    }
    let as_fix = |combo: &[usize], t: Settings| -> Option<Fix> {
        let pick: Vec<&Change> = combo.iter().map(|&i| &all[i]).collect();
        let join = |f: &dyn Fn(&Change) -> String, sep: &str| {
            pick.iter().map(|c| f(c)).collect::<Vec<_>>().join(sep)
        };
        let mut f = replan(
            arch,
            s,
            &base,
            gpu,
            capacity,
            if pick.len() == 1 {
                pick[0].id
            } else {
                FixId::Combined
            },
            join(&|c| c.title.clone(), " + "),
            join(&|c| c.short.clone(), " + "),
            join(&|c| c.cost.clone(), "; "),
            pick.iter().map(|c| c.id).collect(),
            pick.iter().map(|c| c.weight).sum(),
            t,
            how,
        )?;
        if pick.len() > 1 {
            f.title = format!("together: {}", f.title);
        }
        Some(f)
    };
    if let Some(combo) = found.or(tight.filter(|_| status == Status::Oom)) {
        return as_fix(combo, with(combo));
    }
    // Last resort: the combination (cheapest first) under which the longest sequence fits. A
    // combination is bisected only if it beats the best length so far by one token.
    let mut best: Option<(u64, &Vec<usize>)> = None;
    for combo in &combos {
        let t = with(combo);
        let beat = best.map(|(n, _)| n + 1).unwrap_or(1);
        if beat >= s.seq
            || !fits_in(
                arch,
                &Settings {
                    seq: beat,
                    ..t.clone()
                },
                capacity,
                Fidelity::Quick,
            )
        {
            continue;
        }
        if let Some(n) = fit::max_seq(arch, &t, capacity, s.seq - 1, fit::Fidelity::Quick) {
            best = Some((n, combo));
        }
    }
    let chosen = best.and_then(|(_, combo)| as_fix(combo, with(combo)));
    truncation(arch, s, &base, gpu, capacity, chosen.as_ref(), how)
}
