//! The web page. [`state`] is the one value the page holds, [`link`] its query-string codec
//! (links and embeds), [`layout`] which settings show where, [`i18n`] the page in English and
//! 简体中文, [`chart`] the geometry of the bar and curve, [`analyse`] what the "Read a real run"
//! panel's Web Worker runs (its own wasm); these are pure and tested natively. `setup` is what the page, the embed and the sections share (the state
//! and its `Memo`s); `app` (the page and the embed), `controls` and `panels` are the Leptos
//! components (wasm only); `sections` is the second wasm holding everything below the first
//! screen, loaded when a section is opened, and `bridge` keeps it and the page on one state
//! (`full` hands a state whose step the page's first bundle leaves out to the full planner):
//! controls write the state through the
//! settings table, `Memo`s derive everything through [`crate::planning::evaluate`], views only
//! format.
//!
//! May import: [`crate::model`], [`crate::planning`], [`crate::formats`]. Never the CLI or the
//! GPU benchmark (that page is a separate bundle).

pub mod analyse;
pub mod chart;
pub mod examples;
pub mod i18n;
pub mod layout;
pub mod link;
pub mod state;
pub mod worker_answers;

#[cfg(target_arch = "wasm32")]
pub mod app;
#[cfg(target_arch = "wasm32")]
pub mod bridge;
#[cfg(target_arch = "wasm32")]
pub mod chinese;
#[cfg(target_arch = "wasm32")]
pub mod controls;
#[cfg(target_arch = "wasm32")]
pub mod evidence;
#[cfg(target_arch = "wasm32")]
pub mod fetch;
#[cfg(target_arch = "wasm32")]
pub mod full;
#[cfg(target_arch = "wasm32")]
pub mod job;
#[cfg(target_arch = "wasm32")]
pub mod lang;
#[cfg(target_arch = "wasm32")]
pub mod measured;
#[cfg(target_arch = "wasm32")]
pub mod panels;
#[cfg(target_arch = "wasm32")]
pub mod sections;
#[cfg(target_arch = "wasm32")]
pub mod settle;
#[cfg(target_arch = "wasm32")]
pub mod setup;
#[cfg(target_arch = "wasm32")]
pub mod training_config;
#[cfg(target_arch = "wasm32")]
pub mod worker;
