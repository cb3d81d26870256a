//! The whole job, not one step: the training step, Trainer's evaluation, checkpoint saving and
//! the merge of the adapters after training, each with its GPU and host-memory peak and the
//! terms that make it up. The job is as large as its largest phase.
//!
//! The GPU figures of evaluation and of a merge on the GPU are the step program's: the run of
//! the training steps continued by the phase's ops (`steptrace::generate_job`), its live
//! storages at the phase's highest moment grouped into terms, and the same sequence replayed
//! through the caching allocator, so the phase starts from the cache training left. Host memory
//! is written from the libraries' code, cited where it is computed.

pub use super::job_settings::{
    EvalStrategy, ExportDevice, FsdpStateDict, JobSettings, SaveStrategy,
};

use serde::Serialize;

use super::arch::Architecture;
use super::ctx::Ctx;
use super::error::PlanError;
use super::plan::Plan;
use super::settings::Settings;
use super::steptrace::{self, anatomy, After, JOB_STEP};
use super::term::{bytes_of, f, named_bytes, Component, Term};

/// One phase of the job.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JobPhase {
    /// `train`, `eval`, `save` or `merge`.
    pub name: &'static str,
    /// What nvidia-smi shows at the phase's peak, per GPU: reserved memory and what lies
    /// outside the allocator (0 for a phase that runs on the host only).
    pub gpu_peak_bytes: u128,
    /// Peak of live tensor bytes on the GPU in the phase.
    pub allocated_bytes: u128,
    /// `max_memory_reserved()` in the phase.
    pub reserved_bytes: u128,
    /// Host memory the phase needs beyond the training process's own (offloaded tensors, what
    /// moves to the host).
    pub host_peak_bytes: u128,
    /// Where the GPU peak is reached.
    pub moment: String,
    /// What is live on the GPU at the phase's peak.
    pub terms: Vec<Term>,
    /// What the host holds at the phase's host peak.
    pub host_terms: Vec<Term>,
    /// How the phase runs, in words.
    pub notes: Vec<String>,
}

/// The job's phases, in the order they run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Job {
    /// `train` first, then `eval` (when the job evaluates), `save` (when it saves), `merge`
    /// (when asked for).
    pub phases: Vec<JobPhase>,
}

impl Job {
    /// The phase whose GPU peak is highest (the first of equals): it decides whether the job
    /// fits.
    pub fn deciding(&self) -> &JobPhase {
        let mut best = &self.phases[0];
        for p in &self.phases[1..] {
            if p.gpu_peak_bytes > best.gpu_peak_bytes {
                best = p;
            }
        }
        best
    }

    /// The phase named `name`, if the job has it.
    pub fn phase(&self, name: &str) -> Option<&JobPhase> {
        self.phases.iter().find(|p| p.name == name)
    }
}

/// Refuses job settings the plan does not model, naming the setting.
pub fn check(arch: &Architecture, s: &Settings) -> Result<(), PlanError> {
    let js = &s.job;
    let bad = |field: &'static str, why: &str| {
        Err(PlanError::InvalidSetting {
            field,
            why: why.into(),
        })
    };
    if let Some(b) = js.eval_batch {
        if b == 0 || b > super::settings::MAX_BATCH {
            return bad("eval_batch", "must be between 1 and 65536");
        }
    }
    if js.generates_in_eval() {
        if s.stage != super::settings::Stage::Sft {
            return bad("predict_with_generate", "generation during evaluation is Seq2SeqTrainer's, for SFT (LLaMA-Factory refuses it for other stages)");
        }
        if arch.is_moe() || arch.vision.is_some() || arch.family.layout().hybrid.is_some() {
            return bad("predict_with_generate", "generation during evaluation is planned for dense text decoders; experts', linear attention's and images' generation is not planned yet");
        }
        let len = s.prompt_tokens().saturating_add(js.eval_new_tokens(s));
        match steptrace::GenerateGap::of(arch, s, len) {
            Some(gap @ steptrace::GenerateGap::Window(_)) => {
                return bad(
                    "max_new_tokens",
                    &format!(
                        "{}: plan the prompt and new tokens within the window",
                        gap.why(arch)
                    ),
                );
            }
            Some(gap) => return bad("predict_with_generate", &gap.why(arch)),
            None => {}
        }
    }
    if js.evaluates() && s.preference() {
        return bad("eval_batch", "a preference trainer's evaluation (its chosen and rejected sequences, the reference pass) is not planned yet: plan SFT's, or leave eval_batch and eval_strategy unset");
    }
    if js.merge {
        if s.base_trained() {
            return bad("merge", "there are no adapters to merge: finetuning_type full or freeze trains the base itself");
        }
        if s.use_dora {
            return bad(
                "merge",
                "DoRA's merge (the weight norm of W + B·A per Linear) is not planned yet",
            );
        }
        if !crate::model::peft_targets::expert_loras(arch, s).is_empty()
            || arch.is_moe() && js.export_device == ExportDevice::Gpu
        {
            return bad("merge", "merging into a mixture of experts' fused expert parameters is not planned yet: plan the merge with export_device cpu, for a dense model");
        }
        if js.export_device == ExportDevice::Gpu && s.quant == Some(super::dtype::Quant::Int8) {
            return bad("export_device", "peft's merge into an 8-bit base on the GPU (each int8 weight dequantized, the delta added, and quantized again through the host) is not planned: plan the merge with export_device cpu");
        }
        if js.export_device == ExportDevice::Gpu && s.parallel.world() > 1 {
            return bad("export_device", "a merge on the GPU is planned for one GPU: the merged model is gathered first on several (plan export_device cpu)");
        }
    }
    Ok(())
}

