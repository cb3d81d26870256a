//! Cut cross-entropy (`fused_ce: cce`, axolotl's `cut_cross_entropy: true`), measured with the
//! harness beside the same steps without it (`tests/data/reference/cce/`): each planned to the
//! byte, the fix "cut cross-entropy" saving what the two measured steps differ by, every door
//! reading and writing the setting, and the steps its backward refuses refused by name. The
//! two-layer recordings `cce*` of `tests/data/steptrace` check the op event by event
//! (`reserved::generated_sequences_equal_two_layer_recordings`).

use lorafit::model::{FusedCe, Settings};
use lorafit::planning::fixes::FixId;
use serde_json::{json, Value};

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/cce/cases.jsonl")
}

#[test]
fn cut_cross_entropy_steps_are_planned_to_the_byte() {
    let cases = cases();
    assert!(cases
        .iter()
        .any(|v| v["settings"]["cce"] == Value::Bool(true)));
    assert_eq!(crate::assert_planned_to_the_byte(&cases), 12);
}

/// Each measured pair (`ID` without, `ID_cce` with it): the planner offers cut cross-entropy for
/// `ID`, and the fix saves exactly what the measurements differ by.
#[test]
fn the_cut_cross_entropy_fix_saves_what_the_measured_steps_differ_by() {
    let pairs = crate::fix_saves_each_measured_pair(&cases(), "_cce", FixId::Cce, |id, s| {
        assert_eq!(s.fused_ce, FusedCe::Cce, "{id}");
    });
    assert_eq!(pairs, 6);
}

/// The setting through every door: JSONL (a boolean is Liger's, as before cut cross-entropy was
/// planned), links, the CLI, axolotl's plugin key read and written back, the exports of the
/// frameworks without a switch for it saying so; an unknown value is an error naming the key.
#[test]
fn cut_cross_entropy_is_read_and_written_by_every_door() {
    use lorafit::formats::{export::export, fields::settings_from_json, framework};
    for (v, want) in [
        (json!(true), FusedCe::Liger),
        (json!(false), FusedCe::Off),
        (json!("liger"), FusedCe::Liger),
        (json!("cce"), FusedCe::Cce),
        (json!("cut_cross_entropy"), FusedCe::Cce),
    ] {
        let s = settings_from_json(&json!({ "fused_ce": v }))
            .expect("reads")
            .value;
        assert_eq!(s.fused_ce, want, "{v}");
    }
    let err = settings_from_json(&json!({"fused_ce": "chunked"})).expect_err("refused");
    assert!(err.to_string().contains("fused_ce"), "{err}");
    // A link keeps it.
    let mut st = lorafit::web::link::decode("").0;
    st.settings.fused_ce = FusedCe::Cce;
    let back = lorafit::web::link::decode(&lorafit::web::link::encode(&st));
    assert_eq!(back.0.settings.fused_ce, FusedCe::Cce, "{:?}", back.1);
    // axolotl's plugin key, and its export read back.
    let ax = "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nplugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\ncut_cross_entropy: true\n";
    let r = framework::read(ax).expect("reads");
    assert_eq!(r.settings.fused_ce, FusedCe::Cce);
    assert!(r.used.iter().any(|u| u.setting == "fused_ce"));
    let arch = lorafit::formats::catalog::resolve_model(&json!("llama2-7b"))
        .expect("model")
        .value;
    let s = Settings {
        fused_ce: FusedCe::Cce,
        ..Settings::default()
    };
    let yml = export("axolotl", "meta-llama/Llama-2-7b-hf", &arch, &s).expect("exports");
    assert!(yml.contains("CutCrossEntropyPlugin"), "{yml}");
    assert_eq!(
        framework::read(&yml).expect("reads back").settings.fused_ce,
        FusedCe::Cce
    );
    let py = export("python", "meta-llama/Llama-2-7b-hf", &arch, &s).expect("exports");
    assert!(py.contains("model = cce_patch(model)"), "{py}");
    assert!(!py.contains("liger"), "{py}");
    for format in ["llama-factory", "ms-swift"] {
        let text = export(format, "meta-llama/Llama-2-7b-hf", &arch, &s).expect("exports");
        assert!(text.contains("no switch for"), "{format}: {text}");
    }
}

/// Its backward asserts a 16-bit head and hidden states: an fp32 model, and a 4-bit base whose
/// head `prepare_model_for_kbit_training` upcast, are refused by name, the latter with what
/// axolotl does instead; the fix is not offered there.
#[test]
fn an_fp32_head_is_refused_with_its_reason() {
    use lorafit::model::{plan, Dtype, Quant};
    let arch = lorafit::formats::catalog::resolve_model(&json!("llama3-8b"))
        .expect("model")
        .value;
    let qlora = Settings {
        quant: Some(Quant::Nf4),
        prepare_kbit: true,
        autocast: Some(Dtype::Bf16),
        grad_ckpt: true,
        ..Settings::default()
    };
    let fp32 = Settings {
        dtype: Dtype::Fp32,
        autocast: Some(Dtype::Bf16),
        ..Settings::default()
    };
    for (s, needle) in [
        (&qlora, "prepare_kbit false"),
        (&fp32, "bf16 or fp16 weights"),
    ] {
        let with = Settings {
            fused_ce: FusedCe::Cce,
            ..s.clone()
        };
        let err = plan(&arch, &with).expect_err("refused").to_string();
        assert!(err.contains("fused_ce") && err.contains(needle), "{err}");
        let fixes = lorafit::planning::fixes::suggest(&arch, s, 1u128 << 50, true);
        assert!(!fixes.iter().any(|f| f.id == FixId::Cce));
    }
    let unprepared = Settings {
        prepare_kbit: false,
        fused_ce: FusedCe::Cce,
        ..qlora
    };
    assert!(plan(&arch, &unprepared).is_ok());
}
