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
            id.ends_with("_trl") || id.ends_with("_trl_col"),
            "{id}: the step's head"
        );
        assert_eq!(
            m.settings.completion_only_loss,
            id.ends_with("_trl_col"),
            "{id}: the scored tokens"
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
    assert_eq!(n, 11);
}

/// A prompt-completion dataset under `completion_only_loss` (`ID_trl_col`, 3 of every 4 tokens a
/// prompt): the fused head gathers and scores only the completions, yet the measured step peaks
/// where the full scoring's does, to the byte (the head's tiles, not its per-token outputs, are
/// what it holds most of); the plans say the same, and their note says what was not scored.
#[test]
fn completion_only_scoring_moves_the_head_not_the_peak() {
    let all = cases();
    let mut pairs = 0;
    for col in all
        .iter()
        .filter(|v| v["id"].as_str().unwrap().ends_with("_col"))
    {
        let id = col["id"].as_str().unwrap();
        let full = all
            .iter()
            .find(|v| v["id"] == id.trim_end_matches("_col"))
            .expect("the same step scoring every token");
        let peak = |v: &Value| v["result"]["peak_bytes"].as_u64().unwrap();
        assert_eq!(peak(col), peak(full), "{id}: measured peaks");
        let (a, b) = (
            crate::plan_measured_line(col).settled,
            crate::plan_measured_line(full).settled,
        );
        assert_eq!(a.peak_allocated_bytes, b.peak_allocated_bytes, "{id}");
        let prompt = col["settings"]["trl_sft_prompt_len"].as_u64().unwrap();
        assert!(
            a.notes.iter().any(|n| n.contains(&format!(
                "the {prompt} prompt tokens of each sample are not scored"
            ))),
            "{id}: {:?}",
            a.notes
        );
        pairs += 1;
    }
    assert_eq!(pairs, 2);
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