/// Plans the job around the training step `train` (the plan of `arch` with `s`) on a CUDA GPU
/// with room to spare: the phases' reserved figures are what `max_memory_reserved()` shows
/// when nothing makes the allocator give its cache back.
pub fn plan_job(arch: &Architecture, s: &Settings, train: &Plan) -> Result<Job, PlanError> {
    plan_job_on(arch, s, train, steptrace::Device::Cuda, None)
}

/// [`plan_job`] on a GPU of `capacity_bytes`: the phases after training are replayed on a
/// device of that size, so an allocator that finds it full gives its cached segments back and
/// tries again, as PyTorch's does. A phase whose cache would grow past a GPU with room to
/// spare (an evaluation concatenating its kept logits batch after batch leaves each shorter
/// concatenation cached) then needs only what it cannot give back, and a phase that does not
/// fit even so is reported with what it would have needed at the failing allocation.
pub fn plan_job_within(
    arch: &Architecture,
    s: &Settings,
    train: &Plan,
    capacity_bytes: u128,
) -> Result<Job, PlanError> {
    plan_job_on(
        arch,
        s,
        train,
        steptrace::Device::Cuda,
        Some(capacity_bytes),
    )
}

/// [`plan_job`] with the GPU phases run on `device` (the measuring harness's emulated device,
/// to compare with its measurements), on a GPU of `capacity_bytes` if given.
pub fn plan_job_on(
    arch: &Architecture,
    s: &Settings,
    train: &Plan,
    device: steptrace::Device,
    capacity_bytes: Option<u128>,
) -> Result<Job, PlanError> {
    let gpu = GpuRoom {
        device,
        capacity_bytes,
    };
    let mut job = plan_job_formulas(arch, s, train)?;
    let js = &s.job;
    let step = step_settings(arch, s);
    if js.evaluates() {
        let eval_s = super::steptrace::eval_settings(&step);
        let ctx = Ctx::new(arch, &eval_s);
        let mut p = on_gpu(arch, s, &ctx, After::Eval, train, gpu)?;
        p.name = "eval";
        let (host, host_terms) = eval_host(&ctx);
        p.host_peak_bytes = host + train.cpu_bytes_per_rank;
        p.host_terms = host_terms;
        p.notes.splice(0..0, eval_notes(&ctx));
        job.phases.insert(1, p);
    }
    if js.merge && js.export_device == ExportDevice::Gpu {
        let ctx = Ctx::new(arch, &step);
        let mut p = on_gpu(arch, s, &ctx, After::Merge, train, gpu)?;
        let (host, host_terms) = merge_gpu_host(&ctx);
        p.host_peak_bytes = host + train.cpu_bytes_per_rank;
        p.host_terms = host_terms;
        p.notes.insert(0, "peft's merge_and_unload on the training GPU after training: the optimizer still holds its states and the adapters; each adapted Linear's delta B·A is made and added in turn".into());
        job.phases.push(JobPhase { name: "merge", ..p });
    }
    if let Some(cap) = capacity_bytes {
        vllm_share(s, train, cap, &mut job);
    }
    Ok(job)
}

