//! PyTorch's CUDA caching allocator, simulated: a pure, dependency-free Rust port of its native
//! allocator (`c10/cuda/CUDACachingAllocator.cpp`, `DeviceCachingAllocator`,
//! torch 2.x) running against a simulated device, so that the memory a
//! sequence of allocations would reserve can be computed without a GPU.
//!
//! The rules, under their PyTorch names:
//! - `round_size`: requests are rounded up to kMinBlockSize (512 B), or to a
//!   power-of-two division with `roundup_power2_divisions`.
//! - `get_pool`: rounded sizes up to kSmallSize (1 MiB) use the small pool,
//!   larger ones the large pool; the pools never share blocks.
//! - `get_free_block`: best fit among the cached free blocks ordered by
//!   `BlockComparatorSize` = (stream, size, address), so ties between
//!   equal-sized blocks go to the lowest address. With `max_split_size_mb`, a
//!   request below it never takes an oversize block, and a request above it
//!   takes an oversize block only if `block size < request + kLargeBuffer`
//!   (`max_non_split_rounding_mb`).
//! - `get_allocation_size`: a new segment is kSmallBuffer (2 MiB) for small
//!   requests, kLargeBuffer (20 MiB) for requests below kMinLargeAlloc
//!   (10 MiB), else the request rounded up to kRoundLarge (2 MiB).
//! - `should_split`: small blocks split off any remainder of at least 512 B;
//!   large blocks only a remainder above kSmallSize, and never when the
//!   request is at least max_split_size. An unsplit block is handed out whole
//!   and `allocated_bytes` counts all of it.
//! - `free_block` / `try_merge_blocks`: a freed block merges with free
//!   neighbours of its segment.
//! - When `cudaMalloc` fails (device capacity reached):
//!   `release_available_cached_blocks` (with max_split_size), then
//!   `release_cached_blocks` (every unsplit cached segment), then one retry;
//!   after that the allocation fails with [`Oom`].
//! - `garbage_collect_cached_blocks`: with `garbage_collection_threshold` and
//!   a memory fraction ([`CachingAllocator::set_memory_fraction`]).
//! - Expandable segments (`expandable_segments:True`): see below.
//!
//! # The simulated device
//! `cudaMalloc` is a bump allocator over one address region starting at
//! [`caching::ARENA_BASE`]: each new segment starts right after the previous
//! one, 2 MiB aligned, and addresses are never reused, exactly like the
//! reference replay (PyTorch's own allocator on an emulated device); with
//! [`AddressOrder::Falling`] each starts right below the previous one, as an
//! H200's driver placed them. Given the
//! same sequence, this port reproduces PyTorch's `max_memory_allocated` and
//! `max_memory_reserved` to the byte (see `tests/it/allocator.rs`). The device
//! capacity, if given, bounds the bytes reserved (cudaMalloc'ed segments plus
//! mapped pages); there is no other memory on the device (no CUDA context,
//! no other processes).
//!
//! # Expandable segments
//! Modelled as PyTorch's Note [Expandable Segments] describes and as its code
//! does: per pool and stream, one segment reserves address space for 1 1/8 of
//! the device's memory and maps physical pages as needed, 2 MiB pages for the
//! small pool and `large_segment_size` (20 MiB) pages for the large pool
//! (`find_expandable_block`, `map_block`, `try_allocate_expandable_block`).
//! `reserved_bytes` counts mapped pages. Blocks always split
//! (remainder >= 512 B), so segments do not fragment into one segment per
//! allocation. `empty_cache` (and the out-of-memory path) unmaps every whole
//! free page (`unmap_block`) and drops segments left wholly unmapped
//! (`release_expandable_segment`). Approximations: the address space reserved
//! by `cuMemAddressReserve` comes from the same bump allocator as the
//! segments; a page fails to map exactly when the device capacity would be
//! exceeded; nothing of this was checked against a real replay, because the
//! reference device cannot run the driver's virtual-memory API.
//!
//! # Not modelled
//! Several streams' cross-stream uses (`recordStream`, CUDA events: a block is
//! reusable as soon as it is freed), CUDA graph private pools, IPC, and
//! `backend:cudaMallocAsync`. `expandable_segments` cannot be toggled after
//! construction.

mod block;
pub mod caching;
pub mod config;
pub mod constants;
mod expandable;
mod oom;
mod snapshot;
pub mod stats;

pub use caching::{roundup_power2_next_division, AddressOrder, BlockId, CachingAllocator};
pub use config::{AllocConf, ConfError};
pub use oom::{format_size, Oom};
pub use snapshot::{BlockInfo, SegmentInfo};
pub use stats::{PoolKind, Stat, StatArray, Stats};

#[cfg(test)]
mod tests;
