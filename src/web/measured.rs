//! The "Read a real run" panel (wasm only): a PyTorch memory snapshot, `memory_summary()` text
//! or `memory_stats()` JSON dropped on the page or chosen with the file picker, read in the
//! browser (nothing is uploaded) and compared with the plan of the page's current configuration.
//! The reading runs in a Web Worker with its own wasm ([`crate::web::analyse`], started when a
//! file is dropped, stopped when its report is back), which says how far it got; the page only
//! shows that progress and the report, so it stays responsive on a 200 MB snapshot and its own
//! wasm carries neither the snapshot reader nor the inflater.

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::formats::report::gib;
use crate::planning::inspect::Inspection;
use crate::web::lang::{t, ts};
use crate::web::link;
use crate::web::state::UiState;
use crate::web::worker::Job;

/// Largest file read (the parser's own limit on decompressed input is the same).
const MAX_FILE_BYTES: f64 = 512.0 * 1024.0 * 1024.0;

/// Reads `file` in the page's worker ([`crate::web::analyse`]) and compares it with the plan of
/// the page's configuration, passing the worker's progress texts to `progress`.
async fn analyse_file(
    file: web_sys::File,
    state: RwSignal<UiState>,
    progress: impl Fn(String) + 'static,
) -> Result<Inspection, String> {
    super::panels::check_size(&file, MAX_FILE_BYTES)?;
    let job = Job::new("analyse").with("file", &file).with(
        "query",
        &JsValue::from_str(&state.with_untracked(link::encode)),
    );
    let json = job.run(progress).await?;
    serde_json::from_str(&json).map_err(|e| format!("the analyser's report could not be read: {e}"))
}

fn mib(b: u64) -> String {
    gib(b as u128)
}

