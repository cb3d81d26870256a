//! A miniature of PyTorch's autograd as far as memory goes: tensor storages with reference
//! counts (Python variables, saved tensors, gradient buffers), graph nodes created by forward ops,
//! and the engine's backward order and rules:
//! - nodes run in decreasing creation order (one device, one ready queue);
//! - a node computes its input gradients (the op's derivative formula, allocation by allocation),
//!   then `validate_outputs` reduces broadcast gradients (`sum_to`) and casts each to its input's
//!   dtype, then the node's incoming gradient is freed, then its saved tensors are released (in
//!   the alphabetical order of their names, as the generated `release_variables` does);
//! - a gradient reaching an input that already holds one is added in place into the one the
//!   buffer holds alone (`InputBuffer::accumulate` on a real device), else out of place
//!   (`old + new`; always on the harness's emulated device, whose fake tensors are a subclass).
//!
//! Under gradient checkpointing (non-reentrant, the default of transformers) forward records the
//! graph but keeps no saved tensor; the first node of a layer that needs one recomputes the layer's
//! forward up to its last saved tensor (early stop), and nodes then free the unpacked tensors as
//! soon as their formula returns.

use super::rank::Rank;
use super::{Block, Event, Label, What};

/// A tensor storage.
pub(super) type T = u32;

/// The tag of an event outside every decoder layer ([`Tape::event_tags`]).
pub(super) const NO_LAYER: u32 = u32::MAX;

/// Where a tensor's gradient goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum G {
    /// Needs no gradient.
    #[default]
    No,
    /// To a graph node's input buffer.
    Node(u32),
    /// Into a trainable parameter's `.grad` (AccumulateGrad).
    Param(u32),
}

/// A tensor value in the forward program.
#[derive(Clone, Copy, Debug)]
pub(super) struct X {
    /// Storage.
    pub t: T,
    /// Elements.
    pub n: u64,
    /// Bytes per element.
    pub es: u64,
    /// Where its gradient goes.
    pub g: G,
}

impl X {
    pub fn grad(&self) -> bool {
        self.g != G::No
    }
}

/// A short list stored inline (a node's edges and saved tensors: no heap allocation per node).
#[derive(Clone, Copy, Debug)]
pub(super) struct Inline<U: Copy + Default, const N: usize> {
    v: [U; N],
    len: u8,
}

impl<U: Copy + Default, const N: usize> Inline<U, N> {
    fn new() -> Self {
        Inline {
            v: [U::default(); N],
            len: 0,
        }
    }
    fn from_slice(s: &[U]) -> Self {
        let mut x = Self::new();
        for &u in s {
            x.push(u);
        }
        x
    }
    fn push(&mut self, u: U) {
        let i = self.len as usize;
        // An op with more than N is a program error, not something an input can cause.
        assert!(i < N, "an inline list of {N} overflowed");
        self.v[i] = u;
        self.len += 1;
    }
    fn as_slice(&self) -> &[U] {
        &self.v[..self.len as usize]
    }
}

/// One input of a node: where its gradient goes, with the input's size and dtype.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Edge {
    pub to: G,
    pub n: u64,
    pub es: u64,
    /// Broadcast input: the gradient is summed down to this many elements.
    pub sum_to: u64,
}

/// The derivative formulas that matter for memory.
#[derive(Clone, Copy, Debug)]
pub(super) enum Op {
    /// `_to_copy` back to the input dtype.
    Cast,
    /// Product of two tensors: the second input's gradient first, then the first's.
    Mul,
    /// Product with a constant (scalar or tensor needing no gradient).
    MulConst,
    /// Sum: the incoming gradient goes to both inputs as is.
    Add,
    /// Pass-through (adding a scalar, views).
    Pass,
    /// `a − b`: the incoming gradient goes to `a` as is, `b` gets its negation (a new tensor).
    Sub,
    /// `linalg_solve_triangular(A, B)` (inputs A, B): B's gradient, a triangular solve of
    /// the incoming gradient, then A's, `−(gB · Xᵀ)` made lower-triangular (a product and its
    /// negation, temporaries, then `tril`).
    SolveTriangular,
    /// `pow(x, 2)`, `rsqrt`: three full-size temporaries, the last one returned.
    PowLike,
    /// `mean` over the last dimension: `grad.expand(...) / n`.
    Mean,
    /// Matrix product with a weight: weight gradient (`w_n` elements) first, then the input's.
    Mm { w_n: u64, w_es: u64 },
    /// `F.linear` with a bias (`addmm`): the input's gradient first, then the weight's
    /// (`w_n` elements), then the bias's: the incoming gradient, summed to the bias's size by
    /// its edge's `sum_to`.
    Addmm { w_n: u64, w_es: u64 },
    /// `native_dropout_backward`, `silu_backward`, `neg`, `tanh_backward`, …: one output.
    Unary,
    /// `slice_backward`: a zero tensor of the full size.
    Slice,
    /// `cat` backward: views of the incoming gradient.
    Split,
    /// View backward of a non-contiguous gradient (`reshape` clones).
    ViewClone,
    /// Fused attention backward: one gradient per input (q, k, v).
    Attention,
    /// `_softmax_backward_data` (CUDA's kernel makes a `grad × output` temporary).
    Softmax,
    /// `_log_softmax_backward_data` (no temporary).
    LogSoftmax,
    /// `nll_loss_backward`.
    NllLoss,
    /// Batched matmul of two activations (eager attention): gradient of the second input first.
    Bmm,
    /// `embedding_dense_backward`: a dense gradient of the whole table.
    Embedding,
    /// bitsandbytes 4-bit matmul backward: dequantize the nested absmax (`absmax_n` fp32 values,
    /// double quantization) and the weight (`w_n` values in the compute dtype), then `grad @ W`.
    Dequant4 { w_n: u64, absmax_n: u64 },
    /// bitsandbytes' LLM.int8 matmul backward (`MatMul8bitLt.backward`,
    /// bitsandbytes/autograd/_functions.py:235-239): the int8 weight copied to the input's dtype
    /// (`w_n` values), scaled in place by `SCB / 127` (a temporary of `rows` fp32 values), then
    /// `grad @ W`.
    Dequant8 { w_n: u64, rows: u64 },
    /// `self / other` with a broadcast `other`: other's gradient `-grad * ((self / other) /
    /// other)` (three temporaries), then self's `grad / other`.
    Div,
    /// `index` / `topk` backward: a zero tensor of the input's size, the gradient scattered
    /// into a copy of it (out of place), the zeros freed.
    Scatter,
    /// `baddbmm(W, b1, b2, alpha)` of a frozen W: each batch's gradient is a `bmm` times alpha
    /// (the product a temporary), first `b1`'s, then `b2`'s.
    Baddbmm,
    /// A `split`/`chunk` whose outputs' gradients arrive separately: the node waits for both
    /// and concatenates them into one tensor of the input's size.
    Join,
    /// [`Op::Join`] of three outputs.
    Join3,
    /// A `split` / `unbind` into any number of views (Qwen2.5-VL's tower: q, k, v per attention
    /// window; q, k, v of the fused projection): the node waits for every view's gradient and
    /// concatenates (stacks) them into one tensor of the input's size, then frees them in the
    /// views' order (the reverse of their arrival).
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    JoinN,
    /// Liger's RMSNorm: the input's gradient is the incoming one (`in_place`) or a new
    /// `zeros_like` of it, after a `contiguous()` copy of it when it arrives strided
    /// (`copy_grad`).
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    LigerNorm { in_place: bool, copy_grad: bool },
    /// The gradients are written into the saved inputs' storages (`saved[k]` is input `k`'s:
    /// Liger's SwiGLU backward stores `da`, `db` into `a`, `b`).
    InPlace,
    /// Liger's RoPE: two outputs (q, k) whose gradients arrive separately (the second in
    /// `buf2`) and are rotated in place, each handed on to its input; `contiguous()` first copies
    /// one that arrives contiguous in (batch, heads, seq, dim) (`copy_q`, `copy_k`: from eager
    /// attention's matmuls or repeat_kv's reduction) rather than laid out like q and k.
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    RopeInPlace { copy_q: bool, copy_k: bool },
    /// A chain of small ops recorded as one node: its backward runs the steps of
    /// [`Tape::scripts`]`[i]` (the last allocation is the gradient of its one input).
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    Script(u32),
    /// A gradient the forward computed and saved (a fused linear cross-entropy's): backward
    /// compares the incoming gradient with a new `tensor(1.0)` and hands the saved gradients
    /// on, scaled in place (`saved[k]` is input `k`'s).
    Handed,
    /// TRL's `_ChunkedLogProbFunction` backward (`trl/kernels/chunked_logprob.py:394-465`): an
    /// fp32 accumulator of the hidden gradient (`hidden_n` values) and of the head weight's if it
    /// is trained, the `[rows, 32768]` tile buffer in the compute dtype (`tile_bytes`), the
    /// compute-dtype copies of a chunk of the hidden states and of the weight when their dtype
    /// differs (`hidden_chunk_bytes` and `weight_chunk_bytes` for each full token and vocabulary
    /// chunk, `hidden_last_bytes` and `weight_last_bytes` for the last ones; 0 if none), then the
    /// results in the
    /// inputs' dtypes.
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    ChunkedLogprob {
        hidden_n: u64,
        tile_bytes: u64,
        hidden_chunk_bytes: u64,
        hidden_last_bytes: u64,
        weight_chunk_bytes: u64,
        weight_last_bytes: u64,
        token_chunks: u32,
        vocab_chunks: u32,
    },
}

