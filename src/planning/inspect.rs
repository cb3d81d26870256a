//! A real run against its plan: a PyTorch memory snapshot (or `memory_summary()` text, or
//! `memory_stats()` JSON) read with [`crate::formats::snapshot`], its peaks recovered (reserved
//! from the segment events, allocated by replaying the trace through the allocator port), and —
//! given the configuration — the tensors live at the measured peak matched to the ones the plan
//! has live at its peak ([`crate::model::steptrace`] names every planned storage). What is left
//! over is `unplanned`: memory the run holds that the plan does not have, with the phase it was
//! allocated in.

use serde::{Deserialize, Deserializer, Serialize};

use crate::formats::snapshot::{self, Action, IdMap, Report, Snapshot};
use crate::model::allocator::{AllocConf, BlockId, CachingAllocator};
use crate::model::steptrace::{self, Event, StepPhase, Trace};
use crate::model::{plan_simulated, Architecture, Settings};

/// Measured memory the plan does not have: one size, possibly several tensors.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unplanned {
    /// Size of each tensor.
    pub bytes_each: u64,
    /// How many were live at the measured peak.
    pub count: usize,
    /// Together.
    pub bytes: u64,
    /// Phase the (first) one was allocated in, by its position in the step (`forward`, …).
    pub phase: String,
    /// The innermost recorded frame of its allocation.
    pub frame: String,
}

/// The plan's side.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    /// Planned `max_memory_allocated()` (block-rounded, simulated).
    pub peak_allocated_bytes: u64,
    /// Planned `max_memory_reserved()`.
    pub peak_reserved_bytes: u64,
    /// Planned tensors not found at the measured peak (bytes together).
    pub missing_bytes: u64,
}

/// One point of a memory timeline: the highest memory within a stretch of the step.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Where in the step: the share of its allocations made so far (0 to 1), so a measured run
    /// and its plan line up although their event counts differ.
    pub at: f64,
    /// Requested bytes of live tensors (the highest in this stretch).
    pub allocated_bytes: u64,
    /// Bytes reserved in segments (measured runs; 0 for the plan).
    pub reserved_bytes: u64,
}

/// Where a phase of the planned step starts, on the same axis as [`Sample::at`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PhaseMark {
    /// Share of the step's allocations before it.
    pub at: f64,
    /// `forward`, `loss`, `backward`, `optimizer`, …
    #[serde(deserialize_with = "phase_name")]
    pub phase: Name,
}

/// Points of a timeline drawn (the highest memory of each stretch is kept, so no peak is lost).
pub const TIMELINE_POINTS: usize = 240;

/// What a file says, and how it compares with the plan.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Inspection {
    /// `snapshot`, `memory_summary` or `memory_stats`.
    #[serde(deserialize_with = "kind_name")]
    pub kind: Name,
    /// `max_memory_allocated()`: exact from a complete trace (replayed through the allocator
    /// port), a lower bound from a truncated one, read from a summary or stats.
    pub peak_allocated_bytes: Option<u64>,
    /// `max_memory_reserved()`.
    pub peak_reserved_bytes: Option<u64>,
    /// Peak of requested bytes (what the tensors asked for).
    pub peak_requested_bytes: Option<u64>,
    /// The trace does not start from an empty allocator (ring buffer wrapped, or history
    /// recorded late): peaks are lower bounds over the recorded window.
    pub trace_truncated: bool,
    /// Trace events read.
    pub trace_events: usize,
    /// The trace event after which requested memory peaked (snapshots with a trace).
    pub peak_event_index: Option<usize>,
    /// The plan of the stated configuration, when one was given.
    pub planned: Option<Planned>,
    /// Measured tensors the plan does not have, largest first.
    pub unplanned: Vec<Unplanned>,
    /// The verdict in words.
    pub findings: Vec<String>,
    /// Measured memory over the recorded trace (snapshots only), at most [`TIMELINE_POINTS`].
    pub timeline: Vec<Sample>,
    /// The plan's allocated memory over the same step (when the configuration was given).
    pub planned_timeline: Vec<Sample>,
    /// Where the planned step's phases start.
    pub phase_marks: Vec<PhaseMark>,
}

