//! The optional in-browser LoRA matmul microbenchmark: [`kernels`] (WGSL sources and the CPU
//! reference, always compiled so they are tested natively), `runtime` (wgpu: Vulkan natively,
//! WebGPU in the browser; feature `gpu`) and `page` (its lazily loaded page; wasm + `gpu`).
//!
//! May import: [`crate::model`], [`crate::planning`], [`crate::formats`], and the page state
//! ([`crate::web::state`], [`crate::web::link`]) to plan the visitor's configuration.

pub mod kernels;
#[cfg(all(target_arch = "wasm32", feature = "gpu"))]
pub mod page;
#[cfg(feature = "gpu")]
pub mod runtime;
