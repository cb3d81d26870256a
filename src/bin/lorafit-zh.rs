//! The planner page's Chinese (`lorafit::web::chinese`): the translation table's engine
//! (`lorafit::web::i18n`) as a wasm of its own, which the page loads only when it is shown in
//! Chinese, so an English visit carries no translation code. Built by the planner's trunk build
//! (`index.html`, `data-type="worker"`: wasm-bindgen's no-modules target, no loader of its own)
//! into `lorafit-zh.js` + `lorafit-zh_bg.wasm`; `scripts/externalize_boot.py` names its init
//! function `window.lorafitZh`, whose `install` and `tr` the page then calls.

#[cfg(target_arch = "wasm32")]
mod exports {
    use wasm_bindgen::prelude::wasm_bindgen;

    /// Installs the table from `zh.json`'s texts as the page hands them over (alternating
    /// English and Chinese, NUL-separated: `lorafit::web::i18n::install_split`); the reason it
    /// could not, or nothing.
    #[wasm_bindgen]
    pub fn install(texts: &str) -> Option<String> {
        lorafit::web::i18n::install_split(texts).err()
    }

    /// `en` in Chinese, if the table has it.
    #[wasm_bindgen]
    pub fn tr(en: &str) -> Option<String> {
        lorafit::web::i18n::translate(en)
    }
}

fn main() {}
