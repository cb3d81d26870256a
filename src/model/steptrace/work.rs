//! What the GPU does in one training step, read off the step program's sequence: the bytes of
//! every storage the step's ops create (each written once by its kernel and read by the ops
//! that use it), by kind of tensor, and the number of storages (about one per op that makes a
//! new tensor, so the number of kernels PyTorch launches, to first order). The step-time model
//! (`planning::time`) prices these: bytes over the card's memory bandwidth, storages as launch
//! and dispatch overhead.

use super::{Event, StepPhase, Trace, What};

/// The work of the second training step (the first warms caches and allocates the optimizer's
/// states; the second is the one a run repeats).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepWork {
    /// Bytes of the storages the step creates, by [`What`] (indexed by `What as usize`).
    pub bytes_by_what: Vec<u64>,
    /// Storages the step creates.
    pub allocations: u64,
    /// Host memory (offloaded storages) by kind, when its total was highest: what offloading
    /// moves over the host link.
    pub host: Vec<(What, u64)>,
    /// CUDA managed memory the run holds ([`Trace::paged_bytes`]).
    pub paged_bytes: u64,
}

impl Default for StepWork {
    fn default() -> StepWork {
        StepWork {
            bytes_by_what: vec![0; What::ALL.len()],
            allocations: 0,
            host: vec![],
            paged_bytes: 0,
        }
    }
}

impl StepWork {
    /// Bytes of the storages of one kind.
    pub fn bytes(&self, w: What) -> u64 {
        self.bytes_by_what[w as usize]
    }

    /// Host bytes of the kinds `kinds`.
    pub fn host_bytes(&self, kinds: &[What]) -> u128 {
        self.host
            .iter()
            .filter(|h| kinds.contains(&h.0))
            .map(|h| h.1 as u128)
            .sum()
    }

    /// Bytes of every storage the step creates.
    pub fn total_bytes(&self) -> u128 {
        self.bytes_by_what.iter().map(|&b| b as u128).sum()
    }
}

/// The step whose work is read: the second, warm one.
pub const WARM_STEP: u8 = 2;

/// [`StepWork`] of the warm training step of `trace`: its forward (and a preference step's
/// reference forward), backward, optimizer step and `zero_grad`.
pub fn step_work(trace: &Trace) -> StepWork {
    let mut bytes_by_what = vec![0u64; What::ALL.len()];
    let mut allocations = 0u64;
    let ranges = trace
        .phases
        .iter()
        .enumerate()
        .filter_map(|(i, &(start, step, phase))| {
            let training = matches!(
                phase,
                StepPhase::Forward
                    | StepPhase::RefForward
                    | StepPhase::Backward
                    | StepPhase::Optimizer
                    | StepPhase::ZeroGrad
            );
            let end = trace
                .phases
                .get(i + 1)
                .map_or(trace.events.len(), |next| next.0);
            (step == WARM_STEP && training).then_some(start..end)
        });
    for range in ranges {
        for e in &trace.events[range] {
            if let Event::Alloc { id, bytes, .. } = *e {
                let w = trace.labels[id as usize].what;
                let slot = &mut bytes_by_what[w as usize];
                *slot = slot.saturating_add(bytes);
                allocations += 1;
            }
        }
    }
    StepWork {
        bytes_by_what,
        allocations,
        host: trace.host.clone(),
        paged_bytes: trace.paged_bytes,
    }
}