/// A name from a fixed set (a file's kind, a step phase). Written as an alias, not `&'static str`,
/// because serde's derive would make a `&str` field borrow from the input; these are looked up
/// in their set when read back (an inspection comes back from the page's worker as JSON).
pub type Name = &'static str;

/// What a file can be ([`Inspection::kind`]).
const KINDS: [&str; 3] = ["snapshot", "memory_summary", "memory_stats"];

/// The name of `names` equal to the string read; anything else is refused.
fn one_of<'de, D: Deserializer<'de>>(
    d: D,
    names: impl IntoIterator<Item = Name>,
) -> Result<Name, D::Error> {
    let s = String::deserialize(d)?;
    names
        .into_iter()
        .find(|n| *n == s)
        .ok_or_else(|| serde::de::Error::custom(format!("unknown name {s:?}")))
}

fn kind_name<'de, D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
    one_of(d, KINDS)
}

fn phase_name<'de, D: Deserializer<'de>>(d: D) -> Result<Name, D::Error> {
    one_of(d, StepPhase::ALL.map(StepPhase::name))
}

/// Keeps the highest point of each of `n` equal stretches of `at` (points in `at` order).
fn envelope(points: impl Iterator<Item = Sample>, n: usize) -> Vec<Sample> {
    let mut out: Vec<Sample> = Vec::with_capacity(n);
    for p in points {
        let bucket = ((p.at * n as f64) as usize).min(n - 1);
        let at = (bucket as f64 + 0.5) / n as f64;
        match out.last_mut() {
            Some(last) if (last.at - at).abs() < 1e-12 => {
                last.allocated_bytes = last.allocated_bytes.max(p.allocated_bytes);
                last.reserved_bytes = last.reserved_bytes.max(p.reserved_bytes);
            }
            _ => out.push(Sample { at, ..p }),
        }
    }
    out
}

/// Allocations of a planned step (at least 1, to divide by).
fn alloc_count(t: &Trace) -> usize {
    t.events
        .iter()
        .filter(|e| matches!(e, Event::Alloc { .. }))
        .count()
        .max(1)
}

/// The planned step's live bytes over its allocations.
fn planned_timeline(t: &Trace) -> Vec<Sample> {
    let allocs = alloc_count(t);
    let mut sizes: IdMap<u32, u64> = IdMap::default();
    let (mut live, mut k) = (0u64, 0usize);
    let points = t.events.iter().map(move |e| {
        match *e {
            Event::Alloc { id, bytes, .. } => {
                sizes.insert(id, bytes);
                live += bytes;
                k += 1;
            }
            Event::Free { id } => live -= sizes.remove(&id).unwrap_or(0),
        }
        Sample {
            at: k as f64 / allocs as f64,
            allocated_bytes: live,
            reserved_bytes: 0,
        }
    });
    envelope(points, TIMELINE_POINTS)
}

const GIB: f64 = (1u64 << 30) as f64;

/// Reads a file and, given the configuration it ran, compares it with the plan.
pub fn inspect(
    bytes: &[u8],
    config: Option<(&Architecture, &Settings)>,
) -> Result<Inspection, String> {
    inspect_report(&snapshot::parse(bytes)?, config)
}

/// [`inspect`] of a report already parsed. The page runs its three steps ([`measure`],
/// [`compare`], [`conclude`]) one per slice, with progress between them.
pub fn inspect_report(
    report: &Report,
    config: Option<(&Architecture, &Settings)>,
) -> Result<Inspection, String> {
    let mut ins = measure(report);
    if let Some((arch, s)) = config {
        compare(&mut ins, report, arch, s)?;
    }
    Ok(conclude(ins))
}

