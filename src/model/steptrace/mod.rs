//! The training step as PyTorch allocates it: the ordered sequence of tensor-storage allocations
//! and frees of one run (parameters, inputs, then two training steps: forward layer by layer,
//! the loss, backward layer by layer in reverse, the optimizer step and `zero_grad`), generated
//! from the same inputs the model plans from.
//!
//! The step is written as a small program mirroring transformers' and peft's forward code op by
//! op ([`program`]), over a miniature of autograd ([`tape`]) that keeps the references PyTorch
//! keeps (Python variables, saved tensors, gradient buffers) and runs backward in the engine's
//! order. Sizes and dtypes come from [`Ctx`](super::ctx::Ctx) and the architecture's
//! Linear shapes, the same facts the model's terms are built from. Replayed through the caching
//! allocator ([`super::allocator`]) the sequence gives the reserved memory ([`simulate`]).
//!
//! Pure: no I/O, no dependency.

pub mod anatomy;
pub mod periodic;
mod program;
pub mod rank;
mod simulate;
pub mod surface;
mod tape;
mod work;

pub use program::job::{eval_settings, After, JOB_STEP};
pub use simulate::{
    replay, replay_within, simulate, simulate_on, CachedBlock, PhaseFigures, Simulation,
};
pub use work::{step_work, StepWork, WARM_STEP};

use super::arch::Architecture;
use super::ctx::Ctx;
use super::error::PlanError;
use super::settings::Settings;

/// Where the step runs: what a real GPU allocates beyond the tensors autograd sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// A CUDA GPU: cuBLAS's workspaces, the temporary of CUDA's softmax backward, dropout's mask
    /// made before its output, gradients added in place into the engine's input buffer when it
    /// holds the only reference (`InputBuffer::accumulate`), and new segments placed below the
    /// previous ones by the driver, as measured on an H200.
    Cuda,
    /// The measuring harness's emulated device (fake tensors, `tests/data`): none of those —
    /// fake tensors are a tensor subclass, so autograd adds gradients out of place, and its
    /// `cudaMalloc` places each segment above the previous one.
    Emulated,
}

/// One event of the sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A storage of `bytes` is created.
    Alloc {
        /// Storage id (index into [`Trace::labels`]).
        id: u32,
        /// Size.
        bytes: u64,
        /// The CUDA stream it is allocated on (0: the default one; FSDP2's all-gathers and
        /// reduce-scatters allocate on their own streams, whose blocks the caching allocator
        /// keeps in separate pools).
        stream: u8,
    },
    /// The storage is freed.
    Free {
        /// Storage id.
        id: u32,
    },
}

/// Phase of the run, as the reference recordings name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StepPhase {
    /// Parameters and buffers.
    Setup,
    /// Input ids and labels.
    Inputs,
    /// A preference trainer's reference log-probs, computed once before training
    /// (`precompute_ref_log_probs`).
    Precompute,
    /// A GRPO step's scoring of its generated completions (`_generate_and_score_completions`
    /// after generation): the rollout tensors and the no-grad log-prob passes.
    Score,
    /// Forward pass, through the loss.
    Forward,
    /// A preference step's reference forward (no grad), between its policy forward and loss.
    RefForward,
    /// `loss.backward()`.
    Backward,
    /// `optimizer.step()`.
    Optimizer,
    /// `optimizer.zero_grad(set_to_none=True)`.
    ZeroGrad,
    /// After training: Trainer's evaluation loop (`model.eval()`, no grad).
    Eval,
    /// After training: peft's `merge_and_unload` on the GPU.
    Merge,
    /// A GRPO step's generation of its completions (`generate`), before its scoring.
    Generate,
}

impl StepPhase {
    /// Every phase, in step order.
    pub const ALL: [StepPhase; 12] = [
        StepPhase::Setup,
        StepPhase::Inputs,
        StepPhase::Precompute,
        StepPhase::Generate,
        StepPhase::Score,
        StepPhase::Forward,
        StepPhase::RefForward,
        StepPhase::Backward,
        StepPhase::Optimizer,
        StepPhase::ZeroGrad,
        StepPhase::Eval,
        StepPhase::Merge,
    ];

