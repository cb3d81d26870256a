//! A memory term that explains itself: a product of named factors, shown both as a
//! formula (`tokens × hidden × 4 B`) and with its numbers (`1024 × 4096 × 4 B`).

use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;

/// Which bar of the breakdown a term belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    /// Frozen base weights (incl. embeddings, norms, lm_head).
    FrozenWeights,
    /// Frozen routed-expert weights of MoE models (fused 3-D parameters).
    FrozenExperts,
    /// A vision-language model's vision tower: its frozen weights, the pixel values and what
    /// its forward holds.
    VisionTower,
    /// bitsandbytes absmax / code constants of 4-bit weights, row scales of 8-bit ones.
    QuantState,
    /// LoRA adapters and modules_to_save copies.
    TrainableWeights,
    /// Gradients of the trainable weights.
    Gradients,
    /// Optimizer states (AdamW moments, ...).
    OptimizerStates,
    /// Saved for backward by attention (q, k, v, output, softmax...).
    ActAttention,
    /// Saved for backward by the MLP (gate, up, activation).
    ActMlp,
    /// Saved for backward by the router and the routed experts of MoE layers.
    ActExperts,
    /// Saved for backward by RMSNorms (fp32 input copy, rsqrt).
    ActNorms,
    /// peft LoRA path (fp32 input copies, A outputs, autocast weight copies).
    ActLora,
    /// LoRA dropout outputs and masks.
    ActDropout,
    /// Embedding output, rotary tables, input ids.
    ActEmbeddings,
    /// Gradient-checkpointing boundaries (one hidden state per layer).
    ActCheckpoints,
    /// Low-precision copies of frozen fp32/fp16 weights that autocast makes and keeps for backward.
    ActWeightCopies,
    /// Logits, log-softmax and their gradients.
    LogitsLoss,
    /// Temporaries of the backward pass (recomputed layer, gradient buffers).
    BackwardTemps,
    /// Temporaries of the optimizer step.
    OptimizerTemps,
    /// Multi-GPU buffers: gathered parameter units, gradient buckets.
    CommBuffers,
    /// What a real run held beyond its plan, kept as a calibration (`measured_overhead_bytes`).
    MeasuredOverhead,
    /// cuBLAS's workspaces: one per thread that runs GEMMs (Python's forward, autograd's
    /// backward), allocated through the caching allocator at its first GEMM and never freed.
    CublasWorkspace,
    /// The merge's temporaries after training: the LoRA delta `B·A`, a dequantized weight and
    /// its copies (peft's `merge_and_unload`).
    MergeTemps,
    /// Reserved by PyTorch's caching allocator but holding no tensor (rounding, fragmentation):
    /// `max_memory_reserved()` − `max_memory_allocated()`. Not part of the allocated peak.
    AllocatorCache,
    /// Outside the allocator: CUDA context, library workspaces, paged optimizer states, NCCL
    /// buffers (nvidia-smi − reserved). Not part of the allocated peak.
    CudaContext,
}

impl Component {
    /// Every component, in stacking order (bottom first).
    pub const ALL: [Component; 23] = [
        Component::FrozenWeights,
        Component::FrozenExperts,
        Component::VisionTower,
        Component::QuantState,
        Component::TrainableWeights,
        Component::Gradients,
        Component::OptimizerStates,
        Component::OptimizerTemps,
        Component::CommBuffers,
        Component::MeasuredOverhead,
        Component::CublasWorkspace,
        Component::ActCheckpoints,
        Component::ActEmbeddings,
        Component::ActWeightCopies,
        Component::ActNorms,
        Component::ActAttention,
        Component::ActMlp,
        Component::ActExperts,
        Component::ActLora,
        Component::ActDropout,
        Component::LogitsLoss,
        Component::BackwardTemps,
        Component::MergeTemps,
    ];

    /// The levels above the allocated peak, bottom first: reserved adds the allocator cache,
    /// nvidia-smi adds what lies outside the allocator.
    pub const ABOVE_ALLOCATED: [Component; 2] = [Component::AllocatorCache, Component::CudaContext];

