//! GRPO steps as TRL 1.16's GRPOTrainer runs them after generation (`stage: grpo`: each step's
//! scoring of its completions, then `_compute_loss` through the fused LM head), measured with the
//! harness (`tests/data/reference/grpo/`): each planned to the byte (the quick and the settled
//! plan against the measured peak, reserved against PyTorch's caching allocator replayed over the
//! measured step), and the scoring phase's peak against the harness's.

use serde_json::Value;

fn cases() -> Vec<Value> {
    crate::jsonl("tests/data/reference/grpo/cases.jsonl")
}

#[test]
fn grpo_steps_are_planned_to_the_byte() {
    let mut n = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        assert!(m.settings.grpo(), "{id}: a GRPO step");
        let (q, st, r) = (m.quick_pct, m.settled_pct, m.reserved_pct);
        if m.arch.tie_word_embeddings && m.settings.base_trained() {
            // A trained tied weight takes two gradients: a GPU's AccumulateGrad adds the second
            // in place, the harness's emulated device out of place. The quick plan is the
            // GPU's: it equals the settled plan on a GPU.
            let gpu = lorafit::model::plan_simulated(&m.arch, &m.settings).expect("plans");
            assert_eq!(
                m.quick.peak_allocated_bytes, gpu.peak_allocated_bytes,
                "{id}: quick vs the settled plan on a GPU"
            );
        } else {
            assert!(q.abs() <= 0.01, "{id}: quick {q:+.3} %");
        }
        assert!(st.abs() <= 0.01, "{id}: settled {st:+.3} %");
        assert!(r.abs() <= 0.01, "{id}: reserved {r:+.3} %");
        n += 1;
    }
    assert_eq!(n, 3);
}

/// The plan's scoring phase peaks where the harness measured its `score` phase (the second
/// step's: the first step's optimizer states do not exist yet), and so does the weight sync to
/// vLLM (the phase `generate` of a peft model's step).
#[test]
fn the_scoring_phase_peak_is_the_measured_one() {
    let mut syncs = 0;
    for v in cases() {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(&v);
        let planned_peak = |name: &str| {
            m.settled
                .phases
                .iter()
                .find(|p| p.phase.name() == name)
                .map(|p| p.bytes)
        };
        let measured = v["result"]["per_step"][1]["phase_peaks"]["score"]
            .as_u64()
            .expect("the harness's score peak");
        assert_eq!(
            planned_peak("score"),
            Some(u128::from(measured)),
            "{id}: the score phase"
        );
        let sync = v["result"]["per_step"][1]["phase_peaks"]["generate"].as_u64();
        assert_eq!(
            planned_peak("generate"),
            sync.map(u128::from),
            "{id}: the weight sync"
        );
        assert_eq!(sync.is_some(), m.settings.vllm_syncs_adapters(), "{id}");
        syncs += usize::from(sync.is_some());
        let peak = m.settled.phases.iter().map(|p| p.bytes).max();
        assert_eq!(
            Some(m.settled.peak_allocated_bytes),
            peak,
            "{id}: the step's peak is its largest phase's"
        );
    }
    assert_eq!(syncs, 2, "the LoRA steps sync their weights");
}

/// A generation longer than twice `FULL_DECODE_CALLS` (4) new tokens runs its middle decode calls
/// as the cache's growth alone: against a recording of 200 new tokens (every call op by op),
/// each phase's peak allocated is the same, and PyTorch's caching allocator replayed over the
/// shorter sequence reserves what it reserves over the recorded one, phase by phase.
#[test]
fn a_long_generation_keeps_its_peaks_with_the_middle_calls_compressed() {
    use flate2::read::GzDecoder;
    use lorafit::model::steptrace::{generate_on, Device, Event};
    let dir =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/steptrace/long");
    let case: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("grpogen_c200.json")).expect("case"),
    )
    .expect("case JSON");
    let f = std::fs::File::open(dir.join("grpogen_c200.events.json.gz")).expect("events");
    let recorded: Value = serde_json::from_reader(GzDecoder::new(f)).expect("events JSON");
    let recorded = recorded.as_array().expect("events").clone();
    let arch = lorafit::formats::catalog::resolve_model(&case["model"])
        .expect("model")
        .value;
    let s = crate::harness_settings(&case["settings"]);
    let t = generate_on(&arch, &s, Device::Emulated).expect("generates");
    let mut generated = vec![];
    let phases = lorafit::model::steptrace::anatomy::event_phases(&t);
    for (e, (step, p)) in t.events.iter().zip(phases) {
        generated.push(match *e {
            Event::Alloc { id, bytes, .. } => serde_json::json!(["a", id, bytes, p.name(), step]),
            Event::Free { id } => serde_json::json!(["f", id]),
        });
    }
    let allocs = |ev: &[Value]| ev.iter().filter(|e| e[0] == "a").count();
    assert!(
        allocs(&generated) * 2 < allocs(&recorded),
        "compressed: {} allocations vs {}",
        allocs(&generated),
        allocs(&recorded)
    );
    let peaks = |ev: &[Value]| {
        let (mut live, mut cur) = (std::collections::HashMap::new(), 0u64);
        let mut by: std::collections::BTreeMap<String, u64> = Default::default();
        for e in ev {
            let id = e[1].as_u64().expect("id");
            if e[0] == "a" {
                let b = e[2].as_u64().expect("bytes");
                live.insert(id, b);
                cur += b;
                let k = format!("step{}:{}", e[4], e[3].as_str().expect("phase"));
                let p = by.entry(k).or_default();
                *p = (*p).max(cur);
            } else if let Some(b) = live.remove(&id) {
                cur -= b;
            }
        }
        by
    };
    assert_eq!(
        peaks(&generated),
        peaks(&recorded),
        "peak allocated per phase"
    );
    let (rg, rr) = (
        crate::allocator::replay(&generated),
        crate::allocator::replay(&recorded),
    );
    assert_eq!(rg.max_allocated, rr.max_allocated);
    for (k, want) in &rr.reserved_by_phase {
        let got = rg.reserved_by_phase.get(k).copied().unwrap_or(0);
        println!("{k}: reserved {got} (recorded {want})");
        assert_eq!(got, *want, "{k}: reserved");
    }
}