/// What the file says on its own: peaks, whether the trace is complete, the timeline.
pub fn measure(report: &Report) -> Inspection {
    match report {
        Report::Snapshot(s) => from_snapshot(s),
        Report::Summary(s) => {
            // The table rounds down to its unit: the lower end of each range.
            let low = |a: Option<snapshot::Amount>| a.and_then(|a| a.bytes_range()).map(|r| r.0);
            Inspection {
                peak_allocated_bytes: low(s.peak_allocated()),
                peak_reserved_bytes: low(s.peak_reserved()),
                peak_requested_bytes: low(s.peak_requested()),
                ..empty("memory_summary")
            }
        }
        Report::Stats(s) => Inspection {
            peak_allocated_bytes: s.peak_allocated(),
            peak_reserved_bytes: s.peak_reserved(),
            peak_requested_bytes: s.peak_requested(),
            ..empty("memory_stats")
        },
    }
}

/// Adds the findings that need no plan (fragmentation, a truncated trace).
pub fn conclude(mut ins: Inspection) -> Inspection {
    ins.findings.extend(general_findings(&ins));
    ins
}

fn empty(kind: &'static str) -> Inspection {
    Inspection {
        kind,
        peak_allocated_bytes: None,
        peak_reserved_bytes: None,
        peak_requested_bytes: None,
        trace_truncated: false,
        trace_events: 0,
        peak_event_index: None,
        planned: None,
        unplanned: vec![],
        findings: vec![],
        timeline: vec![],
        planned_timeline: vec![],
        phase_marks: vec![],
    }
}

fn from_snapshot(s: &Snapshot) -> Inspection {
    let t = s.timeline();
    let truncated = s.trace_truncated_given(&t);
    let allocated = if truncated {
        None
    } else {
        Some(replay_allocated(s))
    };
    // The measured timeline on the allocation axis.
    let events = s.device_trace(s.primary_device());
    let allocs = events
        .iter()
        .filter(|e| e.action == Action::Alloc)
        .count()
        .max(1);
    let mut k = 0usize;
    let points = events.iter().zip(&t.points).map(|(e, p)| {
        if e.action == Action::Alloc {
            k += 1;
        }
        Sample {
            at: k as f64 / allocs as f64,
            allocated_bytes: p.allocated_requested_bytes,
            reserved_bytes: p.reserved_bytes,
        }
    });
    let timeline = envelope(points, TIMELINE_POINTS);
    Inspection {
        timeline,
        peak_allocated_bytes: allocated.or(Some(t.peak_allocated_requested_bytes)),
        peak_reserved_bytes: Some(t.peak_reserved_bytes),
        peak_requested_bytes: Some(t.peak_allocated_requested_bytes),
        trace_truncated: truncated,
        trace_events: t.points.len(),
        peak_event_index: t.peak_allocated_index,
        ..empty("snapshot")
    }
}

/// `max_memory_allocated()` of a complete trace: its requests replayed through the allocator
/// port, which rounds and hands out blocks as PyTorch's does.
fn replay_allocated(s: &Snapshot) -> u64 {
    let mut a = CachingAllocator::new(AllocConf::default(), None);
    let mut live: IdMap<u64, BlockId> = IdMap::default();
    for e in s.device_trace(s.primary_device()) {
        match e.action {
            Action::Alloc => {
                if let Ok(id) = a.malloc(e.size.max(1)) {
                    live.insert(e.addr, id);
                }
            }
            Action::FreeCompleted => {
                if let Some(id) = live.remove(&e.addr) {
                    a.free(id);
                }
            }
            _ => {}
        }
    }
    a.stats().allocated_bytes.aggregate.peak
}

/// A planned storage live at the plan's peak.
struct PlannedLive {
    /// Its allocation's ordinal in the planned run.
    ordinal: usize,
}

/// Planned storages live at the plan's peak, by size.
type LiveBySize = IdMap<u64, Vec<PlannedLive>>;
/// (first allocation ordinal, phase) at each phase change of the planned run.
type PhaseStarts = Vec<(usize, StepPhase)>;

