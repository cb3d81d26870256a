//! The web page (wasm only). One `RwSignal<UiState>` holds everything a link carries; every
//! number is derived through `Memo`s from the planner; views only format and draw geometry
//! computed in [`crate::web::chart`]. The URL is kept in sync (replaceState) so reload and shared
//! links restore the plan.
//!
//! Order of the page, by importance: the verdict and the breakdown bar (the hero), what fits when
//! it does not, the settings changed most often; then titled sections for everything else. The
//! embed (`?embed=1`) keeps the hero and three sliders.

use leptos::prelude::*;
use wasm_bindgen::JsValue;

use crate::formats::report::{gib, gib_signed};
use crate::formats::{catalog, fields};
use crate::model::{plan, Settings, Target};
use crate::planning::evaluate::{self, Axis, Evaluation, BATCH_SEARCH_MAX, SEQ_SEARCH_MAX};
use crate::planning::{fit, verdict};
use crate::web::chart::{self, Group};
use crate::web::controls::{flag, text, FieldControl, SelectControl, Toggle};
use crate::web::i18n::{tr, Lang};
use crate::web::lang::{now, t, ts, tx};
use crate::web::layout;
use crate::web::link;
use crate::web::state::{arch_of, UiState};

/// Mounts the page (or, with `embed=1`, the embed) on `<body>`. Two mounts, not one view
/// switching between them, so neither is type-erased (smaller wasm).
pub fn mount() {
    let mut link = link::decode(&window().location().search().unwrap_or_default());
    // First visit without `lang` in the link: the browser's preferred languages decide, and a
    // Chinese choice goes into the link (so a copied link and a reload keep it).
    if link.0.lang.is_none() {
        let langs: Vec<String> = window()
            .navigator()
            .languages()
            .iter()
            .filter_map(|v| v.as_string())
            .collect();
        if Lang::from_preferences(langs.iter().map(String::as_str)) == Lang::Zh {
            link.0.lang = Some(Lang::Zh);
        }
    }
    let show = move |link: (UiState, Vec<String>)| {
        if link.0.embed {
            leptos::mount::mount_to_body(move || view! { <Embed link=link /> })
        } else {
            leptos::mount::mount_to_body(move || view! { <App link=link /> })
        }
    };
    // Shown in Chinese: the table first, so the page never flashes English.
    if link.0.lang == Some(Lang::Zh) && !crate::web::i18n::installed() {
        // (Leptos's executor starts with the mount: the browser's own until then.)
        wasm_bindgen_futures::spawn_local(async move {
            if let Err(e) = crate::web::lang::load_zh(ZH_URL).await {
                // English, and said so (not fetched again by the switch's effect).
                link.0.lang = Some(Lang::En);
                link.1.push(e);
            }
            show(link)
        });
    } else {
        show(link)
    }
}

/// The Chinese table, copied into the build (`data/zh.json`), fetched when first needed.
const ZH_URL: &str = "./zh.json";

fn page_url_without_query() -> String {
    let loc = window().location();
    let origin = loc.origin().unwrap_or_default();
    let path = loc.pathname().unwrap_or_default();
    format!("{origin}{path}")
}

fn copy_to_clipboard(text: &str) {
    // Best effort: a blocked clipboard leaves the text visible in the field next to the button.
    let _ = window().navigator().clipboard().write_text(text);
}

/// The controls of the named settings, in order (names from [`layout`]; a name missing from the
/// table, which a native test rules out, is skipped). Controls that mean nothing for the current
/// settings ([`layout::relevant`]) are hidden.
fn setting_controls(
    names: &'static [&'static str],
    state: RwSignal<UiState>,
    then: Option<fn(&mut Settings)>,
) -> impl IntoView {
    names
        .iter()
        .filter_map(|n| fields::by_name(n))
        .map(move |field| {
            let hidden = flag(move || state.with(|st| !layout::relevant(field.name, &st.settings)));
            view! { <div class="cond" class:hidden=hidden><FieldControl field=field state=state then=then /></div> }
        })
        .collect_view()
}

/// The settings with one swept value fixed, so memos over them skip the work when only that
/// value moves (the curve vs length does not change when the length does).
fn without(st: &UiState, axis: Axis) -> UiState {
    let mut k = st.clone();
    k.embed = false;
    match axis {
        Axis::Seq => k.settings.seq = 1,
        Axis::Batch => k.settings.batch = 1,
    }
    k
}

/// The state, the notices about its link, the evaluation and the link of the state.
type Page = (
    RwSignal<UiState>,
    Vec<String>,
    Memo<Result<Evaluation, String>>,
    Memo<String>,
    Memo<bool>,
);

/// What both the page and the embed hold: the state (from the link), the notices about the
/// link, the evaluation, and the link of the state. The plan and verdict follow every change;
/// each fit limit is keyed on the state without the value it sweeps, so a slider move re-plans
/// once for the plan and once per bisection step of the other limit, not forty times.
fn setup((initial, notices): (UiState, Vec<String>)) -> Page {
    let state = RwSignal::new(initial);
    // The language: the views below translate through it, and `<html lang>` follows it. Chinese
    // once its table is in: switching to it fetches the table the first time (English until
    // then; back to English if it cannot be fetched).
    let zh_ready = RwSignal::new(crate::web::i18n::installed());
    Effect::new(move |_| {
        if state.with(|st| st.lang == Some(Lang::Zh)) && !zh_ready.get() {
            leptos::task::spawn_local(async move {
                match crate::web::lang::load_zh(ZH_URL).await {
                    Ok(()) => zh_ready.set(true),
                    Err(e) => {
                        web_sys::console::warn_1(&e.into());
                        state.update(|st| st.lang = Some(Lang::En));
                    }
                }
            });
        }
    });
    let lang = Memo::new(
        move |_| match state.with(|st| st.lang.unwrap_or_default()) {
            Lang::Zh if !zh_ready.get() => Lang::En,
            l => l,
        },
    );
    crate::web::lang::provide(lang);
    Effect::new(move |_| {
        let l = lang.get();
        if let Some(root) = document().document_element() {
            let _ = root.set_attribute("lang", l.html_tag());
        }
        document().set_title(&tr(l, "lorafit — LoRA / QLoRA GPU-memory planner"));
    });
    let limit = move |axis: Axis| {
        let key = Memo::new(move |_| state.with(|st| without(st, axis)));
        // Started from the previous answer: two plans per slider move when it does not change.
        Memo::new(move |prev: Option<&Option<u64>>| {
            key.with(|st| {
                let a = arch_of(st).ok()?;
                let cap = catalog::find_gpu(&st.gpu).ok()?.capacity_bytes();
                let (batch, max) = match axis {
                    Axis::Seq => (false, SEQ_SEARCH_MAX),
                    Axis::Batch => (true, BATCH_SEARCH_MAX),
                };
                fit::max_near(
                    &a,
                    &st.settings,
                    cap,
                    batch,
                    max,
                    prev.copied().flatten(),
                    fit::Fidelity::Quick,
                )
            })
        })
    };
    let (max_seq, max_batch) = (limit(Axis::Seq), limit(Axis::Batch));
    let eval = Memo::new(move |_| {
        state.with(|st| {
            let a = arch_of(st)?;
            let g = catalog::find_gpu(&st.gpu)?;
            let p = plan(&a, &st.settings).map_err(|e| e.to_string())?;
            Ok(Evaluation {
                verdict: verdict(&p, g.capacity_bytes()),
                plan: p,
                gpu_name: g.name.clone(),
                max_batch: max_batch.get(),
                max_seq: max_seq.get(),
            })
        })
    });
    // Reserved, nvidia-smi and the verdict settle on the allocator simulation once the state
    // is still (web::settle).
    let (eval, simulated) = crate::web::settle::settle_on(state, eval);
    let query = Memo::new(move |_| state.with(link::encode));
    sync_address_bar(query);
    (state, notices, eval, query, simulated)
}

