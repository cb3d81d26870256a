//! The full planner: the planner page (`lorafit::web::app`) with every op of the step program
//! (the `extended-ops` feature, which the page's first bundle, `src/main.rs` as `index.html`
//! builds it, leaves out). The first bundle reloads the page as this one when a state needs
//! those ops (`lorafit::web::full`); `boot.js` starts it. Built by the planner's own trunk build
//! (`data-type="worker"`: wasm-bindgen's no-modules target, no loader injected) into
//! `lorafit-full.js` + `lorafit-full_bg.wasm`; its start function mounts the page.

#[cfg(target_arch = "wasm32")]
fn main() {
    console_error_panic_hook::set_once();
    lorafit::web::app::mount();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {}
