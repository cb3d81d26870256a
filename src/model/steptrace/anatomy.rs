//! The step's memory read off its own allocation sequence: the peak of live bytes, the highest
//! moment of each phase, and what is alive then — each live storage filed under the component of
//! the breakdown that says why it is kept, grouped into terms whose formula is the count of
//! tensors times their shape (`layers × 6 × tokens × hidden × 4 B`).
//!
//! This is how the allocated figures of a plan come from the same sequence the caching allocator
//! replays for reserved memory: one description of what each op allocates, saves and frees
//! ([`super::program`]) gives the peak, the breakdown and the reserve together.

use super::{Block, Event, Label, StepPhase, Trace, What};
use crate::model::ctx::Ctx;
use crate::model::term::{bytes_of, f, named_bytes, Component, Factor, Term};

/// The component a live storage stacks into, from what it holds, the block that made it and
/// whether backward made it (the harness files everything backward allocates — recomputed
/// layers included — as backward temporaries, parameter gradients apart).
pub fn component(label: &Label, made_in_backward: bool) -> Component {
    match label.what {
        What::Weight if label.block == Block::Experts => Component::FrozenExperts,
        What::Weight | What::Input if label.block == Block::Vision => Component::VisionTower,
        What::Vision => Component::VisionTower,
        What::Weight => Component::FrozenWeights,
        What::QuantState => Component::QuantState,
        What::Trainable => Component::TrainableWeights,
        What::ParamGrad => Component::Gradients,
        What::OptState => Component::OptimizerStates,
        What::OptTemp => Component::OptimizerTemps,
        What::Overhead => Component::MeasuredOverhead,
        What::Workspace => Component::CublasWorkspace,
        What::GatheredLayer | What::GatheredRoot | What::CommBucket => Component::CommBuffers,
        What::MergeTemp => Component::MergeTemps,
        What::EvalOutputs => Component::LogitsLoss,
        _ if made_in_backward => Component::BackwardTemps,
        What::Buffer | What::Input | What::Rotary => Component::ActEmbeddings,
        What::Hidden if label.block == Block::Checkpoint => Component::ActCheckpoints,
        What::Hidden | What::Norm => Component::ActNorms,
        What::LinearOut => match label.block {
            Block::Attention => Component::ActAttention,
            Block::Mlp => Component::ActMlp,
            Block::Experts => Component::ActExperts,
            Block::Other | Block::Checkpoint | Block::Vision => Component::ActLora,
        },
        What::LoraCast | What::Lora | What::Dora => Component::ActLora,
        What::Dropout | What::DropoutMask => Component::ActDropout,
        What::WeightCopy | What::Int8Quant => Component::ActWeightCopies,
        What::Rope
        | What::Attention
        | What::Scores
        | What::Mask
        | What::LinearAttn
        | What::KvCache => Component::ActAttention,
        What::Mlp => Component::ActMlp,
        What::Experts => Component::ActExperts,
        What::Logits | What::Loss => Component::LogitsLoss,
        What::Grad | What::BackwardTemp | What::KernelTemp => Component::BackwardTemps,
    }
}

/// The highest live bytes of one stretch of the sequence and where it is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moment {
    /// Training step (1 or 2; 0 before training).
    pub step: u8,
    /// Phase of the step.
    pub phase: StepPhase,
    /// Index of the allocation that reaches it.
    pub event: usize,
    /// Live bytes (sum of requested sizes).
    pub bytes: u64,
    /// What that allocation holds.
    pub made: Label,
}

impl Moment {
    /// The moment in words: the allocation that reaches it (`allocating the activation gradient
    /// of layer 31`).
    pub fn words(&self) -> String {
        let recomputed = recomputed(self.made.what, self.phase == StepPhase::Backward);
        let what = label_text(self.made.what, self.made.block, recomputed);
        match self.made.layer {
            Some(l) => format!("allocating the {what} of layer {l}"),
            None => format!("allocating the {what}"),
        }
    }
}

/// Whether a storage of `what` is a recomputed layer's: a kind of tensor a forward op makes,
/// made in backward.
fn recomputed(what: What, made_in_backward: bool) -> bool {
    made_in_backward && is_forward_kind(what)
}

/// Kinds of tensor a forward op makes.
fn is_forward_kind(what: What) -> bool {
    !matches!(
        what,
        What::Grad
            | What::BackwardTemp
            | What::KernelTemp
            | What::GatheredLayer
            | What::GatheredRoot
            | What::CommBucket
            | What::WeightCopy
            | What::ParamGrad
            | What::OptState
            | What::OptTemp
            | What::Workspace
            | What::MergeTemp
    )
}

