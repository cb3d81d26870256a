//! DistributedDataParallel, one rank (`steptrace/program/ddp.rs`): the first step of rank 0 as
//! the harness measured it (`ddp` in `tests/data/steptrace/cases.jsonl`), event by event, and
//! what the reducer does after it, from PyTorch's source.

use serde_json::Value;
use std::path::PathBuf;

fn ddp_cases() -> Vec<Value> {
    crate::jsonl("tests/data/steptrace/cases.jsonl")
        .into_iter()
        .filter(|c| c["settings"]["ddp"].is_object())
        .collect()
}

#[test]
fn ddp_first_steps_equal_the_recordings() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/steptrace");
    let cases = ddp_cases();
    for case in &cases {
        let id = case["id"].as_str().expect("id");
        crate::reserved::assert_matches_recording(
            id,
            case,
            &dir.join(format!("{id}.events.json.gz")),
        );
    }
    assert_eq!(cases.len(), 5, "DDP recordings");
}

fn recorded_events(id: &str) -> Vec<Value> {
    use flate2::read::GzDecoder;
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/data/reference/ddp/{id}.events.json.gz"));
    let f = std::fs::File::open(&p).expect("events file");
    let v: Value = serde_json::from_reader(GzDecoder::new(f)).expect("events JSON");
    v.as_array().expect("event list").clone()
}

/// The reducer after the first step, which the emulated device cannot run (its rebuild and its
/// used-parameter map read tensors): real runs of the same code on the CPU
/// (`tests/data/reference/ddp/`), whose allocations on the parameters' device are the GPU's.
/// Without `find_unused_parameters` the second forward rebuilds the buckets in the order the
/// first backward made the gradients (1 MiB, then 25 MiB); with it the buckets are 1 and 25 MiB
/// from the start, reversed, and the loss and logits are cloned after each forward.
#[test]
fn the_reducer_allocates_what_real_runs_allocate() {
    use lorafit::model::steptrace::{generate_on, Device, Event, What};
    let cases = crate::jsonl("tests/data/reference/ddp/cases.jsonl");
    for case in &cases {
        let id = case["id"].as_str().expect("id");
        let recorded = recorded_events(id);
        let bytes_of = |rid: u64| {
            recorded
                .iter()
                .find(|e| e[0] == "a" && e[1] == rid)
                .map(|e| {
                    (
                        e[2].as_u64().unwrap(),
                        e[3].as_str().unwrap().to_string(),
                        e[4].as_u64().unwrap(),
                    )
                })
                .unwrap_or_else(|| panic!("{id}: no allocation {rid}"))
        };
        let want: Vec<(u64, String, u64)> = case["reducer_device_allocations"]
            .as_array()
            .expect("ids")
            .iter()
            .map(|r| bytes_of(r.as_u64().expect("id")))
            .collect();
        let arch = lorafit::formats::catalog::resolve_model(&case["model"])
            .expect("model")
            .value;
        let s = crate::harness_settings(&case["settings"]);
        let t = generate_on(&arch, &s, Device::Cuda).expect("generates");
        let mut got = vec![];
        let mut first_forward = vec![];
        let phases = lorafit::model::steptrace::anatomy::event_phases(&t);
        for (e, (step, p)) in t.events.iter().zip(phases) {
            if let Event::Alloc { id: sid, bytes, .. } = *e {
                if t.labels[sid as usize].what == What::CommBucket {
                    got.push((bytes, p.name().to_string(), u64::from(step)));
                }
                if step == 1 && p.name() == "forward" {
                    first_forward.push(bytes);
                }
            }
        }
        assert_eq!(got, want, "{id}: the reducer's allocations on the device");
        // The first forward's last two allocations: the clones of the loss and the logits
        // when the outputs are cloned, as recorded.
        let rec_forward: Vec<u64> = recorded
            .iter()
            .filter(|e| e[0] == "a" && e[3] == "forward" && e[4] == 1)
            .map(|e| e[2].as_u64().unwrap())
            .collect();
        let tail = |v: &[u64]| v[v.len() - 2..].to_vec();
        assert_eq!(
            tail(&first_forward),
            tail(&rec_forward),
            "{id}: the first forward's end"
        );
        let logits = arch.vocab_size as u64 * s.seq * s.batch * 2;
        assert_eq!(
            tail(&first_forward) == [4, logits],
            case["outputs_cloned"] == true,
            "{id}: the outputs cloned"
        );
    }
    assert_eq!(cases.len(), 2);
}