    /// Lowercase name (`setup`, `forward`, …).
    pub fn name(self) -> &'static str {
        match self {
            StepPhase::Setup => "setup",
            StepPhase::Inputs => "inputs",
            StepPhase::Precompute => "precompute_ref",
            StepPhase::Score => "score",
            StepPhase::Generate => "generate",
            StepPhase::Forward => "forward",
            StepPhase::RefForward => "ref_forward",
            StepPhase::Backward => "backward",
            StepPhase::Optimizer => "optimizer",
            StepPhase::ZeroGrad => "zero_grad",
            StepPhase::Eval => "eval",
            StepPhase::Merge => "merge",
        }
    }
}

/// What a storage holds (for naming cached blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum What {
    /// Frozen base weight.
    Weight,
    /// 4-bit quantization state.
    QuantState,
    /// Trainable weight (LoRA A/B, modules_to_save copy).
    Trainable,
    /// Buffer (rotary inverse frequencies).
    Buffer,
    /// Input ids, labels, mask.
    Input,
    /// Embedding output / residual stream.
    Hidden,
    /// Rotary cos / sin tables and their temporaries.
    Rotary,
    /// RMSNorm fp32 copy, square, variance, rsqrt.
    Norm,
    /// Output of a Linear layer.
    LinearOut,
    /// peft's cast of a module input to the adapter dtype.
    LoraCast,
    /// LoRA dropout output.
    Dropout,
    /// LoRA dropout mask (1 byte per element).
    DropoutMask,
    /// lora_A / lora_B outputs and the scaled sum.
    Lora,
    /// Autocast / dequantized copy of a weight.
    WeightCopy,
    /// LLM.int8's forward temporaries of an 8-bit Linear: the fp16 input, its int8 rows and
    /// scales, the outlier test, the int32 product and its fp16 dequantization.
    Int8Quant,
    /// DoRA's LoRA weight `B·A` (and the identity it is made from), weight norm and magnitude
    /// scale, and its scaled base output.
    Dora,
    /// Rotary embedding of q / k and its temporaries.
    Rope,
    /// Attention output and kernel state (logsumexp, seeds).
    Attention,
    /// Eager attention scores and probabilities.
    Scores,
    /// A materialised attention mask (causal with padding, a sliding window or packed
    /// documents; eager's additive form) and the bias sdpa makes of a boolean one.
    Mask,
    /// MLP gate, activation, up and product.
    Mlp,
    /// Gated DeltaNet linear attention: the convolution, the fp32 q/k/v/β/decay copies padded
    /// to whole chunks, the chunk systems and their solutions, the scan's states.
    LinearAttn,
    /// The vision tower's forward (no graph: temporaries of the forward) and its outputs.
    Vision,
    /// Router logits, probabilities, top-k, and the routed experts' tensors.
    Experts,
    /// Logits (module dtype or fp32 upcast).
    Logits,
    /// log_softmax output, loss, label shift.
    Loss,
    /// A gradient in flight during backward.
    Grad,
    /// A temporary of a derivative formula.
    BackwardTemp,
    /// A parameter's `.grad`.
    ParamGrad,
    /// Optimizer state.
    OptState,
    /// Optimizer temporary.
    OptTemp,
    /// A real run's measured overhead (calibration).
    Overhead,
    /// A thread's cuBLAS workspace (kept from its first GEMM to the end of the process).
    Workspace,
    /// A temporary a CUDA kernel allocates inside one op (softmax backward's `grad × output`).
    KernelTemp,
    /// Several GPUs: decoder layers FSDP / ZeRO-3 gather whole (the current and the prefetched).
    GatheredLayer,
    /// Several GPUs: FSDP's root unit (embeddings, final norm, lm_head) beyond this rank's shard.
    GatheredRoot,
    /// Several GPUs: DDP's gradient buckets and what its setup and forward send (the shape
    /// check, the module's states and buffers concatenated), DeepSpeed's reduce bucket.
    CommBucket,
    /// Evaluation: the losses, logits and labels kept for `compute_metrics`.
    EvalOutputs,
    /// The merge's temporaries: the LoRA delta `B·A`, a dequantized weight, its copies.
    MergeTemp,
    /// Generation: the keys and values `generate` caches for every layer.
    KvCache,
}

