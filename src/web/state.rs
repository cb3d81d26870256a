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
            // The first screen opens on a model people fine-tune now (a dense one, which the
            // first bundle plans alone).
            model: "qwen3-8b".into(),
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

/// The settled evaluation of a state: the plan re-made with PyTorch's caching allocator
/// simulated, the verdict from it, and the fit limits re-found against the simulated
/// nvidia-smi. A simulated bisection would cost a second of main-thread time, so each limit
/// starts from a guess — the quick search against the capacity scaled by this plan's
/// quick / simulated nvidia-smi ratio — and the simulated search only confirms it (two plans
/// when the guess is right, a few more when the overhead ratio shifts along the axis).
pub fn settle(st: &UiState, quick: &Evaluation) -> Result<Evaluation, String> {
    use crate::planning::evaluate::{BATCH_SEARCH_MAX, SEQ_SEARCH_MAX};
    use crate::planning::fit;
    let arch = arch_of(st)?;
    let g = catalog::find_gpu(&st.gpu)?;
    let cap = g.capacity_bytes();
    let plan = crate::model::plan_simulated(&arch, &st.settings).map_err(|e| e.to_string())?;
    let ratio = quick.plan.nvidia_smi_bytes as f64 / plan.nvidia_smi_bytes.max(1) as f64;
    let cap_quick = (cap as f64 * ratio) as u128;
    let limit = |batch: bool, max: u64, prev: Option<u64>| {
        let guess = fit::max_near(
            &arch,
            &st.settings,
            cap_quick,
            batch,
            max,
            prev,
            Fidelity::Quick,
        );
        fit::max_near(
            &arch,
            &st.settings,
            cap,
            batch,
            max,
            guess,
            Fidelity::Simulated,
        )
    };
    Ok(Evaluation {
        verdict: crate::planning::evaluate::formula_verdict(&arch, &st.settings, &plan, cap),
        whole_job: !st.settings.job.runs_on_gpu_after_training(),
        job: None,
        max_batch: limit(true, BATCH_SEARCH_MAX, quick.max_batch),
        max_seq: limit(false, SEQ_SEARCH_MAX, quick.max_seq),
        plan,
        ..quick.clone()
    })
}

/// [`settle`] with every phase of the job planned, a phase after training that runs on the
/// GPU too (the sections bundle: its job section shows them; milliseconds more).
pub fn settle_whole_job(st: &UiState, quick: &Evaluation) -> Result<Evaluation, String> {
    let e = settle(st, quick)?;
    let (job, cap) = whole_job(st, &e.plan)?;
    Ok(Evaluation {
        verdict: crate::planning::job_verdict(&job, cap),
        job: Some(job),
        whole_job: true,
        ..e
    })
}

/// The job of a state whose training step is planned as `plan`, every phase planned on the
/// state's GPU, and that GPU's capacity.
pub fn whole_job(
    st: &UiState,
    plan: &crate::model::Plan,
) -> Result<(crate::model::job::Job, u128), String> {
    let arch = arch_of(st)?;
    let cap = catalog::find_gpu(&st.gpu)?.capacity_bytes();
    let job = crate::model::job::plan_job_within(&arch, &st.settings, plan, cap)
        .map_err(|e| e.to_string())?;
    Ok((job, cap))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The settled limits (a guess confirmed by simulated plans) are the simulated bisection's.
    #[test]
    fn settled_fit_limits_are_the_simulated_search() {
        for q in [
            "model=llama2-7b&gpu=rtx4090&b=2&s=2048",
            "model=qwen2-7b&gpu=a10&gc=1&dt=nf4",
            "model=llama2-13b&gpu=a100-40&gc=1",
        ] {
            let st = crate::web::link::decode(q).0;
            let quick = evaluate_state(&st).unwrap();
            let settled = settle(&st, &quick).unwrap();
            let full = evaluate_state_with(&st, Fidelity::Simulated).unwrap();
            assert_eq!(
                (settled.max_batch, settled.max_seq),
                (full.max_batch, full.max_seq),
                "{q}"
            );
            assert_eq!(settled.plan, full.plan, "{q}");
            assert_eq!(settled.verdict, full.verdict, "{q}");
        }
    }
}
