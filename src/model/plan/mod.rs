//! Assembles the terms into the memory of each phase of a training step ([`phases`]), picks the
//! peak, and adds what a real GPU shows on top ([`reserve`]: allocator reserve, CUDA context).

use serde::Serialize;

use super::activations::Ctx;
use super::arch::Architecture;
use super::distributed;
use super::error::PlanError;
use super::settings::{AttnImpl, Settings};
use super::steptrace::{self, anatomy};
use super::term::{named_bytes, Component, Term};
use super::weights::{self, ParamCounts};

mod phases;
pub mod reserve;

pub use reserve::{CachedBlock, CUDA_CONTEXT_BYTES};

/// Threads that run cuBLAS GEMMs in a training step, each with its own handle and workspace:
/// Python's (forward) and the autograd engine's device thread (backward, recomputation).
pub const CUBLAS_THREADS: u128 = 2;

/// A phase of the (second) training step, when optimizer states already exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// A preference trainer's reference log-probs computed before training
    /// (`precompute_ref_log_probs`).
    PrecomputeRef,
    /// Forward pass, at the loss (logits + log_softmax alive).
    Forward,
    /// A preference step's reference forward (no grad, adapters disabled), on top of what the
    /// policy forward saved.
    RefForward,
    /// Start of backward (log_softmax backward) or inside a recomputed layer.
    Backward,
    /// optimizer.step().
    Optimizer,
}

impl Phase {
    /// Lowercase name, as the reference data spells it.
    pub fn name(self) -> &'static str {
        match self {
            Phase::PrecomputeRef => "precompute_ref",
            Phase::Forward => "forward",
            Phase::RefForward => "ref_forward",
            Phase::Backward => "backward",
            Phase::Optimizer => "optimizer",
        }
    }
}

/// Memory at one moment of the step.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PhasePeak {
    /// Which phase.
    pub phase: Phase,
    /// Where exactly.
    pub moment: String,
    /// Live bytes.
    pub bytes: u128,
    /// The terms that add up to `bytes`.
    pub terms: Vec<Term>,
}

/// Bytes of one component at the peak.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ComponentBytes {
    /// Stable key.
    pub key: &'static str,
    /// Label.
    pub label: &'static str,
    /// Bytes.
    pub bytes: u128,
}

/// The full answer for one configuration.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Parameter counts.
    pub params: ParamCounts,
    /// Peak of live tensor bytes (`torch.cuda.max_memory_allocated()`).
    pub peak_allocated_bytes: u128,
    /// Phase of the peak.
    pub peak_phase: Phase,
    /// Where in the phase.
    pub peak_moment: String,
    /// Per-component bytes at the peak (all components, zeros included, stacking order).
    pub breakdown: Vec<ComponentBytes>,
    /// Every term at the peak, with formula and numbers.
    pub terms: Vec<Term>,
    /// Highest memory of each phase.
    pub phases: Vec<PhasePeak>,
    /// Memory between steps (weights + optimizer states).
    pub steady_state_bytes: u128,
    /// `torch.cuda.max_memory_reserved()`: simulated (see `reserve_simulated`) or a quick
    /// allowance.
    pub peak_reserved_bytes: u128,
    /// How the reserved figure was reached.
    pub reserve_explanation: String,
    /// The reserved figure comes from the caching-allocator simulation ([`plan_simulated`]);
    /// false for [`plan`]'s quick allowance.
    pub reserve_simulated: bool,
    /// Largest cached-but-free blocks at the reserved peak (simulated plans only).
    pub cached_free_blocks: Vec<CachedBlock>,
    /// Estimated nvidia-smi "memory used": reserved + `outside_terms`.
    pub nvidia_smi_bytes: u128,
    /// Bytes outside PyTorch's allocator (the sum of `outside_terms`).
    pub outside_allocator_bytes: u128,
    /// What lies outside the allocator, explained (CUDA context and workspaces, paged optimizer
    /// states, NCCL buffers).
    pub outside_terms: Vec<Term>,
    /// GPUs in total (the numbers above are per GPU).
    pub world_size: u128,
    /// micro-batch × accumulation × data-parallel ranks.
    pub effective_batch: u128,
    /// CPU RAM one rank needs for offloaded tensors.
    pub cpu_bytes_per_rank: u128,
    /// CPU RAM one node needs (all its ranks).
    pub cpu_bytes_per_node: u128,
    /// What is offloaded, explained.
    pub cpu_terms: Vec<Term>,
    /// What the plan assumes beyond the settings as given (how transformers runs this model).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

