//! The web page (wasm only): controls bound to one settings signal, everything else derived
//! through a single `Memo` of [`crate::planner::evaluate`]. No maths here beyond formatting.

use leptos::prelude::*;

use crate::catalog;
use crate::chart;
use crate::model::{AttnImpl, Dtype, Optimizer, Quant, Settings};
use crate::planner;
use crate::report::gib;

/// Mounts the app on `<body>`.
pub fn mount() {
    leptos::mount::mount_to_body(App);
}

/// A labelled number input with a matching slider.
#[component]
fn NumberControl(
    /// Visible label.
    label: &'static str,
    /// `data-testid` of the number input.
    testid: &'static str,
    /// Current value.
    #[prop(into)]
    value: Signal<f64>,
    /// Called with a parsed, clamped value.
    on_set: Callback<f64>,
    /// Minimum.
    min: f64,
    /// Maximum.
    max: f64,
    /// Step.
    step: f64,
) -> impl IntoView {
    let set = move |raw: String| {
        if let Ok(v) = raw.trim().parse::<f64>() {
            if v.is_finite() {
                on_set.run(v.clamp(min, max));
            }
        }
    };
    let id = format!("ctl-{testid}");
    view! {
        <div class="control">
            <label for=id.clone()>{label}</label>
            <input type="range" aria-label=label min=min max=max step=step
                prop:value=move || value.get().to_string()
                on:input:target=move |ev| set(ev.target().value()) />
            <input type="number" id=id data-testid=testid min=min max=max step=step
                prop:value=move || value.get().to_string()
                on:input:target=move |ev| set(ev.target().value()) />
        </div>
    }
}

/// A labelled `<select>` over (value, label) options.
#[component]
fn SelectControl(
    /// Visible label.
    label: &'static str,
    /// `data-testid`.
    testid: &'static str,
    /// Options as (value, label).
    options: Vec<(String, String)>,
    /// Current value.
    #[prop(into)]
    value: Signal<String>,
    /// Called with the chosen value.
    on_set: Callback<String>,
) -> impl IntoView {
    let id = format!("ctl-{testid}");
    view! {
        <div class="control">
            <label for=id.clone()>{label}</label>
            <select id=id data-testid=testid
                prop:value=move || value.get()
                on:change:target=move |ev| on_set.run(ev.target().value())>
                {options.into_iter().map(|(v, l)| {
                    let v2 = v.clone();
                    view! { <option value=v selected=move || value.get() == v2>{l}</option> }
                }).collect_view()}
            </select>
        </div>
    }
}

fn dtype_value(s: &Settings) -> String {
    match s.quant {
        Some(q) => q.name().to_string(),
        None => s.dtype.name().to_string(),
    }
}

fn apply_dtype(s: &mut Settings, v: &str) {
    match v {
        "nf4" | "fp4" => {
            s.quant = Quant::parse(v);
            s.dtype = Dtype::Bf16;
        }
        other => {
            s.quant = None;
            if let Some(d) = Dtype::parse(other) {
                s.dtype = d;
            }
        }
    }
}