/// Every name a term or a moment can give a kind of tensor (for the translation tests).
pub fn every_label_text() -> Vec<String> {
    let mut out = vec![];
    for w in What::ALL {
        for b in Block::ALL {
            for recomputed in [false, true] {
                let l = label_text(w, b, recomputed);
                if !out.contains(&l) {
                    out.push(l);
                }
            }
        }
    }
    out
}

/// A term's or moment's name for a kind of tensor made in `block`.
fn label_text(what: What, block: Block, recomputed: bool) -> String {
    // `dropout output (attention)`, `dropout output (attention, recomputed)`: a recomputed
    // tensor keeps its block, so the names of one component stay distinct.
    let name = what.name();
    match (named_block(what, block).suffix(), recomputed) {
        ("", true) => format!("{name} (recomputed)"),
        (s, true) => format!("{name}{}, recomputed)", s.trim_end_matches(')')),
        (s, false) => format!("{name}{s}"),
    }
}

/// The block a name gives a kind of tensor made in `block`: kinds made in several blocks are
/// named with theirs (the checkpoint keeps hidden states only); attention's, the MLP's and the
/// experts' own kinds name their block already.
fn named_block(what: What, block: Block) -> Block {
    match (what, block) {
        (What::Hidden, b) => b,
        (
            What::LinearOut
            | What::Weight
            | What::WeightCopy
            | What::LoraCast
            | What::Dropout
            | What::DropoutMask
            | What::Lora
            | What::Norm,
            b @ (Block::Attention | Block::Mlp | Block::Experts),
        ) => b,
        _ => Block::Other,
    }
}

/// The moments of a sequence: its peak and the highest of each phase of the training steps.
#[derive(Clone, Debug)]
pub struct Moments {
    /// The highest live bytes of the whole sequence (the first of equals).
    pub peak: Moment,
    /// The highest of the forward, the reference forward (preference steps), the backward and
    /// the optimizer step over the training steps, in step order; then of the job's phase after
    /// them (evaluation or merge), in a job's sequence (`steptrace::generate_job`).
    pub phases: Vec<Moment>,
    /// Live bytes once the whole sequence has run (what stays between steps: weights,
    /// optimizer states, buffers).
    pub end_bytes: u64,
    /// The phase each storage was allocated in.
    pub alloc_phase: Vec<StepPhase>,
}

/// The peak and each reported phase's highest moment (the training phases', the job's phase
/// after them), kept as the moments of a sequence are seen in order (the first of equals).
#[derive(Default)]
pub(super) struct Highs {
    peak: Option<Moment>,
    phases: Vec<Moment>,
}

impl Highs {
    /// One more moment, after those seen before.
    pub(super) fn see(&mut self, m: Moment) {
        if self.peak.is_none_or(|p| m.bytes > p.bytes) {
            self.peak = Some(m);
        }
        let reported = matches!(
            m.phase,
            StepPhase::Generate
                | StepPhase::Score
                | StepPhase::Forward
                | StepPhase::RefForward
                | StepPhase::Backward
                | StepPhase::Optimizer
                | StepPhase::Eval
                | StepPhase::Merge
        );
        if m.step > 0 && reported {
            match self.phases.iter_mut().find(|p| p.phase == m.phase) {
                Some(p) if p.bytes >= m.bytes => {}
                Some(p) => *p = m,
                None => self.phases.push(m),
            }
        }
    }

    /// The moments of the sequence seen.
    pub(super) fn done(self, end_bytes: u64, alloc_phase: Vec<StepPhase>) -> Moments {
        let empty = Moment {
            step: 0,
            phase: StepPhase::Setup,
            event: 0,
            bytes: 0,
            made: Label::new(What::Buffer, None),
        };
        Moments {
            peak: self.peak.unwrap_or(empty),
            phases: self.phases,
            end_bytes,
            alloc_phase,
        }
    }
}

/// The step and phase of each event of `trace`, in order.
pub fn event_phases(trace: &Trace) -> impl Iterator<Item = (u8, StepPhase)> + '_ {
    let mut next = 0usize;
    let (mut step, mut phase) = (0u8, StepPhase::Setup);
    (0..trace.events.len()).map(move |i| {
        while next < trace.phases.len() && trace.phases[next].0 <= i {
            (_, step, phase) = trace.phases[next];
            next += 1;
        }
        (step, phase)
    })
}

