//! The CLI run in-process: outputs, JSON shape, exit codes and one-line errors.

use lorafit::cli::run;

fn cli(args: &[&str]) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run(&args, &mut out, &mut err);
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

#[test]
fn plan_prints_breakdown_and_verdict() {
    let (code, out, _) = cli(&[
        "plan",
        "--model",
        "qwen2-7b",
        "--gpu",
        "a100-40",
        "--batch",
        "4",
        "--seq",
        "1024",
        "--rank",
        "64",
        "--targets",
        "q,v,o",
        "--gc",
    ]);
    assert_eq!(code, 0);
    for needle in [
        "peak allocated",
        "nvidia-smi",
        "verdict",
        "Frozen weights",
        "Logits and loss",
        "params × 2 B",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in\n{out}");
    }
}

#[test]
fn plan_json_matches_the_library() {
    let (code, out, _) = cli(&[
        "plan",
        "--model",
        "llama2-7b",
        "--gpu",
        "h100-80",
        "--seq",
        "2048",
        "--json",
    ]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let a = lorafit::catalog::find_model("llama2-7b")
        .unwrap()
        .arch
        .clone();
    let s = lorafit::model::Settings {
        seq: 2048,
        ..Default::default()
    };
    let p = lorafit::model::plan(&a, &s).unwrap();
    assert_eq!(
        v["plan"]["peak_allocated_bytes"].as_u64().unwrap() as u128,
        p.peak_allocated_bytes
    );
    assert!(["fits", "tight", "oom"].contains(&v["verdict"]["status"].as_str().unwrap()));
}

#[test]
fn estimate_reports_bad_lines_and_goes_on() {
    let dir = std::env::temp_dir().join(format!("lorafit-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("in.jsonl");
    std::fs::write(
        &f,
        concat!(
            r#"{"id": "ok", "model": "llama2-7b", "settings": {"batch": 1, "seq": 512}}"#, "\n",
            r#"{"id": "bad-model", "model": "llama-9000", "settings": {}}"#, "\n",
            "not json\n",
            r#"{"id": "zero-layers", "model": {"family": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 0, "num_attention_heads": 4, "vocab_size": 100}}"#, "\n",
        ),
    )
    .unwrap();
    let (code, out, _) = cli(&["estimate", "--jsonl", f.to_str().unwrap()]);
    assert_eq!(code, 1, "a failed line makes the exit status 1");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0]["peak_allocated_bytes"].as_u64().unwrap() > 10 << 30);
    assert_eq!(lines[0]["id"], "ok");
    assert!(lines[1]["error"].as_str().unwrap().contains("did you mean"));
    assert!(lines[2]["error"].as_str().is_some());
    assert!(lines[3]["error"]
        .as_str()
        .unwrap()
        .contains("num_hidden_layers"));
}

#[test]
fn bad_input_is_one_line_and_nonzero() {
    for args in [
        vec!["plan"],
        vec!["plan", "--model", "llama2-7b", "--batch", "-3"],
        vec!["plan", "--model", "llama2-7b", "--optimizer", "adamw9"],
        vec!["plan", "--model", "nope"],
        vec!["frobnicate"],
        vec!["plan", "--model", "llama2-7b", "--seq"],
    ] {
        let (code, out, err) = cli(&args);
        assert_ne!(code, 0, "{args:?}");
        assert!(out.is_empty(), "{args:?}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{err}");
    }
}

#[test]
fn lists_catalogs() {
    let (code, out, _) = cli(&["models"]);
    assert_eq!(code, 0);
    assert!(out.contains("qwen2.5-72b") && out.contains("gemma2-2b"));
    let (code, out, _) = cli(&["gpus"]);
    assert_eq!(code, 0);
    assert!(out.contains("h100-80") && out.contains("custom"));
}
