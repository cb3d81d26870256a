//! Memory snapshot (`DeviceCachingAllocator::snapshot`): the segments and
//! their blocks, so a UI can show fragmentation.

use super::block::{Block, BlockIdx};
use super::caching::{BlockId, CachingAllocator};
use super::stats::PoolKind;

/// One block of a segment (`BlockInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockInfo {
    /// Address.
    pub address: u64,
    /// Size in bytes (the whole block, including rounding).
    pub size: u64,
    /// Bytes the caller asked for; 0 for a free block.
    pub requested_size: u64,
    /// Whether the block is handed out.
    pub allocated: bool,
}

/// One segment (`SegmentInfo`): a `cudaMalloc`ed range, or one contiguous
/// mapped range of an expandable segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// Address of the first block.
    pub address: u64,
    /// Sum of the block sizes.
    pub total_size: u64,
    /// Bytes in allocated blocks.
    pub allocated_size: u64,
    /// Bytes requested by the allocated blocks.
    pub requested_size: u64,
    /// Stream the segment serves.
    pub stream: u64,
    /// Pool the segment belongs to (`is_large` in PyTorch).
    pub pool: PoolKind,
    /// Whether it is (part of) an expandable segment.
    pub is_expandable: bool,
    /// The blocks in address order.
    pub blocks: Vec<BlockInfo>,
}

fn block_info(b: &Block) -> BlockInfo {
    BlockInfo {
        address: b.ptr,
        size: b.size,
        requested_size: if b.allocated { b.requested_size } else { 0 },
        allocated: b.allocated,
    }
}

impl CachingAllocator {
    /// `snapshot`: every segment with its blocks, sorted by address. For
    /// expandable segments, one entry per contiguous mapped range.
    pub fn segments(&self) -> Vec<SegmentInfo> {
        let mut result: Vec<SegmentInfo> = self
            .blocks
            .iter()
            .filter(|(_, b)| b.mapped && b.prev.is_none_or(|p| !self.blocks[p].mapped))
            .map(|(head, _)| self.segment_from(head))
            .collect();
        crate::model::order::sort_by_key(&mut result, |s| s.address);
        result
    }

    fn segment_from(&self, head: BlockIdx) -> SegmentInfo {
        let h = &self.blocks[head];
        let mut seg = SegmentInfo {
            address: h.ptr,
            total_size: 0,
            allocated_size: 0,
            requested_size: 0,
            stream: h.stream,
            pool: h.pool,
            is_expandable: h.expandable.is_some(),
            blocks: Vec::new(),
        };
        let mut cur = Some(head);
        while let Some(i) = cur.filter(|&i| self.blocks[i].mapped) {
            let info = block_info(&self.blocks[i]);
            seg.total_size += info.size;
            if info.allocated {
                seg.allocated_size += info.size;
                seg.requested_size += info.requested_size;
            }
            seg.blocks.push(info);
            cur = self.blocks[i].next;
        }
        seg
    }

    /// The block behind a live allocation, or `None` for an unknown, freed or
    /// null handle.
    pub fn block_info(&self, id: BlockId) -> Option<BlockInfo> {
        let idx = *self.allocated_blocks.get(&id.0)?;
        Some(block_info(&self.blocks[idx]))
    }

    /// The `k` largest cached free blocks of `pool` as (address, size), largest first (the pool is
    /// ordered by size, so this costs O(k log n)).
    pub fn largest_free_blocks(&self, pool: PoolKind, k: usize) -> Vec<(u64, u64)> {
        self.pool(pool)
            .blocks
            .keys()
            .rev()
            .take(k)
            .map(|&(_, size, ptr)| (ptr, size))
            .collect()
    }

    /// Bytes of free blocks in the pool, i.e. cached but not handed out.
    pub fn cached_free_bytes(&self, pool: PoolKind) -> u64 {
        self.pool(pool)
            .blocks
            .values()
            .map(|&i| self.blocks[i].size)
            .sum()
    }
}
