//! The job's phases after the training step against the measuring harness
//! (`tests/data/reference/job/cases.jsonl`: `measure_job.py`, one training step then Trainer's
//! evaluation loop or peft's `merge_and_unload`, every tensor storage counted;
//! `tests/data/reference/job/METHOD.md`). Target (issue 27): each phase's peak of live bytes
//! within ±3 % of the harness.

use lorafit::formats::catalog::resolve_model;
use lorafit::model::job::{plan_job_on, ExportDevice};
use lorafit::model::plan_simulated_on;
use lorafit::model::steptrace::Device;
use serde_json::Value;

/// Cases in the committed file; a change to the data must change this number too.
const EXPECTED_CASES: usize = 12;

fn cases() -> Vec<Value> {
    lines(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/reference/job/cases.jsonl"
    ))
}

fn lines(path: &str) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("job cases")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("case line is JSON"))
        .collect()
}

/// The case's settings, its phase's as the settings table names them.
fn settings(v: &Value) -> lorafit::model::Settings {
    let mut s = crate::harness_settings(&v["settings"]);
    let job = &v["job"];
    match job["phase"].as_str().expect("phase") {
        "eval" => {
            let b = job["eval_batch"].as_u64().expect("eval_batch");
            s.job.eval_batch = Some(b);
            s.job.eval_samples = Some(b * job["eval_batches"].as_u64().expect("eval_batches"));
            s.job.prediction_loss_only = job["prediction_loss_only"].as_bool().expect("plo");
            s.job.predict_with_generate = job["predict_with_generate"].as_bool().unwrap_or(false);
            s.job.max_new_tokens = job["max_new_tokens"].as_u64();
            s.job.eval_do_concat_batches = job["eval_do_concat_batches"].as_bool().unwrap_or(true);
            // The harness's prompts: eval_prompt tokens, else half the sequence.
            if let Some(p) = job["eval_prompt"].as_u64() {
                s.max_prompt_length = p;
            }
        }
        "merge" => {
            s.job.merge = true;
            s.job.export_device = ExportDevice::Gpu;
        }
        other => panic!("unknown phase {other}"),
    }
    s
}

#[test]
fn job_phases_within_three_percent_of_the_harness() {
    let cases = cases();
    assert_eq!(cases.len(), EXPECTED_CASES, "cases in the file");
    let mut worst = 0f64;
    for v in &cases {
        let id = v["id"].as_str().expect("id");
        let phase = v["job"]["phase"].as_str().expect("phase");
        let arch = resolve_model(&v["model"]).expect("model resolves").value;
        let s = settings(v);
        let train = plan_simulated_on(&arch, &s, Device::Emulated).expect("plans");
        let job = plan_job_on(&arch, &s, &train, Device::Emulated, None)
            .unwrap_or_else(|e| panic!("{id}: the job does not plan: {e}"));
        let got = job
            .phase(phase)
            .unwrap_or_else(|| panic!("{id}: no {phase} phase"));
        let want = v["result"]["phase_peak"]["peak_bytes"]
            .as_f64()
            .expect("peak_bytes");
        let err = (got.allocated_bytes as f64 - want) / want * 100.0;
        println!(
            "{id:<52} {phase:<6} {:>16} {:>16.0} {err:>+7.3} %",
            got.allocated_bytes, want
        );
        assert!(
            err.abs() <= 3.0,
            "{id}: {phase} peak {} vs measured {want} ({err:+.2} %)",
            got.allocated_bytes
        );
        // Every GPU figure is explained: the terms add up to the peak.
        let sum: u128 = got.terms.iter().map(|t| t.bytes).sum();
        assert_eq!(
            sum, got.allocated_bytes,
            "{id}: the terms add up to the peak"
        );
        // The phase starts where training left: the weights and optimizer states stay.
        assert!(got.allocated_bytes > train.steady_state_bytes, "{id}");
        worst = worst.max(err.abs());
    }
    println!("worst {worst:.3} %");
}

