//! Behaviour of the allocator rules, one rule per test.

use crate::model::allocator::constants::{K_LARGE_BUFFER, K_MB, K_SMALL_BUFFER};
use crate::model::allocator::{AllocConf, BlockId, CachingAllocator, PoolKind};

const MB: u64 = K_MB;

fn default_alloc() -> CachingAllocator {
    CachingAllocator::new(AllocConf::default(), None)
}

fn expandable() -> AllocConf {
    AllocConf::parse("expandable_segments:True").unwrap()
}

#[test]
fn small_requests_round_to_512_and_pack_into_2mib() {
    let mut a = default_alloc();
    let x = a.malloc(1).unwrap();
    let y = a.malloc(1000).unwrap();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.aggregate.current, 512 + 1024);
    assert_eq!(s.requested_bytes.aggregate.current, 1001);
    assert_eq!(s.reserved_bytes.aggregate.current, K_SMALL_BUFFER);
    assert_eq!(s.reserved_bytes.small_pool.current, K_SMALL_BUFFER);
    assert_eq!(s.segment.aggregate.current, 1);
    assert_eq!(
        s.inactive_split_bytes.aggregate.current,
        K_SMALL_BUFFER - 1536
    );
    let segs = a.segments();
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].pool, PoolKind::Small);
    assert_eq!(segs[0].blocks.len(), 3);
    let bx = a.block_info(x).unwrap();
    let by = a.block_info(y).unwrap();
    assert_eq!(by.address, bx.address + 512);
    assert_eq!((bx.requested_size, by.requested_size), (1, 1000));
}

#[test]
fn medium_requests_get_a_20mib_segment_that_is_split() {
    let mut a = default_alloc();
    a.malloc(5 * MB).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.large_pool.current, K_LARGE_BUFFER);
    assert_eq!(s.allocated_bytes.aggregate.current, 5 * MB);
    assert_eq!(a.segments()[0].blocks.len(), 2);
}

#[test]
fn unsplit_remainder_is_counted_as_allocated() {
    // 11 MiB + 1 byte rounds (kRoundLarge) to a 12 MiB segment; the remainder is
    // not above kSmallSize, so the whole block is handed out.
    let mut a = default_alloc();
    let b = a.malloc(11 * MB + 1).unwrap();
    assert_eq!(a.block_info(b).unwrap().size, 12 * MB);
    assert_eq!(a.memory_allocated(), 12 * MB);
    assert_eq!(a.stats().requested_bytes.aggregate.current, 11 * MB + 1);
}

#[test]
fn cached_blocks_are_reused_best_fit_then_lowest_address() {
    let mut a = default_alloc();
    let x = a.malloc(30 * MB).unwrap();
    let y = a.malloc(30 * MB).unwrap();
    let z = a.malloc(40 * MB).unwrap();
    let (ax, ay) = (
        a.block_info(x).unwrap().address,
        a.block_info(y).unwrap().address,
    );
    assert!(ax < ay);
    a.free(z);
    a.free(y);
    a.free(x);
    let w = a.malloc(29 * MB).unwrap(); // best fit: a 30 MiB block, the lower one
    assert_eq!(a.block_info(w).unwrap().address, ax);
    assert_eq!(a.memory_reserved(), 100 * MB);
}

#[test]
fn addresses_increase_and_are_2mib_aligned() {
    let mut a = default_alloc();
    let mut last = 0;
    for n in [1, 3 * MB, 11 * MB + 5, 100] {
        a.malloc(n).unwrap();
    }
    for s in a.segments() {
        assert_eq!(s.address % (2 * MB), 0);
        assert!(s.address > last);
        last = s.address;
    }
}

#[test]
fn free_of_unknown_or_freed_id_is_harmless() {
    let mut a = default_alloc();
    let x = a.malloc(4096).unwrap();
    let before = a.stats();
    assert!(!a.free(BlockId(987_654)));
    assert!(!a.free(BlockId::NULL));
    assert_eq!(a.stats(), before);
    assert!(a.free(x));
    let after = a.stats();
    assert!(!a.free(x));
    assert_eq!(a.stats(), after);
    assert_eq!(a.block_info(x), None);
}

