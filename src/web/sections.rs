//! The sections bundle (wasm only; `src/bin/lorafit-sections.rs`): everything below the page's
//! first screen, loaded the first time the visitor opens a section ([`crate::web::bridge`]).
//! It mounts into the page's `#sections-root`, holds its own copy of the state (from the page's
//! link, kept in step through the bridge's events) and derives its own evaluation with the same
//! [`crate::web::setup::setup`] as the page.

use leptos::prelude::*;

use crate::formats::report::{gib, gib_signed};
use crate::model::Target;
use crate::planning::evaluate::{self, Axis, Evaluation};
use crate::web::bridge;
use crate::web::chart::{self, Group};
use crate::web::controls::{flag, text, Toggle};
use crate::web::controls::{pct, read, status_words};
use crate::web::i18n::{tr, Lang};
use crate::web::lang::{now, t, ts, tx};
use crate::web::layout;
use crate::web::link;
use crate::web::setup::{
    copy_to_clipboard, page_url_without_query, reserve_state, setting_controls_typed, setup,
    without, Role, ZH_URL,
};
use crate::web::state::{arch_of, UiState};

/// Mounts the sections into the page's `#sections-root` with the state of its `data-query`
/// (the bundle's start function). Shown in Chinese: the table first, as the page does.
pub fn mount() {
    let Some(root) = bridge::root() else { return };
    // The page's state, with what no link carries (the Hub path) from the mount point too.
    let local = UiState {
        hub: root.get_attribute("data-hub"),
        ..UiState::default()
    };
    let initial = link::decode_shared(
        &root.get_attribute("data-query").unwrap_or_default(),
        &local,
    );
    let show = move |initial: UiState| {
        use wasm_bindgen::JsCast;
        let Ok(root) = root.dyn_into::<web_sys::HtmlElement>() else {
            return;
        };
        leptos::mount::mount_to(root, move || view! { <Sections initial=initial /> }).forget();
        bridge::send(bridge::READY, "");
    };
    crate::web::lang::use_loader(crate::web::lang::native);
    crate::web::lang::table_first(initial.lang, ZH_URL, move |failed| {
        let mut initial = initial;
        if failed.is_some() {
            initial.lang = Some(Lang::En);
        }
        show(initial)
    });
}

/// Keeps the sections' state and the page's in step: the page's changes come in (applied one
/// task later, so the page's own update paints first), the sections' own changes go out.
fn follow_page(state: RwSignal<UiState>, query: Memo<String>) {
    // The last state the page sent: the sections do not send it back.
    let from_page: StoredValue<Option<UiState>> = StoredValue::new(Some(state.get_untracked()));
    let pending: StoredValue<Option<String>> = StoredValue::new(None);
    bridge::listen(bridge::STATE, move |q| {
        let first = pending.get_value().is_none();
        pending.set_value(Some(q));
        if first {
            set_timeout(
                move || {
                    let Some(q) = pending.get_value() else { return };
                    pending.set_value(None);
                    let next = state.with_untracked(|st| link::decode_shared(&q, st));
                    from_page.set_value(Some(next.clone()));
                    if state.with_untracked(|st| *st != next) {
                        state.set(next);
                    }
                },
                std::time::Duration::ZERO,
            );
        }
    });
    Effect::new(move |_| {
        let q = query.get();
        let echo = state.with_untracked(|st| from_page.with_value(|p| p.as_ref() == Some(st)));
        if !echo {
            bridge::send(bridge::SET, &q);
        }
    });
}

/// Every section, in the page's order.
#[component]
fn Sections(initial: UiState) -> impl IntoView {
    let (state, _, eval, query, simulated) = setup(
        (initial, Vec::new()),
        Role::Sections,
        crate::web::state::settle_whole_job,
    );
    follow_page(state, query);
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
    view! {
        <div class="sections" data-testid="sections-body" data-query=query data-reserve=move || reserve_state(simulated, eval)>
            <Examples state=state />
            <section class="card" id="more" aria-labelledby="h-more">
                <h2 id="h-more">{t("More training settings")}</h2>
                <div class="controls-grid">{setting_controls_typed(layout::TRAINING, state, None)}</div>
                // Full fine-tuning has no adapters: no targets, nothing saved beside them.
                <fieldset class="targets" class:hidden=flag(move || state.with(|st| st.settings.base_trained()))>
                    <legend>{t("LoRA target modules")}</legend>
                    <Toggle label="all-linear" testid="target-all" checked=flag(move || state.with(|st| st.settings.targets.len() == Target::ALL.len()))
                        on_set=Callback::new(move |on: bool| state.update(|st| st.settings.targets = if on { Target::ALL.to_vec() } else { vec![Target::Q, Target::V] })) />
                    {setting_controls_typed(&["target_modules"], state, None)}
                </fieldset>
                <fieldset class="targets" class:hidden=flag(move || state.with(|st| st.settings.base_trained()))>
                    <legend>{t("modules_to_save (trained in full)")}</legend>
                    {setting_controls_typed(&["modules_to_save"], state, None)}
                </fieldset>
                <Show when=move || state.with(|st| arch_of(st).is_ok_and(|a| a.vision.is_some()))>
                    <fieldset class="targets images" data-testid="image-more-settings">
                        <legend>{t("Images: resize limits and the vision tower")}</legend>
                        {setting_controls_typed(layout::IMAGES_MORE, state, None)}
                    </fieldset>
                </Show>
                <Show when=move || state.with(|st| arch_of(st).is_ok_and(|a| a.is_moe()))>
                    <fieldset class="targets moe" data-testid="moe-settings">
                        <legend>{t("Mixture of experts")}</legend>
                        {setting_controls_typed(layout::MOE, state, None)}
                    </fieldset>
                </Show>
            </section>
            <section class="card" id="gpus" aria-labelledby="h-gpus">
                <h2 id="h-gpus">{t("Several GPUs")}</h2>
                <p class="hint">{t("With more than one GPU, every number is per GPU; a strategy and CPU offload appear here.")}</p>
                <div class="controls-grid">{setting_controls_typed(layout::GPUS, state, Some(layout::after_gpu_count))}</div>
            </section>
            <super::job::JobSection state=state eval=eval />
            <super::panels::Fixes state=state eval=eval how=advice />
            <CurveChart curve=curve eval=eval state=state />
            <Compare pinned=pinned eval=eval />
            <Tables eval=eval />
            <super::panels::Lengths state=state eval=eval />
            <super::measured::MeasuredRun state=state />
            <super::training_config::TrainingConfig state=state />
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
        <section class="card examples" id="examples" aria-labelledby="h-examples" data-testid="examples">
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
                {Group::ALLOCATED.iter().map(|g| {
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
                {Group::ALLOCATED.iter().map(|g| view! { <li><span class=format!("sw g-{}", g.key()) aria-hidden="true"></span>{t(g.label())}</li> }).collect_view()}
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
                                        <td><span class=format!("sw seg-{} g-{}", k.0.key(), k.0.group().key()) aria-hidden="true"></span>{t(k.0.label())}</td>
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
            <table class="phases" data-testid="phase-peaks">
                <caption>{t("Highest memory of each phase")}</caption>
                <tbody>
                    {move || phases().into_iter().map(|(name, moment, bytes)| view! { <tr data-phase=name><th scope="row">{t(name)}</th><td>{ts(moment)}</td><td class="num">{bytes}</td></tr> }).collect_view()}
                </tbody>
            </table>
        </section>
    }
}
