//! The planner page's two builds (wasm only). The page a visit loads (`lorafit`, built without
//! the `extended-ops` feature: see `Cargo.toml`) plans a dense decoder's LoRA / QLoRA / full
//! tuning step; a state whose step needs more — a vision tower or images, Gated DeltaNet,
//! mixture-of-experts layers, latent attention, attention sinks, DoRA, preference training, a
//! fused linear cross-entropy — is refused there ([`crate::model::PlanError::Unbundled`]), and
//! the page reloads itself as the full planner (`lorafit-full`, every op, the same page):
//! - the state stays in the address bar (written now, not after the usual debounce);
//! - the tab's session storage says that the full planner is wanted ([`KEY`] = [`FULL`]):
//!   `boot.js` (written by `scripts/externalize_boot.py`) reads it and starts
//!   `lorafit-full.js` instead of the page's own wasm, for the rest of the session;
//! - and whether the sections were open ([`SECTIONS_OPEN`]), which the full page reopens.
//!
//! Should the full planner fail to load (offline, never cached), `boot.js` marks it
//! ([`FAILED`]) and starts the first bundle again, which then shows its refusal instead of
//! reloading once more.

use leptos::prelude::*;

/// Which build this page is, as its `<main data-planner>` says (the browser tests wait on it).
pub const PLANNER: &str = if crate::model::extended::EXTENDED {
    "full"
} else {
    "first"
};

/// The session-storage key `boot.js` reads.
pub const KEY: &str = "lorafit-planner";
/// Start the full planner.
pub const FULL: &str = "full";
/// The full planner could not be started this session.
pub const FAILED: &str = "full-failed";
/// The sections were open when the page handed over.
pub const SECTIONS_OPEN: &str = "lorafit-sections-open";

/// The tab's session storage (what survives the hand-over's reload).
pub(crate) fn storage() -> Option<web_sys::Storage> {
    window().session_storage().ok().flatten()
}

/// What the first bundle adds to its refusal when the full planner could not be loaded.
pub const NOT_LOADED: &str =
    "the full planner could not be loaded (offline?): change these settings, or reload once online";

/// Whether `boot.js` could not start the full planner this session.
pub fn failed() -> bool {
    storage()
        .and_then(|s| s.get_item(KEY).ok().flatten())
        .as_deref()
        == Some(FAILED)
}

/// Whether the page's evaluation is the first bundle's refusal of a step it leaves out.
pub fn unbundled(eval: &Result<crate::planning::evaluate::Evaluation, String>) -> bool {
    matches!(eval, Err(m) if m.starts_with(crate::model::error::UNBUNDLED))
}

/// Whether the page should open its sections on start (the page it replaced had them open);
/// forgets it.
pub fn take_sections_open() -> bool {
    let Some(s) = storage() else { return false };
    let open = s.get_item(SECTIONS_OPEN).ok().flatten().is_some();
    if open {
        let _ = s.remove_item(SECTIONS_OPEN);
    }
    open
}

/// The first bundle: once the page's evaluation is refused for ops it leaves out, reloads the
/// page, with its state, as the full planner.
#[cfg(not(feature = "extended-ops"))]
pub fn hand_over(
    eval: Memo<Result<crate::planning::evaluate::Evaluation, String>>,
    query: Memo<String>,
) {
    Effect::new(move |_| {
        // Storage is read only for a refusal, not on every change of the evaluation.
        if !eval.with(unbundled) {
            return;
        }
        let Some(store) = storage() else {
            return;
        };
        if store.get_item(KEY).ok().flatten().as_deref() == Some(FAILED) {
            return; // the refusal stays on screen, with NOT_LOADED
        }
        let _ = store.set_item(KEY, FULL);
        // What the browser tests wait out (harness.mjs, openApp).
        if let Some(root) = document().document_element() {
            let _ = root.set_attribute("data-handover", FULL);
        }
        let open = document()
            .query_selector("[data-testid=\"sections\"]")
            .ok()
            .flatten()
            .and_then(|el| el.get_attribute("data-state"))
            .is_some_and(|s| s != "closed");
        if open {
            let _ = store.set_item(SECTIONS_OPEN, "1");
        }
        let hash = window().location().hash().unwrap_or_default();
        let url = format!("?{}{}", query.get_untracked(), hash);
        if let Ok(h) = window().history() {
            let _ = h.replace_state_with_url(&wasm_bindgen::JsValue::NULL, "", Some(&url));
        }
        let _ = window().location().reload();
    });
}
