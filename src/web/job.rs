//! The job's timeline (sections bundle): the settings of the phases around the training step
//! (evaluation, checkpoint saving, the merge) and, phase by phase, the GPU peak against the
//! GPU's capacity, the host-memory peak, the moment, the terms with their formulas and the
//! notes; the phase that decides the verdict is marked. Everything is read off the evaluation's
//! job ([`crate::model::job`]), planned on the chosen GPU.

use leptos::prelude::*;

use crate::formats::report::gib;
use crate::model::job::{Job, JobPhase};
use crate::model::Term;
use crate::planning::evaluate::Evaluation;
use crate::web::controls::{pct, read, status_words};
use crate::web::lang::{t, ts, tx};
use crate::web::layout::{self, phase_title};
use crate::web::setup::setting_controls_typed;
use crate::web::state::UiState;

/// The job section: its settings, then the timeline (or, while a phase after training is still
/// being run for a moved slider, a line saying so).
#[component]
pub fn JobSection(
    /// Page state.
    state: RwSignal<UiState>,
    /// Current evaluation (its job, verdict and capacity).
    eval: Memo<Result<Evaluation, String>>,
) -> impl IntoView {
    let job = Memo::new(move |_| {
        read(eval, |e| {
            e.job
                .clone()
                .map(|j| (j, e.verdict.capacity_bytes, e.verdict.phase))
        })
    });
    view! {
        <section class="card wide" id="job" aria-labelledby="h-job" data-testid="job">
            <h2 id="h-job">{t("The whole job: evaluation, checkpoints, merge")}</h2>
            <p class="hint">{t("A run whose training step fits can still run out of memory at its first evaluation, while saving a checkpoint, or when the adapters are merged. Each phase with its GPU and host-memory peak; the largest GPU peak decides the verdict.")}</p>
            <div class="controls-grid">{setting_controls_typed(layout::JOB, state, None)}</div>
            {move || match job.get() {
                None => view! {
                    <p class="hint" data-testid="job-pending">{t("Working out the phases after training (each is a run of its own)…")}</p>
                }.into_any(),
                Some((j, cap, deciding)) => timeline(j, cap, deciding).into_any(),
            }}
        </section>
    }
}

/// The phases in the order they run.
fn timeline(job: Job, capacity_bytes: u128, deciding: &'static str) -> impl IntoView {
    view! {
        <ol class="job-timeline" data-testid="job-timeline" data-deciding=deciding>
            {job.phases.into_iter().map(|p| { let decides = p.name == deciding; phase_row(p, capacity_bytes, decides) }).collect_view()}
        </ol>
    }
}

/// One phase: its bar against the capacity, its figures and, opened, its terms and notes.
fn phase_row(p: JobPhase, capacity_bytes: u128, decides: bool) -> impl IntoView {
    let status = crate::planning::verdict::verdict_of(p.gpu_peak_bytes, capacity_bytes, p.name)
        .status
        .name();
    let share = p.gpu_peak_bytes as f64 / capacity_bytes.max(1) as f64;
    let name = p.name;
    let (gpu, host, cap) = (
        gib(p.gpu_peak_bytes),
        gib(p.host_peak_bytes),
        gib(capacity_bytes),
    );
    let (allocated, reserved) = (gib(p.allocated_bytes), gib(p.reserved_bytes));
    let moment = p.moment.clone();
    view! {
        <li class="job-phase" data-testid=format!("job-phase-{name}") data-status=status data-deciding=decides.to_string()
            data-gpu-bytes=p.gpu_peak_bytes.to_string() data-host-bytes=p.host_peak_bytes.to_string()>
            <div class="job-head">
                <strong>{t(phase_title(name))}</strong>
                <span class=format!("pill verdict-{status}")>{t(status_words(status))}</span>
                {decides.then(|| view! { <span class="pill decides">{t("decides")}</span> })}
            </div>
            <div class="job-track" role="img" aria-label=tx(move || format!("GPU {gpu} of {cap}", gpu = gib(p.gpu_peak_bytes), cap = gib(capacity_bytes)))>
                <div class=format!("job-fill verdict-{status}") style:width=pct(share.min(1.0))></div>
            </div>
            <p class="job-numbers">
                {t("GPU ")}<strong data-testid=format!("job-gpu-{name}")>{gpu}</strong>{tx(move || format!(" of {cap} (allocated {allocated}, reserved {reserved})"))}
                {t(" · host ")}<strong data-testid=format!("job-host-{name}")>{host}</strong>
            </p>
            <p class="why">{ts(moment)}</p>
            <details>
                <summary>{t("terms, formulas and notes")}</summary>
                <div class="table-wrap" tabindex="0" role="region" aria-label=t("The phase's terms (scrolls sideways)")>
                    <table class="breakdown job-terms">
                        <thead><tr><th scope="col">{t("Where")}</th><th scope="col">{t("What")}</th><th scope="col">{t("Formula")}</th><th scope="col">{t("Size")}</th></tr></thead>
                        <tbody>
                            {term_rows("GPU", &p.terms)}
                            {term_rows("host", &p.host_terms)}
                        </tbody>
                    </table>
                </div>
                <ul class="notes">{p.notes.into_iter().map(|n| view! { <li>{ts(n)}</li> }).collect_view()}</ul>
            </details>
        </li>
    }
}

/// Rows of a phase's terms (the non-zero ones), largest first as the plan orders them.
fn term_rows(place: &'static str, terms: &[Term]) -> impl IntoView {
    terms
        .iter()
        .filter(|x| x.bytes > 0)
        .map(|x| {
            let (formula, values) = (x.formula(), format!("= {}", x.values()));
            view! {
                <tr>
                    <td>{t(place)}</td>
                    <td>{ts(x.label.to_string())}</td>
                    <td><code>{formula}</code><br/><code class="values">{values}</code></td>
                    <td class="num">{gib(x.bytes)}</td>
                </tr>
            }
        })
        .collect_view()
}