fn total(terms: &[Term]) -> u128 {
    terms.iter().fold(0u128, |a, t| a.saturating_add(t.bytes))
}

/// Refuses inputs the model cannot plan (ranges, and a rank above the hidden size).
fn check_inputs(arch: &Architecture, s: &Settings) -> Result<(), PlanError> {
    arch.validate()?;
    s.validate()?;
    if arch.is_moe() && !s.target_parameters.is_empty() && s.lora_dropout > 0.0 {
        return Err(PlanError::InvalidSetting {
            field: "target_parameters",
            why: format!(
                "LoRA on the experts (peft's ParamWrapper) refuses lora_dropout {}: set it to 0",
                s.lora_dropout
            ),
        });
    }
    if arch.is_moe() && s.experts_layout == super::settings::ExpertsLayout::PerExpert {
        use super::arch::Target;
        let why = if arch.moe_layout().is_some_and(|m| m.mxfp4_checkpoint) {
            Some("gpt-oss's experts are fused 3-D parameters in every transformers release: plan the fused layout".to_string())
        } else if !s.target_parameters.is_empty() {
            Some("target_parameters adapts fused 3-D expert parameters, which transformers 4's per-expert layout does not have: use the fused layout, or leave target_parameters empty".to_string())
        } else if s
            .targets
            .iter()
            .any(|t| matches!(t, Target::Gate | Target::Up | Target::Down))
        {
            Some("with transformers 4's per-expert layout, LoRA on the MLP (all-linear, gate/up/down) adapts every expert's Linear layers, which lorafit does not model: target the attention projections (q, k, v, o), or plan the fused layout of transformers 5".to_string())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(PlanError::InvalidSetting {
                field: "experts_layout",
                why,
            });
        }
    }
    steptrace::check_method(arch, s)?;
    if matches_nothing(arch, s) {
        return Err(PlanError::InvalidSetting {
            field: "target_modules",
            why: format!(
                "no module of {} is named {}: its experts are fused 3-D parameters and it has no dense MLP, so gate_proj, up_proj and down_proj do not exist (peft raises \"Target modules … not found in the base model\"); add attention projections (q, k, v, o) or target_parameters",
                if arch.name.is_empty() { "this model" } else { &arch.name },
                s.targets.iter().map(|t| format!("{}_proj", t.name())).collect::<Vec<_>>().join(" or "),
            ),
        });
    }
    if s.lora_r > arch.hidden_size && !s.base_trained() {
        return Err(PlanError::InvalidSetting {
            field: "lora_r",
            why: format!("rank {} exceeds hidden_size {}", s.lora_r, arch.hidden_size),
        });
    }
    Ok(())
}

/// Whether LoRA's target modules match nothing in the model: only MLP projections, on a
/// mixture of experts whose every layer routes to fused experts with no shared MLP.
fn matches_nothing(arch: &Architecture, s: &Settings) -> bool {
    use super::arch::Target;
    let mlp_only = s
        .targets
        .iter()
        .all(|t| matches!(t, Target::Gate | Target::Up | Target::Down));
    let dense_mlp = arch.moe_layers()
        < u128::from(arch.num_hidden_layers.min(super::arch::MAX_LAYERS))
        || arch.shared_width() > 0;
    arch.is_moe()
        && s.experts_layout == super::settings::ExpertsLayout::Fused
        && s.target_parameters.is_empty()
        && mlp_only
        && !dense_mlp
}

