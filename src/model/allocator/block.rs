//! `Block` and `BlockPool` of `CUDACachingAllocator.cpp`.
//!
//! PyTorch links blocks with raw pointers; here they live in a slab
//! ([`BlockArena`]) and refer to each other by index. A pool's `blocks` set
//! is ordered by `BlockComparatorSize` = (stream, size, address) and its
//! `unmapped` set by `BlockComparatorAddress` = (stream, address); both are
//! `BTreeMap`s from that key to the block's index.

use super::stats::PoolKind;
use std::collections::BTreeMap;

/// Index of a block in the [`BlockArena`].
pub(crate) type BlockIdx = usize;

/// Index of an expandable segment in the allocator's segment slab.
pub(crate) type SegmentIdx = usize;

/// A contiguous range of device memory: a whole segment or part of a split one.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    /// Allocation stream.
    pub stream: u64,
    /// Block size in bytes.
    pub size: u64,
    /// Memory originally requested (kept, stale, after the block is freed).
    pub requested_size: u64,
    /// Owning pool.
    pub pool: PoolKind,
    /// Address.
    pub ptr: u64,
    /// In-use flag.
    pub allocated: bool,
    /// Whether the address range is backed by physical pages; always true
    /// outside expandable segments.
    pub mapped: bool,
    /// Previous block if split from a larger allocation.
    pub prev: Option<BlockIdx>,
    /// Next block if split from a larger allocation.
    pub next: Option<BlockIdx>,
    /// `get_free_blocks_call_count` of the pool when the block was inserted.
    pub gc_count_base: u64,
    /// The expandable segment this block is part of, if any.
    pub expandable: Option<SegmentIdx>,
}

impl Block {
    /// A fresh, unlinked, free and mapped block.
    pub fn new(stream: u64, size: u64, pool: PoolKind, ptr: u64) -> Self {
        Block {
            stream,
            size,
            requested_size: 0,
            pool,
            ptr,
            allocated: false,
            mapped: true,
            prev: None,
            next: None,
            gc_count_base: 0,
            expandable: None,
        }
    }

    /// `is_split`: the block has a neighbour in its segment.
    pub fn is_split(&self) -> bool {
        self.prev.is_some() || self.next.is_some()
    }

    /// Key in `BlockPool::blocks` (`BlockComparatorSize`).
    pub fn size_key(&self) -> (u64, u64, u64) {
        (self.stream, self.size, self.ptr)
    }

    /// Key in `BlockPool::unmapped` (`BlockComparatorAddress`).
    pub fn addr_key(&self) -> (u64, u64) {
        (self.stream, self.ptr)
    }
}

/// Slab of blocks; freed slots are reused.
#[derive(Debug, Default)]
pub(crate) struct BlockArena {
    slots: Vec<Option<Block>>,
    vacant: Vec<BlockIdx>,
}

impl BlockArena {
    /// Stores `block` and returns its index (`new Block`).
    pub fn insert(&mut self, block: Block) -> BlockIdx {
        match self.vacant.pop() {
            Some(i) => {
                self.slots[i] = Some(block);
                i
            }
            None => {
                self.slots.push(Some(block));
                self.slots.len() - 1
            }
        }
    }

    /// Drops the block at `i` (`delete block`).
    pub fn remove(&mut self, i: BlockIdx) {
        if let Some(slot) = self.slots.get_mut(i) {
            if slot.take().is_some() {
                self.vacant.push(i);
            }
        }
    }

    /// All live blocks with their indices.
    pub fn iter(&self) -> impl Iterator<Item = (BlockIdx, &Block)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, b)| b.as_ref().map(|b| (i, b)))
    }
}

impl std::ops::Index<BlockIdx> for BlockArena {
    type Output = Block;
    fn index(&self, i: BlockIdx) -> &Block {
        self.slots[i].as_ref().expect("dangling block index")
    }
}

impl std::ops::IndexMut<BlockIdx> for BlockArena {
    fn index_mut(&mut self, i: BlockIdx) -> &mut Block {
        self.slots[i].as_mut().expect("dangling block index")
    }
}

/// `BlockPool`: the cached free blocks of one pool.
#[derive(Debug)]
pub(crate) struct BlockPool {
    /// Free mapped blocks by (stream, size, address).
    pub blocks: BTreeMap<(u64, u64, u64), BlockIdx>,
    /// Unmapped address ranges of expandable segments by (stream, address).
    pub unmapped: BTreeMap<(u64, u64), BlockIdx>,
    /// `get_free_blocks_call_count`, the clock of garbage collection.
    pub get_free_blocks_call_count: u64,
}

impl BlockPool {
    /// An empty pool.
    pub fn new() -> Self {
        BlockPool {
            blocks: BTreeMap::new(),
            unmapped: BTreeMap::new(),
            get_free_blocks_call_count: 0,
        }
    }

    /// `insert_into_blocks`: inserts and stamps the block's gc counter base.
    pub fn insert_into_blocks(&mut self, idx: BlockIdx, block: &mut Block) {
        block.gc_count_base = self.get_free_blocks_call_count;
        self.blocks.insert(block.size_key(), idx);
    }

    /// `Block::gc_count`: how many `get_free_block` calls the block has sat
    /// through in this pool.
    pub fn gc_count(&self, block: &Block) -> u64 {
        self.get_free_blocks_call_count
            .saturating_sub(block.gc_count_base)
    }
}
