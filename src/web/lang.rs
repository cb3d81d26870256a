//! The page's language in the views (wasm only): the page provides its [`Lang`] as context, and
//! views write English through [`t`] (a fixed label) or [`tx`] (a text that follows the state),
//! which follow the language switch. The table and the lookup are [`crate::web::i18n`]; the
//! Chinese table is fetched ([`load_zh`]) the first time a page is shown in Chinese, by the
//! loader the page chose ([`use_loader`]).

use leptos::prelude::*;

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;

use crate::web::i18n::{installed, tr, Lang};

/// The reason a page stays English.
pub const ZH_FAILED: &str =
    "the Chinese texts could not be loaded (zh.json): the page stays in English";

/// How a page gets its Chinese from the table's URL: [`native`] (this wasm installs the table
/// and translates itself) or the planner page's bundle (`web::chinese::load`).
pub type Loader = fn(&'static str) -> Pin<Box<dyn Future<Output = Result<(), String>>>>;

static LOADER: OnceLock<Loader> = OnceLock::new();

/// Chooses how this page gets its Chinese (at its mount, before [`table_first`]); the first
/// choice stays.
pub fn use_loader(load: Loader) {
    let _ = LOADER.set(load);
}

/// Fetches the Chinese table (`zh.json` of the build, at `url` relative to the page) and
/// installs it with this wasm's own translator.
pub fn native(url: &'static str) -> Pin<Box<dyn Future<Output = Result<(), String>>>> {
    Box::pin(async move {
        let text = crate::web::fetch::fetch_text(url)
            .await
            .map_err(|_| ZH_FAILED.to_string())?;
        crate::web::i18n::install(&text)?;
        crate::web::i18n::use_engine(crate::web::i18n::translate);
        Ok(())
    })
}

/// Gets the page its Chinese with the loader it chose ([`use_loader`]), unless it has it
/// already. On failure the texts stay English.
pub async fn load_zh(url: &'static str) -> Result<(), String> {
    if installed() {
        return Ok(());
    }
    match LOADER.get() {
        Some(load) => load(url).await,
        None => Err(ZH_FAILED.to_string()),
    }
}

/// Calls `show` once a page can be shown in `lang`: at once, or — Chinese whose table is not in
/// yet — after fetching the table from `url`, so the page never flashes English. `show` hears
/// why the table could not be fetched (the page is then English). (Leptos's executor starts
/// with the mount: the browser's own runs the fetch.)
pub fn table_first(
    lang: Option<Lang>,
    url: &'static str,
    show: impl FnOnce(Option<String>) + 'static,
) {
    if lang == Some(Lang::Zh) && !installed() {
        wasm_bindgen_futures::spawn_local(async move { show(load_zh(url).await.err()) });
    } else {
        show(None)
    }
}

/// Makes `lang` the language of every view below.
pub fn provide(lang: Memo<Lang>) {
    provide_context(lang);
}

/// The page's language (English outside a page, e.g. in a unit of a test).
pub fn lang() -> Signal<Lang> {
    match use_context::<Memo<Lang>>() {
        Some(m) => m.into(),
        None => Signal::stored(Lang::En),
    }
}

/// A fixed English label in the page's language.
pub fn t(en: &'static str) -> Signal<String> {
    let lang = lang();
    Signal::derive(move || tr(lang.get(), en).into_owned())
}

/// A text that follows the state, in the page's language (English as it is, without a copy:
/// this runs for every shown number on every slider move).
pub fn tx(f: impl Fn() -> String + Send + Sync + 'static) -> Signal<String> {
    let lang = lang();
    Signal::derive(move || {
        let en = f();
        match lang.get() {
            Lang::En => en,
            other => tr(other, &en).into_owned(),
        }
    })
}

/// A text the view already holds (a fix, a finding, an error), in the page's language.
pub fn ts(en: String) -> Signal<String> {
    tx(move || en.clone())
}

/// Translates a text now, in the page's language (inside a reactive closure).
pub fn now(lang: Signal<Lang>, en: &str) -> String {
    tr(lang.get(), en).into_owned()
}
