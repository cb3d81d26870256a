//! The causal-LM loss of transformers before 4.49, which copies the shifted fp32 logits
//! (`loss_shift = logits`), against real steps of transformers 4.48.1 on the CPU
//! (`tests/data/reference/transformers4/`): each small case was stepped twice on the same stack,
//! with its own loss and with the loss of 4.49 and later swapped in, so the difference of the
//! two peaks is the shift's alone. The CPU runs no CUDA kernels (the plan's device is the
//! harness's emulated GPU), so the absolute peaks are not compared; the difference and the phase
//! of the peak are.

use lorafit::formats::catalog::resolve_model;
use lorafit::model::steptrace::Device;
use lorafit::model::{plan, plan_simulated_on, LossShift, Phase};
use serde_json::Value;
use std::collections::BTreeMap;

fn phase(name: &str) -> Phase {
    match name {
        "forward" => Phase::Forward,
        "backward" => Phase::Backward,
        other => panic!("unexpected measured phase {other}"),
    }
}

/// One run: measured peak and its phase, planned peak (quick, settled) and its phase.
struct Run {
    measured: u128,
    measured_phase: Phase,
    quick: u128,
    settled: u128,
    planned_phase: Phase,
}

#[test]
fn the_logits_shift_of_transformers_4_costs_what_it_measured() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/reference/transformers4/cases.jsonl"
    ))
    .expect("transformers 4 cases");
    // variant → shift → run
    let mut by_variant: BTreeMap<String, BTreeMap<String, Run>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("JSON");
        let id = v["id"].as_str().expect("id");
        let shift = v["loss_shift"].as_str().expect("loss_shift");
        let a = resolve_model(&v["model"]).expect("model").value;
        let mut s = crate::harness_settings(&v["settings"]);
        s.loss_shift = LossShift::parse(shift).expect("a loss shift");
        let settled = plan_simulated_on(&a, &s, Device::Emulated).expect("plans");
        let quick = plan(&a, &s).expect("plans");
        let variant = id.rsplit_once('_').expect("variant_shift").0.to_string();
        by_variant.entry(variant).or_default().insert(
            shift.to_string(),
            Run {
                measured: v["result"]["peak_bytes"].as_u64().expect("peak") as u128,
                measured_phase: phase(v["result"]["peak_phase"].as_str().expect("phase")),
                quick: quick.peak_allocated_bytes,
                settled: settled.peak_allocated_bytes,
                planned_phase: settled.peak_phase,
            },
        );
    }
    assert_eq!(by_variant.len(), 5);
    for (variant, runs) in &by_variant {
        let (old, new) = (&runs["logits"], &runs["labels"]);
        let diff = |f: fn(&Run) -> u128| f(old) as i128 - f(new) as i128;
        let measured = diff(|r| r.measured);
        let quick = diff(|r| r.quick);
        let settled = diff(|r| r.settled);
        println!(
            "{variant:<8} measured {measured:>+10} B, planned {settled:>+10} B (quick {quick:>+10} B); peak in {:?} / {:?}",
            old.measured_phase, new.measured_phase
        );
        assert_eq!(settled, measured, "{variant}: the shift's bytes");
        assert_eq!(quick, measured, "{variant}: the shift's bytes, quick plan");
        assert_eq!(
            old.planned_phase, old.measured_phase,
            "{variant}: phase of the peak with the logits shifted"
        );
        assert_eq!(
            new.planned_phase, new.measured_phase,
            "{variant}: phase of the peak with the labels shifted"
        );
    }
}
