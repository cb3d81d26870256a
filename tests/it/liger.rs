//! Steps with Liger-Kernel's RMSNorm, SwiGLU and RoPE (`liger_kernel`), measured with the harness
//! beside the same steps without them (`tests/data/reference/liger/`): each planned to the byte
//! (the quick and the settled plan against the measured peak, reserved against PyTorch's
//! caching allocator replayed over the measured step), and the fix "Liger kernels" saving what
//! the two measured steps differ by.

use lorafit::planning::fixes::FixId;
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/liger/cases.jsonl")
}

#[test]
fn liger_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        let (q, st, r) = (m.quick_pct, m.settled_pct, m.reserved_pct);
        assert!(q.abs() <= 0.01, "{id}: quick {q:+.3} %");
        assert!(st.abs() <= 0.01, "{id}: settled {st:+.3} %");
        assert!(r.abs() <= 0.01, "{id}: reserved {r:+.3} %");
        n += 1;
    }
    assert_eq!(n, 27);
}

/// Each measured pair (`ID` without, `ID_liger` with the three kernels): the fix the planner
/// offers for `ID` is the three kernels, and it saves exactly what the measurements differ by.
#[test]
fn the_liger_fix_saves_what_the_measured_steps_differ_by() {
    let pairs = crate::fix_saves_each_measured_pair(&cases(), "_liger", FixId::Liger, |id, s| {
        assert_eq!(s.liger, lorafit::model::Liger::ALL, "{id}");
    });
    assert_eq!(pairs, 11);
}

/// Liger's fused experts read the expert weights themselves: LoRA on them (`target_parameters`)
/// with Liger's SwiGLU is refused by name, and the plan without it is the fused experts'.
#[test]
fn liger_experts_refuse_lora_on_the_experts() {
    use lorafit::model::{plan, ExpertParam, Liger, Settings};
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("qwen3-30b-a3b"))
        .expect("model")
        .value;
    let s = Settings {
        liger: Liger::ALL,
        target_parameters: ExpertParam::ALL.to_vec(),
        lora_dropout: 0.0,
        ..Settings::default()
    };
    let err = plan(&arch, &s).expect_err("refused").to_string();
    assert!(
        err.contains("liger_kernel") && err.contains("LigerExperts"),
        "{err}"
    );
    let attention_only = Settings {
        target_parameters: vec![],
        ..s
    };
    assert!(plan(&arch, &attention_only).is_ok());
}

/// On Mixtral Liger costs memory: its fused experts' backward zeroes both expert weights'
/// gradients whole (2.8 GB a layer), more than its kernels save in a checkpointed step. The
/// measured step with it is the higher one, planned so, and the planner does not offer it.
#[test]
fn liger_on_mixtral_costs_memory_and_is_not_offered() {
    let cases = cases();
    let id = "mixtral-8x7b_lora_qkvo_gc_s4096";
    let without = crate::case_of(cases.clone(), id);
    let with = crate::case_of(cases, &format!("{id}_liger"));
    let peak = |v: &Value| v["result"]["peak_bytes"].as_u64().expect("peak");
    assert!(peak(&with) > peak(&without) + (2u64 << 30));
    let m = crate::plan_measured_line(&without);
    let fixes = lorafit::planning::fixes::suggest(&m.arch, &m.settings, 1u128 << 50, true);
    assert!(fixes.iter().all(|f| f.id != FixId::Liger));
    let w = crate::plan_measured_line(&with);
    assert!(w.settled.peak_allocated_bytes > m.settled.peak_allocated_bytes);
}
