//! The step's live peak without running every decoder layer: the step program run at two small
//! depths, extrapolated to the model's.
//!
//! Decoder layers repeat. Past a prefix of special layers (DeepSeek's dense first layers) the
//! layers' signatures — their feed-forward kind and whether they attend locally — repeat with a
//! period `p` (1, or the sliding-window pattern: 2 for Gemma 2 and gpt-oss, 6 for Gemma 3). Every
//! event of the step belongs to a layer or to none ([`super::Trace::event_tags`]). The live
//! bytes after an event of a layer that repeats grow by a constant per period from one layer to
//! the next (forward keeps a period's saved tensors more; backward has released one more
//! period's and holds one more period's gradients), so over the repeated layers the highest of
//! them stands in the first or the last periods, and each of those values, like the value of an
//! event outside every layer, is affine in the number of periods.
//!
//! So the step runs with `k + r + 4p` layers and with one period more (`k` the prefix, `r` the
//! remainder of the model's depth past whole periods, so the last layers keep their place in
//! the pattern). The events outside the middle period(s) are the same, one for one, in both runs
//! — checked, allocation sizes included; anything else falls back to the full run — and each
//! value is extrapolated to the model's depth: `v(L) = v₁ + (L − L₁)/p × (v₂ − v₁)`.
//! `tests/it/reserved.rs` holds the result equal, to the byte, to the full run on every measured
//! case and on the catalog under every option.

use super::anatomy::{self, Live, Moment, Moments};
use super::tape::NO_LAYER;
use super::{generate_on, step_work, Device, Event, StepPhase, StepWork, Trace, What};
use crate::model::arch::{Architecture, LayerKind};
use crate::model::error::PlanError;
use crate::model::settings::Settings;

/// Where an event stands: outside every layer, in one of the first layers, or in one of the
/// last (counted from the end); the middle layers, whose values lie between theirs, are left
/// out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Outside,
    Start(u32),
    End(u32),
    Middle,
}

/// What a layer's events depend on besides its index: its kind, whether it attends locally,
/// whether its own weights are trained (freeze tuning trains some layers only), and whether it
/// rotates q and k (Llama 4's layers without rotary).
fn signature(a: &Architecture, s: &Settings, li: u64) -> (LayerKind, bool, bool, bool) {
    let local = a.family.layout().sliding.is_some_and(|w| w.local(li));
    (
        a.layer_kind(li),
        local,
        s.layer_trained(li, a.num_hidden_layers),
        a.rotates(li),
    )
}

/// The period of the layers' pattern: the sliding-window pattern's, and that of the layers
/// without rotary where it is every `no_rope_layer_interval`-th layer (a list in config.json
/// is checked layer by layer instead: the shortened models then differ and run in full).
fn period(a: &Architecture) -> u64 {
    let sliding = a.family.layout().sliding.map_or(1, |w| w.period.max(1));
    let nope = match (
        a.family.layout().nope_interval_default,
        &a.nope.no_rope_layers,
    ) {
        (Some(d), None) if crate::model::extended::EXTENDED => {
            a.nope.no_rope_layer_interval.unwrap_or(d).max(1)
        }
        _ => 1,
    };
    let gcd = |mut x: u64, mut y: u64| {
        while y != 0 {
            (x, y) = (y, x % y);
        }
        x
    };
    sliding / gcd(sliding, nope) * nope
}

/// The two depths to run, when the model is deep enough to gain: `(L₁, L₂, p, head)` with
/// `head` the layers kept at their own index (the prefix and two periods).
fn depths(a: &Architecture, s: &Settings) -> Option<(u64, u64, u64, u64)> {
    let l = a.num_hidden_layers;
    let p = period(a);
    // The prefix: up to the last layer whose signature differs from the one a period on.
    let k = (0..l.saturating_sub(p))
        .rev()
        .find(|&i| signature(a, s, i) != signature(a, s, i + p))
        .map_or(0, |i| i + 1);
    let r = (l - k.min(l)) % p;
    let l1 = k + r + 4 * p;
    let l2 = l1 + p;
    if l2 >= l {
        return None;
    }
    let head = k + 2 * p;
    // The shortened models must see each kept layer as the model does.
    for short in [l1, l2] {
        let sa = with_layers(a, short);
        for i in 0..short {
            let full = if i < head { i } else { i + (l - short) };
            if signature(&sa, s, i) != signature(a, s, full) {
                return None;
            }
        }
    }
    Some((l1, l2, p, head))
}