impl What {
    /// Every kind, in declaration order.
    pub const ALL: [What; 40] = [
        What::Weight,
        What::QuantState,
        What::Trainable,
        What::Buffer,
        What::Input,
        What::Hidden,
        What::Rotary,
        What::Norm,
        What::LinearOut,
        What::LoraCast,
        What::Dropout,
        What::DropoutMask,
        What::Lora,
        What::WeightCopy,
        What::Int8Quant,
        What::Dora,
        What::Rope,
        What::Attention,
        What::Scores,
        What::Mask,
        What::Mlp,
        What::LinearAttn,
        What::Vision,
        What::Experts,
        What::Logits,
        What::Loss,
        What::Grad,
        What::BackwardTemp,
        What::ParamGrad,
        What::OptState,
        What::OptTemp,
        What::Overhead,
        What::Workspace,
        What::KernelTemp,
        What::GatheredLayer,
        What::GatheredRoot,
        What::CommBucket,
        What::EvalOutputs,
        What::MergeTemp,
        What::KvCache,
    ];

    /// Short human name.
    pub fn name(self) -> &'static str {
        match self {
            What::Weight => "frozen weight",
            What::QuantState => "quantization state",
            What::Trainable => "trainable weight",
            What::Buffer => "buffer",
            What::Input => "input ids / labels",
            What::Hidden => "hidden state",
            What::Rotary => "rotary tables",
            What::Norm => "RMSNorm fp32 temporaries",
            What::LinearOut => "Linear output",
            What::LoraCast => "LoRA input cast",
            What::Dropout => "LoRA dropout output",
            What::DropoutMask => "LoRA dropout mask",
            What::Lora => "LoRA A/B outputs",
            What::WeightCopy => "weight copy (autocast / dequantized)",
            What::Int8Quant => "8-bit matmul temporaries (quantized input, int32 product)",
            What::Dora => "DoRA weight norm and scale",
            What::Rope => "rotary q/k",
            What::Attention => "attention output",
            What::Scores => "attention scores",
            What::Mask => "attention mask / bias",
            What::Mlp => "MLP activations",
            What::LinearAttn => "linear-attention (Gated DeltaNet) activations",
            What::Vision => "vision tower temporaries and outputs",
            What::Experts => "router / expert activations",
            What::Logits => "logits",
            What::Loss => "log_softmax / loss",
            What::Grad => "activation gradient",
            What::BackwardTemp => "backward temporary",
            What::ParamGrad => "parameter gradient",
            What::OptState => "optimizer state",
            What::OptTemp => "optimizer temporary",
            What::Overhead => "measured overhead of your run",
            What::Workspace => "cuBLAS workspace",
            What::KernelTemp => "CUDA kernel temporary",
            What::GatheredLayer => "gathered decoder layers (all-gather output or unsharded copy)",
            What::GatheredRoot => {
                "gathered embedding / lm_head (all-gather output or unsharded copy)"
            }
            What::CommBucket => "communication buffer (gradient bucket, broadcast staging)",
            What::EvalOutputs => "evaluation outputs kept (losses, logits, labels)",
            What::MergeTemp => "merge temporary (LoRA delta, dequantized weight)",
            What::KvCache => "KV cache (generation)",
        }
    }
}

/// The block of the model whose forward made a storage, where the kind of tensor alone does not
/// say why it is kept (a Linear's output, a frozen weight, an autocast copy), and the layer
/// inputs a gradient checkpoint keeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Block {
    /// Outside the blocks below (embeddings, norms, the LoRA path, the loss).
    #[default]
    Other,
    /// Self-attention (its projections, rotary, the kernel).
    Attention,
    /// The dense MLP.
    Mlp,
    /// The router and the routed experts of a mixture-of-experts layer.
    Experts,
    /// A layer input a gradient checkpoint keeps until the layer's backward.
    Checkpoint,
    /// The vision tower of a vision-language model (its weights, inputs and forward).
    Vision,
}