    /// Stable key (`frozen_weights`, `act_attention`, ...) used in JSON and `data-testid`s.
    pub fn key(self) -> &'static str {
        match self {
            Component::FrozenWeights => "frozen_weights",
            Component::FrozenExperts => "frozen_experts",
            Component::VisionTower => "vision_tower",
            Component::QuantState => "quant_state",
            Component::TrainableWeights => "trainable_weights",
            Component::Gradients => "gradients",
            Component::OptimizerStates => "optimizer_states",
            Component::ActAttention => "act_attention",
            Component::ActMlp => "act_mlp",
            Component::ActExperts => "act_experts",
            Component::ActNorms => "act_norms",
            Component::ActLora => "act_lora",
            Component::ActDropout => "act_dropout",
            Component::ActEmbeddings => "act_embeddings",
            Component::ActCheckpoints => "act_checkpoints",
            Component::ActWeightCopies => "act_weight_copies",
            Component::LogitsLoss => "logits_loss",
            Component::BackwardTemps => "backward_temps",
            Component::OptimizerTemps => "optimizer_temps",
            Component::CommBuffers => "comm_buffers",
            Component::MeasuredOverhead => "measured_overhead",
            Component::CublasWorkspace => "cublas_workspace",
            Component::MergeTemps => "merge_temps",
            Component::AllocatorCache => "allocator_cache",
            Component::CudaContext => "cuda_context",
        }
    }

    /// Human label.
    pub fn label(self) -> &'static str {
        match self {
            Component::FrozenWeights => "Frozen weights",
            Component::FrozenExperts => "Frozen expert weights",
            Component::VisionTower => "Vision tower (frozen weights, pixels, its forward)",
            Component::QuantState => "Quantization state",
            Component::TrainableWeights => "Trainable weights",
            Component::Gradients => "Gradients",
            Component::OptimizerStates => "Optimizer states",
            Component::ActAttention => "Activations: attention",
            Component::ActMlp => "Activations: MLP",
            Component::ActExperts => "Activations: router and experts",
            Component::ActNorms => "Activations: norms",
            Component::ActLora => "Activations: LoRA path",
            Component::ActDropout => "Activations: LoRA dropout",
            Component::ActEmbeddings => "Activations: embeddings, rotary, inputs",
            Component::ActCheckpoints => "Activations: checkpoint boundaries",
            Component::ActWeightCopies => "Activations: autocast weight copies",
            Component::LogitsLoss => "Logits and loss",
            Component::BackwardTemps => "Backward temporaries",
            Component::OptimizerTemps => "Optimizer step temporaries",
            Component::CommBuffers => "Multi-GPU buffers (gathered units, buckets)",
            Component::MeasuredOverhead => "Measured overhead of your run",
            Component::CublasWorkspace => "cuBLAS workspaces",
            Component::MergeTemps => "Merge temporaries (LoRA delta, dequantized weight)",
            Component::AllocatorCache => "Allocator cache (fragmentation)",
            Component::CudaContext => "CUDA context and outside the allocator",
        }
    }

    /// The component whose [`key`](Self::key) this is.
    pub fn from_key(key: &str) -> Option<Component> {
        Component::ALL
            .iter()
            .chain(&Component::ABOVE_ALLOCATED)
            .copied()
            .find(|c| c.key() == key)
    }

    /// The group of the bar the component is read in.
    pub fn group(self) -> Group {
        match self {
            Component::FrozenWeights
            | Component::FrozenExperts
            | Component::QuantState
            | Component::CommBuffers
            | Component::MeasuredOverhead
            | Component::CublasWorkspace => Group::Weights,
            Component::TrainableWeights
            | Component::Gradients
            | Component::OptimizerStates
            | Component::OptimizerTemps => Group::LoraOptimizer,
            Component::ActAttention
            | Component::ActMlp
            | Component::ActExperts
            | Component::ActNorms
            | Component::ActLora
            | Component::ActDropout
            | Component::ActEmbeddings
            | Component::ActCheckpoints
            | Component::ActWeightCopies
            | Component::BackwardTemps
            | Component::MergeTemps => Group::Activations,
            Component::LogitsLoss => Group::LogitsLoss,
            Component::VisionTower => Group::VisionTower,
            Component::AllocatorCache => Group::AllocatorCache,
            Component::CudaContext => Group::CudaContext,
        }
    }

    /// A short in-place label for the bar segment.
    pub fn short_label(self) -> &'static str {
        match self {
            Component::FrozenWeights => "weights",
            Component::FrozenExperts => "experts",
            Component::VisionTower => "vision tower",
            Component::ActExperts => "experts (activations)",
            Component::QuantState => "quant state",
            Component::CommBuffers => "multi-GPU",
            Component::MeasuredOverhead => "your run's extra",
            Component::CublasWorkspace => "cuBLAS",
            Component::TrainableWeights => "trained weights",
            Component::Gradients => "gradients",
            Component::OptimizerStates => "optimizer",
            Component::OptimizerTemps => "step temps",
            Component::ActCheckpoints => "checkpoints",
            Component::ActEmbeddings => "embeddings",
            Component::ActWeightCopies => "autocast copies",
            Component::ActNorms => "norms",
            Component::ActAttention => "attention",
            Component::ActMlp => "MLP",
            Component::ActLora => "LoRA path",
            Component::ActDropout => "dropout",
            Component::LogitsLoss => "logits & loss",
            Component::BackwardTemps => "backward temps",
            Component::MergeTemps => "merge temps",
            Component::AllocatorCache => "cache",
            Component::CudaContext => "CUDA context",
        }
    }
}

