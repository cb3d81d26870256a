//! The planner page's sections (`lorafit::web::sections`): everything below the first screen,
//! a second wasm the page loads the first time a section is opened (`lorafit::web::bridge`).
//! Built by the planner's own trunk build (`index.html`, `data-type="worker"`, i.e. wasm-bindgen's
//! no-modules target, without a loader of its own) into `lorafit-sections.js` +
//! `lorafit-sections_bg.wasm`; its start function mounts it into the page.

#[cfg(target_arch = "wasm32")]
fn main() {
    console_error_panic_hook::set_once();
    lorafit::web::sections::mount();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {}
