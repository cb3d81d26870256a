//! Replaying a device trace: memory over time, peaks, truncation and live blocks.
//!
//! A snapshot holds the segments and blocks *at the dump* plus a trace of
//! events *before* it. The state when the trace starts is derived by walking back
//! from the dump: `start = at_dump - net change over the trace`. For reserved
//! memory that is exact (segments are listed whole at the dump); for allocated
//! memory the trace carries requested sizes, so the allocated curve is in
//! requested bytes.
//!
//! When the trace does not start from an empty allocator (the ring buffer of
//! `max_entries` wrapped, or recording began after the first allocations) the
//! derived start is non-zero and the peaks are peaks over the recorded window
//! only, so lower bounds of the true peaks.

use std::collections::BTreeMap;

use super::{IdMap, IdSet};

use serde::Serialize;

use super::dump::{Action, Frame, Snapshot, StackId, TraceEvent};

/// Memory right after one trace event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct TimelinePoint {
    /// Index of the event in the device trace.
    pub event_index: usize,
    /// Requested bytes of live allocations.
    pub allocated_requested_bytes: u64,
    /// Bytes reserved in segments.
    pub reserved_bytes: u64,
}

/// Memory of one device over its trace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// Device index.
    pub device: usize,
    /// One point per event, in trace order.
    pub points: Vec<TimelinePoint>,
    /// Requested bytes live before the first event (0 for a complete trace).
    pub start_allocated_requested_bytes: u64,
    /// Bytes reserved before the first event (0 for a complete trace).
    pub start_reserved_bytes: u64,
    /// Highest requested bytes over the trace, the start included.
    pub peak_allocated_requested_bytes: u64,
    /// Event after which that peak was first reached (`None`: at the start).
    pub peak_allocated_index: Option<usize>,
    /// Highest reserved bytes over the trace, the start included.
    pub peak_reserved_bytes: u64,
    /// Event after which that peak was first reached (`None`: at the start).
    pub peak_reserved_index: Option<usize>,
    /// `free_completed` / `segment_free` events of addresses not live in the trace.
    pub unmatched_frees: usize,
}

impl Timeline {
    /// Whether the trace fails to explain the state from an empty allocator.
    pub fn truncated(&self) -> bool {
        self.start_allocated_requested_bytes > 0
            || self.start_reserved_bytes > 0
            || self.unmatched_frees > 0
    }
}

/// An allocation live at some point of the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LiveBlock {
    /// Device address.
    pub address: u64,
    /// Requested size in bytes.
    pub size: u64,
    /// Index of its `alloc` event; `None` when it was allocated before the trace.
    pub alloc_event: Option<usize>,
    /// Stack of its `alloc` event; for blocks allocated before the trace, the
    /// stack recorded with its later free or in the dump.
    pub frames: Vec<Frame>,
}

impl Snapshot {
    /// The device with the most trace events (0 when there is no trace).
    pub fn primary_device(&self) -> usize {
        let mut best = 0;
        for (d, events) in self.device_traces.iter().enumerate() {
            if events.len() > self.device_trace(best).len() {
                best = d;
            }
        }
        best
    }

    /// Timeline of the [primary device](Self::primary_device).
    pub fn timeline(&self) -> Timeline {
        self.device_timeline(self.primary_device())
    }

    /// Timeline of `device`.
    pub fn device_timeline(&self, device: usize) -> Timeline {
        let at_dump = self.dump_totals().remove(&device).unwrap_or_default();
        self.timeline_from(device, at_dump)
    }