impl Block {
    /// Every block.
    pub const ALL: [Block; 6] = [
        Block::Other,
        Block::Attention,
        Block::Mlp,
        Block::Experts,
        Block::Checkpoint,
        Block::Vision,
    ];

    /// The words a term's label adds for the block (empty for [`Block::Other`]).
    pub fn suffix(self) -> &'static str {
        match self {
            Block::Other => "",
            Block::Attention => " (attention)",
            Block::Mlp => " (MLP)",
            Block::Experts => " (experts)",
            Block::Checkpoint => " (kept by the checkpoint)",
            Block::Vision => " (vision tower)",
        }
    }
}

/// What a storage held, in which decoder layer and block it was made, and its element size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label {
    /// Kind of tensor.
    pub what: What,
    /// Decoder layer, if made inside one.
    pub layer: Option<u32>,
    /// Block whose forward made it.
    pub block: Block,
    /// Bytes per element (0: not recorded, e.g. a byte-sized buffer of a kernel).
    pub elem_bytes: u8,
}

impl Label {
    /// A label outside every block, element size unknown.
    pub fn new(what: What, layer: Option<u32>) -> Label {
        Label {
            what,
            layer,
            block: Block::Other,
            elem_bytes: 0,
        }
    }
}

/// The generated sequence.
#[derive(Clone, Debug)]
pub struct Trace {
    /// Allocations and frees in order.
    pub events: Vec<Event>,
    /// The decoder layer each event belongs to (`u32::MAX`: none), for [`periodic`].
    pub event_tags: Vec<u32>,
    /// Label of each storage id.
    pub labels: Vec<Label>,
    /// `(first event index, step, phase)` at each phase change (step 0 = before training).
    pub phases: Vec<(usize, u8, StepPhase)>,
    /// Peak of live bytes (sum of requested sizes) over the sequence.
    pub peak_live_bytes: u64,
    /// The device the sequence runs on (the replay gives it that device's address order).
    pub device: Device,
    /// Host memory (offloaded storages) by kind, when its total was highest.
    pub host: Vec<(What, u64)>,
    /// CUDA managed memory held at the end (a paged optimizer's large states): on the GPU,
    /// outside the caching allocator.
    pub paged_bytes: u64,
    /// The first of the extended ops (`model::extended`) the step ran, if any.
    pub extended: Option<&'static str>,
}

/// Generates the allocation sequence of a run on a CUDA GPU: setup, inputs and two training
/// steps.
pub fn generate(arch: &Architecture, s: &Settings) -> Result<Trace, PlanError> {
    generate_on(arch, s, Device::Cuda)
}

/// [`generate`] on a chosen device.
pub fn generate_on(arch: &Architecture, s: &Settings, device: Device) -> Result<Trace, PlanError> {
    generate_after::<{ After::Nothing.code() }>(arch, s, device, false)
}

/// [`generate_on`] with every decode call of a GRPO generation op by op, as a recording holds
/// it (the plans run a long generation's middle calls as the cache's growth alone, which keeps
/// every phase's peak and reserved: `tests/it/grpo.rs`).
pub fn generate_exact_on(
    arch: &Architecture,
    s: &Settings,
    device: Device,
) -> Result<Trace, PlanError> {
    generate_after::<{ After::Nothing.code() }>(arch, s, device, true)
}

/// The run of [`generate_on`] with the job's phase `after` the two training steps (the
/// evaluation loop, or the merge), numbered step [`JOB_STEP`].
pub fn generate_job(
    arch: &Architecture,
    s: &Settings,
    device: Device,
    after: After,
) -> Result<Trace, PlanError> {
    match after {
        After::Nothing => generate_after::<{ After::Nothing.code() }>(arch, s, device, false),
        After::Eval => generate_after::<{ After::Eval.code() }>(arch, s, device, false),
        After::Merge => generate_after::<{ After::Merge.code() }>(arch, s, device, false),
    }
}

