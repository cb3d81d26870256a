//! The "Measure my GPU" page (wasm, feature `gpu`): runs the LoRA matmul kernels on the
//! visitor's GPU through WebGPU, asynchronously, cancellable, within a ~3 s budget; compares the
//! measured rate with the selected catalog GPU; turns the planned run into a time estimate.

use std::cell::Cell;
use std::rc::Rc;

use leptos::prelude::*;
use leptos::task::spawn_local;

use crate::formats::catalog;
use crate::gpu::kernels::{Kernel, Precision};
use crate::gpu::runtime::{self as gpu, Measurement};
use crate::model::{Architecture, Plan, Settings};
use crate::planning::time;
use crate::web::lang::{t as tl, ts, tx};
use crate::web::link;

/// Mounts the benchmark page (in Chinese, once the planner's Chinese table is fetched).
pub fn mount() {
    let (st, _) = link::decode(&window().location().search().unwrap_or_default());
    crate::web::lang::use_loader(crate::web::lang::native);
    if st.lang == Some(crate::web::i18n::Lang::Zh) {
        // (Leptos's executor starts with the mount: the browser's own until then.)
        wasm_bindgen_futures::spawn_local(async {
            // The page lives under the planner (`./gpu/`): its table is one folder up. Without
            // it the page shows English.
            let _ = crate::web::lang::load_zh("../zh.json").await;
            leptos::mount::mount_to_body(GpuApp);
        });
    } else {
        leptos::mount::mount_to_body(GpuApp);
    }
}

/// Total time the measurement may take.
const BUDGET_MS: f64 = 3000.0;

#[derive(Clone, Debug, PartialEq)]
enum Status {
    Idle,
    Running(String),
    Done {
        adapter: String,
        software: bool,
        results: Vec<Measurement>,
    },
    Failed(String),
}

fn webgpu_available() -> bool {
    let nav = window().navigator();
    js_sys::Reflect::get(&nav, &wasm_bindgen::JsValue::from_str("gpu"))
        .map(|v| !v.is_undefined() && !v.is_null())
        .unwrap_or(false)
}

