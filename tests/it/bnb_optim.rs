//! Steps with bitsandbytes' AdamW as HF Trainer builds it (`adamw_bnb_8bit`, `paged_adamw_8bit`,
//! `paged_adamw_32bit`), measured with the harness (`tests/data/reference/bnb_optim/`): the
//! quick and the settled plan against each measured peak, the settled plan's reserved against
//! PyTorch's caching allocator replayed over the measured step, and a paged optimizer's managed
//! memory (outside the allocator) against what bitsandbytes asked `get_paged` for.

use lorafit::model::plan;
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/bnb_optim/cases.jsonl")
}

#[test]
fn bitsandbytes_adamw_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        let (q, st, r) = (m.quick_pct, m.settled_pct, m.reserved_pct);
        let (a, s, quick, settled) = (m.arch, m.settings, m.quick, m.settled);
        // The quick plan is a CUDA GPU's: a trained tied embedding takes two gradients (the
        // lookup's and lm_head's), which a GPU adds in place and the harness's emulated device
        // out of place (a third [vocab × hidden] buffer at the end of backward, its peak).
        let tied_trained = a.tie_word_embeddings && s.base_trained();
        assert!(tied_trained || q.abs() <= 0.01, "{id}: quick {q:+.3} %");
        assert!(st.abs() <= 0.01, "{id}: settled {st:+.3} %");
        assert!(r.abs() <= 0.01, "{id}: reserved {r:+.3} %");
        // Managed memory: what the plan puts outside the allocator besides the CUDA context.
        let context = plan(
            &a,
            &lorafit::model::Settings {
                optimizer: lorafit::model::Optimizer::AdamwTorchFused,
                ..s.clone()
            },
        )
        .expect("plans")
        .outside_allocator_bytes;
        for p in [&quick, &settled] {
            let paged = p.outside_allocator_bytes - context;
            let want = v["result"]["paged_state_bytes"].as_u64().unwrap_or(0);
            assert_eq!(paged, u128::from(want), "{id}: managed memory");
        }
        n += 1;
    }
    assert_eq!(n, 5);
}

/// The fix "a paged optimizer" keeps what bitsandbytes keeps in the allocator: a LoRA's small
/// tensors (under 1e5 values) are not paged, so the measured step with paged 8-bit AdamW holds
/// more in the allocator than nothing and less than the unpaged 8-bit one.
#[test]
fn paged_states_leave_the_allocator_only_when_large() {
    let by_id = |want: &str| {
        cases()
            .into_iter()
            .find(|v| v["id"] == want)
            .unwrap_or_else(|| panic!("{want}"))
    };
    let (paged, unpaged) = (
        by_id("llama2-7b_qlora_paged8"),
        by_id("llama2-7b_qlora_8bit"),
    );
    let states = |v: &Value| {
        v["result"]["at_peak"]["optimizer_states"]
            .as_u64()
            .expect("states")
    };
    assert!(states(&paged) > 0 && states(&paged) < states(&unpaged));
    let p = crate::plan_measured_line(&paged).settled;
    let planned: u128 = p
        .terms
        .iter()
        .filter(|t| t.component == lorafit::model::Component::OptimizerStates)
        .map(|t| t.bytes)
        .sum();
    assert_eq!(planned, u128::from(states(&paged)));
}
