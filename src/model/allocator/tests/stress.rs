//! Random allocation sequences under every kind of configuration: nothing
//! panics, the statistics stay consistent with the snapshot, and the device
//! capacity is never exceeded.

use crate::model::allocator::constants::K_MB;
use crate::model::allocator::{AllocConf, BlockId, CachingAllocator};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn run(conf: &str, capacity: Option<u64>, fraction: Option<f64>, seed: u64) {
    let mut a = CachingAllocator::new(AllocConf::parse(conf).unwrap(), capacity);
    if let Some(f) = fraction {
        a.set_memory_fraction(f).unwrap();
    }
    let mut rng = Rng(seed);
    let mut live: Vec<BlockId> = Vec::new();
    let mut ooms = 0;
    for step in 0..20_000u32 {
        let r = rng.next();
        if live.is_empty() || r % 100 < 55 {
            let size = match r % 7 {
                0 => r % 2048,
                1 | 2 => (r >> 8) % K_MB,
                3 | 4 => (r >> 8) % (12 * K_MB),
                5 => (r >> 8) % (200 * K_MB),
                _ => (r >> 8) % (1 << 31),
            };
            let stream = (r >> 40) % 2;
            match a.malloc_on_stream(size, stream) {
                Ok(id) if id.is_null() => assert_eq!(size, 0),
                Ok(id) => live.push(id),
                Err(_) => ooms += 1,
            }
        } else {
            let i = (r >> 16) as usize % live.len();
            assert!(a.free(live.swap_remove(i)));
        }
        if r.is_multiple_of(997) {
            a.empty_cache();
        }
        if let Some(cap) = capacity {
            assert!(a.memory_reserved() <= cap);
        }
        if step.is_multiple_of(499) {
            super::check_invariants(&a);
        }
    }
    for id in live {
        a.free(id);
    }
    super::check_invariants(&a);
    a.empty_cache();
    super::check_invariants(&a);
    assert_eq!(a.memory_allocated(), 0);
    assert_eq!(a.memory_reserved(), 0, "{conf}: everything released");
    assert!(a.segments().is_empty());
    if capacity.is_some() {
        assert!(ooms > 0, "{conf}: the out-of-memory path was exercised");
        assert!(a.stats().num_ooms > 0);
    }
}

#[test]
fn default_conf() {
    run("", None, None, 1);
    run("", Some(8 << 30), None, 2);
}

#[test]
fn max_split_and_roundup() {
    run(
        "max_split_size_mb:64,roundup_power2_divisions:[1:2,64:4,>:8]",
        Some(6 << 30),
        None,
        3,
    );
    run(
        "max_split_size_mb:20,max_non_split_rounding_mb:40",
        None,
        None,
        4,
    );
}

#[test]
fn garbage_collection() {
    run(
        "garbage_collection_threshold:0.6",
        Some(16 << 30),
        Some(0.5),
        5,
    );
}

#[test]
fn expandable_segments() {
    run("expandable_segments:True", None, None, 6);
    run("expandable_segments:True", Some(6 << 30), None, 7);
    run(
        "expandable_segments:True,max_split_size_mb:64",
        Some(4 << 30),
        Some(0.9),
        8,
    );
}