#[test]
fn kept_logits_grow_with_the_samples_until_accumulation_moves_them() {
    let v = cases()
        .into_iter()
        .find(|v| v["id"] == "llama3-8b_bf16_s1024_b2_eval_b4x3_logits")
        .expect("case");
    let arch = resolve_model(&v["model"]).expect("model").value;
    let mut s = settings(&v);
    let train = plan_simulated_on(&arch, &s, Device::Emulated).expect("plans");
    let eval = |s: &lorafit::model::Settings| {
        plan_job_on(&arch, s, &train, Device::Emulated, None)
            .expect("job")
            .phase("eval")
            .expect("eval")
            .allocated_bytes
    };
    let three = eval(&s);
    s.job.eval_samples = Some(4 * 6);
    let six = eval(&s);
    // At least three more batches of bf16 logits [4, 1024, vocab] (and int64 labels) on the
    // GPU: the last concatenation holds the old and the new container at once.
    let batch_logits = 4 * 1024 * u128::from(arch.vocab_size) * 2 + 4 * 1024 * 8;
    assert!(six - three >= 3 * batch_logits, "{six} - {three}");
    s.job.eval_accumulation_steps = Some(3);
    assert_eq!(eval(&s), three, "moved to the host every three batches");
    s.job.prediction_loss_only = true;
    assert!(eval(&s) < three);
}

/// Llama-3-8B LoRA with FSDP FULL_SHARD on two GPUs, mixed precision over fp32 weights: FSDP
/// keeps fp32 shards and computes in bf16.
fn fsdp_on_two_gpus() -> (lorafit::model::Architecture, lorafit::model::Settings) {
    use lorafit::model::{Dtype, Parallel, Settings, Strategy};
    let arch = lorafit::formats::catalog::find_model("llama3-8b")
        .expect("catalog")
        .arch
        .clone();
    let s = Settings {
        dtype: Dtype::Fp32,
        autocast: Some(Dtype::Bf16),
        parallel: Parallel {
            gpus_per_node: 2,
            strategy: Strategy::FsdpFullShard,
            ..Parallel::default()
        },
        ..Settings::default()
    };
    (arch, s)
}

#[test]
fn fsdp_saves_the_full_state_dict_in_the_dtype_its_shards_keep() {
    use lorafit::model::plan_simulated;
    // Rank 0 gathers 4 bytes per parameter (the fp32 shards) to its host.
    let (arch, s) = fsdp_on_two_gpus();
    let train = plan_simulated(&arch, &s).expect("plans");
    let job = lorafit::model::job::plan_job(&arch, &s, &train).expect("job");
    let save = job.phase("save").expect("saves by default");
    let full = (train.params.base_params + train.params.trainable_params) * 4;
    let err = (save.host_peak_bytes as f64 - full as f64) / full as f64;
    assert!(err.abs() < 1e-6, "{} vs {full}", save.host_peak_bytes);
}

/// With SHARDED_STATE_DICT (accelerate's `fsdp_state_dict_type`) each rank saves its own
/// shards from its host: half of the gathered state dict on two GPUs; an axolotl config's
/// `fsdp_config` says it as the settings do.
#[test]
fn fsdp_sharded_state_dict_saves_each_ranks_share_on_its_host() {
    use lorafit::model::job::FsdpStateDict;
    use lorafit::model::{plan_simulated, Settings};
    let (arch, mut s) = fsdp_on_two_gpus();
    let train = plan_simulated(&arch, &s).expect("plans");
    let host = |s: &Settings| {
        lorafit::model::job::plan_job(&arch, s, &train)
            .expect("job")
            .phase("save")
            .expect("saves")
            .host_peak_bytes
    };
    let full = host(&s);
    s.job.fsdp_state_dict = FsdpStateDict::Sharded;
    assert_eq!(host(&s) * 2, full, "each rank its half");
    let read = lorafit::formats::framework::read(
        "base_model: meta-llama/Meta-Llama-3-8B\nadapter: lora\nfsdp:\n  - full_shard\n  - auto_wrap\nfsdp_config:\n  fsdp_state_dict_type: SHARDED_STATE_DICT\n",
    )
    .expect("an axolotl config reads");
    assert_eq!(read.settings.job.fsdp_state_dict, FsdpStateDict::Sharded);
}

