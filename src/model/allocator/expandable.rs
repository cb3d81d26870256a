//! `ExpandableSegment` (Note [Expandable Segments] in
//! `CUDACachingAllocator.cpp`), simulated without the CUDA driver.
//!
//! PyTorch reserves virtual address space for 1 1/8 of the device's total
//! memory (`cuMemAddressReserve`) and maps physical pages into it on demand
//! (`cuMemCreate` + `cuMemMap`), 2 MiB pages (kSmallBuffer) for the small
//! pool and `large_segment_size` pages (kLargeBuffer, 20 MiB) for the large
//! pool. Here a page is a flag in `handles`; whether physical memory is left
//! for a new page is decided by the allocator (device capacity), before
//! [`ExpandableSegment::map_pages`] is called.
//!
//! The second half of the file holds the allocator's expandable-segment paths
//! (`find_expandable_block`, `map_block`, `try_allocate_expandable_block`,
//! `unmap_block`, `release_expandable_segment`).

use super::block::{Block, BlockIdx, SegmentIdx};
use super::caching::CachingAllocator;
use super::constants::K_SMALL_BUFFER;
use super::stats::PoolKind;

/// `SegmentRange`: an address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentRange {
    /// Start address.
    pub ptr: u64,
    /// Length in bytes.
    pub size: u64,
}

/// One expandable segment: a reserved address range and its mapped pages.
#[derive(Clone, Debug)]
pub(crate) struct ExpandableSegment {
    /// Base of the reserved address range (`ptr_`).
    pub base: u64,
    /// Page size (`segment_size_`).
    pub segment_size: u64,
    /// Number of pages the address range holds (`max_handles_`).
    pub max_handles: u64,
    /// Mapped pages (`handles_`), trimmed of trailing unmapped pages.
    handles: Vec<bool>,
}

impl ExpandableSegment {
    /// Reserves `numSegments(total_global_mem + total_global_mem / 8)` pages
    /// of `segment_size` at `base`.
    pub fn new(base: u64, segment_size: u64, total_global_mem: u64) -> Self {
        let space = total_global_mem.saturating_add(total_global_mem / 8);
        ExpandableSegment {
            base,
            segment_size,
            max_handles: space.div_ceil(segment_size),
            handles: Vec::new(),
        }
    }

    /// `size()`: bytes of reserved address space.
    pub fn size(&self) -> u64 {
        self.max_handles.saturating_mul(self.segment_size)
    }

    /// `segmentLeft`: index of the page holding `p`.
    fn segment_left(&self, p: u64) -> u64 {
        (p - self.base) / self.segment_size
    }

    /// `segmentRight`: index of the first page boundary at or after `p`.
    fn segment_right(&self, p: u64) -> u64 {
        (p - self.base).div_ceil(self.segment_size)
    }

    /// `rangeFromHandles`.
    fn range_from_handles(&self, begin: u64, end: u64) -> SegmentRange {
        SegmentRange {
            ptr: self.base + self.segment_size * begin,
            size: self.segment_size * (end - begin),
        }
    }

    /// The pages `map(range)` would map: `[segmentLeft(ptr),
    /// segmentRight(ptr + size))`. `range.ptr` must be page aligned.
    pub fn pages_to_map(&self, range: SegmentRange) -> (u64, u64) {
        debug_assert_eq!((range.ptr - self.base) % self.segment_size, 0);
        (
            self.segment_left(range.ptr),
            self.segment_right(range.ptr + range.size),
        )
    }

    /// Maps pages `[begin, end)` (the successful end of `map`) and returns
    /// their range.
    pub fn map_pages(&mut self, begin: u64, end: u64) -> SegmentRange {
        let end_usize = end as usize;
        if self.handles.len() < end_usize {
            self.handles.resize(end_usize, false);
        }
        for h in &mut self.handles[begin as usize..end_usize] {
            debug_assert!(!*h, "page mapped twice");
            *h = true;
        }
        self.range_from_handles(begin, end)
    }

    /// `unmap`: unmaps all the completely empty pages inside `range`; returns
    /// the unmapped range (size 0 when no whole page lies inside).
    pub fn unmap(&mut self, range: SegmentRange) -> SegmentRange {
        let begin = self.segment_right(range.ptr);
        let end = self.segment_left(range.ptr + range.size);
        if begin >= end {
            return SegmentRange {
                ptr: range.ptr,
                size: 0,
            };
        }
        for i in begin..end {
            if let Some(h) = self.handles.get_mut(i as usize) {
                *h = false;
            }
        }
        while self.handles.last() == Some(&false) {
            self.handles.pop();
        }
        self.range_from_handles(begin, end)
    }

