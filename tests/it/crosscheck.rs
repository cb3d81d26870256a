//! Steps measured where the plan's terms and the step program disagreed (2–6 % at full depth on
//! catalog configurations, `tests/data/reference/crosscheck/`): both are held to each
//! measurement, so the two models cannot drift apart unseen where one of them is wrong.

use lorafit::formats::catalog::resolve_model;
use lorafit::model::plan;
use lorafit::model::steptrace::{generate_on, Device};
use serde_json::Value;

/// The plan's one known gap on these cases: with 4-bit weights and checkpointing (no autocast),
/// the terms' recomputed-top-layer moment over-counts Mistral-7B by 2.5 % (its peak is later, in
/// a backward matmul, where the step program finds it to the byte).
const PLAN_GAPS: &[(&str, f64)] = &[("mistral-7b_bf16+nf4_s1024_b2_sdpa_gc", 3.0)];

#[test]
fn the_plan_and_the_step_program_meet_each_crosscheck_measurement() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/reference/crosscheck/cases.jsonl"
    ))
    .expect("crosscheck cases");
    let mut n = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("JSON");
        let id = v["id"].as_str().expect("id");
        let a = resolve_model(&v["model"]).expect("model").value;
        let s = crate::harness_settings(&v["settings"]);
        let measured = v["result"]["peak_bytes"].as_u64().expect("peak_bytes");
        let pct = |x: u128| (x as f64 - measured as f64) / measured as f64 * 100.0;
        let planned = pct(plan(&a, &s).expect("plans").peak_allocated_bytes);
        let program = pct(generate_on(&a, &s, Device::Emulated)
            .expect("generates")
            .peak_live_bytes as u128);
        println!("{id:<48} plan {planned:+.3} %, step program {program:+.3} %");
        let allowed = PLAN_GAPS.iter().find(|g| g.0 == id).map_or(1.5, |g| g.1);
        assert!(planned.abs() <= allowed, "{id}: plan {planned:+.3} %");
        assert!(program.abs() <= 1.0, "{id}: step program {program:+.3} %");
        n += 1;
    }
    assert_eq!(n, 12);
}
