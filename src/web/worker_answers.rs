//! What the page's worker plans for the planner page, and the texts its answers travel as
//! (pure, tested natively). The page's own bundle carries the training step, the allocator
//! simulation and the phases written as formulas; the whole job (a phase after training that
//! runs on the GPU) and the search for what fits first run in the worker, off the page's
//! thread, for the state's link — the one serialisation of everything the page holds.
//!
//! Each answer is one line of fields separated by U+001F (no field holds it).

use crate::formats::catalog;
use crate::planning::fit::Fidelity;
use crate::planning::{fixes, Status, Verdict};
use crate::web::link;
use crate::web::state::{arch_of, whole_job, UiState};

const SEP: char = '\u{1f}';

fn status_of(name: &str) -> Option<Status> {
    match name {
        "fits" => Some(Status::Fits),
        "tight" => Some(Status::Tight),
        "oom" => Some(Status::Oom),
        _ => None,
    }
}

/// The whole job's verdict for the page's link `query`: `status phase capacity headroom`.
pub fn job_verdict_line(query: &str) -> Result<String, String> {
    let st = link::decode(query).0;
    let plan =
        crate::model::plan_simulated(&arch_of(&st)?, &st.settings).map_err(|e| e.to_string())?;
    let (job, cap) = whole_job(&st, &plan)?;
    let v = crate::planning::job_verdict(&job, cap);
    Ok([
        v.status.name().to_string(),
        v.phase.to_string(),
        v.capacity_bytes.to_string(),
        v.headroom_bytes.to_string(),
    ]
    .join(&SEP.to_string()))
}

/// Reads a [`job_verdict_line`] back.
pub fn read_verdict_line(line: &str) -> Option<Verdict> {
    let mut w = line.split(SEP);
    let status = status_of(w.next()?)?;
    let phase = match w.next()? {
        "train" => "train",
        "eval" => "eval",
        "save" => "save",
        "merge" => "merge",
        _ => return None,
    };
    Some(Verdict {
        status,
        phase,
        capacity_bytes: w.next()?.parse().ok()?,
        headroom_bytes: w.next()?.parse().ok()?,
    })
}

/// What fits first, for the hero.
#[derive(Clone, Debug, PartialEq)]
pub enum Best {
    /// The cheapest change (or combination, or the last resort) that makes the job fit.
    Fix {
        /// Verdict with it.
        status: Status,
        /// Its peak allocated bytes (the deciding phase's).
        peak_bytes: u128,
        /// Its nvidia-smi figure.
        smi_bytes: u128,
        /// Its cost in time per token, in words ([`crate::formats::report::speed`]; the list
        /// of single changes adds the epoch's cost on a priced card).
        speed: String,
        /// Whether it truncates the sequence.
        last_resort: bool,
        /// What to change (the summary in a few words).
        summary: String,
        /// What it costs.
        cost: String,
        /// The page's link with the change applied.
        query: String,
    },
    /// Nothing fits on this GPU: the smallest catalog GPU that holds it, if any (id, name).
    Gpu(Option<(String, String)>),
}

/// The cheapest combination of changes that makes the state of `query` fit, judged with the
/// caching allocator simulated and the whole job, as `lorafit suggest` finds it.
pub fn best_fix_line(query: &str) -> Result<String, String> {
    let st = link::decode(query).0;
    let arch = arch_of(&st)?;
    let g = catalog::find_gpu(&st.gpu)?;
    let fix = fixes::best_combination_with(
        &arch,
        &st.settings,
        g.capacity_bytes(),
        g.bf16_ok(),
        Some(g),
        Fidelity::Simulated,
    );
    let fields: Vec<String> = match fix {
        Some(f) => {
            let applied = UiState {
                settings: f.settings.clone(),
                ..st.clone()
            };
            vec![
                "fix".into(),
                f.status.name().into(),
                f.peak_allocated_bytes.to_string(),
                f.nvidia_smi_bytes.to_string(),
                crate::formats::report::speed(f.time_factor),
                u8::from(f.last_resort).to_string(),
                f.summary,
                f.cost,
                link::encode(&applied),
            ]
        }
        None => {
            let gpu = crate::planning::evaluate::smallest_gpu(&arch, &st.settings);
            vec![
                "gpu".into(),
                gpu.map(|g| g.id.clone()).unwrap_or_default(),
                gpu.map(|g| g.name.clone()).unwrap_or_default(),
            ]
        }
    };
    let clean: Vec<String> = fields.into_iter().map(|x| x.replace(SEP, " ")).collect();
    Ok(clean.join(&SEP.to_string()))
}

/// Reads a [`best_fix_line`] back.
pub fn read_best_fix(line: &str) -> Option<Best> {
    let w: Vec<&str> = line.split(SEP).collect();
    match w.as_slice() {
        ["fix", status, peak, smi, speed, last, summary, cost, query] => Some(Best::Fix {
            status: status_of(status)?,
            peak_bytes: peak.parse().ok()?,
            smi_bytes: smi.parse().ok()?,
            speed: speed.to_string(),
            last_resort: *last == "1",
            summary: summary.to_string(),
            cost: cost.to_string(),
            query: query.to_string(),
        }),
        ["gpu", id, name] => Some(Best::Gpu(
            (!id.is_empty()).then(|| (id.to_string(), name.to_string())),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The answers read back are what the planner says for the link, the applied link holds the
    /// combination's settings, and text that is not an answer reads as none.
    #[test]
    fn answers_travel_and_read_back() {
        let q = "model=llama2-7b&gpu=rtx4090&b=8&s=4096";
        let st = link::decode(q).0;
        let arch = arch_of(&st).unwrap();
        let cap = catalog::find_gpu("rtx4090").unwrap().capacity_bytes();
        let want = fixes::best_combination_with(
            &arch,
            &st.settings,
            cap,
            true,
            catalog::find_gpu("rtx4090").ok(),
            Fidelity::Simulated,
        )
        .expect("a fix");
        match read_best_fix(&best_fix_line(q).unwrap()) {
            Some(Best::Fix {
                status,
                peak_bytes,
                query,
                summary,
                ..
            }) => {
                assert_eq!(status, want.status);
                assert_eq!(peak_bytes, want.peak_allocated_bytes);
                assert_eq!(summary, want.summary);
                assert_eq!(link::decode(&query).0.settings, want.settings);
            }
            other => panic!("{other:?}"),
        }
        let eval = "model=llama2-7b&gpu=rtx4090&b=1&s=512&eb=16&en=256&plo=0";
        let v = read_verdict_line(&job_verdict_line(eval).unwrap()).unwrap();
        assert_eq!((v.status, v.phase), (Status::Oom, "eval"));
        assert_eq!(v.capacity_bytes, cap);
        assert_eq!(read_best_fix("fix\u{1f}fits"), None);
        assert_eq!(read_verdict_line("fits train x 0"), None);
    }
}
