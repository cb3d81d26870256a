//! The memory model: a pure function from (architecture, settings) to the bytes PyTorch
//! allocates in each phase of a LoRA / QLoRA training step, every number explained.
//! No web, UI or GPU dependency: this module compiles and is tested natively.

pub mod allocator;
pub mod arch;
pub mod bnb_adamw;
pub mod ctx;
pub mod distributed;
pub mod dtype;
pub mod error;
pub mod extended;
pub mod family;
pub mod job;
pub mod job_settings;
mod names;
pub mod order;
pub mod parallel;
pub mod peft_targets;
pub mod plan;
pub mod settings;
pub mod steptrace;
pub mod term;
pub mod torchao_adamw;
pub mod vision;
pub mod weights;

pub use arch::{Architecture, Family, Target};
pub use dtype::{Dtype, Quant, QuantStorage};
pub use error::PlanError;
pub use parallel::{FsdpVersion, Parallel, Strategy};
pub use plan::{plan, plan_on, plan_simulated, plan_simulated_on, Phase, Plan, QuickSurface};
pub use settings::{
    AttnImpl, ExpertParam, ExpertsImpl, ExpertsLayout, FinetuningType, FusedCe, Generation,
    GrpoLoss, Liger, Logits, LoraInit, LossShift, Optimizer, PrefLoss, SavedModule, Settings,
    Stage,
};
pub use term::{Component, Term};