/// Plans one configuration, with the quick reserve allowance: the allocated figures are the
/// step program's (its sequence run at two short depths and extrapolated to the model's,
/// [`steptrace::periodic::Short`]) wherever it runs on one GPU; the closed-form terms answer
/// for several GPUs, a fused cross-entropy and transformers 4's per-expert layout, and, built
/// with the `page` feature (the first-visit page's wasm), everywhere.
pub fn plan(arch: &Architecture, s: &Settings) -> Result<Plan, PlanError> {
    let mut p = plan_terms(arch, s)?;
    if !program_runs(arch, s) {
        return Ok(p);
    }
    // The first-visit page keeps the terms' quick estimate (feature `page`, for its size) where
    // they model the step; a method only the program plans takes the program's quick path.
    if cfg!(feature = "page") && program_only(s).is_none() {
        return Ok(p);
    }
    let device = steptrace::Device::Cuda;
    let ctx = Ctx::new(arch, s);
    match steptrace::periodic::Short::run(arch, &steptrace_settings(s), device) {
        Ok(short) => {
            from_program(&mut p, &ctx, short);
            Ok(p)
        }
        Err(e) if e == steptrace::too_large() && program_only(s).is_none() => {
            p.notes.push(BEYOND_PROGRAM.into());
            Ok(p)
        }
        Err(e) => Err(e),
    }
}

/// The method of `s` that only the step program plans (the closed-form terms, which answer for
/// several GPUs, a fused cross-entropy and transformers 4's per-expert layout, do not model it),
/// if any: the setting that chooses it and its name.
fn program_only(s: &Settings) -> Option<(&'static str, &'static str)> {
    use super::settings::FinetuningType;
    if s.preference() {
        return Some(("stage", s.stage.label()));
    }
    match s.finetuning_type {
        FinetuningType::Full => Some(("finetuning_type", "full fine-tuning")),
        FinetuningType::Freeze => Some(("finetuning_type", "freeze tuning")),
        FinetuningType::Lora if s.use_dora => Some(("use_dora", "DoRA")),
        FinetuningType::Lora => s.lora_fa.then_some(("lora_fa", "LoRA-FA")),
    }
}

/// The note of a one-GPU plan whose step the program cannot hold, which the terms answer.
pub const BEYOND_PROGRAM: &str = "a step past what an allocation sequence holds (a generous bound of its memory passes 2^60 bytes, an exbibyte): planned by the closed-form terms, which lorafit keeps for several GPUs";

/// The quick plan's nvidia-smi figure across micro-batches and sequence lengths, for searches
/// that plan one configuration at many of them: the step's live bytes as polynomials in both
/// ([`steptrace::surface`]) with the quick allowance and what lies outside the allocator.
#[derive(Clone, Debug)]
pub struct QuickSurface {
    surface: steptrace::surface::Surface,
    layers: u64,
    outside_bytes: u128,
    settings: Settings,
}

impl QuickSurface {
    /// The surface of `s`'s configuration (its batch and sequence are not read), where the step
    /// program plans it on one GPU and its allocations do not change with the batch or the
    /// sequence.
    pub fn build(arch: &Architecture, s: &Settings) -> Option<QuickSurface> {
        let probe = Settings {
            batch: 2,
            seq: 1024,
            ..s.clone()
        };
        if !program_runs(arch, &probe) {
            return None;
        }
        let terms = plan_terms(arch, &probe).ok()?;
        Some(QuickSurface {
            surface: steptrace::surface::Surface::build(arch, &steptrace_settings(&probe))?,
            layers: arch.num_hidden_layers,
            outside_bytes: terms.outside_allocator_bytes,
            settings: s.clone(),
        })
    }

    /// [`plan`]'s nvidia-smi figure at `batch` and `seq`: `None` where the surface does not
    /// answer (a sequence shorter than the sliding window, a batch whose part did not hold),
    /// `Some(Err)` where the plan refuses or the step passes what a sequence holds (which the
    /// terms plan, far beyond any GPU).
    pub fn nvidia_smi(&self, batch: u64, seq: u64) -> Option<Result<u128, PlanError>> {
        if !self.surface.answers(batch, seq) {
            return None;
        }
        let s = Settings {
            batch,
            seq,
            ..self.settings.clone()
        };
        if let Err(e) = s.validate() {
            return Some(Err(e));
        }
        let Some((peak, end)) = self.surface.peak_and_end(batch, seq) else {
            return Some(Err(steptrace::too_large()));
        };
        let (peak, end) = (u128::from(peak), u128::from(end));
        let (rounding, frag) = reserve::allowance(self.layers, peak, end);
        Some(Ok(peak + rounding + frag + self.outside_bytes))
    }
}

