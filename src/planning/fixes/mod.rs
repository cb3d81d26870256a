//! Planning advice: the cheapest *combination* of changes that makes a plan fit at the user's
//! sequence length and effective batch, the single changes ranked, truncation as the last
//! resort, and what the model says about the remedies forums repeat.
//!
//! - [`changes`]: the candidate changes (typed ids and kinds, the settings edit of each);
//! - this module: a change re-planned as a [`Fix`], the ranked single changes, the last resort;
//! - [`search`]: the cheapest combination that fits;
//! - [`myths`]: the forums' remedies measured on the plan;
//! - [`allocator`]: the expandable-segments setting, measured with the allocator simulated.

use serde::Serialize;

use crate::planning::fit::{self, Fidelity};
use crate::planning::{time, verdict, Status};

use crate::formats::catalog::GpuEntry;
use crate::model::{plan, Architecture, Settings};

pub mod allocator;
pub mod changes;
pub mod myths;
pub mod search;

pub use allocator::{allocator_fix, AllocatorFix};
pub use changes::{changes, micro_batches, Change, ChangeKind, FixId, Patch};
pub use myths::{myths, Myth};
pub use search::{best_combination, best_combination_with, combinations};

/// One suggested change (or combination of changes), re-planned.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fix {
    /// Stable id (`grad_ckpt`, `smaller_batch`, ..., `combined` for a combination).
    pub id: FixId,
    /// What to change, in the words of the training arguments.
    pub title: String,
    /// The same in a few words (`gradient checkpointing + QLoRA (nf4)`).
    pub summary: String,
    /// What it costs (speed, quality, effective batch), with a number where one exists.
    pub cost: String,
    /// Ids of the changes it is made of (one for a single change).
    pub changes: Vec<FixId>,
    /// Cost weight (the sum of its changes' [`Change::weight`]): what "cheapest" orders by.
    pub weight: u32,
    /// Compute time per trained token after / before ([`time::relative_time`]: FLOPs, memory
    /// traffic, launches and on several GPUs the gathers and gradient reductions; not modelled:
    /// smaller matmuls' lower efficiency, paging, offloading).
    pub time_factor: f64,
    /// The settings after the change.
    pub settings: Settings,
    /// New peak allocated bytes of the job's deciding phase (the training step's unless another
    /// phase needs more on the GPU).
    pub peak_allocated_bytes: u128,
    /// New nvidia-smi estimate (of the same phase).
    pub nvidia_smi_bytes: u128,
    /// Memory saved against the current plan (negative: costs memory).
    pub saved_bytes: i128,
    /// The job's phase the new figures are of (`train`, `eval`, `merge`, …).
    pub phase: &'static str,
    /// New verdict.
    pub status: Status,
    /// Truncates the sequence length: offered only when nothing else fits.
    pub last_resort: bool,
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn replan(
    arch: &Architecture,
    s: &Settings,
    base: &Judged,
    gpu: Option<&GpuEntry>,
    capacity: u128,
    id: FixId,
    title: String,
    summary: String,
    cost: String,
    changes: Vec<FixId>,
    weight: u32,
    t: Settings,
    how: Fidelity,
) -> Option<Fix> {
    let p = judge(arch, &t, capacity, how)?;
    let v = p.verdict(capacity);
    // vLLM's share of the card lies outside the trainer's allocations: what a change of it
    // saves is the job's need on the GPU.
    let outside = changes
        .iter()
        .any(|c| matches!(c, FixId::VllmShare | FixId::VllmSleep | FixId::VllmServer));
    Some(Fix {
        id,
        title,
        summary,
        cost,
        changes,
        weight,
        time_factor: time::relative_time(arch, s, &base.work, &t, &p.work, gpu),
        peak_allocated_bytes: p.peak_bytes,
        nvidia_smi_bytes: p.need_bytes,
        saved_bytes: if outside {
            base.need_bytes as i128 - p.need_bytes as i128
        } else {
            base.peak_bytes as i128 - p.peak_bytes as i128
        },
        phase: p.phase,
        status: v.status,
        settings: t,
        last_resort: false,
    })
}

fn single(
    arch: &Architecture,
    s: &Settings,
    base: &Judged,
    gpu: Option<&GpuEntry>,
    cap: u128,
    c: &Change,
    how: Fidelity,
) -> Option<Fix> {
    replan(
        arch,
        s,
        base,
        gpu,
        cap,
        c.id,
        c.title.clone(),
        c.short.clone(),
        c.cost.clone(),
        vec![c.id],
        c.weight,
        c.applied(s),
        how,
    )
}