/// GRPO with vLLM colocated on a card of `capacity_bytes`: vLLM takes its configured share of
/// the card (`ceil(total × gpu_memory_utilization)`, vLLM 0.31 `vllm/v1/worker/utils.py:539-557`:
/// its weights, the activations it profiled, CUDA graphs, and the KV cache sized to fill the
/// rest, `vllm/v1/worker/gpu_worker.py:673-677`). Without sleep mode it keeps it through
/// training, in the trainer's own caching allocator; with it (TRL sleeps vLLM at level 2 after
/// each generation, `trl/generation/vllm_generation.py:365-368, 750-752`) the share is taken
/// while generating, beside the trainer's state between steps.
fn vllm_share(s: &Settings, train: &Plan, capacity_bytes: u128, job: &mut Job) {
    let share = s.vllm_share_bytes(capacity_bytes);
    if share == 0 {
        return;
    }
    let term = crate::model::Term::product(
        crate::model::Component::CudaContext,
        format!(
            "vLLM's share of the card: vllm_gpu_memory_utilization {} of {:.2} GiB (its weights, activations, CUDA graphs and KV cache)",
            s.vllm_gpu_memory_utilization,
            capacity_bytes as f64 / (1u128 << 30) as f64
        ),
        &[crate::model::term::named_bytes("⌈utilization × card⌉", share)],
    );
    if s.vllm_enable_sleep_mode {
        job.phases.insert(
            0,
            JobPhase {
                name: "generate",
                gpu_peak_bytes: vllm_awake_need(train, share),
                allocated_bytes: train.steady_state_bytes,
                reserved_bytes: train.steady_state_bytes,
                host_peak_bytes: train.cpu_bytes_per_rank,
                moment: "vLLM awake for the generation".into(),
                terms: vec![term],
                host_terms: vec![],
                notes: vec!["vLLM's sleep mode: its share of the card is taken while it generates, beside the trainer's weights and optimizer states between steps; during training only its small leftovers (CUDA-graph pool, buffers: not planned) remain".into()],
            },
        );
    } else {
        // vLLM lives in the trainer's process from the first step to the end of the job.
        for t in &mut job.phases {
            t.gpu_peak_bytes += share;
            t.terms.push(term.clone());
            t.notes.push("vLLM colocated without sleep mode keeps its share of the card through training: the trainer has the rest".into());
        }
    }
}

/// The largest GPU need of a job whose largest phase needs `need` in `phase`, with GRPO's vLLM
/// colocated on a card of `capacity_bytes` (the figures [`vllm_share`] gives the job's phases):
/// its share added to every phase without sleep mode, or its own generate phase with it.
pub fn need_with_vllm(
    s: &Settings,
    train: &Plan,
    need: u128,
    phase: &'static str,
    capacity_bytes: u128,
) -> (u128, &'static str) {
    let share = s.vllm_share_bytes(capacity_bytes);
    if share == 0 {
        (need, phase)
    } else if s.vllm_enable_sleep_mode {
        let generate = vllm_awake_need(train, share);
        if generate > need {
            (generate, "generate")
        } else {
            (need, phase)
        }
    } else {
        (need + share, phase)
    }
}

/// vLLM awake beside the trainer between steps (sleep mode): the weights and optimizer states,
/// what lies outside the allocator, and vLLM's share of the card.
fn vllm_awake_need(train: &Plan, share: u128) -> u128 {
    train.steady_state_bytes + train.outside_allocator_bytes + share
}

/// The settings the training step computes with (FSDP's fp32 shards under mixed precision).
fn step_settings(arch: &Architecture, s: &Settings) -> Settings {
    let run = s.as_run(arch);
    super::distributed::compute_settings(&run).unwrap_or_else(|| run.clone().into_owned())
}

/// The phases written as formulas over the training plan: the training step, checkpoint saving
/// and a merge on the host; a phase after training that runs on the GPU (evaluation, a merge on
/// the GPU, [`JobSettings::runs_on_gpu_after_training`]) is left out. Microseconds, and without
/// the step program's phases after training, so the planner page's first bundle carries only
/// this; [`plan_job_on`] adds the GPU phases.
pub fn plan_job_formulas(
    arch: &Architecture,
    s: &Settings,
    train: &Plan,
) -> Result<Job, PlanError> {
    check(arch, s)?;
    let js = &s.job;
    let step = step_settings(arch, s);
    let mut phases = vec![JobPhase {
        name: "train",
        gpu_peak_bytes: train.nvidia_smi_bytes,
        allocated_bytes: train.peak_allocated_bytes,
        reserved_bytes: train.peak_reserved_bytes,
        host_peak_bytes: train.cpu_bytes_per_rank,
        moment: format!("{}: {}", train.peak_phase.name(), train.peak_moment),
        terms: train.terms.clone(),
        host_terms: train.cpu_terms.clone(),
        notes: vec![],
    }];
    if js.resume_from_checkpoint {
        resume(s, train, &mut phases[0]);
    }
    if js.saves() {
        phases.push(save_phase(arch, &Ctx::new(arch, &step), train));
    }
    if js.merge && js.export_device == ExportDevice::Cpu {
        let p = merge_on_host(arch, &Ctx::new(arch, &step));
        phases.push(JobPhase { name: "merge", ..p });
    }
    Ok(Job { phases })
}