fn notice_list(notices: Vec<String>) -> impl IntoView {
    (!notices.is_empty()).then(|| {
        view! {
            <ul class="notices" role="status" data-testid="notices">
                {notices.into_iter().map(|n| view! { <li>{ts(n)}</li> }).collect_view()}
            </ul>
        }
    })
}

/// The embed (`?embed=1`, for iframes from 480 × 360 to 800 × 600): the hero, three sliders and
/// a link to the full page with the same state.
#[component]
pub fn Embed(
    /// The decoded link: state and notices.
    link: (UiState, Vec<String>),
) -> impl IntoView {
    let (state, notices, eval, _, simulated) = setup(link);
    let open = text(move || {
        let st = state.with(|st| UiState {
            embed: false,
            ..st.clone()
        });
        format!("{}?{}", page_url_without_query(), link::encode(&st))
    });
    let model = tx(move || {
        state.with(|st| {
            if st.custom.is_some() {
                "imported config".to_string()
            } else {
                st.model.clone()
            }
        })
    });
    view! {
        <div class="page embed">
            {notice_list(notices)}
            <main data-reserve=move || reserve_state(simulated, eval)>
                <Hero eval=eval />
                <div class="embed-controls" role="group" aria-label=t("Settings")>{setting_controls(layout::EMBED, state, None)}</div>
                <p class="embed-foot">
                    <span>{model}</span>
                    <a href=open target="_blank" rel="noopener" data-testid="open-full">{t("open in lorafit ↗")}</a>
                </p>
            </main>
        </div>
    }
}

/// The planner page.
#[component]
pub fn App(
    /// The decoded link: state and notices.
    link: (UiState, Vec<String>),
) -> impl IntoView {
    let (state, notices, eval, query, simulated) = setup(link);
    let advice = crate::web::settle::advice_fidelity(state, eval);
    let pinned: RwSignal<Option<Evaluation>> = RwSignal::new(None);
    let gpu_panel = RwSignal::new(false);
    let curve_key = Memo::new(move |_| state.with(|st| without(st, st.axis)));
    let curve = Memo::new(move |_| {
        curve_key.with(|st| {
            arch_of(st)
                .map(|a| evaluate::curve(&a, &st.settings, st.axis))
                .unwrap_or_default()
        })
    });
    let sections: [(&str, Signal<String>); 12] = [
        ("more", t("More settings")),
        ("gpus", t("Several GPUs")),
        ("fixes", t("Changes one by one")),
        ("curve", t("Curve")),
        ("compare", t("Compare")),
        ("terms", t("Every term")),
        ("lengths", t("Lengths")),
        ("measured", t("A real run")),
        ("import", t("Your model")),
        ("export", t("Export")),
        ("evidence", t("Accuracy")),
        ("time", t("Time")),
    ];
    view! {
        <div class="page">
            <header class="top">
                <h1>"lorafit"</h1>
                <LangSwitch state=state />
                <p class="tagline">{t("Will this LoRA / QLoRA fine-tune fit, and where does every GiB go? Planned in your browser.")}</p>
            </header>
            {notice_list(notices)}
            <main data-reserve=move || reserve_state(simulated, eval)>
                <Hero eval=eval state=state advice=advice />
                <Essentials state=state />
                <Examples state=state />
                <nav class="toc" aria-label=t("Sections")>
                    {sections.into_iter().map(|(id, label)| view! { <a href=format!("#{id}")>{label}</a> }).collect_view()}
                </nav>
                <div class="sections">
                    <section class="card" id="more" aria-labelledby="h-more">
                        <h2 id="h-more">{t("More training settings")}</h2>
                        <div class="controls-grid">{setting_controls(layout::TRAINING, state, None)}</div>
                        <fieldset class="targets">
                            <legend>{t("LoRA target modules")}</legend>
                            <Toggle label="all-linear" testid="target-all" checked=flag(move || state.with(|st| st.settings.targets.len() == Target::ALL.len()))
                                on_set=Callback::new(move |on: bool| state.update(|st| st.settings.targets = if on { Target::ALL.to_vec() } else { vec![Target::Q, Target::V] })) />
                            {setting_controls(&["target_modules"], state, None)}
                        </fieldset>
                        <fieldset class="targets">
                            <legend>{t("modules_to_save (trained in full)")}</legend>
                            {setting_controls(&["modules_to_save"], state, None)}
                        </fieldset>
                        <Show when=move || state.with(|st| arch_of(st).is_ok_and(|a| a.is_moe()))>
                            <fieldset class="targets moe" data-testid="moe-settings">
                                <legend>{t("Mixture of experts")}</legend>
                                {setting_controls(layout::MOE, state, None)}
                            </fieldset>
                        </Show>
                    </section>
                    <section class="card" id="gpus" aria-labelledby="h-gpus">
                        <h2 id="h-gpus">{t("Several GPUs")}</h2>
                        <p class="hint">{t("With more than one GPU, every number is per GPU; a strategy and CPU offload appear here.")}</p>
                        <div class="controls-grid">{setting_controls(layout::GPUS, state, Some(layout::after_gpu_count))}</div>
                    </section>
                    <super::panels::Fixes state=state eval=eval how=advice />
                    <CurveChart curve=curve eval=eval state=state />
                    <Compare pinned=pinned eval=eval />
                    <Tables eval=eval />
                    <super::panels::Lengths state=state eval=eval />
                    <super::measured::MeasuredRun state=state />
                    <super::panels::Import state=state />
                    <super::panels::Export state=state />
                    <super::evidence::Evidence />
                    <section class="card" id="time" aria-labelledby="h-time">
                        <h2 id="h-time">{t("How long will it take?")}</h2>
                        <p class="hint">{t("Step time and throughput from the FLOPs of the planned step, and a WebGPU microbenchmark of one adapted Linear on this device (loaded only when asked for).")}</p>
                        <button type="button" data-testid="open-gpu-panel" on:click=move |_| gpu_panel.set(true)>{t("Time estimate & measure my GPU")}</button>
                        {move || gpu_panel.get().then(|| view! {
                            <iframe data-testid="gpu-panel" class="gpu-panel" title=t("GPU benchmark and time estimate") src=text(move || format!("./gpu/?{}", query.get()))></iframe>
                        })}
                    </section>
                    <Share state=state query=query />
                </div>
            </main>
        </div>
    }
}