/// Finds the peak and each phase's highest moment in one pass.
pub fn moments(trace: &Trace) -> Moments {
    let mut alloc_phase = vec![StepPhase::Setup; trace.labels.len()];
    let mut size = vec![0u64; trace.labels.len()];
    let mut live = 0u64;
    let mut highs = Highs::default();
    for (i, (e, (step, phase))) in trace.events.iter().zip(event_phases(trace)).enumerate() {
        match *e {
            Event::Alloc { id, bytes, .. } => {
                let id = id as usize;
                alloc_phase[id] = phase;
                size[id] = bytes;
                live += bytes;
                highs.see(Moment {
                    step,
                    phase,
                    event: i,
                    bytes: live,
                    made: trace.labels[id],
                });
            }
            Event::Free { id } => live -= size[id as usize],
        }
    }
    highs.done(live, alloc_phase)
}

/// The storages live right after event `at`: (storage id, bytes, the decoder layer it belongs
/// to — its allocation's tag: the layer recording it, or the parameter's — if any).
pub fn live_after(trace: &Trace, at: usize) -> Vec<(usize, u64, Option<u32>)> {
    let mut alive: Vec<Option<(u64, u32)>> = vec![None; trace.labels.len()];
    let end = (at + 1).min(trace.events.len());
    for (e, &tag) in trace.events[..end].iter().zip(&trace.event_tags) {
        match *e {
            Event::Alloc { id, bytes, .. } => alive[id as usize] = Some((bytes, tag)),
            Event::Free { id } => alive[id as usize] = None,
        }
    }
    alive
        .iter()
        .enumerate()
        .filter_map(|(id, a)| {
            a.map(|(bytes, tag)| (id, bytes, (tag != super::tape::NO_LAYER).then_some(tag)))
        })
        .collect()
}

/// How a kind of tensor's element count is explained: a parameter's shape, an activation's
/// (tokens first), or only its size in bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Parameter,
    Activation,
    Bytes,
}

fn shape_kind(what: What) -> Shape {
    match what {
        What::Weight
        | What::Trainable
        | What::OptState
        | What::ParamGrad
        | What::WeightCopy
        | What::MergeTemp => Shape::Parameter,
        What::Workspace
        | What::Overhead
        | What::Buffer
        | What::QuantState
        | What::OptTemp
        | What::GatheredLayer
        | What::GatheredRoot
        | What::CommBucket
        | What::EvalOutputs => Shape::Bytes,
        _ => Shape::Activation,
    }
}

/// The named widths an element count is explained with, in the order they are tried: a
/// parameter's dimensions, or for an activation the tokens first (a mask's square before them),
/// then the widths, heads and the sequence (twice, for attention scores).
fn widths(ctx: &Ctx, shape: Shape, square: bool) -> Vec<(&'static str, u128)> {
    let a = ctx.arch;
    let s = ctx.s;
    // An activation's widths: 0 (left out) for a parameter; the experts' for MoE models only.
    let act = |v: u64| {
        if shape == Shape::Activation {
            v as u128
        } else {
            0
        }
    };
    let moe = |v: u128| if a.is_moe() { v } else { 0 };
    // A preference or GRPO step: every sequence of its pairs, the completion tokens it scores,
    // and (GRPO's rollout tensors) a sequence's prompt and completion.
    let seqs = s.sequences();
    let split = s.preference() || s.grpo();
    let scored = if split {
        act(seqs) * u128::from(s.completion_tokens())
    } else {
        0
    };
    let part = |v: u64| if split { act(v) } else { 0 };
    // A mask is a square over the sequence, tried first: over the one row a packed micro-batch
    // runs as (the step's settings, `Settings::as_run`), with that name.
    let side = if square { act(s.seq) } else { 0 };
    let side_name = if crate::model::extended::EXTENDED && s.packing {
        "packed row"
    } else {
        "seq"
    };
    [
        (side_name, side),
        (side_name, side),
        ("tokens", act(seqs) * s.seq as u128),
        ("scored tokens", scored),
        (if s.paired() { "sequences" } else { "batch" }, part(seqs)),
        ("completion", part(s.completion_tokens())),
        ("prompt", part(s.prompt_tokens())),
        ("hidden", a.hidden_size as u128),
        ("intermediate", a.intermediate_size as u128),
        ("q_dim", a.q_dim()),
        ("kv_dim", a.kv_dim()),
        ("vocab", a.vocab_size as u128),
        ("rank", s.lora_r as u128),
        ("heads", a.num_attention_heads as u128),
        ("head_dim", a.head_dim() as u128),
        ("kv_heads", a.kv_heads() as u128),
        ("experts", moe(a.num_experts())),
        ("expert width", moe(a.expert_width())),
        ("seq", act(s.seq)),
        ("seq", act(s.seq)),
        (
            if s.paired() { "sequences" } else { "batch" },
            if split { 0 } else { act(seqs) },
        ),
    ]
    .into_iter()
    .filter(|&(_, v)| v > 1)
    .collect()
}