/// One step of a [`Op::Script`] backward.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
pub(super) enum Step {
    /// A new tensor of this many bytes (the script's next local).
    Alloc(u64),
    /// Frees the script's local `k`.
    Free(u16),
    /// Releases a tensor the forward kept for this backward.
    Release(T),
    /// Free the node's incoming gradient now (else it is freed after the steps, as for any node).
    FreeIncoming,
    /// Input `input`'s gradient is the script's local `local` (without any, the last local is
    /// input 0's).
    GradOf { input: u8, local: u16 },
    /// The custom Function's backward returns here, before autograd casts its gradients to
    /// their inputs' dtypes (`validate_outputs`): in a checkpointed layer the saved tensors it
    /// unpacked (whose only holders are then its locals) die now; otherwise its context keeps
    /// them until the node is released.
    Returns,
}

#[derive(Clone, Debug)]
pub(super) struct Node {
    op: Op,
    /// Output elements and bytes per element (the incoming gradient's size).
    out_n: u64,
    out_es: u64,
    edges: Inline<Edge, 3>,
    /// Saved tensors, in release order.
    /// (LigerExperts' function saves nine storages.)
    saved: Inline<T, 10>,
    /// Saved tensors the forward discarded (checkpointing) and recomputation must provide.
    pending: u8,
    /// Gradient accumulated for this node's output.
    buf: Option<T>,
    /// A [`Op::Join`] node's second output gradient.
    buf2: Option<T>,
    /// A [`Op::Join3`] node's third output gradient.
    buf3: Option<T>,
    /// Checkpointed layer this node belongs to.
    layer: Option<u32>,
    /// Its output was discarded ([`Tape::forget`]): what a recomputation saves for it lives only
    /// as long as the recomputed graph (checkpointing stores recomputed tensors only for holders
    /// still alive).
    forgotten: bool,
    /// Decoder layer whose forward recorded the node ([`NO_LAYER`] outside them): its backward's
    /// events carry it.
    tag: u32,
}

/// The vision tower's patch embedding output as a leaf needing a gradient (Qwen2.5-VL's
/// `enable_input_require_grads` hook on `visual.patch_embed`).
pub(super) const VISION_LEAF: u32 = u32::MAX - 1;

/// Checkpointed layers from this id on are the vision tower's blocks: their events belong to no
/// decoder layer.
pub(super) const TOWER_BLOCKS: u32 = 1 << 30;

/// A parameter's index into `Tape::grad_slot` (slot 0: the embedding leaf, `u32::MAX`; slot 1:
/// the vision tower's, [`VISION_LEAF`]).
fn grad_slot(p: u32) -> usize {
    match p {
        u32::MAX => 0,
        VISION_LEAF => 1,
        _ => p as usize + 2,
    }
}

/// How forward ops treat the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Record nodes and keep saved tensors.
    Grad,
    /// Record nodes, discard saved tensors (checkpointed forward).
    Discard,
    /// Recompute a checkpointed layer: fill the saved tensors of nodes `next..`.
    Recompute,
    /// `torch.no_grad()`: no node is recorded, nothing is saved.
    NoGrad,
}

