//! Fetching a text (wasm only): the Chinese table from the build, a config.json from the Hub.
//! One path, so each caller only words its own failures.

use leptos::prelude::window;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// Why a text could not be fetched.
pub enum FetchError {
    /// No answer (offline, blocked, refused).
    Unreachable,
    /// An answer other than 200 OK: its HTTP status.
    Status(u16),
    /// A 200 answer whose body could not be read as text.
    Unreadable,
}

/// The body of `url` (relative to the page) as text.
pub async fn fetch_text(url: &str) -> Result<String, FetchError> {
    let resp: web_sys::Response = JsFuture::from(window().fetch_with_str(url))
        .await
        .map_err(|_| FetchError::Unreachable)?
        .dyn_into()
        .map_err(|_| FetchError::Unreadable)?;
    if resp.status() != 200 {
        return Err(FetchError::Status(resp.status()));
    }
    let text = JsFuture::from(resp.text().map_err(|_| FetchError::Unreadable)?)
        .await
        .map_err(|_| FetchError::Unreadable)?;
    text.as_string().ok_or(FetchError::Unreadable)
}