/// [`generate_job`] for one phase after the steps, as a constant: the run of the training
/// steps alone ([`generate_on`]) is generated without the phases' ops.
fn generate_after<const AFTER: u8>(
    arch: &Architecture,
    s: &Settings,
    device: Device,
    exact: bool,
) -> Result<Trace, PlanError> {
    let after = After::of_code(AFTER);
    super::extended::check(arch, s)?;
    arch.validate()?;
    s.validate()?;
    check_method(arch, s)?;
    check_size(arch, s)?;
    if after == After::Eval {
        let e = eval_settings(s);
        check_size(arch, &e)?;
        if e.job.generates_in_eval() {
            // The cache grows to the prompt and the new tokens; two batches generate, each its
            // prefill and first and last decode calls op by op, the others as the cache's growth.
            let c = e.job.eval_new_tokens(&e);
            let long = Settings {
                seq: e.prompt_tokens().saturating_add(c),
                ..e.clone()
            };
            check_size(arch, &long)?;
            let layers = u128::from(arch.num_hidden_layers);
            let events = 2
                * (layers * 3_000 * (1 + 2 * u128::from(program::FULL_DECODE_CALLS))
                    + u128::from(c) * (layers * 4 + 64));
            if events > 1u128 << 26 {
                return Err(too_large());
            }
        }
    }
    let run = s.as_run(arch);
    // One rank's step: sharded mixed precision computes in low precision while its weight
    // shards stay fp32.
    let compute = super::distributed::compute_settings(&run);
    let ctx = Ctx::new(arch, compute.as_ref().unwrap_or(&run));
    // FSDP keeps the loaded fp32 shards and gathers them in the compute dtype; DeepSpeed casts
    // the module itself (`module.bfloat16()` in `DeepSpeedEngine._configure_distributed_model`,
    // deepspeed/runtime/engine.py), so its shards are in the compute dtype.
    let stored = if run.parallel.strategy.is_zero() {
        ctx.aux_weight.bytes()
    } else {
        Ctx::new(arch, &run).aux_weight.bytes()
    };
    let scale = (stored / ctx.aux_weight.bytes().max(1)).max(1) as u64;
    let rank = rank::Rank::of(&run.parallel, scale);
    program::run::<AFTER>(&ctx, device, rank, exact)
}

/// What transformers' `generate` would run that the program does not plan (its op-by-op
/// `generate`, `program/generate.rs`, has the standard attention's `DynamicCache` under sdpa or
/// flash attention): GRPO's generation and the evaluation's both ask.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GenerateGap {
    /// Another attention kind, which caches otherwise.
    Attention,
    /// Eager attention's scores against the growing cache.
    Eager,
    /// Sequences past a sliding window of this many tokens (the cache keeps only the window).
    Window(u64),
}

impl GenerateGap {
    /// The gap of a generation of `arch` with `s` to `tokens`-long sequences, if any.
    pub(crate) fn of(arch: &Architecture, s: &Settings, tokens: u64) -> Option<GenerateGap> {
        if arch.family.layout().attention != crate::model::family::AttentionKind::Standard {
            Some(GenerateGap::Attention)
        } else if s.attn_impl == crate::model::AttnImpl::Eager {
            Some(GenerateGap::Eager)
        } else {
            arch.sliding_window_tokens()
                .filter(|&w| tokens > w)
                .map(GenerateGap::Window)
        }
    }

    /// Why it is refused, without a remedy.
    pub(crate) fn why(self, arch: &Architecture) -> String {
        match self {
            GenerateGap::Attention => format!("transformers' generate is planned with the standard attention's KV cache; {}'s attention caches otherwise", arch.family.name()),
            GenerateGap::Eager => "transformers' generate is planned with sdpa or flash attention; eager attention's scores against the growing cache are not planned yet".into(),
            GenerateGap::Window(w) => format!("past its {w}-token window a sliding layer's DynamicCache keeps only the window, which is not planned yet"),
        }
    }
}