/// The planner page.
#[component]
pub fn App() -> impl IntoView {
    let model = RwSignal::new("llama2-7b".to_string());
    let gpu = RwSignal::new("a100-80".to_string());
    let settings = RwSignal::new(Settings::default());
    let eval = Memo::new(move |_| planner::evaluate(&model.get(), &gpu.get(), &settings.get()));

    let models: Vec<(String, String)> = catalog::models()
        .iter()
        .map(|m| {
            (
                m.arch.name.clone(),
                format!("{} ({})", m.arch.name, m.hf_id),
            )
        })
        .collect();
    let gpus: Vec<(String, String)> = catalog::gpus()
        .iter()
        .map(|g| {
            (
                g.id.clone(),
                format!("{} — {} GiB", g.name, g.memory_gib.unwrap_or(0.0)),
            )
        })
        .collect();
    let num = |f: fn(&Settings) -> f64| Signal::derive(move || settings.with(f));

    view! {
        <header class="top">
            <h1>"lorafit"</h1>
            <p class="tagline">"Will this LoRA / QLoRA fine-tune fit? Where does every GiB go? Computed in your browser from the model's shapes."</p>
        </header>
        <main class="layout">
            <section class="controls" aria-label="Settings">
                <SelectControl label="Model" testid="select-model" options=models value=model on_set=Callback::new(move |v| model.set(v)) />
                <SelectControl label="GPU" testid="select-gpu" options=gpus value=gpu on_set=Callback::new(move |v| gpu.set(v)) />
                <NumberControl label="Micro-batch" testid="input-batch" min=1.0 max=512.0 step=1.0
                    value=num(|s| s.batch as f64) on_set=Callback::new(move |v: f64| settings.update(|s| s.batch = v.round() as u64)) />
                <NumberControl label="Sequence length" testid="input-seq" min=128.0 max=131072.0 step=1.0
                    value=num(|s| s.seq as f64) on_set=Callback::new(move |v: f64| settings.update(|s| s.seq = v.round() as u64)) />
                <NumberControl label="LoRA rank" testid="input-rank" min=1.0 max=512.0 step=1.0
                    value=num(|s| s.lora_r as f64) on_set=Callback::new(move |v: f64| settings.update(|s| s.lora_r = v.round() as u64)) />
                <NumberControl label="LoRA dropout" testid="input-dropout" min=0.0 max=0.5 step=0.01
                    value=num(|s| s.lora_dropout) on_set=Callback::new(move |v: f64| settings.update(|s| s.lora_dropout = v)) />
                <NumberControl label="Gradient accumulation" testid="input-grad-accum" min=1.0 max=1024.0 step=1.0
                    value=num(|s| s.grad_accum as f64) on_set=Callback::new(move |v: f64| settings.update(|s| s.grad_accum = v.round() as u64)) />
                <SelectControl label="Base weights" testid="select-dtype"
                    options=vec![("bf16".into(), "bf16".into()), ("fp16".into(), "fp16".into()), ("fp32".into(), "fp32".into()), ("nf4".into(), "4-bit nf4 (QLoRA)".into()), ("fp4".into(), "4-bit fp4".into())]
                    value=Signal::derive(move || settings.with(dtype_value))
                    on_set=Callback::new(move |v: String| settings.update(|s| apply_dtype(s, &v))) />
                <SelectControl label="Autocast (Trainer bf16/fp16)" testid="select-autocast"
                    options=vec![("none".into(), "none".into()), ("bf16".into(), "bf16".into()), ("fp16".into(), "fp16".into())]
                    value=Signal::derive(move || settings.with(|s| s.autocast.map(|d| d.name().to_string()).unwrap_or_else(|| "none".into())))
                    on_set=Callback::new(move |v: String| settings.update(|s| s.autocast = match Dtype::parse(&v) { Some(Dtype::Fp32) | None => None, d => d })) />
                <SelectControl label="Attention" testid="select-attn"
                    options=vec![("sdpa".into(), "sdpa".into()), ("flash_attention_2".into(), "flash_attention_2".into()), ("eager".into(), "eager".into())]
                    value=Signal::derive(move || settings.with(|s| s.attn_impl.name().to_string()))
                    on_set=Callback::new(move |v: String| settings.update(|s| if let Some(a) = AttnImpl::parse(&v) { s.attn_impl = a })) />
                <SelectControl label="Optimizer" testid="select-optimizer"
                    options=Optimizer::ALL.iter().map(|o| (o.name().to_string(), o.name().to_string())).collect()
                    value=Signal::derive(move || settings.with(|s| s.optimizer.name().to_string()))
                    on_set=Callback::new(move |v: String| settings.update(|s| if let Some(o) = Optimizer::parse(&v) { s.optimizer = o })) />
                <div class="control toggle">
                    <input type="checkbox" id="ctl-gc" data-testid="toggle-gc"
                        prop:checked=move || settings.with(|s| s.grad_ckpt)
                        on:change:target=move |ev| { let on = ev.target().checked(); settings.update(|s| s.grad_ckpt = on) } />
                    <label for="ctl-gc">"Gradient checkpointing"</label>
                </div>
            </section>
            <section class="results" aria-live="polite">
                {move || match eval.get() {
                    Err(msg) => view! { <p class="error" role="alert" data-testid="error">{msg}</p> }.into_any(),
                    Ok(e) => results_view(e).into_any(),
                }}
            </section>
        </main>
    }
}

