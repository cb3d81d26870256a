//! SFT steps as TRL 1.16's SFTTrainer runs them (`logits: fused`: its fused LM head and
//! `compute_loss`), measured with the harness beside the same steps as transformers' Trainer
//! runs them (`tests/data/reference/trl_sft/`): each planned to the byte (the quick and the
//! settled plan against the measured peak, reserved against PyTorch's caching allocator
//! replayed over the measured step), and the fix "fused log-probs" saving what the two measured
//! steps differ by.

use lorafit::planning::fixes::FixId;
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/trl_sft/cases.jsonl")
}

#[test]
fn trl_sft_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        assert_eq!(
            m.settings.sft_fused_head(),
            id.ends_with("_trl"),
            "{id}: the step's head"
        );
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
    assert_eq!(n, 9);
}

/// Each measured pair (`ID` as Trainer runs it, `ID_trl` as TRL's SFTTrainer does): the
/// planner offers `ID` the fused head, and it saves exactly what the measurements differ by.
#[test]
fn the_fused_head_fix_saves_what_the_measured_steps_differ_by() {
    let pairs =
        crate::fix_saves_each_measured_pair(&cases(), "_trl", FixId::FusedLogprobs, |id, s| {
            assert!(s.sft_fused_head(), "{id}");
        });
    assert_eq!(pairs, 4);
}