/// GRPO steps with their generation (`generation: hf`), measured at full depth
/// (`tests/data/reference/grpo/gen_cases.jsonl`): planned to the byte, allocated and reserved,
/// and the generation phase's peak is the measured one.
#[test]
fn grpo_steps_with_their_generation_are_planned_to_the_byte() {
    let cases = crate::jsonl("tests/data/reference/grpo/gen_cases.jsonl");
    for v in &cases {
        let id = v["id"].as_str().expect("id");
        let m = crate::plan_measured_line(v);
        assert_eq!(
            m.settings.generation,
            lorafit::model::Generation::Hf,
            "{id}: generates"
        );
        let (q, st, r) = (m.quick_pct, m.settled_pct, m.reserved_pct);
        assert!(q.abs() <= 0.01, "{id}: quick {q:+.3} %");
        assert!(st.abs() <= 0.01, "{id}: settled {st:+.3} %");
        assert!(r.abs() <= 0.01, "{id}: reserved {r:+.3} %");
        let measured = v["result"]["per_step"][1]["phase_peaks"]["generate"]
            .as_u64()
            .expect("the harness's generate peak");
        let planned = m
            .settled
            .phases
            .iter()
            .find(|p| p.phase.name() == "generate")
            .unwrap_or_else(|| panic!("{id}: no generate phase"))
            .bytes;
        assert_eq!(planned, u128::from(measured), "{id}: the generate phase");
    }
    assert_eq!(cases.len(), 3);
}

/// vLLM colocated at 0.9 of an 80 GiB card leaves the trainer a tenth: every dense catalog
/// model whose GRPO training step needs more is called out of memory, and the first fix offered
/// fits (a smaller share for vLLM, its sleep mode, or a server on other GPUs).
#[test]
fn vllm_colocated_at_nine_tenths_leaves_the_trainer_a_tenth() {
    use lorafit::formats::catalog;
    use lorafit::planning::{fixes, verdict};
    let gpu = catalog::find_gpu("h100-80").expect("GPU");
    let cap = gpu.capacity_bytes();
    let mut called = 0;
    for name in ["qwen2.5-0.5b", "qwen2.5-7b", "llama3-8b", "qwen3-8b"] {
        let arch = catalog::resolve_model(&serde_json::json!(name))
            .expect("model")
            .value;
        let s = lorafit::model::Settings {
            stage: lorafit::model::Stage::Grpo,
            batch: 8,
            seq: 1024,
            num_generations: 8,
            grad_ckpt: true,
            generation: lorafit::model::Generation::VllmColocate,
            vllm_gpu_memory_utilization: 0.9,
            ..Default::default()
        };
        let p = lorafit::model::plan(&arch, &s).expect("plans");
        let job = lorafit::model::job::plan_job_within(&arch, &s, &p, cap).expect("job");
        let v = verdict::job_verdict(&job, cap);
        let share = s.vllm_share_bytes(cap);
        assert_eq!(
            job.deciding().gpu_peak_bytes,
            p.nvidia_smi_bytes + share,
            "{name}: the step beside vLLM's share"
        );
        if p.nvidia_smi_bytes > cap - share {
            assert_eq!(v.status.name(), "oom", "{name}");
            let fs = fixes::suggest(&arch, &s, cap, true);
            let first = fs.first().unwrap_or_else(|| panic!("{name}: no fix"));
            assert_ne!(first.status.name(), "oom", "{name}: {}", first.title);
            called += 1;
        } else {
            assert_ne!(v.status.name(), "oom", "{name}: within the tenth");
        }
    }
    assert_eq!(called, 3, "models that need more than a tenth");
}