/// The forum's questions as one-click examples ([`crate::web::examples`]): a click applies the
/// example's first configuration; the Qwen2-7B guide's table is planned row by row on the spot;
/// the mid-training example hands its length distribution to the lengths panel.
#[component]
fn Examples(state: RwSignal<UiState>) -> impl IntoView {
    use crate::web::examples::{state_of, table, EXAMPLES};
    let preset = super::panels::LengthsPreset(RwSignal::new(None));
    provide_context(preset);
    let open: RwSignal<Option<&'static str>> = RwSignal::new(None);
    let apply = move |q: &str| {
        let next = state_of(q);
        state.update(|st| {
            st.model = next.model;
            st.gpu = next.gpu;
            st.settings = next.settings;
            st.custom = None;
        });
    };
    view! {
        <section class="card examples" aria-labelledby="h-examples" data-testid="examples">
            <h2 id="h-examples">{t("Questions from the forums, answered")}</h2>
            <ul class="example-list">
                {EXAMPLES.iter().map(|ex| view! {
                    <li>
                        <button type="button" data-testid=format!("example-{}", ex.id) aria-pressed=move || (open.get() == Some(ex.id)).to_string()
                            on:click=move |_| {
                                apply(ex.rows[0].1);
                                open.set(Some(ex.id));
                                preset.0.set(ex.lengths);
                                if ex.lengths.is_some() {
                                    if let Some(el) = document().get_element_by_id("lengths") {
                                        el.scroll_into_view();
                                    }
                                }
                            }>{t(ex.title)}</button>
                        <q lang="zh-CN">{ex.asked}</q>
                    </li>
                }).collect_view()}
            </ul>
            {move || (open.get() == Some(EXAMPLES[0].id)).then(|| {
                let rows = table(&EXAMPLES[0]);
                view! {
                    <div class="table-wrap" tabindex="0" role="region" aria-label=t("The guide's configurations, planned")>
                    <table class="example-table" data-testid="example-table">
                        <thead><tr><th scope="col">{t("Configuration (LoRA r64 on q, v, o)")}</th><th scope="col">{t("Peak allocated")}</th><th scope="col">{t("nvidia-smi")}</th><th scope="col">{t("Verdict")}</th><th></th></tr></thead>
                        <tbody>
                            {rows.into_iter().enumerate().map(|(i, (label, st, e))| {
                                let q = EXAMPLES[0].rows[i].1;
                                let (peak, smi, status) = match &e {
                                    Ok(e) => (gib(e.plan.peak_allocated_bytes), gib(e.plan.nvidia_smi_bytes), e.verdict.status.name()),
                                    Err(_) => (String::new(), String::new(), ""),
                                };
                                let _ = st;
                                view! {
                                    <tr data-testid=format!("example-row-{i}") data-status=status>
                                        <td>{t(label)}</td><td class="num">{peak}</td><td class="num">{smi}</td>
                                        <td><span class=format!("pill verdict-{status}")>{t(status_words(status))}</span></td>
                                        <td><button type="button" data-testid=format!("example-apply-{i}") on:click=move |_| apply(q)>{t("apply")}</button></td>
                                    </tr>
                                }
                            }).collect_view()}
                        </tbody>
                    </table>
                    </div>
                }
            })}
        </section>
    }
}

/// The language switch: one click to the other language (kept in the link).
#[component]
fn LangSwitch(state: RwSignal<UiState>) -> impl IntoView {
    let lang = Memo::new(move |_| state.with(|st| st.lang.unwrap_or_default()));
    view! {
        <button type="button" class="lang-switch" data-testid="lang-switch"
            lang=move || lang.get().other().html_tag()
            aria-label=move || if lang.get() == Lang::En { "切换到简体中文" } else { "Switch to English" }
            on:click=move |_| state.update(|st| st.lang = Some(st.lang.unwrap_or_default().other()))>
            {move || if lang.get() == Lang::En { "中文" } else { "English" }}
        </button>
    }
}

/// Keeps the address bar in sync (no history entries): reload and bookmarks restore the plan.
/// replaceState costs about a millisecond, so slider drags update it at most every 200 ms.
fn sync_address_bar(query: Memo<String>) {
    let pending = StoredValue::new(false);
    Effect::new(move |_| {
        query.track();
        if pending.get_value() {
            return;
        }
        pending.set_value(true);
        set_timeout(
            move || {
                pending.set_value(false);
                let url = format!("?{}", query.get_untracked());
                if let Ok(h) = window().history() {
                    let _ = h.replace_state_with_url(&JsValue::NULL, "", Some(&url));
                }
            },
            std::time::Duration::from_millis(200),
        );
    });
}

/// Model and GPU pickers and the settings changed most often ([`layout::ESSENTIAL`]).
#[component]
fn Essentials(state: RwSignal<UiState>) -> impl IntoView {
    let search = RwSignal::new(String::new());
    let current_model = Memo::new(move |_| state.with(|st| st.model.clone()));
    let model_options =
        Memo::new(move |_| crate::web::state::model_options(&search.get(), &current_model.get()));
    let gpu_options = crate::web::state::gpu_options();
    view! {
        <section class="card essentials" aria-label=t("Settings")>
            <div class="controls-grid">
                <div class="model-pick">
                    <SelectControl label="Model" testid="select-model" options=model_options
                        value=current_model
                        on_set=Callback::new(move |v: String| state.update(|st| st.model = v)) />
                    <input type="search" aria-label=t("Filter the models") data-testid="search-model" placeholder=t("filter: qwen, 70b, gemma…")
                        prop:value=search on:input:target=move |ev| search.set(ev.target().value()) />
                </div>
                <SelectControl label="GPU" testid="select-gpu" options=Signal::derive(move || gpu_options.clone())
                    value=text(move || state.with(|st| st.gpu.clone()))
                    on_set=Callback::new(move |v: String| state.update(|st| st.gpu = v)) />
                {setting_controls(layout::ESSENTIAL, state, None)}
            </div>
        </section>
    }
}

