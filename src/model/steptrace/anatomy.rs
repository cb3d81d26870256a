//! The step's memory read off its own allocation sequence: the peak of live bytes, the highest
//! moment of each phase, and what is alive then — each live storage filed under the component of
//! the breakdown that says why it is kept, grouped into terms whose formula is the count of
//! tensors times their shape (`layers × 6 × tokens × hidden × 4 B`).
//!
//! This is how the allocated figures of a plan come from the same sequence the caching allocator
//! replays for reserved memory: one description of what each op allocates, saves and frees
//! ([`super::program`]) gives the peak, the breakdown and the reserve together.

use std::collections::BTreeMap;

use super::{Block, Event, Label, StepPhase, Trace, What};
use crate::model::activations::Ctx;
use crate::model::term::{bytes_of, f, Component, Factor, Term};

/// The component a live storage stacks into, from what it holds, the block that made it and
/// whether backward made it (the harness files everything backward allocates — recomputed
/// layers included — as backward temporaries, parameter gradients apart).
pub fn component(label: &Label, made_in_backward: bool) -> Component {
    match label.what {
        What::Weight if label.block == Block::Experts => Component::FrozenExperts,
        What::Weight => Component::FrozenWeights,
        What::QuantState => Component::QuantState,
        What::Trainable => Component::TrainableWeights,
        What::ParamGrad => Component::Gradients,
        What::OptState => Component::OptimizerStates,
        What::OptTemp => Component::OptimizerTemps,
        What::Overhead => Component::MeasuredOverhead,
        What::Workspace => Component::CublasWorkspace,
        _ if made_in_backward => Component::BackwardTemps,
        What::Buffer | What::Input | What::Rotary => Component::ActEmbeddings,
        What::Hidden if label.block == Block::Checkpoint => Component::ActCheckpoints,
        What::Hidden | What::Norm => Component::ActNorms,
        What::LinearOut => match label.block {
            Block::Attention => Component::ActAttention,
            Block::Mlp => Component::ActMlp,
            Block::Experts => Component::ActExperts,
            Block::Other | Block::Checkpoint => Component::ActLora,
        },
        What::LoraCast | What::Lora => Component::ActLora,
        What::Dropout | What::DropoutMask => Component::ActDropout,
        What::WeightCopy => Component::ActWeightCopies,
        What::Rope | What::Attention | What::Scores => Component::ActAttention,
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
        let recomputed = self.phase == StepPhase::Backward && is_forward_kind(self.made.what);
        let what = label_text(self.made.what, self.made.block, recomputed);
        match self.made.layer {
            Some(l) => format!("allocating the {what} of layer {l}"),
            None => format!("allocating the {what}"),
        }
    }
}

