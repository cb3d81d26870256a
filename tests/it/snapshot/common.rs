//! Test support: fixture paths, a tiny pickler that writes what Python's
//! protocol-4 pickler writes for plain values, and a seeded PRNG.

use std::collections::HashMap;

use lorafit::formats::snapshot::{Action, BlockState, Snapshot};

/// Where the reference fixtures live.
pub const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/data/reference/snapshots"
);

/// Fixture names (without extension), smaller first.
pub const NAMES: [&str; 2] = [
    "qwen2.5-0.5b_bf16_s2048_b4_r16_all-linear_do0.05_sdpa_gc",
    "llama2-7b_nf4+bf16+autocast_bf16_s2048_b4_r16_all-linear_do0.05_sdpa_gc",
];

/// Reads `NAME.ext` from the fixture folder.
pub fn fixture(name: &str, ext: &str) -> Vec<u8> {
    let path = format!("{FIXTURES}/{name}.{ext}");
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Parses the gzip snapshot fixture `name`.
pub fn fixture_snapshot(name: &str) -> Snapshot {
    match lorafit::formats::snapshot::parse(&fixture(name, "pickle.gz")) {
        Ok(lorafit::formats::snapshot::Report::Snapshot(s)) => s,
        other => panic!("{name}: {other:?}"),
    }
}

/// xorshift64* — a small seeded PRNG.
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// A plain Python value.
#[derive(Debug, Clone)]
pub enum V {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<V>),
    Tuple(Vec<V>),
    Dict(Vec<(String, V)>),
}

/// Pickles `v` with protocol 4 the way CPython does: one FRAME, every string
/// and container memoized, repeated strings fetched with BINGET/LONG_BINGET,
/// lists and dicts filled in batches of 1000.
pub fn pickle(v: &V) -> Vec<u8> {
    let mut p = Pickler::default();
    p.value(v);
    let mut out = vec![0x80, 4, 0x95];
    out.extend_from_slice(&(p.out.len() as u64 + 1).to_le_bytes());
    out.extend_from_slice(&p.out);
    out.push(b'.');
    out
}

#[derive(Default)]
struct Pickler {
    out: Vec<u8>,
    memo: u32,
    strings: HashMap<String, u32>,
}

impl Pickler {
    fn memoize(&mut self) -> u32 {
        self.out.push(0x94);
        self.memo += 1;
        self.memo - 1
    }

    fn value(&mut self, v: &V) {
        match v {
            V::None => self.out.push(b'N'),
            V::Bool(b) => self.out.push(if *b { 0x88 } else { 0x89 }),
            V::Int(i) => self.int(*i),
            V::Float(f) => {
                self.out.push(b'G');
                self.out.extend_from_slice(&f.to_be_bytes());
            }
            V::Str(s) => self.string(s),
            V::Tuple(items) => self.tuple(items),
            V::List(items) => {
                self.out.push(b']');
                self.memoize();
                for chunk in items.chunks(1000) {
                    self.batch(chunk.iter().map(|v| (None, v)), b'e', b'a');
                }
            }
            V::Dict(entries) => {
                self.out.push(b'}');
                self.memoize();
                for chunk in entries.chunks(1000) {
                    self.batch(chunk.iter().map(|(k, v)| (Some(k), v)), b'u', b's');
                }
            }
        }
    }

    fn batch<'v>(
        &mut self,
        items: impl ExactSizeIterator<Item = (Option<&'v String>, &'v V)>,
        many: u8,
        one: u8,
    ) {
        let single = items.len() == 1;
        if !single {
            self.out.push(b'(');
        }
        for (k, v) in items {
            if let Some(k) = k {
                self.string(k);
            }
            self.value(v);
        }
        self.out.push(if single { one } else { many });
    }

    fn tuple(&mut self, items: &[V]) {
        if items.is_empty() {
            self.out.push(b')');
            return;
        }
        if items.len() > 3 {
            self.out.push(b'(');
        }
        for v in items {
            self.value(v);
        }
        self.out.push(match items.len() {
            1 => 0x85,
            2 => 0x86,
            3 => 0x87,
            _ => b't',
        });
        self.memoize();
    }

    fn int(&mut self, i: i64) {
        if (0..256).contains(&i) {
            self.out.extend_from_slice(&[b'K', i as u8]);
        } else if (0..65536).contains(&i) {
            self.out.push(b'M');
            self.out.extend_from_slice(&(i as u16).to_le_bytes());
        } else if i32::try_from(i).is_ok() {
            self.out.push(b'J');
            self.out.extend_from_slice(&(i as i32).to_le_bytes());
        } else {
            let bytes = i.to_le_bytes();
            let mut n = 8;
            while n > 1
                && ((bytes[n - 1] == 0 && bytes[n - 2] < 0x80)
                    || (bytes[n - 1] == 0xff && bytes[n - 2] >= 0x80))
            {
                n -= 1;
            }
            self.out.extend_from_slice(&[0x8a, n as u8]);
            self.out.extend_from_slice(&bytes[..n]);
        }
    }

    fn string(&mut self, s: &str) {
        if let Some(&idx) = self.strings.get(s) {
            match u8::try_from(idx) {
                Ok(i) => self.out.extend_from_slice(&[b'h', i]),
                Err(_) => {
                    self.out.push(b'j');
                    self.out.extend_from_slice(&idx.to_le_bytes());
                }
            }
            return;
        }
        if s.len() < 256 {
            self.out.extend_from_slice(&[0x8c, s.len() as u8]);
        } else {
            self.out.push(b'X');
            self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        }
        self.out.extend_from_slice(s.as_bytes());
        let idx = self.memoize();
        self.strings.insert(s.to_string(), idx);
    }
}

