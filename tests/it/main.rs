//! One integration-test binary (faster to link than many): the reference comparison, property
//! tests over the input space, CLI behaviour and catalog invariants.

mod allocator;
mod architecture;
mod catalog;
mod cli;
mod distributed;
mod fuzz;
#[cfg(feature = "gpu")]
mod gpu;
mod i18n;
mod inspect;
mod moe_layout;
mod planning;
mod properties;
mod reference;
mod reserved;
mod snapshot;
mod validation;
mod weights;
