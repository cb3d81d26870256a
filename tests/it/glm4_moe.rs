//! GLM-4.5 (`glm4_moe`) against the measuring harness (`tests/data/reference/glm4_moe/`:
//! GLM-4.5-Air at full depth, LoRA on q, k, v, o, with and without checkpointing): allocated
//! (quick and settled) and reserved to the byte, the parameter counts, and the catalog's entry
//! as the measured model. And what peft 0.21 makes of a target list that names the MLP
//! projections on the MoE families transformers 5 converts with the `qwen2_moe` pattern: the
//! names reach the fused experts (`model::peft_targets`), with the errors peft raises.
//! Target (issue 23): ±3 %.

use lorafit::formats::catalog::find_model;
use lorafit::model::arch::Target;
use lorafit::model::{plan, PlanError, Settings};
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/glm4_moe/cases.jsonl")
}

#[test]
fn glm45_air_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        m.assert_to_the_byte(id);
        let p = &v["params"];
        let trainable = p["trainable_params"].as_u64().expect("trainable");
        assert_eq!(
            m.arch.total_params(),
            u128::from(p["total_params"].as_u64().expect("total") - trainable),
            "{id}: base parameters"
        );
        assert_eq!(
            m.settled.params.trainable_params,
            u128::from(trainable),
            "{id}: trainable parameters"
        );
        assert_eq!(
            m.settled.peak_phase.name(),
            v["result"]["peak_phase"].as_str().expect("peak_phase"),
            "{id}: peak phase"
        );
        n += 1;
    }
    assert_eq!(n, 3);
}

/// The catalog's GLM-4.5-Air is the measured model: the same parameters and the same plan.
#[test]
fn the_catalog_glm45_air_is_the_measured_model() {
    let v = &cases()[0];
    let own = lorafit::formats::catalog::resolve_model(&v["model"])
        .expect("imports")
        .value;
    let cat = &find_model("glm4.5-air").expect("in the catalog").arch;
    assert_eq!(cat.total_params(), own.total_params());
    let mut settings = v["settings"].clone();
    settings["target_modules"] = v["target_modules_list"].clone();
    let s = crate::harness_settings(&settings);
    assert_eq!(
        plan(cat, &s).expect("plans").peak_allocated_bytes,
        plan(&own, &s).expect("plans").peak_allocated_bytes
    );
}

fn with_targets(targets: &[Target], dropout: f64) -> Settings {
    Settings {
        targets: targets.to_vec(),
        lora_dropout: dropout,
        seq: 256,
        ..Settings::default()
    }
}

/// peft 0.21 maps `gate_proj` + `up_proj` onto the experts' `gate_up_proj` at twice the rank,
/// `down_proj` onto their `down_proj`, and adapts no Linear layer named so (the recording
/// `glm_all` in `tests/data/steptrace` is generated event for event); ParamWrapper refuses
/// dropout, and one of the fused pair alone is refused. A family without the conversion
/// (Qwen3.5-MoE) adapts its shared expert's Linear layers instead.
#[test]
fn mlp_names_reach_the_fused_experts_as_peft_maps_them() {
    use Target::*;
    let glm = &find_model("glm4.5-air").expect("in the catalog").arch;
    let attn = plan(glm, &with_targets(&[Q, K, V, O], 0.0)).expect("plans");
    let all = plan(glm, &with_targets(&[Q, K, V, O, Gate, Up, Down], 0.0)).expect("plans");
    // Per MoE layer: gate_up_proj at rank 32 (lora_A [32·E, H], lora_B [2I, 32·E]) and
    // down_proj at rank 16 (lora_A [16·E, I], lora_B [H, 16·E]); nothing on the dense layer's
    // or the shared expert's MLP.
    let (e, h, i, r) = (128u128, 4096u128, 1408u128, 16u128);
    let per_layer = 2 * r * e * (h + 2 * i) + r * e * (i + h);
    assert_eq!(
        all.params.trainable_params - attn.params.trainable_params,
        45 * per_layer
    );
    for (targets, field) in [
        (&[Q, K, V, O, Gate, Up, Down][..], "lora_dropout"),
        (&[Q, Gate][..], "target_modules"),
        (&[Q, Up, Down][..], "target_modules"),
    ] {
        let dropout = if field == "lora_dropout" { 0.05 } else { 0.0 };
        match plan(glm, &with_targets(targets, dropout)) {
            Err(PlanError::InvalidSetting { field: f, why }) => {
                assert_eq!(f, field, "{targets:?}: {why}");
                assert!(why.contains("peft"), "{why}");
            }
            other => panic!("{targets:?}: expected a refusal, got {other:?}"),
        }
    }
    let q35 = &find_model("qwen3.5-35b-a3b").expect("in the catalog").arch;
    let with_mlp = plan(q35, &with_targets(&[Q, Gate, Up, Down], 0.05)).expect("plans");
    let without = plan(q35, &with_targets(&[Q], 0.05)).expect("plans");
    assert!(with_mlp.params.trainable_params > without.params.trainable_params);
}
