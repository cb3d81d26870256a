//! A real run against its plan (`lorafit inspect`): genuine snapshots give PyTorch's own peaks,
//! an unmodified run has nothing unplanned, and a run that deliberately differs from its plan
//! (tests/data/unplanned: an fp32 copy of the logits kept from forward) has exactly that tensor
//! named, with its phase and size.

use lorafit::formats::catalog::find_model;
use lorafit::model::{Quant, Settings};
use lorafit::planning::inspect::inspect;
use serde_json::Value;

fn data(path: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn expected(path: &str) -> Value {
    serde_json::from_slice(&data(path)).unwrap()
}

const QWEN: &str = "qwen2.5-0.5b_bf16_s2048_b4_r16_all-linear_do0.05_sdpa_gc";
const LLAMA: &str = "llama2-7b_nf4+bf16+autocast_bf16_s2048_b4_r16_all-linear_do0.05_sdpa_gc";

fn qwen_settings() -> Settings {
    Settings {
        batch: 4,
        seq: 2048,
        grad_ckpt: true,
        ..Settings::default()
    }
}

#[test]
fn snapshots_give_pytorchs_own_peaks_and_nothing_unplanned() {
    let exp = expected("reference/snapshots/expected.json");
    // The harness's 4-bit steps run prepare_model_for_kbit_training.
    let llama = Settings {
        quant: Some(Quant::Nf4),
        prepare_kbit: true,
        autocast: Some(lorafit::model::Dtype::Bf16),
        ..qwen_settings()
    };
    for (name, model, s) in [
        (QWEN, "qwen2.5-0.5b", qwen_settings()),
        (LLAMA, "llama2-7b", llama),
    ] {
        let arch = find_model(model).unwrap().arch.clone();
        let bytes = data(&format!("reference/snapshots/{name}.pickle.gz"));
        let ins = inspect(&bytes, Some((&arch, &s))).unwrap();
        let want = |k: &str| exp[name][k].as_u64().unwrap();
        assert_eq!(
            ins.peak_reserved_bytes,
            Some(want("max_reserved")),
            "{name}"
        );
        assert_eq!(
            ins.peak_requested_bytes,
            Some(want("max_requested")),
            "{name}"
        );
        let alloc = ins.peak_allocated_bytes.unwrap() as f64;
        let err = (alloc - want("max_allocated") as f64).abs() / want("max_allocated") as f64;
        assert!(
            err <= 0.001,
            "{name}: allocated {alloc} vs {}",
            want("max_allocated")
        );
        assert!(!ins.trace_truncated);
        assert!(ins.unplanned.is_empty(), "{name}: {:?}", ins.unplanned);
        // The summary text alone: both peaks within its 1 MiB rounding.
        let text = data(&format!("reference/snapshots/{name}.summary.txt"));
        let sum = inspect(&text, None).unwrap();
        assert_eq!(sum.kind, "memory_summary");
        for (got, k) in [
            (sum.peak_allocated_bytes, "max_allocated"),
            (sum.peak_reserved_bytes, "max_reserved"),
        ] {
            let got = got.unwrap();
            assert!(
                got <= want(k) && want(k) - got < 1 << 20,
                "{name} {k}: {got}"
            );
        }
    }
}

#[test]
fn a_run_that_differs_from_its_plan_has_the_difference_named() {
    let exp = &expected("unplanned/expected.json")["logits-fp32"];
    let arch = find_model("qwen2.5-0.5b").unwrap().arch.clone();
    let ins = inspect(
        &data("unplanned/logits-fp32.pickle.gz"),
        Some((&arch, &qwen_settings())),
    )
    .unwrap();
    assert_eq!(ins.peak_reserved_bytes, exp["max_reserved"].as_u64());
    let top = ins.unplanned.first().expect("an unplanned tensor");
    let want = exp["unplanned_bytes"].as_f64().unwrap();
    assert!(
        (top.bytes as f64 - want).abs() / want <= 0.05,
        "{} vs {want}",
        top.bytes
    );
    assert_eq!(top.count, 1);
    assert_eq!(top.phase, exp["unplanned_phase"].as_str().unwrap());
    assert!(
        ins.findings
            .iter()
            .any(|f| f.contains("fp32 copy of the logits")),
        "{:?}",
        ins.findings
    );
    // The timeline keeps the peak: its highest point is the trace's highest requested memory,
    // and the run rises above the plan by about the unplanned tensor somewhere in the step.
    use lorafit::planning::inspect::TIMELINE_POINTS;
    assert!(ins.timeline.len() > 50 && ins.timeline.len() <= TIMELINE_POINTS);
    let top_measured = ins
        .timeline
        .iter()
        .map(|p| p.allocated_bytes)
        .max()
        .unwrap();
    assert_eq!(Some(top_measured), ins.peak_requested_bytes);
    assert!(ins.timeline.windows(2).all(|w| w[0].at < w[1].at));
    let top_planned = ins
        .planned_timeline
        .iter()
        .map(|p| p.allocated_bytes)
        .max()
        .unwrap();
    let gap = top_measured as f64 - top_planned as f64;
    assert!(
        (gap - want).abs() / want <= 0.10,
        "measured {top_measured} vs planned {top_planned}"
    );
    let phases: Vec<&str> = ins.phase_marks.iter().map(|m| m.phase).collect();
    for p in ["forward", "backward", "optimizer"] {
        assert!(phases.contains(&p), "{phases:?}");
    }
    assert!(ins.phase_marks.windows(2).all(|w| w[0].at <= w[1].at));
}

#[test]
fn the_cli_lists_it_under_unplanned() {
    let path = format!(
        "{}/tests/data/unplanned/logits-fp32.pickle.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    let args: Vec<String> = [
        "inspect",
        &path,
        "--model",
        "qwen2.5-0.5b",
        "--batch",
        "4",
        "--seq",
        "2048",
        "--gc",
        "--json",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        lorafit::cli::run(&args, &mut out, &mut err),
        0,
        "{}",
        String::from_utf8_lossy(&err)
    );
    let v: Value = serde_json::from_slice(&out).unwrap();
    for key in [
        "peak_allocated_bytes",
        "peak_reserved_bytes",
        "trace_truncated",
        "unplanned",
    ] {
        assert!(v.get(key).is_some(), "{key} missing");
    }
    assert_eq!(v["unplanned"][0]["phase"], "forward");
    // Garbage gets one clear message.
    std::fs::write(
        std::env::temp_dir().join("lorafit-not-a-snapshot"),
        b"\x80\x04garbage",
    )
    .unwrap();
    let bad = std::env::temp_dir().join("lorafit-not-a-snapshot");
    let args = vec!["inspect".to_string(), bad.to_string_lossy().to_string()];
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(lorafit::cli::run(&args, &mut out, &mut err), 2);
    assert!(String::from_utf8_lossy(&err).starts_with("error: "));
}

/// What the page's worker runs (`web::analyse::run`, the link in, progress texts out) gives the
/// CLI's inspection of the same file and configuration, and that inspection survives the trip
/// back to the page as JSON unchanged.
#[test]
fn the_pages_worker_gives_the_clis_inspection_and_it_survives_json() {
    use lorafit::planning::inspect::Inspection;
    let arch = find_model("qwen2.5-0.5b").unwrap().arch.clone();
    let bytes = data("unplanned/logits-fp32.pickle.gz");
    let cli = inspect(&bytes, Some((&arch, &qwen_settings()))).unwrap();
    let mut texts: Vec<String> = vec![];
    let page = lorafit::web::analyse::run(bytes, "?model=qwen2.5-0.5b&b=4&s=2048&gc=1", &mut |t| {
        texts.push(t)
    })
    .unwrap();
    assert_eq!(page, cli);
    assert!(page.planned.is_some());
    // Decompression then parsing, each rising to 100 %, then the replay and the comparison.
    let pct = |prefix: &str| -> Vec<f64> {
        texts
            .iter()
            .filter(|t| t.starts_with(prefix))
            .map(|t| t.rsplit(' ').nth(1).unwrap().parse().unwrap())
            .collect()
    };
    for step in ["decompressing", "parsing"] {
        let p = pct(step);
        assert!(!p.is_empty(), "{step}: {texts:?}");
        assert!(p.windows(2).all(|w| w[0] <= w[1]), "{step}: {p:?}");
    }
    assert_eq!(
        &texts[texts.len() - 2..],
        [
            "replaying the run through the allocator…",
            "comparing with the plan…"
        ]
    );
    // Back as JSON: equal, but for the last bit of a float's position (serde_json's default
    // float reading need not round-trip exactly; a chart cannot show the difference).
    let mut back: Inspection =
        serde_json::from_str(&serde_json::to_string(&page).unwrap()).unwrap();
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12;
    for (b, p) in back.timeline.iter_mut().zip(&page.timeline) {
        assert!(close(b.at, p.at));
        b.at = p.at;
    }
    for (b, p) in back.planned_timeline.iter_mut().zip(&page.planned_timeline) {
        assert!(close(b.at, p.at));
        b.at = p.at;
    }
    for (b, p) in back.phase_marks.iter_mut().zip(&page.phase_marks) {
        assert!(close(b.at, p.at));
        b.at = p.at;
    }
    assert_eq!(back, page);
    // Names outside their fixed sets are refused when read back.
    let json = serde_json::to_string(&page).unwrap();
    assert!(serde_json::from_str::<Inspection>(&json.replace("\"snapshot\"", "\"x\"")).is_err());
}
