//! The planner page's Chinese (wasm only): the translation table's engine is a wasm of its own,
//! `lorafit-zh` (`src/bin/lorafit-zh.rs`), which the page loads — with the table, `zh.json` —
//! only when it is shown in Chinese, so the page's own wasm, what every visit loads, carries no
//! translation code. The page then translates each text through it ([`crate::web::i18n`]'s
//! engine is [`tr`] here). The sections bundle and the GPU page translate with their own copy of
//! the engine ([`crate::web::lang::native`]).

use std::cell::OnceCell;
use std::future::Future;
use std::pin::Pin;

use wasm_bindgen::{JsCast, JsValue};

use crate::web::lang::ZH_FAILED;

/// The bundle: wasm-bindgen's no-modules script (trunk's `data-type="worker"` asset in
/// `index.html`) and its wasm, relative to the page.
const SCRIPT: &str = "./lorafit-zh.js";
const WASM: &str = "./lorafit-zh_bg.wasm";
/// The script's init function, as `scripts/externalize_boot.py` names it on `window`.
const INIT: &str = "lorafitZh";

thread_local! {
    /// The bundle's `tr`, once it is started.
    static TR: OnceCell<js_sys::Function> = const { OnceCell::new() };
}

/// The page's [`crate::web::lang::Loader`]: starts the bundle, fetches the table from `url`
/// and installs it there, then makes the bundle the page's translator.
pub fn load(url: &'static str) -> Pin<Box<dyn Future<Output = Result<(), String>>>> {
    Box::pin(async move {
        start(url).await.map_err(|e| match e.as_string() {
            Some(why) => why,
            None => ZH_FAILED.to_string(),
        })
    })
}

async fn start(url: &'static str) -> Result<(), JsValue> {
    let init = crate::web::bridge::start_bundle(SCRIPT, INIT, WASM).await?;
    let text = crate::web::fetch::fetch_text(url)
        .await
        .map_err(|_| JsValue::from_str(ZH_FAILED))?;
    // The browser reads the JSON: the bundle gets the texts alternating English and Chinese,
    // NUL-separated, and carries no JSON reader.
    let pairs: js_sys::Array = js_sys::JSON::parse(&text)
        .map_err(|_| JsValue::from_str(ZH_FAILED))?
        .dyn_into()?;
    let texts = pairs.flat(1).join("\0");
    let install: js_sys::Function =
        js_sys::Reflect::get(&init, &JsValue::from_str("install"))?.dyn_into()?;
    if let Some(why) = install.call1(&init, &texts)?.as_string() {
        return Err(JsValue::from_str(&why));
    }
    let tr: js_sys::Function = js_sys::Reflect::get(&init, &JsValue::from_str("tr"))?.dyn_into()?;
    TR.with(|cell| {
        let _ = cell.set(tr);
    });
    crate::web::i18n::use_engine(self::tr);
    Ok(())
}

/// `en` in Chinese through the bundle, if its table has it.
fn tr(en: &str) -> Option<String> {
    TR.with(|cell| {
        cell.get()?
            .call1(&JsValue::NULL, &JsValue::from_str(en))
            .ok()?
            .as_string()
    })
}