/// Where the GPU phases run: the device whose address order the replay follows, and the GPU's
/// capacity when one is given.
#[derive(Clone, Copy)]
struct GpuRoom {
    device: steptrace::Device,
    capacity_bytes: Option<u128>,
}

/// A phase that runs on the GPU after the training steps: its highest moment in the run of
/// the training steps continued by the phase, what is live then, and reserved memory from the
/// allocator replayed over the whole run (on the GPU's capacity less what lies outside the
/// allocator, when given).
fn on_gpu(
    arch: &Architecture,
    s: &Settings,
    ctx: &Ctx,
    after: After,
    train: &Plan,
    gpu: GpuRoom,
) -> Result<JobPhase, PlanError> {
    let trace = steptrace::generate_job(arch, s, gpu.device, after)?;
    let m = anatomy::moments(&trace);
    let high = m.phases.iter().find(|p| p.step == JOB_STEP);
    let peak = high.map_or(0, |h| h.bytes);
    let (terms, moment) = match high {
        Some(h) => {
            let lives: Vec<anatomy::Live> = anatomy::live_after(&trace, h.event)
                .into_iter()
                .map(|(id, bytes, layer)| anatomy::Live {
                    id,
                    bytes,
                    layer,
                    copies: 1,
                })
                .collect();
            (
                anatomy::terms_of(ctx, &trace.labels, &m.alloc_phase, &lives),
                h.words(),
            )
        }
        None => (vec![], String::new()),
    };
    let room = gpu.capacity_bytes.map(|c| {
        u64::try_from(c.saturating_sub(train.outside_allocator_bytes)).unwrap_or(u64::MAX)
    });
    let mut notes = vec![];
    let reserved = match ctx.s.allocator_conf() {
        Ok(conf) => {
            let sim = steptrace::replay_within(&trace, &conf, room);
            if let Some(oom) = &sim.oom {
                notes.push(format!("on this GPU the run stops with PyTorch's error: {oom}"));
            } else if sim.alloc_retries > 0 {
                notes.push(format!("on this GPU the allocator finds the device full {} times and gives its cached free segments back before it can go on (slow: every cudaFree synchronizes)", sim.alloc_retries));
            }
            sim.phases
                .iter()
                .filter(|p| p.step == JOB_STEP)
                .map(|p| u128::from(p.max_reserved))
                .max()
                .unwrap_or(0)
        }
        Err(_) => 0,
    }
    .max(u128::from(peak));
    Ok(JobPhase {
        name: "",
        gpu_peak_bytes: reserved + train.outside_allocator_bytes,
        allocated_bytes: u128::from(peak),
        reserved_bytes: reserved,
        host_peak_bytes: 0,
        moment,
        terms,
        host_terms: vec![],
        notes,
    })
}