/// Storages, events and the graph.
pub(super) struct Tape {
    pub events: Vec<Event>,
    pub labels: Vec<Label>,
    refs: Vec<u32>,
    bytes: Vec<u64>,
    nodes: Vec<Node>,
    pub mode: Mode,
    /// Layer whose ops are being recorded (for labels and checkpointing).
    pub layer: Option<u32>,
    /// Block whose ops are being recorded (for labels).
    pub block: Block,
    /// The decoder layer events belong to while `layer` is `None`: the layer of the backward
    /// node running, or of the parameter the program is setting up or updating.
    pub exec: u32,
    /// Decoder layer each storage was made for ([`NO_LAYER`]: none).
    storage_tags: Vec<u32>,
    /// Decoder layer each event belongs to: the layer recording or running when it happened,
    /// else (a free outside every layer) the layer its storage was made for. What
    /// [`super::periodic`] aligns two runs of different depths by.
    pub event_tags: Vec<u32>,
    /// Recomputation: the next original node to fill and the last one that needs it.
    re_next: usize,
    re_last: usize,
    /// Program-held references created since recomputation began (dropped at the early stop).
    re_locals: Vec<(T, u32)>,
    /// Forgotten nodes the current recomputation saved tensors for ([`Node::forgotten`]).
    re_forgotten: Vec<usize>,
    /// Depth of the Python frame the program is in, when it marks frames (0: unmarked).
    frame: u32,
    /// Recomputation reached its last saved tensor: the rest of the layer's forward is skipped.
    pub stopped: bool,
    /// Gradients stored into parameters, in arrival order: (param, storage).
    pub param_grads: Vec<(u32, T)>,
    /// Index into `param_grads` per parameter (slot 0: the embedding leaf), `u32::MAX` if none.
    grad_slot: Vec<u32>,
    /// Gradients waiting in [`Op::JoinN`] nodes beyond the first (node, gradient), in arrival
    /// order.
    join_extra: Vec<(u32, T)>,
    /// First node of each checkpointed layer.
    layer_start: Vec<(u32, usize)>,
    /// Per checkpointed layer: the first node that saved something (its release frees the
    /// checkpoint) and the tensors the checkpoint keeps (its inputs).
    /// (layer, first node saving something, its inputs kept, last node saving something)
    ckpt: Vec<(u32, Option<usize>, Vec<T>, usize)>,
    /// Live bytes (sum of requested sizes).
    pub live: u64,
    /// Highest `live` so far.
    pub peak: u64,
    /// `peak` before the last allocation (restored when a recomputation's early stop undoes it).
    peak_before: u64,
    /// Bytes of one thread's cuBLAS workspace (0: none).
    pub workspace_bytes: u64,
    /// The steps of each [`Op::Script`] node ([`Tape::script_node`]).
    scripts: Vec<Vec<Step>>,
    /// The harness's emulated device ([`super::Device::Emulated`]).
    pub emulated: bool,
    /// The forward thread's / autograd's workspace exists.
    ws_forward: bool,
    ws_backward: bool,
    /// This rank's share and place of each kind of storage (several GPUs).
    rank: Rank,
    /// `rank` is not one GPU's.
    ranked: bool,
    /// Live storages in host memory (offloaded), with their bytes.
    host: Vec<(T, u64)>,
    /// Bytes in host memory now, by kind of storage, and at their highest total.
    host_by: [u64; What::ALL.len()],
    /// Host memory by kind of storage when its total was highest.
    pub host_peak_by: [u64; What::ALL.len()],
    /// CUDA managed memory the run holds (a paged optimizer's large states): on the GPU,
    /// outside the caching allocator, never freed.
    pub paged_bytes: u64,
    /// Gradients a running node has summed into an input buffer out of place: freed once the
    /// node has delivered every output.
    held: Vec<T>,
    /// The CUDA stream new storages are allocated on (0: the default one).
    pub stream: u8,
    /// Storages whose memory is released while references remain (`storage.resize_(0)`, as
    /// FSDP2 frees an unsharded parameter): no event when the last reference goes.
    gone: Vec<bool>,
}

impl Tape {
    /// A tape sized for a model of `layers` decoder layers (about 1 100 events and 150 nodes
    /// per layer and step).
    pub fn new(layers: u64) -> Tape {
        let l = layers.min(1 << 12) as usize;
        Tape {
            events: Vec::with_capacity(2_400 * l + 4_096),
            labels: Vec::with_capacity(1_200 * l + 2_048),
            refs: Vec::with_capacity(1_200 * l + 2_048),
            bytes: Vec::with_capacity(1_200 * l + 2_048),
            nodes: Vec::with_capacity(200 * l + 256),
            mode: Mode::Grad,
            layer: None,
            block: Block::Other,
            exec: NO_LAYER,
            storage_tags: Vec::with_capacity(1_200 * l + 2_048),
            event_tags: Vec::with_capacity(2_400 * l + 4_096),
            re_next: 0,
            re_last: 0,
            re_locals: vec![],
            re_forgotten: vec![],
            frame: 0,
            stopped: false,
            param_grads: vec![],
            grad_slot: vec![],
            join_extra: vec![],
            layer_start: vec![],
            ckpt: vec![],
            live: 0,
            peak: 0,
            peak_before: 0,
            workspace_bytes: 0,
            scripts: vec![],
            emulated: false,
            ws_forward: false,
            ws_backward: false,
            rank: Rank::ONE,
            ranked: false,
            host: vec![],
            host_by: [0; What::ALL.len()],
            host_peak_by: [0; What::ALL.len()],
            paged_bytes: 0,
            held: vec![],
            stream: 0,
            gone: Vec::with_capacity(1_200 * l + 2_048),
        }
    }

    /// Runs the tape as one rank of several GPUs.
    pub fn set_rank(&mut self, rank: Rank) {
        self.rank = rank;
        self.ranked = rank != Rank::ONE;
    }

    /// `bytes` of CUDA managed memory (`cudaMallocManaged`), which the caching allocator never
    /// sees: no event.
    pub fn paged(&mut self, bytes: u64) {
        if !self.stopped {
            self.paged_bytes = self.paged_bytes.saturating_add(bytes);
        }
    }

    /// A new storage of `bytes` of `what` in host memory (offloaded), held once: no event.
    pub fn new_host_t(&mut self, bytes: u64, what: What) -> T {
        // No bytes on the GPU: how `release` tells a host storage.
        let t = self.push_storage(0, what);
        if !self.stopped {
            self.host.push((t, bytes));
            self.host_by[what as usize] += bytes;
            let total: u64 = self.host_by.iter().sum();
            if total > self.host_peak_by.iter().sum() {
                self.host_peak_by = self.host_by;
            }
        }
        t
    }

    /// A GEMM ran: its thread's cuBLAS workspace is allocated now if it is the thread's first
    /// (cuBLAS handles take it from the caching allocator when a GEMM first runs on them, right
    /// after the GEMM's output) and kept to the end. Backward and recomputation run on
    /// autograd's device thread (`autograd`), forward on Python's.
    pub fn gemm(&mut self, autograd: bool) {
        let backward = autograd || self.mode == Mode::Recompute;
        let done = if backward {
            &mut self.ws_backward
        } else {
            &mut self.ws_forward
        };
        if *done || self.workspace_bytes == 0 || self.stopped || self.emulated {
            return;
        }
        *done = true;
        let locals = self.re_locals.len();
        self.new_t(self.workspace_bytes, What::Workspace);
        // Not a local of a recomputed layer: nothing frees it at the early stop.
        self.re_locals.truncate(locals);
    }

    /// A new storage of `bytes`, held once (by the program): this rank's share of it, on the GPU
    /// or in host memory as [`Rank::place`] says.
    pub fn new_t(&mut self, bytes: u64, what: What) -> T {
        self.placed(bytes, 0, what)
    }

    /// [`Tape::new_t`] of elements of `elem_bytes` (recorded in its label; 0: unknown).
    pub fn new_t_of(&mut self, bytes: u64, elem_bytes: u64, what: What) -> T {
        let t = self.placed(bytes, elem_bytes, what);
        self.labels[t as usize].elem_bytes = elem_bytes.min(255) as u8;
        t
    }

    fn placed(&mut self, bytes: u64, elem_bytes: u64, what: What) -> T {
        if self.ranked {
            let place = self.rank.place(what);
            let bytes = place.share(bytes, elem_bytes);
            if place.host {
                return self.new_host_t(bytes, what);
            }
            return self.new_gpu_t(bytes, what);
        }
        self.new_gpu_t(bytes, what)
    }

    /// A storage's entry (held once unless past a recomputation's early stop), labelled with the
    /// layer and block recording it; no event.
    fn push_storage(&mut self, gpu_bytes: u64, what: What) -> T {
        let t = self.refs.len() as T;
        self.refs.push(if self.stopped { 0 } else { 1 });
        self.bytes.push(gpu_bytes);
        self.labels.push(Label {
            what,
            layer: self.layer,
            block: self.block,
            elem_bytes: 0,
        });
        self.storage_tags.push(self.tag_now());
        self.gone.push(false);
        t
    }