/// Whether the step program plans this configuration's allocated memory: one GPU, no fused
/// cross-entropy, transformers 5's fused experts.
fn program_runs(arch: &Architecture, s: &Settings) -> bool {
    s.parallel.world() <= 1
        && !s.fused_ce
        && !(arch.is_moe() && s.experts_layout == super::settings::ExpertsLayout::PerExpert)
}

/// The quick reserve allowance over the plan's allocated figures (one GPU).
fn requote(p: &mut Plan, ctx: &Ctx) {
    let peak = PhasePeak {
        phase: p.peak_phase,
        moment: String::new(),
        bytes: p.peak_allocated_bytes,
        terms: vec![],
    };
    let r = reserve::quick(ctx, &peak, p.steady_state_bytes, &[]);
    p.peak_reserved_bytes = r.bytes;
    p.reserve_explanation = r.explanation;
    p.nvidia_smi_bytes = r.bytes + p.outside_allocator_bytes;
}

/// The settings the step program runs: one GPU's step (several GPUs run it unsharded).
fn steptrace_settings(s: &Settings) -> Settings {
    Settings {
        parallel: Default::default(),
        ..s.clone()
    }
}

/// The plan of the closed-form terms, reserved memory from the quick allowance.
fn plan_terms(arch: &Architecture, s: &Settings) -> Result<Plan, PlanError> {
    check_inputs(arch, s)?;
    if let Some((field, method)) = program_only(s).filter(|_| !program_runs(arch, s)) {
        return Err(PlanError::InvalidSetting {
            field,
            why: format!(
                "{method} is planned by the step program, on one GPU without a fused cross-entropy (and with transformers 5's fused experts); the closed-form terms that plan the rest do not model it yet"
            ),
        });
    }
    let notes = notes(arch, s);
    let run = s.as_run(arch);
    let s: &Settings = &run;
    // Sharded mixed precision computes in low precision while the shards stay fp32.
    let compute = distributed::compute_settings(s);
    let storage_ctx = Ctx::new(arch, s);
    let ctx = Ctx::new(arch, compute.as_ref().unwrap_or(s));
    let params = weights::param_counts(&ctx);
    let frozen = weights::frozen_terms(&storage_ctx);
    let trainable = weights::trainable_terms(&ctx, &params);
    let grads = weights::gradient_terms(&ctx, &params, arch.num_hidden_layers as u128, true);
    let (opt_states, paged) = weights::optimizer_terms(&ctx, &params);
    // Paged optimizer states live in CUDA unified memory, outside torch's allocator statistics.
    let opt_in_allocator: Vec<Term> = if paged { vec![] } else { opt_states.clone() };
    // Sharding and offload across GPUs (a no-op on one GPU): what this rank holds.
    let rank = distributed::apply(&ctx, &frozen, &trainable, &grads, &opt_in_allocator);
    let mut step = phases::Step::new(&ctx, &params, &rank);
    if s.measured_overhead_bytes > 0 {
        step.statics.push(Term::product(
            Component::MeasuredOverhead,
            "what your run held beyond the plan (measured − planned peak)",
            &[named_bytes(
                "measured overhead",
                u128::from(s.measured_overhead_bytes),
            )],
        ));
    }
    let workspace = s.cublas_workspace_bytes()?;
    if workspace > 0 {
        step.statics.push(Term::product(
            Component::CublasWorkspace,
            "cuBLAS workspaces (the forward's thread and autograd's), kept from their first GEMM",
            &[
                super::term::f("threads", CUBLAS_THREADS),
                named_bytes("workspace", u128::from(workspace)),
            ],
        ));
    }
    let all_phases = step.phases();
    let (peak, per_phase) = pick_peak(all_phases);
    let steady = total(&step.statics);
    let reserve = reserve::quick(&ctx, &peak, steady, &rank.comm);
    let paged_bytes = if paged { total(&opt_states) } else { 0 };
    let outside_terms = reserve::outside_terms(s, paged_bytes);
    let outside = total(&outside_terms);
    let par = &s.parallel;
    let cpu = step.cpu_terms();
    Ok(Plan {
        params,
        peak_allocated_bytes: peak.bytes,
        peak_phase: peak.phase,
        peak_moment: peak.moment.clone(),
        breakdown: breakdown(&peak),
        terms: peak.terms.clone(),
        phases: per_phase,
        steady_state_bytes: steady,
        peak_reserved_bytes: reserve.bytes,
        reserve_explanation: reserve.explanation,
        reserve_simulated: reserve.simulated,
        cached_free_blocks: reserve.cached_free,
        nvidia_smi_bytes: reserve.bytes + outside,
        outside_allocator_bytes: outside,
        outside_terms,
        world_size: par.world(),
        effective_batch: (s.batch as u128) * (s.grad_accum as u128) * par.world(),
        cpu_bytes_per_rank: total(&cpu),
        cpu_bytes_per_node: total(&cpu) * par.gpus_per_node as u128,
        cpu_terms: cpu,
        notes,
    })
}