/// Host memory of the evaluation: with the loss only, nothing; with the logits kept, every
/// batch's logits and labels end on the host as NumPy arrays (`nested_numpify`,
/// trainer_pt_utils.py:157-170: `.cpu()`, then bf16 → fp32, since NumPy has no bfloat16), and
/// each chunk is concatenated to what is there (`nested_concat`): the old arrays, the new chunk
/// and the result at once.
fn eval_host(ctx: &Ctx) -> (u128, Vec<Term>) {
    let js = &ctx.s.job;
    if js.prediction_loss_only {
        return (0, vec![]);
    }
    let b = u128::from(js.eval_batch());
    let n = u128::from(js.eval_samples.unwrap_or(js.eval_batch()));
    let chunk = (b * u128::from(js.eval_batches_on_gpu())).min(n);
    let chunks = n.div_ceil(chunk.max(1));
    let seq = u128::from(ctx.s.seq);
    let two = |chunks: u128| {
        if chunks > 1 && js.eval_do_concat_batches {
            f("2 (arrays and their concatenation)", 2)
        } else {
            f("1", 1)
        }
    };
    if js.generates_in_eval() {
        // The generated ids and the labels (the responses) reach the host as int64 arrays.
        let p = u128::from(ctx.s.prompt_tokens());
        let c = u128::from(js.eval_new_tokens(ctx.s));
        let terms = vec![
            Term::product(
                Component::LogitsLoss,
                "generated ids on the host (int64, nested_numpify)",
                &[
                    two(chunks),
                    f("eval samples", n),
                    f("prompt + new tokens", p + c),
                    named_bytes("int64", 8),
                ],
            ),
            Term::product(
                Component::LogitsLoss,
                "labels (the responses) on the host (int64)",
                &[
                    two(chunks),
                    f("eval samples", n),
                    f("response tokens", seq.saturating_sub(p)),
                    named_bytes("int64", 8),
                ],
            ),
        ];
        return (terms.iter().map(|t| t.bytes).sum(), terms);
    }
    let v = u128::from(ctx.arch.vocab_size);
    let es = ctx.logits.bytes();
    let label = "logits on the host as fp32 NumPy arrays (nested_numpify)";
    let concat = js.eval_do_concat_batches;
    let mut terms = if chunks > 1 && !concat {
        // A list of arrays: every chunk's in fp32, and the last chunk's copy before its cast.
        vec![
            Term::product(
                Component::LogitsLoss,
                "logits on the host as fp32 NumPy arrays, a list of them (eval_do_concat_batches off)",
                &[
                    f("eval samples", n),
                    f("seq", seq),
                    f("vocab", v),
                    named_bytes("fp32", 4),
                ],
            ),
            Term::product(
                Component::LogitsLoss,
                "the last chunk's logits copied to the host before their cast",
                &[
                    f("chunk samples", chunk),
                    f("seq", seq),
                    f("vocab", v),
                    named_bytes("element", es),
                ],
            ),
        ]
    } else if chunks > 1 {
        // The last chunk concatenated: the arrays so far, the chunk, and the result.
        vec![Term::product(
            Component::LogitsLoss,
            label,
            &[
                f("2 (arrays and their concatenation)", 2),
                f("eval samples", n),
                f("seq", seq),
                f("vocab", v),
                named_bytes("fp32", 4),
            ],
        )]
    } else {
        vec![Term::product(
            Component::LogitsLoss,
            "logits copied to the host, then cast to fp32 (nested_numpify)",
            &[
                f("eval samples", n),
                f("seq", seq),
                f("vocab", v),
                named_bytes("copy + fp32", es + 4),
            ],
        )]
    };
    terms.push(Term::product(
        Component::LogitsLoss,
        "labels on the host (int64)",
        &[
            two(chunks),
            f("eval samples", n),
            f("seq", seq),
            named_bytes("int64", 8),
        ],
    ));
    (terms.iter().map(|t| t.bytes).sum(), terms)
}

fn eval_notes(ctx: &Ctx) -> Vec<String> {
    let js = &ctx.s.job;
    let mut out = vec![format!(
        "Trainer's evaluation loop: model.eval(), torch.no_grad(), {} sequences of {} tokens per batch; the training step's weights and optimizer states stay on the GPU",
        js.eval_batch(),
        ctx.s.seq
    )];
    if js.generates_in_eval() {
        out.push(format!(
            "predict_with_generate as LLaMA-Factory evaluates: each batch's {} prompts of {} tokens generate {} new tokens each (transformers' generate without a loss forward: a DynamicCache of every layer's keys and values, sampling with temperature, top-k 50 and top-p 0.7); the generated ids and the labels stay on the GPU, concatenated, for {} batches",
            js.eval_batch(),
            ctx.s.prompt_tokens(),
            js.eval_new_tokens(ctx.s),
            js.eval_batches_on_gpu()
        ));
    } else if js.prediction_loss_only {
        if js.predict_with_generate {
            out.push("predict_with_generate does not generate with prediction_loss_only (Seq2SeqTrainer computes the loss alone)".into());
        }
        out.push("prediction_loss_only: each batch's logits are freed after its loss (Trainer's choice when no compute_metrics is given)".into());
    } else {
        let per_batch = u128::from(js.eval_batch())
            * u128::from(ctx.s.seq)
            * u128::from(ctx.arch.vocab_size)
            * ctx.logits.bytes();
        out.push(format!(
            "compute_metrics: every batch's logits ({:.2} GiB a batch) and labels stay on the GPU, concatenated, for {} batches{}",
            per_batch as f64 / (1u64 << 30) as f64,
            js.eval_batches_on_gpu(),
            match (js.eval_accumulation_steps, js.eval_samples) {
                (Some(a), _) => format!(" (eval_accumulation_steps {a} moves them to the host)"),
                (None, Some(_)) => " (all of the evaluation: eval_accumulation_steps moves them to the host sooner)".into(),
                (None, None) => " (eval_samples not given: one batch counted; each further batch adds its logits)".into(),
            }
        ));
    }
    out
}