/// The planned storages live at the plan's peak, by size, and the phase of each allocation
/// ordinal of the planned run.
fn planned_at_peak(t: &Trace) -> (LiveBySize, PhaseStarts) {
    let mut ordinal_of: Vec<usize> = vec![0; t.labels.len()];
    let allocs = t.events.iter().filter_map(|e| match *e {
        Event::Alloc { id, .. } => Some(id as usize),
        Event::Free { .. } => None,
    });
    for (ordinal, id) in allocs.enumerate() {
        ordinal_of[id] = ordinal;
    }
    let peak = steptrace::anatomy::moments(t).peak.event;
    let mut by_size: IdMap<u64, Vec<PlannedLive>> = IdMap::default();
    for (id, bytes, _) in steptrace::anatomy::live_after(t, peak) {
        by_size.entry(bytes).or_default().push(PlannedLive {
            ordinal: ordinal_of[id],
        });
    }
    let mut phase_by_alloc: Vec<(usize, StepPhase)> = vec![];
    let (mut allocs, mut next) = (0usize, 0usize);
    for (i, e) in t.events.iter().enumerate() {
        while next < t.phases.len() && t.phases[next].0 <= i {
            phase_by_alloc.push((allocs, t.phases[next].2));
            next += 1;
        }
        if matches!(e, Event::Alloc { .. }) {
            allocs += 1;
        }
    }
    (by_size, phase_by_alloc)
}

fn phase_of_alloc(phases: &[(usize, StepPhase)], ordinal: usize) -> &'static str {
    phases
        .iter()
        .rev()
        .find(|(k, _)| *k <= ordinal)
        .map(|(_, p)| p.name())
        .unwrap_or("setup")
}

/// Adds the plan of the stated configuration: planned peaks and timeline, the phases, and the
/// measured tensors the plan does not have.
pub fn compare(
    ins: &mut Inspection,
    report: &Report,
    arch: &Architecture,
    s: &Settings,
) -> Result<(), String> {
    let p = plan_simulated(arch, s).map_err(|e| e.to_string())?;
    let trace = steptrace::generate(arch, s).map_err(|e| e.to_string())?;
    let (mut planned, phases) = planned_at_peak(&trace);
    ins.planned_timeline = planned_timeline(&trace);
    let planned_allocs = alloc_count(&trace);
    ins.phase_marks = phases
        .iter()
        .map(|(k, phase)| PhaseMark {
            at: *k as f64 / planned_allocs as f64,
            phase: phase.name(),
        })
        .fold(vec![], |mut v: Vec<PhaseMark>, m| {
            if v.last().is_none_or(|l| l.phase != m.phase) {
                v.push(m);
            }
            v
        });
    let mut planned_fig = Planned {
        peak_allocated_bytes: u64::try_from(p.peak_allocated_bytes).unwrap_or(u64::MAX),
        peak_reserved_bytes: u64::try_from(p.peak_reserved_bytes).unwrap_or(u64::MAX),
        missing_bytes: 0,
    };
    if let Report::Snapshot(snap) = report {
        let at = ins.peak_event_index.unwrap_or(0);
        let live = snap.largest_blocks_at(at, usize::MAX);
        // Alloc ordinal of each event, to place an allocation in the planned step.
        let events = snap.device_trace(snap.primary_device());
        let mut ordinal = vec![0usize; events.len()];
        let mut k = 0;
        for (i, e) in events.iter().enumerate() {
            ordinal[i] = k;
            if e.action == Action::Alloc {
                k += 1;
            }
        }
        let scale = planned_allocs as f64 / k.max(1) as f64;
        // Same-sized tensors are told apart by where the step allocates them: each planned one
        // takes the measured one allocated nearest to its own position.
        let position = |b: &snapshot::LiveBlock| {
            b.alloc_event
                .map(|i| (ordinal[i] as f64 * scale) as usize)
                .unwrap_or(0)
        };
        let mut by_size: IdMap<u64, Vec<&snapshot::LiveBlock>> = IdMap::default();
        for b in &live {
            by_size.entry(b.size).or_default().push(b);
        }
        let mut extra: IdMap<u64, Unplanned> = IdMap::default();
        for (size, mut measured) in by_size {
            let mut wanted = planned.remove(&size).unwrap_or_default();
            wanted.sort_by_key(|p| p.ordinal);
            for want in &wanted {
                let nearest = measured
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, b)| position(b).abs_diff(want.ordinal))
                    .map(|(i, _)| i);
                if let Some(i) = nearest {
                    measured.swap_remove(i);
                } else {
                    planned_fig.missing_bytes += size;
                }
            }
            measured.sort_by_key(|b| position(b));
            for b in measured {
                let phase = b
                    .alloc_event
                    .map(|_| phase_of_alloc(&phases, position(b)))
                    .unwrap_or("before the recorded window");
                let frame = b
                    .frames
                    .first()
                    .map(|f| format!("{} ({}:{})", f.name, f.filename, f.line))
                    .unwrap_or_default();
                let u = extra.entry(size).or_insert(Unplanned {
                    bytes_each: size,
                    count: 0,
                    bytes: 0,
                    phase: phase.to_string(),
                    frame,
                });
                u.count += 1;
                u.bytes += size;
            }
        }
        planned_fig.missing_bytes += planned
            .iter()
            .map(|(size, v)| size * v.len() as u64)
            .sum::<u64>();
        let mut unplanned: Vec<Unplanned> = extra.into_values().collect();
        unplanned.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.bytes_each.cmp(&b.bytes_each)));
        // Noise floor: allocator-internal scraps under 1 MiB in total per size are not findings.
        unplanned.retain(|u| u.bytes >= 1 << 20);
        if let Some(u) = unplanned.first() {
            let measured = ins.peak_requested_bytes.unwrap_or(0) as f64;
            ins.findings.push(format!(
                "your run holds {:.2} GiB more than planned at its peak ({:.2} GiB requested vs {:.2} GiB planned); the largest unplanned memory: {} tensor{} of {:.2} GiB allocated in {}{}",
                (measured - p.peak_allocated_bytes as f64) / GIB,
                measured / GIB,
                p.peak_allocated_bytes as f64 / GIB,
                u.count,
                if u.count == 1 { "" } else { "s" },
                u.bytes_each as f64 / GIB,
                u.phase,
                hint(u, arch, s),
            ));
        }
        ins.unplanned = unplanned;
    }
    ins.planned = Some(planned_fig);
    Ok(())
}

