//! `DeviceCachingAllocator`: the allocation and free paths of
//! `c10/cuda/CUDACachingAllocator.cpp`, function by function.
//!
//! The device is simulated: `cudaMalloc` is a bump allocator over one address
//! region (2 MiB aligned segments, addresses never reused, as in the reference
//! replay), and the device capacity, if given, bounds the bytes reserved.

use super::block::{Block, BlockArena, BlockIdx, BlockPool};
use super::config::AllocConf;
use super::constants::*;
use super::expandable::ExpandableSegment;
use super::oom::Oom;
use super::stats::{PoolKind, Stats};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes allocation handles (sequential integers) by a multiplicative mix: the map of live
/// allocations is on every `malloc` / `free`, where SipHash costs more than the lookup itself.
#[derive(Default)]
pub(crate) struct HandleHasher(u64);

impl Hasher for HandleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type HandleMap = HashMap<u64, BlockIdx, BuildHasherDefault<HandleHasher>>;

/// Start of the simulated device address space (2 MiB aligned).
pub const ARENA_BASE: u64 = 0x7f00_0000_0000;

/// `totalGlobalMem` assumed when no device capacity is given: the emulated
/// H200 of the reference replay (150754820096 bytes). It only sizes the
/// address space of expandable segments and the base of `set_memory_fraction`.
pub const DEFAULT_TOTAL_GLOBAL_MEM: u64 = 150_754_820_096;

/// Handle of an allocation returned by [`CachingAllocator::malloc`]
/// (PyTorch identifies allocations by pointer; handles are never reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u64);

impl BlockId {
    /// The handle of a zero-byte allocation: PyTorch hands out a null pointer
    /// without touching the allocator, and freeing it does nothing.
    pub const NULL: BlockId = BlockId(0);

    /// Whether this is [`BlockId::NULL`].
    pub fn is_null(self) -> bool {
        self == BlockId::NULL
    }
}

/// `AllocParams`: one request on its way through `malloc`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AllocParams {
    stream: u64,
    /// Rounded size (`round_size`).
    size: u64,
    pool: PoolKind,
    /// Bytes to ask the device for (`get_allocation_size`).
    alloc_size: u64,
    block: Option<BlockIdx>,
}

/// A port of PyTorch's native CUDA caching allocator for one device.
#[derive(Debug)]
pub struct CachingAllocator {
    pub(crate) conf: AllocConf,
    pub(crate) device_capacity: Option<u64>,
    pub(crate) total_global_mem: u64,
    pub(crate) stats: Stats,
    pub(crate) blocks: BlockArena,
    pub(crate) large_blocks: BlockPool,
    pub(crate) small_blocks: BlockPool,
    /// `allocated_blocks`: live allocations by handle.
    pub(crate) allocated_blocks: HandleMap,
    next_handle: u64,
    /// `total_allocated_memory`: bytes reserved from the device.
    pub(crate) total_allocated_memory: u64,
    /// `allowed_memory_maximum`, set by `set_memory_fraction`.
    allowed_memory_maximum: Option<u64>,
    /// `expandable_segments_`.
    pub(crate) expandable_segments: Vec<Option<ExpandableSegment>>,
    /// Next free address of the simulated address space (the top of the used range when
    /// addresses fall).
    pub(crate) next_address: u64,
    /// The order in which the simulated device hands out segment addresses.
    address_order: AddressOrder,
}

/// The order in which `cudaMalloc` hands out addresses for new segments. The allocator breaks
/// ties between free blocks of equal size by address, so the order decides which of them a
/// request splits, and with it the fragmentation of a long run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AddressOrder {
    /// Each new segment above the previous one: the measuring harness's fake `cudaMalloc`
    /// (its replays in `tests/data` were made so).
    #[default]
    Rising,
    /// Each new segment below the previous one: what an H200's driver did (two steps recorded
    /// on it replay to its `max_memory_reserved` to the byte only so; `tests/it/real_gpu.rs`).
    Falling,
}