    fn new_gpu_t(&mut self, bytes: u64, what: What) -> T {
        let t = self.push_storage(bytes, what);
        if !self.stopped {
            self.alloc_event(t, self.storage_tags[t as usize]);
            if self.mode == Mode::Recompute {
                self.re_locals.push((t, self.frame));
            }
        }
        t
    }

    /// A storage of `bytes` held once whose memory does not exist yet (an FSDP2 unsharded
    /// parameter before its first all-gather): [`Tape::resize_alloc`] makes it.
    pub fn new_resizable_t(&mut self, bytes: u64, what: What) -> T {
        let t = self.push_storage(bytes, what);
        self.gone[t as usize] = true;
        t
    }

    /// Sets the size of a resizable storage never allocated yet (FSDP1's padded unsharded flat
    /// parameter, whose size is known once every parameter of its unit is).
    pub fn set_unallocated_bytes(&mut self, t: T, bytes: u64) {
        debug_assert!(self.gone[t as usize], "only a storage without memory");
        self.bytes[t as usize] = bytes;
    }

    /// Whether parameter `p`'s gradient has been stored in this backward (it has a slot).
    pub fn has_param_grad(&self, p: u32) -> bool {
        self.grad_slot
            .get(grad_slot(p))
            .is_some_and(|&k| k != u32::MAX)
    }

    /// `storage.resize_(bytes)` of a storage [`Tape::resize_free`] emptied (or never filled):
    /// its memory is allocated again (on the current stream), its references unchanged.
    pub fn resize_alloc(&mut self, t: T) {
        if self.stopped || !self.gone[t as usize] {
            return;
        }
        self.gone[t as usize] = false;
        self.alloc_event(t, self.tag_now());
    }

    /// `storage.resize_(0)`: the storage's memory is freed while its references remain.
    pub fn resize_free(&mut self, t: T) {
        if self.stopped || self.gone[t as usize] || self.refs[t as usize] == 0 {
            return;
        }
        self.gone[t as usize] = true;
        self.free_event(t, self.tag_now());
    }

    /// Storage `t`'s memory allocated (its bytes, on the current stream), the event tagged
    /// `tag`.
    fn alloc_event(&mut self, t: T, tag: u32) {
        let bytes = self.bytes[t as usize];
        self.events.push(Event::Alloc {
            id: t,
            bytes,
            stream: self.stream,
        });
        self.event_tags.push(tag);
        self.live += bytes;
        self.peak_before = self.peak;
        self.peak = self.peak.max(self.live);
    }

    /// The decoder layer whose ops run now ([`NO_LAYER`] in the vision tower's blocks).
    fn tag_now(&self) -> u32 {
        match self.layer {
            Some(l) if crate::model::extended::EXTENDED && l >= TOWER_BLOCKS => NO_LAYER,
            Some(l) => l,
            None => self.exec,
        }
    }

    /// Storage `t`'s memory freed, the event tagged `tag`.
    fn free_event(&mut self, t: T, tag: u32) {
        self.events.push(Event::Free { id: t });
        self.event_tags.push(tag);
        self.live -= self.bytes[t as usize];
    }

    /// One more reference.
    pub fn keep(&mut self, t: T) {
        if !self.stopped {
            self.refs[t as usize] += 1;
        }
    }

    /// One more reference held by the program (a Python variable): dropped at a recomputation's
    /// early stop like the program's other locals.
    pub fn keep_local(&mut self, t: T) {
        if self.stopped {
            return;
        }
        self.refs[t as usize] += 1;
        if self.mode == Mode::Recompute {
            self.re_locals.push((t, self.frame));
        }
    }

    /// One reference less; the storage is freed at zero.
    pub fn drop_t(&mut self, t: T) {
        if self.stopped {
            return;
        }
        self.release(t);
    }

    fn release(&mut self, t: T) {
        let r = &mut self.refs[t as usize];
        debug_assert!(*r > 0, "double free of {t}");
        if *r == 0 {
            return;
        }
        *r -= 1;
        if *r == 0 {
            if self.gone[t as usize] {
                return;
            }
            if self.bytes[t as usize] == 0 {
                if let Some(i) = self.host.iter().position(|h| h.0 == t) {
                    let (_, b) = self.host.swap_remove(i);
                    self.host_by[self.labels[t as usize].what as usize] -= b;
                    return;
                }
            }
            let now = self.tag_now();
            let tag = if now == NO_LAYER {
                self.storage_tags[t as usize]
            } else {
                now
            };
            self.free_event(t, tag);
        }
    }

    /// Drops a program value.
    pub fn drop_x(&mut self, x: X) {
        if self.mode == Mode::Recompute && !self.stopped {
            if let Some(i) = self.re_locals.iter().rposition(|&(t, _)| t == x.t) {
                self.re_locals.remove(i);
            }
        }
        self.drop_t(x.t);
    }

    /// A node of one input whose backward runs `steps` ([`Op::Script`]): a chain of small ops
    /// recorded as one node.
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    pub fn script_node(&mut self, steps: Vec<Step>, out_n: u64, out_es: u64, input: Edge) -> G {
        self.script_node_of(steps, out_n, out_es, &[input], &[])
    }

    /// A node of up to three inputs whose backward runs `steps` ([`Op::Script`]), which name
    /// each input's gradient ([`Step::GradOf`]), saving `saved` as a custom autograd Function
    /// does, once its output exists (released after the steps; a checkpointed layer's are
    /// recomputed).
    #[cfg_attr(not(feature = "extended-ops"), allow(dead_code))]
    pub fn script_node_of(
        &mut self,
        steps: Vec<Step>,
        out_n: u64,
        out_es: u64,
        ins: &[Edge],
        saved: &[T],
    ) -> G {
        self.scripts.push(steps);
        let id = (self.scripts.len() - 1) as u32;
        self.node(Op::Script(id), out_n, out_es, ins, saved)
    }