/// The panel.
#[component]
pub fn MeasuredRun(
    /// Page state (the configuration the run is compared with).
    state: RwSignal<UiState>,
) -> impl IntoView {
    let status: RwSignal<Option<String>> = RwSignal::new(None);
    let result: RwSignal<Option<Result<Inspection, String>>> = RwSignal::new(None);
    // The file chosen last wins: progress and a report of an earlier one still being read are
    // dropped when they arrive.
    let latest = StoredValue::new(0u32);
    let analyse = move |file: web_sys::File| {
        let this = latest.get_value().wrapping_add(1);
        latest.set_value(this);
        let current = move || latest.get_value() == this;
        status.set(Some(format!(
            "reading {} ({:.1} MiB)…",
            file.name(),
            file.size() / 1048576.0
        )));
        result.set(None);
        spawn_local(async move {
            let progress = move |text| {
                if current() {
                    status.set(Some(text));
                }
            };
            let r = analyse_file(file, state, progress).await;
            if current() {
                status.set(None);
                result.set(Some(r));
            }
        });
    };
    let on_change = move |ev: leptos::ev::Event| {
        let file = ev
            .target()
            .and_then(|t| t.dyn_into::<web_sys::HtmlInputElement>().ok())
            .and_then(|i| i.files())
            .and_then(|l| l.get(0));
        if let Some(f) = file {
            analyse(f);
        }
    };
    let on_drop = move |ev: leptos::ev::DragEvent| {
        ev.prevent_default();
        if let Some(f) = ev
            .data_transfer()
            .and_then(|d| d.files())
            .and_then(|l| l.get(0))
        {
            analyse(f);
        }
    };
    view! {
        <section class="card measured" id="measured" aria-label=t("Read a real run") data-testid="measured-panel"
            on:dragover=move |ev: leptos::ev::DragEvent| ev.prevent_default() on:drop=on_drop>
            <h2>{t("Read a real run")}</h2>
            <p class="hint">{t("Drop a memory snapshot (torch.cuda.memory._dump_snapshot, .pickle or .pickle.gz), the text of torch.cuda.memory_summary() or torch.cuda.memory_stats() as JSON. It is read in this browser, nothing is uploaded, and compared with the plan of the configuration above.")}</p>
            <input type="file" aria-label=t("memory snapshot, summary or stats file") data-testid="measured-file" on:change=on_change />
            {move || status.get().map(|s| view! { <p role="status" data-testid="measured-status">{ts(s)}</p> })}
            {move || result.get().map(|r| match r {
                Err(e) => view! { <p class="error" role="alert" data-testid="measured-error">{ts(e)}</p> }.into_any(),
                Ok(ins) => {
                    let bound = if ins.trace_truncated { " (lower bound)" } else { "" };
                    let planned = ins.planned.clone();
                    view! {
                        <dl class="lengths-report" data-testid="measured-report">
                            <dt>{t("file")}</dt><dd>{t(ins.kind)}</dd>
                            <dt>{t("peak allocated")}</dt>
                            <dd data-testid="measured-peak-allocated">{ts(format!("{}{bound}", ins.peak_allocated_bytes.map(mib).unwrap_or_else(|| "—".into())))}
                                {planned.as_ref().map(|p| {ts(format!(" · planned {}", mib(p.peak_allocated_bytes)))})}</dd>
                            <dt>{t("peak reserved")}</dt>
                            <dd data-testid="measured-peak-reserved">{ts(format!("{}{bound}", ins.peak_reserved_bytes.map(mib).unwrap_or_else(|| "—".into())))}
                                {planned.as_ref().map(|p| {ts(format!(" · planned {}", mib(p.peak_reserved_bytes)))})}</dd>
                        </dl>
                        {keep_overhead(&ins, state)}
                        {run_bars(&ins)}
                        {run_timeline(&ins)}
                        <ul data-testid="measured-unplanned">
                            {ins.unplanned.iter().map(|u| view! {
                                <li data-testid="measured-unplanned-item" data-bytes=u.bytes.to_string() data-phase=u.phase.clone()>
                                    {ts(format!("unplanned: {} × {} allocated in {}", u.count, mib(u.bytes_each), u.phase))}
                                </li>
                            }).collect_view()}
                        </ul>
                        <ul data-testid="measured-findings">
                            {ins.findings.iter().map(|f| { let f = f.clone(); view! { <li>{ts(f)}</li> } }).collect_view()}
                        </ul>
                    }.into_any()
                }
            })}
        </section>
    }
}

/// Measured against planned as two bars on one scale: the plan's allocated memory and cache, the
/// run's allocated memory with the part the plan does not have (the unplanned tensors) as its own
/// segment, and its cache.
fn run_bars(ins: &Inspection) -> Option<impl IntoView> {
    let p = ins.planned.as_ref()?;
    let (ma, mr) = (ins.peak_allocated_bytes?, ins.peak_reserved_bytes?);
    let unplanned: u64 = ins.unplanned.iter().map(|u| u.bytes).sum::<u64>().min(ma);
    let scale = [p.peak_allocated_bytes, p.peak_reserved_bytes, ma, mr]
        .into_iter()
        .max()?
        .max(1) as f64;
    let w = |b: u64| format!("{:.3}%", b as f64 / scale * 100.0);
    let seg = |class: &'static str, id: &'static str, what: &'static str, bytes: u64| {
        let label = Signal::derive({
            let lang = crate::web::lang::lang();
            move || format!("{}: {}", crate::web::i18n::tr(lang.get(), what), mib(bytes))
        });
        view! { <span class=format!("rseg {class}") data-testid=id data-bytes=bytes.to_string() style:width=w(bytes) title=label aria-label=label></span> }
    };
    Some(view! {
        <div class="run-bars" data-testid="measured-bars">
            <div class="run-row"><span class="run-name">{t("plan")}</span>
                <div class="run-track">
                    {seg("planned", "bar-planned-allocated", "allocated", p.peak_allocated_bytes)}
                    {seg("cache", "bar-planned-cache", "allocator cache", p.peak_reserved_bytes.saturating_sub(p.peak_allocated_bytes))}
                </div>
            </div>
            <div class="run-row"><span class="run-name">{t("your run")}</span>
                <div class="run-track">
                    {seg("planned", "bar-measured-allocated", "allocated, as planned", ma - unplanned)}
                    {seg("unplanned", "bar-unplanned", "not in the plan", unplanned)}
                    {seg("cache", "bar-measured-cache", "allocator cache", mr.saturating_sub(ma))}
                </div>
            </div>
            <p class="run-legend"><span class="rsw planned"></span>{t("allocated")}" "<span class="rsw unplanned"></span>{t("not in the plan")}" "<span class="rsw cache"></span>{t("allocator cache")}</p>
        </div>
    })
}

