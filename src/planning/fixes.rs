//! Planning advice: the cheapest *combination* of changes that makes a plan fit at the user's
//! sequence length and effective batch (searched in cost order over every combination of the
//! candidate changes, each re-planned), the single changes ranked, truncation as the last resort,
//! and what the model says about the remedies forums repeat.

use serde::Serialize;

use crate::planning::fit::{self, Fidelity};
use crate::planning::{time, verdict, Status};

use crate::model::{
    plan, Architecture, AttnImpl, Dtype, ExpertsImpl, ExpertsLayout, Optimizer, Quant, Settings,
    Target,
};

/// One suggested change (or combination of changes), re-planned.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fix {
    /// Stable id (`grad_ckpt`, `smaller_batch`, ..., `combined` for a combination).
    pub id: &'static str,
    /// What to change, in the words of the training arguments.
    pub title: String,
    /// The same in a few words (`gradient checkpointing + QLoRA (nf4)`).
    pub summary: String,
    /// What it costs (speed, quality, effective batch), with a number where one exists.
    pub cost: String,
    /// Ids of the changes it is made of (one for a single change).
    pub changes: Vec<&'static str>,
    /// Cost weight (the sum of its changes' [`Change::weight`]): what "cheapest" orders by.
    pub weight: u32,
    /// Compute time per trained token after / before ([`time::relative_time`]: FLOPs and the 4-bit
    /// dequantisation; not modelled: smaller matmuls' lower efficiency, paging).
    pub time_factor: f64,
    /// The settings after the change.
    pub settings: Settings,
    /// New peak allocated bytes.
    pub peak_allocated_bytes: u128,
    /// New nvidia-smi estimate.
    pub nvidia_smi_bytes: u128,
    /// Memory saved against the current plan (negative: costs memory).
    pub saved_bytes: i128,
    /// New verdict.
    pub status: Status,
    /// Truncates the sequence length: offered only when nothing else fits.
    pub last_resort: bool,
}

/// What one change edits in the settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Patch {
    /// Eager attention → sdpa.
    Sdpa,
    /// fp32 base weights → this 16-bit dtype (autocast to it if none).
    Weights16(Dtype),
    /// LoRA dropout → 0.
    Dropout0,
    /// Another optimizer.
    Optimizer(Optimizer),
    /// Fused / chunked cross-entropy.
    FusedCe,
    /// Gradient checkpointing on.
    GradCkpt,
    /// This micro-batch (a divisor of the current one), accumulating more so the effective batch
    /// stays the same.
    MicroBatch(u64),
    /// QLoRA: nf4 with double quantisation, this autocast dtype.
    Qlora(Dtype),
    /// Adapt only q_proj and v_proj.
    QvOnly,
    /// MoE: transformers' default grouped_mm experts.
    GroupedMm,
    /// MoE: no router logits / load-balancing loss.
    NoRouterLogits,
    /// MoE: no LoRA on the fused experts (attention and Linear layers only).
    NoExpertLora,
}

impl Patch {
    /// Applies the change.
    pub fn apply(self, t: &mut Settings) {
        match self {
            Patch::Sdpa => t.attn_impl = AttnImpl::Sdpa,
            Patch::Weights16(d) => {
                t.dtype = d;
                if t.autocast.is_none() {
                    t.autocast = Some(d);
                }
            }
            Patch::Dropout0 => t.lora_dropout = 0.0,
            Patch::Optimizer(o) => t.optimizer = o,
            Patch::FusedCe => t.fused_ce = true,
            Patch::GradCkpt => t.grad_ckpt = true,
            Patch::MicroBatch(b) => {
                let b = b.clamp(1, t.batch);
                t.grad_accum = t.grad_accum.saturating_mul(t.batch / b);
                t.batch = b;
            }
            Patch::Qlora(d) => {
                t.quant = Some(Quant::Nf4);
                t.double_quant = true;
                t.dtype = d;
                t.autocast = Some(d);
            }
            Patch::QvOnly => t.targets = vec![Target::Q, Target::V],
            Patch::GroupedMm => t.experts_impl = ExpertsImpl::GroupedMm,
            Patch::NoRouterLogits => t.output_router_logits = false,
            Patch::NoExpertLora => {
                t.target_parameters.clear();
                if t.targets.is_empty() {
                    t.targets = vec![Target::Q, Target::K, Target::V, Target::O];
                }
            }
        }
    }
}