    /// Creates (or, when recomputing, finds) the node of a forward op whose inputs are `ins`
    /// (only those needing a gradient get an edge), saving `saved` (in release order).
    /// Returns where the output's gradient goes.
    pub fn node(&mut self, op: Op, out_n: u64, out_es: u64, ins: &[Edge], saved: &[T]) -> G {
        if self.stopped || self.mode == Mode::NoGrad || ins.iter().all(|e| e.to == G::No) {
            return G::No;
        }
        if self.mode == Mode::Recompute {
            // PyTorch matches recomputed tensors to the forward's by the order they are saved,
            // and a cast saves nothing: the recomputation's nodes are matched to the forward's
            // passing over casts either made alone. The forward's casts the recomputation does
            // not make again (FSDP1 gathered a LoRA matrix's unit ahead of the recomputation, so
            // its weight is in the input's dtype already) are skipped here; a cast only the
            // recomputation makes, below.
            if !matches!(op, Op::Cast) {
                while self.re_next < self.re_last
                    && matches!(
                        self.nodes.get(self.re_next).map(|n| (n.op, n.pending)),
                        Some((Op::Cast, 0))
                    )
                {
                    self.re_next += 1;
                }
            }
            let i = self.re_next;
            // A cast the forward found in autocast's cache (filled by an earlier pass under
            // no_grad, KTO's KL pass) recorded no node there; the recomputation runs in a fresh
            // autocast context and casts again: the new node is not one of the layer's and takes
            // no slot; its output's gradient is said to go where its input's goes (the
            // recomputation records no edges, only whether one exists).
            if matches!(op, Op::Cast)
                && saved.is_empty()
                && !matches!(self.nodes.get(i).map(|n| n.op), Some(Op::Cast))
            {
                return ins
                    .iter()
                    .map(|e| e.to)
                    .find(|g| *g != G::No)
                    .unwrap_or(G::No);
            }
            self.re_next += 1;
            for &s in saved {
                self.keep(s);
                self.nodes[i].saved.push(s);
            }
            if self.nodes[i].forgotten && !saved.is_empty() {
                self.re_forgotten.push(i);
            }
            self.nodes[i].pending = 0;
            if i >= self.re_last {
                // Early stop: every saved tensor exists again; the rest of the forward is skipped
                // and its Python frames release their locals, newest first. Inputs are saved
                // before the op runs, so an op saving only inputs never allocates its output;
                // a custom autograd Function (a `Script` node) saves at the end of its forward,
                // once its output exists.
                if let Some(&Event::Alloc { id, bytes, .. }) = self.events.last() {
                    if !saved.contains(&id) && !matches!(op, Op::Script(_)) {
                        self.events.pop();
                        self.event_tags.pop();
                        self.live -= bytes;
                        self.peak = self.peak_before;
                        self.refs[id as usize] = 0;
                        self.re_locals.retain(|&(t, _)| t != id);
                    }
                }
                // What the recomputation saved for nodes whose output its forward discarded
                // lives only in the recomputed graph, which the stop frees (newest node first).
                for k in std::mem::take(&mut self.re_forgotten).into_iter().rev() {
                    self.forget(G::Node(k as u32));
                }
                // Frames the program marks unwind innermost first, each clearing its locals
                // in the order they were bound; the unmarked layer frame, newest first.
                let locals = std::mem::take(&mut self.re_locals);
                let deepest = locals.iter().map(|&(_, d)| d).max().unwrap_or(0);
                for d in (1..=deepest).rev() {
                    for &(t, _) in locals.iter().filter(|&&(_, x)| x == d) {
                        self.release(t);
                    }
                }
                for &(t, _) in locals.iter().rev().filter(|&&(_, x)| x == 0) {
                    self.release(t);
                }
                self.stopped = true;
            }
            return G::Node(i as u32);
        }
        let keep = self.mode == Mode::Grad;
        let mut sv = Inline::new();
        if keep {
            for &s in saved {
                self.keep(s);
                sv.push(s);
            }
        }
        let idx = self.nodes.len();
        if !keep && !saved.is_empty() {
            if let Some(c) = self.ckpt.last_mut() {
                if Some(c.0) == self.layer {
                    if c.1.is_none() {
                        c.1 = Some(idx);
                    }
                    c.3 = idx;
                }
            }
        }
        self.nodes.push(Node {
            op,
            out_n,
            out_es,
            edges: Inline::from_slice(ins),
            saved: sv,
            pending: if keep { 0 } else { saved.len() as u8 },
            buf: None,
            buf2: None,
            buf3: None,
            layer: if keep { None } else { self.layer },
            tag: self.tag_now(),
            forgotten: false,
        });
        G::Node(idx as u32)
    }

    /// Marks the start of a checkpointed layer's forward; the checkpoint takes a reference to
    /// each of `keeps` (its inputs) until the layer's saved tensors are all released.
    pub fn begin_checkpoint(&mut self, layer: u32, keeps: &[T]) {
        self.layer_start.push((layer, self.nodes.len()));
        for &t in keeps {
            self.keep(t);
            // A hidden state the checkpoint keeps is kept for the checkpoint's sake.
            let l = &mut self.labels[t as usize];
            if l.what == What::Hidden {
                l.block = Block::Checkpoint;
            }
        }
        self.ckpt
            .push((layer, None, keeps.to_vec(), self.nodes.len()));
    }

    /// Files a hidden state under what the checkpoint keeps (an offloaded input brought back).
    pub fn mark_checkpoint(&mut self, t: T) {
        self.labels[t as usize].block = Block::Checkpoint;
    }

    /// Starts recomputing `layer`: its nodes from the first one are filled again.
    pub fn begin_recompute(&mut self, layer: u32) {
        let (start, last) = self
            .layer_start
            .iter()
            .find(|(l, _)| *l == layer)
            .map(|&(_, st)| {
                let last = self.ckpt.iter().find(|c| c.0 == layer).map_or(st, |c| c.3);
                (st, last)
            })
            .unwrap_or((0, 0));
        self.mode = Mode::Recompute;
        self.re_next = start;
        self.re_last = last;
        self.re_locals.clear();
        self.stopped = false;
    }

    /// Enters a Python frame whose locals the early stop of a recomputation clears in binding
    /// order.
    pub fn push_frame(&mut self) {
        self.frame += 1;
    }

    /// Leaves the frame: what it still holds (its return values) now belongs to its caller.
    pub fn pop_frame(&mut self) {
        let f = self.frame;
        self.frame = f.saturating_sub(1);
        for l in self.re_locals.iter_mut().filter(|l| l.1 == f) {
            l.1 = f.saturating_sub(1);
        }
    }

    /// Ends recomputation (program values of the skipped rest are ignored).
    pub fn end_recompute(&mut self) {
        self.stopped = false;
        self.mode = Mode::Grad;
        self.re_locals.clear();
        self.re_forgotten.clear();
        self.frame = 0;
    }

    /// Forgets the node of an output the program discards (nothing can reach it in backward):
    /// its saved tensors are released, as PyTorch frees a graph node with its last output.
    pub fn forget(&mut self, g: G) {
        if self.stopped {
            return;
        }
        if let G::Node(i) = g {
            let i = i as usize;
            self.nodes[i].forgotten = true;
            let saved = std::mem::replace(&mut self.nodes[i].saved, Inline::new());
            for &s in saved.as_slice() {
                self.drop_t(s);
            }
        }
    }

    /// Forgets the graph that only a discarded output reaches, node by node from it towards the
    /// leaves: each node's saved tensors are released before the nodes it points to, as PyTorch
    /// destroys a node's saved variables before its edges.
    pub fn forget_chain(&mut self, g: G) {
        let mut next = g;
        while let G::Node(i) = next {
            self.forget(next);
            next = self.nodes[i as usize]
                .edges
                .as_slice()
                .iter()
                .map(|e| e.to)
                .find(|to| matches!(to, G::Node(_)))
                .unwrap_or(G::No);
        }
    }

    /// Gives `g` as the gradient of the graph's output `node` (the loss).
    pub fn seed(&mut self, node: G, g: T) {
        if let G::Node(i) = node {
            self.nodes[i as usize].buf = Some(g);
        }
    }

    /// The layer whose saved tensors node `i` needs recomputed first, if any.
    pub fn needs_recompute(&self, i: usize) -> Option<u32> {
        let n = &self.nodes[i];
        if n.pending > 0 {
            n.layer
        } else {
            None
        }
    }

    /// The decoder layer whose forward recorded node `i` ([`NO_LAYER`] outside them).
    pub fn node_tag(&self, i: usize) -> u32 {
        self.nodes[i].tag
    }