/// Full-depth first steps of rank 0 (`tests/data/reference/ddp/first_steps.jsonl`, the harness
/// and PyTorch's allocator replayed over its sequence): the planned sequence up to the second
/// step peaks at the measured live bytes, and the caching allocator over it at the replay's
/// allocated and reserved bytes.
#[test]
fn full_depth_first_steps_are_planned_to_the_byte() {
    use lorafit::model::steptrace::{generate_exact_on, replay, Device, Event};
    let cases = crate::jsonl("tests/data/reference/ddp/first_steps.jsonl");
    for case in &cases {
        let id = case["id"].as_str().expect("id");
        let arch = lorafit::formats::catalog::resolve_model(&case["model"])
            .expect("model")
            .value;
        let s = crate::harness_settings(&case["settings"]);
        let mut t = generate_exact_on(&arch, &s, Device::Emulated).expect("generates");
        t.events
            .truncate(crate::second_step_start(&t).expect("a second step"));
        let (mut live, mut peak) = (0u64, 0u64);
        let mut size = std::collections::HashMap::new();
        for e in &t.events {
            match *e {
                Event::Alloc { id, bytes, .. } => {
                    size.insert(id, bytes);
                    live += bytes;
                    peak = peak.max(live);
                }
                Event::Free { id } => live -= size[&id],
            }
        }
        let m = &case["measured"];
        assert_eq!(peak, m["peak_bytes"].as_u64().unwrap(), "{id}: live peak");
        let sim = replay(&t, &Default::default());
        assert_eq!(
            sim.peak_allocated,
            m["max_allocated"].as_u64().unwrap(),
            "{id}: allocated"
        );
        assert_eq!(
            sim.peak_reserved,
            m["max_reserved"].as_u64().unwrap(),
            "{id}: reserved"
        );
    }
    assert_eq!(cases.len(), 2);
}

/// Every door reads the DDP settings by Trainer's names: a TrainingArguments JSON (and the
/// YAMLs that pass them on), LLaMA-Factory's own choice for LoRA (assumed, with its source),
/// and the exports of a DDP plan write them back.
#[test]
fn ddp_settings_are_read_and_written_by_every_door() {
    use lorafit::formats::framework;
    let r = framework::read(
        r#"{"per_device_train_batch_size": 2, "ddp_find_unused_parameters": false, "ddp_bucket_cap_mb": 100, "ddp_broadcast_buffers": false}"#,
    )
    .expect("reads");
    assert_eq!(r.settings.ddp_find_unused_parameters, Some(false));
    assert_eq!(r.settings.ddp_bucket_cap_mb, Some(100));
    assert!(!r.settings.ddp_broadcast_buffers);
    assert!(r.ignored.is_empty(), "{:?}", r.ignored);
    // LLaMA-Factory: off for LoRA when the YAML does not say (hparams/parser.py).
    let lf = framework::read(
        "model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: sft\nfinetuning_type: lora\n",
    )
    .expect("reads");
    assert_eq!(lf.settings.ddp_find_unused_parameters, Some(false));
    assert!(lf
        .assumed
        .iter()
        .any(|u| u.setting == "ddp_find_unused_parameters" && u.key.contains("LLaMA-Factory")));
    // Trainer's own default: on for a peft model, and for full tuning only without checkpointing.
    let mut s = lorafit::model::Settings::default();
    assert!(s.ddp_finds_unused());
    s.finetuning_type = lorafit::model::FinetuningType::Full;
    s.grad_ckpt = true;
    assert!(!s.ddp_finds_unused());
    // The exports of a DDP plan on two GPUs.
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("llama2-7b"))
        .expect("model")
        .value;
    let mut s = lorafit::model::Settings::default();
    s.parallel.strategy = lorafit::model::Strategy::Ddp;
    s.parallel.gpus_per_node = 2;
    s.ddp_bucket_cap_mb = Some(50);
    for (format, line) in [
        ("python", "ddp_bucket_cap_mb=50,"),
        ("llama-factory", "ddp_find_unused_parameters: true"),
        ("axolotl", "ddp_bucket_cap_mb: 50"),
        ("ms-swift", "--ddp_bucket_cap_mb 50"),
    ] {
        let text = lorafit::formats::export::export(format, "meta-llama/Llama-2-7b-hf", &arch, &s)
            .expect("exports");
        assert!(text.contains(line), "{format}: {text}");
    }
}