/// A likely explanation of an unplanned tensor by its size.
fn hint(u: &Unplanned, arch: &Architecture, s: &Settings) -> String {
    let tokens = s.batch.saturating_mul(s.seq);
    let logits = tokens.saturating_mul(arch.vocab_size);
    let hidden_bytes = tokens.saturating_mul(arch.hidden_size);
    if u.bytes_each == logits.saturating_mul(4) {
        " — the size of an fp32 copy of the logits (tokens × vocab × 4 B): older transformers versions upcast the logits in forward; upgrade transformers or use a fused cross-entropy".into()
    } else if u.bytes_each == logits.saturating_mul(2) {
        " — the size of the 16-bit logits (tokens × vocab × 2 B): something keeps the model output alive (e.g. outputs stored across the step)".into()
    } else if hidden_bytes > 0 && u.bytes_each % hidden_bytes == 0 {
        format!(
            " — {} × (tokens × hidden) bytes: a hidden state or activation the plan does not keep (different batch or sequence than stated?)",
            u.bytes_each / hidden_bytes
        )
    } else {
        String::new()
    }
}

fn general_findings(ins: &Inspection) -> Vec<String> {
    let mut out = vec![];
    if ins.trace_truncated {
        out.push(format!(
            "the trace is a window (the ring buffer of _record_memory_history wrapped, or history started late): it covers {} events, so its peaks are lower bounds; record with a larger max_entries to see the whole step",
            ins.trace_events
        ));
    }
    if let (Some(a), Some(r)) = (ins.peak_allocated_bytes, ins.peak_reserved_bytes) {
        let gap = r.saturating_sub(a);
        if gap as f64 > 0.1 * a as f64 && gap > 1 << 30 {
            out.push(format!(
                "reserved exceeds allocated by {:.2} GiB (fragmentation in the caching allocator): PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True can help when tensor sizes vary between steps (plan the run with it to see whether it does)",
                gap as f64 / GIB
            ));
        }
    }
    out
}