/// Plans one configuration with PyTorch's caching allocator simulated over the step: the
/// reserved and nvidia-smi figures are the allocator's, not an allowance. Tens of
/// milliseconds for a 7B model (the sequence has tens of thousands of events); [`plan`] is the
/// microsecond version with a quick reserve allowance.
pub fn plan_simulated(arch: &Architecture, s: &Settings) -> Result<Plan, PlanError> {
    plan_simulated_on(arch, s, super::steptrace::Device::Cuda)
}

/// [`plan_simulated`] with the step run on `device`: the measuring harness's emulated device
/// for comparing with its allocator replays (`formats::validation`), a CUDA GPU otherwise.
pub fn plan_simulated_on(
    arch: &Architecture,
    s: &Settings,
    device: super::steptrace::Device,
) -> Result<Plan, PlanError> {
    let mut p = plan_terms(arch, s)?;
    let compute = distributed::compute_settings(s);
    let ctx = Ctx::new(arch, compute.as_ref().unwrap_or(s));
    let comm = distributed::apply(&ctx, &[], &[], &[], &[]).comm;
    let trace = if program_runs(arch, s) {
        // One GPU: the full run gives the allocated figures and the sequence to replay; a step
        // too large for it is the quick plan's (the short runs, or past them the terms),
        // reserved from the allowance.
        match steptrace::generate_on(arch, &steptrace_settings(s), device) {
            Ok(t) => from_program(&mut p, &ctx, steptrace::periodic::Short::full(arch, t)),
            // A method only the program plans has no other plan (and the page's `plan` of
            // one is this function).
            Err(e) if program_only(s).is_some() => return Err(e),
            Err(_) => return plan(arch, s),
        }
    } else {
        // Several GPUs replay one GPU's step; no program, no replay.
        match reserve::one_gpu_trace(arch, s, device) {
            Some(t) => t,
            None => return Ok(p),
        }
    };
    if let Some(r) = reserve::simulate(&trace, s, &p, &comm) {
        p.peak_reserved_bytes = r.bytes;
        p.reserve_explanation = r.explanation;
        p.reserve_simulated = true;
        p.cached_free_blocks = r.cached_free;
        p.nvidia_smi_bytes = r.bytes + p.outside_allocator_bytes;
    }
    Ok(p)
}