#[test]
fn zero_byte_malloc_is_null_and_touches_nothing() {
    let mut a = default_alloc();
    let z = a.malloc(0).unwrap();
    assert!(z.is_null());
    assert_eq!(a.stats(), default_alloc().stats());
    assert!(!a.free(z));
}

#[test]
fn reset_peak_sets_peaks_to_current() {
    let mut a = default_alloc();
    let x = a.malloc(50 * MB).unwrap();
    a.free(x);
    assert_eq!(a.stats().allocated_bytes.aggregate.peak, 50 * MB);
    a.reset_peak();
    let s = a.stats();
    assert_eq!(s.allocated_bytes.aggregate.peak, 0);
    assert_eq!(s.reserved_bytes.aggregate.peak, 50 * MB);
}

#[test]
fn empty_cache_releases_only_wholly_free_segments() {
    let mut a = default_alloc();
    let x = a.malloc(30 * MB).unwrap();
    let y = a.malloc(5 * MB).unwrap(); // 20 MiB segment, split
    let _z = a.malloc(6 * MB).unwrap(); // same segment
    a.free(x);
    a.free(y);
    a.empty_cache();
    assert_eq!(a.memory_reserved(), K_LARGE_BUFFER);
    assert_eq!(a.stats().segment.aggregate.current, 1);
    assert_eq!(a.stats().num_device_free, 1);
}

#[test]
fn max_split_size_stops_splitting_and_limits_oversize_reuse() {
    let conf = AllocConf::parse("max_split_size_mb:40").unwrap();
    let mut a = CachingAllocator::new(conf, None);
    let x = a.malloc(100 * MB).unwrap();
    a.free(x);
    // Below max_split_size: the oversize cached block is not handed out.
    let small = a.malloc(30 * MB).unwrap();
    assert_eq!(a.memory_reserved(), 130 * MB);
    a.free(small);
    // Above max_split_size, but the block is >= request + kLargeBuffer: not taken.
    let y = a.malloc(50 * MB).unwrap();
    assert_eq!(a.block_info(y).unwrap().size, 50 * MB);
    assert_eq!(a.memory_reserved(), 180 * MB);
    // Within kLargeBuffer: taken whole, not split.
    let z = a.malloc(90 * MB).unwrap();
    assert_eq!(a.block_info(z).unwrap().size, 100 * MB);
    assert_eq!(a.memory_reserved(), 180 * MB);
    assert_eq!(a.stats().oversize_allocations.current, 2);
    assert_eq!(a.stats().oversize_segments.current, 2); // 100 and 50 MiB
    assert!(a.segments().iter().all(|s| s.blocks.len() == 1));

    // Without max_split_size the same 100 MiB block is split for 50 MiB.
    let mut d = default_alloc();
    let x = d.malloc(100 * MB).unwrap();
    d.free(x);
    d.malloc(50 * MB).unwrap();
    assert_eq!(d.memory_reserved(), 100 * MB);
    assert_eq!(d.segments()[0].blocks.len(), 2);
}

#[test]
fn oom_at_capacity_frees_cached_blocks_then_errs() {
    let mut a = CachingAllocator::new(AllocConf::default(), Some(100 * MB));
    let x = a.malloc(30 * MB).unwrap();
    a.free(x);
    // 30 cached + 80 new > 100: the cached segment is released and the
    // allocation retried.
    let y = a.malloc(80 * MB).unwrap();
    let s = a.stats();
    assert_eq!(s.reserved_bytes.aggregate.current, 80 * MB);
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_device_free, 1);
    // Nothing left to free: out of memory, state intact.
    let err = a.malloc(30 * MB).unwrap_err();
    assert_eq!(a.stats().num_ooms, 1);
    assert_eq!(err.alloc_size, 30 * MB);
    assert_eq!(err.device_free, Some(20 * MB));
    assert!(err
        .to_string()
        .starts_with("CUDA out of memory. Tried to allocate 30.00 MiB"));
    assert_eq!(a.memory_reserved(), 80 * MB);
    assert!(a.free(y));
    a.malloc(30 * MB).unwrap();
}

