//! The "Read a real run" panel (wasm only): a PyTorch memory snapshot, `memory_summary()` text
//! or `memory_stats()` JSON dropped on the page or chosen with the file picker, parsed in the
//! browser (nothing is uploaded) by [`crate::planning::inspect`] and compared with the plan of
//! the page's current configuration.

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

use crate::formats::report::gib;
use crate::planning::inspect::{inspect, Inspection};
use crate::web::lang::{t, tx};
use crate::web::state::{arch_of, UiState};

/// Largest file read (the parser's own limit on decompressed input is the same).
const MAX_FILE_BYTES: f64 = 512.0 * 1024.0 * 1024.0;

async fn file_bytes(file: web_sys::File) -> Result<Vec<u8>, String> {
    if file.size() > MAX_FILE_BYTES {
        return Err(format!(
            "{} is {:.0} MiB; the limit is {:.0} MiB",
            file.name(),
            file.size() / 1048576.0,
            MAX_FILE_BYTES / 1048576.0
        ));
    }
    let buf = JsFuture::from(file.array_buffer())
        .await
        .map_err(|_| "the browser could not read the file".to_string())?;
    Ok(js_sys::Uint8Array::new(&buf).to_vec())
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
    let analyse = move |file: web_sys::File| {
        status.set(Some(format!(
            "reading {} ({:.1} MiB)…",
            file.name(),
            file.size() / 1048576.0
        )));
        result.set(None);
        spawn_local(async move {
            let bytes = match file_bytes(file).await {
                Ok(b) => b,
                Err(e) => {
                    status.set(None);
                    result.set(Some(Err(e)));
                    return;
                }
            };
            status.set(Some(format!(
                "parsing {:.1} MiB…",
                bytes.len() as f64 / 1048576.0
            )));
            // Let the browser paint the progress line before the parse takes the thread.
            let _ = JsFuture::from(js_sys::Promise::new(&mut |resolve, _| {
                let _ =
                    window().set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 16);
            }))
            .await;
            let st = state.get_untracked();
            let r = match arch_of(&st) {
                Ok(arch) => inspect(&bytes, Some((&arch, &st.settings))),
                Err(_) => inspect(&bytes, None),
            };
            status.set(None);
            result.set(Some(r));
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
        <section class="measured" aria-label=t("Read a real run") data-testid="measured-panel"
            on:dragover=move |ev: leptos::ev::DragEvent| ev.prevent_default() on:drop=on_drop>
            <h2>{t("Read a real run")}</h2>
            <p class="hint">{t("Drop a memory snapshot (torch.cuda.memory._dump_snapshot, .pickle or .pickle.gz), the text of torch.cuda.memory_summary() or torch.cuda.memory_stats() as JSON. It is read in this browser, nothing is uploaded, and compared with the plan of the configuration above.")}</p>
            <input type="file" aria-label=t("memory snapshot, summary or stats file") data-testid="measured-file" on:change=on_change />
            {move || status.get().map(|s| view! { <p role="status" data-testid="measured-status">{tx(move || s.clone())}</p> })}
            {move || result.get().map(|r| match r {
                Err(e) => view! { <p class="error" role="alert" data-testid="measured-error">{tx(move || e.clone())}</p> }.into_any(),
                Ok(ins) => {
                    let bound = if ins.trace_truncated { " (lower bound)" } else { "" };
                    let planned = ins.planned.clone();
                    view! {
                        <dl class="lengths-report" data-testid="measured-report">
                            <dt>{t("file")}</dt><dd>{t(ins.kind)}</dd>
                            <dt>{t("peak allocated")}</dt>
                            <dd data-testid="measured-peak-allocated">{let x = format!("{}{bound}", ins.peak_allocated_bytes.map(mib).unwrap_or_else(|| "—".into())); tx(move || x.clone())}
                                {planned.as_ref().map(|p| { let x = format!(" · planned {}", mib(p.peak_allocated_bytes)); tx(move || x.clone()) })}</dd>
                            <dt>{t("peak reserved")}</dt>
                            <dd data-testid="measured-peak-reserved">{let x = format!("{}{bound}", ins.peak_reserved_bytes.map(mib).unwrap_or_else(|| "—".into())); tx(move || x.clone())}
                                {planned.as_ref().map(|p| { let x = format!(" · planned {}", mib(p.peak_reserved_bytes)); tx(move || x.clone()) })}</dd>
                        </dl>
                        <ul data-testid="measured-unplanned">
                            {ins.unplanned.iter().map(|u| view! {
                                <li data-testid="measured-unplanned-item" data-bytes=u.bytes.to_string() data-phase=u.phase.clone()>
                                    {let x = format!("unplanned: {} × {} allocated in {}", u.count, mib(u.bytes_each), u.phase); tx(move || x.clone())}
                                </li>
                            }).collect_view()}
                        </ul>
                        <ul data-testid="measured-findings">
                            {ins.findings.iter().map(|f| { let f = f.clone(); view! { <li>{tx(move || f.clone())}</li> } }).collect_view()}
                        </ul>
                    }.into_any()
                }
            })}
        </section>
    }
}
