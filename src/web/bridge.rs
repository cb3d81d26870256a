//! The page and its sections bundle (wasm only). The planner page's wasm carries what a visit
//! needs first — the verdict, the bar, what fits, the most used settings; everything below them
//! (more settings, several GPUs, single changes, the curve, compare, every term, lengths, a real
//! run, your model, export, accuracy, time, share, the forum's examples) is a second wasm,
//! `lorafit-sections`, loaded the first time the visitor opens a section.
//!
//! The two wasm instances share no memory; they share the state as the page's link
//! ([`crate::web::link`]), the one serialisation of everything the page holds:
//! - the page keeps the link of its state in the mount point's `data-query` (read once by the
//!   sections when they start) and sends every change as a [`STATE`] event on it;
//! - the sections send a change made by their controls as a [`SET`] event; the page decodes it
//!   and sets its state, which comes back as a [`STATE`] event the sections find equal to theirs;
//! - [`READY`] says the sections are mounted.
//!
//! Each side plans for itself from the state (the sections settle their own evaluation), so no
//! plan crosses the boundary.

use leptos::prelude::*;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};

/// The element the sections mount into.
pub const ROOT_ID: &str = "sections-root";
/// Page → sections: the link of the page's state changed (detail: the query string).
pub const STATE: &str = "lorafit-state";
/// Sections → page: a control of the sections changed the state (detail: the query string).
pub const SET: &str = "lorafit-set";
/// Sections → page: mounted.
pub const READY: &str = "lorafit-ready";
/// The sections bundle: wasm-bindgen's no-modules script (trunk's `data-type="worker"` asset
/// in `index.html`) and its wasm, relative to the page.
const SCRIPT: &str = "./lorafit-sections.js";
const WASM: &str = "./lorafit-sections_bg.wasm";
/// Their styles (`style/sections.css`, copied into the build).
const CSS: &str = "./sections.css";
/// The script's init function, as `scripts/externalize_boot.py` names it on `window` (the
/// script itself declares it with `let`, out of a wasm's reach).
const INIT: &str = "lorafitSections";

/// Where the sections stand, as the page sees them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Load {
    /// Not asked for.
    Closed,
    /// Fetching and starting the bundle.
    Loading,
    /// Mounted.
    Ready,
    /// The bundle could not be loaded (offline and never opened before, or blocked).
    Failed,
}

impl Load {
    /// The `data-state` of the sections' container.
    pub fn name(self) -> &'static str {
        match self {
            Load::Closed => "closed",
            Load::Loading => "loading",
            Load::Ready => "ready",
            Load::Failed => "failed",
        }
    }
}

/// The mount point, once in the document.
pub fn root() -> Option<web_sys::Element> {
    document().get_element_by_id(ROOT_ID)
}

/// Sends `detail` as a `name` event on the mount point (nothing when it is not there).
pub fn send(name: &str, detail: &str) {
    let Some(root) = root() else { return };
    let init = web_sys::CustomEventInit::new();
    init.set_detail(&JsValue::from_str(detail));
    if let Ok(ev) = web_sys::CustomEvent::new_with_event_init_dict(name, &init) {
        let _ = root.dispatch_event(&ev);
    }
}

/// Calls `f` with the detail of every `name` event on the mount point, for the page's lifetime.
pub fn listen(name: &str, f: impl Fn(String) + 'static) {
    let Some(root) = root() else { return };
    let cb = Closure::<dyn Fn(web_sys::CustomEvent)>::new(move |ev: web_sys::CustomEvent| {
        f(ev.detail().as_string().unwrap_or_default())
    });
    let _ = root.add_event_listener_with_callback(name, cb.as_ref().unchecked_ref());
    cb.forget();
}

/// Loads and starts the sections bundle (its start function mounts it; [`READY`] follows).
/// `status` goes to `Loading`, then to `Failed` if the script or its wasm cannot be loaded.
pub fn load(status: RwSignal<Load>) {
    if matches!(status.get_untracked(), Load::Loading | Load::Ready) {
        return;
    }
    status.set(Load::Loading);
    leptos::task::spawn_local(async move {
        if let Err(e) = start().await {
            web_sys::console::warn_2(&"lorafit: the sections could not be loaded:".into(), &e);
            status.set(Load::Failed);
        }
    });
}

/// Appends an element to `<head>` and waits for it to load.
async fn append(tag: &str, attrs: &[(&str, &str)]) -> Result<(), JsValue> {
    let doc = document();
    let el: web_sys::HtmlElement = doc.create_element(tag)?.dyn_into()?;
    for (k, v) in attrs {
        el.set_attribute(k, v)?;
    }
    let loaded = js_sys::Promise::new(&mut |resolve, reject| {
        el.set_onload(Some(&resolve));
        el.set_onerror(Some(&reject));
    });
    doc.head()
        .ok_or_else(|| JsValue::from_str("no <head>"))?
        .append_child(&el)?;
    wasm_bindgen_futures::JsFuture::from(loaded).await?;
    Ok(())
}

/// Loads the bundle's styles and script (so nothing shows unstyled), then instantiates its wasm.
async fn start() -> Result<(), JsValue> {
    append("link", &[("rel", "stylesheet"), ("href", CSS)]).await?;
    start_bundle(SCRIPT, INIT, WASM).await?;
    Ok(())
}

/// Loads a no-modules bundle's `script`, whose init function `scripts/externalize_boot.py`
/// names `init` on `window`, and instantiates its `wasm` (running its start function). Returns
/// the init function, which carries the bundle's exports.
pub(crate) async fn start_bundle(
    script: &str,
    init: &str,
    wasm: &str,
) -> Result<js_sys::Function, JsValue> {
    append("script", &[("src", script)]).await?;
    let init: js_sys::Function =
        js_sys::Reflect::get(&window(), &JsValue::from_str(init))?.dyn_into()?;
    let opts = js_sys::Object::new();
    js_sys::Reflect::set(&opts, &"module_or_path".into(), &wasm.into())?;
    let started: js_sys::Promise = init.call1(&JsValue::NULL, &opts)?.dyn_into()?;
    wasm_bindgen_futures::JsFuture::from(started).await?;
    Ok(init)
}