/// The link to this plan and the embed snippet.
#[component]
fn Share(state: RwSignal<UiState>, query: Memo<String>) -> impl IntoView {
    let share_url = text(move || format!("{}?{}", page_url_without_query(), query.get()));
    let embed_code = text(move || {
        let st = state.with(|st| UiState {
            embed: true,
            ..st.clone()
        });
        format!(
            "<iframe src=\"{}?{}\" title=\"lorafit memory plan\" width=\"640\" height=\"400\" style=\"border:0\" loading=\"lazy\"></iframe>",
            page_url_without_query(),
            link::encode(&st)
        )
    });
    view! {
        <section class="card share" id="share" aria-labelledby="h-share">
            <h2 id="h-share">{t("Share and embed")}</h2>
            <div class="share-row">
                <button type="button" data-testid="copy-link" on:click=move |_| copy_to_clipboard(&share_url.get_untracked())>{t("Copy link")}</button>
                <input type="text" readonly aria-label=t("Link to this plan") data-testid="share-url" prop:value=share_url />
            </div>
            <div class="share-row">
                <button type="button" data-testid="copy-embed" on:click=move |_| copy_to_clipboard(&embed_code.get_untracked())>{t("Copy embed code")}</button>
                <textarea readonly rows="2" aria-label=t("Embed code") data-testid="embed-code" prop:value=embed_code></textarea>
            </div>
            <p class="hint">{t("The embed (640 × 400; fine from 480 × 360 to 800 × 600) shows the verdict, the bar and sliders for batch, length and rank. Pages can also call the planner directly: plan() in lib/lorafit-js.js, see the README.")}</p>
        </section>
    }
}

/// Reads one value out of the current evaluation (a default while it is an error).
pub(crate) fn read<T: Default>(
    eval: Memo<Result<Evaluation, String>>,
    f: impl Fn(&Evaluation) -> T,
) -> T {
    eval.with(|r| r.as_ref().map(&f).unwrap_or_default())
}

/// A text that follows the evaluation (empty while it is an error), in the page's language.
fn shown(
    eval: Memo<Result<Evaluation, String>>,
    f: impl Fn(&Evaluation) -> String + Send + Sync + 'static,
) -> Signal<String> {
    tx(move || read(eval, &f))
}

fn status_words(s: &str) -> &'static str {
    match s {
        "fits" => "Fits",
        "tight" => "Tight",
        "oom" => "Out of memory",
        _ => "",
    }
}

/// A fraction as a CSS percentage.
fn pct(f: f64) -> String {
    format!("{:.3}%", (f * 100.0).clamp(0.0, 100.0))
}

/// GiB with two decimals, without the unit (labels inside the bar).
fn gib_number(b: u128) -> String {
    format!("{:.2}", b as f64 / crate::formats::report::GIB)
}

/// The hero: verdict, the peak numbers, the breakdown bar with its legend, and the formula of
/// the segment in focus. Built once; only text nodes and attributes follow the evaluation.
#[component]
fn Hero(
    /// The evaluation.
    eval: Memo<Result<Evaluation, String>>,
    /// The page state, to show what fits when it does not (None in the embed).
    #[prop(optional)]
    state: Option<RwSignal<UiState>>,
    /// How that advice is judged (with `state`).
    #[prop(optional)]
    advice: Option<Memo<crate::planning::fit::Fidelity>>,
) -> impl IntoView {
    let focused: RwSignal<Option<&'static str>> = RwSignal::new(None);
    let status = text(move || read(eval, |e| e.verdict.status.name().into()));
    let limit = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_else(|| "none".into());
    let hero = Memo::new(move |_| {
        eval.with(|r| {
            r.as_ref()
                .ok()
                .map(|e| chart::hero(&e.plan, e.verdict.capacity_bytes))
        })
    });
    let failed = flag(move || eval.with(|r| r.is_err()));
    let message = shown(eval, |e| {
        format!(
            "{}: needs {:.2} of {}",
            e.gpu_name,
            e.plan.nvidia_smi_bytes as f64 / crate::formats::report::GIB,
            gib(e.verdict.capacity_bytes)
        )
    });
    view! {
        <section class="hero card" aria-label=t("Memory plan")>
            <p class="error" role="alert" data-testid="error" class:hidden=flag(move || !failed.get())>{tx(move || eval.with(|r| r.as_ref().err().cloned().unwrap_or_default()))}</p>
            <div class="verdict-row verdict" class:hidden=failed aria-live="polite">
                <span class=text(move || format!("big verdict-{}", status.get())) data-testid="verdict" data-status=status>{tx(move || status_words(&status.get()).into())}</span>
                <span class="message">{message}{t(" · headroom ")}<span data-testid="headroom">{shown(eval, |e| gib_signed(e.verdict.headroom_bytes))}</span></span>
            </div>
            <dl class="stats" class:hidden=failed>
                <div><dt>{t("Peak allocated")}</dt><dd data-testid="peak-allocated">{shown(eval, |e| gib(e.plan.peak_allocated_bytes))}</dd></div>
                <div><dt>{t("Peak reserved")}</dt><dd data-testid="peak-reserved">{shown(eval, |e| gib(e.plan.peak_reserved_bytes))}</dd></div>
                <div><dt>{t("nvidia-smi")}</dt><dd data-testid="peak-smi">{shown(eval, |e| gib(e.plan.nvidia_smi_bytes))}</dd></div>
                <div class="minor"><dt>{t("Largest micro-batch")}</dt><dd data-testid="max-batch">{shown(eval, move |e| limit(e.max_batch))}</dd></div>
                <div class="minor"><dt>{t("Longest sequence")}</dt><dd data-testid="max-seq">{shown(eval, move |e| limit(e.max_seq))}</dd></div>
            </dl>
            <div class="bar-wrap" class:hidden=failed>
                <BreakdownBar hero=hero focused=Some(focused) eval=eval />
            </div>
            {state.zip(advice).map(|(state, how)| view! { <super::panels::BestFix state=state eval=eval how=how /> })}
            <p class="fineprint" class:hidden=failed>
                <span data-testid="per-gpu">{shown(eval, |e| if e.plan.world_size > 1 { format!("per GPU · {} GPUs · effective batch {}", e.plan.world_size, e.plan.effective_batch) } else { format!("for one GPU · effective batch {}", e.plan.effective_batch) })}</span>
                {t(" · peak in ")}<span data-testid="peak-phase">{shown(eval, |e| e.plan.peak_phase.name().into())}" — "{shown(eval, |e| e.plan.peak_moment.clone())}</span>
                <span class:hidden=flag(move || read(eval, |e| e.plan.cpu_bytes_per_rank == 0))>{t(" · CPU RAM for offload ")}<span data-testid="cpu-ram">{shown(eval, |e| format!("{} per GPU · {} per node", gib(e.plan.cpu_bytes_per_rank), gib(e.plan.cpu_bytes_per_node)))}</span></span>
                <span class="bar-hint">{t(" · Hover, tap or Tab to a segment for its formula.")}</span>
                " · "<span data-testid="params">{shown(eval, |e| {
                    let p = &e.plan.params;
                    if p.active_params != p.base_params {
                        format!("{:.2} B parameters ({:.2} B active per token) · {:.2} M trainable", p.base_params as f64 / 1e9, p.active_params as f64 / 1e9, p.trainable_params as f64 / 1e6)
                    } else {
                        format!("{:.2} B parameters · {:.2} M trainable", p.base_params as f64 / 1e9, p.trainable_params as f64 / 1e6)
                    }
                })}</span>
            </p>
            <ul class="notes" data-testid="plan-notes" class:hidden=failed>
                {move || read(eval, |e| e.plan.notes.clone()).into_iter().map(|n| view! { <li>{ts(n)}</li> }).collect_view()}
            </ul>
        </section>
    }
}