    /// Timeline of `device` given its `(requested, reserved)` bytes at the dump.
    fn timeline_from(&self, device: usize, at_dump: (i128, i128)) -> Timeline {
        let events = self.device_trace(device);
        let alloc_start = walk_back(at_dump.0, events, allocated_delta);
        let reserved_start = walk_back(at_dump.1, events, reserved_delta);
        let mut alloc = alloc_start;
        let mut reserved = reserved_start;
        let mut t = Timeline {
            device,
            points: Vec::with_capacity(events.len()),
            start_allocated_requested_bytes: clamp(alloc_start),
            start_reserved_bytes: clamp(reserved_start),
            peak_allocated_requested_bytes: clamp(alloc_start),
            peak_reserved_bytes: clamp(reserved_start),
            ..Timeline::default()
        };
        let mut replay = Replay::default();
        for (i, e) in events.iter().enumerate() {
            if replay.apply(i, e) {
                t.unmatched_frees += 1;
            }
            alloc += allocated_delta(e);
            reserved += reserved_delta(e);
            let point = TimelinePoint {
                event_index: i,
                allocated_requested_bytes: clamp(alloc),
                reserved_bytes: clamp(reserved),
            };
            if point.allocated_requested_bytes > t.peak_allocated_requested_bytes {
                t.peak_allocated_requested_bytes = point.allocated_requested_bytes;
                t.peak_allocated_index = Some(i);
            }
            if point.reserved_bytes > t.peak_reserved_bytes {
                t.peak_reserved_bytes = point.reserved_bytes;
                t.peak_reserved_index = Some(i);
            }
            t.points.push(point);
        }
        t
    }

    /// Whether any device's trace fails to explain its state from an empty
    /// allocator: the `max_entries` ring buffer wrapped (or recording started
    /// late), so frees of never-allocated addresses occur, or memory was already
    /// allocated/reserved before the first event.
    pub fn trace_truncated(&self) -> bool {
        self.truncated_except(None)
    }

    /// [`Self::trace_truncated`] reusing a timeline already computed (a trace is replayed
    /// once less: it matters on a 100 MB snapshot).
    pub fn trace_truncated_given(&self, known: &Timeline) -> bool {
        known.truncated() || self.truncated_except(Some(known.device))
    }

    fn truncated_except(&self, known: Option<usize>) -> bool {
        let totals = self.dump_totals();
        let traced = self.device_traces.len();
        let untraced = totals.keys().copied().filter(|&d| d >= traced);
        (0..traced)
            .chain(untraced)
            .filter(|&d| Some(d) != known)
            .any(|d| {
                let at_dump = totals.get(&d).copied().unwrap_or_default();
                self.timeline_from(d, at_dump).truncated()
            })
    }

    /// The `n` largest allocations live right after event `event_index` of the
    /// [primary device](Self::primary_device), largest first.
    pub fn largest_blocks_at(&self, event_index: usize, n: usize) -> Vec<LiveBlock> {
        self.device_largest_blocks_at(self.primary_device(), event_index, n)
    }

    /// The `n` largest allocations live right after event `event_index` of
    /// `device`, largest first. An index past the end means the end of the trace.
    pub fn device_largest_blocks_at(
        &self,
        device: usize,
        event_index: usize,
        n: usize,
    ) -> Vec<LiveBlock> {
        let events = self.device_trace(device);
        let mut replay = Replay::default();
        let mut at_point: Vec<(u64, Live)> = Vec::new();
        let mut before_trace: Vec<(u64, Live)> = Vec::new();
        for (i, e) in events.iter().enumerate() {
            if replay.apply(i, e) && i > event_index && e.action == Action::FreeCompleted {
                // Allocated before the trace and still live at `event_index`.
                before_trace.push((e.addr, Live::before_trace(e.size, e.stack)));
            }
            if i == event_index {
                at_point = replay.live.iter().map(|(&a, l)| (a, *l)).collect();
            }
        }
        if event_index >= events.len() {
            at_point = replay.live.iter().map(|(&a, l)| (a, *l)).collect();
        }
        // Blocks live at the dump that the trace never allocated.
        for segment in self.device_segments(device) {
            for b in segment.blocks.iter().filter(|b| b.state.is_active()) {
                if !replay.live.contains_key(&b.address) {
                    let live = Live::before_trace(b.requested_size, b.stack);
                    before_trace.push((b.address, live));
                }
            }
        }
        at_point.extend(before_trace);
        at_point.sort_unstable_by(|a, b| b.1.size.cmp(&a.1.size).then(a.0.cmp(&b.0)));
        at_point.truncate(n);
        at_point
            .into_iter()
            .map(|(address, l)| LiveBlock {
                address,
                size: l.size,
                alloc_event: l.event,
                frames: self.stack_frames(l.stack),
            })
            .collect()
    }

