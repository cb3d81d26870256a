//! The allocator port against PyTorch: replays the recorded allocation sequences of
//! `tests/data/reference/allocator` and checks the figures PyTorch's own allocator reported for
//! them (`reserved.jsonl`), to the byte.

use flate2::read::GzDecoder;
use lorafit::model::allocator::{AllocConf, BlockId, CachingAllocator};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Recorded sequences committed with the tests.
pub fn reference_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference/allocator")
}

/// What `truth/replay.py` prints for one sequence.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Figures {
    pub(crate) max_allocated: u64,
    pub(crate) max_reserved: u64,
    pub(crate) end_allocated: u64,
    pub(crate) end_reserved: u64,
    pub(crate) reserved_by_phase: BTreeMap<String, u64>,
}

impl Figures {
    fn from_json(d: &Value) -> Figures {
        let u = |k: &str| d[k].as_u64().unwrap_or_else(|| panic!("missing {k}"));
        Figures {
            max_allocated: u("max_allocated"),
            max_reserved: u("max_reserved"),
            end_allocated: u("end_allocated"),
            end_reserved: u("end_reserved"),
            reserved_by_phase: d["reserved_by_phase"]
                .as_object()
                .expect("reserved_by_phase")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_u64().expect("phase value")))
                .collect(),
        }
    }
}

/// The port of `replay.py`: `torch.empty(max(nbytes, 1))` per "a" event,
/// dropping the tensor per "f" event, reserved memory sampled after every
/// allocation.
pub(crate) fn replay(events: &[Value]) -> Figures {
    replay_with(events, AllocConf::default())
}

fn replay_with(events: &[Value], conf: AllocConf) -> Figures {
    let mut alloc = CachingAllocator::new(conf, None);
    let mut live: HashMap<u64, BlockId> = HashMap::new();
    let mut by_phase: BTreeMap<String, u64> = BTreeMap::new();
    alloc.reset_peak();
    for e in events {
        let e = e.as_array().expect("event");
        let id = e[1].as_u64().expect("id");
        match e[0].as_str() {
            Some("a") => {
                let nbytes = e[2].as_u64().expect("nbytes").max(1);
                let block = alloc.malloc(nbytes).expect("unexpected OOM");
                // `live[id] = t` drops a previous tensor under the same id
                // only after the new one exists.
                if let Some(old) = live.insert(id, block) {
                    alloc.free(old);
                }
                let key = format!("step{}:{}", e[4], e[3].as_str().expect("phase"));
                let r = alloc.memory_reserved();
                if r > by_phase.get(&key).copied().unwrap_or(0) {
                    by_phase.insert(key, r);
                }
            }
            Some("f") => {
                if let Some(b) = live.remove(&id) {
                    alloc.free(b);
                }
            }
            other => panic!("unknown event {other:?}"),
        }
    }
    check_invariants(&alloc);
    let s = alloc.stats();
    Figures {
        max_allocated: s.allocated_bytes.aggregate.peak,
        max_reserved: s.reserved_bytes.aggregate.peak,
        end_allocated: s.allocated_bytes.aggregate.current,
        end_reserved: s.reserved_bytes.aggregate.current,
        reserved_by_phase: by_phase,
    }
}

fn load_events(path: &Path) -> Vec<Value> {
    let f = std::fs::File::open(path).expect("open events");
    let v: Value = serde_json::from_reader(GzDecoder::new(f)).expect("parse events");
    v.as_array().expect("event list").clone()
}

/// (case id, events file, expected figures) for every case that has a
/// recorded sequence.
fn cases() -> Vec<(String, PathBuf, Figures)> {
    let dir = reference_dir();
    let text = std::fs::read_to_string(dir.join("reserved.jsonl")).expect("reserved.jsonl");
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let row: Value = serde_json::from_str(line).expect("jsonl row");
        let id = row["id"].as_str().expect("id").to_string();
        let path = dir.join(format!("{id}.events.json.gz"));
        if path.exists() {
            out.push((id, path, Figures::from_json(&row["default"])));
        }
    }
    out
}

#[test]
fn replays_match_pytorch_to_the_byte() {
    let cases = cases();
    assert_eq!(cases.len(), 7, "expected 7 recorded sequences");
    let mut failures = Vec::new();
    for (id, path, expected) in cases {
        let events = load_events(&path);
        let t = Instant::now();
        let got = replay(&events);
        let ms = t.elapsed().as_secs_f64() * 1e3;
        println!(
            "{id}: {} events in {ms:.1} ms\n  max_allocated expected {} got {}\n  max_reserved  expected {} got {}\n  end_allocated expected {} got {}\n  end_reserved  expected {} got {}\n  reserved_by_phase {}",
            events.len(),
            expected.max_allocated,
            got.max_allocated,
            expected.max_reserved,
            got.max_reserved,
            expected.end_allocated,
            got.end_allocated,
            expected.end_reserved,
            got.end_reserved,
            if expected.reserved_by_phase == got.reserved_by_phase {
                "match".to_string()
            } else {
                format!("expected {:?} got {:?}", expected.reserved_by_phase, got.reserved_by_phase)
            }
        );
        if got != expected {
            failures.push(id);
        }
    }
    assert!(failures.is_empty(), "mismatching cases: {failures:?}");
}

/// No reference exists for `expandable_segments:True` (the emulated device
/// lacks the driver's virtual-memory API): the same sequences must replay
/// consistently, and the figures are printed for inspection.
#[test]
fn expandable_replays_are_consistent() {
    let conf = AllocConf::parse("expandable_segments:True").unwrap();
    for (id, path, expected) in cases() {
        let got = replay_with(&load_events(&path), conf.clone());
        println!(
            "{id}: expandable max_reserved {} (default {}), max_allocated {} (default {})",
            got.max_reserved, expected.max_reserved, got.max_allocated, expected.max_allocated
        );
        assert!(got.max_reserved >= got.max_allocated);
        assert_eq!(got.max_reserved % (2 * 1024 * 1024), 0);
    }
}

/// Checks the snapshot against the statistics: segments add up to the
/// reserved bytes, allocated blocks to the allocated and requested bytes,
/// free split blocks to `inactive_split_bytes`; blocks tile their segment and
/// no two free blocks are left unmerged.
pub fn check_invariants(a: &CachingAllocator) {
    let s = a.stats();
    let segs = a.segments();
    let mut reserved = 0;
    let mut allocated = 0;
    let mut requested = 0;
    let mut inactive_split = 0;
    for seg in &segs {
        reserved += seg.total_size;
        let mut addr = seg.address;
        let mut prev_free = false;
        for b in &seg.blocks {
            assert_eq!(b.address, addr, "blocks must tile the segment");
            addr += b.size;
            if b.allocated {
                allocated += b.size;
                requested += b.requested_size;
            } else {
                assert!(!prev_free, "two adjacent free blocks");
                if !seg.is_expandable && seg.blocks.len() > 1 {
                    inactive_split += b.size;
                }
            }
            prev_free = !b.allocated;
        }
    }
    assert_eq!(reserved, s.reserved_bytes.aggregate.current, "reserved");
    assert_eq!(allocated, s.allocated_bytes.aggregate.current, "allocated");
    assert_eq!(requested, s.requested_bytes.aggregate.current, "requested");
    assert_eq!(
        inactive_split, s.inactive_split_bytes.aggregate.current,
        "inactive split"
    );
    assert_eq!(
        s.allocated_bytes.aggregate.current,
        s.allocated_bytes.small_pool.current + s.allocated_bytes.large_pool.current
    );
}
