//! Planning panels of the page: ranked fixes and myths, config.json import (paste, file, Hub),
//! the length distribution (mid-training OOM) and config export. Logic lives in
//! `advice`, `import`, `lengths` and `export`; these components only wire and format.

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::formats::catalog;
use crate::formats::config_json;
use crate::formats::export;
use crate::formats::report::{gib, gib_signed};
use crate::model::Architecture;
use crate::planning::evaluate::Evaluation;
use crate::planning::fixes;
use crate::planning::lengths;
use crate::planning::Status;
use crate::web::state::UiState;

use super::app::read;

/// Ranked changes that make the plan fit (when it does not, or is tight), and the myths.
#[component]
pub fn Fixes(
    /// Page state.
    state: RwSignal<UiState>,
    /// Current evaluation.
    eval: Memo<Result<Evaluation, String>>,
) -> impl IntoView {
    let needs = Memo::new(move |_| read(eval, |e| e.verdict.status != Status::Fits));
    let bf16_ok = move || {
        state.with(|st| {
            catalog::find_gpu(&st.gpu)
                .map(|g| g.bf16 != Some(false))
                .unwrap_or(true)
        })
    };
    let fixes = Memo::new(move |_| {
        if !needs.get() {
            return vec![];
        }
        let ok = bf16_ok();
        state.with(|st| {
            let cap = read(eval, |e| e.verdict.capacity_bytes);
            crate::web::state::arch_of(st)
                .map(|a| fixes::suggest(&a, &st.settings, cap, ok))
                .unwrap_or_default()
        })
    });
    let myths_open = RwSignal::new(false);
    let myths = Memo::new(move |_| {
        if !myths_open.get() {
            return vec![];
        }
        state.with(|st| {
            crate::web::state::arch_of(st)
                .map(|a| fixes::myths(&a, &st.settings))
                .unwrap_or_default()
        })
    });
    view! {
        <section class="fixes" aria-label="How to make it fit">
            <Show when=move || needs.get()>
                <h2>"What to change (each option re-planned)"</h2>
                <ol data-testid="fixes">
                    {move || fixes.get().into_iter().map(|f| {
                        let settings = f.settings.clone();
                        view! {
                            <li data-testid=format!("fix-{}", f.id)>
                                <strong>{f.title.clone()}</strong>
                                <span class=format!("pill verdict-{}", f.status.name())>{f.status.name()}</span>
                                <br/>
                                <span>"saves " {gib(f.saved_bytes.max(0) as u128)} " → peak " {gib(f.peak_allocated_bytes)} " · cost: " {f.cost.clone()}</span>
                                " "
                                <button type="button" data-testid=format!("apply-{}", f.id) on:click=move |_| { let t = settings.clone(); state.update(|st| st.settings = t) }>"apply"</button>
                            </li>
                        }
                    }).collect_view()}
                </ol>
            </Show>
            <details on:toggle=move |ev| { let open = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlDetailsElement>().ok()).map(|d| d.open()).unwrap_or(false); myths_open.set(open) }>
                <summary data-testid="myths-toggle">"Forum remedies, checked against this plan"</summary>
                <ul data-testid="myths">
                    {move || myths.get().into_iter().map(|m| view! {
                        <li><strong>{m.claim}</strong> " → " {m.delta_bytes.map(gib_signed).unwrap_or_else(|| "not a memory setting".into())}<br/><span class="why">{m.why}</span></li>
                    }).collect_view()}
                </ul>
            </details>
        </section>
    }
}

async fn file_text(input: &web_sys::HtmlInputElement, limit: usize) -> Result<String, String> {
    let file = input
        .files()
        .and_then(|l| l.get(0))
        .ok_or("no file chosen")?;
    if file.size() > limit as f64 {
        return Err(format!(
            "{} is {:.1} MiB; the limit is {} MiB",
            file.name(),
            file.size() / 1048576.0,
            limit >> 20
        ));
    }
    let text = JsFuture::from(file.text())
        .await
        .map_err(|_| "the browser could not read the file".to_string())?;
    text.as_string()
        .ok_or_else(|| "the file is not text".to_string())
}

/// Reads the file chosen in an `<input type=file>` (size-checked first) and hands over its text.
fn read_chosen_file(
    ev: leptos::ev::Event,
    limit: usize,
    done: impl FnOnce(Result<String, String>) + 'static,
) {
    let Some(input) = ev
        .target()
        .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
    else {
        return;
    };
    spawn_local(async move { done(file_text(&input, limit).await) });
}

fn valid_hub_id(id: &str) -> bool {
    let parts: Vec<&str> = id.split('/').collect();
    id.len() <= 96
        && parts.len() == 2
        && parts.iter().all(|p| {
            !p.is_empty()
                && !p.starts_with('.')
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        })
}