fn s(v: &str) -> V {
    V::Str(v.to_string())
}

fn u(v: u64) -> V {
    V::Int(v as i64)
}

fn frames(snap: &Snapshot, stack: u32) -> V {
    let frames = snap.stack_frames(stack).into_iter().map(|f| {
        V::Dict(vec![
            ("name".into(), s(&f.name)),
            ("filename".into(), s(&f.filename)),
            ("line".into(), V::Int(f.line)),
        ])
    });
    V::List(frames.collect())
}

fn action_name(a: Action) -> &'static str {
    match a {
        Action::Alloc => "alloc",
        Action::FreeRequested => "free_requested",
        Action::FreeCompleted => "free_completed",
        Action::SegmentAlloc => "segment_alloc",
        Action::SegmentFree => "segment_free",
        Action::SegmentMap => "segment_map",
        Action::SegmentUnmap => "segment_unmap",
        Action::Snapshot => "snapshot",
        Action::Oom => "oom",
        Action::Unknown => "unknown",
    }
}

fn state_name(st: BlockState) -> &'static str {
    match st {
        BlockState::ActiveAllocated => "active_allocated",
        BlockState::ActivePendingFree => "active_pending_free",
        BlockState::Inactive => "inactive",
        BlockState::Unknown => "unknown",
    }
}

/// A snapshot dict in PyTorch's layout holding the first `max_segments`
/// segments and the first `max_events` events of each device trace.
pub fn snapshot_value(snap: &Snapshot, max_segments: usize, max_events: usize) -> V {
    let segments = snap.segments.iter().take(max_segments).map(|seg| {
        let blocks = seg.blocks.iter().map(|b| {
            V::Dict(vec![
                ("address".into(), u(b.address)),
                ("size".into(), u(b.size)),
                ("requested_size".into(), u(b.requested_size)),
                ("state".into(), s(state_name(b.state))),
                ("frames".into(), frames(snap, b.stack)),
            ])
        });
        V::Dict(vec![
            ("device".into(), V::Int(seg.device)),
            ("address".into(), u(seg.address)),
            ("total_size".into(), u(seg.total_size)),
            ("allocated_size".into(), u(seg.allocated_size)),
            ("active_size".into(), u(seg.active_size)),
            ("requested_size".into(), u(seg.requested_size)),
            ("stream".into(), V::Int(seg.stream)),
            ("segment_type".into(), s(&seg.segment_type)),
            (
                "segment_pool_id".into(),
                V::Tuple(vec![V::Int(0), V::Int(0)]),
            ),
            ("is_expandable".into(), V::Bool(seg.is_expandable)),
            ("blocks".into(), V::List(blocks.collect())),
            ("frames".into(), frames(snap, seg.stack)),
        ])
    });
    let traces = snap.device_traces.iter().map(|events| {
        let events = events.iter().take(max_events).map(|e| {
            let mut d = vec![
                ("action".into(), s(action_name(e.action))),
                ("addr".into(), u(e.addr)),
                ("size".into(), u(e.size)),
                ("stream".into(), V::Int(e.stream)),
            ];
            if let Some(t) = e.time_us {
                d.push(("time_us".into(), V::Int(t)));
            }
            d.push(("compile_context".into(), s("N/A")));
            d.push(("pool_id".into(), V::Tuple(vec![V::Int(0), V::Int(0)])));
            d.push(("frames".into(), frames(snap, e.stack)));
            V::Dict(d)
        });
        V::List(events.collect())
    });
    let settings = V::Dict(vec![
        ("PYTORCH_CUDA_ALLOC_CONF".into(), s("")),
        ("max_split_size".into(), V::Int(-1)),
        ("garbage_collection_threshold".into(), V::Float(0.0)),
        ("expandable_segments".into(), V::Bool(false)),
        (
            "roundup_power2_divisions".into(),
            V::Dict(vec![("1".into(), V::Int(0)), ("2".into(), V::Int(0))]),
        ),
    ]);
    V::Dict(vec![
        ("segments".into(), V::List(segments.collect())),
        ("device_traces".into(), V::List(traces.collect())),
        ("allocator_settings".into(), settings),
        ("external_annotations".into(), V::List(vec![])),
        ("host_segments".into(), V::List(vec![])),
        ("host_traces".into(), V::List(vec![])),
    ])
}

/// `memory_stats()` JSON with the given peaks.
pub fn stats_json(allocated: u64, reserved: u64, requested: u64) -> String {
    format!(
        r#"{{"active.all.current": 1638, "allocated_bytes.all.current": 1101987840,
  "allocated_bytes.all.peak": {allocated}, "allocated_bytes.large_pool.peak": 16303521280,
  "reserved_bytes.all.peak": {reserved}, "requested_bytes.all.peak": {requested},
  "num_alloc_retries": 0, "num_ooms": 0, "num_device_alloc": 130, "max_split_size": -1}}"#
    )
}