/// The bytes of the training step's breakdown in `components` (what one rank holds).
fn held_bytes(train: &Plan, components: &[Component]) -> u128 {
    train
        .breakdown
        .iter()
        .filter(|c| components.iter().any(|h| h.key() == c.key))
        .map(|c| c.bytes)
        .sum()
}

/// Resuming from a checkpoint (transformers 5.24 `Trainer._load_optimizer_and_scheduler`,
/// trainer.py:3894-3990): on one GPU the checkpoint's optimizer state dict is read whole into
/// host memory (`torch.load(..., map_location="cpu")`) and `optimizer.load_state_dict` copies each
/// state to the GPU beside its parameter; on several (DDP) each rank reads it straight onto its
/// GPU, where those tensors become the states. FSDP loads through accelerate's
/// `load_fsdp_optimizer` (`utils/fsdp_utils.py`: the full state dict on rank 0's host with
/// FULL_STATE_DICT, each rank's shards with SHARDED_STATE_DICT); DeepSpeed each rank's partition
/// (`load_checkpoint`). On the GPU the states are there from the first step's forward on, as in
/// every later step, which the planned step already holds (its peak is the larger of two steps,
/// the second with the states).
fn resume(s: &Settings, train: &Plan, phase: &mut JobPhase) {
    let par = &s.parallel;
    let states = held_bytes(train, &[Component::OptimizerStates]);
    let (ranks, words) = if par.strategy.is_fsdp()
        && s.job.fsdp_state_dict == super::job_settings::FsdpStateDict::Full
    {
        (
            par.opt_shards(),
            "the checkpoint's optimizer state dict read whole on rank 0's host (FSDP FULL_STATE_DICT)",
        )
    } else if par.world() > 1 && !par.strategy.is_fsdp() && !par.strategy.is_zero() {
        // Read straight onto the GPU: the loaded tensors are the states; nothing on the host.
        phase.notes.push("resume_from_checkpoint: each rank reads the optimizer states straight onto its GPU, where they stay as the states; the first step runs with them, as every later step".into());
        return;
    } else {
        (
            1,
            "the checkpoint's optimizer state dict read into host memory (torch.load to the CPU)",
        )
    };
    let t = Term::product(
        Component::OptimizerStates,
        words,
        &[
            named_bytes("optimizer states of one rank", states),
            f("ranks they are split over", ranks),
        ],
    );
    phase.host_peak_bytes += t.bytes;
    phase.host_terms.push(t);
    phase.notes.push("resume_from_checkpoint: the optimizer states are loaded before the first step and copied to the GPU beside their parameters; the first step runs with them, as every later step".into());
}