/// Takes the allocated figures of `p` from the step's allocation sequence lined up with the
/// model (`short`): the peak of live bytes, its phase and moment, each phase's highest moment,
/// the breakdown and the terms (the tensors live then, grouped by [`steptrace::anatomy`]), the
/// memory between steps, and the quick reserve allowance over them. Where two short runs'
/// storages do not add up to a moment (a structure [`steptrace::periodic`] does not know), the
/// full run answers. Returns the sequence it read (the longer short run, or the full one).
fn from_program(p: &mut Plan, ctx: &Ctx, short: steptrace::periodic::Short) -> steptrace::Trace {
    let m = &short.moments;
    let terms = |mo: &anatomy::Moment| {
        short
            .live_at(mo.event, mo.bytes)
            .map(|l| anatomy::terms_of(ctx, &short.trace.labels, &m.alloc_phase, &l))
    };
    let at = |mo: &anatomy::Moment| {
        Some(PhasePeak {
            phase: phase_of(mo.phase),
            moment: mo.words(),
            bytes: u128::from(mo.bytes),
            terms: terms(mo)?,
        })
    };
    let phases: Option<Vec<PhasePeak>> = m.phases.iter().map(at).collect();
    let (Some(peak), Some(phases)) = (at(&m.peak), phases) else {
        // Only short runs can miss (a full run's storages add up by construction).
        let settings = steptrace_settings(ctx.s);
        return match steptrace::generate_on(ctx.arch, &settings, short.trace.device) {
            Ok(t) if short.how != steptrace::periodic::How::Full => {
                from_program(p, ctx, steptrace::periodic::Short::full(ctx.arch, t))
            }
            _ => short.trace,
        };
    };
    p.peak_allocated_bytes = peak.bytes;
    p.peak_phase = peak.phase;
    p.peak_moment = peak.moment.clone();
    p.breakdown = breakdown(&peak);
    p.terms = peak.terms;
    p.phases = phases;
    p.steady_state_bytes = u128::from(m.end_bytes);
    requote(p, ctx);
    short.trace
}

/// The plan's phase of a phase of the sequence (setup and inputs come before the forward, zero_grad
/// ends the optimizer's part).
fn phase_of(p: steptrace::StepPhase) -> Phase {
    use steptrace::StepPhase as S;
    match p {
        S::Precompute => Phase::PrecomputeRef,
        S::RefForward => Phase::RefForward,
        S::Setup | S::Inputs | S::Forward => Phase::Forward,
        S::Backward => Phase::Backward,
        S::Optimizer | S::ZeroGrad => Phase::Optimizer,
    }
}

/// The memory effect of each LoRA variant the settings use: none in the step for rsLoRA and
/// LoRA+, an initialisation-time cost for PiSSA and OLoRA, no gradient or state for A with
/// LoRA-FA (planned by the step program).
fn lora_variant_notes(arch: &Architecture, s: &Settings) -> Vec<String> {
    use super::settings::LoraInit;
    let mut out = vec![];
    if s.use_rslora {
        out.push(
            "rsLoRA (use_rslora): the adapters are scaled by α/√r instead of α/r; no memory effect"
                .into(),
        );
    }
    if s.loraplus_lr_ratio > 0.0 {
        out.push(format!(
            "LoRA+ (loraplus_lr_ratio {}): lora_B learns at that multiple of lora_A's rate, in a second optimizer parameter group with the same states; no memory effect",
            s.loraplus_lr_ratio
        ));
    }
    // The largest adapted weight, whose decomposition at initialisation is the largest (only
    // for the initialisations that decompose: every plan reads these notes).
    let largest = || {
        let ctx = Ctx::new(arch, s);
        arch.layer_groups()
            .iter()
            .flat_map(|&(k, _)| ctx.adapted_of(k))
            .map(|l| (l.out_features, l.in_features))
            .max_by_key(|&(o, i)| o * i)
    };
    let decomposes = matches!(s.init_lora_weights, LoraInit::Pissa | LoraInit::Olora);
    match (s.init_lora_weights, if decomposes { largest() } else { None }) {
        (LoraInit::Pissa, Some((o, i))) => {
            // torch.linalg.svd(W.float(), full_matrices=False): W in fp32, U, S, Vh.
            let k = o.min(i);
            let bytes = 4 * (o * i + o * k + k + k * i);
            out.push(format!(
                "PiSSA (init_lora_weights pissa): peft takes a full SVD of each adapted weight when it builds the adapters, before training (up to {:.2} GiB for the largest, {o} × {i}: the weight in fp32 and its factors); the base weights become W − B·A, the same size; nothing in the step",
                bytes as f64 / (1u64 << 30) as f64
            ));
        }
        (LoraInit::PissaFast, _) => out.push("PiSSA with a randomized SVD (pissa_niter_N): a low-rank decomposition of each adapted weight when peft builds the adapters, before training; nothing in the step".into()),
        (LoraInit::Olora, Some((o, i))) => out.push(format!(
            "OLoRA (init_lora_weights olora): a QR decomposition of each adapted weight in fp32 when peft builds the adapters, before training (the largest {o} × {i}); the base weights become W − B·A, the same size; nothing in the step"
        )),
        (LoraInit::Loftq | LoraInit::Eva | LoraInit::Corda, _) => out.push(format!(
            "init_lora_weights {}: the adapters are initialised before training (from the quantization error or from activations); the step trains the same A and B",
            s.init_lora_weights.name()
        )),
        _ => {}
    }
    if s.lora_fa {
        out.push("LoRA-FA: lora_A stays frozen after initialisation, so it takes no gradient and no optimizer state, and A's input is not saved for its gradient; only lora_B trains (peft's create_lorafa_optimizer)".into());
    }
    out
}