async fn fetch_config(base: &str, id: &str) -> Result<String, String> {
    let url = format!("{base}/{id}/resolve/main/config.json");
    let resp = JsFuture::from(window().fetch_with_str(&url))
        .await
        .map_err(|_| "could not reach the Hugging Face Hub (offline or blocked): the catalog still works, or paste the model's config.json".to_string())?;
    let resp: web_sys::Response = resp
        .dyn_into()
        .map_err(|_| "unexpected fetch result".to_string())?;
    match resp.status() {
        200 => {}
        401 | 403 => return Err(format!("{id} is gated or private: accept its license on the Hub, download config.json, and paste it here")),
        404 => return Err(format!("{id} has no config.json on the Hub (check the spelling)")),
        s => return Err(format!("the Hub answered HTTP {s}")),
    }
    let text = JsFuture::from(resp.text().map_err(|_| "unreadable response".to_string())?)
        .await
        .map_err(|_| "unreadable response".to_string())?;
    text.as_string()
        .ok_or_else(|| "unreadable response".to_string())
}

/// Use a model that is not in the catalog: paste or upload config.json, or fetch it by id.
#[component]
pub fn Import(
    /// Page state.
    state: RwSignal<UiState>,
) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let status: RwSignal<Option<Result<String, String>>> = RwSignal::new(None);
    let hub_id = RwSignal::new(String::new());
    let apply = move |t: &str| match config_json::parse_config(t) {
        Ok(mut a) => {
            a.num_key_value_heads = Some(a.kv_heads());
            a.head_dim = Some(a.head_dim());
            let msg = format!(
                "using the imported {} config: {:.3} B parameters",
                a.family.name(),
                a.total_params() as f64 / 1e9
            );
            a.name = "imported config".into();
            let a: Architecture = a;
            state.update(|st| st.custom = Some(a));
            status.set(Some(Ok(msg)));
        }
        Err(e) => status.set(Some(Err(e))),
    };
    let on_file = move |ev: leptos::ev::Event| {
        read_chosen_file(ev, config_json::MAX_CONFIG_BYTES, move |r| match r {
            Ok(t) => {
                text.set(t.clone());
                apply(&t);
            }
            Err(e) => status.set(Some(Err(e))),
        })
    };
    let fetch = move |_| {
        let id = hub_id.get_untracked().trim().to_string();
        if !valid_hub_id(&id) {
            status.set(Some(Err(format!(
                "{:?} is not a model id like org/name",
                id.chars().take(40).collect::<String>()
            ))));
            return;
        }
        let base = state
            .with_untracked(|st| st.hub.clone())
            .unwrap_or_else(|| "https://huggingface.co".into());
        status.set(Some(Ok(format!("fetching {id} …"))));
        spawn_local(async move {
            match fetch_config(&base, &id).await {
                Ok(t) => {
                    text.set(t.clone());
                    apply(&t);
                }
                Err(e) => status.set(Some(Err(e))),
            }
        });
    };
    view! {
        <section class="import" aria-label="Your model">
            <h2>"A model not in the catalog"</h2>
            <div class="share-row">
                <label for="hub-id" class="sr">"Hugging Face model id"</label>
                <input type="text" id="hub-id" data-testid="hub-id" placeholder="org/name" prop:value=move || hub_id.get() on:input:target=move |ev| hub_id.set(ev.target().value()) />
                <button type="button" data-testid="hub-fetch" on:click=fetch>"Fetch config.json"</button>
            </div>
            <label for="config-input">"…or paste config.json"</label>
            <textarea id="config-input" rows="4" data-testid="config-input" prop:value=move || text.get() on:input:target=move |ev| text.set(ev.target().value())></textarea>
            <div class="share-row">
                <button type="button" data-testid="config-apply" on:click=move |_| apply(&text.get_untracked())>"Use this config"</button>
                <input type="file" accept=".json,application/json" aria-label="config.json file" data-testid="config-file" on:change=on_file />
                <Show when=move || state.with(|st| st.custom.is_some())>
                    <button type="button" data-testid="config-clear" on:click=move |_| { state.update(|st| st.custom = None); status.set(None) }>"Back to the catalog model"</button>
                </Show>
            </div>
            {move || status.get().map(|r| match r {
                Ok(m) => view! { <p class="ok" data-testid="config-status">{m}</p> }.into_any(),
                Err(e) => view! { <p class="error" role="alert" data-testid="config-status">{e}</p> }.into_any(),
            })}
        </section>
    }
}

