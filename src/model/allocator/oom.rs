//! The out-of-memory error, with PyTorch's message.

use super::constants::K_ONE_EXA_BYTES;
use std::fmt;

/// A failed allocation: what `torch.OutOfMemoryError` reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Oom {
    /// Bytes the caller asked for.
    pub requested_bytes: u64,
    /// Bytes the allocator tried to obtain from the device
    /// (`get_allocation_size` of the rounded request).
    pub alloc_size: u64,
    /// Device capacity, if the allocator was given one.
    pub device_total: Option<u64>,
    /// Device memory not reserved by this allocator, if a capacity is known.
    pub device_free: Option<u64>,
    /// The limit set by `set_memory_fraction`, if any.
    pub allowed: Option<u64>,
    /// `allocated_bytes` (aggregate, current) when the allocation failed.
    pub allocated_bytes: u64,
    /// `reserved_bytes` (aggregate, current) when the allocation failed.
    pub reserved_bytes: u64,
}

impl fmt::Display for Oom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.requested_bytes >= K_ONE_EXA_BYTES {
            return write!(
                f,
                "CUDA out of memory. Tried to allocate more than 1EB memory."
            );
        }
        write!(
            f,
            "CUDA out of memory. Tried to allocate {}.",
            format_size(self.alloc_size)
        )?;
        if let (Some(total), Some(free)) = (self.device_total, self.device_free) {
            write!(
                f,
                " GPU 0 has a total capacity of {} of which {} is free.",
                format_size(total),
                format_size(free)
            )?;
        }
        if let Some(allowed) = self.allowed {
            write!(f, " {} allowed;", format_size(allowed))?;
        }
        write!(
            f,
            " Of the allocated memory {} is allocated by PyTorch, and {} is reserved by PyTorch but unallocated.",
            format_size(self.allocated_bytes),
            format_size(self.reserved_bytes.saturating_sub(self.allocated_bytes))
        )
    }
}

impl std::error::Error for Oom {}

/// PyTorch's `format_size`: bytes, KiB, MiB or GiB with two decimals.
pub fn format_size(size: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * KIB;
    const GIB: u64 = 1024 * MIB;
    if size <= KIB {
        format!("{size} bytes")
    } else if size <= MIB {
        format!("{:.2} KiB", size as f64 / KIB as f64)
    } else if size <= GIB {
        format!("{:.2} MiB", size as f64 / MIB as f64)
    } else {
        format!("{:.2} GiB", size as f64 / GIB as f64)
    }
}
