//! Acceptance tests against the genuine snapshots in the reference folder.

use super::common::{fixture, fixture_snapshot, NAMES};
use lorafit::formats::snapshot::{parse, Action, Pool, Report, Unit};

/// `(max_allocated, max_reserved, max_requested)` of fixture `name` from
/// `expected.json`.
fn expected(name: &str) -> (u64, u64, u64) {
    let json: serde_json::Value =
        serde_json::from_slice(&fixture("expected", "json")[..]).expect("expected.json");
    let get = |k: &str| {
        json[name][k]
            .as_u64()
            .unwrap_or_else(|| panic!("{name}.{k}"))
    };
    (
        get("max_allocated"),
        get("max_reserved"),
        get("max_requested"),
    )
}

#[test]
fn snapshot_peaks_match_expected_to_the_byte() {
    for name in NAMES {
        let (_, max_reserved, max_requested) = expected(name);
        let snap = fixture_snapshot(name);
        let t = snap.timeline();
        assert_eq!(t.peak_reserved_bytes, max_reserved, "{name}: reserved");
        assert_eq!(
            t.peak_allocated_requested_bytes, max_requested,
            "{name}: requested"
        );
        assert_eq!(t.start_reserved_bytes, 0, "{name}");
        assert_eq!(t.start_allocated_requested_bytes, 0, "{name}");
        assert_eq!(t.unmatched_frees, 0, "{name}");
        assert!(!snap.trace_truncated(), "{name}");
        assert_eq!(t.points.len(), snap.event_count(), "{name}");
        // The last point is the state at the dump.
        let last = t.points.last().expect("events");
        let reserved: u64 = snap.segments.iter().map(|s| s.total_size).sum();
        assert_eq!(last.reserved_bytes, reserved, "{name}");
    }
}

#[test]
fn fixture_contents() {
    for name in NAMES {
        let snap = fixture_snapshot(name);
        assert_eq!(snap.device_traces.len(), 1, "{name}");
        let events = &snap.device_traces[0];
        let count = |a| events.iter().filter(|e| e.action == a).count();
        assert!(count(Action::Alloc) > 10_000, "{name}");
        assert_eq!(count(Action::FreeRequested), count(Action::FreeCompleted));
        assert_eq!(count(Action::SegmentAlloc), snap.segments.len(), "{name}");
        assert!(events.iter().all(|e| e.action != Action::Unknown));
        assert!(events.iter().all(|e| e.time_us.is_some()));
        let frames = snap.stack_frames(events[0].stack);
        assert_eq!(&*frames[0].filename, "snapshot.py");
        assert_eq!((&*frames[0].name, frames[0].line), ("main", 22));
        let settings = &snap.allocator_settings;
        assert_eq!(settings.get("expandable_segments"), Some("False"));
        assert_eq!(settings.get("PYTORCH_CUDA_ALLOC_CONF"), Some(""));
        assert_eq!(settings.get("max_split_size"), Some("-1"));
        assert!(snap.segments.iter().all(|s| !s.blocks.is_empty()));
    }
}

