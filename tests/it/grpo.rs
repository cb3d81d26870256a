//! GRPO steps as TRL 1.16's GRPOTrainer runs them after generation (`stage: grpo`: each step's
//! scoring of its completions, then `_compute_loss` through the fused LM head), measured with the
//! harness (`tests/data/reference/grpo/`): each planned to the byte (the quick and the settled
//! plan against the measured peak, reserved against PyTorch's caching allocator replayed over the
//! measured step), and the scoring phase's peak against the harness's.

use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/grpo/cases.jsonl")
}

#[test]
fn grpo_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        assert!(m.settings.grpo(), "{id}: a GRPO step");
        let (q, st, r) = (m.quick_pct, m.settled_pct, m.reserved_pct);
        if m.arch.tie_word_embeddings && m.settings.base_trained() {
            // A trained tied weight takes two gradients: a GPU's AccumulateGrad adds the second
            // in place, the harness's emulated device out of place. The quick plan is the
            // GPU's: it equals the settled plan on a GPU.
            let gpu = lorafit::model::plan_simulated(&m.arch, &m.settings).expect("plans");
            assert_eq!(
                m.quick.peak_allocated_bytes, gpu.peak_allocated_bytes,
                "{id}: quick vs the settled plan on a GPU"
            );
        } else {
            assert!(q.abs() <= 0.01, "{id}: quick {q:+.3} %");
        }
        assert!(st.abs() <= 0.01, "{id}: settled {st:+.3} %");
        assert!(r.abs() <= 0.01, "{id}: reserved {r:+.3} %");
        n += 1;
    }
    assert_eq!(n, 4);
}

/// The plan's scoring phase peaks where the harness measured its `score` phase (the second
/// step's: the first step's optimizer states do not exist yet).
#[test]
fn the_scoring_phase_peak_is_the_measured_one() {
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        let measured = v["result"]["per_step"][1]["phase_peaks"]["score"]
            .as_u64()
            .expect("the harness's score peak");
        let planned = m
            .settled
            .phases
            .iter()
            .find(|p| p.phase.name() == "score")
            .unwrap_or_else(|| panic!("{id}: no score phase"))
            .bytes;
        assert_eq!(planned, u128::from(measured), "{id}: the score phase");
        let peak = m.settled.phases.iter().map(|p| p.bytes).max();
        assert_eq!(
            Some(m.settled.peak_allocated_bytes),
            peak,
            "{id}: the step's peak is its largest phase's"
        );
    }
}
