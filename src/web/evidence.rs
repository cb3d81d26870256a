//! "How accurate is this?" (wasm only): on request, the model against every measured case the
//! project carries ([`crate::formats::validation`], the same table as `lorafit validate`), so a
//! visitor sees the evidence rather than a claim.

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::formats::validation::{validate_json, ErrorStats, Validation};
use crate::web::lang::{t, ts};

fn stats_line(name: &str, s: &ErrorStats) -> Signal<String> {
    ts(format!(
        "{name}: {} cases, median |error| {:.2} %, max {:.2} %, worst under {:+.2} %",
        s.n, s.median_abs_pct, s.max_abs_pct, s.worst_under_pct
    ))
}

/// The measurements, fetched from the build (`validation.json`, copied there by trunk and cached
/// by the service worker) so the planner's wasm does not carry them.
async fn fetch_measurements() -> Result<String, String> {
    let failed = || "could not load the measurements (validation.json)".to_string();
    let resp = JsFuture::from(window().fetch_with_str("./validation.json"))
        .await
        .map_err(|_| failed())?;
    let resp: web_sys::Response = resp.dyn_into().map_err(|_| failed())?;
    if !resp.ok() {
        return Err(failed());
    }
    let text = JsFuture::from(resp.text().map_err(|_| failed())?)
        .await
        .map_err(|_| failed())?;
    text.as_string().ok_or_else(failed)
}

/// The panel.
#[component]
pub fn Evidence() -> impl IntoView {
    let result: RwSignal<Option<Result<Validation, String>>> = RwSignal::new(None);
    view! {
        <section class="evidence" aria-label=t("How accurate is this?") data-testid="evidence">
            <h2>{t("How accurate is this?")}</h2>
            <p class="hint">{t("Every measured case lorafit carries — real transformers + peft training steps, PyTorch's own allocator replayed over them, and published runs on A100s — planned again in this browser (takes a few seconds).")}</p>
            <button type="button" data-testid="evidence-run" on:click=move |_| spawn_local(async move { result.set(Some(fetch_measurements().await.and_then(|j| validate_json(&j)))) })>{t("Show the evidence")}</button>
            {move || result.get().map(|r| match r {
                Err(e) => view! { <p class="error" role="alert">{ts(e)}</p> }.into_any(),
                Ok(v) => view! {
                    <ul data-testid="evidence-summary">
                        <li data-testid="evidence-allocated">{stats_line("peak allocated vs measured", &v.allocated)}</li>
                        <li data-testid="evidence-reserved">{stats_line("peak reserved vs PyTorch's allocator", &v.reserved)}</li>
                        <li data-testid="evidence-smi">{stats_line("nvidia-smi vs published A100 runs", &v.smi)}</li>
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