/// What a preference step runs, in the plan's numbers, one note per fact: the sequences and
/// scored tokens, the reference, KTO's KL pass, the log-probs, the disabled dropout.
fn preference_notes(arch: &Architecture, s: &Settings) -> Vec<String> {
    use super::settings::{PrefLogits, Stage};
    let seqs = s.sequences();
    let name = s.stage.label();
    let mut out = vec![if s.paired() {
        format!(
            "{name}: batch {} counts preference pairs: the model sees {seqs} sequences (chosen, then rejected) of {} tokens ({} prompt, {} completion)",
            s.batch,
            s.seq,
            s.prompt_tokens(),
            s.completion_tokens()
        )
    } else {
        format!(
            "{name}: batch {} counts unpaired examples of {} tokens ({} prompt, {} completion)",
            s.batch,
            s.seq,
            s.prompt_tokens(),
            s.completion_tokens()
        )
    }];
    out.push(
        if !s.uses_reference() {
            "no reference model: the loss compares the chosen and rejected completions directly"
        } else if s.precompute_ref_log_probs {
            "the reference log-probs are computed once before training (a no-grad pass over the batch), so the step has no reference forward"
        } else if s.base_trained() {
            "the reference model is a second, frozen copy of the weights, run under no_grad after the policy forward, on top of what the policy saved"
        } else {
            "the reference is the model with its adapters disabled, run under no_grad without checkpointing after the policy forward, on top of what the policy saved"
        }
        .into(),
    );
    if s.stage == Stage::Kto {
        out.push("KTO first runs the policy under no_grad over mismatched completions (its KL term), and the reference over both".into());
    }
    let scored = seqs.saturating_mul(s.completion_tokens());
    out.push(match s.pref_logits_run() {
        PrefLogits::Fused => format!(
            "TRL's fused head scores the {scored} completion tokens in [{} × 32768] tiles, never the [{seqs} × {} × {}] logits",
            scored.min(4096),
            s.seq,
            arch.vocab_size
        ),
        PrefLogits::Full => format!(
            "the full [{seqs} × {} × {}] logits are cast to fp32 and log-softmaxed (LLaMA-Factory, TRL 0.x, TRL's ORPO and CPO trainers)",
            s.seq, arch.vocab_size
        ),
    });
    if s.disable_dropout && s.lora_dropout > 0.0 {
        out.push(
            "dropout is disabled (TRL's disable_dropout), so lora_dropout keeps no mask".into(),
        );
    }
    out
}

