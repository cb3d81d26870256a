//! lorafit: a LoRA / QLoRA fine-tuning GPU-memory planner.
//!
//! [`model`] is the pure memory model; [`catalog`] holds published model and GPU numbers;
//! [`report`] formats plans for people; the web app (wasm only) and the CLI are thin layers on top.
#![warn(missing_docs)]

pub mod advice;
pub mod catalog;
pub mod chart;
pub mod estimate;
pub mod export;
pub mod flops;
pub mod fuzz;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod import;
pub mod kernels;
pub mod lengths;
pub mod model;
pub mod planner;
pub mod report;
pub mod urlstate;

#[cfg(not(target_arch = "wasm32"))]
pub mod cli;

#[cfg(target_arch = "wasm32")]
pub mod app;

#[cfg(all(target_arch = "wasm32", feature = "gpu"))]
pub mod gpu_app;