fn with_layers(a: &Architecture, layers: u64) -> Architecture {
    Architecture {
        num_hidden_layers: layers,
        ..a.clone()
    }
}

/// An allocation outside the middle layers of a short run.
#[derive(Clone, Copy, Debug)]
struct Kept {
    place: Place,
    /// Its index in the run's events.
    event: usize,
    /// The storage it allocates.
    id: u32,
    bytes: u64,
    /// Live bytes right after it.
    live: u64,
    /// The step and phase it is made in.
    step: u8,
    phase: StepPhase,
}

/// One pass over a short run: the allocations outside its middle layers, the phase each
/// storage is allocated in, and the live bytes once the run has ended.
struct Pass {
    kept: Vec<Kept>,
    alloc_phase: Vec<StepPhase>,
    end: u64,
}

/// The allocations outside the middle layers of a run of `layers`: in the first `head` layers,
/// the last `tail`, or outside every layer.
fn kept(t: &Trace, layers: u64, head: u64, tail: u64) -> Pass {
    let mut sizes: Vec<u64> = vec![0; t.labels.len()];
    let mut alloc_phase = vec![StepPhase::Setup; t.labels.len()];
    let mut live: u64 = 0;
    let mut out = Vec::with_capacity(t.events.len() / 2);
    let phases = anatomy::event_phases(t);
    for (event, ((e, &tag), (step, phase))) in
        t.events.iter().zip(&t.event_tags).zip(phases).enumerate()
    {
        match *e {
            Event::Alloc { id, bytes, .. } => {
                sizes[id as usize] = bytes;
                alloc_phase[id as usize] = phase;
                live += bytes;
                let place = place(tag, layers, head, tail);
                if place != Place::Middle {
                    out.push(Kept {
                        place,
                        event,
                        id,
                        bytes,
                        live,
                        step,
                        phase,
                    });
                }
            }
            Event::Free { id } => live -= sizes[id as usize],
        }
    }
    Pass {
        kept: out,
        alloc_phase,
        end: live,
    }
}

/// Where an event or storage of layer `tag` stands in a run of `layers`.
fn place(tag: u32, layers: u64, head: u64, tail: u64) -> Place {
    if tag == NO_LAYER {
        return Place::Outside;
    }
    let i = tag as u64;
    if i < head {
        Place::Start(tag)
    } else if i + tail >= layers {
        Place::End((layers - i) as u32)
    } else {
        Place::Middle
    }
}

/// How [`live_peak`] reached its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// The model is too shallow to gain: the full run.
    Full,
    /// From two short runs.
    Extrapolated,
    /// The short runs' events did not line up (a structure this module does not know): the
    /// full run.
    Unaligned,
}

/// The step's peak of live bytes (what [`super::generate_on`]'s trace reports as
/// `peak_live_bytes`), from two short runs when the model is deep enough, else from the full
/// run.
pub fn live_peak(a: &Architecture, s: &Settings, device: Device) -> Result<(u64, How), PlanError> {
    Short::run(a, s, device).map(|short| (short.moments.peak.bytes, short.how))
}