#[test]
fn oversize_blocks_are_released_first_with_max_split_size() {
    let conf = AllocConf::parse("max_split_size_mb:20").unwrap();
    let mut a = CachingAllocator::new(conf, Some(100 * MB));
    let x = a.malloc(40 * MB).unwrap();
    let y = a.malloc(24 * MB).unwrap();
    let keep = a.malloc(5 * MB).unwrap(); // 20 MiB segment, split, stays
    a.free(x);
    a.free(y);
    // 84 reserved; 60 more needs 44 back: release_available_cached_blocks
    // frees the 40 and the 24 MiB oversize blocks, largest first.
    a.malloc(60 * MB).unwrap();
    let s = a.stats();
    assert_eq!(s.num_alloc_retries, 0);
    assert_eq!(s.reserved_bytes.aggregate.current, 80 * MB);
    assert!(a.block_info(keep).is_some());
}

#[test]
fn requests_beyond_capacity_return_err_never_panic() {
    let mut a = CachingAllocator::new(AllocConf::default(), Some(1 << 30));
    for n in [u64::MAX, u64::MAX - 1, 1 << 60, (1 << 30) + 1, 1 << 40] {
        assert!(a.malloc(n).is_err(), "{n}");
    }
    let mut unlimited = default_alloc();
    assert!(unlimited.malloc(u64::MAX).is_err());
    let e = unlimited.malloc(1 << 60).unwrap_err();
    assert!(e.to_string().contains("more than 1EB"));
    let conf = AllocConf::parse("roundup_power2_divisions:8,expandable_segments:True").unwrap();
    let mut x = CachingAllocator::new(conf, Some(1 << 30));
    for n in [u64::MAX, (1 << 60) - 1, (1 << 30) + 1] {
        assert!(x.malloc(n).is_err(), "{n}");
    }
    assert!(x.malloc(1 << 29).is_ok());
}

#[test]
fn blocks_are_not_shared_between_streams() {
    let mut a = default_alloc();
    let x = a.malloc_on_stream(30 * MB, 1).unwrap();
    a.free(x);
    a.malloc_on_stream(30 * MB, 2).unwrap();
    assert_eq!(a.memory_reserved(), 60 * MB);
    a.malloc_on_stream(30 * MB, 1).unwrap();
    assert_eq!(a.memory_reserved(), 60 * MB);
}

#[test]
fn roundup_power2_divisions_rounds_requests() {
    let a = CachingAllocator::new(
        AllocConf::parse("roundup_power2_divisions:4").unwrap(),
        None,
    );
    assert_eq!(a.round_size(1), 512);
    assert_eq!(a.round_size(1200), 1536); // not above 512 * 4: plain 512 rounding
    assert_eq!(a.round_size(5_000_000), 5 * MB); // [4, 8) MiB in 1 MiB steps
    assert_eq!(a.round_size(4 * MB), 4 * MB);
    assert_eq!(
        crate::model::allocator::roundup_power2_next_division(1200, 4),
        1280
    );
    let d = default_alloc();
    assert_eq!(d.round_size(5_000_000), 5_000_192);
    assert_eq!(d.get_allocation_size(512), K_SMALL_BUFFER);
    assert_eq!(d.get_allocation_size(MB + 512), K_LARGE_BUFFER);
    assert_eq!(d.get_allocation_size(10 * MB), 10 * MB);
    assert_eq!(d.get_allocation_size(10 * MB + 512), 12 * MB);
}

#[test]
fn garbage_collection_frees_old_cached_segments_under_a_fraction() {
    let conf = AllocConf::parse("garbage_collection_threshold:0.5").unwrap();
    let mut a = CachingAllocator::new(conf, Some(1000 * MB));
    assert!(a.set_memory_fraction(1.5).is_err());
    a.set_memory_fraction(0.5).unwrap(); // 500 MiB allowed, GC above 250 MiB
    let x = a.malloc(100 * MB).unwrap();
    a.free(x);
    let y = a.malloc(200 * MB).unwrap();
    a.free(y);
    assert_eq!(a.memory_reserved(), 300 * MB);
    a.malloc(150 * MB).unwrap(); // reuses the 200 MiB block: no GC
    assert_eq!(a.memory_reserved(), 300 * MB);
    a.malloc(160 * MB).unwrap(); // new segment: GC frees the unused 100 MiB one
    let s = a.stats();
    assert_eq!(s.reserved_bytes.aggregate.current, 360 * MB);
    assert_eq!(s.num_alloc_retries, 0);
    assert!(a.malloc(200 * MB).is_err()); // 560 > 500 allowed
    assert!(a.stats().oversize_segments.current == 0);
}

