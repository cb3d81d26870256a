//! The web page (wasm only). One `RwSignal<UiState>` holds everything a link carries; every
//! number is derived through `Memo`s from the planner; views only format and draw geometry
//! computed in [`crate::web::chart`]. The URL is kept in sync (replaceState) so reload and shared
//! links restore the plan.
//!
//! Order of the page, by importance: the verdict and the breakdown bar (the hero), what fits when
//! it does not, the settings changed most often; then titled sections for everything else. The
//! embed (`?embed=1`) keeps the hero and three sliders.

use leptos::prelude::*;

use crate::formats::report::{gib, gib_signed};
use crate::planning::evaluate::Evaluation;
use crate::web::chart::{self, Group};
use crate::web::controls::{flag, pct, read, status_words, text, SelectControl};
use crate::web::i18n::{tr, Lang};
use crate::web::lang::{now, t, ts, tx};
use crate::web::layout;
use crate::web::link;
use crate::web::setup::{
    page_url_without_query, reserve_state, setting_controls, setup, Role, ZH_URL,
};
use crate::web::state::UiState;

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
    // Chinese comes with its own wasm (`web::chinese`): an English visit loads none of it.
    crate::web::lang::use_loader(crate::web::chinese::load);
    crate::web::lang::table_first(link.0.lang, ZH_URL, move |failed| {
        if let Some(e) = failed {
            // English, and said so (not fetched again by the switch's effect).
            link.0.lang = Some(Lang::En);
            link.1.push(e);
        }
        show(link)
    });
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
    let (state, notices, eval, _, simulated) = setup(link, Role::Page, crate::web::state::settle);
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
            <main data-reserve=move || reserve_state(simulated, eval) data-planner=crate::web::full::PLANNER>
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

/// The planner page: the hero (verdict, bar, what fits), the most used settings, and the
/// sections' table of contents; the sections themselves are the second bundle, loaded when one
/// is opened ([`crate::web::bridge`]).
#[component]
pub fn App(
    /// The decoded link: state and notices.
    link: (UiState, Vec<String>),
) -> impl IntoView {
    let (state, notices, eval, query, simulated) =
        setup(link, Role::Page, crate::web::state::settle);
    let advice = crate::web::settle::advice_fidelity(state, eval);
    view! {
        <div class="page">
            <header class="top">
                <h1>"lorafit"</h1>
                <LangSwitch state=state />
                <p class="tagline">{t("Will this LoRA / QLoRA fine-tune fit, and where does every GiB go? Planned in your browser.")}</p>
            </header>
            {notice_list(notices)}
            <main data-reserve=move || reserve_state(simulated, eval) data-planner=crate::web::full::PLANNER>
                <Hero eval=eval state=state advice=advice query=query />
                <Essentials state=state />
                <SectionsLauncher state=state query=query />
            </main>
        </div>
    }
}

/// The sections' titles, in the page's order (ids of their `<section>`s).
const SECTIONS: [(&str, &str); 16] = [
    ("examples", "Forum questions"),
    ("more", "More settings"),
    ("gpus", "Several GPUs"),
    ("job", "The job"),
    ("fixes", "Changes one by one"),
    ("curve", "Curve"),
    ("compare", "Compare"),
    ("terms", "Every term"),
    ("lengths", "Lengths"),
    ("measured", "A real run"),
    ("config", "Your config"),
    ("import", "Your model"),
    ("export", "Export"),
    ("evidence", "Accuracy"),
    ("time", "Time"),
    ("share", "Share"),
];

