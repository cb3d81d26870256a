//! The evidence the page and `lorafit validate` show is the committed measurements: the compacted
//! file is what scripts/make_validation.py writes from tests/data, and every case plans.

#[test]
fn the_compacted_measurements_match_tests_data() {
    let status = std::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/scripts/make_validation.py"
        ))
        .arg("--check")
        .status()
        .expect("python3");
    assert!(
        status.success(),
        "data/validation.json is stale: run python3 scripts/make_validation.py"
    );
}

#[test]
fn every_measured_case_is_compared() {
    let v = lorafit::formats::validation::validate().expect("validates");
    // 68 dense + 28 mixture-of-experts cases.
    assert_eq!(v.cases.len(), 96);
    assert_eq!(
        v.cases
            .iter()
            .filter(|c| c.replayed_reserved_bytes.is_some())
            .count(),
        60
    );
    assert_eq!(v.published.len(), 9);
    assert!(v.allocated.max_abs_pct <= 3.0, "{:?}", v.allocated);
    assert!(v.cases.iter().all(|c| c.phase_agrees));
}
