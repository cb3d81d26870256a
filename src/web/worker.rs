//! The page's Web Worker (wasm only): jobs too heavy for the page's own thread and wasm —
//! reading a real run ([`crate::web::analyse`]) and planning every measured case
//! ([`crate::formats::validation`]) — run in `analyse-worker.js`, which the planner's trunk build
//! writes around the `lorafit-analyse` wasm (`scripts/externalize_boot.py`). A worker is started
//! per job and stopped when its answer is in, so the memory a 200 MB snapshot needs is given
//! back. Messages: a job object in; `{progress}` texts, then `{result}` (JSON) or `{error}` out.

use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// The worker script, beside the page.
const WORKER_URL: &str = "./analyse-worker.js";

const NO_WORKER: &str = "the browser could not start the page's worker";

/// A job for the worker: `{job: name, …fields}`.
pub struct Job(js_sys::Object);

impl Job {
    /// The job called `name` (`analyse`, `validate`).
    pub fn new(name: &str) -> Job {
        Job(js_sys::Object::new()).with("job", &JsValue::from_str(name))
    }

    /// With a field (a `File` is passed as it is, not copied).
    pub fn with(self, key: &str, value: &JsValue) -> Job {
        let _ = js_sys::Reflect::set(&self.0, &JsValue::from_str(key), value);
        self
    }

    /// Runs the job in a new worker, passing its progress texts to `progress`; its result (JSON)
    /// or its reason.
    pub async fn run(self, progress: impl Fn(String) + 'static) -> Result<String, String> {
        let worker = web_sys::Worker::new(WORKER_URL).map_err(|_| NO_WORKER.to_string())?;
        let out = answer(&worker, &self.0, progress).await;
        worker.terminate();
        out
    }
}

/// Posts `job` and waits for `{result}` or `{error}`.
async fn answer(
    worker: &web_sys::Worker,
    job: &js_sys::Object,
    progress: impl Fn(String) + 'static,
) -> Result<String, String> {
    let mut settle = None;
    let done = js_sys::Promise::new(&mut |resolve, reject| settle = Some((resolve, reject)));
    let (resolve, reject) = settle.ok_or_else(|| NO_WORKER.to_string())?;
    let failed = reject.clone();
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
            let data = ev.data();
            let field = |k: &str| {
                js_sys::Reflect::get(&data, &JsValue::from_str(k))
                    .ok()
                    .and_then(|v| v.as_string())
            };
            if let Some(text) = field("progress") {
                progress(text);
            } else if let Some(json) = field("result") {
                let _ = resolve.call1(&JsValue::NULL, &JsValue::from_str(&json));
            } else {
                let why = field("error").unwrap_or_else(|| NO_WORKER.to_string());
                let _ = reject.call1(&JsValue::NULL, &JsValue::from_str(&why));
            }
        });
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |_: web_sys::Event| {
        let _ = failed.call1(&JsValue::NULL, &JsValue::from_str(NO_WORKER));
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    worker
        .post_message(job)
        .map_err(|_| NO_WORKER.to_string())?;
    let out = JsFuture::from(done).await;
    worker.set_onmessage(None);
    worker.set_onerror(None);
    out.map(|v| v.as_string().unwrap_or_default())
        .map_err(|e| e.as_string().unwrap_or_else(|| NO_WORKER.to_string()))
}

/// The worker's answers to `job` for the page's link: each query `wanted` names (None: nothing
/// asked) is posted once, and its answer, read by `read`, is kept with the query it answers,
/// so a view shows it only while the state is that query's ([`answer_for`]). A failed job is
/// reported on the console and leaves nothing.
pub fn answers<T: Send + Sync + 'static>(
    job: &'static str,
    wanted: leptos::prelude::Memo<Option<String>>,
    read: fn(&str) -> Option<T>,
) -> leptos::prelude::RwSignal<Option<(String, T)>> {
    use leptos::prelude::*;
    let answered: RwSignal<Option<(String, T)>> = RwSignal::new(None);
    Effect::new(move |_| {
        let Some(q) = wanted.get() else { return };
        if answered.with_untracked(|a| a.as_ref().is_some_and(|(aq, _)| *aq == q)) {
            return;
        }
        leptos::task::spawn_local(async move {
            let posted = Job::new(job).with("query", &JsValue::from_str(&q));
            match posted.run(|_| {}).await {
                Ok(line) => {
                    if let Some(v) = read(&line) {
                        answered.set(Some((q, v)));
                    }
                }
                Err(e) => web_sys::console::warn_1(&e.into()),
            }
        });
    });
    answered
}

/// The answer kept in `answered` if it is the one for `query` (tracked).
pub fn answer_for<T: Clone + Send + Sync + 'static>(
    answered: leptos::prelude::RwSignal<Option<(String, T)>>,
    query: &str,
) -> Option<T> {
    use leptos::prelude::*;
    answered.with(|a| {
        a.as_ref()
            .filter(|(aq, _)| aq == query)
            .map(|(_, v)| v.clone())
    })
}
