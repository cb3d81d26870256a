//! The paste box for a training config (a LLaMA-Factory or axolotl YAML, an ms-swift command, a
//! TrainingArguments / LoraConfig / `adapter_config.json` or DeepSpeed JSON): read by
//! [`crate::formats::framework`] as `lorafit plan --from` reads it, its settings and model put
//! in the page's state, and what it used, assumed, ignored and did not model listed under it.
//! A DeepSpeed JSON pasted after a config that names one completes that config, and so does an
//! accelerate config (its launch: GPUs, strategy, mixed precision) pasted after any config.
//! A config whose step the page's first bundle leaves out (TRL's fused head, DPO, MoE…) makes
//! the page reload as the full planner (`web::full`): the texts read are kept in the tab's
//! session storage ([`PASTED`]) and the full planner lists their reading again.

use leptos::either::Either;
use leptos::prelude::*;

use crate::formats::framework::{self, Reading, Source};
use crate::web::lang::{t, ts};
use crate::web::state::UiState;

/// Largest config read (a config is a few KB; a pasted log is not one).
const MAX_CONFIG_BYTES: usize = 256 * 1024;

/// Session-storage key of the texts read in the first bundle (a JSON list: a config, then the
/// launch configs that completed it), which the full planner reads again after a hand-over.
const PASTED: &str = "lorafit-config-pasted";

/// Whether this page is the full planner (`<main data-planner>`, `web::full::PLANNER`).
fn on_full_planner() -> bool {
    document()
        .query_selector("main")
        .ok()
        .flatten()
        .and_then(|m| m.get_attribute("data-planner"))
        .as_deref()
        == Some("full")
}

/// The texts the first bundle read before it handed over (forgotten once taken), on the full
/// planner only.
fn take_pasted() -> Vec<String> {
    let Some(s) = super::full::storage() else {
        return vec![];
    };
    let texts = s.get_item(PASTED).ok().flatten();
    let _ = s.remove_item(PASTED);
    match texts {
        Some(json) if on_full_planner() => serde_json::from_str(&json).unwrap_or_default(),
        _ => vec![],
    }
}

/// Reads `text` on top of the last reading: a DeepSpeed JSON completes a config that named one,
/// an accelerate config any config; anything else is a config of its own. The model it names is found in the catalog.
/// Also returns whether `text` completed the last reading.
fn read(text: &str, last: Option<Reading>) -> Result<(Reading, Option<String>, bool), String> {
    if text.len() > MAX_CONFIG_BYTES {
        return Err(format!(
            "a training config is at most {} KB",
            MAX_CONFIG_BYTES / 1024
        ));
    }
    let mut completed = false;
    let mut r = match (framework::detect(text)?, last) {
        // A launch config completes the last config: a DeepSpeed JSON only the one it named.
        (source @ (Source::DeepSpeed | Source::Accelerate), Some(mut last))
            if source == Source::Accelerate || last.launch_path.is_some() =>
        {
            let pending = last.launch_path.clone();
            framework::apply_launch(&mut last, text)?;
            if let Some(p) = pending {
                framework::launch_applied(&mut last, &p);
            }
            completed = true;
            last
        }
        _ => framework::read(text)?,
    };
    let model = r.catalog_model()?.map(|e| e.arch.name.clone());
    if let Some(ds) = &r.launch_path {
        r.notes.push(format!(
            "{ds}: its strategy and offload are taken from its name; paste the JSON itself to use what it says"
        ));
    }
    Ok((r, model, completed))
}

/// One list of the reading, shown when not empty.
fn list(label: &'static str, testid: &'static str, items: Vec<String>) -> impl IntoView {
    (!items.is_empty()).then(|| {
        view! {
            <dt>{t(label)}</dt>
            <dd data-testid=testid><ul>{items.into_iter().map(|i| view! { <li>{ts(i)}</li> }).collect_view()}</ul></dd>
        }
    })
}