    /// Bytes of mapped pages.
    pub fn mapped_bytes(&self) -> u64 {
        self.handles.iter().filter(|&&h| h).count() as u64 * self.segment_size
    }
}

/// The expandable-segment paths of `DeviceCachingAllocator`.
impl CachingAllocator {
    /// `find_expandable_block`: the lowest address in an existing expandable
    /// segment of this pool and stream where free plus unmapped space holds
    /// `size` bytes, or the start of a new segment.
    fn find_expandable_block(
        &mut self,
        stream: u64,
        kind: PoolKind,
        size: u64,
    ) -> Option<BlockIdx> {
        let blocks = &self.blocks;
        let allocatable = |b: Option<BlockIdx>| b.filter(|&i| !blocks[i].allocated);
        let has_available_address_space = |mut b: Option<BlockIdx>| {
            let mut bytes = 0u64;
            while let Some(i) = allocatable(b).filter(|_| bytes < size) {
                bytes = bytes.saturating_add(blocks[i].size);
                b = blocks[i].next;
            }
            bytes >= size
        };
        for (_, &c) in self.pool(kind).unmapped.range((stream, 0)..) {
            if blocks[c].stream != stream {
                break;
            }
            // The free block right before the unmapped range can be used too.
            let c = allocatable(blocks[c].prev).unwrap_or(c);
            if has_available_address_space(Some(c)) {
                return Some(c);
            }
        }
        self.new_expandable_segment(stream, kind)
    }

    /// Reserves a new expandable segment (2 MiB pages for the small pool,
    /// `large_segment_size` pages for the large one) and returns its single,
    /// unmapped block.
    fn new_expandable_segment(&mut self, stream: u64, kind: PoolKind) -> Option<BlockIdx> {
        let page = match kind {
            PoolKind::Small => K_SMALL_BUFFER,
            PoolKind::Large => self.conf.large_segment_size_bytes,
        };
        let mut es = ExpandableSegment::new(0, page, self.total_global_mem);
        es.base = self.reserve_address_space(es.size())?;
        let mut block = Block::new(stream, es.size(), kind, es.base);
        block.mapped = false;
        block.expandable = Some(self.expandable_segments.len());
        self.expandable_segments.push(Some(es));
        let idx = self.blocks.insert(block);
        self.insert_into_unmapped(idx);
        Some(idx)
    }

    fn segment(&mut self, idx: BlockIdx) -> &mut ExpandableSegment {
        let sid: SegmentIdx = self.blocks[idx].expandable.expect("not expandable");
        self.expandable_segments[sid]
            .as_mut()
            .expect("released expandable segment")
    }

    /// `map_block`: maps the pages covering the first `size` bytes of the
    /// unmapped block `to_map` and merges the mapped part with its free
    /// neighbours. Fails when the device has no room for the pages.
    fn map_block(&mut self, to_map: BlockIdx, size: u64) -> bool {
        let ptr = self.blocks[to_map].ptr;
        let es = self.segment(to_map);
        let (begin, end) = es.pages_to_map(SegmentRange { ptr, size });
        let page = es.segment_size;
        if begin == end || !self.device_has_room((end - begin) * page) {
            return false;
        }
        let mapped = self.segment(to_map).map_pages(begin, end);
        self.erase_from_unmapped(to_map);
        self.blocks[to_map].mapped = true;
        if mapped.size < self.blocks[to_map].size {
            // to_map -> remaining (unmapped) -> to_map.next
            let b = &self.blocks[to_map];
            let mut rest = Block::new(b.stream, b.size - mapped.size, b.pool, b.ptr + mapped.size);
            rest.mapped = false;
            rest.expandable = b.expandable;
            let next = b.next;
            let rest = self.blocks.insert(rest);
            self.splice(rest, Some(to_map), next);
            self.insert_into_unmapped(rest);
            self.blocks[to_map].size = mapped.size;
        }
        let (prev, next) = (self.blocks[to_map].prev, self.blocks[to_map].next);
        self.try_merge_blocks(to_map, prev);
        self.try_merge_blocks(to_map, next);
        self.insert_into_blocks(to_map);
        self.total_allocated_memory += mapped.size;
        let pool = self.blocks[to_map].pool;
        self.stats.reserved_bytes.increase(pool, mapped.size);
        self.stats.num_device_alloc += 1;
        true
    }

