//! Steps measured where the plan's closed-form terms and the step program disagreed (2–6 % at
//! full depth on catalog configurations, `tests/data/reference/crosscheck/`). The terms gave
//! way: a one-GPU plan is the step program's, quick (two short runs extrapolated) or settled
//! (the full run on the harness's device), and each is held to each measurement.

use lorafit::formats::catalog::resolve_model;
use lorafit::model::steptrace::Device;
use lorafit::model::{plan, plan_simulated_on};
use serde_json::Value;

#[test]
fn the_quick_and_the_settled_plan_meet_each_crosscheck_measurement() {
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
        let settled = pct(plan_simulated_on(&a, &s, Device::Emulated)
            .expect("plans")
            .peak_allocated_bytes);
        println!(
            "{id:<48} quick plan {planned:+.3} %, settled on the harness's device {settled:+.3} %"
        );
        assert!(planned.abs() <= 1.0, "{id}: quick plan {planned:+.3} %");
        assert!(settled.abs() <= 1.0, "{id}: settled plan {settled:+.3} %");
        n += 1;
    }
    assert_eq!(n, 12);
}
