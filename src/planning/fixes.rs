//! Planning advice: ranked single changes that make a plan fit (each re-planned, never looked up
//! in a table), combinations when no single change suffices, and what the model says about the
//! remedies forums repeat.

use serde::Serialize;

use crate::planning::{fit, verdict, Status};

use crate::model::{
    plan, Architecture, AttnImpl, Dtype, ExpertsImpl, Optimizer, Quant, Settings, Target,
};

/// One suggested change, re-planned.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fix {
    /// Stable id (`grad_ckpt`, `smaller_batch`, ...).
    pub id: &'static str,
    /// What to change, in words.
    pub title: String,
    /// What it costs (speed, quality, effective batch), with a number where one exists.
    pub cost: String,
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
}

/// Order in which equally-fitting fixes are preferred (cheapest in speed/quality first).
fn cost_rank(id: &str) -> u8 {
    match id {
        "sdpa" | "grouped_mm" => 0,
        "no_router_logits" => 5,
        "no_expert_lora" => 9,
        "bf16_weights" => 1,
        "dropout0" => 2,
        "adamw8bit" => 3,
        "paged" => 4,
        "fused_ce" => 5,
        "grad_ckpt" => 6,
        "smaller_batch" => 7,
        "qlora" => 8,
        "fewer_targets" => 9,
        "shorter_seq" => 10,
        _ => 11,
    }
}