/// The table of contents of the sections and the point they mount at. Opening one — a click in
/// the contents, a link to `#fixes` from the hero, or a page opened at such an address — loads
/// the sections bundle once, then scrolls to the section. The mount point carries the state's
/// link (and the Hub path, which no link carries) for the bundle and hears its changes
/// ([`crate::web::bridge`]).
#[component]
fn SectionsLauncher(state: RwSignal<UiState>, query: Memo<String>) -> impl IntoView {
    use crate::web::bridge::{self, Load};
    let status = RwSignal::new(Load::Closed);
    let target = StoredValue::new(None::<String>);
    let reveal = move || {
        if let Some(id) = target.get_value() {
            if let Some(el) = document().get_element_by_id(&id) {
                el.scroll_into_view();
            }
        }
    };
    let open = move |id: Option<String>| {
        target.set_value(id);
        match status.get_untracked() {
            Load::Ready => reveal(),
            _ => bridge::load(status),
        }
    };
    // Addresses with a section's hash open it, now and on every hash change.
    let hash_section = || {
        let h = window().location().hash().unwrap_or_default();
        let id = h.trim_start_matches('#');
        SECTIONS
            .iter()
            .any(|(s, _)| *s == id)
            .then(|| id.to_string())
    };
    if let Some(id) = hash_section() {
        open(Some(id));
    } else if crate::web::full::take_sections_open() {
        // The first bundle's page had them open when it handed over (web::full).
        open(None);
    }
    let on_hash = leptos::prelude::window_event_listener(leptos::ev::hashchange, move |_| {
        if let Some(id) = hash_section() {
            open(Some(id));
        }
    });
    on_cleanup(move || on_hash.remove());
    // The sections' changes and readiness; the page's changes go to them.
    Effect::new(move |_| {
        bridge::listen(bridge::SET, move |q| {
            let next = state.with_untracked(|st| link::decode_shared(&q, st));
            if state.with_untracked(|st| *st != next) {
                state.set(next);
            }
        });
        bridge::listen(bridge::READY, move |_| {
            status.set(Load::Ready);
            reveal();
        });
    });
    Effect::new(move |_| {
        let q = query.get();
        if status.get() == Load::Ready {
            bridge::send(bridge::STATE, &q);
        }
    });
    let state_name = text(move || status.get().name().to_string());
    view! {
        <nav class="toc" aria-label=t("Sections")>
            {SECTIONS.into_iter().map(|(id, label)| view! {
                <a href=format!("#{id}") on:click=move |_| open(Some(id.to_string()))>{t(label)}</a>
            }).collect_view()}
        </nav>
        <div class="sections-wrap" data-testid="sections" data-state=state_name>
            <div class="sections-status" class:hidden=flag(move || status.get() == Load::Ready)>
                <button type="button" data-testid="open-sections" class:hidden=flag(move || status.get() == Load::Loading)
                    on:click=move |_| open(None)>{t("Open every section")}</button>
                <span role="status">
                    <span class:hidden=flag(move || status.get() != Load::Loading)>{t("Loading the sections…")}</span>
                    <span class:hidden=flag(move || status.get() != Load::Failed)>{t("The sections could not be loaded (offline?). Try again.")}</span>
                </span>
            </div>
            <div id=bridge::ROOT_ID data-query=query data-hub=state.with_untracked(|st| st.hub.clone())></div>
        </div>
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

/// Model and GPU pickers and the settings changed most often ([`layout::ESSENTIAL`]).
#[component]
fn Essentials(state: RwSignal<UiState>) -> impl IntoView {
    let search = RwSignal::new(String::new());
    let current_model = Memo::new(move |_| state.with(|st| st.model.clone()));
    let model_options =
        Memo::new(move |_| crate::web::state::model_options(&search.get(), &current_model.get()));
    let gpu_options = crate::web::state::gpu_options();
    let has_tower = Memo::new(move |_| {
        state.with(|st| crate::web::state::arch_of(st).is_ok_and(|a| a.vision.is_some()))
    });
    view! {
        <section class="card essentials" aria-label=t("Settings")>
            <div class="controls-grid">
                <div class="model-pick">
                    <SelectControl label="Model" testid="select-model" options=model_options
                        value=current_model
                        on_set=Callback::new(move |v: String| state.update(|st| {
                            st.model = v;
                            layout::after_model(st);
                        })) />
                    <input type="search" aria-label=t("Filter the models") data-testid="search-model" placeholder=t("filter: qwen, 70b, gemma…")
                        prop:value=search on:input:target=move |ev| search.set(ev.target().value()) />
                </div>
                <SelectControl label="GPU" testid="select-gpu" options=Signal::derive(move || gpu_options.clone())
                    value=text(move || state.with(|st| st.gpu.clone()))
                    on_set=Callback::new(move |v: String| state.update(|st| st.gpu = v)) />
                {setting_controls(layout::ESSENTIAL, state, Some(layout::after_essential))}
            </div>
            // Only a model with a vision tower has them (an Option, not <Show>: see ARCHITECTURE.md);
            // the first bundle hands such a model to the full planner, so it leaves them out.
            {move || (crate::model::extended::EXTENDED && has_tower.get()).then(|| view! {
                <fieldset class="images" data-testid="image-settings">
                    <legend>{t("Images (vision-language model)")}</legend>
                    <div class="controls-grid">{setting_controls(layout::IMAGES, state, None)}</div>
                </fieldset>
            })}
        </section>
    }
}

/// A text that follows the evaluation (empty while it is an error), in the page's language.
fn shown(
    eval: Memo<Result<Evaluation, String>>,
    f: impl Fn(&Evaluation) -> String + Send + Sync + 'static,
) -> Signal<String> {
    tx(move || read(eval, &f))
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
    /// The link of the state (with `state`): what the advice is asked for.
    #[prop(optional)]
    query: Option<Memo<String>>,
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
    // What the deciding phase of the job needs: the capacity less the headroom.
    let message = shown(eval, |e| {
        let need = i128::try_from(e.verdict.capacity_bytes).unwrap_or(i128::MAX)
            - e.verdict.headroom_bytes;
        format!(
            "{}: needs {:.2} of {}",
            e.gpu_name,
            need as f64 / crate::formats::report::GIB,
            gib(e.verdict.capacity_bytes)
        )
    });
    let phase = text(move || read(eval, |e| e.verdict.phase.to_string()));
    // The verdict is the training step's until the phases after training on the GPU are in.
    let whole = text(move || {
        read(eval, |e| {
            if e.whole_job { "job" } else { "step" }.to_string()
        })
    });
    view! {
        <section class="hero card" aria-label=t("Memory plan")>
            <p class="error" role="alert" data-testid="error" class:hidden=flag(move || !failed.get())
                class:handover=flag(move || eval.with(crate::web::full::unbundled))>{tx(move || eval.with(|r| match r {
                    // The first bundle's refusal, when the full planner could not be loaded.
                    Err(m) if crate::web::full::unbundled(r) && crate::web::full::failed() => {
                        format!("{m}; {}", crate::web::full::NOT_LOADED)
                    }
                    r => r.as_ref().err().cloned().unwrap_or_default(),
                }))}</p>
            <div class="verdict-row verdict" class:hidden=failed aria-live="polite">
                <span class=text(move || format!("big verdict-{}", status.get())) data-testid="verdict" data-status=status data-phase=phase data-scope=whole>{tx(move || status_words(&status.get()).into())}</span>
                <span class="message">{message}{t(" · headroom ")}<span data-testid="headroom">{shown(eval, |e| gib_signed(e.verdict.headroom_bytes))}</span></span>
                <a href="#job" class="decided" data-testid="deciding-phase" class:hidden=flag(move || whole.get() == "job" && phase.get() == "train")>{tx(move || if whole.get() == "job" {
                    crate::web::layout::decided_by(&phase.get()).to_string()
                } else {
                    "the training step's; the phases after training are being planned…".into()
                })}</a>
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
            {state.zip(advice).zip(query).map(|((state, how), query)| view! { <super::panels::BestFix state=state eval=eval how=how query=query /> })}
            <p class="fineprint" class:hidden=failed>
                <span data-testid="per-gpu">{shown(eval, |e| if e.plan.world_size > 1 { format!("per GPU · {} GPUs ({} across them) · effective batch {}", e.plan.world_size, gib(e.plan.nvidia_smi_bytes_all_gpus()), e.plan.effective_batch) } else { format!("for one GPU · effective batch {}", e.plan.effective_batch) })}</span>
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

/// The breakdown bar: segments grouped (weights, trained + optimizer, activations, logits & loss,
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
                    <button type="button" class=format!("seg seg-{key} g-{}", chart::group_of(key).map_or("", |g| g.key())) data-testid=format!("{prefix}segment-{key}")
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