    // ---- helpers -----------------------------------------------------------

    /// The trace events of `device` (empty when it has none).
    pub fn device_trace(&self, device: usize) -> &[TraceEvent] {
        self.device_traces.get(device).map_or(&[], Vec::as_slice)
    }

    fn device_segments(&self, device: usize) -> impl Iterator<Item = &super::Segment> {
        self.segments
            .iter()
            .filter(move |s| usize::try_from(s.device).ok() == Some(device))
    }

    /// Per device, the requested bytes of active blocks and the reserved bytes
    /// at the dump.
    fn dump_totals(&self) -> BTreeMap<usize, (i128, i128)> {
        let mut totals: BTreeMap<usize, (i128, i128)> = BTreeMap::new();
        for s in &self.segments {
            let Ok(device) = usize::try_from(s.device) else {
                continue;
            };
            let active = s.blocks.iter().filter(|b| b.state.is_active());
            let requested: i128 = active.map(|b| i128::from(b.requested_size)).sum();
            let entry = totals.entry(device).or_default();
            entry.0 += requested;
            entry.1 += i128::from(s.total_size);
        }
        totals
    }
}

/// The value before `events` given its value `end` after them, raised to keep
/// every intermediate value non-negative.
fn walk_back(end: i128, events: &[TraceEvent], delta: fn(&TraceEvent) -> i128) -> i128 {
    let (mut net, mut lowest) = (0i128, 0i128);
    for e in events {
        net += delta(e);
        lowest = lowest.min(net);
    }
    (end - net).max(-lowest).max(0)
}

fn allocated_delta(e: &TraceEvent) -> i128 {
    match e.action {
        Action::Alloc => i128::from(e.size),
        Action::FreeCompleted => -i128::from(e.size),
        _ => 0,
    }
}

fn reserved_delta(e: &TraceEvent) -> i128 {
    match e.action {
        Action::SegmentAlloc | Action::SegmentMap => i128::from(e.size),
        Action::SegmentFree | Action::SegmentUnmap => -i128::from(e.size),
        _ => 0,
    }
}

fn clamp(v: i128) -> u64 {
    u64::try_from(v.max(0)).unwrap_or(u64::MAX)
}

/// A live allocation during a replay.
#[derive(Debug, Clone, Copy)]
struct Live {
    size: u64,
    event: Option<usize>,
    stack: StackId,
}

impl Live {
    fn before_trace(size: u64, stack: StackId) -> Self {
        Self {
            size,
            event: None,
            stack,
        }
    }
}

/// Live blocks and segments while walking a trace forward.
#[derive(Default)]
struct Replay {
    live: IdMap<u64, Live>,
    segments: IdSet<u64>,
}

impl Replay {
    /// Applies event `i`; returns whether it frees something the trace never
    /// allocated (`segment_map`/`unmap` ranges are not tracked).
    fn apply(&mut self, i: usize, e: &TraceEvent) -> bool {
        match e.action {
            Action::Alloc => {
                let live = Live {
                    size: e.size,
                    event: Some(i),
                    stack: e.stack,
                };
                self.live.insert(e.addr, live);
                false
            }
            Action::FreeCompleted => self.live.remove(&e.addr).is_none(),
            Action::SegmentAlloc => {
                self.segments.insert(e.addr);
                false
            }
            Action::SegmentFree => !self.segments.remove(&e.addr),
            _ => false,
        }
    }
}