fn status_rank(s: Status) -> u8 {
    match s {
        Status::Fits => 0,
        Status::Tight => 1,
        Status::Oom => 2,
    }
}

pub(crate) fn fits_in(arch: &Architecture, s: &Settings, capacity: u128, how: Fidelity) -> bool {
    judge(arch, s, capacity, how).is_some_and(|p| p.need_bytes <= capacity)
}

/// How far the quick reserve allowance may lie above the simulated allocator. Over every
/// catalog model × batch, sequence, 4-bit and checkpointing (688 plans) it is at most 4.4 %
/// above (`tests/it/planning.rs` checks a sample); it is usually below.
pub const QUICK_ABOVE_SIMULATED_MAX: f64 = 0.05;

/// A candidate as the advice judges it: the figures of its job's largest phase on the GPU, so a
/// change that fits the training step but not the evaluation (or a merge on the GPU) is not
/// called fitting.
pub(crate) struct Judged {
    /// The deciding phase's nvidia-smi figure.
    pub need_bytes: u128,
    /// The deciding phase's peak allocated bytes.
    pub peak_bytes: u128,
    /// The deciding phase.
    pub phase: &'static str,
    /// What the training step's ops do (for its time).
    pub work: crate::model::steptrace::StepWork,
}

impl Judged {
    /// Fits / tight / out of memory against `capacity`.
    pub fn verdict(&self, capacity: u128) -> verdict::Verdict {
        verdict::verdict_of(self.need_bytes, capacity, self.phase)
    }
}

/// Plans `t` at fidelity `how`. A simulated judgement simulates only what could fit: a quick
/// nvidia-smi figure over the capacity by more than [`QUICK_ABOVE_SIMULATED_MAX`] is out of
/// memory under the simulation too, and keeps its quick plan (a wrong guess there can only
/// hide a candidate, never call one fitting). The whole job is planned ([`Judged`]: a phase
/// after training that runs on the GPU replayed on the GPU's capacity) unless the training step
/// is already out of memory that way.
pub(crate) fn judge(
    arch: &Architecture,
    t: &Settings,
    capacity: u128,
    how: Fidelity,
) -> Option<Judged> {
    let quick = plan(arch, t).ok()?;
    let hopeless =
        quick.nvidia_smi_bytes as f64 > capacity as f64 * (1.0 + QUICK_ABOVE_SIMULATED_MAX);
    let p = if how == Fidelity::Quick || hopeless {
        quick
    } else {
        Fidelity::Simulated.plan(arch, t).ok()?
    };
    if hopeless {
        return Some(Judged {
            need_bytes: p.nvidia_smi_bytes,
            peak_bytes: p.peak_allocated_bytes,
            phase: "train",
            work: p.work,
        });
    }
    judged_of(arch, t, &p, capacity)
}

/// `t`, whose training step is planned as `p`, judged by its whole job on a GPU of `capacity`.
pub(crate) fn judged_of(
    arch: &Architecture,
    t: &Settings,
    p: &crate::model::Plan,
    capacity: u128,
) -> Option<Judged> {
    let job = crate::model::job::plan_job_within(arch, t, p, capacity).ok()?;
    let d = job.deciding();
    Some(Judged {
        need_bytes: d.gpu_peak_bytes,
        peak_bytes: d.allocated_bytes,
        phase: d.name,
        work: p.work.clone(),
    })
}