/// One candidate change. Changes of the same `kind` exclude each other (two optimizers, two
/// weight formats, two micro-batches); a combination takes at most one of each kind.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    /// Stable id.
    pub id: &'static str,
    /// What it changes (`attention`, `weights`, `dropout`, `optimizer`, `loss`, `checkpointing`,
    /// `micro_batch`, `targets`).
    pub kind: &'static str,
    /// In the words of the training arguments.
    pub title: String,
    /// In a few words.
    pub short: String,
    /// What it costs, in words.
    pub cost: String,
    /// Cost weight, roughly "per cent slower, or a quality risk judged comparable": sdpa 1,
    /// 16-bit weights 1, no dropout 2, 8-bit AdamW 2, fused cross-entropy 3, paged AdamW 4,
    /// micro-batch 4 per halving, fewer targets 25, checkpointing 30, QLoRA 40.
    pub weight: u32,
    /// The edit.
    pub patch: Patch,
}

impl Change {
    /// `s` with this change.
    pub fn applied(&self, s: &Settings) -> Settings {
        let mut t = s.clone();
        self.patch.apply(&mut t);
        t
    }
}

/// Micro-batches offered below `batch`: the largest divisor at or under batch/2, batch/4, …, 1,
/// so the effective batch (micro-batch × accumulation) stays exactly the same.
pub fn micro_batches(batch: u64) -> Vec<u64> {
    let mut out: Vec<u64> = vec![];
    let mut cap = batch / 2;
    while cap >= 1 {
        if let Some(d) = (1..=cap).rev().find(|d| batch % d == 0) {
            if !out.contains(&d) {
                out.push(d);
            }
        }
        cap /= 2;
    }
    out
}

fn halvings(from: u64, to: u64) -> u32 {
    let mut n = 0;
    let mut b = from;
    while b > to {
        b = b.div_ceil(2);
        n += 1;
    }
    n
}