impl CachingAllocator {
    /// An empty allocator. `device_capacity_bytes` bounds the memory the
    /// allocator can reserve (`None`: unlimited, like the reference replay).
    pub fn new(conf: AllocConf, device_capacity_bytes: Option<u64>) -> Self {
        let stats = Stats {
            max_split_size: conf.max_split_size_bytes,
            ..Stats::default()
        };
        CachingAllocator {
            conf,
            device_capacity: device_capacity_bytes,
            total_global_mem: device_capacity_bytes.unwrap_or(DEFAULT_TOTAL_GLOBAL_MEM),
            stats,
            blocks: BlockArena::default(),
            large_blocks: BlockPool::new(),
            small_blocks: BlockPool::new(),
            allocated_blocks: HandleMap::default(),
            next_handle: 1,
            total_allocated_memory: 0,
            allowed_memory_maximum: None,
            expandable_segments: Vec::new(),
            next_address: ARENA_BASE,
            address_order: AddressOrder::Rising,
        }
    }

    /// The same allocator on a device that hands out segment addresses in `order`.
    pub fn with_address_order(mut self, order: AddressOrder) -> Self {
        self.address_order = order;
        self
    }

    /// The configuration in use.
    pub fn conf(&self) -> &AllocConf {
        &self.conf
    }

    /// Allocates `requested_bytes` on the default stream (stream 0).
    pub fn malloc(&mut self, requested_bytes: u64) -> Result<BlockId, Oom> {
        self.malloc_on_stream(requested_bytes, 0)
    }

    /// `malloc`: allocates `orig_size` bytes for use on `stream`. Blocks freed
    /// on one stream are only reused on the same stream.
    pub fn malloc_on_stream(&mut self, orig_size: u64, stream: u64) -> Result<BlockId, Oom> {
        if orig_size == 0 {
            return Ok(BlockId::NULL);
        }
        if orig_size >= K_ONE_EXA_BYTES {
            return Err(self.oom_error(orig_size, orig_size));
        }
        let size = self.round_size(orig_size);
        let alloc_size = self.get_allocation_size(size);
        let mut params = AllocParams {
            stream,
            size,
            pool: get_pool(size),
            alloc_size,
            block: None,
        };
        let found = self.get_free_block(&mut params) || self.get_new_block(&mut params);
        let Some(block) = params.block.filter(|_| found) else {
            self.stats.num_ooms += 1;
            return Err(self.oom_error(orig_size, alloc_size));
        };
        let split_remainder = self.should_split(block, size);
        let idx = self.alloc_found_block(&params, orig_size, split_remainder);
        let id = self.next_handle;
        self.next_handle += 1;
        self.allocated_blocks.insert(id, idx);
        Ok(BlockId(id))
    }

    /// No cached block fits: garbage-collect if enabled, then `alloc_block`,
    /// retrying after `release_available_cached_blocks` and after
    /// `release_cached_blocks`.
    fn get_new_block(&mut self, p: &mut AllocParams) -> bool {
        if self.gc_enabled() {
            self.garbage_collect_cached_blocks();
        }
        self.alloc_block(p, false)
            || (self.release_available_cached_blocks(p) && self.alloc_block(p, false))
            || (self.release_cached_blocks() && self.alloc_block(p, true))
    }

    /// `free`: returns the block to its pool, merging it with free
    /// neighbours. Freeing an unknown or already freed handle does nothing and
    /// returns false.
    pub fn free(&mut self, id: BlockId) -> bool {
        let Some(idx) = self.allocated_blocks.remove(&id.0) else {
            return false;
        };
        let block = &mut self.blocks[idx];
        block.allocated = false;
        let (pool, size) = (block.pool, block.size);
        self.stats.allocation.decrease(pool, 1);
        self.stats.allocated_bytes.decrease(pool, size);
        if size >= self.conf.max_split_size() {
            self.stats.oversize_allocations.decrease(1);
        }
        self.free_block(idx);
        true
    }

    /// `emptyCache`: releases every cached segment that is wholly free, and
    /// unmaps the free pages of expandable segments.
    pub fn empty_cache(&mut self) {
        self.release_cached_blocks();
    }

    /// A copy of the statistics (`getStats`).
    pub fn stats(&self) -> Stats {
        self.stats.clone()
    }

    /// `resetPeakStats`: every peak becomes the current value.
    pub fn reset_peak(&mut self) {
        self.stats.reset_peak();
    }

    /// `resetAccumulatedStats`.
    pub fn reset_accumulated(&mut self) {
        self.stats.reset_accumulated();
    }

    /// `torch.cuda.memory_allocated()`.
    pub fn memory_allocated(&self) -> u64 {
        self.stats.allocated_bytes.aggregate.current
    }

