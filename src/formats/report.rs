//! Human-readable formatting of plans: byte units and the CLI's breakdown table.
//! Pure functions, shared by the CLI and the web page.

use crate::model::Plan;
use crate::planning::Verdict;

/// Bytes per GiB.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// `22.82 GiB` (two decimals, as the UI and CLI show).
pub fn gib(bytes: u128) -> String {
    format!("{:.2} GiB", bytes as f64 / GIB)
}

/// Signed GiB with sign.
pub fn gib_signed(bytes: i128) -> String {
    format!("{:+.2} GiB", bytes as f64 / GIB)
}

/// A time-per-token ratio in words: `≈ 47 % more time per token`, `≈ 5 % less …`, `no more time per token`.
pub fn speed(factor: f64) -> String {
    let pct = ((factor - 1.0) * 100.0).round();
    if !pct.is_finite() || pct == 0.0 {
        "no more time per token".into()
    } else if pct > 0.0 {
        format!("≈ {pct:.0} % more time per token")
    } else {
        format!("≈ {:.0} % less time per token", -pct)
    }
}

/// [`speed`], and with the current step's time on a priced card, the epoch's cost after the
/// change (the same tokens at `factor` the time per token).
pub fn fix_speed(factor: f64, now: Option<&crate::planning::time::TimeEstimate>) -> String {
    match now.and_then(|t| t.usd_per_epoch) {
        Some(c) if factor.is_finite() => {
            format!("{}, ≈ ${:.2} per epoch", speed(factor), c * factor)
        }
        _ => speed(factor),
    }
}

/// The full text report of a plan: totals, verdict, breakdown with formulas, phase peaks.
pub fn text(plan: &Plan, title: &str, verdict: Option<(&str, &Verdict)>) -> String {
    let mut s = String::new();
    s.push_str(&format!("{title}\n\n"));
    s.push_str(&format!(
        "  peak allocated   {:>12}   ({}: {})\n",
        gib(plan.peak_allocated_bytes),
        plan.peak_phase.name(),
        plan.peak_moment
    ));
    s.push_str(&format!(
        "  peak reserved    {:>12}   ({})\n",
        gib(plan.peak_reserved_bytes),
        plan.reserve_explanation
    ));
    let outside: Vec<String> = plan
        .outside_terms
        .iter()
        .map(|t| format!("{} {}", t.label, gib(t.bytes)))
        .collect();
    s.push_str(&format!(
        "  nvidia-smi       {:>12}   (reserved + {})\n",
        gib(plan.nvidia_smi_bytes),
        outside.join(" + ")
    ));
    if !plan.cached_free_blocks.is_empty() {
        let blocks: Vec<String> = plan
            .cached_free_blocks
            .iter()
            .take(4)
            .map(|b| format!("{} left by {}", gib(b.bytes), b.left_by))
            .collect();
        s.push_str(&format!(
            "  allocator cache  {:>12}   (reserved − allocated; largest free blocks at the peak: {})\n",
            gib(plan.peak_reserved_bytes.saturating_sub(plan.peak_allocated_bytes)),
            blocks.join(", ")
        ));
    }
    if let Some((gpu, v)) = verdict {
        s.push_str(&format!(
            "  verdict          {:>12}   on {gpu} ({} usable, headroom {})\n",
            v.status.name().to_uppercase(),
            gib(v.capacity_bytes),
            gib_signed(v.headroom_bytes)
        ));
    }
    if plan.world_size > 1 || plan.cpu_bytes_per_rank > 0 {
        s.push_str(&format!(
            "  per GPU × {} GPUs ({} nvidia-smi across them); effective batch {}; CPU RAM for offload {} per rank, {} per node\n",
            plan.world_size,
            gib(plan.nvidia_smi_bytes_all_gpus()),
            plan.effective_batch,
            gib(plan.cpu_bytes_per_rank),
            gib(plan.cpu_bytes_per_node)
        ));
        for t in &plan.cpu_terms {
            s.push_str(&format!(
                "    CPU {:>10}  {} = {}\n",
                gib(t.bytes),
                t.label,
                t.values()
            ));
        }
    }
    s.push_str(&format!(
        "\n  params: base {:.3} B{}, trainable {:.2} M\n",
        plan.params.base_params as f64 / 1e9,
        if plan.params.active_params != plan.params.base_params {
            format!(
                " ({:.3} B active per token)",
                plan.params.active_params as f64 / 1e9
            )
        } else {
            String::new()
        },
        plan.params.trainable_params as f64 / 1e6
    ));
    for n in &plan.notes {
        s.push_str(&format!("  note: {n}\n"));
    }
    s.push_str("\nBreakdown at the peak\n");
    for c in plan.breakdown.iter().filter(|c| c.bytes > 0) {
        s.push_str(&format!("  {:<42} {:>12}\n", c.label, gib(c.bytes)));
    }
    s.push_str("\nWhere each number comes from\n");
    for t in &plan.terms {
        s.push_str(&format!(
            "  {:>10}  {}\n              = {}\n              = {}\n",
            gib(t.bytes),
            t.label,
            t.formula(),
            t.values()
        ));
    }
    s.push_str("\nPeak of each phase\n");
    for p in &plan.phases {
        s.push_str(&format!(
            "  {:<10} {:>12}   {}\n",
            p.phase.name(),
            gib(p.bytes),
            p.moment
        ));
    }
    s
}