/// Refuses the training methods the program does not run for `arch` (the plan refuses them
/// through here too).
pub(crate) fn check_method(arch: &Architecture, s: &Settings) -> Result<(), PlanError> {
    // A build without the extended ops refuses their steps before this (`extended::check`):
    // their checks are left out of it.
    let extended = super::extended::EXTENDED;
    if extended && s.preference() && s.fused_ce.any() {
        return Err(PlanError::InvalidSetting {
            field: "fused_ce",
            why: "a fused linear cross-entropy replaces the SFT loss; a preference trainer scores its sequences through its own head (logits: TRL's fused LM head or the full logits)".into(),
        });
    }
    if extended && s.fused_ce == crate::model::FusedCe::Cce && s.aux_weight_dtype().bytes() != 2 {
        let why = if s.quant.is_some() && s.prepare_kbit {
            "cut cross-entropy's backward asserts a 16-bit lm_head (cce_backward.py), and prepare_model_for_kbit_training upcasts it to fp32; axolotl casts it back to the compute dtype when cut_cross_entropy is on (loaders/model.py _configure_embedding_dtypes): plan with prepare_kbit false"
        } else {
            "cut cross-entropy's backward asserts 16-bit hidden states and lm_head (cce_backward.py): plan with bf16 or fp16 weights"
        };
        return Err(PlanError::InvalidSetting {
            field: "fused_ce",
            why: why.into(),
        });
    }
    if extended && s.sft_fused_head() && s.fused_ce.any() {
        return Err(PlanError::InvalidSetting {
            field: "fused_ce",
            why: "TRL's SFTTrainer turns Liger's fused cross-entropy off and scores through its own fused LM head (trl/trainer/sft_trainer.py:1126-1139): plan with logits fused or with fused_ce, not both".into(),
        });
    }
    // (Without the extended ops Liger's kernels are refused before this: `extended::check`.)
    if extended
        && arch.family.layout().liger_unimportable
        && (s.liger.any() || s.fused_ce == crate::model::settings::FusedCe::Liger)
    {
        return Err(PlanError::InvalidSetting {
            field: if s.liger.any() {
                "liger_kernel"
            } else {
                "fused_ce"
            },
            why: crate::model::family::liger_import_failure(arch.family),
        });
    }
    if extended
        && s.liger.any()
        && arch.family.layout().liger.is_none()
        && arch.family.layout().liger_unplanned.is_none()
    {
        return Err(PlanError::InvalidSetting {
            field: "liger_kernel",
            why: format!("liger-kernel 0.8.5 has no kernels for {0} (no apply_liger_kernel_to_{0}; it has them for {1}), and its switch leaves the model as it is: plan without liger_kernel (its fused cross-entropy is fused_ce)", arch.family.name(), crate::model::Family::with_liger()),
        });
    }
    if let Some(l) = arch
        .family
        .layout()
        .liger
        .filter(|l| extended && s.liger.rope && !l.rope_planned())
    {
        let f = arch.family.name();
        return Err(PlanError::InvalidSetting {
            field: "liger_kernel",
            why: if l.rope == crate::model::family::LigerRope::Unplanned {
                format!("Liger-Kernel's RoPE on {f} is not planned yet (apply_liger_kernel_to_{f}(rope=True) installs liger_rotary_pos_emb over the rotating part of each head; it is off by default), nor measured: plan with liger_kernel rms_norm,swiglu")
            } else {
                format!("Liger-Kernel has no RoPE kernel for {f} (its apply_liger_kernel_to_{f} installs none for rope=True and leaves it off by default): plan with liger_kernel rms_norm,swiglu")
            },
        });
    }
    if extended && s.liger.swiglu && arch.family.layout().liger.is_some_and(|l| !l.swiglu()) {
        return Err(PlanError::InvalidSetting {
            field: "liger_kernel",
            why: format!("Liger-Kernel has no SwiGLU kernel for {} (its apply_liger_kernel_to_{} patches none: the experts' SwiGLU is clamped): plan with liger_kernel rms_norm,rope", arch.family.name(), arch.family.name()),
        });
    }
    if extended
        && s.liger.swiglu
        && arch.family.layout().liger.is_some_and(|l| l.experts)
        && !crate::model::peft_targets::expert_loras(arch, s).is_empty()
    {
        let how = if s.target_parameters.is_empty() {
            "gate_proj / up_proj / down_proj in target_modules, which peft maps onto them for this family"
        } else {
            "target_parameters"
        };
        return Err(PlanError::InvalidSetting {
            field: "liger_kernel",
            why: format!("Liger-Kernel's SwiGLU replaces the fused experts (LigerExperts), whose weights its fused kernel reads directly; LoRA on them ({how}) is not planned with it: plan with liger_kernel rms_norm,rope or without LoRA on the experts"),
        });
    }
    if extended
        && s.liger.any()
        && s.images.images_per_sample > 0
        && !arch
            .family
            .layout()
            .liger
            .is_some_and(|l| l.tower_untouched)
    {
        return Err(PlanError::InvalidSetting {
            field: "liger_kernel",
            why: "Liger-Kernel's kernels are planned for text steps; with images (the vision-language model's forward and its tower) not yet: plan without liger_kernel".into(),
        });
    }
    if extended && s.liger.rms_norm && s.base_trained() {
        return Err(PlanError::InvalidSetting {
            field: "liger_kernel",
            why: "Liger's RMSNorm with trained norm weights (full or freeze tuning) sums its weight gradient from a [streaming multiprocessors × width] fp32 buffer sized by the GPU; not planned yet: plan with liger_kernel swiglu,rope".into(),
        });
    }
    if extended
        && s.grpo()
        && (arch.is_moe() || arch.vision.is_some() || arch.family.layout().hybrid.is_some())
    {
        return Err(PlanError::InvalidSetting {
            field: "stage",
            why: "GRPO is planned for dense text decoders (Llama, Mistral, Qwen2, Qwen3, Gemma, Phi-3); its experts', linear attention's and images' passes through TRL's fused head are not planned yet".into(),
        });
    }
    if extended && s.grpo() && s.generation == crate::model::settings::Generation::Hf {
        if let Some(gap) = GenerateGap::of(arch, s, s.seq) {
            let remedy = match gap {
                GenerateGap::Attention => "plan its generation elsewhere",
                GenerateGap::Eager => "plan sdpa, or the generation elsewhere",
                GenerateGap::Window(_) => "plan seq within the window, or the generation elsewhere",
            };
            return Err(PlanError::InvalidSetting {
                field: "generation",
                why: format!("{}: {remedy} (generation vllm_server)", gap.why(arch)),
            });
        }
    }
    if extended && s.preference() && arch.is_moe() {
        return Err(PlanError::InvalidSetting {
            field: "stage",
            why: "preference training of a mixture of experts (its router logits through TRL's fused head and the reference pass) is not planned yet: plan SFT, or a dense model".into(),
        });
    }
    if extended && s.base_trained() && arch.is_moe() {
        return Err(PlanError::InvalidSetting {
            field: "finetuning_type",
            why: "full or freeze tuning of a mixture of experts (its routers and fused experts trained) is not planned yet: plan LoRA, or a dense model".into(),
        });
    }
    // (Llama 4 is a mixture of experts: a build without the extended ops refuses it earlier.)
    if extended {
        if let Some((field, why)) = rotary_or_nope_unplanned(arch, s) {
            return Err(PlanError::InvalidSetting { field, why });
        }
    }
    Ok(())
}

