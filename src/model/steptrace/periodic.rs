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

use super::tape::NO_LAYER;
use super::{generate_on, Device, Event, Trace};
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

/// What a layer's events depend on besides its index.
fn signature(a: &Architecture, li: u64) -> (LayerKind, bool) {
    let local = a.family.layout().sliding.is_some_and(|w| w.local(li));
    (a.layer_kind(li), local)
}

/// The two depths to run, when the model is deep enough to gain: `(L₁, L₂, p, head)` with
/// `head` the layers kept at their own index (the prefix and two periods).
fn depths(a: &Architecture) -> Option<(u64, u64, u64, u64)> {
    let l = a.num_hidden_layers;
    let p = a.family.layout().sliding.map_or(1, |w| w.period.max(1));
    // The prefix: up to the last layer whose signature differs from the one a period on.
    let k = (0..l.saturating_sub(p))
        .rev()
        .find(|&i| signature(a, i) != signature(a, i + p))
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
        let s = with_layers(a, short);
        for i in 0..short {
            let full = if i < head { i } else { i + (l - short) };
            if signature(&s, i) != signature(a, full) {
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

/// The live bytes after each allocation outside the middle layers, with its place and size: of
/// a run of `layers`, the first `head` layers and the last `tail`.
fn kept(t: &Trace, layers: u64, head: u64, tail: u64) -> Vec<(Place, u64, u64)> {
    let place = |tag: u32| -> Place {
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
    };
    let mut sizes: Vec<u64> = vec![];
    let mut live: u64 = 0;
    let mut out = Vec::with_capacity(t.events.len() / 2);
    for (e, &tag) in t.events.iter().zip(&t.event_tags) {
        match *e {
            Event::Alloc { id, bytes } => {
                let id = id as usize;
                if sizes.len() <= id {
                    sizes.resize(id + 1, 0);
                }
                sizes[id] = bytes;
                live += bytes;
                let at = place(tag);
                if at != Place::Middle {
                    out.push((at, bytes, live));
                }
            }
            Event::Free { id } => live -= sizes.get(id as usize).copied().unwrap_or(0),
        }
    }
    out
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
    let full = |how| generate_on(a, s, device).map(|t| (t.peak_live_bytes, how));
    let Some((l1, l2, p, head)) = depths(a) else {
        return full(How::Full);
    };
    let t1 = generate_on(&with_layers(a, l1), s, device)?;
    let t2 = generate_on(&with_layers(a, l2), s, device)?;
    let tail = l1 - head;
    let (k1, k2) = (kept(&t1, l1, head, tail), kept(&t2, l2, head, tail));
    let same = k1.len() == k2.len()
        && k1
            .iter()
            .zip(&k2)
            .all(|(x, y)| x.0 == y.0 && (x.1 == y.1 || x.0 == Place::Outside));
    if !same {
        return full(How::Unaligned);
    }
    let periods = ((a.num_hidden_layers - l1) / p) as i128;
    let peak = k1
        .iter()
        .zip(&k2)
        .map(|(x, y)| x.2 as i128 + periods * (y.2 as i128 - x.2 as i128))
        .max()
        .unwrap_or(0);
    Ok((peak.clamp(0, u64::MAX as i128) as u64, How::Extrapolated))
}
