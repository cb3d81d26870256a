//! transformers 4's per-expert layout of mixture-of-experts models (`experts_layout =
//! per_expert`): every expert projection and the router an `nn.Linear`, which 4-bit loading
//! quantizes. Checked against the module list written out here from Mixtral's config.json, and
//! against how a measured run's transformers version selects it.

use lorafit::formats::catalog;
use lorafit::formats::jsonl::estimate_line;
use lorafit::model::{plan, ExpertParam, ExpertsLayout, Quant, Settings, Target};

fn mixtral_qlora(layout: ExpertsLayout) -> Settings {
    let mut s = Settings {
        batch: 1,
        seq: 512,
        targets: vec![Target::Q, Target::K, Target::V, Target::O],
        experts_layout: layout,
        ..Settings::default()
    };
    s.set_base_weights("nf4");
    s.double_quant = true;
    // peft's own QLoRA recipe: prepare_model_for_kbit_training upcasts what stays unquantized.
    s.prepare_kbit = true;
    s
}

fn component(p: &lorafit::model::Plan, key: &str) -> u128 {
    p.breakdown
        .iter()
        .filter(|c| c.key == key)
        .map(|c| c.bytes)
        .sum()
}

#[test]
fn per_expert_linears_are_quantized_like_any_linear() {
    let a = catalog::find_model("mixtral-8x7b").unwrap().arch.clone();
    let s = mixtral_qlora(ExpertsLayout::PerExpert);
    assert_eq!(s.quant, Some(Quant::Nf4));
    let p = plan(&a, &s).expect("plans");
    // Every Linear of the base model, from config.json: hidden 4096, 32 query and 8 key/value
    // heads of 128, expert width 14336, 8 experts, 32 layers, vocabulary 32000.
    let (h, kv, i, e, layers, vocab) = (4096u128, 1024u128, 14336u128, 8u128, 32u128, 32000u128);
    let mut linears: Vec<u128> = vec![];
    for _ in 0..layers {
        linears.extend([h * h, h * kv, h * kv, h * h, h * e]); // q, k, v, o, router
        for _ in 0..e {
            linears.extend([h * i, h * i, i * h]); // w1, w3, w2
        }
    }
    let packed: u128 = linears.iter().map(|n| n.div_ceil(2)).sum();
    // bitsandbytes double quantization: a uint8 absmax per 64 weights, an fp32 one per 256
    // blocks, and the code tables (16 + 256 + 1 fp32) per module.
    let state: u128 = linears
        .iter()
        .map(|n| {
            let blocks = n.div_ceil(64);
            blocks + blocks.div_ceil(256) * 4 + 273 * 4
        })
        .sum();
    // Embeddings, lm_head and the norms stay unquantized, in fp32 after
    // prepare_model_for_kbit_training.
    let other = (2 * vocab * h + (2 * layers + 1) * h) * 4;
    let frozen = component(&p, "frozen_weights") + component(&p, "frozen_experts");
    assert_eq!(frozen, packed + other);
    assert_eq!(component(&p, "quant_state"), state);
    // The fused layout of transformers 5 keeps the experts unquantized: 8× the bytes (fp32).
    let fused = plan(&a, &mixtral_qlora(ExpertsLayout::Fused)).unwrap();
    assert_eq!(
        component(&fused, "frozen_experts"),
        a.expert_params() * 4,
        "fused experts in fp32"
    );
    assert!(p.peak_allocated_bytes * 3 < fused.peak_allocated_bytes);
    // Its own notes say which layout was planned.
    assert!(p
        .notes
        .iter()
        .any(|n| n.starts_with("transformers 4 layout")));
    // The step program runs this layout too: the settled plan replays its sequence.
    let sim = lorafit::model::plan_simulated(&a, &s).unwrap();
    assert!(sim.reserve_simulated);
    assert_eq!(
        component(&sim, "frozen_weights") + component(&sim, "frozen_experts"),
        frozen
    );
}

#[test]
fn unquantized_per_expert_weights_stay_in_the_load_dtype() {
    // fp32 weights under bf16 autocast: the experts' outputs are bf16, their weights (and the
    // routers') stay fp32 — every base parameter 4 bytes.
    let a = catalog::find_model("mixtral-8x7b").unwrap().arch.clone();
    let s = Settings {
        dtype: lorafit::model::Dtype::Fp32,
        autocast: Some(lorafit::model::Dtype::Bf16),
        ..mixtral_qlora(ExpertsLayout::PerExpert)
    };
    let s = Settings { quant: None, ..s };
    let p = plan(&a, &s).expect("plans");
    let frozen = component(&p, "frozen_weights") + component(&p, "frozen_experts");
    assert_eq!(frozen, a.total_params() * 4);
}

#[test]
fn per_expert_layout_refuses_what_it_does_not_model() {
    let a = catalog::find_model("mixtral-8x7b").unwrap().arch.clone();
    let all_linear = Settings {
        experts_layout: ExpertsLayout::PerExpert,
        ..Settings::default()
    };
    let e = plan(&a, &all_linear).unwrap_err().to_string();
    assert!(e.contains("attention projections (q, k, v, o)"), "{e}");
    let adapted = Settings {
        target_parameters: vec![ExpertParam::GateUp],
        lora_dropout: 0.0,
        ..mixtral_qlora(ExpertsLayout::PerExpert)
    };
    let e = plan(&a, &adapted).unwrap_err().to_string();
    assert!(e.contains("target_parameters"), "{e}");
    let gpt = catalog::find_model("gpt-oss-20b").unwrap().arch.clone();
    let e = plan(&gpt, &mixtral_qlora(ExpertsLayout::PerExpert))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("fused 3-D parameters in every transformers release"),
        "{e}"
    );
    // A dense model has no experts: the layout changes nothing.
    let dense = catalog::find_model("llama2-7b").unwrap().arch.clone();
    assert_eq!(
        plan(&dense, &all_linear).unwrap().peak_allocated_bytes,
        plan(&dense, &Settings::default())
            .unwrap()
            .peak_allocated_bytes
    );
}

#[test]
fn a_measured_runs_transformers_version_selects_its_layout() {
    let line = |software: &str, extra: &str| {
        format!(
            r#"{{"id": "x", "model": "mixtral-8x7b", "software": {software}, "settings": {{"quant": "nf4", "dtype": "bf16", "batch": 1, "seq": 512, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]{extra}}}}}"#
        )
    };
    let notes = |l: String| estimate_line(&l).map_err(|e| e.1).unwrap().1.notes;
    let per_expert = |n: &[String]| n.iter().any(|n| n.starts_with("transformers 4 layout"));
    assert!(per_expert(&notes(line(
        r#"{"transformers": "4.48.1"}"#,
        ""
    ))));
    assert!(!per_expert(&notes(line(
        r#"{"transformers": "5.24.0"}"#,
        ""
    ))));
    assert!(!per_expert(&notes(line("{}", ""))));
    // A layout the line chooses wins over its version.
    assert!(!per_expert(&notes(line(
        r#"{"transformers": "4.48.1"}"#,
        r#", "experts_layout": "fused""#
    ))));
}