/// What of a Llama 4 step ([`crate::model::family::AttentionKind::RotaryOrNope`]) is not planned
/// yet: the step is measured under sdpa, without padding or packing, on a 16-bit base or one
/// loaded in 4 bits on the fly, with LoRA on the Linear layers and transformers' modules.
fn rotary_or_nope_unplanned(arch: &Architecture, s: &Settings) -> Option<(&'static str, String)> {
    let layout = arch.family.layout();
    if layout.attention != crate::model::family::AttentionKind::RotaryOrNope {
        return None;
    }
    let f = arch.family.name();
    if let Some(function) = layout
        .liger_unplanned
        .filter(|_| s.liger.any() || s.fused_ce == crate::model::settings::FusedCe::Liger)
    {
        return Some((
            if s.liger.any() { "liger_kernel" } else { "fused_ce" },
            format!("liger-kernel 0.8.5's {function} (its RMSNorm, SwiGLU for the shared expert, RoPE and fused cross-entropy) is not planned yet, nor measured: plan without liger_kernel and fused_ce liger"),
        ));
    }
    if s.attn_impl == crate::model::AttnImpl::FlashAttention2 {
        // (`Llama4PreTrainedModel._supports_flash_attn = False`, modeling_llama4.py:450:
        // from_pretrained refuses the implementation)
        return Some(("attn_impl", format!("transformers 5.24 has no flash_attention_2 for {f} (_supports_flash_attn is False, so loading the model with it fails): plan attn_impl sdpa")));
    }
    if s.attn_impl != crate::model::AttnImpl::Sdpa {
        return Some(("attn_impl", format!("{f}'s attention is planned under sdpa, as measured; {} is not planned yet: plan attn_impl sdpa", s.attn_impl.name())));
    }
    if s.padded_mask || s.packing || s.neat_packing {
        return Some((
            if s.padded_mask { "padded_mask" } else if s.packing { "packing" } else { "neat_packing" },
            format!("{f} with padded or packed batches (the chunked mask's left padding read from the attention mask, the masks of both kinds of layer) is not planned yet: plan unpadded sequences"),
        ));
    }
    if s.quant.is_some_and(|q| !q.is_4bit()) {
        return Some(("quant", format!("{f} loaded in 8 bits (LLM.int8) is not planned yet, nor measured: plan it in 4 bits (nf4) or 16 bits")));
    }
    if !s.target_parameters.is_empty() {
        return Some(("target_parameters", format!("LoRA on {f}'s experts (peft's ParamWrapper on gate_up_proj / down_proj) is not planned yet, nor measured: plan LoRA on the Linear layers")));
    }
    if s.output_router_logits {
        return Some(("output_router_logits", format!("{f}'s causal-LM forward adds no load-balancing loss; output_router_logits only keeps each layer's logits in the output, which is not planned yet: plan without it")));
    }
    None
}