/// Resuming from a checkpoint reads its optimizer states into host memory on one GPU (the
/// training phase's host figure grows by exactly the states the step holds); on two GPUs with
/// DDP each rank reads them straight onto its GPU. A TrainingArguments' path resumes.
#[test]
fn resuming_reads_the_optimizer_states_into_host_memory_on_one_gpu() {
    use lorafit::model::{plan_simulated, Parallel, Settings, Strategy};
    let arch = lorafit::formats::catalog::find_model("llama2-7b")
        .expect("model")
        .arch
        .clone();
    let host = |s: &Settings| {
        let train = plan_simulated(&arch, s).expect("plan");
        let states: u128 = train
            .breakdown
            .iter()
            .filter(|c| c.key == "optimizer_states")
            .map(|c| c.bytes)
            .sum();
        let job = lorafit::model::job::plan_job(&arch, s, &train).expect("job");
        (job.phase("train").expect("train").host_peak_bytes, states)
    };
    let mut s = Settings::default();
    let (fresh, states) = host(&s);
    assert!(states > 0);
    s.job.resume_from_checkpoint = true;
    assert_eq!(host(&s).0, fresh + states);
    s.parallel = Parallel {
        gpus_per_node: 2,
        strategy: Strategy::Ddp,
        ..Parallel::default()
    };
    let ddp = host(&s).0;
    s.job.resume_from_checkpoint = false;
    assert_eq!(ddp, host(&s).0, "DDP reads them onto the GPU");
    let read = lorafit::formats::framework::read(
        "model_name_or_path: meta-llama/Llama-2-7b-hf\nstage: sft\nfinetuning_type: lora\nresume_from_checkpoint: saves/llama2-7b/lora/sft/checkpoint-500\n",
    )
    .expect("a LLaMA-Factory config reads");
    assert!(read.settings.job.resume_from_checkpoint);
}

/// LLaMA-Factory's `export_size` sets the shard the host holds while the merged model is
/// written (a 7B model in 16 bits is 13.5 GB: a 5 GB shard by default, 2 GB asked).
#[test]
fn export_size_is_the_shard_written() {
    let arch = lorafit::formats::catalog::find_model("llama2-7b")
        .expect("model")
        .arch
        .clone();
    let mut s = lorafit::model::Settings::default();
    s.job.merge = true;
    let train = lorafit::model::plan_simulated(&arch, &s).expect("plan");
    let host = |s: &lorafit::model::Settings| {
        lorafit::model::job::plan_job(&arch, s, &train)
            .expect("job")
            .phase("merge")
            .expect("merges")
            .host_peak_bytes
    };
    let five = host(&s);
    s.job.export_size_gb = 2;
    assert_eq!(five - host(&s), 3_000_000_000);
}

/// llama2-7b LoRA on an RTX 4090 (24 GiB), micro-batch 1 × 512 tokens: the training step fits;
/// the evaluation keeps every batch's logits for `compute_metrics` over `samples` samples.
fn eval_on_a_4090(
    samples: u64,
    eval_batch: u64,
) -> (lorafit::model::Architecture, lorafit::model::Settings, u128) {
    let arch = lorafit::formats::catalog::find_model("llama2-7b")
        .expect("model")
        .arch
        .clone();
    let mut s = lorafit::model::Settings {
        batch: 1,
        seq: 512,
        ..Default::default()
    };
    s.job.eval_batch = Some(eval_batch);
    s.job.eval_samples = Some(samples);
    s.job.prediction_loss_only = false;
    let cap = lorafit::formats::catalog::find_gpu("rtx4090")
        .expect("gpu")
        .capacity_bytes();
    (arch, s, cap)
}