/// Kinds of tensor a forward op makes (made in backward, they are a recomputed layer's).
fn is_forward_kind(what: What) -> bool {
    !matches!(
        what,
        What::Grad
            | What::BackwardTemp
            | What::KernelTemp
            | What::WeightCopy
            | What::ParamGrad
            | What::OptState
            | What::OptTemp
            | What::Workspace
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
    // Kinds made in several blocks are named with theirs (the checkpoint keeps hidden states
    // only); attention's, the MLP's and the experts' own kinds name their block already.
    let block = match (what, block) {
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
    };
    format!(
        "{}{}",
        what.name(),
        if recomputed {
            " (recomputed)"
        } else {
            block.suffix()
        }
    )
}

/// The moments of a sequence: its peak and the highest of each phase of the training steps.
#[derive(Clone, Debug)]
pub struct Moments {
    /// The highest live bytes of the whole sequence (the first of equals).
    pub peak: Moment,
    /// The highest of each phase over the training steps (forward, backward, optimizer, zero_grad
    /// where they allocate), in step order.
    pub phases: Vec<Moment>,
    /// The phase each storage was allocated in.
    alloc_phase: Vec<StepPhase>,
}

/// Finds the peak and each phase's highest moment in one pass.
pub fn moments(trace: &Trace) -> Moments {
    let mut alloc_phase = vec![StepPhase::Setup; trace.labels.len()];
    let mut size = vec![0u64; trace.labels.len()];
    let mut live = 0u64;
    let mut next = 0usize;
    let (mut step, mut phase) = (0u8, StepPhase::Setup);
    let mut peak: Option<Moment> = None;
    let mut phases: Vec<Moment> = vec![];
    for (i, e) in trace.events.iter().enumerate() {
        while next < trace.phases.len() && trace.phases[next].0 <= i {
            (_, step, phase) = trace.phases[next];
            next += 1;
        }
        match *e {
            Event::Alloc { id, bytes } => {
                let id = id as usize;
                alloc_phase[id] = phase;
                size[id] = bytes;
                live += bytes;
                let m = Moment {
                    step,
                    phase,
                    event: i,
                    bytes: live,
                    made: trace.labels[id],
                };
                if peak.is_none_or(|p| live > p.bytes) {
                    peak = Some(m);
                }
                if step > 0 {
                    match phases.iter_mut().find(|p| p.phase == phase) {
                        Some(p) if p.bytes >= live => {}
                        Some(p) => *p = m,
                        None => phases.push(m),
                    }
                }
            }
            Event::Free { id } => live -= size[id as usize],
        }
    }
    let empty = Moment {
        step: 0,
        phase: StepPhase::Setup,
        event: 0,
        bytes: 0,
        made: Label::new(What::Buffer, None),
    };
    Moments {
        peak: peak.unwrap_or(empty),
        phases,
        alloc_phase,
    }
}

/// Live bytes once the whole sequence has run (what stays between steps: weights, optimizer
/// states, buffers).
pub fn live_at_end(trace: &Trace) -> u64 {
    let mut size = vec![0u64; trace.labels.len()];
    let mut live = 0u64;
    for e in &trace.events {
        match *e {
            Event::Alloc { id, bytes } => {
                size[id as usize] = bytes;
                live += bytes;
            }
            Event::Free { id } => live -= size[id as usize],
        }
    }
    live
}

/// A storage live at a moment.
struct Live {
    label: Label,
    bytes: u64,
    made_in_backward: bool,
    /// The decoder layer it belongs to (its allocation's tag: the layer recording it, or the
    /// parameter's), if any.
    layer: Option<u32>,
}

/// The storages live right after event `at`.
fn live_after(trace: &Trace, m: &Moments, at: usize) -> Vec<Live> {
    let mut alive: Vec<Option<(u64, u32)>> = vec![None; trace.labels.len()];
    let end = (at + 1).min(trace.events.len());
    for (e, &tag) in trace.events[..end].iter().zip(&trace.event_tags) {
        match *e {
            Event::Alloc { id, bytes } => alive[id as usize] = Some((bytes, tag)),
            Event::Free { id } => alive[id as usize] = None,
        }
    }
    alive
        .iter()
        .enumerate()
        .filter_map(|(id, a)| {
            a.map(|(bytes, tag)| Live {
                label: trace.labels[id],
                bytes,
                made_in_backward: m.alloc_phase[id] == StepPhase::Backward,
                layer: (tag != super::tape::NO_LAYER).then_some(tag),
            })
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
        What::Weight | What::Trainable | What::OptState | What::ParamGrad | What::WeightCopy => {
            Shape::Parameter
        }
        What::Workspace | What::Overhead | What::Buffer | What::QuantState | What::OptTemp => {
            Shape::Bytes
        }
        _ => Shape::Activation,
    }
}

/// The named widths an element count is explained with, in the order they are tried: a
/// parameter's dimensions, or for an activation the tokens first, then the widths, heads and the
/// sequence (twice, for attention scores).
fn widths(ctx: &Ctx, shape: Shape) -> Vec<(&'static str, u128)> {
    let a = ctx.arch;
    let s = ctx.s;
    let mut w: Vec<(&'static str, u128)> = vec![];
    if shape == Shape::Activation {
        w.push(("tokens", s.batch as u128 * s.seq as u128));
    }
    w.extend([
        ("hidden", a.hidden_size as u128),
        ("intermediate", a.intermediate_size as u128),
        ("q_dim", a.q_dim()),
        ("kv_dim", a.kv_dim()),
        ("vocab", a.vocab_size as u128),
        ("rank", s.lora_r as u128),
        ("heads", a.num_attention_heads as u128),
        ("head_dim", a.head_dim() as u128),
        ("kv_heads", a.kv_heads() as u128),
    ]);
    if a.is_moe() {
        w.push(("experts", a.num_experts()));
        w.push(("expert width", a.expert_width()));
    }
    if shape == Shape::Activation {
        w.extend([
            ("seq", s.seq as u128),
            ("seq", s.seq as u128),
            ("batch", s.batch as u128),
        ]);
    }
    w.retain(|&(_, v)| v > 1);
    w
}

/// `n` as a product of at most four of `widths`, each used once (the first such product in
/// their order, fewest factors first), if there is one.
fn factorise(n: u128, widths: &[(&'static str, u128)]) -> Option<Vec<(&'static str, u128)>> {
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
        dfs(n, 0, depth, widths, &mut out).then_some(out)
    })
}

/// The factors of one storage of `bytes`: its shape in named widths times its element size, or
/// its size in bytes.
fn shape_factors(bytes: u64, label: &Label, ctx: &Ctx) -> Vec<Factor> {
    let bytes = bytes as u128;
    let shape = shape_kind(label.what);
    if shape == Shape::Bytes || bytes <= 8 {
        return vec![bytes_of(bytes)];
    }
    let ws = widths(ctx, shape);
    let own = [u128::from(label.elem_bytes)];
    let tried: &[u128] = if label.elem_bytes == 0 {
        &[4, 2, 1, 8]
    } else {
        &own
    };
    for &es in tried {
        if bytes % es != 0 {
            continue;
        }
        if let Some(fs) = factorise(bytes / es, &ws) {
            let mut out: Vec<Factor> = fs.into_iter().map(|(n, v)| f(n, v)).collect();
            out.push(bytes_of(es));
            return out;
        }
    }
    vec![bytes_of(bytes)]
}

/// The live storages after event `at`, as terms: one per component, kind of tensor, block and
/// size, with the count of tensors (`layers × per layer` where every layer holds the same)
/// times their shape.
pub fn terms_at(ctx: &Ctx, trace: &Trace, m: &Moments, at: usize) -> Vec<Term> {
    type Key = (Component, What, Block, u64, u8);
    // Per group: tensors, the layers they were made in (distinct), tensors outside layers.
    let mut groups: BTreeMap<Key, (u128, Vec<u32>, u128)> = BTreeMap::new();
    for Live {
        label,
        bytes,
        made_in_backward,
        layer,
    } in live_after(trace, m, at)
    {
        let c = component(&label, made_in_backward);
        let g = groups
            .entry((c, label.what, label.block, bytes, label.elem_bytes))
            .or_default();
        g.0 += 1;
        match layer {
            Some(l) => {
                if !g.1.contains(&l) {
                    g.1.push(l);
                }
            }
            None => g.2 += 1,
        }
    }
    // Groups of one component and name are one term, a sum of their products (largest first).
    let mut named: Vec<(Component, String, Vec<Vec<Factor>>)> = vec![];
    for ((c, what, block, bytes, es), (count, layers, outside)) in groups {
        let l = layers.len() as u128;
        let mut fs = if outside == 0 && l > 1 && count % l == 0 {
            let mut v = vec![f("layers", l)];
            if count / l > 1 {
                v.push(f("per layer", count / l));
            }
            v
        } else if count > 1 {
            vec![f("tensors", count)]
        } else {
            vec![]
        };
        fs.extend(shape_factors(
            bytes,
            &Label {
                elem_bytes: es,
                ..Label::new(what, None)
            },
            ctx,
        ));
        let recomputed = c == Component::BackwardTemps && is_forward_kind(what);
        let label = label_text(what, block, recomputed);
        match named.iter_mut().find(|n| n.0 == c && n.1 == label) {
            Some(n) => n.2.push(fs),
            None => named.push((c, label, vec![fs])),
        }
    }
    let product = |p: &Vec<Factor>| p.iter().fold(1u128, |a, x| a.saturating_mul(x.value));
    let mut out: Vec<Term> = named
        .into_iter()
        .map(|(c, label, mut parts)| {
            parts.sort_by_key(|p| std::cmp::Reverse(product(p)));
            if parts.len() == 1 {
                Term::product(c, label, &parts[0])
            } else {
                Term::sum(c, label, &parts)
            }
        })
        .collect();
    out.sort_by(|a, b| {
        (
            Component::ALL.iter().position(|&c| c == a.component),
            std::cmp::Reverse(a.bytes),
        )
            .cmp(&(
                Component::ALL.iter().position(|&c| c == b.component),
                std::cmp::Reverse(b.bytes),
            ))
    });
    out
}