    /// `Block::splice`: links `block` between `before` and `after`.
    fn splice(&mut self, block: BlockIdx, before: Option<BlockIdx>, after: Option<BlockIdx>) {
        if let Some(b) = before {
            self.blocks[b].next = Some(block);
        }
        if let Some(a) = after {
            self.blocks[a].prev = Some(block);
        }
        self.blocks[block].prev = before;
        self.blocks[block].next = after;
    }

    /// `try_allocate_expandable_block`: finds room with
    /// `find_expandable_block` and maps pages until the block holds `size`.
    pub(crate) fn try_allocate_expandable_block(
        &mut self,
        stream: u64,
        kind: PoolKind,
        size: u64,
    ) -> Option<BlockIdx> {
        let mut candidate = self.find_expandable_block(stream, kind, size)?;
        // candidate: unmapped -> null | unmapped -> free -> * | free -> unmapped -> *
        if !self.blocks[candidate].mapped {
            let first = self.blocks[candidate].size.min(size);
            if !self.map_block(candidate, first) {
                return None;
            }
        }
        while self.blocks[candidate].size < size {
            // invariant: free -> unmapped -> *
            let remaining = size - self.blocks[candidate].size;
            let next = self.blocks[candidate]
                .next
                .filter(|&n| !self.blocks[n].mapped)?;
            let chunk = remaining.min(self.blocks[next].size);
            if !self.map_block(next, chunk) {
                return None;
            }
            candidate = next;
        }
        self.erase_from_blocks(candidate);
        Some(candidate)
    }

    /// `unmap_block`: unmaps the whole free pages inside the cached expandable
    /// block `idx`; the partial pages at either end stay as free blocks.
    pub(crate) fn unmap_block(&mut self, idx: BlockIdx) {
        let (ptr, size) = (self.blocks[idx].ptr, self.blocks[idx].size);
        let unmapped = self.segment(idx).unmap(SegmentRange { ptr, size });
        if unmapped.size == 0 {
            return;
        }
        self.erase_from_blocks(idx);
        let before_size = unmapped.ptr - ptr;
        if before_size > 0 {
            // prev? -> before_free -> block
            let prev = self.blocks[idx].prev;
            self.new_free_neighbour(idx, ptr, before_size, prev, Some(idx));
        }
        let after_size = size - (before_size + unmapped.size);
        if after_size > 0 {
            // block -> after_free -> next?
            let next = self.blocks[idx].next;
            let after_ptr = unmapped.ptr + unmapped.size;
            self.new_free_neighbour(idx, after_ptr, after_size, Some(idx), next);
        }
        let b = &mut self.blocks[idx];
        b.ptr = unmapped.ptr;
        b.size = unmapped.size;
        b.mapped = false;
        let (prev, next, pool) = (b.prev, b.next, b.pool);
        self.try_merge_blocks(idx, prev);
        self.try_merge_blocks(idx, next);
        self.insert_into_unmapped(idx);
        self.total_allocated_memory = self.total_allocated_memory.saturating_sub(unmapped.size);
        self.stats.reserved_bytes.decrease(pool, unmapped.size);
        self.stats.num_device_free += 1;
    }

    /// A free mapped block of the same segment as `like`, linked between
    /// `before` and `after` and cached.
    fn new_free_neighbour(
        &mut self,
        like: BlockIdx,
        ptr: u64,
        size: u64,
        before: Option<BlockIdx>,
        after: Option<BlockIdx>,
    ) {
        let l = &self.blocks[like];
        let mut b = Block::new(l.stream, size, l.pool, ptr);
        b.expandable = l.expandable;
        let idx = self.blocks.insert(b);
        self.splice(idx, before, after);
        self.insert_into_blocks(idx);
    }

    /// `release_expandable_segment`: drops a wholly unmapped segment.
    pub(crate) fn release_expandable_segment(&mut self, idx: BlockIdx) {
        self.erase_from_unmapped(idx);
        if let Some(sid) = self.blocks[idx].expandable {
            self.expandable_segments[sid] = None;
        }
        self.blocks.remove(idx);
    }

    /// Bytes of pages mapped in live expandable segments.
    pub fn expandable_mapped_bytes(&self) -> u64 {
        self.expandable_segments
            .iter()
            .flatten()
            .map(ExpandableSegment::mapped_bytes)
            .sum()
    }
}
