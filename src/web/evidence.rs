//! "How accurate is this?" (wasm only): on request, the model against every measured case the
//! project carries ([`crate::formats::validation`], the same table as `lorafit validate`), so a
//! visitor sees the evidence rather than a claim.

use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::formats::validation::{ErrorStats, Validation};
use crate::web::lang::{t, ts};
use crate::web::worker::Job;

fn stats_line(name: &str, s: &ErrorStats) -> Signal<String> {
    ts(format!(
        "{name}: {} cases, median |error| {:.2} %, max {:.2} %, worst under {:+.2} %",
        s.n, s.median_abs_pct, s.max_abs_pct, s.worst_under_pct
    ))
}

/// The model against every measurement, worked out in the page's worker (`validation.json` is
/// fetched there, from the build, so the planner's wasm carries neither the measurements nor
/// the code that reads them, and planning a hundred cases never freezes the page).
async fn validate() -> Result<Validation, String> {
    let json = Job::new("validate").run(|_| {}).await?;
    serde_json::from_str(&json).map_err(|e| format!("the evidence could not be read: {e}"))
}

/// The panel.
#[component]
pub fn Evidence() -> impl IntoView {
    let result: RwSignal<Option<Result<Validation, String>>> = RwSignal::new(None);
    view! {
        <section class="card evidence" id="evidence" aria-label=t("How accurate is this?") data-testid="evidence">
            <h2>{t("How accurate is this?")}</h2>
            <p class="hint">{t("Every measured case lorafit carries — real transformers + peft training steps, PyTorch's own allocator replayed over them, published runs on A100s and runs on an H200 — planned again in this browser (takes a few seconds).")}</p>
            <button type="button" data-testid="evidence-run" on:click=move |_| spawn_local(async move { result.set(Some(validate().await)) })>{t("Show the evidence")}</button>
            {move || result.get().map(|r| match r {
                Err(e) => view! { <p class="error" role="alert">{ts(e)}</p> }.into_any(),
                Ok(v) => view! {
                    <ul data-testid="evidence-summary">
                        <li data-testid="evidence-allocated">{stats_line("peak allocated vs measured", &v.allocated)}</li>
                        <li data-testid="evidence-reserved">{stats_line("peak reserved vs PyTorch's allocator", &v.reserved)}</li>
                        <li data-testid="evidence-smi">{stats_line("nvidia-smi vs real GPU runs (published A100, H200)", &v.smi)}</li>
                        <li>{ts(format!("runs that ran out of memory called out of memory: {} of {}", v.oom_called.0, v.oom_called.1))}</li>
                    </ul>
                    <details>
                        <summary>{t("every case")}</summary>
                        <table class="terms">
                            <thead><tr><th>{t("case")}</th><th>{t("allocated error")}</th><th>{t("reserved error")}</th></tr></thead>
                            <tbody>
                                {v.cases.iter().map(|c| view! {
                                    <tr>
                                        <td>{c.id.clone()}</td>
                                        <td>{format!("{:+.2} %", c.allocated_error_pct)}</td>
                                        <td>{c.reserved_error_pct.map(|e| format!("{e:+.2} %")).unwrap_or_else(|| "—".into())}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    </details>
                }.into_any(),
            })}
        </section>
    }
}