/// The benchmark page.
#[component]
pub fn GpuApp() -> impl IntoView {
    let (st, _) = link::decode(&window().location().search().unwrap_or_default());
    // The planner's language (its link carries `lang`), for the texts and `<html lang>`.
    let lang = match st.lang.unwrap_or_default() {
        // Without its table (it could not be fetched), the page is English, and says so.
        crate::web::i18n::Lang::Zh if !crate::web::i18n::installed() => crate::web::i18n::Lang::En,
        l => l,
    };
    crate::web::lang::provide(Memo::new(move |_| lang));
    if let Some(root) = document().document_element() {
        let _ = root.set_attribute("lang", lang.html_tag());
    }
    let arch = crate::web::state::arch_of(&st).ok();
    let gpu_entry = catalog::find_gpu(&st.gpu).ok();
    let status = RwSignal::new(Status::Idle);
    let detail = RwSignal::new(String::new());
    let cancel = Rc::new(Cell::new(false));
    // The GEMM share of the tensor peak: the card generation's calibrated figure until changed.
    let utilization = RwSignal::new(
        gpu_entry.map_or(time::calibration::UNCALIBRATED_GEMM_EFFICIENCY, |g| {
            time::calibration::gemm_efficiency(g).value
        }),
    );
    let dataset = RwSignal::new(time::DEFAULT_DATASET_TOKENS);
    // The shape of one adapted Linear of the selected model: tokens × hidden → intermediate.
    let (m, k, n) = match &arch {
        Some(a) => (
            (st.settings.tokens().min(1024)) as u32,
            a.hidden_size.min(8192) as u32,
            a.intermediate_size.min(32768) as u32,
        ),
        None => (512, 4096, 11008),
    };
    let settings = st.settings.clone();
    let run = {
        let cancel = cancel.clone();
        move |_| {
            if matches!(status.get_untracked(), Status::Running(_)) {
                return;
            }
            if !webgpu_available() {
                status.set(Status::Failed("WebGPU is not available in this browser (or it is blocked). The planner works without it; try a current Chrome, Edge or Safari.".into()));
                return;
            }
            cancel.set(false);
            detail.set(String::new());
            let cancel = cancel.clone();
            status.set(Status::Running("opening the GPU…".into()));
            spawn_local(async move {
                let g = match gpu::init().await {
                    Ok(g) => g,
                    Err(e) => {
                        // Ours first (translated), then the graphics library's own words.
                        let (ours, lib) = e.split_once(": ").unwrap_or((e.as_str(), ""));
                        detail.set(lib.to_string());
                        status.set(Status::Failed(format!(
                            "{ours}. The planner works without it."
                        )));
                        return;
                    }
                };
                let mut plan = vec![
                    (Kernel::Naive, Precision::F32),
                    (Kernel::Tiled, Precision::F32),
                ];
                if g.f16 {
                    plan.push((Kernel::Tiled, Precision::F16));
                }
                let each = BUDGET_MS / plan.len() as f64;
                let mut results = vec![];
                for (kernel, p) in plan {
                    status.set(Status::Running(format!(
                        "measuring {kernel:?} {p:?} on {}…",
                        g.adapter
                    )));
                    let c = cancel.clone();
                    match gpu::bench(&g, kernel, p, (m, k, n), each, &move || c.get()).await {
                        Ok(r) => results.push(r),
                        Err(e) => {
                            status.set(Status::Failed(e));
                            return;
                        }
                    }
                }
                status.set(Status::Done {
                    adapter: g.adapter.clone(),
                    software: g.software,
                    results,
                });
            });
        }
    };
    let stop = move |_| cancel.set(true);
    let peak = gpu_entry.and_then(|g| {
        g.bf16_tflops_dense
            .or(g.fp16_tflops_dense)
            .or(g.fp32_tflops)
    });
    let gpu_name = gpu_entry.map(|g| g.name.clone()).unwrap_or_default();
    // The step's plan (its program's work), made once: only the time's inputs change here.
    let planned: std::sync::Arc<Option<(Architecture, Settings, Plan)>> =
        std::sync::Arc::new(arch.clone().and_then(|a| {
            let p = crate::model::plan(&a, &settings).ok()?;
            Some((a, settings.clone(), p))
        }));
    let for_estimate = planned.clone();
    let estimate = Memo::new(move |_| {
        let (a, settings, p) = for_estimate.as_ref().as_ref()?;
        let g = gpu_entry?;
        // The calibrated figure stays the calibration (with its basis) until the box changes it.
        let e = utilization.get();
        let given = (e != time::calibration::gemm_efficiency(g).value).then_some(e);
        time::estimate(a, settings, p, g, given, dataset.get())
    });
    let title = tx({
        let g = gpu_name.clone();
        move || format!("Time on {g}")
    });
    // Three significant digits below 100 (a software adapter times a step in hours).
    let fmt_rate = |r: f64| {
        if r >= 100.0 {
            format!("{r:.0}")
        } else if r >= 1.0 {
            format!("{r:.1}")
        } else {
            format!("{r:.3}")
        }
    };
    let fmt_time = |s: f64| {
        if s < 120.0 {
            format!("{s:.2} s")
        } else if s < 7200.0 {
            format!("{:.1} min", s / 60.0)
        } else {
            format!("{:.1} h", s / 3600.0)
        }
    };
    view! {
        <main class="gpu-page">
            <h1>{tl("Measure my GPU")}</h1>
            <p class="hint">{ts(format!("A LoRA-adapted Linear of {} (x·W with {m}×{k}×{n}, then the rank-{} path), timed on this device's GPU.", st.custom.as_ref().map(|_| "the imported model".to_string()).unwrap_or(st.model.clone()), st.settings.lora_r))}</p>
            <div class="share-row">
                <button type="button" data-testid="gpu-measure" on:click=run>{tl("Measure my GPU")}</button>
                <button type="button" data-testid="gpu-cancel" on:click=stop>{tl("Cancel")}</button>
            </div>
            <p data-testid="gpu-status" role="status">{tx(move || match status.get() {
                Status::Idle => "not measured yet".to_string(),
                Status::Running(s) => s,
                Status::Done { adapter, software, .. } => if software { format!("done on {adapter} — a software adapter: figures say nothing about your GPU") } else { format!("done on {adapter}") },
                Status::Failed(e) => e,
            })}" "<code translate="no" data-testid="gpu-detail">{move || detail.get()}</code></p>
            {move || match status.get() {
                Status::Done { results, .. } => {
                    let best = results.iter().map(|r| r.gflops_median).fold(0.0, f64::max);
                    let naive = results.iter().find(|r| r.kernel == "naive").map(|r| r.gflops_median).unwrap_or(0.0);
                    let tiled = results.iter().find(|r| r.kernel == "tiled" && r.precision == "f32").map(|r| r.gflops_median).unwrap_or(0.0);
                    let note = peak.map(|p| {
                        let share = best / (p * 1000.0);
                        if share < 0.01 { format!("{:.2} % of the {} peak ({p} TFLOP/s): an integrated, software or different GPU than the one selected, or a browser-limited adapter", share * 100.0, gpu_name) }
                        else { format!("{:.1} % of the {} peak ({p} TFLOP/s)", share * 100.0, gpu_name) }
                    }).unwrap_or_default();
                    // The planned step with its GEMMs at the rate measured here (WGSL has no
                    // tensor cores: a lower bound of what the card does in PyTorch), beside the
                    // catalog figure.
                    let measured = match (planned.as_ref(), gpu_entry) {
                        (Some((a, settings, p)), Some(g)) => time::estimate_measured(a, settings, p, g, best / 1000.0, 0.0),
                        _ => None,
                    };
                    let catalog_step = estimate.get_untracked().map(|t| t.seconds_per_step);
                    view! {
                        <table class="breakdown">
                            <thead><tr><th>{tl("kernel")}</th><th>{tl("precision")}</th><th>{tl("median GFLOP/s")}</th><th>{tl("spread")}</th><th>"GB/s"</th><th>{tl("timing")}</th></tr></thead>
                            <tbody>{results.into_iter().map(|r| view! {
                                <tr data-testid=format!("gpu-result-{}-{}", r.kernel, r.precision)>
                                    <td>{r.kernel}</td><td>{r.precision}</td><td class="num">{format!("{:.2}", r.gflops_median)}</td>
                                    <td class="num">{ts(format!("{:.2}–{:.2} ({} samples)", r.gflops_min, r.gflops_max, r.samples))}</td>
                                    <td class="num">{format!("{:.2}", r.gbps_median)}</td><td>{tl(r.timing)}</td>
                                </tr>
                            }).collect_view()}</tbody>
                        </table>
                        <p data-testid="gpu-speedup">{format!("tiled / naive: {:.2}×", if naive > 0.0 { tiled / naive } else { 0.0 })}</p>
                        <p data-testid="gpu-vs-catalog">{ts(note)}</p>
                        <p data-testid="gpu-measured-step">{ts(match (measured, catalog_step) {
                            (Some(m), Some(c)) => format!("measured on your GPU: {} per optimizer step, {} tokens/s — {:.1} × the catalog figure for {}", fmt_time(m.seconds_per_step), fmt_rate(m.tokens_per_second), m.seconds_per_step / c, gpu_name),
                            (Some(m), None) => format!("measured on your GPU: {} per optimizer step, {} tokens/s", fmt_time(m.seconds_per_step), fmt_rate(m.tokens_per_second)),
                            _ => String::new(),
                        })}</p>
                    }.into_any()
                }
                _ => ().into_any(),
            }}
            <section class="time" aria-label=tl("Time estimate")>
                <h2>{title}</h2>
                <div class="share-row">
                    <label for="util">{tl("GEMM efficiency")}</label>
                    <input type="number" id="util" min="0.05" max="1" step="0.05" data-testid="input-utilization" prop:value=move || utilization.get().to_string()
                        on:input:target=move |ev| { if let Ok(v) = ev.target().value().parse::<f64>() { if v.is_finite() && v > 0.0 && v <= 1.0 { utilization.set(v) } } } />
                    <label for="ds">{tl("dataset tokens")}</label>
                    <input type="number" id="ds" min="0" step="1000000" data-testid="input-dataset-tokens" prop:value=move || dataset.get().to_string()
                        on:input:target=move |ev| { if let Ok(v) = ev.target().value().parse::<f64>() { if (0.0..1e16).contains(&v) { dataset.set(v) } } } />
                </div>
                {move || match estimate.get() {
                    None => view! { <p class="hint" data-testid="time-estimate">{tl("no datasheet peak for this GPU")}</p> }.into_any(),
                    Some(t) => view! {
                        <dl class="lengths-report" data-testid="time-estimate">
                            <dt>{tl("seconds per optimizer step")}</dt><dd data-testid="step-time">{fmt_time(t.seconds_per_step)}</dd>
                            <dt>{tl("tokens per second")}</dt><dd data-testid="tokens-per-second">{format!("{:.0}", t.tokens_per_second)}</dd>
                            <dt>{tl("one epoch")}</dt><dd data-testid="epoch-time">{fmt_time(t.seconds_per_epoch)}</dd>
                            {match (t.usd_per_epoch, t.usd_per_gpu_hour) {
                                (Some(c), Some(h)) => view! {
                                    <dt>{tl("cost of one epoch")}</dt><dd data-testid="epoch-cost">{ts(format!("${c:.2} at ${h}/GPU-hour (the catalog's cited rental rate)"))}</dd>
                                }.into_any(),
                                _ => ().into_any(),
                            }}
                        </dl>
                        <p class="why">{ts(t.explanation.clone())}</p>
                    }.into_any(),
                }}
            </section>
        </main>
    }
}