/// `n` as a product of at most four of `widths`, each used once (the first such product in
/// their order, fewest factors first; products of three or more in `deep`'s order), if there is
/// one.
fn factorise(
    n: u128,
    widths: &[(&'static str, u128)],
    deep: &[(&'static str, u128)],
) -> Option<Vec<(&'static str, u128)>> {
    fn dfs(
        n: u128,
        from: usize,
        depth: usize,
        ws: &[(&'static str, u128)],
        out: &mut Vec<(&'static str, u128)>,
    ) -> bool {
        if depth == 0 {
            return n == 1;
        }
        for (i, &(name, v)) in ws.iter().enumerate().skip(from) {
            if n % v == 0 {
                out.push((name, v));
                if dfs(n / v, i + 1, depth - 1, ws, out) {
                    return true;
                }
                out.pop();
            }
        }
        false
    }
    (1..=4).find_map(|depth| {
        let mut out = vec![];
        let ws = if depth < 3 { widths } else { deep };
        dfs(n, 0, depth, ws, &mut out).then_some(out)
    })
}

/// The factors of one storage of `bytes` holding `what` in elements of `elem_bytes` (0:
/// unknown): its shape in named widths times its element size, or its size in bytes.
fn shape_factors(bytes: u64, what: What, elem_bytes: u8, ctx: &Ctx) -> Vec<Factor> {
    let bytes = bytes as u128;
    let shape = shape_kind(what);
    if what == What::EvalOutputs {
        if let Some(fs) = eval_output_factors(bytes, ctx) {
            return fs;
        }
    }
    if shape == Shape::Bytes || bytes <= 8 || split(ctx, what) {
        return vec![bytes_of(bytes)];
    }
    let mut ws = widths(ctx, shape, what == What::Mask);
    if what == What::Weight {
        // A frozen base weight has no LoRA rank among its dimensions.
        ws.retain(|&(name, _)| name != "rank");
    }
    // A mixture of experts' 3-D parameters (three widths or more) are explained by the
    // experts' dimensions before another product of widths happens to give the same count.
    // (a build without the extended ops plans no mixture of experts)
    let experts_first;
    let deep: &[(&'static str, u128)] =
        if crate::model::extended::EXTENDED && shape == Shape::Parameter && ctx.arch.is_moe() {
            let expert = |&(name, _): &(&str, u128)| name.starts_with("expert");
            // the experts, `gate_up_proj`'s width (the gate and the up projection of every
            // expert), the expert width, then the others in their order
            let mut d = vec![
                ("experts", ctx.arch.num_experts()),
                ("2 × expert width", 2 * ctx.arch.expert_width()),
            ];
            d.extend(ws.iter().filter(|w| expert(w) && w.0 != "experts"));
            d.extend(ws.iter().filter(|w| !expert(w)));
            experts_first = d;
            &experts_first
        } else {
            &ws
        };
    let own = [u128::from(elem_bytes)];
    let tried: &[u128] = if elem_bytes == 0 { &[4, 2, 1, 8] } else { &own };
    for &es in tried {
        if bytes % es != 0 {
            continue;
        }
        if let Some(fs) = factorise(bytes / es, &ws, deep) {
            let mut out: Vec<Factor> = fs.into_iter().map(|(n, v)| f(n, v)).collect();
            out.push(bytes_of(es));
            return out;
        }
    }
    vec![bytes_of(bytes)]
}

/// A storage the evaluation keeps (Trainer's `nested_concat` of every batch so far): some
/// number of batches times one batch's logits (tokens × vocab in the logits' dtype), labels
/// (tokens × int64) or losses (`loss.repeat(batch)`, fp32), in that order of trial. `ctx` is the
/// evaluation's (its batch is the eval batch).
fn eval_output_factors(bytes: u128, ctx: &Ctx) -> Option<Vec<Factor>> {
    let tokens = u128::from(ctx.s.sequences()) * u128::from(ctx.s.seq);
    let vocab = u128::from(ctx.arch.vocab_size);
    let batch = u128::from(ctx.s.sequences());
    let logits = [("tokens", tokens), ("vocab", vocab)];
    type Kind<'a> = (&'a [(&'static str, u128)], u128, &'static str);
    let kinds: [Kind; 3] = [
        (&logits, ctx.logits.bytes(), ""),
        (&logits[..1], 8, "int64"),
        (&[("batch", batch)], 4, "fp32"),
    ];
    for (dims, es, dtype) in kinds {
        let one: u128 = dims.iter().map(|d| d.1).product::<u128>() * es;
        if one == 0 || bytes % one != 0 {
            continue;
        }
        let batches = bytes / one;
        let mut out = vec![f("batches", batches)];
        out.extend(dims.iter().map(|&(n, v)| f(n, v)));
        out.push(if dtype.is_empty() {
            bytes_of(es)
        } else {
            named_bytes(dtype, es)
        });
        return Some(out);
    }
    None
}

/// Whether this rank holds a share of each storage of `what` (several GPUs shard it,
/// [`super::rank::Rank::splits`]): its size is a shard's, rounded up, which no product of the
/// model's widths names.
fn split(ctx: &Ctx, what: What) -> bool {
    super::rank::Rank::of(&ctx.s.parallel, 1).splits(what)
}

/// A storage live at a moment, standing for `copies` storages of the model (more than one for a
/// layer of the middle of a short run, [`super::periodic`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Live {
    /// Storage id in the trace it was read from.
    pub id: usize,
    /// Bytes of each copy.
    pub bytes: u64,
    /// The decoder layer it belongs to (its allocation's tag), if any.
    pub layer: Option<u32>,
    /// How many storages of the model it stands for, each in a layer of its own when `layer` is
    /// set.
    pub copies: u64,
}

/// Live storages as terms in the breakdown's stacking order: one per component and name (kind
/// of tensor and block), a sum of one product per size — the count of tensors (`layers × per
/// layer` where every layer holds the same) times their shape. `labels` and `alloc_phase` are
/// those of the trace the storages' ids come from.
pub fn terms_of(
    ctx: &Ctx,
    labels: &[Label],
    alloc_phase: &[StepPhase],
    live: &[Live],
) -> Vec<Term> {
    // Groups of one component, kind, block, size and element size: tensors, their distinct
    // layers (with the layers each stands for), and whether any lies outside every layer.
    type Key = (Component, What, Block, bool, u64, u8);
    let mut groups: Vec<(Key, u128, Vec<u32>, u128, bool)> = vec![];
    for Live {
        id,
        bytes,
        layer,
        copies,
    } in live.iter().copied()
    {
        let label = labels[id];
        let made_in_backward = alloc_phase[id] == StepPhase::Backward;
        let key = (
            component(&label, made_in_backward),
            label.what,
            label.block,
            recomputed(label.what, made_in_backward),
            bytes,
            label.elem_bytes,
        );
        let i = match groups.iter().position(|g| g.0 == key) {
            Some(i) => i,
            None => {
                groups.push((key, 0, vec![], 0, false));
                groups.len() - 1
            }
        };
        let g = &mut groups[i];
        g.1 += u128::from(copies);
        match layer {
            Some(layer) if !g.2.contains(&layer) => {
                g.2.push(layer);
                g.3 += u128::from(copies);
            }
            Some(_) => {}
            None => g.4 = true,
        }
    }
    // Groups of one component and name: one term, a product per group.
    type Name = (Component, What, Block, bool);
    let mut named: Vec<(Name, Vec<Vec<Factor>>)> = vec![];
    for ((c, what, block, recomputed, bytes, es), count, _, layers, outside) in groups {
        let mut fs = if !outside && layers > 1 && count % layers == 0 {
            let mut v = vec![f("layers", layers)];
            if count / layers > 1 {
                v.push(f("per layer", count / layers));
            }
            v
        } else if count > 1 {
            vec![f("tensors", count)]
        } else {
            vec![]
        };
        fs.extend(shape_factors(bytes, what, es, ctx));
        let name = (c, what, named_block(what, block), recomputed);
        match named.iter_mut().find(|n| n.0 == name) {
            Some(n) => n.1.push(fs),
            None => named.push((name, vec![fs])),
        }
    }
    let mut out = vec![];
    for c in Component::ALL {
        for ((_, what, block, recomputed), parts) in named.iter().filter(|n| n.0 .0 == c) {
            out.push(Term::sum(c, label_text(*what, *block, *recomputed), parts));
        }
    }
    out
}

/// What one rank keeps in host memory of one kind (offloaded parameters, gradients, optimizer
/// states, checkpointed hidden states), as a term of its bytes.
pub fn host_term(what: What, bytes: u64) -> Term {
    // The hidden states host memory holds are the checkpoints' inputs.
    let block = if what == What::Hidden {
        Block::Checkpoint
    } else {
        Block::Other
    };
    let label = Label {
        block,
        ..Label::new(what, None)
    };
    Term::sum(
        component(&label, false),
        label_text(what, block, false),
        &[vec![bytes_of(u128::from(bytes))]],
    )
}
