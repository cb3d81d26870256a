//! The page's Web Worker (`lorafit::web::worker`): reading a real run
//! ([`lorafit::web::analyse::run`]) and planning every measured case
//! ([`lorafit::formats::validation::validate_json`]) for the browser.
//! Built by the planner's own trunk build (`index.html`, `data-type="worker"`) into
//! `lorafit-analyse.js` + `lorafit-analyse_bg.wasm`; `scripts/externalize_boot.py` writes the worker
//! script around it (`analyse-worker.js`), which the page starts for a job and
//! stops when the answer is back. Its wasm carries the snapshot reader, the inflater, the
//! allocator replay and the validation, so the planner's does not.

#[cfg(target_arch = "wasm32")]
mod worker {
    use wasm_bindgen::prelude::*;

    /// Reads `bytes` and compares them with the plan of the page's link `query`; calls
    /// `progress(text)` as it goes. Returns the inspection as JSON; throws the reason as a string.
    #[wasm_bindgen]
    pub fn analyse(
        bytes: Vec<u8>,
        query: &str,
        progress: &js_sys::Function,
    ) -> Result<String, String> {
        let mut say = |text: String| {
            let _ = progress.call1(&JsValue::NULL, &JsValue::from_str(&text));
        };
        let ins = lorafit::web::analyse::run(bytes, query, &mut say)?;
        serde_json::to_string(&ins).map_err(|e| e.to_string())
    }

    /// The whole job's verdict for the page's link `query` (every phase planned, those after
    /// training that run on the GPU too), as [`lorafit::web::worker_answers::job_verdict_line`]
    /// writes it; throws the reason as a string.
    #[wasm_bindgen]
    pub fn job(query: &str) -> Result<String, String> {
        lorafit::web::worker_answers::job_verdict_line(query)
    }

    /// What fits first for the page's link `query`
    /// ([`lorafit::web::worker_answers::best_fix_line`]); throws the reason as a string.
    #[wasm_bindgen]
    pub fn best(query: &str) -> Result<String, String> {
        lorafit::web::worker_answers::best_fix_line(query)
    }

    /// Plans every case of `validation.json` (its text) and compares; returns the validation as
    /// JSON (`lorafit validate --json`); throws the reason as a string.
    #[wasm_bindgen]
    pub fn validate(json: &str) -> Result<String, String> {
        let v = lorafit::formats::validation::validate_json(json)?;
        serde_json::to_string(&v).map_err(|e| e.to_string())
    }
}

fn main() {}
