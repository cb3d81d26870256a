//! Accuracy against measured peaks: every case of `tests/data/reference/cases.jsonl` (dense
//! families) and every full-size case of `tests/data/reference/moe/cases.jsonl` (mixture-of-experts
//! families) is planned and the predicted peak allocated bytes are compared with
//! `measured.peak_bytes`.
//! Target (issue 2): every case within ±3 %, median |error| ≤ 1 %, and the peak in the measured
//! phase on every case.

use std::path::PathBuf;

use lorafit::formats::jsonl::estimate_line;

/// Cases in the committed reference file; a change to the data must change this number too.
const EXPECTED_CASES: usize = 68;
/// Full-size (emulated-GPU) cases in the committed MoE file (its small CPU rows are checked in
/// `moe_small_cpu_rows`).
const EXPECTED_MOE_CASES: usize = 28;

pub fn cases_path() -> PathBuf {
    if let Ok(p) = std::env::var("LORAFIT_REFERENCE") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference/cases.jsonl")
}

pub fn moe_cases_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference/moe/cases.jsonl")
}

/// The full-size rows of a cases file (the MoE file also holds small CPU rows).
pub fn full_size_lines(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("reference line is JSON");
            v["method"].as_str() != Some("real-cpu")
        })
        .collect()
}

#[test]
fn reference_cases_within_tolerance() {
    accuracy_table(&cases_path(), EXPECTED_CASES);
}

#[test]
fn moe_reference_cases_within_tolerance() {
    accuracy_table(&moe_cases_path(), EXPECTED_MOE_CASES);
}

fn accuracy_table(path: &std::path::Path, expected: usize) {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "cannot read {} ({e}); set LORAFIT_REFERENCE to the cases file",
            path.display()
        )
    });
    let mut rows = vec![];
    for line in full_size_lines(&text) {
        let v: serde_json::Value = serde_json::from_str(line).expect("reference line is JSON");
        let measured = v["measured"]["peak_bytes"]
            .as_f64()
            .expect("measured.peak_bytes");
        let measured_phase = v["measured"]["peak_phase"]
            .as_str()
            .unwrap_or("?")
            .to_string();
        let (id, p, _, _) = estimate_line(&crate::harness_line(line))
            .unwrap_or_else(|(id, e)| panic!("case {id} failed to plan: {e}"));
        let predicted = p.peak_allocated_bytes as f64;
        let err = (predicted - measured) / measured * 100.0;
        rows.push((
            id.as_str().unwrap_or("?").to_string(),
            measured,
            predicted,
            err,
            measured_phase,
            p.peak_phase.name().to_string(),
        ));
    }
    assert_eq!(
        rows.len(),
        expected,
        "{} should hold {expected} measured full-size cases",
        path.display()
    );
    let gib = |b: f64| b / (1u64 << 30) as f64;
    println!(
        "{:<76} {:>9} {:>9} {:>7}  phase (measured/predicted)",
        "case", "meas GiB", "pred GiB", "err %"
    );
    for (id, m, p, e, pm, pp) in &rows {
        println!(
            "{id:<76} {:>9.3} {:>9.3} {e:>+7.3}  {pm}/{pp}  Δ {:.1} MiB",
            gib(*m),
            gib(*p),
            (p - m) / 1048576.0
        );
    }
    let mut abs: Vec<f64> = rows.iter().map(|r| r.3.abs()).collect();
    abs.sort_by(|a, b| a.total_cmp(b));
    let median = if abs.len() % 2 == 1 {
        abs[abs.len() / 2]
    } else {
        (abs[abs.len() / 2 - 1] + abs[abs.len() / 2]) / 2.0
    };
    let max = abs.last().copied().unwrap_or(0.0);
    let within = abs.iter().filter(|e| **e <= 3.0).count();
    let phase_ok = rows.iter().filter(|r| r.4 == r.5).count();
    println!("{within}/{} within ±3 %, median |err| {median:.2} %, max {max:.2} %, phase agrees on {phase_ok}/{}", rows.len(), rows.len());
    assert!(
        max <= 3.0 && median <= 1.0,
        "accuracy target missed: max {max:.2} %, median {median:.2} %"
    );
    let wrong_phase: Vec<&str> = rows
        .iter()
        .filter(|r| r.4 != r.5)
        .map(|r| r.0.as_str())
        .collect();
    assert!(
        wrong_phase.is_empty(),
        "peak phase differs from the measured one on {wrong_phase:?}"
    );
}

/// The small MoE rows measured with real tensors on the CPU (2 layers, a 64-token vocabulary and
/// experts wide enough that the peak lies inside the top layer's experts' backward), grouped_mm
/// vs eager experts, random vs zeroed router: a CPU step is not the GPU step the planner models
/// (CPU attention kernels), so this checks only that the MoE backward moment is found and sized
/// within ±4 % (eager is planned with its worst case, one expert receiving every token).
#[test]
fn moe_small_cpu_rows() {
    let text = std::fs::read_to_string(moe_cases_path()).expect("MoE cases");
    let mut n = 0;
    for line in text.lines().filter(|l| l.contains("\"real-cpu\"")) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let measured = v["measured"]["peak_bytes"].as_f64().unwrap();
        let (id, p, _, _) =
            estimate_line(&crate::harness_line(line)).unwrap_or_else(|(id, e)| panic!("{id}: {e}"));
        let err = (p.peak_allocated_bytes as f64 - measured) / measured * 100.0;
        println!("{id} {err:+.2} % at {}", p.peak_moment);
        assert!(err.abs() <= 4.0, "{id}: {err:+.2} %");
        n += 1;
    }
    assert_eq!(n, 8, "small CPU rows");
}
