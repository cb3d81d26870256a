//! The size constants of `CUDACachingAllocator.cpp` / `AllocatorConfig.h`,
//! under their PyTorch names.

/// One mebibyte (`kMB`).
pub const K_MB: u64 = 1024 * 1024;

/// `kMinBlockSize`: all sizes are rounded to at least 512 bytes.
pub const K_MIN_BLOCK_SIZE: u64 = 512;

/// `kSmallSize`: the largest "small" allocation is 1 MiB.
pub const K_SMALL_SIZE: u64 = 1_048_576;

/// `kSmallBuffer`: "small" allocations are packed in 2 MiB blocks.
pub const K_SMALL_BUFFER: u64 = 2_097_152;

/// `kLargeBuffer`: "large" allocations may be packed in 20 MiB blocks.
pub const K_LARGE_BUFFER: u64 = 20_971_520;

/// `kMinLargeAlloc`: allocations between 1 and 10 MiB may use kLargeBuffer.
pub const K_MIN_LARGE_ALLOC: u64 = 10_485_760;

/// `kRoundLarge`: large allocations are rounded up to 2 MiB.
pub const K_ROUND_LARGE: u64 = 2_097_152;

/// PyTorch refuses any single request of 1 EiB or more
/// ("CUDA out of memory. Tried to allocate more than 1EB memory.").
pub const K_ONE_EXA_BYTES: u64 = 1_152_921_504_606_846_976;

/// Alignment of every simulated `cudaMalloc` segment (the reference replay's
/// bump allocator hands out 2 MiB aligned ranges).
pub const K_CUDA_MALLOC_ALIGNMENT: u64 = 2 * K_MB;
