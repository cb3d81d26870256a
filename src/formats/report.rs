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

/// A compute-time ratio in words: `≈ 47 % more compute per token`, `≈ 5 % less …`, `no more compute`.
pub fn speed(factor: f64) -> String {
    let pct = ((factor - 1.0) * 100.0).round();
    if !pct.is_finite() || pct == 0.0 {
        "no more compute per token".into()
    } else if pct > 0.0 {
        format!("≈ {pct:.0} % more compute per token")
    } else {
        format!("≈ {:.0} % less compute per token", -pct)
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