/// Allocated and reserved over the recorded step, the plan's allocated memory over the same
/// step, and where its phases start.
fn run_timeline(ins: &Inspection) -> Option<impl IntoView> {
    if ins.timeline.len() < 2 {
        return None;
    }
    let (w, h) = (600.0, 160.0);
    let g =
        crate::web::chart::timeline(&ins.timeline, &ins.planned_timeline, &ins.phase_marks, w, h);
    let described = format!("{} {}", ins.timeline.len(), ins.phase_marks.len());
    Some(view! {
        <figure class="run-timeline">
            <svg viewBox=format!("-40 -14 {} {}", w + 50.0, h + 34.0) role="img" aria-label=t("Memory over the recorded step: measured allocated and reserved, the plan's allocated, and the plan's phases") data-testid="measured-timeline" data-points=described>
                {g.y_ticks.iter().map(|(y, l)| view! {
                    <line class="grid" x1="0" x2=w y1=*y y2=*y />
                    <text class="tick" x="-5" dy="3" y=*y text-anchor="end">{l.clone()}</text>
                }).collect_view()}
                {g.marks.iter().map(|(x, _)| view! { <line class="phase-mark" x1=*x x2=*x y1="-4" y2=h /> }).collect_view()}
                {g.labels.iter().map(|(x, phase)| view! { <text class="phase-label" x=*x + 3.0 y="-4">{t(phase)}</text> }).collect_view()}
                <path class="tl-reserved" d=g.reserved.clone() />
                <path class="tl-measured" d=g.measured.clone() />
                <path class="tl-planned" d=g.planned.clone() />
                <text class="axis-label" x=w / 2.0 y=h + 18.0 text-anchor="middle">{t("share of the step's allocations")}</text>
                <text class="axis-label" x="-36" y="-4">"GiB"</text>
            </svg>
            <figcaption class="run-legend"><span class="rsw tl-m"></span>{t("measured allocated")}" "<span class="rsw tl-r"></span>{t("measured reserved")}" "<span class="rsw tl-p"></span>{t("planned allocated")}</figcaption>
        </figure>
    })
}

/// "Use my measured overhead": what the run held beyond its plan becomes a setting (kept in the
/// link), so the rest of the page plans with it as its own segment.
fn keep_overhead(ins: &Inspection, state: RwSignal<UiState>) -> Option<impl IntoView> {
    let p = ins.planned.as_ref()?;
    let measured = ins.peak_allocated_bytes?;
    // Relative to what the plan has now, including any overhead already kept.
    let kept = state.with_untracked(|st| st.settings.measured_overhead_bytes);
    let extra = measured
        .checked_sub(p.peak_allocated_bytes)?
        .saturating_add(kept);
    if extra < 1 << 20 {
        return None;
    }
    let text = format!(
        "use my measured overhead: {} more in every phase",
        mib(extra)
    );
    Some(view! {
        <p class="keep-overhead">
            <button type="button" data-testid="use-measured-overhead" data-bytes=extra.to_string()
                on:click=move |_| state.update(|st| st.settings.measured_overhead_bytes = extra)>{ts(text)}</button>
        </p>
    })
}