fn candidates(
    arch: &Architecture,
    s: &Settings,
    capacity: u128,
    bf16_ok: bool,
) -> Vec<(&'static str, String, String, Settings)> {
    let mut out = vec![];
    let with = |f: &dyn Fn(&mut Settings)| {
        let mut t = s.clone();
        f(&mut t);
        t
    };
    if s.attn_impl == AttnImpl::Eager {
        out.push((
            "sdpa",
            "attn_implementation: eager → sdpa".into(),
            "none: same math, O(S) memory instead of O(S²), usually faster".into(),
            with(&|t| t.attn_impl = AttnImpl::Sdpa),
        ));
    }
    if arch.is_moe() {
        if s.experts_impl != ExpertsImpl::GroupedMm {
            out.push((
                "grouped_mm",
                format!(
                    "experts_implementation: {} → grouped_mm (transformers' default)",
                    s.experts_impl.name()
                ),
                "none: one grouped matmul per projection over the tokens sorted by expert".into(),
                with(&|t| t.experts_impl = ExpertsImpl::GroupedMm),
            ));
        }
        if s.output_router_logits {
            out.push((
                "no_router_logits",
                "output_router_logits=False".into(),
                "no load-balancing loss: the routing may drift towards fewer experts".into(),
                with(&|t| t.output_router_logits = false),
            ));
        }
        if !s.target_parameters.is_empty() {
            out.push((
                "no_expert_lora",
                "target_parameters: none (LoRA on attention and the Linear layers only)".into(),
                "the experts are not adapted; each layer no longer keeps a W + B·A copy of its experts".into(),
                with(&|t| {
                    t.target_parameters.clear();
                    if t.targets.is_empty() {
                        t.targets = vec![Target::Q, Target::K, Target::V, Target::O];
                    }
                }),
            ));
        }
    }
    if s.dtype == Dtype::Fp32 && s.quant.is_none() {
        let d = if bf16_ok { Dtype::Bf16 } else { Dtype::Fp16 };
        out.push((
            "bf16_weights",
            format!("load the base model in {} (torch_dtype={}) instead of fp32", d.name(), if bf16_ok { "torch.bfloat16" } else { "torch.float16" }),
            "none for frozen weights under autocast: the copies autocast made were already low precision".into(),
            with(&|t| {
                t.dtype = d;
                if t.autocast.is_none() {
                    t.autocast = Some(d);
                }
            }),
        ));
    }
    if s.lora_dropout > 0.0 && !s.targets.is_empty() {
        out.push((
            "dropout0",
            format!("lora_dropout {} → 0", s.lora_dropout),
            "less regularisation; peft then shares one input copy per module".into(),
            with(&|t| t.lora_dropout = 0.0),
        ));
    }
    if matches!(
        s.optimizer,
        Optimizer::AdamwTorchFused
            | Optimizer::AdamwTorchForeach
            | Optimizer::AdamwTorch
            | Optimizer::PagedAdamw32bit
    ) {
        out.push((
            "adamw8bit",
            format!("optim {} → adamw_8bit (bitsandbytes)", s.optimizer.name()),
            "states in 8 bits: indistinguishable loss curves in most LoRA runs".into(),
            with(&|t| t.optimizer = Optimizer::Adamw8bit),
        ));
    }
    if !matches!(
        s.optimizer,
        Optimizer::PagedAdamw8bit | Optimizer::PagedAdamw32bit | Optimizer::Sgd
    ) {
        out.push((
            "paged",
            format!("optim {} → paged_adamw_8bit", s.optimizer.name()),
            "states in unified memory, evicted to CPU under pressure (slower when it pages)".into(),
            with(&|t| t.optimizer = Optimizer::PagedAdamw8bit),
        ));
    }
    if !s.fused_ce {
        out.push((
            "fused_ce",
            "use a fused / chunked cross-entropy (e.g. Liger's FusedLinearCrossEntropy)".into(),
            "an extra dependency; the [tokens × vocab] logits are never materialised".into(),
            with(&|t| t.fused_ce = true),
        ));
    }
    if !s.grad_ckpt {
        out.push((
            "grad_ckpt",
            "gradient_checkpointing=True".into(),
            "≈ +1 forward per step: about 30–35 % more compute".into(),
            with(&|t| t.grad_ckpt = true),
        ));
    }
    if s.batch > 1 {
        // Halve until it fits (or reaches 1); accumulate more to keep the effective batch.
        let mut b = s.batch;
        let mut t = s.clone();
        while b > 1 {
            b = b.div_ceil(2);
            t = Settings {
                batch: b,
                grad_accum: s.grad_accum.saturating_mul(s.batch.div_ceil(b)),
                ..s.clone()
            };
            if plan(arch, &t)
                .map(|p| p.nvidia_smi_bytes <= capacity)
                .unwrap_or(false)
            {
                break;
            }
        }
        out.push((
            "smaller_batch",
            format!(
                "per_device_train_batch_size {} → {}, gradient_accumulation_steps {} → {}",
                s.batch, t.batch, s.grad_accum, t.grad_accum
            ),
            format!(
                "same effective batch ({}); smaller matmuls use the GPU less efficiently",
                s.batch.saturating_mul(s.grad_accum)
            ),
            t,
        ));
    }
    if s.quant.is_none() {
        let ac = if bf16_ok { Dtype::Bf16 } else { Dtype::Fp16 };
        out.push((
            "qlora",
            format!(
                "QLoRA: load_in_4bit (nf4, double quant), {} autocast",
                ac.name()
            ),
            "≈ 20–40 % slower steps (dequantisation); small quality cost reported for nf4".into(),
            with(&|t| {
                t.quant = Some(Quant::Nf4);
                t.double_quant = true;
                t.dtype = ac;
                t.autocast = Some(ac);
            }),
        ));
    }
    if s.targets.len() > 2 && s.targets.contains(&Target::Q) && s.targets.contains(&Target::V) {
        out.push((
            "fewer_targets",
            "target_modules: only q_proj, v_proj".into(),
            "fewer adapted modules: usually slightly lower quality than all-linear".into(),
            with(&|t| t.targets = vec![Target::Q, Target::V]),
        ));
    }
    if let Some(m) = fit::max_seq(arch, s, capacity, s.seq.saturating_sub(1)) {
        if m < s.seq {
            out.push((
                "shorter_seq",
                format!("max_length {} → {m} (truncate longer samples)", s.seq),
                format!("samples longer than {m} tokens are cut"),
                with(&|t| t.seq = m),
            ));
        }
    }
    out
}

