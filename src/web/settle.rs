//! What the page shows (wasm only): the quick evaluation within a frame of every change, then —
//! once the state has been still for a moment — the settled one, whose reserved, nvidia-smi and
//! verdict come from PyTorch's caching allocator simulated over the step
//! ([`crate::web::state::settle`], tens of milliseconds). The results carry
//! `data-reserve="quick" | "simulated"` (or `"settled"` when no simulation answered), so neither a person nor a test mistakes the quick allowance for the
//! simulated figure. The advice (what fits, single changes) follows one task later
//! ([`advice_fidelity`], one signal for every advice view).

use leptos::prelude::*;

use crate::planning::evaluate::Evaluation;
use crate::planning::fit::Fidelity;
use crate::web::controls::read;
use crate::web::state::{evaluate_state, settle, UiState};

/// How a still state is settled: [`crate::web::state::settle`] (the page: the training step
/// and the phases planned by formula) or [`crate::web::state::settle_whole_job`] (the
/// sections: every phase of the job).
pub type Settle = fn(&UiState, &Evaluation) -> Result<Evaluation, String>;

/// How long the state must stay unchanged before the simulation runs.
const SETTLE_MS: u64 = 120;

/// The evaluation to show, and whether it is the simulated one.
pub fn settled_evaluation(
    state: RwSignal<UiState>,
) -> (Memo<Result<Evaluation, String>>, Memo<bool>) {
    settle_on(
        state,
        Memo::new(move |_| state.with(evaluate_state)),
        settle,
    )
}

/// [`settled_evaluation`] over a quick evaluation the caller already derives.
pub fn settle_on(
    state: RwSignal<UiState>,
    quick: Memo<Result<Evaluation, String>>,
    settle: Settle,
) -> (Memo<Result<Evaluation, String>>, Memo<bool>) {
    let settled: RwSignal<Option<(UiState, Result<Evaluation, String>)>> = RwSignal::new(None);
    Effect::new(move |_| {
        let st = state.get();
        set_timeout(
            move || {
                if state.with_untracked(|now| *now != st) {
                    return; // moved on: a later timer settles the newer state
                }
                let Ok(q) = quick.get_untracked() else {
                    return;
                };
                let r = settle(&st, &q);
                settled.set(Some((st, r)));
            },
            std::time::Duration::from_millis(SETTLE_MS),
        );
    });
    let current = move || {
        settled.with(|s| {
            s.as_ref()
                .filter(|(st, r)| r.is_ok() && state.with(|now| now == st))
                .map(|(_, r)| r.clone())
        })
    };
    let shown = Memo::new(move |_| current().unwrap_or_else(|| quick.get()));
    let simulated = Memo::new(move |_| current().is_some());
    (shown, simulated)
}

/// The page's evaluation with the whole job's verdict: when the settled evaluation leaves a
/// phase after training that runs on the GPU unplanned (the page's bundle carries none), the
/// page's worker plans the job for the state's link ([`crate::web::worker_answers::job_verdict_line`])
/// and its verdict replaces the training step's for that state. Until it answers, or when it
/// cannot, the evaluation says its verdict is not the whole job's (`whole_job`).
pub fn with_job_verdict(
    query: Memo<String>,
    eval: Memo<Result<Evaluation, String>>,
) -> Memo<Result<Evaluation, String>> {
    use crate::web::worker::{answer_for, answers};
    let wanted = Memo::new(move |_| {
        let settled_step_only = eval.with(|r| {
            r.as_ref()
                .is_ok_and(|e| e.plan.reserve_simulated && !e.whole_job)
        });
        settled_step_only.then(|| query.get())
    });
    let answered = answers("job", wanted, crate::web::worker_answers::read_verdict_line);
    Memo::new(move |_| {
        let mut r = eval.get();
        if let Ok(e) = &mut r {
            if !e.whole_job {
                if let Some(v) = answer_for(answered, &query.get()) {
                    e.verdict = v;
                    e.whole_job = true;
                }
            }
        }
        r
    })
}

/// How advice is judged: quickly while the state moves; with the caching allocator simulated
/// once the evaluation has settled — one task later, so the settled verdict paints before the
/// advice (a few simulated plans, a few hundred milliseconds) is worked out. Synchronous in the
/// state: a change drops back to quick at once, never leaving simulated advice of an old state.
pub fn advice_fidelity(
    state: RwSignal<UiState>,
    eval: Memo<Result<Evaluation, String>>,
) -> Memo<Fidelity> {
    let simulated = move || read(eval, |e| e.plan.reserve_simulated);
    let ready: RwSignal<Option<UiState>> = RwSignal::new(None);
    Effect::new(move |_| {
        if simulated() {
            set_timeout(
                move || {
                    if eval.with_untracked(|e| e.as_ref().is_ok_and(|e| e.plan.reserve_simulated)) {
                        ready.set(Some(state.get_untracked()));
                    }
                },
                std::time::Duration::ZERO,
            );
        }
    });
    Memo::new(move |_| {
        let current = ready.with(|r| r.as_ref().is_some_and(|r| state.with(|st| st == r)));
        if simulated() && current {
            Fidelity::Simulated
        } else {
            Fidelity::Quick
        }
    })
}