/// Checkpoint saving (transformers 5.24 `Trainer._save_checkpoint`, trainer.py:3363-3420):
/// the model, then unless `save_only_model` the optimizer (`torch.save(optimizer.state_dict())`,
/// :3572, which copies one storage at a time to the host). Saving allocates nothing on the GPU
/// on one GPU; the training step's reserved memory stays. safetensors copies each tensor to the
/// host and holds the serialized file's bytes (safetensors/torch.py:476-479); a full model is
/// written in shards of up to 50 GB (`save_pretrained`'s `max_shard_size`).
fn save_phase(arch: &Architecture, ctx: &Ctx, train: &Plan) -> JobPhase {
    let s = ctx.s;
    let par = &s.parallel;
    let p = &train.params;
    let trained_es = if s.base_trained() {
        ctx.aux_weight.bytes()
    } else {
        s.adapter_dtype.bytes()
    };
    let mut host_terms = vec![];
    let mut notes = vec![];
    let mut gpu_extra = 0u128;
    if par.strategy.is_fsdp() {
        // Each rank's share of the parameters the step holds (its shards, fp32 under mixed
        // precision), and of the optimizer's states.
        let held = [
            Component::FrozenWeights,
            Component::FrozenExperts,
            Component::QuantState,
            Component::TrainableWeights,
        ];
        let share = held_bytes(train, &held);
        let states = held_bytes(train, &[Component::OptimizerStates]);
        let full = s.job.fsdp_state_dict == super::job_settings::FsdpStateDict::Full;
        // FULL_STATE_DICT: rank 0 gathers the whole state dict to the CPU
        // (accelerator.get_state_dict, offload_to_cpu, rank0_only), base weights included, in
        // the dtype FSDP keeps them; SHARDED_STATE_DICT: each rank copies its own shards to its
        // host and writes them (torch.distributed.checkpoint); accelerate
        // `utils/fsdp_utils.py:136-190`, `save_fsdp_optimizer` likewise for the optimizer.
        let (ranks, state_ranks, words) = if full {
            (
                par.param_shards(),
                par.opt_shards(),
                "gathered on rank 0's host (FSDP FULL_STATE_DICT)",
            )
        } else {
            (
                1,
                1,
                "of this rank copied to its host (FSDP SHARDED_STATE_DICT)",
            )
        };
        host_terms.push(Term::product(
            Component::FrozenWeights,
            format!("the state dict {words}"),
            &[
                named_bytes("parameters held by one rank", share),
                f("ranks they are split over", ranks),
            ],
        ));
        if !s.job.save_only_model {
            host_terms.push(Term::product(
                Component::OptimizerStates,
                format!("the optimizer's states {words}"),
                &[
                    named_bytes("optimizer states held by one rank", states),
                    f("ranks they are split over", state_ranks),
                ],
            ));
        }
        notes.push(if full {
            "FSDP: rank 0 gathers every parameter to its host to save them (FULL_STATE_DICT)".into()
        } else {
            "FSDP: each rank saves its own shards from its host (SHARDED_STATE_DICT)".into()
        });
    } else if par.strategy == super::parallel::Strategy::Zero3 {
        // stage3_gather_16bit_weights_on_model_save: each parameter gathered on the GPU in turn,
        // the 16-bit state dict on rank 0's host.
        let model_bytes = (p.base_params + p.trainable_params) * ctx.s.dtype.bytes();
        host_terms.push(Term::product(
            Component::FrozenWeights,
            "the 16-bit model gathered on rank 0's host (stage3_gather_16bit_weights_on_model_save)",
            &[named_bytes("model", model_bytes)],
        ));
        gpu_extra = save_gpu_extra_bytes(arch, ctx.s);
        notes.push(
            "ZeRO-3: each parameter is gathered whole on the GPU in turn to save the 16-bit model"
                .into(),
        );
    } else if s.base_trained() {
        let shard = (p.base_params * trained_es).min(50_000_000_000);
        host_terms.push(Term::product(
            Component::TrainableWeights,
            "one safetensors shard's bytes on the host (save_pretrained, max_shard_size 50 GB)",
            &[named_bytes("shard", shard)],
        ));
    } else {
        host_terms.push(Term::product(
            Component::TrainableWeights,
            "the adapters' safetensors bytes on the host (peft save_pretrained)",
            &[
                f("adapter parameters", p.trainable_params),
                named_bytes("element", trained_es),
            ],
        ));
    }
    if s.job.save_only_model {
        notes.push("save_only_model: no optimizer states in the checkpoint".into());
    } else if !(par.strategy.is_fsdp() || par.strategy.is_zero()) {
        // torch.save copies one storage at a time: the largest optimizer state.
        let largest = largest_trained_tensor(arch, ctx) * 4;
        host_terms.push(Term::product(
            Component::OptimizerStates,
            "the largest optimizer state copied to the host by torch.save",
            &[named_bytes("state", largest)],
        ));
    }
    let host = host_terms.iter().map(|t| t.bytes).max().unwrap_or(0);
    JobPhase {
        name: "save",
        gpu_peak_bytes: train.nvidia_smi_bytes + gpu_extra,
        allocated_bytes: train.steady_state_bytes + gpu_extra,
        reserved_bytes: train.peak_reserved_bytes + gpu_extra,
        host_peak_bytes: host + train.cpu_bytes_per_rank,
        moment: "between steps: the weights and optimizer states, the training step's cache kept"
            .into(),
        terms: vec![Term::product(
            Component::FrozenWeights,
            "weights and optimizer states between steps",
            &[bytes_of(train.steady_state_bytes)],
        )],
        host_terms,
        notes,
    }
}

/// Elements of the largest Linear weight of the decoder.
/// What saving a checkpoint adds on the GPU to what the training step leaves (`step`: the
/// settings the step computes with): under ZeRO-3 each parameter is gathered whole in turn to
/// save the 16-bit model, the largest Linear at most; nothing otherwise.
fn save_gpu_extra_bytes(arch: &Architecture, step: &Settings) -> u128 {
    if step.parallel.strategy == super::parallel::Strategy::Zero3 && step.job.saves() {
        largest_linear(arch) * step.dtype.bytes()
    } else {
        0
    }
}

