//! The web page (wasm only). One `RwSignal<UiState>` holds everything a link carries; every
//! number is derived through `Memo`s from [`crate::planning::evaluate`]; views only format and draw
//! geometry computed in [`crate::web::chart`]. The URL is kept in sync (replaceState) so reload and
//! shared links restore the plan.

use leptos::prelude::*;
use wasm_bindgen::JsValue;

use crate::formats::fields;
use crate::formats::report::{gib, gib_signed};
use crate::model::plan::ComponentBytes;
use crate::model::{Settings, Target};
use crate::planning::evaluate::Axis;
use crate::planning::evaluate::{self, Evaluation};
use crate::web::chart;
use crate::web::controls::{FieldControl, SelectControl, Toggle};
use crate::web::layout;
use crate::web::link;
use crate::web::state::UiState;

/// Mounts the app on `<body>`.
pub fn mount() {
    leptos::mount::mount_to_body(App);
}

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
/// table, which a native test rules out, is skipped).
fn setting_controls(
    names: &'static [&'static str],
    state: RwSignal<UiState>,
    then: Option<fn(&mut Settings)>,
) -> impl IntoView {
    names
        .iter()
        .filter_map(|n| fields::by_name(n))
        .map(|field| match then {
            Some(f) => view! { <FieldControl field=field state=state then=f /> }.into_any(),
            None => view! { <FieldControl field=field state=state /> }.into_any(),
        })
        .collect_view()
}

