//! The page's state: the one value every control writes and every view derives from. The link
//! codec ([`super::link`]) reads and writes it; the planner never sees it, only the model,
//! GPU and settings it names.

use crate::formats::catalog;
use crate::model::{Architecture, Settings};
use crate::planning::evaluate::{evaluate_arch, Axis, Evaluation};
use crate::planning::fit::Fidelity;
use crate::web::i18n::Lang;

/// Everything a link carries.
#[derive(Clone, Debug, PartialEq)]
pub struct UiState {
    /// Catalog model id.
    pub model: String,
    /// Catalog GPU id.
    pub gpu: String,
    /// Training settings.
    pub settings: Settings,
    /// Compact widget layout for iframes.
    pub embed: bool,
    /// Curve chart axis.
    pub axis: Axis,
    /// An imported architecture (config.json) used instead of the catalog model.
    pub custom: Option<Architecture>,
    /// Same-origin path serving the Hub's layout (`./hub`), for offline tests; never encoded.
    pub hub: Option<String>,
    /// The page's language when chosen (link `lang=zh|en`, the switch, or a Chinese browser on
    /// the first visit); None: English.
    pub lang: Option<Lang>,
}

impl Default for UiState {
    fn default() -> Self {
        UiState {
            model: "llama2-7b".into(),
            gpu: "a100-80".into(),
            settings: Settings::default(),
            embed: false,
            axis: Axis::Seq,
            custom: None,
            hub: None,
            lang: None,
        }
    }
}

/// The architecture a page state plans: the imported config if any, else the catalog model.
pub fn arch_of(st: &UiState) -> Result<Architecture, String> {
    match &st.custom {
        Some(a) => Ok(a.clone()),
        None => Ok(catalog::find_model(&st.model)?.arch.clone()),
    }
}

/// Evaluates a page state (imported architecture or catalog model, catalog GPU) with the quick
/// reserve allowance: what the page shows within a frame of a slider move.
pub fn evaluate_state(st: &UiState) -> Result<Evaluation, String> {
    evaluate_state_with(st, Fidelity::Quick)
}

/// Evaluates a page state at the given fidelity ([`Fidelity::Simulated`]: the caching
/// allocator simulated, what the page settles on once the state stops changing).
pub fn evaluate_state_with(st: &UiState, how: Fidelity) -> Result<Evaluation, String> {
    let arch = arch_of(st)?;
    let g = catalog::find_gpu(&st.gpu)?;
    evaluate_arch(&arch, &g.name, g.capacity_bytes(), &st.settings, how)
}

/// The settled evaluation of a state: the quick one with the plan re-made with PyTorch's caching
/// allocator simulated, and the verdict from it (the fit limits stay the quick search's: a
/// simulated bisection costs a second of main-thread time in the browser).
pub fn settle(st: &UiState, quick: &Evaluation) -> Result<Evaluation, String> {
    let arch = arch_of(st)?;
    let g = catalog::find_gpu(&st.gpu)?;
    let plan = crate::model::plan_simulated(&arch, &st.settings).map_err(|e| e.to_string())?;
    Ok(Evaluation {
        verdict: crate::planning::verdict(&plan, g.capacity_bytes()),
        plan,
        ..quick.clone()
    })
}

/// The model picker's (id, label) options matching a search (the current model always stays).
pub fn model_options(search: &str, current: &str) -> Vec<(String, String)> {
    let q = search.to_ascii_lowercase();
    catalog::models()
        .iter()
        .filter(|m| {
            q.is_empty()
                || m.arch.name == current
                || m.arch.name.contains(&q)
                || m.hf_id.to_ascii_lowercase().contains(&q)
        })
        .map(|m| {
            (
                m.arch.name.clone(),
                if m.arch.is_moe() {
                    format!(
                        "{} · {:.1}B ({:.1}B active) · {}",
                        m.arch.name,
                        m.arch.total_params() as f64 / 1e9,
                        m.arch.active_params() as f64 / 1e9,
                        m.hf_id
                    )
                } else {
                    format!(
                        "{} · {:.1}B · {}",
                        m.arch.name,
                        m.arch.total_params() as f64 / 1e9,
                        m.hf_id
                    )
                },
            )
        })
        .collect()
}

/// The GPU picker's (id, label) options.
pub fn gpu_options() -> Vec<(String, String)> {
    catalog::gpus()
        .iter()
        .map(|g| {
            (
                g.id.clone(),
                format!("{} — {} GiB", g.name, g.memory_gib.unwrap_or(0.0)),
            )
        })
        .collect()
}