/// Every change the search may use for `s` (each applicable to `s`, none touching the sequence
/// length), in cost order within each kind.
pub fn changes(s: &Settings, bf16_ok: bool) -> Vec<Change> {
    let mut out = vec![];
    let low = if bf16_ok { Dtype::Bf16 } else { Dtype::Fp16 };
    let mut push = |id, kind, title: String, short: &str, cost: &str, weight, patch| {
        out.push(Change {
            id,
            kind,
            title,
            short: short.into(),
            cost: cost.into(),
            weight,
            patch,
        })
    };
    if s.experts_layout == ExpertsLayout::Fused && s.experts_impl != ExpertsImpl::GroupedMm {
        push(
            "grouped_mm",
            "experts",
            format!(
                "experts_implementation: {} → grouped_mm (transformers' default)",
                s.experts_impl.name()
            ),
            "grouped_mm experts",
            "none: one grouped matmul per projection over the tokens sorted by expert",
            1,
            Patch::GroupedMm,
        );
    }
    if s.output_router_logits {
        push(
            "no_router_logits",
            "router",
            "output_router_logits=False".into(),
            "no router logits",
            "no load-balancing loss: the routing may drift towards fewer experts",
            10,
            Patch::NoRouterLogits,
        );
    }
    if !s.target_parameters.is_empty() {
        push(
            "no_expert_lora",
            "expert_lora",
            "target_parameters: none (LoRA on attention and the Linear layers only)".into(),
            "no expert LoRA",
            "the experts are not adapted; each layer no longer keeps a W + B·A copy of its experts",
            30,
            Patch::NoExpertLora,
        );
    }
    if s.attn_impl == AttnImpl::Eager {
        push(
            "sdpa",
            "attention",
            "attn_implementation: eager → sdpa".into(),
            "sdpa attention",
            "none: same math, O(S) memory instead of O(S²), usually faster",
            1,
            Patch::Sdpa,
        );
    }
    if s.dtype == Dtype::Fp32 && s.quant.is_none() {
        push(
            "bf16_weights",
            "weights",
            format!(
                "load the base model in {} (torch_dtype={}) instead of fp32",
                low.name(),
                if bf16_ok {
                    "torch.bfloat16"
                } else {
                    "torch.float16"
                }
            ),
            if bf16_ok { "bf16 weights" } else { "fp16 weights" },
            "none for frozen weights under autocast: the copies autocast made were already low precision",
            1,
            Patch::Weights16(low),
        );
    }
    if s.lora_dropout > 0.0 && !s.targets.is_empty() {
        push(
            "dropout0",
            "dropout",
            format!("lora_dropout {} → 0", s.lora_dropout),
            "LoRA dropout 0",
            "less regularisation; without dropout peft keeps no dropout output or mask per adapted module",
            2,
            Patch::Dropout0,
        );
    }
    if matches!(
        s.optimizer,
        Optimizer::AdamwTorchFused
            | Optimizer::AdamwTorchForeach
            | Optimizer::AdamwTorch
            | Optimizer::PagedAdamw32bit
    ) {
        push(
            "adamw8bit",
            "optimizer",
            format!("optim {} → adamw_8bit (bitsandbytes)", s.optimizer.name()),
            "8-bit AdamW",
            "states in 8 bits: indistinguishable loss curves in most LoRA runs",
            2,
            Patch::Optimizer(Optimizer::Adamw8bit),
        );
    }
    if !matches!(
        s.optimizer,
        Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit | Optimizer::Sgd
    ) {
        push(
            "paged",
            "optimizer",
            format!("optim {} → paged_adamw_8bit", s.optimizer.name()),
            "paged 8-bit AdamW",
            "states in unified memory, evicted to CPU under pressure (slower when it pages)",
            4,
            Patch::Optimizer(Optimizer::PagedAdamw8bit),
        );
    }
    if !s.fused_ce {
        push(
            "fused_ce",
            "loss",
            "use a fused / chunked cross-entropy (e.g. Liger's FusedLinearCrossEntropy)".into(),
            "fused cross-entropy",
            "an extra dependency; the [tokens × vocab] logits are never materialised",
            3,
            Patch::FusedCe,
        );
    }
    if !s.grad_ckpt {
        push(
            "grad_ckpt",
            "checkpointing",
            "gradient_checkpointing=True".into(),
            "gradient checkpointing",
            "≈ +1 forward per step: about 30–35 % more compute",
            30,
            Patch::GradCkpt,
        );
    }
    for b in micro_batches(s.batch) {
        let accum = s.grad_accum.saturating_mul(s.batch / b);
        out.push(Change {
            id: "smaller_batch",
            kind: "micro_batch",
            title: format!(
                "per_device_train_batch_size {} → {b}, gradient_accumulation_steps {} → {accum}",
                s.batch, s.grad_accum
            ),
            short: format!("micro-batch {b} × accumulation {accum}"),
            cost: format!(
                "same effective batch ({}); smaller matmuls use the GPU less efficiently",
                s.batch.saturating_mul(s.grad_accum)
            ),
            weight: 4 * halvings(s.batch, b),
            patch: Patch::MicroBatch(b),
        });
    }
    if s.quant.is_none() {
        out.push(Change {
            id: "qlora",
            kind: "weights",
            title: format!(
                "QLoRA: load_in_4bit (nf4, double quant), {} autocast",
                low.name()
            ),
            short: "QLoRA (4-bit nf4)".into(),
            cost: "≈ 20–40 % slower steps (dequantisation); small quality cost reported for nf4"
                .into(),
            weight: 40,
            patch: Patch::Qlora(low),
        });
    }
    if s.targets.len() > 2 && s.targets.contains(&Target::Q) && s.targets.contains(&Target::V) {
        out.push(Change {
            id: "fewer_targets",
            kind: "targets",
            title: "target_modules: only q_proj, v_proj".into(),
            short: "LoRA on q_proj, v_proj only".into(),
            cost: "fewer adapted modules: usually slightly lower quality than all-linear".into(),
            weight: 25,
            patch: Patch::QvOnly,
        });
    }
    out
}