/// The formula panel of a segment: its terms with formulas and numbers, or for the cache and the
/// context the difference of two totals.
fn segment_detail(
    e: &Evaluation,
    key: &str,
    lang: Lang,
) -> (String, Vec<(String, String, String)>) {
    let p = &e.plan;
    let tr = |s: &str| tr(lang, s).into_owned();
    match key {
        chart::ALLOCATOR_CACHE => (
            tr(&format!(
                "Allocator cache {}",
                gib(p.peak_reserved_bytes - p.peak_allocated_bytes)
            )),
            vec![(
                tr("reserved − allocated: blocks PyTorch's caching allocator holds but no tensor uses"),
                format!(
                    "= {} − {}",
                    gib(p.peak_reserved_bytes),
                    gib(p.peak_allocated_bytes)
                ),
                tr(&p.reserve_explanation),
            )],
        ),
        chart::CUDA_CONTEXT => (
            tr(&format!(
                "CUDA context and outside the allocator {}",
                gib(p.nvidia_smi_bytes - p.peak_reserved_bytes)
            )),
            vec![(
                tr("nvidia-smi − reserved: CUDA context, cuBLAS/cuDNN handles, paged optimizer states"),
                format!(
                    "= {} − {}",
                    gib(p.nvidia_smi_bytes),
                    gib(p.peak_reserved_bytes)
                ),
                tr(&format!("outside the allocator: {}", gib(p.outside_allocator_bytes))),
            )],
        ),
        _ => {
            let ts: Vec<_> = p
                .terms
                .iter()
                .filter(|t| t.component.key() == key && t.bytes > 0)
                .collect();
            let total: u128 = ts.iter().map(|t| t.bytes).sum();
            let label = ts.first().map(|t| t.component.label()).unwrap_or("");
            (
                format!("{} {}", tr(label), gib(total)),
                ts.into_iter()
                    .map(|t| {
                        (
                            format!("{} — {}", gib(t.bytes), tr(&t.label)),
                            t.formula(),
                            format!("= {}", t.values()),
                        )
                    })
                    .collect(),
            )
        }
    }
}

/// The breakdown bar: segments grouped (weights, LoRA + optimizer, activations, logits & loss,
/// allocator cache, CUDA context), labelled in place where they fit (CSS container queries) and
/// in the legend; the capacity marker, headroom or overflow; allocated, reserved and nvidia-smi
/// as three nested levels. Segments are keyed, so a slider move only updates their geometry.
#[component]
fn BreakdownBar(
    /// Geometry (None draws nothing).
    hero: Memo<Option<chart::Hero>>,
    /// Segment in focus, whose formula is shown (None: not interactive, no legend).
    focused: Option<RwSignal<Option<&'static str>>>,
    /// The evaluation (formulas of the focused segment).
    eval: Memo<Result<Evaluation, String>>,
    /// Prefix of segment test ids (empty for the main bar).
    #[prop(optional)]
    prefix: &'static str,
) -> impl IntoView {
    let at = move |f: fn(&chart::Hero) -> f64| {
        text(move || pct(hero.with(|h| h.as_ref().map(f).unwrap_or(0.0))))
    };
    let piece = move |key: &'static str, f: fn(&chart::Piece) -> String| {
        text(move || {
            hero.with(|h| {
                h.as_ref()
                    .and_then(|h| h.pieces.iter().find(|p| p.key == key))
                    .map(f)
                    .unwrap_or_default()
            })
        })
    };
    let keys = move || {
        hero.with(|h| {
            h.as_ref()
                .map(|h| h.pieces.iter().map(|p| p.key).collect::<Vec<_>>())
                .unwrap_or_default()
        })
    };
    let lang = crate::web::lang::lang();
    let summary = text(move || {
        hero.with(|h| {
            h.as_ref()
                .map(|h| {
                    let parts: Vec<String> = h
                        .groups
                        .iter()
                        .map(|g| format!("{} {}", now(lang, g.0.label()), gib(g.3)))
                        .collect();
                    format!(
                        "{} {}",
                        now(lang, "Memory at the peak by group:"),
                        parts.join(", ")
                    )
                })
                .unwrap_or_default()
        })
    });
    let headroom = shown(eval, |e| gib(e.verdict.headroom_bytes.unsigned_abs()));
    let set = move |k: Option<&'static str>| {
        if let Some(f) = focused {
            f.set(k)
        }
    };
    let level = move |i: usize| hero.with(|h| h.as_ref().map(|h| h.levels[i]).unwrap_or(0.0));
    let detail = move || {
        let key = focused?.get()?;
        let (title, rows) =
            eval.with(|r| r.as_ref().ok().map(|e| segment_detail(e, key, lang.get())))?;
        Some(view! {
            <div class="detail" data-testid="segment-detail" role="status">
                <strong>{title}</strong>
                <ul>{rows.into_iter().map(|(what, formula, values)| view! { <li>{what}<br/><code>{formula}</code><br/><code class="values">{values}</code></li> }).collect_view()}</ul>
            </div>
        })
    };
    // The free and over-capacity regions: (start, size) or nothing.
    let region = move |f: fn(&chart::Hero) -> Option<(f64, f64)>, which: usize| {
        text(move || {
            hero.with(|h| h.as_ref().and_then(f))
                .map(|r| pct(if which == 0 { r.0 } else { r.1 }))
                .unwrap_or_default()
        })
    };
    let has = move |f: fn(&chart::Hero) -> Option<(f64, f64)>| {
        flag(move || hero.with(|h| h.as_ref().and_then(f).is_none()))
    };
    view! {
        <div class="bar-block" data-testid=format!("{prefix}breakdown-bar") role="group" aria-label=summary
            on:mouseleave=move |_| set(None)
            on:keydown=move |ev| if ev.key() == "Escape" { set(None) }>
            <div class="groups" aria-hidden="true">
                {Group::ALL.into_iter().map(|g| {
                    let of = move |f: fn(&(Group, f64, f64, u128)) -> String| text(move || hero.with(|h| h.as_ref().and_then(|h| h.groups.iter().find(|x| x.0 == g)).map(f).unwrap_or_default()));
                    view! {
                        <span class=format!("grp grp-{}", g.key()) class:hidden=flag(move || hero.with(|h| h.as_ref().is_none_or(|h| h.groups.iter().all(|x| x.0 != g))))
                            style:left=of(|x| pct(x.1)) style:width=of(|x| pct(x.2))>
                            <span>{t(g.label())}" "<b>{of(|x| format!("{:.1}", x.3 as f64 / crate::formats::report::GIB))}</b></span>
                        </span>
                    }
                }).collect_view()}
            </div>
            <div class="track">
                <For each=keys key=|k| *k let:key>
                    <button type="button" class=format!("seg seg-{key} g-{}", Group::of(key).key()) data-testid=format!("{prefix}segment-{key}")
                        tabindex=if focused.is_some() { "0" } else { "-1" }
                        style:left=piece(key, |p| pct(p.start))
                        style:width=piece(key, |p| pct(p.size))
                        aria-label=text(move || hero.with(|h| h.as_ref().and_then(|h| h.pieces.iter().find(|p| p.key == key)).map(|p| format!("{} {} GiB — {}", now(lang, chart::short_label(p.key)), gib_number(p.bytes), now(lang, p.label))).unwrap_or_default()))
                        on:mouseenter=move |_| set(Some(key))
                        on:focus=move |_| set(Some(key))
                        on:click=move |_| set(Some(key))
                        on:blur=move |_| set(None)>
                        <span class="in"><span class="n">{t(chart::short_label(key))}" "</span><span class="v">{piece(key, |p| gib_number(p.bytes))}</span></span>
                    </button>
                </For>
                <div class="free" class:hidden=has(|h| h.headroom) style:left=region(|h| h.headroom, 0) style:width=region(|h| h.headroom, 1) aria-hidden="true"><span>{tx(move || format!("free {}", headroom.get()))}</span></div>
                <div class="over" class:hidden=has(|h| h.overflow) style:left=region(|h| h.overflow, 0) style:width=region(|h| h.overflow, 1) aria-hidden="true"></div>
            </div>
            <div class="cap" style:left=at(|h| h.capacity_at) aria-hidden="true"></div>
            <div class="levels" aria-hidden="true">
                {[("allocated", 0usize), ("reserved", 1), ("nvidia-smi", 2)].into_iter().map(move |(name, i)| view! {
                    <div class="lvl"><span class=format!("lvl-line l{i}") class:inside=flag(move || level(i) > 0.3) style:width=text(move || pct(level(i)))><span>{t(name)}</span></span></div>
                }).collect_view()}
                <div class="cap-row">
                    <span class="over-label" class:hidden=has(|h| h.overflow)>{tx(move || format!("over by {}", headroom.get()))}</span>
                    <span class="cap-label" class:left=flag(move || hero.with(|h| h.as_ref().is_some_and(|h| h.capacity_at < 0.2))) style:left=at(|h| h.capacity_at)>{shown(eval, |e| format!("GPU {}", gib(e.verdict.capacity_bytes)))}</span>
                </div>
            </div>
            {detail}
        </div>
        {focused.map(|_| view! { <Legend hero=hero /> })}
    }
}