fn evaluate(
    arch: &Architecture,
    base_peak: u128,
    capacity: u128,
    id: &'static str,
    title: String,
    cost: String,
    t: Settings,
) -> Option<Fix> {
    let p = plan(arch, &t).ok()?;
    let v = verdict(&p, capacity);
    Some(Fix {
        id,
        title,
        cost,
        peak_allocated_bytes: p.peak_allocated_bytes,
        nvidia_smi_bytes: p.nvidia_smi_bytes,
        saved_bytes: base_peak as i128 - p.peak_allocated_bytes as i128,
        status: v.status,
        settings: t,
    })
}

fn status_rank(s: Status) -> u8 {
    match s {
        Status::Fits => 0,
        Status::Tight => 1,
        Status::Oom => 2,
    }
}

/// Ranked single changes (those that save memory), best first: fitting before tight before
/// out-of-memory, then cheapest, then most saved. When none fits, the last entry combines changes
/// greedily (largest saving first) until the plan fits.
pub fn suggest(arch: &Architecture, s: &Settings, capacity: u128, bf16_ok: bool) -> Vec<Fix> {
    let Ok(base) = plan(arch, s) else {
        return vec![];
    };
    let mut fixes: Vec<Fix> = candidates(arch, s, capacity, bf16_ok)
        .into_iter()
        .filter_map(|(id, title, cost, t)| {
            evaluate(
                arch,
                base.peak_allocated_bytes,
                capacity,
                id,
                title,
                cost,
                t,
            )
        })
        .filter(|f| f.saved_bytes > 0)
        .collect();
    fixes.sort_by_key(|f| (status_rank(f.status), cost_rank(f.id), -f.saved_bytes));
    if !fixes.iter().any(|f| f.status != Status::Oom) {
        if let Some(c) = combine(arch, s, capacity, bf16_ok, base.peak_allocated_bytes) {
            fixes.push(c);
        }
    }
    fixes
}

fn combine(
    arch: &Architecture,
    s: &Settings,
    capacity: u128,
    bf16_ok: bool,
    base_peak: u128,
) -> Option<Fix> {
    let mut cur = s.clone();
    let mut titles: Vec<String> = vec![];
    let mut costs: Vec<String> = vec![];
    for _ in 0..6 {
        let cur_peak = plan(arch, &cur).ok()?.peak_allocated_bytes;
        let best = candidates(arch, &cur, capacity, bf16_ok)
            .into_iter()
            .filter_map(|(id, title, cost, t)| {
                evaluate(arch, cur_peak, capacity, id, title, cost, t)
            })
            .filter(|f| f.saved_bytes > 0)
            .max_by_key(|f| f.saved_bytes)?;
        titles.push(best.title.clone());
        costs.push(best.cost.clone());
        cur = best.settings.clone();
        if best.status != Status::Oom {
            break;
        }
    }
    let mut f = evaluate(
        arch,
        base_peak,
        capacity,
        "combined",
        titles.join(" + "),
        costs.join("; "),
        cur,
    )?;
    f.title = format!("together: {}", f.title);
    Some(f)
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
    let mut moe = vec![];
    if arch.is_moe() && s.quant.is_none() {
        let q = Settings {
            quant: Some(Quant::Nf4),
            double_quant: true,
            ..s.clone()
        };
        let d = peak(&q) - base;
        moe.push(Myth {
            claim: "QLoRA shrinks a mixture-of-experts model to a quarter",
            delta_bytes: Some(d),
            why: format!(
                "load_in_4bit quantizes only nn.Linear layers; the fused experts are not, and prepare_model_for_kbit_training casts them to fp32: {} here",
                gib(d)
            ),
        });
    }
    let mut out = vec![
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
    ];
    out.extend(moe);
    out
}