/// Issue 27's target: a plan whose training step fits but whose evaluation does not is out of
/// memory, the evaluation named as the deciding phase, and the first change offered is aimed
/// at the evaluation, changes only the job's settings, and makes the job fit.
#[test]
fn an_evaluation_that_does_not_fit_decides_and_its_fix_comes_first() {
    use lorafit::planning::fit::Fidelity;
    use lorafit::planning::{fixes, job_verdict, verdict, Status};
    // 256 samples × 512 tokens × 32000 × 2 B = 8 GiB of kept logits, and their concatenation.
    let (arch, s, cap) = eval_on_a_4090(256, 16);
    let train = lorafit::model::plan_simulated(&arch, &s).expect("plan");
    assert_ne!(
        verdict(&train, cap).status,
        Status::Oom,
        "the training step fits"
    );
    let job = lorafit::model::job::plan_job_within(&arch, &s, &train, cap).expect("job");
    let v = job_verdict(&job, cap);
    assert_eq!((v.status, v.phase), (Status::Oom, "eval"));
    let fixes = fixes::suggest_with(&arch, &s, cap, true, None, Fidelity::Simulated);
    let first = fixes.first().expect("a fix");
    assert!(
        matches!(
            first.id.name(),
            "eval_accumulation" | "prediction_loss_only" | "smaller_eval_batch"
        ),
        "first fix {} ({})",
        first.id,
        first.title
    );
    assert_ne!(first.status, Status::Oom, "{}", first.title);
    let mut only_job = first.settings.clone();
    only_job.job = s.job.clone();
    assert_eq!(only_job, s, "the eval fix changes the job's settings only");
    // Judged whole: a change to the training step alone does not make this job fit.
    if let Some(gc) = fixes.iter().find(|f| f.id.name() == "grad_ckpt") {
        assert_eq!(
            gc.status,
            Status::Oom,
            "checkpointing leaves the evaluation as it is"
        );
    }
}

/// On a GPU without room to spare the allocator gives its cached segments back when the device
/// is full (PyTorch's `release_cached_blocks` retry): the evaluation's cache of every shorter
/// concatenation of the kept logits, which a large GPU keeps reserved, is not a need. The same
/// job on an H200 keeps its figures from the replay with room to spare.
#[test]
fn a_full_gpu_gives_its_cache_back_before_it_runs_out() {
    let (arch, s, cap) = eval_on_a_4090(128, 16);
    let train = lorafit::model::plan_simulated(&arch, &s).expect("plan");
    let roomy = lorafit::model::job::plan_job(&arch, &s, &train).expect("job");
    let full = lorafit::model::job::plan_job_within(&arch, &s, &train, cap).expect("job");
    let (r, f) = (
        roomy.phase("eval").expect("eval"),
        full.phase("eval").expect("eval"),
    );
    assert!(
        r.gpu_peak_bytes > cap,
        "a large GPU caches past 24 GiB: {}",
        r.gpu_peak_bytes
    );
    assert!(f.gpu_peak_bytes <= cap, "{}", f.gpu_peak_bytes);
    assert_eq!(r.allocated_bytes, f.allocated_bytes, "the same tensors");
    assert!(f
        .notes
        .iter()
        .any(|n| n.contains("gives its cached free segments back")));
    let h200 = lorafit::formats::catalog::find_gpu("h200")
        .expect("gpu")
        .capacity_bytes();
    let big = lorafit::model::job::plan_job_within(&arch, &s, &train, h200).expect("job");
    assert_eq!(big.phases, roomy.phases, "nothing to give back on an H200");
}

/// The page's quick figure for the phases written as formulas is what their planned job
/// decides with: the training step, or a ZeRO-3 save's gather on top of it.
#[test]
fn the_formula_phases_peak_is_their_jobs_deciding_phase() {
    use lorafit::model::job::{formula_phases_gpu_peak, plan_job_formulas};
    let arch = lorafit::formats::catalog::find_model("llama2-7b")
        .expect("model")
        .arch
        .clone();
    let mut zero3 = lorafit::model::Settings::default();
    zero3.parallel.gpus_per_node = 4;
    zero3.parallel.strategy = lorafit::model::Strategy::Zero3;
    let mut merge = lorafit::model::Settings::default();
    merge.job.merge = true;
    let mut no_save = lorafit::model::Settings::default();
    no_save.job.save_strategy = lorafit::model::job::SaveStrategy::No;
    let mut seen = vec![];
    for s in [lorafit::model::Settings::default(), zero3, merge, no_save] {
        let train = lorafit::model::plan(&arch, &s).expect("plan");
        let job = plan_job_formulas(&arch, &s, &train).expect("job");
        let d = job.deciding();
        assert_eq!(
            formula_phases_gpu_peak(&arch, &s, &train),
            (d.gpu_peak_bytes, d.name)
        );
        seen.push(d.name);
    }
    assert_eq!(seen, ["train", "save", "train", "train"]);
}

