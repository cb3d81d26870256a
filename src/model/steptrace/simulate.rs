//! Replays a generated step through the caching allocator.

use super::{generate, Event, Label, StepPhase, Trace};
use crate::model::allocator::{AllocConf, BlockId, CachingAllocator};
use crate::model::arch::Architecture;
use crate::model::error::PlanError;
use crate::model::settings::Settings;

/// Highest reserved / allocated bytes of one phase of one step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhaseFigures {
    /// Step (0 = setup and inputs).
    pub step: u8,
    /// Phase.
    pub phase: StepPhase,
    /// Highest reserved bytes while allocating in the phase.
    pub max_reserved: u64,
}

/// A cached-but-free block at the reserved peak, named by the tensor that last used it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CachedBlock {
    /// Block size.
    pub bytes: u64,
    /// What the tensor that left it held.
    pub label: Label,
}

/// The allocator's view of a training step.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulation {
    /// `max_memory_allocated()`: peak of allocated blocks (rounded, whole blocks).
    pub peak_allocated: u64,
    /// `max_memory_reserved()`.
    pub peak_reserved: u64,
    /// Allocated bytes at the moment reserved peaked.
    pub allocated_at_reserved_peak: u64,
    /// Peak of live tensor bytes (requested sizes).
    pub peak_live: u64,
    /// Highest reserved per phase.
    pub phases: Vec<PhaseFigures>,
    /// Largest free cached blocks at the reserved peak (largest first, at most 8).
    pub cached_free: Vec<CachedBlock>,
    /// Events replayed.
    pub events: usize,
}

/// Generates the step and replays it through the allocator configured by `conf`.
pub fn simulate(arch: &Architecture, s: &Settings, conf: &AllocConf) -> Result<Simulation, PlanError> {
    let trace = generate(arch, s)?;
    Ok(replay(&trace, conf))
}

/// Replays a trace.
pub fn replay(trace: &Trace, conf: &AllocConf) -> Simulation {
    let mut a = CachingAllocator::new(conf.clone(), None);
    let mut live: Vec<BlockId> = vec![BlockId::NULL; trace.labels.len()];
    let mut phases: Vec<PhaseFigures> = vec![];
    let mut next_phase = 0usize;
    let mut best_reserved = 0u64;
    let mut alloc_at = 0u64;
    for (i, e) in trace.events.iter().enumerate() {
        while next_phase < trace.phases.len() && trace.phases[next_phase].0 <= i {
            let (_, step, phase) = trace.phases[next_phase];
            phases.push(PhaseFigures { step, phase, max_reserved: 0 });
            next_phase += 1;
        }
        match *e {
            Event::Alloc { id, bytes } => {
                let Ok(b) = a.malloc(bytes.max(1)) else { continue };
                live[id as usize] = b;
                let r = a.memory_reserved();
                if let Some(p) = phases.last_mut() {
                    p.max_reserved = p.max_reserved.max(r);
                }
                if r > best_reserved {
                    best_reserved = r;
                    alloc_at = a.memory_allocated();
                }
            }
            Event::Free { id } => {
                let b = std::mem::replace(&mut live[id as usize], BlockId::NULL);
                if !b.is_null() {
                    a.free(b);
                }
            }
        }
    }
    let st = a.stats();
    Simulation {
        peak_allocated: st.allocated_bytes.aggregate.peak,
        peak_reserved: st.reserved_bytes.aggregate.peak,
        allocated_at_reserved_peak: alloc_at,
        peak_live: trace.peak_live_bytes,
        phases,
        cached_free: vec![],
        events: trace.events.len(),
    }
}