    /// Whether node `i` received a gradient (it runs).
    pub fn has_grad(&self, i: usize) -> bool {
        self.nodes[i].buf.is_some()
    }

    /// Number of nodes recorded so far.
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Runs node `i`'s backward.
    pub fn run(&mut self, i: usize) {
        let unpacked = self.nodes[i].layer.is_some();
        let outer = std::mem::replace(&mut self.exec, self.nodes[i].tag);
        self.run_node(i, unpacked);
        self.exec = outer;
    }

    /// The events that follow, while no layer records, belong to the decoder layer storage `t`
    /// was made for (a parameter's optimizer states and updates, a layer's router logits in the
    /// load-balancing loss).
    pub fn on_behalf_of(&mut self, t: T) {
        self.exec = self
            .storage_tags
            .get(t as usize)
            .copied()
            .unwrap_or(NO_LAYER);
    }

    fn run_node(&mut self, i: usize, unpacked: bool) {
        let Some(g) = self.nodes[i].buf.take() else {
            return;
        };
        let node = std::mem::replace(
            &mut self.nodes[i],
            Node {
                op: Op::Pass,
                out_n: 0,
                out_es: 0,
                edges: Inline::new(),
                saved: Inline::new(),
                pending: 0,
                buf: None,
                buf2: None,
                buf3: None,
                layer: None,
                tag: NO_LAYER,
                forgotten: false,
            },
        );
        let edges = node.edges;
        let edges = edges.as_slice();
        let mut grads_buf: [Option<T>; 3] = [None; 3];
        let grads = &mut grads_buf[..edges.len()];
        let wants = |k: usize| edges.get(k).is_some_and(|e| e.to != G::No);
        let full = node.out_n * node.out_es;
        let what = What::Grad;
        #[cfg_attr(not(feature = "extended-ops"), allow(unused_mut))]
        let mut incoming_freed = false;
        // A script's unpacked saved tensors died as its Function returned ([`Step::Returns`]).
        #[cfg_attr(not(feature = "extended-ops"), allow(unused_mut))]
        let mut saved_gone = false;
        match node.op {
            Op::Cast => {
                if wants(0) {
                    let e = edges[0];
                    grads[0] = Some(self.new_t(e.n * e.es, what));
                }
            }
            Op::Mul | Op::Bmm => {
                for k in [1usize, 0] {
                    if wants(k) {
                        let b = if matches!(node.op, Op::Bmm) {
                            edges[k].n * node.out_es
                        } else {
                            full
                        };
                        grads[k] = Some(self.new_t(b, what));
                    }
                }
            }
            Op::MulConst | Op::Unary | Op::ViewClone => {
                // A broadcast input's gradient is made at the output's size, then summed down.
                let e = edges[0];
                let n = if e.sum_to > 0 { node.out_n } else { e.n };
                grads[0] = Some(self.new_t(n * node.out_es, what));
            }
            #[cfg(feature = "extended-ops")]
            Op::SolveTriangular => {
                let b = self.new_t(edges[1].n * node.out_es, what);
                if wants(0) {
                    let an = edges[0].n * node.out_es;
                    let prod = self.new_t(an, What::BackwardTemp);
                    let neg = self.new_t(an, What::BackwardTemp);
                    self.drop_t(prod);
                    grads[0] = Some(self.new_t(an, what));
                    self.drop_t(neg);
                }
                grads[1] = Some(b);
            }
            Op::Sub => {
                if wants(0) {
                    self.keep(g);
                    grads[0] = Some(g);
                }
                if wants(1) {
                    grads[1] = Some(self.new_t(node.out_n * node.out_es, what));
                }
            }
            Op::Add | Op::Pass | Op::Split => {
                for (k, slot) in grads.iter_mut().enumerate() {
                    if wants(k) {
                        self.keep(g);
                        *slot = Some(g);
                    }
                }
            }
            Op::PowLike => {
                let e = edges[0];
                let b = e.n * node.out_es;
                let a = self.new_t(b, What::BackwardTemp);
                let m = self.new_t(b, What::BackwardTemp);
                grads[0] = Some(self.new_t(b, what));
                self.drop_t(m);
                self.drop_t(a);
            }
            Op::Mean | Op::Slice | Op::NllLoss | Op::LogSoftmax => {
                let e = edges[0];
                grads[0] = Some(self.new_t(e.n * node.out_es, what));
            }
            Op::Softmax => {
                let e = edges[0];
                grads[0] = Some(self.new_t(e.n * node.out_es, what));
                // CUDA's kernel computes `grad × output` into a temporary first
                // (`softmax_backward_cuda_out`, aten/src/ATen/native/cuda/SoftMax.cu).
                if !self.emulated {
                    let tmp = self.new_t(e.n * node.out_es, What::KernelTemp);
                    self.drop_t(tmp);
                }
            }
            Op::Mm { w_n, w_es } => {
                if wants(1) {
                    grads[1] = Some(self.new_t(w_n * w_es, what));
                    self.gemm(true);
                }
                if wants(0) {
                    let e = edges[0];
                    grads[0] = Some(self.new_t(e.n * node.out_es, what));
                    self.gemm(true);
                }
            }
            Op::Addmm { w_n, w_es } => {
                if wants(0) {
                    let e = edges[0];
                    grads[0] = Some(self.new_t(e.n * node.out_es, what));
                    self.gemm(true);
                }
                if wants(1) {
                    grads[1] = Some(self.new_t(w_n * w_es, what));
                    self.gemm(true);
                }
                // The bias's is the incoming gradient itself, summed over the tokens by
                // validate_outputs (its edge's `sum_to`), after the node's locals are gone.
                if wants(2) {
                    self.keep(g);
                    grads[2] = Some(g);
                }
            }
            Op::Embedding => {
                let e = edges[0];
                grads[0] = Some(self.new_t(e.n * e.es, what));
            }
            Op::Dequant4 { w_n, absmax_n } => {
                let a = (absmax_n > 0).then(|| self.new_t(absmax_n * 4, What::BackwardTemp));
                let w = self.new_t(w_n * node.out_es, What::WeightCopy);
                if let Some(a) = a {
                    self.drop_t(a);
                }
                let e = edges[0];
                grads[0] = Some(self.new_t(e.n * node.out_es, what));
                self.drop_t(w);
            }
            Op::Dequant8 { w_n, rows } => {
                let w = self.new_t(w_n * node.out_es, What::WeightCopy);
                let scale = self.new_t(rows * 4, What::BackwardTemp);
                self.drop_t(scale);
                let e = edges[0];
                grads[0] = Some(self.new_t(e.n * node.out_es, what));
                self.gemm(true);
                self.drop_t(w);
            }
            Op::Attention => {
                for (k, slot) in grads.iter_mut().enumerate() {
                    let e = edges[k];
                    *slot = Some(self.new_t(e.n * e.es, what));
                }
            }
            Op::Div => {
                if wants(1) {
                    let b = node.out_n * node.out_es;
                    let t1 = self.new_t(b, What::BackwardTemp);
                    let t2 = self.new_t(b, What::BackwardTemp);
                    let t3 = self.new_t(b, What::BackwardTemp);
                    grads[1] = Some(self.new_t(b, what));
                    self.drop_t(t3);
                    self.drop_t(t2);
                    self.drop_t(t1);
                }
                if wants(0) {
                    grads[0] = Some(self.new_t(full, what));
                }
            }
            Op::Scatter => {
                let e = edges[0];
                let z = self.new_t(e.n * node.out_es, What::BackwardTemp);
                grads[0] = Some(self.new_t(e.n * node.out_es, what));
                self.drop_t(z);
            }
            Op::Baddbmm => {
                for k in 0..edges.len() {
                    if wants(k) {
                        let b = edges[k].n * node.out_es;
                        let tmp = self.new_t(b, What::BackwardTemp);
                        grads[k] = Some(self.new_t(b, what));
                        self.drop_t(tmp);
                    }
                }
            }
            Op::Join | Op::Join3 => {
                let e = edges[0];
                grads[0] = Some(self.new_t(e.n * e.es, what));
                for b in [node.buf2, node.buf3].into_iter().flatten() {
                    self.drop_t(b);
                }
            }
            #[cfg(feature = "extended-ops")]
            Op::JoinN => {
                let e = edges[0];
                grads[0] = Some(self.new_t(e.n * e.es, what));
                // The later arrivals, last first; the first one is the incoming gradient.
                let mine: Vec<T> = self
                    .join_extra
                    .iter()
                    .filter(|&&(n, _)| n as usize == i)
                    .map(|&(_, t)| t)
                    .collect();
                self.join_extra.retain(|&(n, _)| n as usize != i);
                for t in mine.into_iter().rev() {
                    self.drop_t(t);
                }
            }
            #[cfg(feature = "extended-ops")]
            Op::LigerNorm {
                in_place,
                copy_grad,
            } => {
                let b = edges[0].n * node.out_es;
                let dy = if copy_grad {
                    Some(self.new_t(b, What::BackwardTemp))
                } else {
                    None
                };
                grads[0] = Some(match (in_place, dy) {
                    (true, Some(c)) => c,
                    (true, None) => {
                        self.keep(g);
                        g
                    }
                    (false, _) => self.new_t(b, what),
                });
                if let (false, Some(c)) = (in_place, dy) {
                    self.drop_t(c);
                }
            }
            #[cfg(feature = "extended-ops")]
            Op::RopeInPlace { copy_q, copy_k } => {
                if wants(0) {
                    grads[0] = Some(if copy_q {
                        self.new_t(edges[0].n * node.out_es, what)
                    } else {
                        self.keep(g);
                        g
                    });
                }
                if let Some(b2) = node.buf2 {
                    if wants(1) && !copy_k {
                        grads[1] = Some(b2);
                    } else {
                        if wants(1) {
                            grads[1] = Some(self.new_t(edges[1].n * node.out_es, what));
                        }
                        self.drop_t(b2);
                    }
                }
            }
            #[cfg(feature = "extended-ops")]
            Op::Handed | Op::InPlace => {
                if matches!(node.op, Op::Handed) {
                    let one = self.new_t(4, What::BackwardTemp);
                    self.drop_t(one);
                }
                for (k, slot) in grads.iter_mut().enumerate() {
                    if let Some(&t) = node.saved.as_slice().get(k).filter(|_| wants(k)) {
                        self.keep(t);
                        *slot = Some(t);
                    }
                }
            }
            #[cfg(feature = "extended-ops")]
            Op::Script(k) => {
                let steps = std::mem::take(&mut self.scripts[k as usize]);
                let mut locals: Vec<T> = vec![];
                let mut named = false;
                for st in &steps {
                    match *st {
                        Step::Returns => {
                            if unpacked && !saved_gone {
                                self.drop_unpacked(node.saved.as_slice());
                                saved_gone = true;
                            }
                        }
                        Step::Alloc(b) => locals.push(self.new_t(b, What::BackwardTemp)),
                        Step::Free(i) => self.drop_t(locals[i as usize]),
                        Step::Release(t) => self.drop_t(t),
                        Step::FreeIncoming => {
                            self.drop_t(g);
                            incoming_freed = true;
                        }
                        Step::GradOf { input, local } => {
                            named = true;
                            let t = locals[local as usize];
                            match grads
                                .get_mut(input as usize)
                                .filter(|_| wants(input as usize))
                            {
                                Some(slot) => *slot = Some(t),
                                None => self.drop_t(t),
                            }
                        }
                    }
                }
                if !named {
                    grads[0] = locals.last().copied();
                }
            }
            #[cfg(feature = "extended-ops")]
            Op::ChunkedLogprob {
                hidden_n,
                tile_bytes,
                hidden_chunk_bytes,
                hidden_last_bytes,
                weight_chunk_bytes,
                weight_last_bytes,
                token_chunks,
                vocab_chunks,
            } => {
                // grad_hidden (and grad_weight) in fp32, the tile buffer, then per token chunk
                // the hidden chunk's copy and per vocabulary chunk the weight chunk's (each
                // named local freed when the next replaces it).
                let acc_h = self.new_t(hidden_n * 4, What::BackwardTemp);
                let acc_w = wants(1).then(|| self.new_t(edges[1].n * 4, What::BackwardTemp));
                let tile = self.new_t(tile_bytes, What::BackwardTemp);
                let (mut hc, mut wc) = (None, None);
                for i in 0..token_chunks {
                    if hidden_chunk_bytes > 0 {
                        let bytes = if i + 1 == token_chunks {
                            hidden_last_bytes
                        } else {
                            hidden_chunk_bytes
                        };
                        let c = self.new_t(bytes, What::BackwardTemp);
                        if let Some(o) = hc.replace(c) {
                            self.drop_t(o);
                        }
                    }
                    for j in 0..vocab_chunks {
                        if weight_chunk_bytes > 0 {
                            let bytes = if j + 1 == vocab_chunks {
                                weight_last_bytes
                            } else {
                                weight_chunk_bytes
                            };
                            let c = self.new_t(bytes, What::BackwardTemp);
                            if let Some(o) = wc.replace(c) {
                                self.drop_t(o);
                            }
                        }
                    }
                }
                // `acc.to(input.dtype)`: the accumulator itself for an fp32 input, else a copy
                // (and the accumulator a local of the frame).
                let in_dtype = |tape: &mut Tape, acc: T, e: Edge| {
                    if e.es == 4 {
                        (acc, None)
                    } else {
                        (tape.new_t(e.n * e.es, what), Some(acc))
                    }
                };
                let (gh, local_h) = in_dtype(self, acc_h, edges[0]);
                grads[0] = Some(gh);
                let mut local_w = None;
                if let Some(aw) = acc_w {
                    let (gw, l) = in_dtype(self, aw, edges[1]);
                    grads[1] = Some(gw);
                    local_w = l;
                }
                // The frame's locals, in the order they were bound.
                for t in [local_h, local_w, hc, wc].into_iter().flatten() {
                    self.drop_t(t);
                }
                self.drop_t(tile);
            }
            // A build without the extended ops never records them (`model::extended`).
            #[cfg(not(feature = "extended-ops"))]
            _ => debug_assert!(false, "an extended op in a build without them"),
        }
        // Outputs of the formula no input needs die with its result.
        for (k, slot) in grads.iter_mut().enumerate() {
            if !wants(k) {
                if let Some(t) = slot.take() {
                    self.drop_t(t);
                }
            }
        }
        if unpacked && !saved_gone {
            self.drop_unpacked(node.saved.as_slice());
        }
        // validate_outputs: broadcast reduction, then the input's dtype.
        for (k, e) in edges.iter().enumerate() {
            let Some(mut t) = grads[k] else { continue };
            if e.sum_to > 0 {
                let r = self.new_t(e.sum_to * node.out_es, what);
                self.drop_t(t);
                t = r;
            }
            let es_now = if e.sum_to > 0
                || matches!(
                    node.op,
                    Op::Cast
                        | Op::Attention
                        | Op::Script(_)
                        | Op::Handed
                        | Op::InPlace
                        | Op::RopeInPlace { .. }
                        | Op::LigerNorm { .. }
                        | Op::ChunkedLogprob { .. }
                ) {
                e.es
            } else {
                node.out_es
            };
            if es_now != e.es && e.to != G::No {
                let c = self.new_t(e.n * e.es, What::Grad);
                self.drop_t(t);
                t = c;
            }
            grads[k] = Some(t);
        }
        if !incoming_freed {
            self.drop_t(g);
        }
        if !unpacked {
            for &s in node.saved.as_slice() {
                self.drop_t(s);
            }
        }
        if let Some(l) = node.layer {
            if let Some(k) = self.ckpt.iter().position(|c| c.0 == l && c.1 == Some(i)) {
                let keeps = std::mem::take(&mut self.ckpt[k].2);
                for t in keeps.into_iter().rev() {
                    self.drop_t(t);
                }
            }
        }
        for (k, e) in edges.iter().enumerate() {
            let Some(t) = grads[k] else { continue };
            self.deliver(e.to, t);
        }
        // The node's outputs die with it (an addend of an out-of-place sum too).
        for t in std::mem::take(&mut self.held) {
            self.drop_t(t);
        }
    }