/// The job's phases as text: each phase's GPU and host peak, what is live at a later phase's
/// peak with its formula, and, when a phase after training decides an out-of-memory verdict,
/// the changes aimed at that phase first.
pub fn job_text(job: &crate::model::job::Job, verdict: &Verdict) -> String {
    let mut s = String::from("\nThe job, phase by phase (GPU per device · host)\n");
    for p in &job.phases {
        let mark = if p.name == verdict.phase {
            "  ← decides"
        } else {
            ""
        };
        s.push_str(&format!(
            "  {:<6} {:>12} · {:>12}{mark}\n",
            p.name,
            if p.gpu_peak_bytes == 0 {
                "no GPU".to_string()
            } else {
                gib(p.gpu_peak_bytes)
            },
            gib(p.host_peak_bytes)
        ));
        if p.name == "train" {
            continue;
        }
        if !p.moment.is_empty() {
            s.push_str(&format!("         at: {}\n", p.moment));
        }
        let mut terms: Vec<&crate::model::Term> = p.terms.iter().filter(|t| t.bytes > 0).collect();
        terms.sort_by_key(|t| std::cmp::Reverse(t.bytes));
        let gpu = terms.into_iter().take(6).map(|t| ("GPU ", t));
        for (on, t) in gpu.chain(p.host_terms.iter().map(|t| ("host", t))) {
            s.push_str(&format!(
                "         {on} {:>10}  {} = {}\n",
                gib(t.bytes),
                t.label,
                t.formula()
            ));
        }
        for n in &p.notes {
            s.push_str(&format!("         {n}\n"));
        }
    }
    if verdict.status != crate::planning::Status::Fits && verdict.phase != "train" {
        s.push_str(&format!(
            "\nThe {} phase decides. What helps it first:\n",
            verdict.phase
        ));
        for fix in phase_fixes(job, verdict.phase) {
            s.push_str(&format!("  - {fix}\n"));
        }
    }
    s
}

/// Changes aimed at a phase after training, most effective first.
pub fn phase_fixes(job: &crate::model::job::Job, phase: &str) -> Vec<&'static str> {
    let eval_keeps_logits = job
        .phase("eval")
        .is_some_and(|p| p.notes.iter().any(|n| n.starts_with("compute_metrics")));
    match phase {
        "eval" if eval_keeps_logits => vec![
            "eval_accumulation_steps 1: each batch's logits leave the GPU after it",
            "preprocess_logits_for_metrics returning argmax ids (one int64 per token instead of a vocabulary of logits)",
            "prediction_loss_only (no compute_metrics) if only the loss is needed",
            "a smaller eval_batch",
        ],
        "eval" => vec!["a smaller eval_batch (its logits and loss over the vocabulary are the evaluation's peak)"],
        "merge" => vec!["export_device cpu: merge in host memory after training (LLaMA-Factory's export)"],
        "save" => vec!["save_only_model, or a sharded state dict (FSDP SHARDED_STATE_DICT; ZeRO-3 without stage3_gather_16bit_weights_on_model_save)"],
        _ => vec![],
    }
}
