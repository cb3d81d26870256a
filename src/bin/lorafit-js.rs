//! The planner as a JavaScript module for other pages (docs showing a live number without an
//! iframe): `plan(request)` → the plan as a plain object. Built by `trunk build --release --dist
//! dist/lib --filehash false lib/index.html` into `dist/lib/lorafit-js.js` + `lorafit-js_bg.wasm`, a
//! separate bundle, so the planner page's wasm does not carry it. See the README.

#[cfg(target_arch = "wasm32")]
mod js {
    use wasm_bindgen::prelude::*;

    /// `plan({model: "llama2-7b" | {config numbers}, settings: {...}, gpu?: "rtx4090"})`: the same
    /// request as an `estimate --jsonl` line (a JSON string of it works too); returns the plan as
    /// `lorafit plan --json` prints it (bytes as numbers), with `verdict` when a GPU is given.
    /// Throws an Error with the reason on invalid input.
    #[wasm_bindgen]
    pub fn plan(request: JsValue) -> Result<JsValue, JsError> {
        let v: serde_json::Value =
            serde_wasm_bindgen::from_value(request).map_err(|e| JsError::new(&e.to_string()))?;
        let out = lorafit::formats::jsonl::plan_request(&v).map_err(|e| JsError::new(&e))?;
        js_sys::JSON::parse(&out.to_string()).map_err(|_| JsError::new("unrepresentable plan"))
    }

    /// The crate version.
    #[wasm_bindgen]
    pub fn version() -> String {
        env!("CARGO_PKG_VERSION").into()
    }
}

fn main() {}