/// The last resort: `max_length` cut to the longest that fits with `with` (the current settings
/// or a combination), said so in its title.
#[allow(clippy::too_many_arguments)]
pub(crate) fn truncation(
    arch: &Architecture,
    s: &Settings,
    base: &Judged,
    gpu: Option<&GpuEntry>,
    capacity: u128,
    with: Option<&Fix>,
    how: Fidelity,
) -> Option<Fix> {
    let from = with.map(|f| &f.settings).unwrap_or(s);
    let max = s.seq.saturating_sub(1);
    let quick = fit::max_seq(arch, from, capacity, max, Fidelity::Quick);
    // Simulated: confirmed from the quick answer (a few simulated plans, not a bisection).
    let m = match how {
        Fidelity::Quick => quick,
        Fidelity::Simulated => fit::max_near(arch, from, capacity, false, max, quick, how),
    }?;
    let mut t = Settings {
        seq: m,
        ..from.clone()
    };
    let grpo = s.grpo();
    if grpo && s.max_completion_length > 0 {
        t.max_completion_length = m.saturating_sub(from.prompt_tokens());
    }
    let cut = if grpo {
        format!(
            "max_completion_length {} → {} (generation stops there)",
            s.completion_tokens(),
            t.completion_tokens()
        )
    } else {
        format!("max_length {} → {m} (truncate longer samples)", s.seq)
    };
    let (title, summary, mut changes, weight) = match with {
        Some(f) => (
            format!("{} + {cut}", f.title),
            format!("{} + sequence length {m}", f.summary),
            f.changes.clone(),
            f.weight,
        ),
        None => (cut, format!("sequence length {m}"), vec![], 0),
    };
    changes.push(FixId::ShorterSeq);
    let rest = with.map(|f| format!("; {}", f.cost)).unwrap_or_default();
    let cost = if grpo {
        format!(
            "last resort: completions stop at {} tokens, so answers that need more are cut and rewarded as such{rest}",
            t.completion_tokens()
        )
    } else {
        format!("last resort: samples longer than {m} tokens are cut, so the model never trains on their end{rest}")
    };
    let mut f = replan(
        arch,
        s,
        base,
        gpu,
        capacity,
        FixId::ShorterSeq,
        title,
        summary,
        cost,
        changes,
        weight,
        t,
        how,
    )?;
    f.last_resort = true;
    Some(f)
}

/// Ranked single changes (those that save memory), best first: fitting before tight before
/// out-of-memory, then cheapest (by weight), then most saved. When none fits, the cheapest
/// combination follows ([`best_combination`], id `combined`). Truncating the sequence comes last,
/// always, marked as the last resort.
pub fn suggest(arch: &Architecture, s: &Settings, capacity: u128, bf16_ok: bool) -> Vec<Fix> {
    suggest_with(arch, s, capacity, bf16_ok, None, Fidelity::Quick)
}

/// [`suggest`] with each change judged at fidelity `how` ([`Fidelity::Simulated`]: verdicts
/// from PyTorch's caching allocator simulated, for the changes that could fit), and its speed
/// cost timed on `gpu` (`None`: on the reference card of [`time::relative_time`]).
pub fn suggest_with(
    arch: &Architecture,
    s: &Settings,
    capacity: u128,
    bf16_ok: bool,
    gpu: Option<&GpuEntry>,
    how: Fidelity,
) -> Vec<Fix> {
    let Some(base) = judge(arch, s, capacity, Fidelity::Quick) else {
        return vec![];
    };
    let all = changes(arch, s, bf16_ok);
    let mut fixes: Vec<Fix> = vec![];
    // One single of each batch kind (the training micro-batch, the eval batch): the largest
    // that fits, else the smallest.
    let sized = [
        ChangeKind::MicroBatch,
        ChangeKind::EvalBatch,
        ChangeKind::VllmShare,
    ];
    let batches = sized.map(|kind| {
        // (the smaller share of vLLM's: the largest that fits, like a batch)
        let of_kind: Vec<&Change> = all.iter().filter(|c| c.kind() == kind).collect();
        of_kind
            .iter()
            .find(|c| fits_in(arch, &c.applied(s), capacity, how))
            .or(of_kind.last())
            .copied()
    });
    for c in all
        .iter()
        .filter(|c| !sized.contains(&c.kind()))
        .chain(batches.into_iter().flatten())
    {
        if let Some(f) = single(arch, s, &base, gpu, capacity, c, how) {
            fixes.push(f);
        }
    }
    fixes.retain(|f| f.saved_bytes > 0);
    crate::model::order::sort_by_key(&mut fixes, |f| {
        (status_rank(f.status), f.weight, -f.saved_bytes)
    });
    if !fixes.iter().any(|f| f.status != Status::Oom) {
        if let Some(c) =
            best_combination_with(arch, s, capacity, bf16_ok, gpu, how).filter(|c| !c.last_resort)
        {
            fixes.push(c);
        }
    }
    if let Some(t) =
        truncation(arch, s, &base, gpu, capacity, None, how).filter(|t| t.saved_bytes > 0)
    {
        fixes.push(t);
    }
    fixes
}
