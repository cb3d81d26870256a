//! Allocator statistics: a port of `c10::CachingAllocator::Stat`,
//! `StatArray` and `DeviceStats` (what `torch.cuda.memory_stats()` reports).

/// Which of the two default pools a block belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PoolKind {
    /// `small_blocks`: blocks of requests of at most kSmallSize (1 MiB).
    Small,
    /// `large_blocks`: blocks of requests above kSmallSize.
    Large,
}

/// One statistic: its current value, its peak since the last reset, and the
/// totals ever added and removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stat {
    /// Current value.
    pub current: u64,
    /// Highest `current` since creation or the last [`Stat::reset_peak`].
    pub peak: u64,
    /// Sum of all increases.
    pub allocated: u64,
    /// Sum of all decreases.
    pub freed: u64,
}

impl Stat {
    /// `increase_stat`.
    pub fn increase(&mut self, amount: u64) {
        self.current = self.current.saturating_add(amount);
        self.peak = self.peak.max(self.current);
        self.allocated = self.allocated.saturating_add(amount);
    }

    /// `decrease_stat` (saturates at zero instead of going negative).
    pub fn decrease(&mut self, amount: u64) {
        debug_assert!(self.current >= amount, "negative tracked stat");
        self.current = self.current.saturating_sub(amount);
        self.freed = self.freed.saturating_add(amount);
    }

    /// `reset_peak_stat`.
    pub fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    /// `reset_accumulated_stat`.
    pub fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }
}

/// A statistic kept for all pools together and for each pool
/// (PyTorch's `StatArray` indexed by `StatType`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatArray {
    /// `StatType::AGGREGATE`.
    pub aggregate: Stat,
    /// `StatType::SMALL_POOL`.
    pub small_pool: Stat,
    /// `StatType::LARGE_POOL`.
    pub large_pool: Stat,
}

impl StatArray {
    fn pool_stat(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }

    /// Increases the aggregate and the pool's stat (`get_stat_types_for_pool`).
    pub fn increase(&mut self, pool: PoolKind, amount: u64) {
        self.aggregate.increase(amount);
        self.pool_stat(pool).increase(amount);
    }

    /// Decreases the aggregate and the pool's stat.
    pub fn decrease(&mut self, pool: PoolKind, amount: u64) {
        self.aggregate.decrease(amount);
        self.pool_stat(pool).decrease(amount);
    }

    fn for_each(&mut self, f: impl Fn(&mut Stat)) {
        f(&mut self.aggregate);
        f(&mut self.small_pool);
        f(&mut self.large_pool);
    }
}

/// `DeviceStats`: everything `torch.cuda.memory_stats()` is built from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// Number of allocated blocks (`allocation`).
    pub allocation: StatArray,
    /// Number of `cudaMalloc`ed segments (`segment`); expandable segments
    /// are not counted, as in PyTorch.
    pub segment: StatArray,
    /// Number of active blocks (`active`): allocated, or freed but still
    /// used by another stream.
    pub active: StatArray,
    /// Number of free blocks that are part of a split segment
    /// (`inactive_split`); expandable segments are excluded, as in PyTorch.
    pub inactive_split: StatArray,
    /// Bytes in allocated blocks (`allocated_bytes`): whole blocks, so it can
    /// exceed the requested bytes. `torch.cuda.memory_allocated()`.
    pub allocated_bytes: StatArray,
    /// Bytes held from the device (`reserved_bytes`): `cudaMalloc`ed segments
    /// plus mapped pages of expandable segments.
    /// `torch.cuda.memory_reserved()`.
    pub reserved_bytes: StatArray,
    /// Bytes in active blocks (`active_bytes`).
    pub active_bytes: StatArray,
    /// Bytes in inactive split blocks (`inactive_split_bytes`).
    pub inactive_split_bytes: StatArray,
    /// Bytes the callers asked for (`requested_bytes`), before rounding.
    pub requested_bytes: StatArray,
    /// `num_alloc_retries`: allocations that needed the
    /// `release_cached_blocks` retry.
    pub num_alloc_retries: u64,
    /// `num_ooms`: allocations that failed with out-of-memory.
    pub num_ooms: u64,
    /// `num_sync_all_streams`: calls of `synchronize_and_free_events`.
    pub num_sync_all_streams: u64,
    /// `num_device_alloc`: `cudaMalloc` calls and expandable page mappings.
    pub num_device_alloc: u64,
    /// `num_device_free`: `cudaFree` calls and expandable page unmappings.
    pub num_device_free: u64,
    /// `oversize_allocations`: allocated blocks of at least max_split_size.
    pub oversize_allocations: Stat,
    /// `oversize_segments`: segments of at least max_split_size.
    pub oversize_segments: Stat,
    /// `max_split_size` in bytes (`None`: unlimited).
    pub max_split_size: Option<u64>,
}

impl Stats {
    fn arrays(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// `resetPeakStats`.
    pub fn reset_peak(&mut self) {
        for a in self.arrays() {
            a.for_each(Stat::reset_peak);
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
    }

    /// `resetAccumulatedStats`.
    pub fn reset_accumulated(&mut self) {
        for a in self.arrays() {
            a.for_each(Stat::reset_accumulated);
        }
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
    }
}