/// The groups the bar is read by: how people think of a fine-tune's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Group {
    /// Frozen base weights, their 4-bit state, multi-GPU gathered weights and buckets.
    Weights,
    /// A vision-language model's vision tower.
    VisionTower,
    /// The trained weights (adapters, or every weight in full fine-tuning), their gradients,
    /// optimizer states and step temporaries.
    LoraOptimizer,
    /// Everything saved for backward and the backward pass's temporaries.
    Activations,
    /// The logits and the loss.
    LogitsLoss,
    /// Reserved by PyTorch's caching allocator but not allocated (reserved − allocated).
    AllocatorCache,
    /// The CUDA context and anything else outside the allocator (nvidia-smi − reserved).
    CudaContext,
}

impl Group {
    /// The groups of allocated memory (the allocator cache and the CUDA context excluded), in
    /// bar order.
    pub const ALLOCATED: [Group; 5] = [
        Group::Weights,
        Group::VisionTower,
        Group::LoraOptimizer,
        Group::Activations,
        Group::LogitsLoss,
    ];

    /// Every group, in bar order.
    pub const ALL: [Group; 7] = [
        Group::Weights,
        Group::VisionTower,
        Group::LoraOptimizer,
        Group::Activations,
        Group::LogitsLoss,
        Group::AllocatorCache,
        Group::CudaContext,
    ];

    /// Stable key (CSS classes).
    pub fn key(self) -> &'static str {
        match self {
            Group::Weights => "weights",
            Group::VisionTower => "vision",
            Group::LoraOptimizer => "lora",
            Group::Activations => "act",
            Group::LogitsLoss => "logits",
            Group::AllocatorCache => "cache",
            Group::CudaContext => "context",
        }
    }

    /// Label.
    pub fn label(self) -> &'static str {
        match self {
            Group::Weights => "Weights",
            Group::VisionTower => "Vision tower",
            Group::LoraOptimizer => "Trained + optimizer",
            Group::Activations => "Activations",
            Group::LogitsLoss => "Logits & loss",
            Group::AllocatorCache => "Allocator cache",
            Group::CudaContext => "CUDA context",
        }
    }
}

/// One named factor of a term.
#[derive(Clone, Debug, PartialEq)]
pub struct Factor {
    /// Symbol shown in the formula (`tokens`, `hidden`); empty for a byte size.
    pub name: Cow<'static, str>,
    /// Its value.
    pub value: u128,
    /// The value is a byte count (shown as `N B` in the numbers).
    pub in_bytes: bool,
}