fn results_view(e: planner::Evaluation) -> impl IntoView {
    let p = &e.plan;
    let (segments, cap_at) = chart::stack(&p.breakdown, e.verdict.capacity_bytes);
    let status = e.verdict.status.name();
    let limit = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_else(|| "none".into());
    let bar_h = 320.0;
    view! {
        <div class="totals">
            <div class=format!("verdict verdict-{status}")>
                <span class="big" data-testid="verdict">{status}</span>
                <span>" on " {e.gpu_name.clone()} " · headroom " {crate::report::gib_signed(e.verdict.headroom_bytes)}</span>
            </div>
            <dl>
                <dt>"Peak allocated"</dt><dd data-testid="peak-allocated">{gib(p.peak_allocated_bytes)}</dd>
                <dt>"Peak reserved (est.)"</dt><dd data-testid="peak-reserved">{gib(p.peak_reserved_bytes)}</dd>
                <dt>"nvidia-smi (est.)"</dt><dd data-testid="peak-smi">{gib(p.nvidia_smi_bytes)}</dd>
                <dt>"Peak phase"</dt><dd data-testid="peak-phase">{p.peak_phase.name()} " — " {p.peak_moment.clone()}</dd>
                <dt>"Largest micro-batch that fits"</dt><dd data-testid="max-batch">{limit(e.max_batch)}</dd>
                <dt>"Longest sequence that fits"</dt><dd data-testid="max-seq">{limit(e.max_seq)}</dd>
            </dl>
        </div>
        <svg class="stack" viewBox=format!("0 0 220 {}", bar_h + 10.0) role="img" aria-label="Memory at the peak, stacked by component">
            {segments.into_iter().map(|s| {
                let y = 5.0 + bar_h * (1.0 - s.start - s.size);
                let h = (bar_h * s.size).max(0.5);
                view! {
                    <rect class=format!("seg seg-{}", s.key) data-testid=format!("segment-{}", s.key)
                        x="10" y=y width="120" height=h tabindex="0">
                        <title>{format!("{}: {}", s.label, gib(s.bytes))}</title>
                    </rect>
                }
            }).collect_view()}
            <line class="capacity" x1="0" x2="220" y1=5.0 + bar_h * (1.0 - cap_at) y2=5.0 + bar_h * (1.0 - cap_at) />
            <text class="capacity-label" x="135" y=1.0 + bar_h * (1.0 - cap_at)>"GPU " {gib(e.verdict.capacity_bytes)}</text>
        </svg>
        <table class="breakdown" data-testid="breakdown">
            <caption>"Memory at the peak, with the formula behind each number"</caption>
            <thead><tr><th scope="col">"Component"</th><th scope="col">"What"</th><th scope="col">"Formula"</th><th scope="col">"Bytes"</th></tr></thead>
            <tbody>
                {p.terms.iter().filter(|t| t.bytes > 0).map(|t| view! {
                    <tr>
                        <td><span class=format!("swatch seg-{}", t.component.key())></span>{t.component.label()}</td>
                        <td>{t.label.clone()}</td>
                        <td><code>{t.formula.clone()}</code><br/><code class="values">{format!("= {}", t.values)}</code></td>
                        <td class="num">{gib(t.bytes)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <table class="phases">
            <caption>"Highest memory of each phase"</caption>
            <tbody>
                {p.phases.iter().map(|ph| view! { <tr><th scope="row">{ph.phase.name()}</th><td>{ph.moment.clone()}</td><td class="num">{gib(ph.bytes)}</td></tr> }).collect_view()}
            </tbody>
        </table>
    }
}
