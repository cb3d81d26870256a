//! Planning panels of the page: ranked fixes and myths, config.json import (paste, file, Hub),
//! the length distribution (mid-training OOM) and config export. Logic lives in
//! [`crate::planning::fixes`], [`crate::formats::config_json`], [`crate::planning::lengths`] and
//! [`crate::formats::export`]; these components only wire and format.

use leptos::either::Either;
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
use crate::planning::fit::Fidelity;
use crate::planning::fixes;
use crate::planning::lengths;
use crate::planning::Status;
use crate::web::state::UiState;

use super::controls::flag;
use super::controls::read;
use crate::web::lang::{t, ts, tx};

fn bf16_ok(state: RwSignal<UiState>) -> bool {
    state.with(|st| {
        catalog::find_gpu(&st.gpu)
            .map(|g| g.bf16_ok())
            .unwrap_or(true)
    })
}

/// `data-reserve` of advice: `quick` or `simulated`, as on the results.
fn reserve_name(how: Fidelity) -> &'static str {
    match how {
        Fidelity::Simulated => "simulated",
        Fidelity::Quick => "quick",
    }
}

/// What fits, first: when the plan is out of memory or tight, the cheapest combination of
/// changes that makes the whole job fit at the same sequence length and effective batch, its
/// peak and its cost, and one button to apply it ([`fixes::best_combination_with`]); truncation
/// only as the last resort. The search (a few to hundreds of simulated plans) runs in the
/// page's worker once the state is still ([`crate::web::worker_answers::best_fix_line`]), so
/// the page's thread and its first bundle carry none of it.
#[component]
pub fn BestFix(
    /// Page state.
    state: RwSignal<UiState>,
    /// Current evaluation.
    eval: Memo<Result<Evaluation, String>>,
    /// How advice is judged ([`crate::web::settle::advice_fidelity`]): asked for once it is
    /// simulated (the state is still).
    how: Memo<Fidelity>,
    /// The link of the state: what the worker is asked for.
    query: Memo<String>,
) -> impl IntoView {
    use crate::web::worker::{answer_for, answers};
    use crate::web::worker_answers::{read_best_fix, Best};
    let needs = Memo::new(move |_| read(eval, |e| e.verdict.status != Status::Fits));
    let wanted =
        Memo::new(move |_| (needs.get() && how.get() == Fidelity::Simulated).then(|| query.get()));
    let answered = answers("best", wanted, read_best_fix);
    let best = Memo::new(move |_| {
        if !needs.get() {
            return None;
        }
        answer_for(answered, &query.get())
    });
    move || {
        best.get().map(|b| match b {
            Best::Fix { status, peak_bytes, smi_bytes, speed, last_resort, summary, cost, query: applied } => Either::Left({
                let (seq, eff) = state.with_untracked(|st| (st.settings.seq, st.settings.batch * st.settings.grad_accum));
                let cap = read(eval, |e| e.verdict.capacity_bytes);
                view! {
                    <section class="bestfix" aria-labelledby="h-best" data-testid="best-fix" data-last-resort=last_resort.to_string() data-reserve="simulated">
                        <h2 id="h-best">{tx(move || if last_resort {
                            format!("Nothing fits at {seq} tokens: the last resort, a shorter sequence")
                        } else {
                            format!("What fits: the cheapest change at {seq} tokens × effective batch {eff}")
                        })}</h2>
                        <div class="best-body">
                            <div>
                                <p class="combo" data-testid="best-summary">{ts(summary)}</p>
                                <p class="best-numbers">
                                    <span class=format!("pill verdict-{}", status.name())>{t(status.name())}</span>
                                    {t(" peak ")}<strong data-testid="best-peak">{gib(peak_bytes)}</strong>
                                    {t(" · nvidia-smi ")} {gib(smi_bytes)} {t(" of ")} {gib(cap)}
                                    {t(" · speed: ")} <strong data-testid="best-speed">{ts(speed)}</strong>
                                </p>
                                <p class="why">{ts(cost)}</p>
                            </div>
                            <div class="best-actions">
                                <button type="button" class="primary" data-testid="apply-best" on:click=move |_| {
                                    let q = applied.clone();
                                    state.update(|st| st.settings = crate::web::link::decode_shared(&q, st).settings)
                                }>{t("Apply")}</button>
                                <a href="#fixes">{t("single changes ↓")}</a>
                            </div>
                        </div>
                    </section>
                }
            }),
            Best::Gpu(gpu) => Either::Right(view! {
                    <section class="bestfix" aria-labelledby="h-best" data-testid="best-fix">
                        <h2 id="h-best">{t("Nothing fits on this GPU, at any sequence length")}</h2>
                        <p>{let g = gpu.clone(); tx(move || match &g {
                            Some((_, name)) => format!("The smallest catalog GPU these settings fit on: {name} "),
                            None => "No single GPU of the catalog holds it: see “Several GPUs” below.".into(),
                        })}
                        {gpu.map(|(id, _)| view! { <button type="button" data-testid="use-gpu" on:click=move |_| { let id = id.clone(); state.update(|st| st.gpu = id) }>{t("use it")}</button> })}
                        </p>
                    </section>
            }),
        })
    }
}

