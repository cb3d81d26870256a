//! Replays a generated step through the caching allocator ([`crate::model::allocator`]): peak
//! allocated and reserved bytes, per phase, and the cached free blocks at the reserved peak named
//! by the tensors that left them.
//!
//! Every event is replayed: the figures are PyTorch's own for the generated sequence. (Deep
//! models cannot be simulated at a few layers and extrapolated exactly: how the allocator packs a
//! layer's tensors into cached blocks repeats with a period that depends on the sizes — two
//! layers for Llama-2-7B at 1024 tokens, five with checkpointing at 2048 × 4 — and can change
//! regime after several layers, e.g. QLoRA with checkpointing after nine.)

use std::collections::HashMap;

use super::{Event, Label, StepPhase, Trace};
use crate::model::allocator::constants::K_SMALL_SIZE;
use crate::model::allocator::{AddressOrder, AllocConf, BlockId, CachingAllocator, PoolKind};
use crate::model::arch::Architecture;
use crate::model::error::PlanError;
use crate::model::settings::Settings;

/// Highest reserved and allocated bytes of one phase of one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseFigures {
    /// Step (0 = setup and inputs).
    pub step: u8,
    /// Phase.
    pub phase: StepPhase,
    /// Highest `memory_reserved()` while allocating in the phase.
    pub max_reserved: u64,
    /// Highest `memory_allocated()` while allocating in the phase.
    pub max_allocated: u64,
}

/// A cached-but-free block at the reserved peak, named by the tensor that last used it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedBlock {
    /// Block size.
    pub bytes: u64,
    /// What the tensor that was freed there held (None: never used since its segment was made).
    pub label: Option<Label>,
}

/// The allocator's view of a training step.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulation {
    /// `max_memory_allocated()`: peak of allocated blocks (rounded to 512 B; a cached block
    /// handed out whole counts whole).
    pub peak_allocated: u64,
    /// `max_memory_reserved()`.
    pub peak_reserved: u64,
    /// `memory_reserved()` at the moment allocated memory peaked.
    pub reserved_at_allocated_peak: u64,
    /// `memory_allocated()` when reserved memory reached its peak.
    pub allocated_at_reserved_peak: u64,
    /// Peak of live tensor bytes (sum of requested sizes; the model's `peak_allocated_bytes`).
    pub peak_live: u64,
    /// Highest reserved / allocated per step and phase, in run order.
    pub phases: Vec<PhaseFigures>,
    /// Largest cached free blocks when reserved memory reached its peak (largest first, ≤ 8).
    pub cached_free: Vec<CachedBlock>,
    /// Events replayed (all simulations together).
    pub events: usize,
    /// With a device capacity ([`replay_within`]): the first allocation that failed, with what
    /// the allocator held then (its cache already given back).
    pub oom: Option<crate::model::allocator::Oom>,
    /// With a device capacity: allocations that found the device full and succeeded only after
    /// the allocator gave its cached free segments back (`num_alloc_retries`).
    pub alloc_retries: u64,
}

/// Generates the step of `arch` with `s` and replays it through an allocator configured by
/// `conf`.
pub fn simulate(
    arch: &Architecture,
    s: &Settings,
    conf: &AllocConf,
) -> Result<Simulation, PlanError> {
    simulate_on(arch, s, conf, super::Device::Cuda)
}

/// [`simulate`] on a chosen device.
pub fn simulate_on(
    arch: &Architecture,
    s: &Settings,
    conf: &AllocConf,
    device: super::Device,
) -> Result<Simulation, PlanError> {
    let t = super::generate_on(arch, s, device)?;
    Ok(replay(&t, conf))
}

/// Replays a trace through a fresh allocator on a device with room to spare. The cached free
/// blocks are read whenever reserved memory grows (a new segment: the moment a request fit no
/// cached block) and kept for the last such moment, the reserved peak.
pub fn replay(trace: &Trace, conf: &AllocConf) -> Simulation {
    replay_within(trace, conf, None)
}