    /// `torch.cuda.memory_reserved()`.
    pub fn memory_reserved(&self) -> u64 {
        self.stats.reserved_bytes.aggregate.current
    }

    /// `setMemoryFraction`: limits the bytes this allocator may reserve to
    /// `fraction` of the device's total memory (the capacity given to
    /// [`CachingAllocator::new`], else [`DEFAULT_TOTAL_GLOBAL_MEM`]). 1.0
    /// removes the limit. Also enables `garbage_collection_threshold`.
    pub fn set_memory_fraction(&mut self, fraction: f64) -> Result<(), String> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(format!(
                "invalid fraction: {fraction}. Please set within [0, 1]."
            ));
        }
        self.allowed_memory_maximum =
            (fraction < 1.0).then_some((fraction * self.total_global_mem as f64) as u64);
        Ok(())
    }

    // ---- sizes ------------------------------------------------------------

    /// `round_size`: at least kMinBlockSize, then a multiple of kMinBlockSize
    /// or, with `roundup_power2_divisions`, the next power-of-two division.
    pub fn round_size(&self, size: u64) -> u64 {
        if size < K_MIN_BLOCK_SIZE {
            return K_MIN_BLOCK_SIZE;
        }
        let divisions = self.conf.roundup_power2_divisions_for(size);
        if divisions > 1 && size > K_MIN_BLOCK_SIZE.saturating_mul(divisions) {
            roundup_power2_next_division(size, divisions)
        } else {
            size.div_ceil(K_MIN_BLOCK_SIZE)
                .saturating_mul(K_MIN_BLOCK_SIZE)
        }
    }

    /// `get_allocation_size`: the segment size for a rounded request:
    /// kSmallBuffer for small requests, kLargeBuffer (`large_segment_size`)
    /// below kMinLargeAlloc, else the request rounded up to kRoundLarge.
    pub fn get_allocation_size(&self, size: u64) -> u64 {
        if size <= K_SMALL_SIZE {
            K_SMALL_BUFFER
        } else if size < K_MIN_LARGE_ALLOC {
            self.conf.large_segment_size_bytes
        } else {
            size.div_ceil(K_ROUND_LARGE).saturating_mul(K_ROUND_LARGE)
        }
    }

    /// `should_split`: small-pool and expandable blocks split off any
    /// remainder of at least kMinBlockSize; other large blocks only when the
    /// request is below max_split_size and the remainder exceeds kSmallSize.
    fn should_split(&self, block: BlockIdx, size: u64) -> bool {
        let b = &self.blocks[block];
        let remaining = b.size - size;
        if b.pool == PoolKind::Small || self.conf.expandable_segments {
            remaining >= K_MIN_BLOCK_SIZE
        } else {
            size < self.conf.max_split_size() && remaining > K_SMALL_SIZE
        }
    }

    fn gc_enabled(&self) -> bool {
        self.allowed_memory_maximum.is_some()
            && self
                .conf
                .garbage_collection_threshold
                .is_some_and(|t| t > 0.0)
    }

    // ---- pools ------------------------------------------------------------

    pub(crate) fn pool(&self, kind: PoolKind) -> &BlockPool {
        match kind {
            PoolKind::Small => &self.small_blocks,
            PoolKind::Large => &self.large_blocks,
        }
    }

    pub(crate) fn pool_mut(&mut self, kind: PoolKind) -> &mut BlockPool {
        match kind {
            PoolKind::Small => &mut self.small_blocks,
            PoolKind::Large => &mut self.large_blocks,
        }
    }

    /// `pool.insert_into_blocks(block)`.
    pub(crate) fn insert_into_blocks(&mut self, idx: BlockIdx) {
        let kind = self.blocks[idx].pool;
        let pool = match kind {
            PoolKind::Small => &mut self.small_blocks,
            PoolKind::Large => &mut self.large_blocks,
        };
        pool.insert_into_blocks(idx, &mut self.blocks[idx]);
    }

    /// `pool.blocks.erase(block)`.
    pub(crate) fn erase_from_blocks(&mut self, idx: BlockIdx) {
        let key = self.blocks[idx].size_key();
        let kind = self.blocks[idx].pool;
        self.pool_mut(kind).blocks.remove(&key);
    }

    /// `pool.unmapped.insert(block)`.
    pub(crate) fn insert_into_unmapped(&mut self, idx: BlockIdx) {
        let key = self.blocks[idx].addr_key();
        let kind = self.blocks[idx].pool;
        self.pool_mut(kind).unmapped.insert(key, idx);
    }

    /// `pool.unmapped.erase(block)`.
    pub(crate) fn erase_from_unmapped(&mut self, idx: BlockIdx) {
        let key = self.blocks[idx].addr_key();
        let kind = self.blocks[idx].pool;
        self.pool_mut(kind).unmapped.remove(&key);
    }

    // ---- finding and handing out blocks -------------------------------------

    /// `get_free_block`: best fit from the pool (the smallest block of at
    /// least the rounded size on the same stream, ties broken by address),
    /// subject to the max_split_size rules.
    fn get_free_block(&mut self, p: &mut AllocParams) -> bool {
        let gc = self.gc_enabled();
        let max_split = self.conf.max_split_size();
        let rounding = self.conf.max_non_split_rounding_bytes;
        let expandable_active = self.conf.expandable_segments;
        let blocks = &self.blocks;
        let pool = match p.pool {
            PoolKind::Small => &mut self.small_blocks,
            PoolKind::Large => &mut self.large_blocks,
        };
        if gc {
            // Track block reuse interval only when garbage collection is enabled.
            pool.get_free_blocks_call_count += 1;
        }
        let Some(it) = best_fit(blocks, pool, p, expandable_active) else {
            return false;
        };
        let found = blocks[it].size;
        // Do not return an oversized block for a large request.
        if p.size < max_split && found >= max_split {
            return false;
        }
        // Allow oversized block size to be rounded up but within a limit.
        if p.size >= max_split && found >= p.size.saturating_add(rounding) {
            return false;
        }
        pool.blocks.remove(&blocks[it].size_key());
        p.block = Some(it);
        true
    }

    /// `alloc_found_block`: splits the remainder off if `split_remainder`,
    /// marks the block allocated and updates the statistics. `allocated_bytes`
    /// counts the whole block handed out.
    fn alloc_found_block(
        &mut self,
        p: &AllocParams,
        orig_size: u64,
        split_remainder: bool,
    ) -> BlockIdx {
        let mut block = p.block.expect("alloc_found_block without a block");
        let pool = p.pool;
        let already_split = self.blocks[block].is_split();
        let expandable = self.blocks[block].expandable;
        if split_remainder {
            let remaining = block;
            block = self.split_front(remaining, p.size, p.stream);
            self.insert_into_blocks(remaining);
            if expandable.is_none() {
                if already_split {
                    // An already-split inactive block is being shrunk by size bytes.
                    self.stats.inactive_split_bytes.decrease(pool, p.size);
                } else {
                    // A new split inactive block is created from an unsplit one.
                    let rest = self.blocks[remaining].size;
                    self.stats.inactive_split_bytes.increase(pool, rest);
                    self.stats.inactive_split.increase(pool, 1);
                }
            }
        } else if already_split && expandable.is_none() {
            // An already-split block is becoming active.
            let size = self.blocks[block].size;
            self.stats.inactive_split_bytes.decrease(pool, size);
            self.stats.inactive_split.decrease(pool, 1);
        }
        let b = &mut self.blocks[block];
        b.allocated = true;
        b.requested_size = orig_size;
        let size = b.size;
        let s = &mut self.stats;
        s.allocation.increase(pool, 1);
        s.allocated_bytes.increase(pool, size);
        s.active.increase(pool, 1);
        s.active_bytes.increase(pool, size);
        s.requested_bytes.increase(pool, orig_size);
        if size >= self.conf.max_split_size() {
            s.oversize_allocations.increase(1);
        }
        block
    }

    /// Carves a new block of `size` bytes off the front of `remaining`, which
    /// keeps the rest; returns the new block.
    fn split_front(&mut self, remaining: BlockIdx, size: u64, stream: u64) -> BlockIdx {
        let r = &self.blocks[remaining];
        let mut front = Block::new(stream, size, r.pool, r.ptr);
        front.expandable = r.expandable;
        front.prev = r.prev;
        front.next = Some(remaining);
        let front = self.blocks.insert(front);
        if let Some(prev) = self.blocks[front].prev {
            self.blocks[prev].next = Some(front);
        }
        let r = &mut self.blocks[remaining];
        r.prev = Some(front);
        r.ptr += size;
        r.size -= size;
        front
    }

    // ---- getting memory from the device -----------------------------------

    /// `alloc_block`: a new segment of `alloc_size` bytes from `cudaMalloc`,
    /// or, with expandable segments, newly mapped pages.
    fn alloc_block(&mut self, p: &mut AllocParams, is_retry: bool) -> bool {
        let size = p.alloc_size;
        if is_retry {
            self.stats.num_alloc_retries += 1;
        }
        if let Some(allowed) = self.allowed_memory_maximum {
            if self.total_allocated_memory.saturating_add(size) > allowed {
                return false;
            }
        }
        if self.conf.expandable_segments {
            p.block = self.try_allocate_expandable_block(p.stream, p.pool, p.size);
            return p.block.is_some();
        }
        let Some(ptr) = self.cuda_malloc(size) else {
            return false;
        };
        self.total_allocated_memory += size;
        p.block = Some(self.blocks.insert(Block::new(p.stream, size, p.pool, ptr)));
        self.stats.segment.increase(p.pool, 1);
        self.stats.reserved_bytes.increase(p.pool, size);
        if size >= self.conf.max_split_size() {
            self.stats.oversize_segments.increase(1);
        }
        self.stats.num_device_alloc += 1;
        true
    }

    /// Whether the device has `bytes` of physical memory left.
    pub(crate) fn device_has_room(&self, bytes: u64) -> bool {
        match self.device_capacity {
            None => true,
            Some(cap) => self
                .total_allocated_memory
                .checked_add(bytes)
                .is_some_and(|t| t <= cap),
        }
    }

    /// The simulated `cudaMalloc`: fails past the device capacity; otherwise
    /// the next 2 MiB aligned address range.
    fn cuda_malloc(&mut self, size: u64) -> Option<u64> {
        if !self.device_has_room(size) {
            return None;
        }
        self.reserve_address_space(size)
    }

    /// Bump-allocates `size` bytes (rounded up to 2 MiB) of address space.
    pub(crate) fn reserve_address_space(&mut self, size: u64) -> Option<u64> {
        let rounded = size
            .max(1)
            .checked_next_multiple_of(K_CUDA_MALLOC_ALIGNMENT)?;
        match self.address_order {
            AddressOrder::Rising => {
                let ptr = self.next_address;
                self.next_address = ptr.checked_add(rounded)?;
                Some(ptr)
            }
            AddressOrder::Falling => {
                let ptr = self.next_address.checked_sub(rounded)?;
                self.next_address = ptr;
                Some(ptr)
            }
        }
    }

    // ---- freeing ----------------------------------------------------------

    /// `free_block`: merges the block with free neighbours and caches it.
    fn free_block(&mut self, idx: BlockIdx) {
        let b = &self.blocks[idx];
        let (pool, original_size, requested_size) = (b.pool, b.size, b.requested_size);
        let mut net_inactive_blocks: i128 = 0;
        let mut net_inactive_size: i128 = 0;
        for candidate in [b.prev, b.next] {
            let subsumed = self.try_merge_blocks(idx, candidate);
            if subsumed > 0 {
                net_inactive_blocks -= 1;
                net_inactive_size -= i128::from(subsumed);
            }
        }
        self.insert_into_blocks(idx);
        let b = &self.blocks[idx];
        if b.is_split() {
            net_inactive_blocks += 1;
            net_inactive_size += i128::from(b.size);
        }
        let s = &mut self.stats;
        // Expandable segments are excluded from inactive_split, as in PyTorch.
        if b.expandable.is_none() {
            apply_net_change(&mut s.inactive_split, pool, net_inactive_blocks);
            apply_net_change(&mut s.inactive_split_bytes, pool, net_inactive_size);
        }
        s.active.decrease(pool, 1);
        s.active_bytes.decrease(pool, original_size);
        s.requested_bytes.decrease(pool, requested_size);
    }

    /// `try_merge_blocks`: absorbs `src` (a neighbour of `dst`) into `dst` if
    /// it is free and equally mapped; returns the bytes absorbed.
    pub(crate) fn try_merge_blocks(&mut self, dst: BlockIdx, src: Option<BlockIdx>) -> u64 {
        let Some(src) = src else { return 0 };
        let s = &self.blocks[src];
        if s.allocated || s.mapped != self.blocks[dst].mapped {
            return 0;
        }
        let (s_prev, s_next, s_ptr, s_size, s_mapped) = (s.prev, s.next, s.ptr, s.size, s.mapped);
        if s_mapped {
            self.erase_from_blocks(src);
        } else {
            self.erase_from_unmapped(src);
        }
        if self.blocks[dst].prev == Some(src) {
            // [src dst]
            self.blocks[dst].ptr = s_ptr;
            self.blocks[dst].prev = s_prev;
            if let Some(p) = s_prev {
                self.blocks[p].next = Some(dst);
            }
        } else {
            // [dst src]
            self.blocks[dst].next = s_next;
            if let Some(n) = s_next {
                self.blocks[n].prev = Some(dst);
            }
        }
        self.blocks[dst].size += s_size;
        self.blocks.remove(src);
        s_size
    }

    // ---- giving memory back -------------------------------------------------

    /// `release_available_cached_blocks`: when a max_split_size is set, frees
    /// one cached oversize block big enough for the request, or else the
    /// largest oversize blocks until enough bytes are released.
    fn release_available_cached_blocks(&mut self, p: &AllocParams) -> bool {
        let Some(max_split) = self.conf.max_split_size_bytes else {
            return false;
        };
        let key_size = p.size.max(max_split);
        let key = (p.stream, key_size, 0);
        let blocks = &self.blocks;
        let pool = self.pool(p.pool);
        let first = pool.blocks.range(key..).next().map(|(_, &i)| i);
        if let Some(i) = first {
            if blocks[i].stream == p.stream && blocks[i].expandable.is_none() {
                self.release_block(i);
                return true;
            }
        }
        // No single block is large enough; free multiple oversize blocks,
        // starting with the largest.
        let mut released = 0u64;
        let mut to_release = Vec::new();
        for (_, &i) in pool.blocks.range(..key).rev() {
            let b = &blocks[i];
            if released >= key_size || b.size < max_split || b.stream != p.stream {
                break;
            }
            if b.expandable.is_none() {
                released = released.saturating_add(b.size);
                to_release.push(i);
            }
        }
        for i in to_release {
            self.release_block(i);
        }
        released >= key_size
    }

    /// `release_cached_blocks`: frees every unsplit cached segment of both
    /// pools and unmaps the free pages of expandable segments.
    fn release_cached_blocks(&mut self) -> bool {
        // synchronize_and_free_events: no cross-stream events are modelled.
        self.stats.num_sync_all_streams += 1;
        self.release_blocks(PoolKind::Large);
        self.release_blocks(PoolKind::Small);
        true
    }

    /// `release_blocks`.
    fn release_blocks(&mut self, kind: PoolKind) {
        let cached: Vec<BlockIdx> = self.pool(kind).blocks.values().copied().collect();
        let mut to_unmap = Vec::new();
        for idx in cached {
            let b = &self.blocks[idx];
            if b.expandable.is_some() {
                to_unmap.push(idx);
            } else if !b.is_split() {
                self.release_block(idx);
            }
        }
        for idx in to_unmap {
            self.unmap_block(idx);
            let b = &self.blocks[idx];
            if !b.is_split() && !b.mapped {
                self.release_expandable_segment(idx);
            }
        }
    }

    /// `release_block`: `cudaFree`s a whole cached segment.
    fn release_block(&mut self, idx: BlockIdx) {
        let b = &self.blocks[idx];
        debug_assert!(b.expandable.is_none());
        let (pool, size) = (b.pool, b.size);
        self.stats.num_device_free += 1;
        self.total_allocated_memory = self.total_allocated_memory.saturating_sub(size);
        self.stats.segment.decrease(pool, 1);
        self.stats.reserved_bytes.decrease(pool, size);
        if size >= self.conf.max_split_size() {
            self.stats.oversize_segments.decrease(1);
        }
        self.erase_from_blocks(idx);
        self.blocks.remove(idx);
    }

    /// `garbage_collect_cached_blocks`: with a memory fraction and a
    /// `garbage_collection_threshold` set, frees the oldest unsplit large
    /// cached segments once reserved memory exceeds the threshold.
    fn garbage_collect_cached_blocks(&mut self) {
        let (Some(allowed), Some(threshold)) = (
            self.allowed_memory_maximum,
            self.conf.garbage_collection_threshold,
        ) else {
            return;
        };
        let gc_threshold = (threshold * allowed as f64) as u64;
        if self.total_allocated_memory <= gc_threshold {
            return;
        }
        let target_size = self.total_allocated_memory - gc_threshold;
        let mut gc_reclaimed = 0u64;
        let (mut total_age, mut freeable) = (0u64, 0u64);
        for &i in self.large_blocks.blocks.values() {
            let b = &self.blocks[i];
            if !b.is_split() {
                total_age += self.large_blocks.gc_count(b);
                freeable += 1;
            }
        }
        let mut block_freed = true;
        while gc_reclaimed < target_size && block_freed && freeable > 0 {
            let age_threshold = total_age as f64 / freeable as f64;
            block_freed = false;
            let cached: Vec<BlockIdx> = self.large_blocks.blocks.values().copied().collect();
            for i in cached {
                let b = &self.blocks[i];
                let age = self.large_blocks.gc_count(b);
                if !b.is_split() && b.expandable.is_none() && age as f64 >= age_threshold {
                    block_freed = true;
                    gc_reclaimed += b.size;
                    total_age = total_age.saturating_sub(age);
                    freeable -= 1;
                    self.release_block(i);
                }
            }
        }
    }

    // ---- errors -----------------------------------------------------------

    fn oom_error(&self, requested: u64, alloc_size: u64) -> Oom {
        Oom {
            requested_bytes: requested,
            alloc_size,
            device_total: self.device_capacity,
            device_free: self
                .device_capacity
                .map(|c| c.saturating_sub(self.total_allocated_memory)),
            allowed: self.allowed_memory_maximum,
            allocated_bytes: self.stats.allocated_bytes.aggregate.current,
            reserved_bytes: self.stats.reserved_bytes.aggregate.current,
        }
    }
}