/// The paste box and what the last config said.
#[component]
pub fn TrainingConfig(
    /// Page state.
    state: RwSignal<UiState>,
) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let reading: RwSignal<Option<Result<Reading, String>>> = RwSignal::new(None);
    // The texts behind the reading shown: a config, then the launch configs that completed it.
    let read_texts: RwSignal<Vec<String>> = RwSignal::new(vec![]);
    // After a hand-over: the reading of what was pasted in the first bundle, listed again (the
    // page's state, which it set, came with the address).
    let pasted = take_pasted();
    if !pasted.is_empty() {
        let mut last: Option<Reading> = None;
        for t in &pasted {
            match read(t, last.take()) {
                Ok((r, _, _)) => last = Some(r),
                Err(_) => break,
            }
        }
        if let Some(r) = last {
            text.set(pasted.last().cloned().unwrap_or_default());
            reading.set(Some(Ok(r)));
            read_texts.set(pasted);
        }
    }
    let apply = move |t: &str| {
        let last = reading.get_untracked().and_then(Result::ok);
        match read(t, last) {
            Ok((r, model, completed)) => {
                read_texts.update(|v| {
                    if !completed {
                        v.clear();
                    }
                    v.push(t.to_string());
                });
                if !on_full_planner() {
                    if let (Some(s), Ok(json)) = (
                        super::full::storage(),
                        serde_json::to_string(&read_texts.get_untracked()),
                    ) {
                        let _ = s.set_item(PASTED, &json);
                    }
                }
                let settings = r.settings.clone();
                state.update(|st| {
                    st.settings = settings;
                    if let Some(m) = model {
                        st.model = m;
                        st.custom = None;
                    }
                });
                reading.set(Some(Ok(r)));
            }
            Err(e) => reading.set(Some(Err(e))),
        }
    };
    let on_file = move |ev: leptos::ev::Event| {
        super::panels::read_chosen_file(ev, MAX_CONFIG_BYTES, move |r| match r {
            Ok(t) => {
                text.set(t.clone());
                apply(&t);
            }
            Err(e) => reading.set(Some(Err(e))),
        })
    };
    view! {
        <section class="card config-in" id="config" aria-labelledby="h-config">
            <h2 id="h-config">{t("Your training config")}</h2>
            <p class="hint">{t("Paste a LLaMA-Factory or axolotl YAML, an ms-swift command, a Python script (Trainer or TRL), a TrainingArguments / LoraConfig JSON or a DeepSpeed JSON: its settings are planned, and every key it did not use is named. Paste an accelerate config after it for its GPUs and strategy.")}</p>
            <textarea rows="6" aria-label=t("training config") data-testid="training-config-input" prop:value=text on:input:target=move |ev| text.set(ev.target().value())></textarea>
            <div class="share-row">
                <button type="button" data-testid="training-config-apply" on:click=move |_| apply(&text.get_untracked())>{t("Plan this config")}</button>
                <input type="file" accept=".yaml,.yml,.json,.sh,.txt" aria-label=t("training config file") data-testid="training-config-file" on:change=on_file />
            </div>
            {move || reading.get().map(|r| match r {
                Err(e) => Either::Left(view! { <p class="error" role="alert" data-testid="training-config-status">{ts(e)}</p> }),
                Ok(r) => Either::Right(view! {
                    <p class="ok" data-testid="training-config-status">{t("Read as:")}" "{ts(r.source.name().to_string())}{r.model.clone().map(|m| format!(" · {m}"))}</p>
                    <dl class="config-reading">
                        {list("used", "training-config-used", r.used.iter().map(|u| u.as_used()).collect())}
                        {list("assumed (the framework's defaults)", "training-config-assumed", r.assumed.iter().map(|a| a.as_assumed()).collect())}
                        {list("changes memory, not modelled", "training-config-not-modeled", r.not_modeled.iter().map(|n| n.line()).collect())}
                        {list("ignored (no effect on GPU memory, or unknown)", "training-config-ignored", vec![r.ignored.join(", ")].into_iter().filter(|s| !s.is_empty()).collect())}
                        {list("notes", "training-config-notes", r.notes.clone())}
                    </dl>
                }),
            })}
        </section>
    }
}