/// The step run at two short depths and lined up with the model's: its moments (peak, each
/// phase's highest, what stays between steps) with the model's bytes, and the storages live at
/// each of them with the storages of the model they stand for.
pub struct Short {
    /// The longer run (`L₂` layers); the moments' events index its sequence.
    pub trace: Trace,
    /// What each allocation outside the middle layers makes, and the model's live bytes right
    /// after it, in order.
    pub values: Vec<(What, u64)>,
    /// The model's moments: events of [`Short::trace`], bytes extrapolated to the model's depth,
    /// the layer a moment's allocation belongs to counted in the model.
    pub moments: Moments,
    /// Whether it comes from two short runs or the full run.
    pub how: How,
    /// What the warm step's ops create and the host memory (offloaded storages) by kind at its
    /// highest ([`super::step_work`]), extrapolated to the model's depth like the live bytes.
    pub work: StepWork,
    /// Periods of the model's depth past the shorter run's (`(L − L₁)/p`).
    periods: u64,
    /// The last layers of the runs and of the model line up: `L − L₂`.
    shift: u32,
    /// `L₂`.
    depth: u64,
    head: u64,
    tail: u64,
    /// Bytes of the shorter run's matching storage, for each storage of the longer run that
    /// lies outside its middle layers.
    bytes_short: Vec<Option<u64>>,
}

impl Short {
    /// The step's sequence lined up with the model: from two short runs when the model is deep
    /// enough and they line up, else from the full run ([`Short::how`] says which).
    pub fn run(a: &Architecture, s: &Settings, device: Device) -> Result<Short, PlanError> {
        let how = match depths(a, s) {
            None => How::Full,
            Some((l1, l2, p, head)) => {
                let t1 = generate_on(&with_layers(a, l1), s, device)?;
                let t2 = generate_on(&with_layers(a, l2), s, device)?;
                match Short::line_up(a, t1, t2, (l1, l2, p, head))? {
                    Some(short) => return Ok(short),
                    None => How::Unaligned,
                }
            }
        };
        let mut short = Short::full(a, generate_on(a, s, device)?);
        short.how = how;
        Ok(short)
    }

    /// The full run's sequence, as a [`Short`] whose every layer is kept (no period to
    /// extrapolate).
    pub fn full(a: &Architecture, trace: Trace) -> Short {
        let l = a.num_hidden_layers;
        let pass = kept(&trace, l, l, 0);
        let work = step_work(&trace);
        Short::assemble(trace, None, pass, (&work, &work), (0, 0, l, l, 0))
            .unwrap_or_else(|_| unreachable!("a full run's live bytes are u64"))
    }

    /// Lines up two short runs `(L₁, L₂)` layers deep: `None` if their allocations outside the
    /// middle layers differ.
    fn line_up(
        a: &Architecture,
        t1: Trace,
        t2: Trace,
        (l1, l2, p, head): (u64, u64, u64, u64),
    ) -> Result<Option<Short>, PlanError> {
        let tail = l1 - head;
        let (p1, p2) = (kept(&t1, l1, head, tail), kept(&t2, l2, head, tail));
        let (k1, k2) = (&p1.kept, &p2.kept);
        let same = k1.len() == k2.len()
            && k1.iter().zip(k2).all(|(x, y)| {
                x.place == y.place && (x.bytes == y.bytes || x.place == Place::Outside)
            });
        if !same {
            return Ok(None);
        }
        let periods = (a.num_hidden_layers - l1) / p;
        let shift = (a.num_hidden_layers - l2) as u32;
        let (w1, w2) = (step_work(&t1), step_work(&t2));
        let mut short = Short::assemble(
            t2,
            Some(&p1),
            p2,
            (&w1, &w2),
            (periods, shift, l2, head, tail),
        )?;
        short.how = How::Extrapolated;
        Ok(Some(short))
    }