/// Mid-training OOM: peak at the typical vs the longest batch of a length distribution.
#[component]
pub fn Lengths(
    /// Page state.
    state: RwSignal<UiState>,
    /// Current evaluation (capacity).
    eval: Memo<Result<Evaluation, String>>,
) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let ratio = RwSignal::new(lengths::DEFAULT_CHARS_PER_TOKEN);
    let report: RwSignal<Option<Result<lengths::LengthReport, String>>> = RwSignal::new(None);
    let run = move |t: String| {
        let r = lengths::parse_lengths(&t, ratio.get_untracked()).and_then(|ls| {
            let cap = read(eval, |e| e.verdict.capacity_bytes);
            state.with_untracked(|st| {
                crate::web::state::arch_of(st)
                    .and_then(|a| lengths::analyze(&a, &st.settings, cap, &ls))
            })
        });
        report.set(Some(r));
    };
    let on_file = move |ev: leptos::ev::Event| {
        read_chosen_file(ev, lengths::MAX_INPUT_BYTES, move |r| match r {
            Ok(t) => run(t),
            Err(e) => report.set(Some(Err(e))),
        })
    };
    view! {
        <section class="lengths" aria-label="Length distribution">
            <h2>"Enough memory at first, OOM after a few hundred steps?"</h2>
            <p class="hint">"The peak follows the longest padded batch. Paste token counts (one per line), p50=… p95=… max=…, JSONL samples, or a CSV with a text / length column."</p>
            <textarea rows="3" aria-label="lengths or samples" data-testid="lengths-input" prop:value=move || text.get() on:input:target=move |ev| text.set(ev.target().value())></textarea>
            <div class="share-row">
                <label for="cpt">"characters per token"</label>
                <input type="number" id="cpt" min="0.5" max="100" step="0.1" data-testid="input-chars-per-token" prop:value=move || ratio.get().to_string()
                    on:input:target=move |ev| { if let Ok(v) = ev.target().value().parse::<f64>() { if v.is_finite() { ratio.set(v) } } } />
                <button type="button" data-testid="lengths-analyze" on:click=move |_| run(text.get_untracked())>"Analyze"</button>
                <input type="file" aria-label="samples file" data-testid="lengths-file" on:change=on_file />
            </div>
            {move || report.get().map(|r| match r {
                Err(e) => view! { <p class="error" role="alert" data-testid="lengths-error">{e}</p> }.into_any(),
                Ok(r) => view! {
                    <dl class="lengths-report" data-testid="lengths-report">
                        <dt>"samples"</dt><dd>{format!("{} · p50 {} · p95 {} · max {} tokens", r.stats.n, r.stats.p50, r.stats.p95, r.stats.max)}</dd>
                        <dt>"peak, typical batch (p50)"</dt><dd data-testid="lengths-typical">{gib(r.typical_peak_bytes)}</dd>
                        <dt>"peak, longest batch"</dt><dd data-testid="lengths-longest">{gib(r.longest_peak_bytes)}</dd>
                        <dt>"longest length that fits"</dt><dd data-testid="lengths-max-fit">{r.max_fitting_seq.map(|v| v.to_string()).unwrap_or_else(|| "none".into())}</dd>
                        <dt>"first OOM expected"</dt><dd data-testid="lengths-oom-step">{match r.expected_oom_step {
                            Some(s) => lengths::oom_words(&r, s),
                            None => "never: every sample fits".into(),
                        }}</dd>
                    </dl>
                    <ul>{r.advice.into_iter().map(|a| view! { <li>{a}</li> }).collect_view()}</ul>
                }.into_any(),
            })}
        </section>
    }
}

/// Copy-paste configs that reproduce the planned run.
#[component]
pub fn Export(
    /// Page state.
    state: RwSignal<UiState>,
) -> impl IntoView {
    let format = RwSignal::new("python".to_string());
    let output = Memo::new(move |_| {
        let f = format.get();
        state.with(|st| {
            let id = match &st.custom {
                Some(_) => "path/to/your-model".to_string(),
                None => catalog::find_model(&st.model)
                    .map(|m| m.hf_id.clone())
                    .unwrap_or_default(),
            };
            match crate::web::state::arch_of(st) {
                Ok(a) => export::export(&f, &id, &a, &st.settings).unwrap_or_else(|e| e),
                Err(e) => e,
            }
        })
    });
    view! {
        <section class="export" aria-label="Export">
            <h2>"Configs for this run"</h2>
            <div class="share-row">
                <label for="export-format">"format"</label>
                <select id="export-format" data-testid="select-export" prop:value=move || format.get() on:change:target=move |ev| format.set(ev.target().value())>
                    {export::FORMATS.iter().map(|f| view! { <option value=*f>{*f}</option> }).collect_view()}
                </select>
                <button type="button" data-testid="copy-export" on:click=move |_| { let _ = window().navigator().clipboard().write_text(&output.get_untracked()); }>"Copy"</button>
            </div>
            <textarea readonly rows="12" aria-label="exported config" data-testid="export-output" prop:value=move || output.get()></textarea>
        </section>
    }
}
