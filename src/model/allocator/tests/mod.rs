//! The allocator's rules, one per test, its configuration parser, random stress sequences,
//! and the consistency checks they share.

mod behaviour;
mod conf;
mod stress;

use super::CachingAllocator;

/// Checks the snapshot against the statistics: segments add up to the
/// reserved bytes, allocated blocks to the allocated and requested bytes,
/// free split blocks to `inactive_split_bytes`; blocks tile their segment and
/// no two free blocks are left unmerged.
pub(super) fn check_invariants(a: &CachingAllocator) {
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