/// [`replay`] on a device of `device_capacity_bytes` for the allocator (None: room to spare).
/// As in PyTorch, a `cudaMalloc` past the capacity makes the allocator give back its cached
/// free segments and try again (`release_cached_blocks`); an allocation that still fails is
/// the run's out-of-memory error ([`Simulation::oom`]), and its phase's reserved figure is what
/// the allocator would have needed then: what it held plus the request.
pub fn replay_within(
    trace: &Trace,
    conf: &AllocConf,
    device_capacity_bytes: Option<u64>,
) -> Simulation {
    const NAMED: usize = 8;
    let order = match trace.device {
        super::Device::Cuda => AddressOrder::Falling,
        super::Device::Emulated => AddressOrder::Rising,
    };
    let mut a =
        CachingAllocator::new(conf.clone(), device_capacity_bytes).with_address_order(order);
    let mut oom = None;
    let mut live: Vec<BlockId> = vec![BlockId::NULL; trace.labels.len()];
    let mut phases: Vec<PhaseFigures> = Vec::with_capacity(trace.phases.len());
    let mut next_phase = 0usize;
    let (mut best_res, mut best_alloc) = (0u64, 0u64);
    let (mut alloc_at_res, mut res_at_alloc) = (0u64, 0u64);
    // Label of the tensor last freed at each address (large blocks only).
    let mut left: HashMap<u64, Label> = HashMap::new();
    let mut at_peak: Vec<(u64, u64)> = vec![];
    for (i, e) in trace.events.iter().enumerate() {
        while next_phase < trace.phases.len() && trace.phases[next_phase].0 <= i {
            let (_, step, phase) = trace.phases[next_phase];
            phases.push(PhaseFigures {
                step,
                phase,
                max_reserved: 0,
                max_allocated: 0,
            });
            next_phase += 1;
        }
        match *e {
            Event::Alloc { id, bytes, stream } => {
                let b = match a.malloc_on_stream(bytes.max(1), u64::from(stream)) {
                    Ok(b) => b,
                    Err(e) => {
                        let needed = e.reserved_bytes.saturating_add(e.alloc_size);
                        if let Some(p) = phases.last_mut() {
                            p.max_reserved = p.max_reserved.max(needed);
                        }
                        oom.get_or_insert(e);
                        continue;
                    }
                };
                live[id as usize] = b;
                let r = a.memory_reserved();
                let al = a.memory_allocated();
                if let Some(p) = phases.last_mut() {
                    p.max_reserved = p.max_reserved.max(r);
                    p.max_allocated = p.max_allocated.max(al);
                }
                if r > best_res {
                    best_res = r;
                    alloc_at_res = al;
                    if phases.last().is_some_and(|p| p.step > 0) {
                        at_peak = a.largest_free_blocks(PoolKind::Large, NAMED);
                        at_peak.extend(a.largest_free_blocks(PoolKind::Small, NAMED));
                    }
                }
                if al > best_alloc {
                    best_alloc = al;
                    res_at_alloc = r;
                }
            }
            Event::Free { id } => {
                let b = std::mem::replace(&mut live[id as usize], BlockId::NULL);
                if b.is_null() {
                    continue;
                }
                if let Some(info) = a.block_info(b).filter(|x| x.size > K_SMALL_SIZE) {
                    left.insert(info.address, trace.labels[id as usize]);
                }
                a.free(b);
            }
        }
    }
    crate::model::order::sort_by_key(&mut at_peak, |x| std::cmp::Reverse(x.1));
    at_peak.truncate(NAMED);
    Simulation {
        peak_allocated: best_alloc,
        peak_reserved: best_res,
        reserved_at_allocated_peak: res_at_alloc,
        allocated_at_reserved_peak: alloc_at_res,
        peak_live: trace.peak_live_bytes,
        phases,
        cached_free: at_peak
            .into_iter()
            .map(|(addr, bytes)| CachedBlock {
                bytes,
                label: left.get(&addr).copied(),
            })
            .collect(),
        events: trace.events.len(),
        alloc_retries: a.stats.num_alloc_retries,
        oom,
    }
}