/// The bar's legend: every group with its pattern and total, and its components with their sizes.
#[component]
fn Legend(hero: Memo<Option<chart::Hero>>) -> impl IntoView {
    let lang = crate::web::lang::lang();
    view! {
        <ul class="legend" data-testid="legend">
            {Group::ALL.into_iter().map(|g| {
                let of = move |f: fn(&chart::Hero, &(Group, f64, f64, u128)) -> String| {
                    text(move || hero.with(|h| h.as_ref().and_then(|h| h.groups.iter().find(|x| x.0 == g).map(|x| f(h, x))).unwrap_or_default()))
                };
                view! {
                    <li class:hidden=flag(move || hero.with(|h| h.as_ref().is_none_or(|h| h.groups.iter().all(|x| x.0 != g))))>
                        <span class=format!("sw g-{}", g.key()) aria-hidden="true"></span><strong>{t(g.label())}" "{of(|_, x| gib(x.3))}</strong>" "
                        <span class="items">{text(move || hero.with(|h| {
                            let Some(h) = h.as_ref() else { return String::new() };
                            if matches!(g, Group::AllocatorCache | Group::CudaContext) {
                                return String::new();
                            }
                            let items: Vec<String> = h.pieces.iter().filter(|p| p.group == g && p.bytes >= 1 << 24).map(|p| format!("{} {}", now(lang, chart::short_label(p.key)), gib_number(p.bytes))).collect();
                            items.join(" · ")
                        }))}</span>
                    </li>
                }
            }).collect_view()}
        </ul>
    }
}

/// Drawn geometry of the curve chart.
#[derive(Clone, Debug, PartialEq)]
struct CurveGeometry {
    c: chart::Curve,
    ticks: Vec<(f64, String)>,
    marker: Option<(f64, u64)>,
    capacity: u128,
}

