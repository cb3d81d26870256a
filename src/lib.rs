//! lorafit: a LoRA / QLoRA fine-tuning GPU-memory planner.
//!
//! The crate is layered; each folder's `//!` doc says what it may import (a test checks it):
//! - [`model`] — the pure memory model: (architecture, settings) → plan. Imports nothing else.
//! - [`planning`] — what is built on plans: verdict, fit limits, fixes, myths, lengths, time.
//! - [`formats`] — what comes in and goes out: catalog, config.json, settings table, JSONL,
//!   exports, text reports.
//! - [`web`] — the page: its state, the link codec, chart geometry, and (wasm only) the Leptos UI.
//! - [`gpu`] — the LoRA matmul microbenchmark: WGSL kernels, the wgpu runtime, its page.
//! - [`cli`] — the native command line (not in wasm).
//! - [`fuzz`] — fuzz targets for every door untrusted input comes through.
#![warn(missing_docs)]

pub mod formats;
pub mod fuzz;
pub mod gpu;
pub mod model;
pub mod planning;
pub mod web;

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;