/// Every combination of `changes` taking at most one change of each kind (the empty one
/// excluded), cheapest first: by total weight, then fewer changes, then the order of `changes`.
pub fn combinations(changes: &[Change]) -> Vec<Vec<usize>> {
    let mut kinds: Vec<&str> = vec![];
    for c in changes {
        if !kinds.contains(&c.kind) {
            kinds.push(c.kind);
        }
    }
    let mut combos: Vec<Vec<usize>> = vec![vec![]];
    for kind in kinds {
        let of_kind: Vec<usize> = (0..changes.len())
            .filter(|&i| changes[i].kind == kind)
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
    keys.sort_unstable();
    keys.into_iter()
        .map(|k| std::mem::take(&mut combos[k.2]))
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn replan(
    arch: &Architecture,
    s: &Settings,
    base_peak: u128,
    capacity: u128,
    id: &'static str,
    title: String,
    summary: String,
    cost: String,
    changes: Vec<&'static str>,
    weight: u32,
    t: Settings,
    how: Fidelity,
) -> Option<Fix> {
    let p = judge(arch, &t, capacity, how)?;
    let v = verdict(&p, capacity);
    Some(Fix {
        id,
        title,
        summary,
        cost,
        changes,
        weight,
        time_factor: time::relative_time(arch, s, &t),
        peak_allocated_bytes: p.peak_allocated_bytes,
        nvidia_smi_bytes: p.nvidia_smi_bytes,
        saved_bytes: base_peak as i128 - p.peak_allocated_bytes as i128,
        status: v.status,
        settings: t,
        last_resort: false,
    })
}

fn single(
    arch: &Architecture,
    s: &Settings,
    base_peak: u128,
    cap: u128,
    c: &Change,
    how: Fidelity,
) -> Option<Fix> {
    replan(
        arch,
        s,
        base_peak,
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

fn fits_in(arch: &Architecture, s: &Settings, capacity: u128, how: Fidelity) -> bool {
    judge(arch, s, capacity, how).is_some_and(|p| p.nvidia_smi_bytes <= capacity)
}

/// How far the quick reserve allowance may lie above the simulated allocator. Over every
/// catalog model × batch, sequence, 4-bit and checkpointing (688 plans) it is at most 4.4 %
/// above (`tests/it/planning.rs` checks a sample); it is usually below.
pub const QUICK_ABOVE_SIMULATED_MAX: f64 = 0.05;

/// Plans `t` at fidelity `how`. A simulated judgement simulates only what could fit: a quick
/// nvidia-smi figure over the capacity by more than [`QUICK_ABOVE_SIMULATED_MAX`] is out of
/// memory under the simulation too, and keeps its quick plan (a wrong guess there can only
/// hide a candidate, never call one fitting).
fn judge(
    arch: &Architecture,
    t: &Settings,
    capacity: u128,
    how: Fidelity,
) -> Option<crate::model::Plan> {
    let quick = plan(arch, t).ok()?;
    let hopeless =
        quick.nvidia_smi_bytes as f64 > capacity as f64 * (1.0 + QUICK_ABOVE_SIMULATED_MAX);
    if how == Fidelity::Quick || hopeless {
        return Some(quick);
    }
    Fidelity::Simulated.plan(arch, t).ok()
}

/// The last resort: `max_length` cut to the longest that fits with `with` (the current settings
/// or a combination), said so in its title.
fn truncation(
    arch: &Architecture,
    s: &Settings,
    base_peak: u128,
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
    let t = Settings {
        seq: m,
        ..from.clone()
    };
    let cut = format!("max_length {} → {m} (truncate longer samples)", s.seq);
    let (title, summary, mut changes, weight) = match with {
        Some(f) => (
            format!("{} + {cut}", f.title),
            format!("{} + sequence length {m}", f.summary),
            f.changes.clone(),
            f.weight,
        ),
        None => (cut, format!("sequence length {m}"), vec![], 0),
    };
    changes.push("shorter_seq");
    let cost = format!(
        "last resort: samples longer than {m} tokens are cut, so the model never trains on their end{}",
        with.map(|f| format!("; {}", f.cost)).unwrap_or_default()
    );
    let mut f = replan(
        arch,
        s,
        base_peak,
        capacity,
        "shorter_seq",
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
    suggest_with(arch, s, capacity, bf16_ok, Fidelity::Quick)
}

/// [`suggest`] with each change judged at fidelity `how` ([`Fidelity::Simulated`]: verdicts
/// from PyTorch's caching allocator simulated, for the changes that could fit).
pub fn suggest_with(
    arch: &Architecture,
    s: &Settings,
    capacity: u128,
    bf16_ok: bool,
    how: Fidelity,
) -> Vec<Fix> {
    let Ok(base) = plan(arch, s) else {
        return vec![];
    };
    let peak = base.peak_allocated_bytes;
    let all = changes(s, bf16_ok);
    let mut fixes: Vec<Fix> = vec![];
    // One micro-batch single: the largest that fits, else the smallest.
    let batches: Vec<&Change> = all.iter().filter(|c| c.kind == "micro_batch").collect();
    let batch = batches
        .iter()
        .find(|c| fits_in(arch, &c.applied(s), capacity, how))
        .or(batches.last())
        .copied();
    for c in all.iter().filter(|c| c.kind != "micro_batch").chain(batch) {
        if let Some(f) = single(arch, s, peak, capacity, c, how) {
            fixes.push(f);
        }
    }
    fixes.retain(|f| f.saved_bytes > 0);
    fixes.sort_by_key(|f| (status_rank(f.status), f.weight, -f.saved_bytes));
    if !fixes.iter().any(|f| f.status != Status::Oom) {
        if let Some(c) =
            best_combination_with(arch, s, capacity, bf16_ok, how).filter(|c| !c.last_resort)
        {
            fixes.push(c);
        }
    }
    if let Some(t) = truncation(arch, s, peak, capacity, None, how).filter(|t| t.saved_bytes > 0) {
        fixes.push(t);
    }
    fixes
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
    best_combination_with(arch, s, capacity, bf16_ok, Fidelity::Quick)
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
    how: Fidelity,
) -> Option<Fix> {
    let base = judge(arch, s, capacity, how)?;
    let status = verdict(&base, capacity).status;
    if status == Status::Fits {
        return None;
    }
    let all = changes(s, bf16_ok);
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
        match verdict(&p, capacity).status {
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
            base.peak_allocated_bytes,
            capacity,
            if pick.len() == 1 {
                pick[0].id
            } else {
                "combined"
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
    truncation(
        arch,
        s,
        base.peak_allocated_bytes,
        capacity,
        chosen.as_ref(),
        how,
    )
}

/// A remedy forums repeat, and what the model says it changes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Myth {
    /// The claim.
    pub claim: &'static str,
    /// Change of the peak allocated bytes if you follow it (None: not a memory setting at all).
    pub delta_bytes: Option<i128>,
    /// Why.
    pub why: String,
}

/// What the popular remedies change for this configuration.
pub fn myths(arch: &Architecture, s: &Settings) -> Vec<Myth> {
    let peak = |t: &Settings| {
        plan(arch, t)
            .map(|p| p.peak_allocated_bytes as i128)
            .unwrap_or(0)
    };
    let base = peak(s);
    let gib = |b: i128| format!("{:+.2} GiB", b as f64 / (1u64 << 30) as f64);
    let half_r = Settings {
        lora_r: (s.lora_r / 2).max(1),
        ..s.clone()
    };
    let double_r = Settings {
        lora_r: (s.lora_r * 2).min(arch.hidden_size),
        ..s.clone()
    };
    let ga1 = Settings {
        grad_accum: 1,
        ..s.clone()
    };
    let fp16 = Settings {
        dtype: Dtype::Fp16,
        quant: None,
        autocast: None,
        ..s.clone()
    };
    let sdpa = Settings {
        attn_impl: AttnImpl::Sdpa,
        ..s.clone()
    };
    let eager = Settings {
        attn_impl: AttnImpl::Eager,
        ..s.clone()
    };
    let (p_half, p_double) = (peak(&half_r) - base, peak(&double_r) - base);
    let adam8 = Settings {
        optimizer: Optimizer::Adamw8bit,
        ..s.clone()
    };
    let adam32 = Settings {
        optimizer: Optimizer::AdamwTorchFused,
        ..s.clone()
    };
    let (bf16, fp16w) = (
        Settings {
            dtype: Dtype::Bf16,
            ..s.clone()
        },
        Settings {
            dtype: Dtype::Fp16,
            ..s.clone()
        },
    );
    let trainable = plan(arch, s)
        .map(|p| p.params.trainable_params)
        .unwrap_or(0);
    let lora_path: u128 = plan(arch, s)
        .map(|p| {
            p.terms
                .iter()
                .filter(|t| t.component == crate::model::Component::ActLora)
                .map(|t| t.bytes)
                .sum()
        })
        .unwrap_or(0);
    let dd = u128::from(arch.hidden_size).pow(2) * 2;
    let p16 = peak(&fp16);
    let (fp16_delta, fp16_why) = if s.quant.is_none() && s.dtype == Dtype::Fp32 {
        let p = base;
        (
            p16 - p,
            format!("fp32 → fp16 weights: {} of {:.2} GiB: the weights halve, but adapters, their gradients and optimizer states stay fp32, and norms and logits are computed in fp32", gib(p16 - p), p as f64 / (1u64 << 30) as f64),
        )
    } else if s.quant.is_none() {
        (
            p16 - base,
            format!("{} → fp16 weights: {}: both are 2 bytes per weight, so switching saves nothing; only fp32 → 16-bit halves the weights (and never the fp32 adapters, gradients, optimizer states, norms or logits)", s.dtype.name(), gib(p16 - base)),
        )
    } else {
        (
            p16 - base,
            format!("4-bit → fp16 weights: {}: fp16 is four times the 4-bit weights, not half of anything", gib(p16 - base)),
        )
    };
    vec![
        Myth {
            claim: "Call torch.cuda.empty_cache() to fix the OOM",
            delta_bytes: Some(0),
            why: "it only returns cached, unused blocks to the driver; every live tensor at the peak stays, so max_memory_allocated is unchanged (it can lower reserved memory seen by other processes)".into(),
        },
        Myth {
            claim: "Lower gradient_accumulation_steps to save memory",
            delta_bytes: Some(peak(&ga1) - base),
            why: "accumulation adds the micro-batch gradients into the same LoRA .grad tensors; activations are per micro-batch, so the peak does not depend on it".into(),
        },
        Myth {
            claim: "Use a smaller (or bigger) LoRA rank to save memory",
            delta_bytes: Some(p_half),
            why: format!("rank {} → {}: {}; rank {} → {}: {}. Adapters are a few MB; the peak is weights, activations and logits", s.lora_r, half_r.lora_r, gib(p_half), s.lora_r, double_r.lora_r, gib(p_double)),
        },
        Myth { claim: "Upgrade peft to fix the OOM", delta_bytes: None, why: "the memory of a step follows from the settings above (dtype, dropout, targets, checkpointing, attention); a peft upgrade changes none of them".into() },
        Myth {
            claim: "fp16 halves everything",
            delta_bytes: Some(fp16_delta),
            why: fp16_why,
        },
        Myth {
            claim: "The KV cache grows with sequence length squared",
            delta_bytes: Some(peak(&eager) - peak(&sdpa)),
            why: format!("training keeps no KV cache (use_cache=False); the only S² term is eager attention's saved probabilities: eager vs sdpa here is {}", gib(peak(&eager) - peak(&sdpa))),
        },
        Myth {
            claim: "LoRA's forward builds a d × d temporary (B·A) for every adapted module",
            delta_bytes: Some(0),
            why: format!("peft computes lora_B(lora_A(dropout(x))): the extra tensors are tokens × rank, here {} for the whole LoRA path; a d × d product B·A would be {:.1} MiB per module and is never formed in training (only merge_and_unload forms it, once, afterwards)", gib(lora_path as i128).trim_start_matches('+'), dd as f64 / (1u64 << 20) as f64),
        },
        Myth {
            claim: "8-bit Adam (Adam8bit) still takes 4 bytes per parameter",
            delta_bytes: Some(peak(&adam8) - peak(&adam32)),
            why: format!("AdamW8bit keeps exp_avg and exp_avg_sq in 1 byte each (plus block-wise constants): about 2 bytes per trainable parameter instead of 8; for {:.1} M LoRA parameters, 8-bit vs 32-bit AdamW here is {}: the optimizer is a small part of a LoRA peak", trainable as f64 / 1e6, gib(peak(&adam8) - peak(&adam32))),
        },
        Myth {
            claim: "RTX 30/40 series cards do not support BF16",
            delta_bytes: Some(peak(&bf16) - peak(&fp16w)),
            why: format!("Ampere (RTX 30, A100, A10) and Ada (RTX 40, L4) run bf16 natively; Turing (RTX 20, T4) and older do not. bf16 and fp16 both take 2 bytes, so the choice changes no memory: bf16 vs fp16 here is {}", gib(peak(&bf16) - peak(&fp16w))),
        },
        Myth {
            claim: "With DDP, GPU 0 using more memory than the others is normal",
            delta_bytes: None,
            why: "under DDP every rank holds the same replica, gradient buckets and activations, so the plan is the same on every GPU; extra memory on GPU 0 is other ranks' CUDA contexts (about 0.3–1 GiB each) created on device 0 when a process touches CUDA before torch.cuda.set_device(local_rank), or evaluation and saving gathered on rank 0: set the device first".into(),
        },
    ]
}

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
    /// nvidia-smi with it.
    pub nvidia_smi_bytes: u128,
    /// Reserved memory saved.
    pub saved_bytes: i128,
    /// Verdict with it.
    pub status: Status,
}

/// The expandable-segments fix, when it is not set already, the plan can be simulated and the
/// simulation says it reserves less.
pub fn allocator_fix(arch: &Architecture, s: &Settings, capacity: u128) -> Option<AllocatorFix> {
    if s.alloc_conf.contains("expandable_segments:True") {
        return None;
    }
    let before = crate::model::plan_simulated(arch, s).ok()?;
    let conf = if s.alloc_conf.is_empty() {
        "expandable_segments:True".to_string()
    } else {
        format!("{},expandable_segments:True", s.alloc_conf)
    };
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
    Some(AllocatorFix {
        alloc_conf: conf,
        reserved_before_bytes: before.peak_reserved_bytes,
        reserved_after_bytes: after.peak_reserved_bytes,
        nvidia_smi_bytes: after.nvidia_smi_bytes,
        saved_bytes: before.peak_reserved_bytes as i128 - after.peak_reserved_bytes as i128,
        status: verdict(&after, capacity).status,
    })
}