    /// A node's saved tensors unpacked from a recomputation die with the formula's locals, last
    /// unpacked first.
    fn drop_unpacked(&mut self, saved: &[T]) {
        for &s in saved.iter().rev() {
            self.drop_t(s);
        }
    }

    fn deliver(&mut self, to: G, t: T) {
        match to {
            G::No => self.drop_t(t),
            G::Param(p) => {
                // AccumulateGrad: the first gradient becomes `.grad`, a later one is added (in
                // place on a real device, out of place on the emulated one).
                let slot = grad_slot(p);
                if self.grad_slot.len() <= slot {
                    self.grad_slot.resize(slot + 1, u32::MAX);
                }
                let found = self.grad_slot[slot];
                match (found != u32::MAX).then_some(found as usize) {
                    None if self.rank.scatters_grads() => {
                        // Several GPUs: the gradient is reduce-scattered as it arrives (FSDP's
                        // post-backward hook, ZeRO's buckets); this rank keeps its shard.
                        let b = self.bytes[t as usize].div_ceil(self.rank.grad_shards);
                        let shard = self.new_t(b, What::ParamGrad);
                        self.drop_t(t);
                        self.grad_slot[slot] = self.param_grads.len() as u32;
                        self.param_grads.push((p, shard));
                    }
                    None => {
                        self.grad_slot[slot] = self.param_grads.len() as u32;
                        self.param_grads.push((p, t));
                        // From here on the storage is the parameter's `.grad`.
                        self.labels[t as usize].what = What::ParamGrad;
                    }
                    // A real device adds in place (`variable_grad += new_grad`).
                    Some(_) if !self.emulated => self.drop_t(t),
                    Some(k) => {
                        let old = self.param_grads[k].1;
                        let b = self.bytes[t as usize].max(self.bytes[old as usize]);
                        let s = self.new_t(b, What::ParamGrad);
                        self.drop_t(old);
                        self.drop_t(t);
                        self.param_grads[k].1 = s;
                    }
                }
            }
            G::Node(j) => {
                let j = j as usize;
                if crate::model::extended::EXTENDED
                    && matches!(self.nodes[j].op, Op::JoinN)
                    && self.nodes[j].buf.is_some()
                {
                    self.join_extra.push((j as u32, t));
                    return;
                }
                if matches!(
                    self.nodes[j].op,
                    Op::Join | Op::Join3 | Op::RopeInPlace { .. }
                ) && self.nodes[j].buf.is_some()
                    && self.nodes[j].buf2.is_none()
                {
                    self.nodes[j].buf2 = Some(t);
                    return;
                }
                if matches!(self.nodes[j].op, Op::Join3)
                    && self.nodes[j].buf2.is_some()
                    && self.nodes[j].buf3.is_none()
                {
                    self.nodes[j].buf3 = Some(t);
                    return;
                }
                match self.nodes[j].buf {
                    None => self.nodes[j].buf = Some(t),
                    // A real device adds in place into whichever of the two the buffer holds
                    // alone (`InputBuffer::accumulate`); fake tensors never qualify.
                    Some(old) if !self.emulated && self.refs[old as usize] == 1 => {
                        self.drop_t(t);
                    }
                    Some(old) if !self.emulated && self.refs[t as usize] == 1 => {
                        self.drop_t(old);
                        self.nodes[j].buf = Some(t);
                    }
                    Some(old) => {
                        // `buffer[pos] = old + var`: var stays in the node's outputs until the
                        // node has delivered them all.
                        let b = self.bytes[t as usize].max(self.bytes[old as usize]);
                        let s = self.new_t(b, What::Grad);
                        self.drop_t(old);
                        self.held.push(t);
                        self.nodes[j].buf = Some(s);
                    }
                }
            }
        }
    }

