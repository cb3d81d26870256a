//! Training methods beyond plain LoRA, against the measuring harness
//! (`tests/data/reference/methods/cases.jsonl`, measure.py's own output schema with PyTorch's
//! caching allocator replayed over each step in `replay`; `tests/data/reference/methods/METHOD.md`):
//! DoRA on 16-bit and 4-bit bases, with and without dropout and checkpointing; full fine-tuning
//! in bf16 and in fp32 with bf16 autocast, with and without checkpointing, tied and untied
//! embeddings; freeze tuning of the last and of the first layers.
//! Target (issue 24): allocated within ±3 % of the harness (median ≤ 1 %), reserved within ±3 %
//! of its allocator replay (median ≤ 1.5 %), the peak in the measured phase.

use lorafit::formats::catalog::resolve_model;
use lorafit::model::steptrace::Device;
use lorafit::model::{plan, plan_simulated, plan_simulated_on};
use serde_json::Value;

/// Cases in the committed file; a change to the data must change this number too.
const EXPECTED_CASES: usize = 21;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

#[test]
fn methods_within_tolerance_of_the_harness_and_its_replay() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/reference/methods/cases.jsonl"
    );
    let text = std::fs::read_to_string(path).expect("methods cases");
    let err = |got: u128, want: f64| (got as f64 - want) / want * 100.0;
    let mut rows = vec![];
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).expect("case line is JSON");
        let id = v["id"].as_str().expect("id").to_string();
        let arch = resolve_model(&v["model"]).expect("model resolves").value;
        let s = crate::harness_settings(&v["settings"]);
        let measured = v["result"]["peak_bytes"].as_f64().expect("peak_bytes");
        let reserved = v["replay"]["max_reserved"].as_f64().expect("max_reserved");
        let sim = plan_simulated_on(&arch, &s, Device::Emulated)
            .unwrap_or_else(|e| panic!("{id} does not plan: {e}"));
        // The quick plan (short runs extrapolated) is the full run's, on a real GPU (whose
        // AccumulateGrad adds a tied weight's second gradient in place, where the harness's
        // emulated device adds out of place).
        let quick = plan(&arch, &s).unwrap_or_else(|e| panic!("{id} does not plan: {e}"));
        let settled = plan_simulated(&arch, &s).expect("plans");
        assert_eq!(
            quick.peak_allocated_bytes, settled.peak_allocated_bytes,
            "{id}: quick vs settled"
        );
        assert!(
            sim.reserve_simulated,
            "{id}: reserved is not the allocator's"
        );
        // What trains: DoRA's magnitude vectors, every parameter, or the trained layers'.
        assert_eq!(
            sim.params.trainable_params,
            u128::from(
                v["params"]["trainable_params"]
                    .as_u64()
                    .expect("trainable_params")
            ),
            "{id}: trainable parameters"
        );
        assert_eq!(
            sim.peak_phase.name(),
            v["result"]["peak_phase"].as_str().expect("peak_phase"),
            "{id}: peak phase"
        );
        rows.push((
            id,
            err(sim.peak_allocated_bytes, measured),
            err(sim.peak_reserved_bytes, reserved),
            err(quick.peak_allocated_bytes, measured),
        ));
    }
    println!(
        "{:<48} {:>8} {:>8} {:>8}",
        "case", "alloc %", "res %", "GPU %"
    );
    for (id, a, r, q) in &rows {
        println!("{id:<48} {a:>+8.3} {r:>+8.3} {q:>+8.3}");
    }
    assert_eq!(rows.len(), EXPECTED_CASES, "methods case count");
    let mut alloc: Vec<f64> = rows.iter().map(|r| r.1.abs()).collect();
    let mut res: Vec<f64> = rows.iter().map(|r| r.2.abs()).collect();
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (max_a, max_r) = (max(&alloc), max(&res));
    let (med_a, med_r) = (median(&mut alloc), median(&mut res));
    println!("allocated: median {med_a:.3} %, max {max_a:.3} %; reserved: median {med_r:.3} %, max {max_r:.3} %");
    assert!(max_a <= 3.0 && med_a <= 1.0, "allocated target missed");
    assert!(max_r <= 3.0 && med_r <= 1.5, "reserved target missed");
}