/// Refuses steps whose memory or number of events a sequence could not hold (sizes are u64
/// here; the plan, in u128, answers those). A generous bound of the step's bytes from its
/// shapes: weights, and per token the logits and every layer's activations (attention scores
/// included), with margin; only absurd configurations come near 2^60 bytes. Runs at a shorter
/// depth ([`periodic`]) are held to the model's bound.
fn check_size(arch: &Architecture, s: &Settings) -> Result<(), PlanError> {
    // GRPO generates and scores its whole generation batch (batch × gradient accumulation).
    let generating = s.grpo() && s.generation == super::settings::Generation::Hf;
    let rows = if s.grpo() {
        u128::from(s.batch) * u128::from(s.grad_accum.max(1))
    } else {
        u128::from(s.batch)
    };
    let tokens = rows * s.seq as u128;
    let per_layer = arch.hidden_size as u128 * 64
        + arch.intermediate_size as u128 * 64
        + arch.num_attention_heads as u128 * s.seq as u128 * 16;
    // batched_mm copies its experts' weights for every token-expert pair.
    let per_pair = if s.experts_run() == super::settings::ExpertsImpl::BatchedMm {
        arch.experts_per_tok() * 3 * arch.expert_width() * arch.hidden_size as u128 * 16
    } else {
        0
    };
    let peak = (arch.total_params() * 16).saturating_add(
        tokens.saturating_mul(
            (arch.vocab_size as u128 * 32)
                .saturating_add(per_layer.saturating_mul(arch.num_hidden_layers as u128 * 16))
                .saturating_add(per_pair),
        ),
    );
    let loop_experts = if s.experts_run() == super::settings::ExpertsImpl::Eager {
        arch.num_experts()
    } else {
        1
    };
    let mut events = arch.num_hidden_layers as u128 * (3_000 + 60 * loop_experts);
    if generating {
        // The prefill and 64 decode calls op by op, every other new token's cache growth.
        events = events * 65
            + u128::from(s.completion_tokens()) * (arch.num_hidden_layers as u128 * 4 + 64);
    }
    if peak > 1u128 << 60 || events > 1u128 << 26 {
        return Err(too_large());
    }
    Ok(())
}

/// The refusal of a step whose allocation sequence could not hold it.
pub fn too_large() -> PlanError {
    PlanError::InvalidSetting {
        field: "seq",
        why: "too large a step to plan: a generous bound of its memory from its shapes passes 2^60 bytes (an exbibyte), or of its allocations 2^26".into(),
    }
}
