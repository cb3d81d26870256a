//! The page's language in the views (wasm only): the page provides its [`Lang`] as context, and
//! views write English through [`t`] (a fixed label) or [`tx`] (a text that follows the state),
//! which follow the language switch. The table and the lookup are [`crate::web::i18n`]; the
//! Chinese table is fetched ([`load_zh`]) the first time a page is shown in Chinese.

use leptos::prelude::*;

use crate::web::i18n::{install, installed, tr, Lang};

/// Fetches the Chinese table (`zh.json` of the build, at `url` relative to the page) and
/// installs it, unless it is there already. On failure the texts stay English.
pub async fn load_zh(url: &str) -> Result<(), String> {
    if installed() {
        return Ok(());
    }
    let text = crate::web::fetch::fetch_text(url).await.map_err(|_| {
        "the Chinese texts could not be loaded (zh.json): the page stays in English".to_string()
    })?;
    install(&text)
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