/// Single changes ranked (when the plan does not fit or is tight), truncation last, and the myths.
#[component]
pub fn Fixes(
    /// Page state.
    state: RwSignal<UiState>,
    /// Current evaluation.
    eval: Memo<Result<Evaluation, String>>,
    /// How advice is judged ([`crate::web::settle::advice_fidelity`]).
    how: Memo<Fidelity>,
) -> impl IntoView {
    let needs = Memo::new(move |_| read(eval, |e| e.verdict.status != Status::Fits));
    let fixes = Memo::new(move |_| {
        if !needs.get() {
            return vec![];
        }
        let ok = bf16_ok(state);
        let cap = read(eval, |e| e.verdict.capacity_bytes);
        let how = how.get();
        state.with(|st| {
            crate::web::state::arch_of(st)
                .map(|a| {
                    let card = crate::formats::catalog::find_gpu(&st.gpu).ok();
                    fixes::suggest_with(&a, &st.settings, cap, ok, card, how)
                })
                .unwrap_or_default()
                .into_iter()
                .filter(|f| f.id != "combined")
                .collect::<Vec<_>>()
        })
    });
    // The allocator's own fix, with the rest of the settled advice (two more simulations).
    let alloc_fix = Memo::new(move |_| {
        if !needs.get() || how.get() != Fidelity::Simulated {
            return None;
        }
        let cap = read(eval, |e| e.verdict.capacity_bytes);
        state.with(|st| {
            let a = crate::web::state::arch_of(st).ok()?;
            fixes::allocator_fix(&a, &st.settings, cap)
        })
    });
    // Ranked like the others: it costs nothing, so first when it fits; otherwise after the
    // other changes and before truncation, which stays the last resort.
    let alloc_item = move |fitting: bool| {
        move || {
            alloc_fix.get().filter(|f| (f.status != Status::Oom) == fitting).map(|f| {
            let conf = f.alloc_conf.clone();
            let (before, after, smi) = (gib(f.reserved_before_bytes), gib(f.reserved_after_bytes), gib(f.nvidia_smi_bytes));
            view! {
                <li data-testid="fix-expandable_segments" data-saved=f.saved_bytes.to_string()>
                    <strong><code>{format!("PYTORCH_CUDA_ALLOC_CONF={conf}")}</code></strong>
                    <span class=format!("pill verdict-{}", f.status.name())>{t(f.status.name())}</span>
                    <br/>
                    <span>{tx(move || format!("reserved {before} → {after}, nvidia-smi {smi}: no tensor changes, only how the caching allocator reserves"))}</span>
                    <br/>
                    <span class="why">{t("Simulated with lorafit's port of PyTorch's caching allocator, expandable segments included: on an H200 it matched four real runs with this setting within 0.1 %.")}</span>
                    " "
                    <button type="button" data-testid="apply-expandable_segments" on:click=move |_| { let c = conf.clone(); state.update(|st| st.settings.alloc_conf = c) }>{t("apply")}</button>
                </li>
            }
        })
        }
    };
    // The current step's time on the card (its epoch's cost where the catalog cites a rate):
    // each change's time per token and cost scale from it.
    let now = Memo::new(move |_| {
        if !needs.get() {
            return None;
        }
        state.with(|st| {
            let a = crate::web::state::arch_of(st).ok()?;
            let g = crate::formats::catalog::find_gpu(&st.gpu).ok()?;
            eval.with(|e| {
                let p = &e.as_ref().ok()?.plan;
                crate::planning::time::estimate(
                    &a,
                    &st.settings,
                    p,
                    g,
                    None,
                    crate::planning::time::DEFAULT_DATASET_TOKENS,
                )
            })
        })
    });
    // One fix as a list item.
    let fix_item = move |f: fixes::Fix| {
        let settings = f.settings.clone();
        let speed = crate::formats::report::fix_speed(f.time_factor, now.get_untracked().as_ref());
        view! {
            <li data-testid=format!("fix-{}", f.id)>
                <strong>{ts(f.title.clone())}</strong>
                <span class=format!("pill verdict-{}", f.status.name())>{t(f.status.name())}</span>
                {f.last_resort.then(|| view! { <span class="pill last-resort">{t("last resort")}</span> })}
                <br/>
                <span>{let (saved, peak) = (gib(f.saved_bytes.max(0) as u128), gib(f.peak_allocated_bytes)); tx(move || format!("saves {saved} → peak {peak}"))}" · "<span data-testid=format!("fix-speed-{}", f.id)>{ts(speed)}</span>" · "{ts(f.cost.clone())}</span>
                " "
                <button type="button" data-testid=format!("apply-{}", f.id) on:click=move |_| { let t = settings.clone(); state.update(|st| st.settings = t) }>{t("apply")}</button>
            </li>
        }
    };
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
        <section class="card fixes" id="fixes" aria-labelledby="h-fixes">
            <h2 id="h-fixes">{t("Changes one by one")}</h2>
            <p class="hint" class:hidden=needs>{t("It fits: no change needed. When a plan does not fit, each change that saves memory is listed here, re-planned.")}</p>
            <div class:hidden=flag(move || !needs.get())>
                <p class="hint">{t("Each change alone, re-planned: fitting first, then cheapest. Cutting the sequence length is the last resort.")}</p>
                <ol data-testid="fixes" data-reserve=move || reserve_name(how.get())>
                    {alloc_item(true)}
                    {move || fixes.get().into_iter().filter(|f| !f.last_resort).map(fix_item).collect_view()}
                    {alloc_item(false)}
                    {move || fixes.get().into_iter().filter(|f| f.last_resort).map(fix_item).collect_view()}
                </ol>
            </div>
            <details on:toggle=move |ev| { let open = ev.target().and_then(|t| t.dyn_into::<web_sys::HtmlDetailsElement>().ok()).map(|d| d.open()).unwrap_or(false); myths_open.set(open) }>
                <summary data-testid="myths-toggle">{t("Forum remedies, checked against this plan")}</summary>
                <ul data-testid="myths">
                    {move || myths.get().into_iter().map(|m| view! {
                        <li><strong>{t(m.claim)}</strong> " → " {ts(m.delta_bytes.map(gib_signed).unwrap_or_else(|| "not a memory setting".into()))}<br/><span class="why">{ts(m.why.clone())}</span></li>
                    }).collect_view()}
                </ul>
            </details>
        </section>
    }
}