/// The evaluation is the harness's, allocation by allocation: the phase after the training step
/// of two-layer runs (`tests/data/reference/job/two_layer.jsonl`, `record_two_layer.py`):
/// with `predict_with_generate`, Llama-2-7B's shapes with 6 new tokens, Qwen2-7B's 4-bit base
/// under autocast with checkpointing generating to the sequence length, Qwen2.5-0.5B's tied
/// head and biases over three rows of a 100-token prompt; without `eval_do_concat_batches`,
/// the logits and the generated ids kept in lists.
#[test]
fn generation_during_evaluation_is_the_recorded_sequence() {
    use lorafit::model::steptrace::{generate_job, After, Event, JOB_STEP};
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference/job");
    let mut checked = 0;
    for v in lines(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/reference/job/two_layer.jsonl"
    )) {
        let id = v["id"].as_str().expect("id");
        let arch = resolve_model(&v["model"]).expect("model").value;
        let s = settings(&v);
        let t = generate_job(&arch, &s, Device::Emulated, After::Eval).expect("generates");
        let from = t
            .phases
            .iter()
            .find(|p| p.1 == JOB_STEP)
            .expect("the job's phase")
            .0;
        let generated = t.events[from..].iter().map(|e| match *e {
            Event::Alloc { id, bytes, stream } => (true, id as u64, bytes, stream),
            Event::Free { id } => (false, id as u64, 0, 0),
        });
        crate::reserved::assert_same_sequence(
            id,
            &dir.join(format!("{id}.events.json.gz")),
            generated,
        );
        checked += 1;
    }
    assert_eq!(checked, 7, "two-layer job recordings");
}

/// Generation during evaluation keeps the generated ids, not the logits: the evaluation that
/// does not fit above (every batch's logits of 256 samples) fits with `predict_with_generate`;
/// generating so long that its cache does not fit is out of memory in the evaluation, and the
/// shorter generation offered fits.
#[test]
fn generation_during_evaluation_keeps_ids_and_its_length_is_a_fix() {
    use lorafit::planning::fit::Fidelity;
    use lorafit::planning::{fixes, job_verdict, Status};
    let (arch, mut s, cap) = eval_on_a_4090(256, 16);
    let train = lorafit::model::plan_simulated(&arch, &s).expect("plan");
    let eval = |s: &lorafit::model::Settings| {
        let job = lorafit::model::job::plan_job_within(&arch, s, &train, cap).expect("job");
        (
            job_verdict(&job, cap),
            job.phase("eval").expect("eval").clone(),
        )
    };
    let (logits, kept_logits) = eval(&s);
    assert_eq!(logits.status, Status::Oom);
    s.job.predict_with_generate = true;
    s.job.max_new_tokens = Some(32);
    let (short, with_ids) = eval(&s);
    assert_ne!(short.status, Status::Oom, "ids instead of logits");
    assert!(with_ids.allocated_bytes < kept_logits.allocated_bytes);
    assert!(with_ids.terms.iter().any(|t| t.label.contains("KV cache")));
    // The cache of 16 rows × (256 + 4096) tokens × 32 layers × 2 × 4096 × bf16 = 34 GiB.
    s.job.max_new_tokens = Some(4096);
    let (long, _) = eval(&s);
    assert_eq!((long.status, long.phase), (Status::Oom, "eval"));
    let fixes = fixes::suggest_with(&arch, &s, cap, true, None, Fidelity::Quick);
    let shorter = fixes
        .iter()
        .find(|f| f.id.name() == "shorter_eval_generation")
        .expect("a shorter generation is offered");
    assert!(shorter.settings.job.max_new_tokens < Some(4096));
    // Without the outputs kept, Seq2SeqTrainer does not generate: the loss-only evaluation.
    s.job.prediction_loss_only = true;
    assert!(!s.job.generates_in_eval());
}
