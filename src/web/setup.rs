//! What the page, the embed and the sections bundle share (wasm only): [`setup`] — the state
//! from the link, the language, the plan and its fit limits as `Memo`s keyed so a slider move
//! re-plans as little as it can, the settled evaluation, the link of the state and (for the
//! page) the address bar — and the helpers their views use to draw settings and figures.
//!
//! Imports [`crate::web::settle`] and the leaf helpers; the page ([`crate::web::app`]), its
//! panels and the sections import this, never the other way round.

use leptos::prelude::*;
use wasm_bindgen::JsValue;

use crate::formats::{catalog, fields};
use crate::model::{plan, Settings};
use crate::planning::evaluate::{Axis, Evaluation, BATCH_SEARCH_MAX, SEQ_SEARCH_MAX};
use crate::planning::fit;
use crate::web::controls::{flag, read, FieldControl};
use crate::web::i18n::{tr, Lang};
use crate::web::layout;
use crate::web::link;
use crate::web::state::{arch_of, UiState};

/// The Chinese table, copied into the build (`data/zh.json`), fetched when first needed.
pub(crate) const ZH_URL: &str = "./zh.json";

pub(crate) fn page_url_without_query() -> String {
    let loc = window().location();
    let origin = loc.origin().unwrap_or_default();
    let path = loc.pathname().unwrap_or_default();
    format!("{origin}{path}")
}

pub(crate) fn copy_to_clipboard(text: &str) {
    // Best effort: a blocked clipboard leaves the text visible in the field next to the button.
    let _ = window().navigator().clipboard().write_text(text);
}

/// The controls of the named settings, in order (names from [`layout`]; a name missing from the
/// table, which a native test rules out, is skipped). Controls that mean nothing for the current
/// settings ([`layout::relevant`]) are hidden.
pub(crate) fn setting_controls(
    names: &'static [&'static str],
    state: RwSignal<UiState>,
    then: Option<fn(&mut Settings)>,
) -> impl IntoView {
    controls_of(names, state, move |field| {
        view! { <FieldControl field=field state=state then=then /> }
    })
}

/// [`setting_controls`] for the sections, where settings typed in (a number without a slider:
/// the eval batch, `max_prompt_length`) are listed too ([`crate::web::controls::typed_control`]).
pub(crate) fn setting_controls_typed(
    names: &'static [&'static str],
    state: RwSignal<UiState>,
    then: Option<fn(&mut Settings)>,
) -> impl IntoView {
    controls_of(
        names,
        state,
        move |field| match crate::web::controls::typed_control(field, state, then) {
            Some(c) => leptos::either::Either::Left(c),
            None => leptos::either::Either::Right(
                view! { <FieldControl field=field state=state then=then /> },
            ),
        },
    )
}

/// Each named setting's `control`, hidden while it means nothing ([`layout::relevant`]).
/// Generic, so the page's bundle carries only the controls it draws.
fn controls_of<V: IntoView + 'static>(
    names: &'static [&'static str],
    state: RwSignal<UiState>,
    control: impl Fn(&'static fields::Field) -> V + 'static,
) -> impl IntoView {
    names
        .iter()
        .filter_map(|n| fields::by_name(n))
        .map(move |field| {
            let hidden = flag(move || state.with(|st| !layout::relevant(field.name, &st.settings)));
            view! { <div class="cond" class:hidden=hidden>{control(field)}</div> }
        })
        .collect_view()
}

/// The settings with one swept value fixed, so memos over them skip the work when only that
/// value moves (the curve vs length does not change when the length does).
pub(crate) fn without(st: &UiState, axis: Axis) -> UiState {
    let mut k = st.clone();
    k.embed = false;
    match axis {
        Axis::Seq => k.settings.seq = 1,
        Axis::Batch => k.settings.batch = 1,
    }
    k
}

/// The state, the notices about its link, the evaluation and the link of the state.
pub(crate) type Page = (
    RwSignal<UiState>,
    Vec<String>,
    Memo<Result<Evaluation, String>>,
    Memo<String>,
    Memo<bool>,
);

/// Who holds a [`setup`]: the page (or the embed), which also owns the document — its title,
/// `<html lang>`, the address bar — or the sections bundle beside it, which does not.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Page,
    Sections,
}

/// What the page, the embed and the sections hold: the state (from the link), the notices about
/// the link, the evaluation, and the link of the state. The plan and verdict follow every change;
/// each fit limit is keyed on the state without the value it sweeps, so a slider move re-plans
/// once for the plan and once per bisection step of the other limit, not forty times.
pub(crate) fn setup(
    (initial, notices): (UiState, Vec<String>),
    role: Role,
    settle: crate::web::settle::Settle,
) -> Page {
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
    if role == Role::Page {
        Effect::new(move |_| {
            let l = lang.get();
            if let Some(root) = document().document_element() {
                let _ = root.set_attribute("lang", l.html_tag());
            }
            document().set_title(&tr(l, "lorafit — LoRA / QLoRA GPU-memory planner"));
        });
    }
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
                verdict: crate::planning::evaluate::formula_verdict(
                    &a,
                    &st.settings,
                    &p,
                    g.capacity_bytes(),
                ),
                whole_job: !st.settings.job.runs_on_gpu_after_training(),
                plan: p,
                job: None,
                gpu_name: g.name.clone(),
                max_batch: max_batch.get(),
                max_seq: max_seq.get(),
            })
        })
    });
    // Reserved, nvidia-smi and the verdict settle on the allocator simulation once the state
    // is still (web::settle).
    let (eval, simulated) = crate::web::settle::settle_on(state, eval, settle);
    let query = Memo::new(move |_| state.with(link::encode));
    // The first bundle hands a step it leaves out to the full planner (web::full).
    #[cfg(not(feature = "extended-ops"))]
    if role == Role::Page {
        crate::web::full::hand_over(eval, query);
    }
    // The page's bundle plans no phase after training that runs on the GPU: its worker does.
    let eval = match role {
        Role::Page => crate::web::settle::with_job_verdict(query, eval),
        Role::Sections => eval,
    };
    if role == Role::Page {
        sync_address_bar(query);
    }
    (state, notices, eval, query, simulated)
}

/// Keeps the address bar in sync (no history entries): reload and bookmarks restore the plan.
/// replaceState costs about a millisecond, so slider drags update it at most every 200 ms.
pub(crate) fn sync_address_bar(query: Memo<String>) {
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

/// `data-reserve` of the results: `quick` (the allowance, within a frame of a change),
/// `simulated` (settled on PyTorch's caching allocator simulated), or `settled` (still, but no
/// simulation answered, so the allowance stays).
pub(crate) fn reserve_state(
    settled: Memo<bool>,
    eval: Memo<Result<Evaluation, String>>,
) -> &'static str {
    if !settled.get() {
        "quick"
    } else if read(eval, |e| e.plan.reserve_simulated) {
        "simulated"
    } else {
        "settled"
    }
}