    /// The gradients stored so far into the parameters `of` selects, in arrival order (FSDP2's
    /// post-backward takes a unit's).
    pub fn take_grads_of(&mut self, of: impl Fn(u32) -> bool) -> Vec<(u32, T)> {
        let (taken, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.param_grads)
            .into_iter()
            .partition(|&(p, _)| p < VISION_LEAF && of(p));
        self.param_grads = kept;
        self.grad_slot.clear();
        for (k, &(p, _)) in self.param_grads.iter().enumerate() {
            let slot = grad_slot(p);
            if self.grad_slot.len() <= slot {
                self.grad_slot.resize(slot + 1, u32::MAX);
            }
            self.grad_slot[slot] = k as u32;
        }
        taken
    }

    /// The gradients stored into parameters during the last backward, in arrival order.
    pub fn take_param_grads(&mut self) -> Vec<(u32, T)> {
        self.grad_slot.clear();
        std::mem::take(&mut self.param_grads)
    }

    /// Releases what the graph still holds (saved tensors of nodes that never ran) and forgets it.
    pub fn free_graph(&mut self) {
        let nodes = std::mem::take(&mut self.nodes);
        for n in &nodes {
            for &s in n.saved.as_slice() {
                self.drop_t(s);
            }
            if let Some(b) = n.buf {
                self.drop_t(b);
            }
            for b in [n.buf2, n.buf3].into_iter().flatten() {
                self.drop_t(b);
            }
        }
        for (_, t) in std::mem::take(&mut self.join_extra) {
            self.drop_t(t);
        }
        self.layer_start.clear();
        for (_, _, keeps, _) in std::mem::take(&mut self.ckpt) {
            for t in keeps {
                self.drop_t(t);
            }
        }
    }
}