/// Peak vs sequence length (or batch), stacked by group, with the nvidia-smi estimate, the GPU's
/// limit and the largest value that fits, and a legend.
#[component]
fn CurveChart(
    /// Curve points.
    curve: Memo<Vec<evaluate::CurvePoint>>,
    /// Current evaluation (fit limits, capacity).
    eval: Memo<Result<Evaluation, String>>,
    /// Page state (axis).
    state: RwSignal<UiState>,
) -> impl IntoView {
    // Narrow windows get a taller box, so the chart keeps readable text on a phone.
    let narrow = window()
        .inner_width()
        .ok()
        .and_then(|v| v.as_f64())
        .is_some_and(|v| v < 640.0);
    let (w, h) = if narrow {
        (420.0, 300.0)
    } else {
        (840.0, 250.0)
    };
    let flip = w - 140.0;
    let axis = Memo::new(move |_| state.with(|st| st.axis));
    let geom = Memo::new(move |_| {
        let pts = curve.get();
        eval.with(|r| {
            r.as_ref().ok().map(|e| {
                let capacity = e.verdict.capacity_bytes;
                let c = chart::curve(&pts, capacity, w, h);
                let limit = if axis.get() == Axis::Seq {
                    e.max_seq
                } else {
                    e.max_batch
                };
                let marker = limit.and_then(|v| chart::x_of(&pts, v, w).map(|x| (x, v)));
                let ticks = pts
                    .iter()
                    .zip(&c.xs)
                    .map(|(p, x)| (*x, p.x.to_string()))
                    .collect::<Vec<_>>();
                CurveGeometry {
                    c,
                    ticks,
                    marker,
                    capacity,
                }
            })
        })
    });
    let g = move |f: fn(&CurveGeometry) -> String| {
        text(move || geom.with(|g| g.as_ref().map(f).unwrap_or_default()))
    };
    let cap_y = move || geom.with(|g| g.as_ref().map(|g| g.c.cap_y).unwrap_or(h));
    let seq = move || axis.get() == Axis::Seq;
    let words =
        move |a: &'static str, b: &'static str| tx(move || if seq() { a.into() } else { b.into() });
    let described = tx(move || {
        geom.with(|g| {
            g.as_ref()
                .map(|g| {
                    format!(
                        "Peak memory for {} from {} to {}, stacked by group, against the GPU's {}; {}",
                        if seq() { "sequence lengths" } else { "micro-batches" },
                        g.ticks.first().map(|t| t.1.as_str()).unwrap_or(""),
                        g.ticks.last().map(|t| t.1.as_str()).unwrap_or(""),
                        gib(g.capacity),
                        g.marker.map(|(_, v)| format!("fits up to {v}")).unwrap_or_else(|| "nothing fits".into())
                    )
                })
                .unwrap_or_default()
        })
    });
    // (The group is hidden without a marker; "0" keeps its attributes valid lengths.)
    let marker = move |f: fn(f64, u64) -> String| {
        text(move || {
            geom.with(|g| g.as_ref().and_then(|g| g.marker))
                .map(|(x, v)| f(x, v))
                .unwrap_or_else(|| "0".into())
        })
    };
    view! {
        <section class="card curve wide" id="curve" aria-labelledby="h-curve">
            <div class="curve-head">
                <h2 id="h-curve">{words("Peak memory vs sequence length", "Peak memory vs micro-batch")}</h2>
                <button type="button" data-testid="toggle-axis" on:click=move |_| state.update(|st| st.axis = if st.axis == Axis::Seq { Axis::Batch } else { Axis::Seq })>
                    {words("show vs batch", "show vs length")}
                </button>
            </div>
            <svg viewBox=format!("-42 -8 {} {}", w + 84.0, h + 46.0) class="curve-svg" role="img" aria-label=described data-testid="curve">
                {(0..6).map(|i| {
                    let tick = move |f: fn(&(f64, String)) -> String| text(move || geom.with(|g| g.as_ref().and_then(|g| g.c.y_ticks.get(i)).map(f).unwrap_or_default()));
                    let y = text(move || geom.with(|g| g.as_ref().and_then(|g| g.c.y_ticks.get(i)).map(|t| format!("{:.1}", t.0)).unwrap_or_else(|| "-999".into())));
                    view! {
                        <line class="grid" x1="0" x2=w y1=y y2=y />
                        <text class="tick" x="-5" dy="3" y=y text-anchor="end">{tick(|t| t.1.clone())}</text>
                    }
                }).collect_view()}
                {Group::ALL[..4].iter().map(|g| {
                    let key = g.key();
                    view! { <path class=format!("area g-{key}") d=text(move || geom.with(|g| g.as_ref().and_then(|g| g.c.areas.iter().find(|a| a.key == key)).map(|a| a.d.clone()).unwrap_or_default())) /> }
                }).collect_view()}
                <path class="smi-line" d=g(|g| g.c.smi.clone()) />
                <line class="capacity" x1="0" x2=w y1=text(move || cap_y().to_string()) y2=text(move || cap_y().to_string()) />
                <text class="capacity-label" x="4" y=text(move || (cap_y() - 4.0).to_string())>{tx(move || geom.with(|g| g.as_ref().map(|g| format!("GPU limit {}", gib(g.capacity))).unwrap_or_default()))}</text>
                <g class:hidden=flag(move || geom.with(|g| g.as_ref().and_then(|g| g.marker).is_none()))>
                    <line class="fit-marker" x1=marker(|x, _| x.to_string()) x2=marker(|x, _| x.to_string()) y1="0" y2=h />
                    <text class="fit-label" x=text(move || geom.with(|g| g.as_ref().and_then(|g| g.marker)).map(|(x, _)| if x > flip { x - 4.0 } else { x + 4.0 }).unwrap_or(0.0).to_string()) text-anchor=text(move || (if geom.with(|g| g.as_ref().and_then(|g| g.marker)).is_some_and(|(x, _)| x > flip) { "end" } else { "start" }).into()) y="12" data-testid="curve-limit">{tx(move || geom.with(|g| g.as_ref().and_then(|g| g.marker)).map(|(_, v)| format!("fits up to {v}")).unwrap_or_default())}</text>
                </g>
                {(0..12).map(|i| {
                    let tick = move |f: fn(&(f64, String)) -> String| text(move || geom.with(|g| g.as_ref().and_then(|g| g.ticks.get(i)).map(f).unwrap_or_default()));
                    let x = text(move || geom.with(|g| g.as_ref().and_then(|g| g.ticks.get(i)).map(|t| format!("{:.1}", t.0)).unwrap_or_else(|| "-999".into())));
                    view! { <text class=if i % 2 == 1 { "tick odd" } else { "tick" } x=x y=h + 16.0 text-anchor="middle">{tick(|t| t.1.clone())}</text> }
                }).collect_view()}
                <text class="axis-label" x=w / 2.0 y=h + 34.0 text-anchor="middle">{words("sequence length (tokens, log scale)", "micro-batch (log scale)")}</text>
                <text class="axis-label" x="-38" y="-1">"GiB"</text>
            </svg>
            <ul class="legend curve-legend" aria-label=t("Curve legend")>
                {Group::ALL[..4].iter().map(|g| view! { <li><span class=format!("sw g-{}", g.key()) aria-hidden="true"></span>{t(g.label())}</li> }).collect_view()}
                <li><span class="sw line sw-smi" aria-hidden="true"></span>{t("nvidia-smi estimate")}</li>
                <li><span class="sw line sw-cap" aria-hidden="true"></span>{t("GPU limit")}</li>
                <li><span class="sw line sw-fit" aria-hidden="true"></span>{t("largest that fits")}</li>
            </ul>
        </section>
    }
}

