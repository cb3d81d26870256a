//! Planning features built on the memory model: the verdict on a GPU, the largest batch and
//! sequence that fit, ranked fixes and forum myths, length-distribution analysis, the step-time
//! estimate, and [`evaluate`], everything the page and the CLI's `fit` show for one input.
//!
//! May import: [`crate::model`], [`crate::formats::catalog`] for GPU figures and
//! [`crate::formats::snapshot`] for measured runs (`inspect`). Never the web
//! page, the CLI or the GPU benchmark.

pub mod evaluate;
pub mod fit;
pub mod fixes;
pub mod inspect;
pub mod lengths;
pub mod time;
pub mod verdict;

pub use verdict::{job_verdict, verdict, Status, Verdict};
