//! Rank 0 of FSDP1 and FSDP2 runs over a 4-bit base stored in bf16 (`bnb_4bit_quant_storage`),
//! as TRL's SFTTrainer trains it ("sharded QLoRA": no `prepare_model_for_kbit_training`, LoRA in
//! bf16), measured with the harness under torch.distributed's fake process group
//! (`tests/data/reference/sharded_qlora/`): the quick and the settled plan against each measured
//! peak, reserved against PyTorch's caching allocator replayed over the measured step, each
//! rank's shards and quantization states against what the harness counted, and what the plan
//! says of a 4-bit base FSDP cannot flatten.

use lorafit::model::{plan, FsdpVersion, QuantStorage};
use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/sharded_qlora/cases.jsonl")
}

#[test]
fn sharded_qlora_ranks_are_planned_to_the_byte() {
    let mut versions = vec![];
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        assert_eq!(v["settings"]["quant_storage"], "bf16", "{id}");
        let m = crate::plan_measured_line(&v);
        assert_eq!(m.settings.quant_storage, QuantStorage::Bf16, "{id}");
        let op_by_op = match m.settings.parallel.fsdp_version {
            FsdpVersion::V1 => m.settings.fsdp1_op_by_op(&m.arch),
            FsdpVersion::V2 => m.settings.fsdp2_op_by_op(&m.arch),
        };
        assert!(op_by_op, "{id}: planned op by op");
        m.assert_to_the_byte(id);
        versions.push(m.settings.parallel.fsdp_version);
    }
    assert_eq!(versions.len(), 3);
    assert!(versions.contains(&FsdpVersion::V1) && versions.contains(&FsdpVersion::V2));
}

/// Each rank stores its shard of the packed 4-bit weights (half a byte per value, in bf16
/// tensors) with the rest of the model, and keeps every quantization state whole: the plan's
/// weights, quantization states and rotary buffers are what the harness found live before the
/// first step, and its weights are about the 4-bit model over the number of GPUs.
#[test]
fn each_rank_shards_the_4bit_weights_and_keeps_the_quant_states_whole() {
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        assert_eq!(
            m.quant_state_bytes(),
            u128::from(v["params"]["quant_state_bytes"].as_u64().expect("states")),
            "{id}: quantization states"
        );
        let weights = m.assert_rank_weights_are_the_baseline(id, &v);
        // The whole model: the decoder's Linear weights at half a byte per value, everything
        // else and the LoRA matrices in bf16.
        let a = &m.arch;
        let p = &m.settled.params;
        let linear = a.linear_weight_params_per_layer() * u128::from(a.num_hidden_layers);
        let whole = linear / 2 + (p.base_params - linear) * 2 + p.lora_params * 2;
        let world = v["settings"]["fsdp"]["world"].as_u64().expect("world") as f64;
        let ratio = weights as f64 / (whole as f64 / world);
        assert!(
            (0.99..1.05).contains(&ratio),
            "{id}: {ratio} of the 4-bit model over {world} GPUs"
        );
    }
}

/// Stored in uint8 (bitsandbytes' default), a 4-bit layer cannot be one flat parameter with its
/// bf16 norms: the plan says so and keeps the rank model; stored in the model's dtype it is
/// planned op by op and the plan says what each GPU keeps.
#[test]
fn the_plan_says_how_fsdp_holds_a_4bit_base() {
    let v = cases()
        .into_iter()
        .find(|v| v["settings"]["fsdp"]["version"] == 1)
        .expect("an FSDP1 case");
    let m = crate::plan_measured_line(&v);
    let notes = |p: &lorafit::model::Plan| p.notes.join("\n");
    assert!(
        notes(&m.quick).contains("sharded QLoRA"),
        "{}",
        notes(&m.quick)
    );
    let mut s = m.settings.clone();
    s.quant_storage = QuantStorage::Uint8;
    assert!(!s.fsdp1_op_by_op(&m.arch));
    let p = plan(&m.arch, &s).expect("plans");
    assert!(
        notes(&p).contains("refuses parameters of two dtypes")
            && notes(&p).contains("planned with the rank model"),
        "{}",
        notes(&p)
    );
    // prepare_model_for_kbit_training casts the norms to fp32: no longer one dtype per unit.
    let mut s = m.settings.clone();
    s.prepare_kbit = true;
    assert!(!s.fsdp1_op_by_op(&m.arch));
}