/// Pin A, compare with the current config B: two bars on the same scale and per-component deltas.
#[component]
fn Compare(
    /// The pinned evaluation.
    pinned: RwSignal<Option<Evaluation>>,
    /// Current evaluation.
    eval: Memo<Result<Evaluation, String>>,
) -> impl IntoView {
    let lang = crate::web::lang::lang();
    view! {
        <section class="card compare wide" id="compare" aria-labelledby="h-compare">
            <div class="curve-head">
                <h2 id="h-compare">{t("Compare")}</h2>
                <button type="button" data-testid="pin" on:click=move |_| pinned.set(eval.get_untracked().ok())>{t("Pin current as A")}</button>
                {move || pinned.with(|p| p.is_some()).then(|| view! { <button type="button" data-testid="unpin" on:click=move |_| pinned.set(None)>{t("Unpin")}</button> })}
            </div>
            <p class="hint" class:hidden=flag(move || pinned.with(|p| p.is_some()))>{t("Pin a configuration, change settings, and see A vs B here.")}</p>
            {move || match (pinned.get(), eval.get()) {
                (Some(a), Ok(b)) => {
                    let rows: Vec<(crate::model::plan::ComponentBytes, u128)> = a.plan.breakdown.iter().cloned().zip(b.plan.breakdown.iter().map(|c| c.bytes)).filter(|(x, y)| x.bytes > 0 || *y > 0).collect();
                    let total = b.plan.peak_allocated_bytes as i128 - a.plan.peak_allocated_bytes as i128;
                    // Both bars on one scale: the larger of the two plans and capacities.
                    let scale = a.verdict.capacity_bytes.max(b.verdict.capacity_bytes).max(a.plan.nvidia_smi_bytes).max(b.plan.nvidia_smi_bytes);
                    Some(view! {
                        <div class="compare-body" data-testid="compare">
                            {[("a-", "A (pinned)", &a), ("b-", "B (current)", &b)].map(|(prefix, name, x)| view! {
                                <figure><figcaption>{format!("{} · {} · nvidia-smi {} / {}", now(lang, name), now(lang, status_words(x.verdict.status.name())), gib(x.plan.nvidia_smi_bytes), gib(x.verdict.capacity_bytes))}</figcaption>{still_bar(&chart::hero_on(&x.plan, x.verdict.capacity_bytes, scale), prefix, lang.get_untracked())}</figure>
                            })}
                            <div class="table-wrap" tabindex="0" role="region" aria-label=t("A and B by component")><table class="deltas">
                                <thead><tr><th scope="col">{t("Component")}</th><th scope="col">"A"</th><th scope="col">"B"</th><th scope="col">"B − A"</th></tr></thead>
                                <tbody>
                                    {rows.into_iter().map(|(c, bb)| view! {
                                        <tr><td>{now(lang, c.label)}</td><td class="num">{gib(c.bytes)}</td><td class="num">{gib(bb)}</td>
                                        <td class="num" data-testid=format!("delta-{}", c.key)>{gib_signed(bb as i128 - c.bytes as i128)}</td></tr>
                                    }).collect_view()}
                                    <tr class="total"><td>{t("Peak allocated")}</td><td class="num">{gib(a.plan.peak_allocated_bytes)}</td><td class="num">{gib(b.plan.peak_allocated_bytes)}</td><td class="num" data-testid="delta-total">{gib_signed(total)}</td></tr>
                                </tbody>
                            </table></div>
                        </div>
                    })
                }
                _ => None,
            }}
        </section>
    }
}

/// A bar that does not follow the state (the compare view is rebuilt when A or B changes): the
/// same segments, groups' patterns and capacity marker as the hero, without labels or levels.
fn still_bar(h: &chart::Hero, prefix: &'static str, lang: Lang) -> impl IntoView {
    let label = h
        .groups
        .iter()
        .map(|g| format!("{} {}", tr(lang, g.0.label()), gib(g.3)))
        .collect::<Vec<_>>()
        .join(", ");
    view! {
        <div class="track still" role="img" aria-label=label data-testid=format!("{prefix}breakdown-bar")>
            {h.pieces.iter().map(|p| view! {
                <span class=format!("seg seg-{} g-{}", p.key, p.group.key()) data-testid=format!("{prefix}segment-{}", p.key) title=tr(lang, &format!("{}: {}", p.label, gib(p.bytes))).into_owned()
                    style:left=pct(p.start) style:width=pct(p.size)></span>
            }).collect_view()}
            <span class="cap" style:left=pct(h.capacity_at)></span>
        </div>
    }
}

/// The plain tables: every term with its formula, and the peak of each phase. Rows are keyed
/// by term, so a slider move only rewrites their text.
#[component]
fn Tables(
    /// The evaluation.
    eval: Memo<Result<Evaluation, String>>,
) -> impl IntoView {
    let keys = move || {
        read(eval, |e| {
            e.plan
                .terms
                .iter()
                .filter(|t| t.bytes > 0)
                .map(|t| (t.component, t.label.to_string()))
                .collect::<Vec<_>>()
        })
    };
    let term = move |k: &(crate::model::Component, String)| {
        read(eval, |e| {
            e.plan
                .terms
                .iter()
                .find(|t| t.component == k.0 && t.label == k.1.as_str())
                .cloned()
        })
    };
    let phases = move || {
        read(eval, |e| {
            e.plan
                .phases
                .iter()
                .map(|p| (p.phase.name(), p.moment.clone(), gib(p.bytes)))
                .collect::<Vec<_>>()
        })
    };
    view! {
        <section class="card wide" id="terms" aria-labelledby="h-terms">
            <h2 id="h-terms">{t("Every term, with its formula")}</h2>
            <div class="table-wrap" tabindex="0" role="region" aria-label=t("Every term (scrolls sideways)")>
                <table class="breakdown" data-testid="breakdown">
                    <caption>{t("Memory at the peak (allocated), term by term")}</caption>
                    <thead><tr><th scope="col">{t("Component")}</th><th scope="col">{t("What")}</th><th scope="col">{t("Formula")}</th><th scope="col">{t("Size")}</th></tr></thead>
                    <tbody>
                        <For each=keys key=|k| k.clone() let:k>
                            {
                                let (k1, k2) = (k.clone(), k.clone());
                                view! {
                                    <tr>
                                        <td><span class=format!("sw seg-{} g-{}", k.0.key(), Group::of(k.0.key()).key()) aria-hidden="true"></span>{t(k.0.label())}</td>
                                        <td>{ts(k.1.clone())}</td>
                                        <td>
                                            <code>{text(move || term(&k1).map(|t| t.formula()).unwrap_or_default())}</code><br/>
                                            <code class="values">{text(move || term(&k2).map(|t| format!("= {}", t.values())).unwrap_or_default())}</code>
                                        </td>
                                        <td class="num">{text(move || term(&k).map(|t| gib(t.bytes)).unwrap_or_default())}</td>
                                    </tr>
                                }
                            }
                        </For>
                    </tbody>
                </table>
            </div>
            <table class="phases">
                <caption>{t("Highest memory of each phase")}</caption>
                <tbody>
                    {move || phases().into_iter().map(|(name, moment, bytes)| view! { <tr><th scope="row">{t(name)}</th><td>{ts(moment)}</td><td class="num">{bytes}</td></tr> }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}

/// `data-reserve` of the results: `quick` (the allowance, within a frame of a change),
/// `simulated` (settled on PyTorch's caching allocator simulated), or `settled` (still, but the
/// configuration has no allocation sequence to simulate — fused cross-entropy, transformers 4's
/// per-expert layout — so the allowance stays).
fn reserve_state(settled: Memo<bool>, eval: Memo<Result<Evaluation, String>>) -> &'static str {
    if !settled.get() {
        "quick"
    } else if read(eval, |e| e.plan.reserve_simulated) {
        "simulated"
    } else {
        "settled"
    }
}