/// How transformers 5.24 + peft run a mixture-of-experts model, where it differs from the
/// settings as given.
fn notes(arch: &Architecture, s: &Settings) -> Vec<String> {
    let mut out = vec![];
    match s.finetuning_type {
        super::settings::FinetuningType::Full => out.push(
            "full fine-tuning: every parameter is trained, so the LoRA settings (lora_r, lora_alpha, lora_dropout, target modules) do not apply".into(),
        ),
        super::settings::FinetuningType::Freeze => out.push(format!(
            "freeze tuning: every parameter of the {} {} decoder layers is trained, the rest (embeddings and lm_head included) is frozen; the LoRA settings (lora_r, lora_alpha, lora_dropout, target modules) do not apply",
            if s.freeze_trainable_layers > 0 { "last" } else { "first" },
            s.freeze_trainable_layers.unsigned_abs().min(arch.num_hidden_layers),
        )),
        super::settings::FinetuningType::Lora => {}
    }
    if s.preference() {
        out.extend(preference_notes(arch, s));
    }
    out.extend(lora_variant_notes(arch, s));
    let Some(m) = arch.moe_layout() else {
        if !s.target_parameters.is_empty() {
            out.push("target_parameters ignored: this model has no fused expert parameters".into());
        }
        return out;
    };
    let gib = |b: u128| b as f64 / (1u64 << 30) as f64;
    if m.mxfp4_checkpoint {
        out.push(
            "gpt-oss ships its experts in MXFP4, which transformers 5.24 cannot train (Mxfp4HfQuantizer.is_trainable is False, Trainer refuses the model): load it with Mxfp4Config(dequantize=True), which turns the experts into bf16 — planned as such"
                .into(),
        );
    }
    if !arch.family.layout().sdpa && s.attn_impl == AttnImpl::Sdpa {
        out.push(
            "gpt-oss has no sdpa support in transformers 5.24 (_supports_sdpa = False): its eager attention with sinks is planned"
                .into(),
        );
    }
    if s.experts_layout == super::settings::ExpertsLayout::PerExpert {
        out.push(
            "transformers 4 layout: every expert's projections and the router are nn.Linear layers (4-bit loading quantizes them) run by a Python loop over the experts; reserved memory comes from the quick allowance (the allocator simulation follows transformers 5)"
                .into(),
        );
    } else if s.quant.is_some() {
        let ctx = Ctx::new(arch, s);
        out.push(format!(
            "bitsandbytes quantizes only nn.Linear layers: the fused experts and routers stay unquantized{} ({:.1} GiB of experts)",
            if s.prepare_kbit {
                ", and prepare_model_for_kbit_training casts them to fp32"
            } else {
                ""
            },
            gib(arch.expert_params() * ctx.expert.bytes())
        ));
    }
    // transformers 4's per-expert layout has no experts_implementation (its note says so).
    if s.experts_layout == super::settings::ExpertsLayout::Fused {
        match s.experts_impl {
            super::settings::ExpertsImpl::Eager => out.push(
                "experts_implementation=eager: what is saved does not depend on the routing; the experts' backward is planned with its worst case, one expert receiving every token"
                    .into(),
            ),
            super::settings::ExpertsImpl::BatchedMm => out.push(
                "experts_implementation=batched_mm copies its experts' weights for every token–expert pair and keeps them for backward; grouped_mm (the default) does not"
                    .into(),
            ),
            super::settings::ExpertsImpl::GroupedMm => {}
        }
    }
    let _ = m;
    out
}

/// The highest moment is the peak (the first of equals); each phase reports its own highest.
fn pick_peak(phases: Vec<PhasePeak>) -> (PhasePeak, Vec<PhasePeak>) {
    let peak_idx = phases
        .iter()
        .enumerate()
        .max_by_key(|(i, p)| (p.bytes, usize::MAX - i))
        .map(|(i, _)| i)
        .unwrap_or(0);
    let peak = phases[peak_idx].clone();
    let mut per_phase: Vec<PhasePeak> = vec![];
    for p in phases {
        match per_phase.iter_mut().find(|q| q.phase == p.phase) {
            Some(q) if q.bytes >= p.bytes => {}
            Some(q) => *q = p,
            None => per_phase.push(p),
        }
    }
    (peak, per_phase)
}

/// Bytes of every component at the peak, zeros included, in stacking order.
fn breakdown(peak: &PhasePeak) -> Vec<ComponentBytes> {
    Component::ALL
        .iter()
        .map(|&c| ComponentBytes {
            key: c.key(),
            label: c.label(),
            bytes: peak
                .terms
                .iter()
                .filter(|t| t.component == c)
                .fold(0u128, |a, t| a.saturating_add(t.bytes)),
        })
        .collect()
}