fn catalog_arch(name: &str) -> lorafit::model::Architecture {
    lorafit::formats::catalog::find_model(name)
        .expect("catalog model")
        .arch
        .clone()
}

fn settings(pairs: &[(&str, &str)]) -> lorafit::model::Settings {
    let mut v = serde_json::Map::new();
    for (k, x) in pairs {
        v.insert((*k).into(), Value::String((*x).into()));
    }
    lorafit::formats::fields::settings_from_json(&Value::Object(v))
        .expect("valid settings")
        .value
}

fn peak_of(arch: &lorafit::model::Architecture, pairs: &[(&str, &str)]) -> lorafit::model::Plan {
    plan(arch, &settings(pairs)).unwrap_or_else(|e| panic!("{pairs:?} does not plan: {e}"))
}

/// What TRL's trainers do that the harness did not measure, held to what their code implies:
/// a trained base's reference is a second copy of its weights (resident through the step, so
/// the memory between steps grows by exactly the weights' bytes, and precomputing the
/// reference log-probs drops it); `batch` counts pairs for DPO, ORPO and SimPO but examples for
/// KTO; LLaMA-Factory's `stage: dpo` with `pref_loss: orpo` is ORPO; a disabled dropout keeps no
/// mask; the full fp32 logits (LLaMA-Factory, TRL 0.x) cost more than TRL's fused head.
#[test]
fn preference_methods_follow_their_trainers() {
    let a = catalog_arch("llama3.2-1b");
    let base = [("seq", "1024"), ("batch", "2")];
    let with = |extra: &[(&str, &str)]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        peak_of(&a, &v)
    };
    // The reference copy of a trained base: exactly one more copy of the weights between steps.
    let full_ref = with(&[("stage", "dpo"), ("finetuning_type", "full")]);
    let full_pre = with(&[
        ("stage", "dpo"),
        ("finetuning_type", "full"),
        ("precompute_ref_log_probs", "1"),
    ]);
    // (precomputed: the batch carries the reference log-probs instead, two [pairs] fp32)
    let weights = a.total_params() * 2; // bf16
    assert_eq!(
        full_ref.steady_state_bytes + 2 * 2 * 4 - full_pre.steady_state_bytes,
        weights,
        "a trained base's reference model is a frozen copy of its weights"
    );
    // With LoRA the reference is the same weights with the adapters off: nothing resident.
    let lora_ref = with(&[("stage", "dpo")]);
    let lora_pre = with(&[("stage", "dpo"), ("precompute_ref_log_probs", "1")]);
    assert_eq!(
        lora_ref.steady_state_bytes + 2 * 2 * 4,
        lora_pre.steady_state_bytes
    );
    assert!(lora_ref.peak_allocated_bytes >= lora_pre.peak_allocated_bytes);
    assert_eq!(lora_ref.peak_phase.name(), "ref_forward");
    // Pairs: DPO's two sequences per example peak above SFT's one; KTO's examples are one
    // sequence each, so below DPO with the same batch.
    let sft = with(&[]);
    let kto = with(&[("stage", "kto")]);
    assert!(lora_pre.peak_allocated_bytes > sft.peak_allocated_bytes);
    assert!(kto.peak_allocated_bytes < lora_ref.peak_allocated_bytes);
    // LLaMA-Factory spells ORPO as stage dpo + pref_loss orpo.
    let orpo = with(&[("stage", "orpo")]);
    let lf_orpo = with(&[("stage", "dpo"), ("pref_loss", "orpo")]);
    assert_eq!(orpo.peak_allocated_bytes, lf_orpo.peak_allocated_bytes);
    assert_eq!(orpo.peak_reserved_bytes, lf_orpo.peak_reserved_bytes);
    // TRL's disable_dropout: LoRA's dropout at p = 0 keeps no mask and no dropped copy.
    let d0 = with(&[("stage", "dpo"), ("lora_dropout", "0")]);
    let d5 = with(&[("stage", "dpo"), ("lora_dropout", "0.05")]);
    let kept = with(&[
        ("stage", "dpo"),
        ("lora_dropout", "0.05"),
        ("disable_dropout", "0"),
    ]);
    assert_eq!(d0.peak_allocated_bytes, d5.peak_allocated_bytes);
    assert!(kept.peak_allocated_bytes > d5.peak_allocated_bytes);
    // The full logits in fp32 (128256 × 4 bytes per scored position at least) against the
    // fused head's tiles.
    let full_logits = with(&[("stage", "dpo"), ("logits", "full")]);
    let logits_fp32 = 4 * 1024 * a.vocab_size as u128 * 4;
    assert!(
        full_logits.peak_allocated_bytes >= lora_ref.peak_allocated_bytes + logits_fp32 / 2,
        "full logits {} vs fused {}",
        full_logits.peak_allocated_bytes,
        lora_ref.peak_allocated_bytes
    );
}

