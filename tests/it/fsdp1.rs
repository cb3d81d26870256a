//! Rank 0 of FSDP1 runs (`FullyShardedDataParallel` as accelerate 1.15 prepares it; a peft model
//! wrapped by the policy transformers' Trainer sets: a unit per layer and per LoRA matrix),
//! measured with the harness under torch.distributed's fake process group
//! (`tests/data/reference/fsdp1/`): the quick and the settled plan against each measured peak,
//! reserved against PyTorch's caching allocator replayed over the measured step (each
//! allocation on its CUDA stream), each rank's shards against what the harness counted, and the
//! FSDP1 set-ups the op-by-op step leaves to the rank model.

use lorafit::model::{plan, Component, FsdpVersion, Optimizer, Quant, Settings, Strategy};
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/fsdp1/cases.jsonl")
}

#[test]
fn fsdp1_ranks_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        assert_eq!(v["settings"]["fsdp"]["version"], 1, "{id}");
        let m = crate::plan_measured_line(&v);
        assert!(m.settings.fsdp1_op_by_op(&m.arch), "{id}: planned op by op");
        m.assert_to_the_byte(id);
        n += 1;
    }
    assert_eq!(n, 5);
}

/// Each rank stores its shard of every unit's flat parameter (the units' parameters flattened,
/// each aligned to 16 bytes, padded to a multiple of the GPUs): the plan's weights and the
/// rotary buffers (`inv_freq` and its original copy, 2 × 64 fp32 values for a head of 128) are
/// what the harness found live before the first step, about the whole model over the number of
/// GPUs.
#[test]
fn each_rank_holds_its_flat_shards() {
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        let weights = m.assert_rank_weights_are_the_baseline(id, &v);
        let world = v["settings"]["fsdp"]["world"].as_u64().expect("world") as f64;
        // The whole model: bf16 weights and fp32 LoRA matrices.
        let p = &m.settled.params;
        let whole = (p.base_params * 2 + p.lora_params * 4) as f64;
        let ratio = weights as f64 / (whole / world);
        assert!(
            (0.99..1.05).contains(&ratio),
            "{id}: {ratio} of the model over {world} GPUs"
        );
    }
}

/// Unlike FSDP2 under Trainer, FSDP1 gives a peft model's decoder layers units of their own:
/// over 8 GPUs Llama-2-7B's LoRA step holds about one gathered layer and the root at its peak,
/// not the decoder stack, and needs a fifth of the FSDP2 step's memory.
#[test]
fn fsdp1_gathers_a_layer_at_a_time() {
    let v = cases()
        .into_iter()
        .find(|v| v["id"] == "llama2-7b_fsdp1x8_lora_gc_s4096")
        .expect("case");
    let m = crate::plan_measured_line(&v);
    let comm: u128 = m
        .settled
        .terms
        .iter()
        .filter(|t| t.component == Component::CommBuffers)
        .map(|t| t.bytes)
        .sum();
    // Llama-2-7B's decoder layer in bf16, and its root (embedding, norm, lm_head).
    let layer: u128 = (4 * 4096 * 4096 + 3 * 4096 * 11008 + 2 * 4096) * 2;
    let root: u128 = (2 * 32000 * 4096 + 4096) * 2;
    assert!(
        comm >= root && comm <= root + 2 * layer + (1 << 24),
        "{comm}"
    );
    let fsdp2 = crate::jsonl("tests/data/reference/fsdp2/cases.jsonl")
        .into_iter()
        .find(|v| v["id"] == "llama2-7b_fsdp2x8_lora_gc_s4096")
        .expect("FSDP2 case");
    let (one, two) = (
        v["result"]["peak_bytes"].as_u64().expect("peak"),
        fsdp2["result"]["peak_bytes"].as_u64().expect("peak"),
    );
    assert!(one * 5 < two, "FSDP1 {one} B, FSDP2 {two} B");
}

/// The set-ups FSDP1's op-by-op step does not know are planned with the rank model, and say so.
#[test]
fn other_fsdp1_set_ups_keep_the_rank_model() {
    let a = lorafit::formats::catalog::find_model("llama2-7b")
        .expect("catalog")
        .arch
        .clone();
    let mut base = Settings {
        grad_ckpt: true,
        ..Settings::default()
    };
    base.parallel.gpus_per_node = 4;
    base.parallel.strategy = Strategy::FsdpFullShard;
    base.parallel.fsdp_version = FsdpVersion::V1;
    assert!(base.fsdp1_op_by_op(&a));
    let p = plan(&a, &base).expect("plans");
    assert!(
        p.notes.iter().any(|n| n.contains("peft's wrapping policy")),
        "{:?}",
        p.notes
    );
    for other in [
        Settings {
            quant: Some(Quant::Nf4),
            ..base.clone()
        },
        Settings {
            optimizer: Optimizer::Adafactor,
            ..base.clone()
        },
        Settings {
            use_dora: true,
            ..base.clone()
        },
    ] {
        assert!(!other.fsdp1_op_by_op(&a));
        let p = plan(&a, &other).expect("plans");
        assert!(
            p.notes
                .iter()
                .any(|n| n.contains("planned with the rank model")),
            "{:?}",
            p.notes
        );
    }
}