/// The highest GPU figure (nvidia-smi) of the phases [`plan_job_formulas`] plans, and its
/// phase: the training step's, or the checkpoint save's when it gathers more on the GPU (a
/// merge on the host uses none). Its deciding figures without the terms, for the planner
/// page's first bundle.
pub fn formula_phases_gpu_peak(
    arch: &Architecture,
    s: &Settings,
    train: &Plan,
) -> (u128, &'static str) {
    let extra = save_gpu_extra_bytes(arch, &step_settings(arch, s));
    if extra > 0 {
        (train.nvidia_smi_bytes + extra, "save")
    } else {
        (train.nvidia_smi_bytes, "train")
    }
}

fn largest_linear(arch: &Architecture) -> u128 {
    arch.layer_groups()
        .iter()
        .flat_map(|&(k, _)| arch.block_linears(k))
        .map(|l| l.in_features * l.out_features)
        .max()
        .unwrap_or(0)
}

/// Elements of the largest trained tensor: an embedding or lm_head trained in full, else the
/// largest LoRA factor.
fn largest_trained_tensor(arch: &Architecture, ctx: &Ctx) -> u128 {
    let s = ctx.s;
    if s.base_trained() || !s.modules_to_save.is_empty() {
        return u128::from(arch.vocab_size) * u128::from(arch.hidden_size);
    }
    let r = u128::from(s.lora_r);
    ctx.adapted_of_every_kind()
        .iter()
        .map(|l| r * l.in_features.max(l.out_features))
        .max()
        .unwrap_or(0)
}

/// Host memory of a merge on the GPU: the 4-bit path copies each merged weight to the host
/// before quantizing it again (`bnb.nn.Params4bit(w_data.to("cpu"))`, peft lora/bnb.py:402),
/// the largest in fp32.
fn merge_gpu_host(ctx: &Ctx) -> (u128, Vec<Term>) {
    if ctx.s.quant.is_none() {
        return (0, vec![]);
    }
    let n = largest_adapted(ctx);
    let es = ctx.s.dtype.bytes().max(ctx.s.adapter_dtype.bytes());
    let t = Term::product(
        Component::MergeTemps,
        "the merged weight's host copy before it is quantized again",
        &[f("largest adapted weight", n), named_bytes("element", es)],
    );
    (t.bytes, vec![t])
}

/// Elements of the largest adapted Linear weight.
fn largest_adapted(ctx: &Ctx) -> u128 {
    ctx.adapted_of_every_kind()
        .iter()
        .map(|l| l.in_features * l.out_features)
        .max()
        .unwrap_or(0)
}

/// The merge on the host (LLaMA-Factory's export, `export_device: cpu`): a separate run loads
/// the base in 16 bits (a 4-bit base cannot be merged for export; LLaMA-Factory loads the
/// unquantized model) and the adapters, merges each adapted Linear in turn (peft's
/// `get_delta_weight` on the CPU: in fp32, lora/layer.py:1058-1069) and writes shards of up to
/// `export_size` GB (5 by default); no GPU.
fn merge_on_host(arch: &Architecture, ctx: &Ctx) -> JobPhase {
    let s = ctx.s;
    let base = arch.total_params();
    let half = if s.dtype.bytes() >= 2 {
        2
    } else {
        s.dtype.bytes()
    };
    let adapters = super::weights::param_counts(ctx).trainable_params;
    let n = largest_adapted(ctx);
    let host_terms = vec![
        Term::product(
            Component::FrozenWeights,
            "the base model in 16 bits on the host",
            &[f("base parameters", base), named_bytes("bf16", half)],
        ),
        Term::product(
            Component::TrainableWeights,
            "the adapters",
            &[
                f("adapter parameters", adapters),
                named_bytes("element", s.adapter_dtype.bytes()),
            ],
        ),
        Term::product(
            Component::MergeTemps,
            "the largest adapted weight's delta B·A and its scaled copy, in fp32",
            &[
                f("2", 2),
                f("largest adapted weight", n),
                named_bytes("fp32", 4),
            ],
        ),
        Term::product(
            Component::FrozenWeights,
            format!(
                "one safetensors shard's bytes while it is written (export_size {} GB)",
                s.job.export_size_gb
            ),
            &[named_bytes(
                "shard",
                (u128::from(s.job.export_size_gb) * 1_000_000_000).min(base * half),
            )],
        ),
    ];
    JobPhase {
        name: "merge",
        gpu_peak_bytes: 0,
        allocated_bytes: 0,
        reserved_bytes: 0,
        host_peak_bytes: host_terms.iter().map(|t| t.bytes).sum(),
        moment: "on the host".into(),
        terms: vec![],
        host_terms,
        notes: vec!["export_device cpu: the adapters are merged into a 16-bit copy of the base in host memory (LLaMA-Factory's export), in a separate run; the GPU is not used".into()],
    }
}