/// The plan says what DDP adds and what it leaves out, in both languages: each combination of
/// the search for unused parameters (set, or Trainer's choice for a peft or a full model), the
/// buffers' broadcast, and TRL's trainers.
#[test]
fn the_ddp_note_is_said_in_both_languages() {
    use lorafit::model::{plan, FinetuningType, Settings, Stage, Strategy};
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("llama3-8b"))
        .expect("model")
        .value;
    let mut base = Settings::default();
    base.parallel.strategy = Strategy::Ddp;
    base.parallel.gpus_per_node = 2;
    let mut variants = vec![base.clone()];
    let mut v = base.clone();
    v.ddp_find_unused_parameters = Some(false);
    v.ddp_broadcast_buffers = false;
    variants.push(v);
    let mut v = base.clone();
    v.finetuning_type = FinetuningType::Full;
    v.grad_ckpt = true;
    variants.push(v);
    let mut v = base.clone();
    v.stage = Stage::Dpo;
    variants.push(v);
    for s in &variants {
        let p = plan(&arch, s).expect("plans");
        let note = p
            .notes
            .iter()
            .find(|n| n.starts_with("DistributedDataParallel"))
            .expect("a DDP note");
        assert!(lorafit::web::i18n::has(note), "no Chinese for: {note}");
    }
    // One GPU has no DDP note.
    let p = plan(&arch, &Settings::default()).expect("plans");
    assert!(!p
        .notes
        .iter()
        .any(|n| n.starts_with("DistributedDataParallel")));
}

/// The plan's quick figures (the program's short runs) are those of the whole run, simulated:
/// DDP's construction, rebuild and clones repeat nothing per layer that the short runs miss.
#[test]
fn quick_and_simulated_plans_agree_under_ddp() {
    use lorafit::model::{plan, plan_simulated, FinetuningType, Settings, Strategy};
    for (model, full) in [
        ("llama2-7b", false),
        ("qwen2.5-7b", false),
        ("llama3.2-1b", true),
    ] {
        let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!(model))
            .expect("model")
            .value;
        for unused in [false, true] {
            let mut s = Settings::default();
            s.parallel.strategy = Strategy::Ddp;
            s.parallel.gpus_per_node = 4;
            s.ddp_find_unused_parameters = Some(unused);
            if full {
                s.finetuning_type = FinetuningType::Full;
                s.grad_ckpt = true;
            }
            let quick = plan(&arch, &s).expect("plans");
            let sim = plan_simulated(&arch, &s).expect("simulates");
            assert_eq!(
                quick.peak_allocated_bytes, sim.peak_allocated_bytes,
                "{model} full {full} unused {unused}"
            );
        }
    }
}

/// Several GPUs get their own fixes, ranked with the others: FSDP instead of DDP (what it saves
/// is the difference of the two rank steps, each planned op by op) and ZeRO-3 instead of ZeRO-1 /
/// ZeRO-2, each slower for the gathers it adds.
#[test]
fn sharding_is_offered_as_a_fix_with_its_communication() {
    use lorafit::model::{plan, FinetuningType, Settings, Strategy};
    use lorafit::planning::fixes::suggest;
    const GIB: u128 = 1 << 30;
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("llama3-8b"))
        .expect("model")
        .value;
    let mut s = Settings {
        finetuning_type: FinetuningType::Full,
        grad_ckpt: true,
        seq: 2048,
        batch: 1,
        ..Settings::default()
    };
    s.parallel.strategy = Strategy::Ddp;
    s.parallel.gpus_per_node = 8;
    let fixes = suggest(&arch, &s, 80 * GIB, true);
    let f = fixes.iter().find(|f| f.id == "fsdp").expect("FSDP offered");
    assert_eq!(f.settings.parallel.strategy, Strategy::FsdpFullShard);
    let before = plan(&arch, &s).expect("plans").peak_allocated_bytes as i128;
    let after = plan(&arch, &f.settings)
        .expect("plans")
        .peak_allocated_bytes as i128;
    assert_eq!(f.saved_bytes, before - after);
    assert!(f.saved_bytes > 0, "{}", f.saved_bytes);
    // For LoRA DDP reduces only the adapters' gradients, FSDP gathers the whole base twice a
    // step: slower.
    let mut lora = Settings {
        seq: 2048,
        ..Settings::default()
    };
    lora.parallel.strategy = Strategy::Ddp;
    lora.parallel.gpus_per_node = 8;
    let fixes = suggest(&arch, &lora, 80 * GIB, true);
    let f = fixes.iter().find(|f| f.id == "fsdp").expect("FSDP offered");
    assert!(
        f.saved_bytes > 0 && f.time_factor > 1.0,
        "{} {}",
        f.saved_bytes,
        f.time_factor
    );
    let mut z = s.clone();
    z.parallel.strategy = Strategy::Zero2;
    let fixes = suggest(&arch, &z, 80 * GIB, true);
    let f = fixes
        .iter()
        .find(|f| f.id == "zero3")
        .expect("ZeRO-3 offered");
    assert_eq!(f.settings.parallel.strategy, Strategy::Zero3);
    assert!(f.saved_bytes > 0, "{}", f.saved_bytes);
    // One GPU has nothing to shard.
    let one = Settings {
        finetuning_type: FinetuningType::Full,
        ..Settings::default()
    };
    assert!(!suggest(&arch, &one, 80 * GIB, true)
        .iter()
        .any(|f| f.id == "fsdp" || f.id == "zero3"));
}
