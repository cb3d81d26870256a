//! PyTorch memory snapshots, `memory_summary()` texts and `memory_stats()` JSON: the genuine
//! fixtures in tests/data/reference/snapshots parse to the allocator's own peaks, and hostile or
//! damaged inputs return an error, never a panic.

#[allow(dead_code)]
mod common;
mod fixtures;
mod robustness;
