//! Rank 0 of FSDP2 runs (`fully_shard` as accelerate 1.15 wraps a transformers model), measured
//! with the harness under torch.distributed's fake process group
//! (`tests/data/reference/fsdp2/`): the quick and the settled plan against each measured peak,
//! reserved against PyTorch's caching allocator replayed over the measured step (each
//! allocation on its CUDA stream), the per-GPU shards against what the harness counted, and the
//! doors that say `fsdp_version`.

use lorafit::formats::export::export;
use lorafit::formats::fields::settings_from_json;
use lorafit::formats::framework;
use lorafit::model::{plan, FsdpVersion, Strategy};
use serde_json::{json, Value};

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/fsdp2/cases.jsonl")
}

#[test]
fn fsdp2_ranks_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        crate::plan_measured_line(&v).assert_to_the_byte(id);
        n += 1;
    }
    assert_eq!(n, 5);
}

/// Each rank stores a shard of every parameter: the plan's weights and the rotary buffers
/// (`inv_freq` and its original copy, fp32: 2 × 64 values for a head of 128) are what the harness
/// found live before the first step (this rank's padded chunks of each first dimension), about
/// the whole model (the harness's `weight_bytes`, DTensors' global sizes) over the number of
/// GPUs.
#[test]
fn each_rank_holds_its_padded_shards() {
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let weights = crate::plan_measured_line(&v).assert_rank_weights_are_the_baseline(id, &v);
        let whole = v["params"]["weight_bytes"].as_u64().expect("weight bytes") as f64;
        let world = v["settings"]["fsdp"]["world"].as_u64().expect("world") as f64;
        let ratio = weights as f64 / (whole / world);
        assert!(
            (0.999..1.01).contains(&ratio),
            "{id}: {ratio} of the model over {world} GPUs"
        );
    }
}

/// Under transformers' Trainer a peft model's decoder layers share the root's unit: with LoRA
/// over 8 GPUs each rank gathers the whole decoder stack at the forward's start and holds it to
/// the end of backward, so the plan's communication buffers at the peak are the whole stack;
/// full fine-tuning gathers one layer at a time (a unit per layer), far less than the stack.
#[test]
fn trainer_gathers_a_peft_models_whole_stack() {
    let find = |id: &str| {
        cases()
            .into_iter()
            .find(|v| v["id"] == id)
            .unwrap_or_else(|| panic!("{id}"))
    };
    let comm = |v: &Value| -> u128 {
        crate::plan_measured_line(v)
            .settled
            .terms
            .iter()
            .filter(|t| t.component == lorafit::model::Component::CommBuffers)
            .map(|t| t.bytes)
            .sum()
    };
    // Llama-2-7B's 32 decoder layers in bf16: 32 × (4 × 4096² + 3 × 4096 × 11008) values.
    let stack = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) * 2;
    let lora = comm(&find("llama2-7b_fsdp2x8_lora_gc_s4096"));
    assert!(
        lora >= stack,
        "LoRA: gathered {lora} B < the stack {stack} B"
    );
    // Llama-3-8B trained in full over 8 GPUs gathers a layer (and its embedding or lm_head) at
    // a time: under a quarter of a 7B stack.
    let full = comm(&find("llama3-8b_fsdp2x8_full_gc_s2048"));
    assert!(full < stack / 4, "full fine-tuning: gathered {full} B");
}

/// `fsdp_version` through every door: the settings table (JSONL), axolotl's and accelerate's
/// configs, ms-swift's default; FSDP1 stays the default.
#[test]
fn fsdp_version_is_read_from_every_door() {
    let s = settings_from_json(&json!({"gpus_per_node": 4, "strategy": "fsdp", "fsdp_version": 2}))
        .expect("settings")
        .value;
    assert_eq!(s.parallel.fsdp_version, FsdpVersion::V2);
    let s = settings_from_json(&json!({"gpus_per_node": 4, "strategy": "fsdp"}))
        .expect("settings")
        .value;
    assert_eq!(s.parallel.fsdp_version, FsdpVersion::V1);
    assert!(settings_from_json(&json!({"strategy": "fsdp", "fsdp_version": 3})).is_err());
    let yaml = "base_model: meta-llama/Llama-2-7b-hf\nadapter: lora\nfsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n  fsdp_version: 2\n";
    let r = framework::read(yaml).expect("axolotl config");
    assert_eq!(r.settings.parallel.fsdp_version, FsdpVersion::V2);
    assert!(r.settings.parallel.strategy.is_fsdp());
}

/// A plan's exports say FSDP2 when the plan is FSDP2's, and read back to it.
#[test]
fn exports_carry_fsdp2() {
    let mut s = lorafit::model::Settings {
        grad_ckpt: true,
        ..Default::default()
    };
    s.parallel.gpus_per_node = 8;
    s.parallel.strategy = Strategy::FsdpFullShard;
    s.parallel.fsdp_version = FsdpVersion::V2;
    let arch = lorafit::formats::catalog::resolve_model(&json!("llama2-7b"))
        .expect("model")
        .value;
    let p = plan(&arch, &s).expect("plans");
    // LoRA under Trainer: the whole decoder stack gathered; full fine-tuning: a unit per layer.
    assert!(p
        .notes
        .iter()
        .any(|n| n.starts_with("FSDP2 (fully_shard) under transformers' Trainer")));
    let full = lorafit::model::Settings {
        finetuning_type: lorafit::model::FinetuningType::Full,
        ..s.clone()
    };
    let p = plan(&arch, &full).expect("plans");
    assert!(p
        .notes
        .iter()
        .any(|n| n.starts_with("FSDP2 (fully_shard) as accelerate wraps the model")));
    for format in ["accelerate", "axolotl"] {
        let text = export(format, "meta-llama/Llama-2-7b-hf", &arch, &s).expect("exports");
        assert!(text.contains("fsdp_version: 2"), "{format}: {text}");
    }
    let yaml = export("axolotl", "meta-llama/Llama-2-7b-hf", &arch, &s).expect("exports");
    let back = framework::read(&yaml).expect("reads back");
    assert_eq!(back.settings.parallel.fsdp_version, FsdpVersion::V2);
    s.parallel.fsdp_version = FsdpVersion::V1;
    let p = plan(&arch, &s).expect("plans");
    assert!(p.notes.iter().any(|n| n.starts_with("FSDP1 (")));
}