/// The planner page.
#[component]
pub fn App() -> impl IntoView {
    let (initial, notices) = link::decode(&window().location().search().unwrap_or_default());
    let state = RwSignal::new(initial);
    let pinned: RwSignal<Option<UiState>> = RwSignal::new(None);
    let focused: RwSignal<Option<&'static str>> = RwSignal::new(None);
    let gpu_panel = RwSignal::new(false);

    let (eval, simulated) = crate::web::settle::settled_evaluation(state);
    let curve = Memo::new(move |_| {
        state.with(|st| {
            crate::web::state::arch_of(st)
                .map(|a| evaluate::curve(&a, &st.settings, st.axis))
                .unwrap_or_default()
        })
    });
    let pinned_eval =
        Memo::new(move |_| pinned.with(|p| p.as_ref().map(crate::web::state::evaluate_state)));
    let query = Memo::new(move |_| state.with(link::encode));
    sync_address_bar(query);
    let embed = move || state.with(|st| st.embed);
    let controls = view! { <Controls state=state /> };

    view! {
        <div class=move || if embed() { "page embed" } else { "page" }>
            <Show when=move || !embed()>
                <header class="top">
                    <h1>"lorafit"</h1>
                    <p class="tagline">"Will this LoRA / QLoRA fine-tune fit? Where does every GiB go? Computed in your browser from the model's shapes, checked against measured PyTorch peaks."</p>
                </header>
            </Show>
            {(!notices.is_empty()).then(|| view! {
                <ul class="notices" role="status" data-testid="notices">
                    {notices.iter().map(|n| view! { <li>{n.clone()}</li> }).collect_view()}
                </ul>
            })}
            <main class="layout">
                {controls}
                <section class="results" aria-live="polite"
                    data-reserve=move || if simulated.get() { "simulated" } else { "quick" }>
                    {move || eval.with(|r| r.as_ref().err().cloned()).map(|msg| view! { <p class="error" role="alert" data-testid="error">{msg}</p> })}
                    <Show when=move || eval.with(|r| r.is_ok())>
                        <Summary eval=eval focused=focused />
                    </Show>
                    <Show when=move || !embed()>
                        <super::panels::Fixes state=state eval=eval />
                        <CurveChart curve=curve eval=eval axis=Signal::from(Memo::new(move |_| state.with(|st| st.axis)))
                            on_axis=Callback::new(move |a: Axis| state.update(|st| st.axis = a)) />
                        <Compare pinned=pinned pinned_eval=pinned_eval eval=eval
                            on_pin=Callback::new(move |_: ()| pinned.set(Some(state.get_untracked())))
                            on_unpin=Callback::new(move |_: ()| pinned.set(None)) />
                        <section class="speed" aria-label="Speed">
                            <h2>"How long will it take?"</h2>
                            <p class="hint">"Step time and throughput from the FLOPs of the planned step, and a WebGPU microbenchmark of one adapted Linear on this device (loaded only when asked for)."</p>
                            <button type="button" data-testid="open-gpu-panel" on:click=move |_| gpu_panel.set(true)>"Time estimate & measure my GPU"</button>
                            <Show when=move || gpu_panel.get()>
                                <iframe data-testid="gpu-panel" class="gpu-panel" title="GPU benchmark and time estimate" src=move || format!("./gpu/?{}", query.get())></iframe>
                            </Show>
                        </section>
                        <super::panels::Lengths state=state eval=eval />
                        <super::measured::MeasuredRun state=state />
                        <super::panels::Import state=state />
                        <super::panels::Export state=state />
                        <Show when=move || eval.with(|r| r.is_ok())>
                            <Tables eval=eval />
                        </Show>
                        <super::evidence::Evidence />
                    </Show>
                    <Share state=state query=query />
                </section>
            </main>
        </div>
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

/// Model and GPU pickers, then every setting the layout places, drawn from the settings table.
#[component]
fn Controls(state: RwSignal<UiState>) -> impl IntoView {
    let search = RwSignal::new(String::new());
    let current_model = Memo::new(move |_| state.with(|st| st.model.clone()));
    let model_options =
        Memo::new(move |_| crate::web::state::model_options(&search.get(), &current_model.get()));
    let gpu_options = crate::web::state::gpu_options();
    view! {
        <section class="controls" aria-label="Settings">
            <div class="control">
                <label for="ctl-search">"Search models"</label>
                <input type="search" id="ctl-search" data-testid="search-model" placeholder="e.g. qwen, 70b, gemma"
                    prop:value=move || search.get() on:input:target=move |ev| search.set(ev.target().value()) />
            </div>
            <SelectControl label="Model" testid="select-model" options=model_options
                value=Memo::new(move |_| state.with(|st| st.model.clone()))
                on_set=Callback::new(move |v: String| state.update(|st| st.model = v)) />
            <SelectControl label="GPU" testid="select-gpu" options=Signal::derive(move || gpu_options.clone())
                value=Memo::new(move |_| state.with(|st| st.gpu.clone()))
                on_set=Callback::new(move |v: String| state.update(|st| st.gpu = v)) />
            {setting_controls(layout::MAIN, state, None)}
            <fieldset class="targets gpus">
                <legend>"GPUs"</legend>
                {setting_controls(layout::GPUS, state, Some(layout::after_gpu_count))}
            </fieldset>
            <fieldset class="targets">
                <legend>"LoRA target modules"</legend>
                <Toggle label="all-linear" testid="target-all" checked=Memo::new(move |_| state.with(|st| st.settings.targets.len() == Target::ALL.len()))
                    on_set=Callback::new(move |on: bool| state.update(|st| st.settings.targets = if on { Target::ALL.to_vec() } else { vec![Target::Q, Target::V] })) />
                {setting_controls(&["target_modules"], state, None)}
            </fieldset>
            <fieldset class="targets">
                <legend>"modules_to_save (trained in full)"</legend>
                {setting_controls(&["modules_to_save"], state, None)}
            </fieldset>
            <Show when=move || state.with(|st| crate::web::state::arch_of(st).is_ok_and(|a| a.is_moe()))>
                <fieldset class="targets moe" data-testid="moe-settings">
                    <legend>"Mixture of experts"</legend>
                    {setting_controls(layout::MOE, state, None)}
                </fieldset>
            </Show>
        </section>
    }
}

/// The link to this plan and the embed snippet.
#[component]
fn Share(state: RwSignal<UiState>, query: Memo<String>) -> impl IntoView {
    let embed = move || state.with(|st| st.embed);
    let share_url = Memo::new(move |_| format!("{}?{}", page_url_without_query(), query.get()));
    let embed_code = Memo::new(move |_| {
        let st = state.with(|st| UiState {
            embed: true,
            ..st.clone()
        });
        format!(
            "<iframe src=\"{}?{}\" title=\"lorafit memory plan\" width=\"640\" height=\"560\" style=\"border:0\" loading=\"lazy\"></iframe>",
            page_url_without_query(),
            link::encode(&st)
        )
    });
    view! {
                    <section class="share" aria-label="Share">
                        <div class="share-row">
                            <button type="button" data-testid="copy-link" on:click=move |_| copy_to_clipboard(&share_url.get_untracked())>"Copy link"</button>
                            <input type="text" readonly aria-label="Link to this plan" data-testid="share-url" prop:value=move || share_url.get() />
                        </div>
                        <Show when=move || !embed()>
                            <div class="share-row">
                                <button type="button" data-testid="copy-embed" on:click=move |_| copy_to_clipboard(&embed_code.get_untracked())>"Copy embed code"</button>
                                <textarea readonly rows="2" aria-label="Embed code" data-testid="embed-code" prop:value=move || embed_code.get()></textarea>
                            </div>
                        </Show>
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

/// Verdict, totals, fit limits and the stacked bar with the formula of the focused segment.
/// Built once; only text nodes and attributes follow the evaluation (fast slider updates).
#[component]
fn Summary(
    /// The evaluation to show.
    eval: Memo<Result<Evaluation, String>>,
    /// Component whose formula is shown.
    focused: RwSignal<Option<&'static str>>,
) -> impl IntoView {
    let limit = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_else(|| "none".into());
    let status = move || read(eval, |e| e.verdict.status.name().to_string());
    let detail = move || {
        let key = focused.get()?;
        let ts: Vec<crate::model::Term> = read(eval, |e| {
            e.plan
                .terms
                .iter()
                .filter(|t| t.component.key() == key && t.bytes > 0)
                .cloned()
                .collect()
        });
        let label = ts.first().map(|t| t.component.label()).unwrap_or("");
        Some(view! {
            <div class="detail" data-testid="segment-detail">
                <strong>{label}</strong>
                <ul>{ts.into_iter().map(|t| view! { <li>{gib(t.bytes)} " — " {t.label.to_string()} <br/><code>{t.formula()}</code><br/><code class="values">{format!("= {}", t.values())}</code></li> }).collect_view()}</ul>
            </div>
        })
    };
    let bar = Memo::new(move |_| {
        eval.with(|r| {
            r.as_ref().ok().map(|e| {
                (
                    chart::bar(&e.plan, e.verdict.capacity_bytes),
                    e.verdict.capacity_bytes,
                )
            })
        })
    });
    view! {
        <div class="summary">
            <div class="totals">
                <div class=move || format!("verdict verdict-{}", status())>
                    <span class="big" data-testid="verdict">{status}</span>
                    <span>" on " {move || read(eval, |e| e.gpu_name.clone())} " · headroom " <span data-testid="headroom">{move || read(eval, |e| gib_signed(e.verdict.headroom_bytes))}</span></span>
                </div>
                <dl>
                    <dt>"Numbers are"</dt><dd data-testid="per-gpu">{move || read(eval, |e| if e.plan.world_size > 1 { format!("per GPU · {} GPUs · effective batch {}", e.plan.world_size, e.plan.effective_batch) } else { format!("for one GPU · effective batch {}", e.plan.effective_batch) })}</dd>
                    <dt>"CPU RAM for offload"</dt><dd data-testid="cpu-ram">{move || read(eval, |e| format!("{} per GPU · {} per node", gib(e.plan.cpu_bytes_per_rank), gib(e.plan.cpu_bytes_per_node)))}</dd>
                    <dt>"Peak allocated"</dt><dd data-testid="peak-allocated">{move || read(eval, |e| gib(e.plan.peak_allocated_bytes))}</dd>
                    <dt>"Peak reserved (estimate)"</dt><dd data-testid="peak-reserved">{move || read(eval, |e| gib(e.plan.peak_reserved_bytes))}</dd>
                    <dt>"nvidia-smi (estimate)"</dt><dd data-testid="peak-smi">{move || read(eval, |e| gib(e.plan.nvidia_smi_bytes))}</dd>
                    <dt>"Peak phase"</dt><dd data-testid="peak-phase">{move || read(eval, |e| format!("{} — {}", e.plan.peak_phase.name(), e.plan.peak_moment))}</dd>
                    <dt>"Parameters"</dt><dd data-testid="params">{move || read(eval, |e| {
                        let p = &e.plan.params;
                        if p.active_params != p.base_params {
                            format!("{:.2} B ({:.2} B active per token) · {:.2} M trainable", p.base_params as f64 / 1e9, p.active_params as f64 / 1e9, p.trainable_params as f64 / 1e6)
                        } else {
                            format!("{:.2} B · {:.2} M trainable", p.base_params as f64 / 1e9, p.trainable_params as f64 / 1e6)
                        }
                    })}</dd>
                    <dt>"Largest micro-batch that fits"</dt><dd data-testid="max-batch">{move || read(eval, |e| limit(e.max_batch))}</dd>
                    <dt>"Longest sequence that fits"</dt><dd data-testid="max-seq">{move || read(eval, |e| limit(e.max_seq))}</dd>
                </dl>
                <ul class="notes" data-testid="plan-notes">
                    {move || read(eval, |e| e.plan.notes.clone()).into_iter().map(|n| view! { <li>{n}</li> }).collect_view()}
                </ul>
                {detail}
            </div>
            <StackedBar bar=bar focused=Some(focused) title="Memory at the peak" />
        </div>
    }
}

/// The stacked bar (live tensors by component, reserve and context bands, capacity line).
/// Segments are keyed by component, so a slider move only updates their attributes.
#[component]
fn StackedBar(
    /// Geometry and capacity (None draws nothing).
    bar: Memo<Option<(chart::Bar, u128)>>,
    /// Where to report focus/hover (None: not interactive).
    focused: Option<RwSignal<Option<&'static str>>>,
    /// Accessible title.
    title: &'static str,
    /// Prefix of segment test ids (empty for the main bar).
    #[prop(optional)]
    prefix: &'static str,
) -> impl IntoView {
    let h = 320.0;
    let y = move |start: f64, size: f64| 5.0 + h * (1.0 - start - size);
    let seg = move |key: &'static str| {
        bar.with(|b| {
            b.as_ref()
                .and_then(|(b, _)| b.segments.iter().find(|s| s.key == key).cloned())
        })
    };
    let band = move |i: usize| {
        bar.with(|b| {
            b.as_ref()
                .and_then(|(b, _)| b.bands.get(i).copied())
                .map(|(_, _, st, sz)| (st, sz))
                .unwrap_or((0.0, 0.0))
        })
    };
    let cap_y = move || {
        bar.with(|b| {
            b.as_ref()
                .map(|(b, _)| y(b.capacity_at, 0.0))
                .unwrap_or(0.0)
        })
    };
    let keys = move || {
        bar.with(|b| {
            b.as_ref()
                .map(|(b, _)| b.segments.iter().map(|s| s.key).collect::<Vec<_>>())
                .unwrap_or_default()
        })
    };
    view! {
        <svg class="stack" viewBox=format!("0 0 200 {}", h + 10.0) role="img" aria-label=title>
            <For each=keys key=|k| *k let:key>
                <rect class=format!("seg seg-{key}") data-testid=format!("{prefix}segment-{key}")
                    x="8" width="96" tabindex=if focused.is_some() { "0" } else { "-1" }
                    y=move || seg(key).map(|s| y(s.start, s.size)).unwrap_or(0.0)
                    height=move || seg(key).map(|s| (h * s.size).max(0.5)).unwrap_or(0.0)
                    on:mouseenter=move |_| if let Some(f) = focused { f.set(Some(key)) }
                    on:focus=move |_| if let Some(f) = focused { f.set(Some(key)) }>
                    <title>{move || seg(key).map(|s| format!("{}: {}", s.label, gib(s.bytes))).unwrap_or_default()}</title>
                </rect>
            </For>
            <rect class="band band-reserved" x="8" width="96" y=move || { let (st, sz) = band(0); y(st, sz) } height=move || h * band(0).1><title>"allocator reserve (estimate)"</title></rect>
            <rect class="band band-smi" x="8" width="96" y=move || { let (st, sz) = band(1); y(st, sz) } height=move || h * band(1).1><title>"CUDA context (nvidia-smi)"</title></rect>
            <line class="capacity" x1="0" x2="200" y1=cap_y y2=cap_y />
            <text class="capacity-label" x="108" y=move || { let c = cap_y(); if c < 16.0 { c + 12.0 } else { c - 3.0 } }>
                {move || bar.with(|b| b.as_ref().map(|(_, cap)| format!("GPU {}", gib(*cap))).unwrap_or_default())}
            </text>
        </svg>
    }
}

/// Drawn geometry of the curve chart.
#[derive(Clone, Debug, PartialEq)]
struct CurveGeometry {
    areas: Vec<chart::Area>,
    cap_y: f64,
    ticks: Vec<(f64, String)>,
    marker: Option<(f64, u64)>,
    capacity: u128,
}

/// Peak vs sequence length (or batch), stacked by component, with the GPU limit.
#[component]
fn CurveChart(
    /// Curve points.
    curve: Memo<Vec<evaluate::CurvePoint>>,
    /// Current evaluation (fit limits, capacity).
    eval: Memo<Result<Evaluation, String>>,
    /// Current axis.
    axis: Signal<Axis>,
    /// Axis change.
    on_axis: Callback<Axis>,
) -> impl IntoView {
    let (w, h) = (560.0, 220.0);
    let geom = Memo::new(move |_| {
        let pts = curve.get();
        eval.with(|r| {
            r.as_ref().ok().map(|e| {
                let capacity = e.verdict.capacity_bytes;
                let (areas, cap_y, xs) = chart::areas(&pts, capacity, w, h);
                let limit = if axis.get() == Axis::Seq {
                    e.max_seq
                } else {
                    e.max_batch
                };
                let marker = limit.and_then(|v| chart::x_of(&pts, v, w).map(|x| (x, v)));
                let ticks = pts
                    .iter()
                    .zip(xs)
                    .map(|(p, x)| (x, p.x.to_string()))
                    .collect::<Vec<_>>();
                CurveGeometry {
                    areas,
                    cap_y,
                    ticks,
                    marker,
                    capacity,
                }
            })
        })
    });
    let cap_y = move || geom.with(|g| g.as_ref().map(|g| g.cap_y).unwrap_or(h));
    view! {
        <section class="curve" aria-label="Memory curve">
            <div class="curve-head">
                <h2>{move || if axis.get() == Axis::Seq { "Peak memory vs sequence length" } else { "Peak memory vs micro-batch" }}</h2>
                <button type="button" data-testid="toggle-axis" on:click=move |_| on_axis.run(if axis.get_untracked() == Axis::Seq { Axis::Batch } else { Axis::Seq })>
                    {move || if axis.get() == Axis::Seq { "show vs batch" } else { "show vs length" }}
                </button>
            </div>
            <svg viewBox=format!("-20 -4 {} {}", w + 40.0, h + 24.0) class="curve-svg" role="img" aria-label="stacked memory curve" data-testid="curve">
                <For each=move || geom.with(|g| g.as_ref().map(|g| g.areas.iter().map(|a| (a.key, a.label)).collect::<Vec<_>>()).unwrap_or_default()) key=|k| k.0 let:k>
                    <path class=format!("area seg-{}", k.0) d=move || geom.with(|g| g.as_ref().and_then(|g| g.areas.iter().find(|a| a.key == k.0).map(|a| a.d.clone())).unwrap_or_default())>
                        <title>{k.1}</title>
                    </path>
                </For>
                <line class="capacity" x1="0" x2=w y1=cap_y y2=cap_y />
                <text class="capacity-label" x=w - 4.0 y=move || cap_y() - 4.0 text-anchor="end">{move || geom.with(|g| g.as_ref().map(|g| format!("GPU {}", gib(g.capacity))).unwrap_or_default())}</text>
                {move || geom.with(|g| g.as_ref().and_then(|g| g.marker)).map(|(x, v)| view! {
                    <line class="fit-marker" x1=x x2=x y1="0" y2=h />
                    <text class="fit-label" x=(x + 4.0).min(w - 90.0) y="12" data-testid="curve-limit">{format!("fits up to {v}")}</text>
                })}
                {move || geom.with(|g| g.as_ref().map(|g| g.ticks.clone()).unwrap_or_default()).into_iter().map(|(x, label)| view! { <text class="tick" x=x y=h + 16.0 text-anchor="middle">{label}</text> }).collect_view()}
            </svg>
        </section>
    }
}

/// Pin A, compare with the current config B: two bars and per-component deltas.
#[component]
fn Compare(
    /// Pinned state.
    pinned: RwSignal<Option<UiState>>,
    /// Its evaluation.
    pinned_eval: Memo<Option<Result<Evaluation, String>>>,
    /// Current evaluation.
    eval: Memo<Result<Evaluation, String>>,
    /// Pin the current config.
    on_pin: Callback<()>,
    /// Drop the pinned config.
    on_unpin: Callback<()>,
) -> impl IntoView {
    view! {
        <section class="compare" aria-label="Compare">
            <div class="curve-head">
                <h2>"Compare"</h2>
                <button type="button" data-testid="pin" on:click=move |_| on_pin.run(())>"Pin current as A"</button>
                <Show when=move || pinned.with(|p| p.is_some())>
                    <button type="button" data-testid="unpin" on:click=move |_| on_unpin.run(())>"Unpin"</button>
                </Show>
            </div>
            {move || match (pinned_eval.get(), eval.get()) {
                (Some(Ok(a)), Ok(b)) => {
                    let rows: Vec<(ComponentBytes, u128)> = a.plan.breakdown.iter().cloned().zip(b.plan.breakdown.iter().map(|c| c.bytes)).filter(|(x, y)| x.bytes > 0 || *y > 0).collect();
                    let total = b.plan.peak_allocated_bytes as i128 - a.plan.peak_allocated_bytes as i128;
                    view! {
                        <div class="compare-body" data-testid="compare">
                            <figure><StackedBar bar={ let g = (chart::bar(&a.plan, a.verdict.capacity_bytes), a.verdict.capacity_bytes); Memo::new(move |_| Some(g.clone())) } focused=None title="A (pinned)" prefix="a-" /><figcaption>"A (pinned)"</figcaption></figure>
                            <figure><StackedBar bar={ let g = (chart::bar(&b.plan, b.verdict.capacity_bytes), b.verdict.capacity_bytes); Memo::new(move |_| Some(g.clone())) } focused=None title="B (current)" prefix="b-" /><figcaption>"B (current)"</figcaption></figure>
                            <table class="deltas">
                                <thead><tr><th scope="col">"Component"</th><th scope="col">"A"</th><th scope="col">"B"</th><th scope="col">"B − A"</th></tr></thead>
                                <tbody>
                                    {rows.into_iter().map(|(c, bb)| view! {
                                        <tr><td>{c.label}</td><td class="num">{gib(c.bytes)}</td><td class="num">{gib(bb)}</td>
                                        <td class="num" data-testid=format!("delta-{}", c.key)>{gib_signed(bb as i128 - c.bytes as i128)}</td></tr>
                                    }).collect_view()}
                                    <tr class="total"><td>"Peak allocated"</td><td class="num">{gib(a.plan.peak_allocated_bytes)}</td><td class="num">{gib(b.plan.peak_allocated_bytes)}</td><td class="num" data-testid="delta-total">{gib_signed(total)}</td></tr>
                                </tbody>
                            </table>
                        </div>
                    }.into_any()
                }
                _ => view! { <p class="hint">"Pin a configuration, change settings, and see A vs B here."</p> }.into_any(),
            }}
        </section>
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
        <table class="breakdown" data-testid="breakdown">
            <caption>"Memory at the peak, with the formula behind each number"</caption>
            <thead><tr><th scope="col">"Component"</th><th scope="col">"What"</th><th scope="col">"Formula"</th><th scope="col">"Size"</th></tr></thead>
            <tbody>
                <For each=keys key=|k| k.clone() let:k>
                    {
                        let (k1, k2) = (k.clone(), k.clone());
                        view! {
                            <tr>
                                <td><span class=format!("swatch seg-{}", k.0.key())></span>{k.0.label()}</td>
                                <td>{k.1.clone()}</td>
                                <td>
                                    <code>{move || term(&k1).map(|t| t.formula()).unwrap_or_default()}</code><br/>
                                    <code class="values">{move || term(&k2).map(|t| format!("= {}", t.values())).unwrap_or_default()}</code>
                                </td>
                                <td class="num">{move || term(&k).map(|t| gib(t.bytes)).unwrap_or_default()}</td>
                            </tr>
                        }
                    }
                </For>
            </tbody>
        </table>
        <table class="phases">
            <caption>"Highest memory of each phase"</caption>
            <tbody>
                {move || phases().into_iter().map(|(name, moment, bytes)| view! { <tr><th scope="row">{name}</th><td>{moment}</td><td class="num">{bytes}</td></tr> }).collect_view()}
            </tbody>
        </table>
    }
}