/// TRL's generation batch (`grpo_config.py:1096-1135`): `generation_batch_size` over every GPU
/// is `batch × GPUs × steps_per_generation`; the two are exclusive; the batch must hold whole
/// prompt groups. The old policy is scored when a generation does not end on an accumulation
/// boundary (`grpo_trainer.py:2642-2656`), and a smaller generation batch is a fix.
#[test]
fn the_generation_batch_is_trls() {
    use lorafit::model::{Generation, Settings, Stage};
    let base = Settings {
        stage: Stage::Grpo,
        batch: 4,
        seq: 512,
        grad_accum: 4,
        num_generations: 8,
        generation: Generation::Hf,
        ..Default::default()
    };
    // Two GPUs, 32 sequences generated at once: 32 / (4 × 2) = 4 micro-steps each.
    let mut two = base.clone();
    two.parallel.gpus_per_node = 2;
    two.generation_batch_size = Some(32);
    assert_eq!(two.steps_per_generation_run(), 4);
    assert_eq!(two.generation_rows(), 16, "rows generated on each GPU");
    // Refusals name the key.
    let refused = |s: &Settings| match s.validate() {
        Err(lorafit::model::PlanError::InvalidSetting { field, .. }) => field,
        other => panic!("not refused: {other:?}"),
    };
    let mut both = base.clone();
    both.generation_batch_size = Some(32);
    both.steps_per_generation = Some(2);
    assert_eq!(refused(&both), "generation_batch_size");
    let mut uneven = base.clone();
    uneven.generation_batch_size = Some(10);
    assert_eq!(
        refused(&uneven),
        "generation_batch_size",
        "10 is not a multiple of 4"
    );
    let mut partial = base.clone();
    partial.steps_per_generation = Some(1);
    assert_eq!(
        refused(&partial),
        "num_generations",
        "4 rows hold no group of 8"
    );
    // GA 4: two micro-steps per generation end on its boundary, three do not.
    let with = |n: u64| Settings {
        steps_per_generation: Some(n),
        batch: 8,
        ..base.clone()
    };
    assert!(!with(2).grpo_old_logps() && !with(4).grpo_old_logps());
    assert!(with(3).grpo_old_logps() && with(8).grpo_old_logps());
    // The default serves the whole accumulation (4 × 8 rows); one micro-step per generation
    // holds whole groups of 8 and is offered, and it lowers the generation's peak.
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("qwen2.5-0.5b"))
        .unwrap()
        .value;
    let s = Settings {
        batch: 8,
        ..base.clone()
    };
    let cap = 1u128 << 40;
    let fs = lorafit::planning::fixes::suggest(&arch, &s, cap, false);
    let fix = fs
        .iter()
        .find(|f| f.id == "smaller_generation_batch")
        .expect("a smaller generation batch is offered");
    assert_eq!(fix.title, "steps_per_generation 4 → 1");
    let peak_of = |s: &Settings, phase: &str| {
        let p = lorafit::model::plan(&arch, s).expect("plans");
        p.phases
            .iter()
            .filter(|ph| ph.phase.name() == phase)
            .map(|ph| ph.bytes)
            .max()
            .expect("phase")
    };
    assert!(peak_of(&with(1), "generate") < peak_of(&s, "generate"));
}

/// TRL's weight sync to vLLM, per strategy: under ZeRO-3 peft cannot merge into shards, so
/// the whole model is gathered on every GPU first (`vllm_generation.py:440-444`): the sync's
/// peak holds every weight while the scoring holds this rank's shards. A 4-bit base cannot be
/// handed to vLLM (huggingface/trl#3654): it is refused, naming the setting.
#[test]
fn the_weight_sync_gathers_under_zero3_and_a_4bit_base_is_refused() {
    use lorafit::model::{Generation, Settings, Stage, Strategy};
    let arch = lorafit::formats::catalog::resolve_model(&serde_json::json!("qwen2.5-0.5b"))
        .unwrap()
        .value;
    let mut s = Settings {
        stage: Stage::Grpo,
        batch: 2,
        seq: 256,
        num_generations: 4,
        generation: Generation::VllmServer,
        ..Default::default()
    };
    s.parallel.gpus_per_node = 4;
    s.parallel.strategy = Strategy::Zero3;
    let p = lorafit::model::plan(&arch, &s).expect("plans");
    let phase = |name: &str| {
        p.phases
            .iter()
            .filter(|ph| ph.phase.name() == name)
            .map(|ph| ph.bytes)
            .max()
            .unwrap_or_else(|| panic!("no {name} phase"))
    };
    let whole_model_bytes = arch.total_params() * 2;
    assert!(
        phase("generate") >= whole_model_bytes,
        "the sync holds the whole bf16 model: {} < {whole_model_bytes}",
        phase("generate")
    );
    assert!(
        phase("score") < whole_model_bytes,
        "the scoring holds shards"
    );
    s.quant = Some(lorafit::model::Quant::Nf4);
    s.autocast = Some(lorafit::model::Dtype::Bf16);
    s.parallel = Default::default();
    s.num_generations = 2;
    match lorafit::model::plan(&arch, &s) {
        Err(lorafit::model::PlanError::InvalidSetting { field, why }) => {
            assert_eq!(field, "generation");
            assert!(why.contains("trl#3654"), "{why}");
        }
        other => panic!("a 4-bit base with vLLM is not refused: {other:?}"),
    }
}