/// The lookup of `get_free_block`: the first block of the pool at or after
/// (stream, size, address 0) in `BlockComparatorSize` order, on the same
/// stream. With expandable segments active, a following block is preferred
/// while its "expandable size" (its size plus the unmapped space right after
/// it) is smaller.
fn best_fit(
    blocks: &BlockArena,
    pool: &BlockPool,
    p: &AllocParams,
    expandable_active: bool,
) -> Option<BlockIdx> {
    let mut candidates = pool.blocks.range((p.stream, p.size, 0)..).map(|(_, &i)| i);
    let mut it = candidates
        .next()
        .filter(|&i| blocks[i].stream == p.stream)?;
    if blocks[it].expandable.is_none() || !expandable_active {
        return Some(it);
    }
    let expandable_size = |i: BlockIdx| {
        let b = &blocks[i];
        b.size
            + b.next
                .filter(|&n| !blocks[n].mapped)
                .map_or(0, |n| blocks[n].size)
    };
    for next in candidates {
        if !(blocks[it].expandable.is_some()
            && blocks[next].stream == p.stream
            && expandable_size(next) < expandable_size(it))
        {
            break;
        }
        it = next;
    }
    Some(it)
}

/// `get_pool`: requests of at most kSmallSize go to the small pool.
fn get_pool(size: u64) -> PoolKind {
    if size <= K_SMALL_SIZE {
        PoolKind::Small
    } else {
        PoolKind::Large
    }
}

/// `roundup_power2_next_division`: rounds `size` up to the next of
/// `divisions` equal steps between the powers of two around it; e.g. 1200
/// with 4 divisions lies in [1024, 2048), whose steps are 1024, 1280, 1536
/// and 1792, so it becomes 1280.
pub fn roundup_power2_next_division(size: u64, divisions: u64) -> u64 {
    if size.is_power_of_two() {
        return size;
    }
    let power2_floor = 1u64 << size.ilog2();
    let power2_division = power2_floor >> divisions.ilog2();
    if power2_division == 0 {
        return power2_floor << 1;
    }
    let round_size_floor = size & !(power2_division - 1);
    if round_size_floor == size {
        size
    } else {
        round_size_floor + power2_division
    }
}

fn apply_net_change(stat: &mut super::stats::StatArray, pool: PoolKind, delta: i128) {
    let amount = u64::try_from(delta.unsigned_abs()).unwrap_or(u64::MAX);
    if delta > 0 {
        stat.increase(pool, amount);
    } else if delta < 0 {
        stat.decrease(pool, amount);
    }
}