#[test]
fn uncompressed_pickle_parses_the_same() {
    let name = NAMES[0];
    let raw =
        lorafit::formats::snapshot::gunzip(&fixture(name, "pickle.gz"), 1 << 30).expect("gunzip");
    match parse(&raw) {
        Ok(Report::Snapshot(s)) => assert_eq!(s, fixture_snapshot(name)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn live_blocks_at_the_peak_add_up_to_the_peak() {
    for name in NAMES {
        let snap = fixture_snapshot(name);
        let t = snap.timeline();
        let peak = t.peak_allocated_index.expect("peak inside the trace");
        let all = snap.largest_blocks_at(peak, usize::MAX);
        let total: u64 = all.iter().map(|b| b.size).sum();
        assert_eq!(total, t.peak_allocated_requested_bytes, "{name}");
        assert!(all.windows(2).all(|w| w[0].size >= w[1].size));
        let top = snap.largest_blocks_at(peak, 3);
        assert_eq!(top.len(), 3);
        assert_eq!(top[0], all[0]);
        assert!(top.iter().all(|b| b.alloc_event.is_some_and(|i| i <= peak)));
        assert!(!top[0].frames.is_empty());
        // Past the end: the blocks live at the dump.
        let end = snap.largest_blocks_at(usize::MAX, usize::MAX);
        let live: usize = snap
            .segments
            .iter()
            .map(|s| s.blocks.iter().filter(|b| b.state.is_active()).count())
            .sum();
        assert_eq!(end.len(), live, "{name}");
    }
}

#[test]
fn dropping_the_start_of_the_trace_is_detected() {
    let mut snap = fixture_snapshot(NAMES[0]);
    let full = snap.timeline();
    assert!(!snap.trace_truncated() && !snap.trace_truncated_given(&full));
    let events = &mut snap.device_traces[0];
    let cut = events.len() / 10;
    events.drain(..cut);
    assert!(snap.trace_truncated());
    let t = snap.timeline();
    assert!(t.truncated() && snap.trace_truncated_given(&t));
    assert!(t.unmatched_frees > 0);
    assert!(t.start_reserved_bytes > 0);
    assert!(t.start_allocated_requested_bytes > 0);
    // Reserved is exact in the window: the walk back lands on the full curve.
    assert_eq!(t.start_reserved_bytes, full.points[cut - 1].reserved_bytes);
    assert_eq!(
        t.start_allocated_requested_bytes,
        full.points[cut - 1].allocated_requested_bytes
    );
    assert!(t.peak_allocated_requested_bytes <= full.peak_allocated_requested_bytes);
    // Blocks allocated before the window still show up, without an alloc event.
    let blocks = snap.largest_blocks_at(0, usize::MAX);
    assert!(blocks.iter().any(|b| b.alloc_event.is_none()));
    let total: u64 = blocks.iter().map(|b| b.size).sum();
    assert_eq!(total, t.points[0].allocated_requested_bytes);
}

#[test]
fn summary_text_matches_expected_within_display_rounding() {
    for name in NAMES {
        let (max_allocated, max_reserved, max_requested) = expected(name);
        let summary = match parse(&fixture(name, "summary.txt")) {
            Ok(Report::Summary(s)) => s,
            other => panic!("{name}: {other:?}"),
        };
        let within = |amount: Option<lorafit::formats::snapshot::Amount>, bytes: u64| {
            let (low, high) = amount.and_then(|a| a.bytes_range()).expect("size cell");
            assert!(high - low <= 1 << 20, "{name}: rounding over 1 MiB");
            assert!(
                (low..high).contains(&bytes),
                "{name}: {bytes} not in {low}..{high}"
            );
        };
        within(summary.peak_allocated(), max_allocated);
        within(summary.peak_reserved(), max_reserved);
        within(summary.peak_requested(), max_requested);
        assert_eq!(summary.device, Some(0));
        assert_eq!(summary.num_ooms, Some(0));
        assert_eq!(summary.num_alloc_retries, Some(0));
        assert_eq!(summary.rows.len(), 29, "{name}");
        let small = summary.row("Allocations", Pool::Small).expect("row");
        assert_eq!(small.peak.unit, Unit::Count);
        let oversize = summary
            .row("Oversize GPU segments", Pool::All)
            .expect("row");
        assert_eq!(oversize.peak.value, 0);
    }
}

#[test]
fn memory_stats_json_parses() {
    let (allocated, reserved, requested) = expected(NAMES[0]);
    let json = super::common::stats_json(allocated, reserved, requested);
    let stats = match parse(json.as_bytes()) {
        Ok(Report::Stats(s)) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(stats.peak_allocated(), Some(allocated));
    assert_eq!(stats.peak_reserved(), Some(reserved));
    assert_eq!(stats.peak_requested(), Some(requested));
    assert_eq!(stats.num_alloc_retries(), Some(0));
    assert_eq!(stats.num_ooms(), Some(0));
    assert_eq!(stats.get("max_split_size"), None);
    assert_eq!(stats.values.get("max_split_size"), Some(&-1));
    // The nested form of memory_stats_as_nested_dict() flattens to the same keys.
    let nested = r#"{"allocated_bytes": {"all": {"peak": 7}}, "num_ooms": 1}"#;
    match parse(nested.as_bytes()) {
        Ok(Report::Stats(s)) => {
            assert_eq!(s.peak_allocated(), Some(7));
            assert_eq!(s.num_ooms(), Some(1));
        }
        other => panic!("{other:?}"),
    }
    assert!(parse(br#"{"a": 1}"#).unwrap_err().contains("memory_stats"));
}

#[test]
fn test_pickler_round_trips_through_the_parser() {
    let snap = fixture_snapshot(NAMES[0]);
    let bytes = super::common::pickle(&super::common::snapshot_value(&snap, 5, 300));
    let small = match parse(&bytes) {
        Ok(Report::Snapshot(s)) => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(small.segments.len(), 5);
    assert_eq!(small.device_traces[0].len(), 300);
    for (a, b) in small.device_traces[0].iter().zip(&snap.device_traces[0]) {
        assert_eq!(
            (a.action, a.addr, a.size, a.time_us),
            (b.action, b.addr, b.size, b.time_us)
        );
        assert_eq!(small.stack_frames(a.stack), snap.stack_frames(b.stack));
    }
    for (a, b) in small.segments.iter().zip(&snap.segments) {
        let sizes = |s: &lorafit::formats::snapshot::Segment| {
            let kind = (s.device, s.stream, s.segment_type.clone(), s.is_expandable);
            (
                s.address,
                s.total_size,
                s.allocated_size,
                s.active_size,
                s.requested_size,
                kind,
            )
        };
        assert_eq!(sizes(a), sizes(b));
        assert_eq!(small.stack_frames(a.stack), snap.stack_frames(b.stack));
        assert_eq!(a.blocks.len(), b.blocks.len());
        for (x, y) in a.blocks.iter().zip(&b.blocks) {
            let key = |b: &lorafit::formats::snapshot::Block| {
                (b.address, b.size, b.requested_size, b.state)
            };
            assert_eq!(key(x), key(y));
            assert_eq!(small.stack_frames(x.stack), snap.stack_frames(y.stack));
        }
    }
    assert_eq!(
        small.allocator_settings.get("garbage_collection_threshold"),
        Some("0.0")
    );
}

/// Writes the fuzzer's seeds for the snapshot door (run by hand:
/// `cargo test --test it write_snapshot_fuzz_seeds -- --ignored`): a small snapshot in PyTorch's
/// layout cut from a fixture, a memory_summary() text and a memory_stats() JSON.
#[test]
#[ignore]
fn write_snapshot_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-corpus/snapshot");
    let snap = fixture_snapshot(NAMES[0]);
    std::fs::write(
        dir.join("pickle"),
        super::common::pickle(&super::common::snapshot_value(&snap, 4, 60)),
    )
    .unwrap();
    std::fs::write(dir.join("summary"), fixture(NAMES[0], "summary.txt")).unwrap();
    std::fs::write(
        dir.join("stats"),
        super::common::stats_json(1 << 30, 2 << 30, 1 << 29),
    )
    .unwrap();
}

#[test]
fn reading_in_slices_gives_the_same_report_as_one_pass() {
    use lorafit::formats::snapshot::{Gunzip, Limits, Reader};
    let gz = fixture(NAMES[1], "pickle.gz");
    // Gzip fed in uneven pieces, as the page feeds it between progress updates.
    let mut g = Gunzip::new(1 << 30);
    for piece in gz.chunks(7_777) {
        g.feed(piece).expect("gzip piece");
    }
    let raw = g.finish().expect("gunzip");
    assert_eq!(
        raw,
        lorafit::formats::snapshot::gunzip(&gz, 1 << 30).unwrap()
    );
    let limits = Limits::default();
    let mut reader = Reader::new(&raw, &limits).expect("reader");
    let (mut slices, mut last) = (0, 0.0);
    let report = loop {
        if let Some(r) = reader.step(10_000).expect("step") {
            break r;
        }
        let read = reader.fraction_read();
        assert!(read > last && read <= 1.0, "progress {last} → {read}");
        last = read;
        slices += 1;
    };
    assert!(slices > 10, "only {slices} slices");
    assert_eq!(report, parse(&raw).unwrap());
}