impl Factor {
    fn is_bytes(&self) -> bool {
        self.name.is_empty()
    }
    fn symbol(&self) -> String {
        if self.is_bytes() {
            format!("{} B", self.value)
        } else {
            self.name.to_string()
        }
    }
    fn number(&self) -> String {
        if self.is_bytes() || self.in_bytes {
            format!("{} B", self.value)
        } else {
            self.value.to_string()
        }
    }
}

/// Shorthand constructor for a factor.
pub fn f(name: impl Into<Cow<'static, str>>, value: u128) -> Factor {
    Factor {
        name: name.into(),
        value,
        in_bytes: false,
    }
}

/// A named byte count: `trainable weight bytes` in the formula, `159907840 B` in the numbers.
pub fn named_bytes(name: impl Into<Cow<'static, str>>, value: u128) -> Factor {
    Factor {
        name: name.into(),
        value,
        in_bytes: true,
    }
}

/// Byte-size factor: shown as `4 B` in both the formula and the numbers.
pub fn bytes_of(n: u128) -> Factor {
    Factor {
        name: Cow::Borrowed(""),
        value: n,
        in_bytes: true,
    }
}

/// One explained memory term: bytes = a product of named factors, or a sum of such products.
/// The formula strings are rendered only when asked for (the fit solver plans many times).
#[derive(Clone, Debug, PartialEq)]
pub struct Term {
    /// Component it stacks into.
    pub component: Component,
    /// What the tensor(s) are.
    pub label: Cow<'static, str>,
    /// Products that add up to the term (one for a plain product); shared, so the many moments
    /// of a plan clone terms cheaply.
    pub products: Arc<Vec<Vec<Factor>>>,
    /// Result in bytes (the sum of the products).
    pub bytes: u128,
}

fn product_bytes(fs: &[Factor]) -> u128 {
    fs.iter().fold(1u128, |acc, x| acc.saturating_mul(x.value))
}

impl Term {
    /// A product of factors (saturating, though validated inputs cannot reach u128's limit).
    pub fn product(
        component: Component,
        label: impl Into<Cow<'static, str>>,
        factors: &[Factor],
    ) -> Term {
        Term {
            component,
            label: label.into(),
            bytes: product_bytes(factors),
            products: Arc::new(vec![factors.to_vec()]),
        }
    }

    /// A sum of products, shown as one line.
    pub fn sum(
        component: Component,
        label: impl Into<Cow<'static, str>>,
        parts: &[Vec<Factor>],
    ) -> Term {
        let bytes = parts
            .iter()
            .fold(0u128, |acc, p| acc.saturating_add(product_bytes(p)));
        Term {
            component,
            label: label.into(),
            products: Arc::new(parts.to_vec()),
            bytes,
        }
    }

    fn render(&self, each: fn(&Factor) -> String) -> String {
        let one = |p: &Vec<Factor>| p.iter().map(each).collect::<Vec<_>>().join(" × ");
        if self.products.len() == 1 {
            one(&self.products[0])
        } else {
            self.products
                .iter()
                .map(|p| format!("({})", one(p)))
                .collect::<Vec<_>>()
                .join(" + ")
        }
    }

    /// Symbolic formula, e.g. `layers × tokens × hidden × 4 B`.
    pub fn formula(&self) -> String {
        self.render(Factor::symbol)
    }

    /// The formula with numbers, e.g. `32 × 1024 × 4096 × 4 B`.
    pub fn values(&self) -> String {
        self.render(Factor::number)
    }
}

impl Serialize for Term {
    fn serialize<S: serde::Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut st = ser.serialize_struct("Term", 5)?;
        st.serialize_field("component", &self.component)?;
        st.serialize_field("label", &self.label)?;
        st.serialize_field("formula", &self.formula())?;
        st.serialize_field("values", &self.values())?;
        st.serialize_field("bytes", &self.bytes)?;
        st.end()
    }
}