/// Inputs a preference step cannot have are refused with the setting named.
#[test]
fn preference_settings_refuse_what_cannot_run() {
    let e = lorafit::formats::fields::settings_from_json(&serde_json::json!({
        "stage": "dpo", "seq": 512, "max_prompt_length": 512
    }))
    .expect_err("no completion");
    assert!(e.to_string().contains("max_prompt_length"), "{e}");
    let moe = catalog_arch("qwen3-30b-a3b");
    let e = plan(&moe, &settings(&[("stage", "dpo"), ("lora_dropout", "0")]))
        .expect_err("MoE preference");
    assert!(e.to_string().contains("stage"), "{e}");
    let bad = lorafit::formats::fields::settings_from_json(&serde_json::json!({"stage": "ppo"}));
    assert!(bad.is_err(), "an unknown stage is refused");
}

/// The LoRA variants the issue asks to accept, each with its memory effect: rsLoRA, LoRA+ and
/// the PiSSA / OLoRA initialisations change nothing in the step (and say so in a note); LoRA-FA
/// freezes every lora_A, so A's parameters leave the trainable count and the step no longer
/// keeps A's fp32 input (planned by the step program, matched event for event against the
/// harness's `lora_a_frozen` recordings in `tests/data/steptrace`).
#[test]
fn lora_variants_state_their_memory_effect() {
    let a = catalog_arch("llama3.1-8b");
    let base = peak_of(&a, &[("seq", "1024")]);
    for (k, v, says) in [
        ("use_rslora", "1", "rsLoRA"),
        ("loraplus_lr_ratio", "16", "LoRA+"),
        ("init_lora_weights", "pissa", "PiSSA"),
        ("init_lora_weights", "pissa_niter_4", "PiSSA"),
        ("init_lora_weights", "olora", "OLoRA"),
    ] {
        let p = peak_of(&a, &[("seq", "1024"), (k, v)]);
        assert_eq!(p.peak_allocated_bytes, base.peak_allocated_bytes, "{k}={v}");
        assert_eq!(p.peak_reserved_bytes, base.peak_reserved_bytes, "{k}={v}");
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains(says) && n.contains("memory effect")
                    || n.contains(says) && n.contains("nothing in the step")),
            "{k}={v}: {:?}",
            p.notes
        );
    }
    let fa = peak_of(&a, &[("seq", "1024"), ("lora_fa", "1")]);
    // A is r × in_features per adapted Linear: q, k, v, o, gate, up read hidden; down reads
    // intermediate.
    let r = 16u128;
    let (h, i) = (a.hidden_size as u128, a.intermediate_size as u128);
    let a_params = a.num_hidden_layers as u128 * r * (6 * h + i);
    assert_eq!(
        base.params.trainable_params - fa.params.trainable_params,
        a_params
    );
    assert!(fa.peak_allocated_bytes < base.peak_allocated_bytes);
    let e = lorafit::formats::fields::settings_from_json(&serde_json::json!({
        "init_lora_weights": "svd"
    }))
    .expect_err("unknown initialisation");
    assert!(e.to_string().contains("init_lora_weights"), "{e}");
    let e = lorafit::formats::fields::settings_from_json(&serde_json::json!({
        "finetuning_type": "full", "use_rslora": true
    }))
    .expect_err("rsLoRA without adapters");
    assert!(e.to_string().contains("use_rslora"), "{e}");
}