    /// The model's values from the passes over the shorter run (`p1`; none: the same run) and
    /// the longer (`p2`, whose trace is `t2`), and the work of each (`works`).
    fn assemble(
        t2: Trace,
        p1: Option<&Pass>,
        p2: Pass,
        (work1, work2): (&StepWork, &StepWork),
        (periods, shift, depth, head, tail): (u64, u32, u64, u64, u64),
    ) -> Result<Short, PlanError> {
        // Extrapolated live bytes past u64 are a step too large to plan, as for a full run.
        let mut too_large = false;
        let mut grow = |x: u64, y: u64| -> u64 {
            let v = extrapolated(x, y, periods);
            too_large |= v > u64::MAX as i128;
            v.clamp(0, u64::MAX as i128) as u64
        };
        let mut bytes_short = vec![None; t2.labels.len()];
        let mut highs = anatomy::Highs::default();
        let mut values = Vec::with_capacity(p2.kept.len());
        for (i, y) in p2.kept.iter().enumerate() {
            let x = p1.map_or(y, |p| &p.kept[i]);
            bytes_short[y.id as usize] = Some(x.bytes);
            let mut made = t2.labels[y.id as usize];
            if let (Place::End(_), Some(l)) = (y.place, made.layer.as_mut()) {
                *l += shift;
            }
            let bytes = grow(x.live, y.live);
            values.push((made.what, bytes));
            highs.see(Moment {
                step: y.step,
                phase: y.phase,
                event: y.event,
                bytes,
                made,
            });
        }
        let end = grow(p1.map_or(p2.end, |p| p.end), p2.end);
        let work = StepWork {
            bytes_by_what: (work1.bytes_by_what.iter().zip(&work2.bytes_by_what))
                .map(|(&x, &y)| grow(x, y))
                .collect(),
            allocations: grow(work1.allocations, work2.allocations),
            host: What::ALL
                .iter()
                .filter_map(|&w| {
                    let of = |h: &[(What, u64)]| h.iter().find(|x| x.0 == w).map_or(0, |x| x.1);
                    let b = grow(of(&work1.host), of(&work2.host));
                    (b > 0).then_some((w, b))
                })
                .collect(),
            paged_bytes: grow(work1.paged_bytes, work2.paged_bytes),
        };
        if too_large {
            return Err(super::too_large());
        }
        Ok(Short {
            trace: t2,
            values,
            moments: highs.done(end, p2.alloc_phase),
            how: How::Full,
            work,
            periods,
            shift,
            depth,
            head,
            tail,
            bytes_short,
        })
    }

    /// The model's storages live right after event `at` of [`Short::trace`] (an event of one of
    /// [`Short::moments`]): a storage of the first or last layers, or outside every layer, stands
    /// for itself (its size extrapolated like the live bytes); one of a middle layer for that
    /// layer in each period of the model's middle. `None` if they do not add up to the moment's
    /// extrapolated bytes.
    pub fn live_at(&self, at: usize, bytes: u64) -> Option<Vec<Live>> {
        let mut out = vec![];
        let mut sum: u128 = 0;
        for (id, b2, tag) in anatomy::live_after(&self.trace, at) {
            let tag = tag.unwrap_or(NO_LAYER);
            let live = match place(tag, self.depth, self.head, self.tail) {
                Place::Middle => Live {
                    id,
                    bytes: b2,
                    layer: Some(tag),
                    copies: self.periods,
                },
                at => {
                    let b1 = self.bytes_short[id].unwrap_or(b2);
                    let b = extrapolated(b1, b2, self.periods);
                    Live {
                        id,
                        bytes: b.clamp(0, u64::MAX as i128) as u64,
                        layer: match at {
                            Place::Outside => None,
                            Place::End(_) => Some(tag + self.shift),
                            _ => Some(tag),
                        },
                        copies: 1,
                    }
                }
            };
            sum += u128::from(live.bytes) * u128::from(live.copies);
            out.push(live);
        }
        (sum == u128::from(bytes)).then_some(out)
    }
}

/// A value of the shorter run (`x`) and of the longer (`y`, one period deeper) at the model's
/// depth, `periods` periods past the shorter: `x + periods × (y − x)`.
fn extrapolated(x: u64, y: u64, periods: u64) -> i128 {
    x as i128 + periods as i128 * (y as i128 - x as i128)
}

/// The model's live bytes after each allocation the step makes outside the middle layers
/// (every allocation when the model is too shallow for short runs), with what it makes, and
/// once the whole sequence has run.
pub fn live_values(
    a: &Architecture,
    s: &Settings,
    device: Device,
) -> Result<(Vec<(What, u64)>, u64), PlanError> {
    Short::run(a, s, device).map(|short| (short.values, short.moments.end_bytes))
}