// ---- expandable segments --------------------------------------------------

#[test]
fn expandable_small_pool_grows_in_2mib_pages() {
    let mut a = CachingAllocator::new(expandable(), None);
    for n in 1..=9u64 {
        a.malloc(512 * 1024).unwrap();
        assert_eq!(
            a.memory_reserved(),
            (n * 512 * 1024).div_ceil(2 * MB) * 2 * MB
        );
    }
    let segs = a.segments();
    assert_eq!(segs.len(), 1);
    assert!(segs[0].is_expandable);
    assert_eq!(a.stats().segment.aggregate.current, 0); // not counted, as in PyTorch
}

#[test]
fn expandable_large_pool_grows_in_20mib_pages_without_fragmenting() {
    let mut a = CachingAllocator::new(expandable(), None);
    let mut total = 0;
    for n in [30 * MB, 30 * MB, 30 * MB, 7 * MB, 64 * MB + 512] {
        a.malloc(n).unwrap();
        total += n;
        assert_eq!(a.memory_reserved(), total.div_ceil(20 * MB) * 20 * MB);
        assert_eq!(a.memory_reserved() % K_LARGE_BUFFER, 0);
    }
    let segs = a.segments();
    assert_eq!(segs.len(), 1, "one contiguous segment");
    assert_eq!(segs[0].total_size, a.memory_reserved());
    assert_eq!(a.expandable_mapped_bytes(), a.memory_reserved());
}

#[test]
fn expandable_segments_avoid_slivers_when_sizes_grow() {
    let run = |conf: AllocConf| {
        let mut a = CachingAllocator::new(conf, None);
        let xs: Vec<_> = (0..10).map(|_| a.malloc(30 * MB).unwrap()).collect();
        for x in xs {
            a.free(x);
        }
        for _ in 0..10 {
            a.malloc(31 * MB).unwrap();
        }
        a.memory_reserved()
    };
    assert_eq!(run(AllocConf::default()), 300 * MB + 10 * 32 * MB);
    assert_eq!(run(expandable()), 320 * MB);
}

#[test]
fn expandable_empty_cache_unmaps_free_pages_and_reuses_low_addresses() {
    let mut a = CachingAllocator::new(expandable(), None);
    let x = a.malloc(30 * MB).unwrap();
    let y = a.malloc(30 * MB).unwrap();
    let base = a.block_info(x).unwrap().address;
    assert_eq!(a.memory_reserved(), 60 * MB);
    a.free(x);
    a.empty_cache();
    // Page 0 ([0, 20) MiB) was wholly free; [20, 30) shares a page with y.
    assert_eq!(a.memory_reserved(), 40 * MB);
    let segs = a.segments();
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].address, base + 20 * MB);
    // The lowest address is filled first again.
    let z = a.malloc(30 * MB).unwrap();
    assert_eq!(a.block_info(z).unwrap().address, base);
    assert_eq!(a.memory_reserved(), 60 * MB);
    a.free(y);
    a.free(z);
    a.empty_cache();
    assert_eq!(a.memory_reserved(), 0);
    assert!(a.segments().is_empty());
    assert_eq!(a.expandable_mapped_bytes(), 0);
}

#[test]
fn expandable_oom_unmaps_cached_pages_then_errs() {
    let mut a = CachingAllocator::new(expandable(), Some(100 * MB));
    let x = a.malloc(90 * MB).unwrap();
    assert_eq!(a.memory_reserved(), 100 * MB);
    assert!(a.malloc(MB).is_err()); // the small pool needs a 2 MiB page
    a.free(x);
    a.malloc(MB).unwrap(); // retry after unmapping the large pool's pages
    assert_eq!(a.memory_reserved(), 2 * MB);
    // Both attempts went through the release_cached_blocks retry.
    assert_eq!(a.stats().num_alloc_retries, 2);
}