/// A file over `limit_bytes` is refused before it is read, with its size in the message.
pub(super) fn check_size(file: &web_sys::File, limit_bytes: f64) -> Result<(), String> {
    if file.size() > limit_bytes {
        return Err(format!(
            "{} is {:.1} MiB; the limit is {:.0} MiB",
            file.name(),
            file.size() / 1048576.0,
            limit_bytes / 1048576.0
        ));
    }
    Ok(())
}

async fn file_text(input: &web_sys::HtmlInputElement, limit: usize) -> Result<String, String> {
    let file = input
        .files()
        .and_then(|l| l.get(0))
        .ok_or("no file chosen")?;
    check_size(&file, limit as f64)?;
    let text = JsFuture::from(file.text())
        .await
        .map_err(|_| "the browser could not read the file".to_string())?;
    text.as_string()
        .ok_or_else(|| "the file is not text".to_string())
}

/// Reads the file chosen in an `<input type=file>` (size-checked first) and hands over its text.
pub(crate) fn read_chosen_file(
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
    use crate::web::fetch::{fetch_text, FetchError};
    let url = format!("{base}/{id}/resolve/main/config.json");
    fetch_text(&url).await.map_err(|e| match e {
        FetchError::Unreachable => "could not reach the Hugging Face Hub (offline or blocked): the catalog still works, or paste the model's config.json".to_string(),
        FetchError::Status(401 | 403) => format!("{id} is gated or private: accept its license on the Hub, download config.json, and paste it here"),
        FetchError::Status(404) => format!("{id} has no config.json on the Hub (check the spelling)"),
        FetchError::Status(s) => format!("the Hub answered HTTP {s}"),
        FetchError::Unreadable => "unreadable response".to_string(),
    })
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
    let unused: RwSignal<String> = RwSignal::new(String::new());
    let apply = move |t: &str| match config_json::parse_config(t) {
        Ok(read) => {
            unused.set(if read.ignored.is_empty() {
                String::new()
            } else {
                format!(
                    "keys of this config.json the plan does not use: {}",
                    read.ignored.join(", ")
                )
            });
            let mut a = read.value;
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
        Err(e) => {
            unused.set(String::new());
            status.set(Some(Err(e)))
        }
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
        <section class="card import" id="import" aria-labelledby="h-import">
            <h2 id="h-import">{t("A model not in the catalog")}</h2>
            <div class="share-row">
                <label for="hub-id" class="sr">{t("Hugging Face model id")}</label>
                <input type="text" id="hub-id" data-testid="hub-id" placeholder=t("org/name") prop:value=hub_id on:input:target=move |ev| hub_id.set(ev.target().value()) />
                <button type="button" data-testid="hub-fetch" on:click=fetch>{t("Fetch config.json")}</button>
            </div>
            <label for="config-input">{t("…or paste config.json")}</label>
            <textarea id="config-input" rows="4" data-testid="config-input" prop:value=text on:input:target=move |ev| text.set(ev.target().value())></textarea>
            <div class="share-row">
                <button type="button" data-testid="config-apply" on:click=move |_| apply(&text.get_untracked())>{t("Use this config")}</button>
                <input type="file" accept=".json,application/json" aria-label=t("config.json file") data-testid="config-file" on:change=on_file />
                <button type="button" class:hidden=flag(move || state.with(|st| st.custom.is_none())) data-testid="config-clear" on:click=move |_| { state.update(|st| st.custom = None); status.set(None); unused.set(String::new()) }>{t("Back to the catalog model")}</button>
            </div>
            {move || status.get().map(|r| match r {
                Ok(m) => Either::Left(view! { <p class="ok" data-testid="config-status">{ts(m)}</p> }),
                Err(e) => Either::Right(view! { <p class="error" role="alert" data-testid="config-status">{ts(e)}</p> }),
            })}
            <p class="hint" class:hidden=flag(move || unused.with(String::is_empty)) data-testid="config-ignored">{tx(move || unused.get())}</p>
        </section>
    }
}

/// A length distribution a forum example hands to the lengths panel.
#[derive(Clone, Copy)]
pub struct LengthsPreset(pub RwSignal<Option<&'static str>>);

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
    // A forum example preloads a distribution: analyse it against the example's state.
    if let Some(preset) = use_context::<LengthsPreset>() {
        Effect::new(move |_| {
            if let Some(t) = preset.0.get() {
                text.set(t.to_string());
                run(t.to_string());
            }
        });
    }
    view! {
        <section class="card lengths" id="lengths" aria-labelledby="h-lengths">
            <h2 id="h-lengths">{t("Enough memory at first, OOM after a few hundred steps?")}</h2>
            <p class="hint">{t("The peak follows the longest padded batch. Paste token counts (one per line), p50=… p95=… max=…, JSONL samples, or a CSV with a text / length column.")}</p>
            <textarea rows="3" aria-label=t("lengths or samples") data-testid="lengths-input" prop:value=text on:input:target=move |ev| text.set(ev.target().value())></textarea>
            <div class="share-row">
                <label for="cpt">{t("characters per token")}</label>
                <input type="number" id="cpt" min="0.5" max="100" step="0.1" data-testid="input-chars-per-token" prop:value=super::controls::text(move || ratio.get().to_string())
                    on:input:target=move |ev| { if let Ok(v) = ev.target().value().parse::<f64>() { if v.is_finite() { ratio.set(v) } } } />
                <button type="button" data-testid="lengths-analyze" on:click=move |_| run(text.get_untracked())>{t("Analyze")}</button>
                <input type="file" aria-label=t("samples file") data-testid="lengths-file" on:change=on_file />
            </div>
            {move || report.with(|r| match r {
                Some(Err(e)) => Some(Either::Left(view! { <p class="error" role="alert" data-testid="lengths-error">{ts(e.clone())}</p> })),
                Some(Ok(r)) => {
                    let rows = [
                        ("samples", "lengths-samples", format!("{} · p50 {} · p95 {} · max {} tokens", r.stats.n, r.stats.p50, r.stats.p95, r.stats.max)),
                        ("peak, typical batch (p50)", "lengths-typical", gib(r.typical_peak_bytes)),
                        ("peak, longest batch", "lengths-longest", gib(r.longest_peak_bytes)),
                        ("longest length that fits", "lengths-max-fit", r.max_fitting_seq.map(|v| v.to_string()).unwrap_or_else(|| "none".into())),
                        ("first OOM expected", "lengths-oom-step", match r.expected_oom_step {
                            Some(s) => lengths::oom_words(r, s),
                            None => "never: every sample fits".into(),
                        }),
                    ];
                    let advice = r.advice.clone();
                    Some(Either::Right(view! {
                        <dl class="lengths-report" data-testid="lengths-report">
                            {rows.map(|(dt, id, dd)| view! { <dt>{t(dt)}</dt><dd data-testid=id>{ts(dd)}</dd> })}
                        </dl>
                        <ul>{advice.into_iter().map(|a| view! { <li>{ts(a)}</li> }).collect_view()}</ul>
                    }))
                }
                None => None,
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
        <section class="card export" id="export" aria-labelledby="h-export">
            <h2 id="h-export">{t("Configs for this run")}</h2>
            <div class="share-row">
                <label for="export-format">{t("format")}</label>
                <select id="export-format" data-testid="select-export" prop:value=format on:change:target=move |ev| format.set(ev.target().value())>
                    {export::FORMATS.iter().map(|f| view! { <option value=*f>{*f}</option> }).collect_view()}
                </select>
                <button type="button" data-testid="copy-export" on:click=move |_| { let _ = window().navigator().clipboard().write_text(&output.get_untracked()); }>{t("Copy")}</button>
            </div>
            <textarea readonly rows="12" aria-label=t("exported config") data-testid="export-output" prop:value=output></textarea>
        </section>
    }
}
