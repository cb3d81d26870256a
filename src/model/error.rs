//! Typed errors of the memory model: every invalid input ends here, never in a panic.

use std::fmt;

/// Why a plan could not be made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// An architecture number is impossible (zero layers, heads not dividing hidden...).
    InvalidArchitecture {
        /// config.json field name.
        field: &'static str,
        /// Human-readable reason.
        why: String,
    },
    /// A training setting is out of range or unknown.
    InvalidSetting {
        /// Setting name.
        field: &'static str,
        /// Human-readable reason.
        why: String,
    },
    /// The step needs ops this build leaves out: the planner page's first bundle is built
    /// without the `extended-ops` feature, and hands such a step to its full planner.
    Unbundled {
        /// What the step needs (the first such op it reached), e.g. "Gated DeltaNet layers".
        ops: &'static str,
    },
}

/// How the message of [`PlanError::Unbundled`] starts (the page recognises it by this).
pub const UNBUNDLED: &str = "this page's first bundle does not plan ";

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::InvalidArchitecture { field, why } => {
                write!(f, "invalid architecture: {field}: {why}")
            }
            PlanError::InvalidSetting { field, why } => {
                write!(f, "invalid setting: {field}: {why}")
            }
            PlanError::Unbundled { ops } => {
                write!(f, "{UNBUNDLED}{ops}: the full planner does")
            }
        }
    }
}

impl std::error::Error for PlanError {}
