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
        // The frozen q, k, v, o projections of every layer, explained by their shape.
        "layers × per layer × hidden × q_dim × 2 B",
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
    let a = lorafit::formats::catalog::find_model("llama2-7b")
        .unwrap()
        .arch
        .clone();
    let s = lorafit::model::Settings {
        seq: 2048,
        ..Default::default()
    };
    let p = lorafit::model::plan_simulated(&a, &s).unwrap();
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
fn every_door_names_what_it_did_not_use() {
    // An estimate line: unknown settings (rsLoRA, not a setting of the table), unknown members of
    // the line and of its model numbers are listed in `ignored`, and the line is still planned.
    let f = tmp(
        "ignored.jsonl",
        concat!(
            r#"{"id": "rslora", "model": "llama2-7b", "settings": {"batch": 1, "seq": 512, "use_qalora": true, "lr": 1e-4}, "note": "x"}"#,
            "\n",
            r#"{"id": "plain", "model": "llama2-7b", "settings": {"batch": 1, "seq": 512}}"#,
            "\n",
            r#"{"id": "numbers", "model": {"family": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 100, "rope_theta": 10000.0}}"#,
            "\n",
        ),
    );
    let (code, out, _) = cli(&["estimate", "--jsonl", &f]);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[0]["ignored"],
        serde_json::json!(["note", "settings.lr", "settings.use_qalora"])
    );
    assert_eq!(lines[1]["ignored"], serde_json::json!([]));
    assert_eq!(lines[2]["ignored"], serde_json::json!(["model.rope_theta"]));
    // The unused keys change nothing: the rsLoRA line is planned as the plain one (rsLoRA only
    // scales the adapter's output).
    assert_eq!(
        lines[0]["peak_allocated_bytes"],
        lines[1]["peak_allocated_bytes"]
    );
    // A value a known key cannot take is an error naming the key; so is a setting the chosen
    // method has no use for (a fused cross-entropy under a preference trainer, which scores its
    // sequences through its own head), instead of a plan that drops it.
    let f = tmp(
        "bad-value.jsonl",
        concat!(
            r#"{"model": "llama2-7b", "settings": {"lora_dropout": "high"}}"#,
            "\n",
            r#"{"model": "llama2-7b", "settings": {"stage": "dpo", "fused_ce": true}}"#,
            "\n",
            r#"{"model": "llama2-7b", "settings": {"use_dora": false}}"#,
            "\n",
            r#"{"model": "llama2-7b", "settings": {"use_dora": true}}"#,
            "\n",
        ),
    );
    let (code, out, _) = cli(&["estimate", "--jsonl", &f]);
    assert_eq!(code, 1);
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        lines[0]["error"].as_str().unwrap().contains("lora_dropout"),
        "{out}"
    );
    assert!(
        lines[1]["error"].as_str().unwrap().contains("fused_ce"),
        "{out}"
    );
    assert!(
        lines[1]["error"]
            .as_str()
            .unwrap()
            .contains("replaces the SFT loss"),
        "{out}"
    );
    // On one GPU DoRA is planned, above plain LoRA (its fp32 weight copies with dropout).
    let lora = lines[2]["peak_allocated_bytes"]
        .as_u64()
        .expect("LoRA plans");
    let dora = lines[3]["peak_allocated_bytes"]
        .as_u64()
        .expect("DoRA plans");
    assert!(dora > lora + (10u64 << 30), "DoRA {dora} vs LoRA {lora}");
    let (code, _, err) = cli(&[
        "plan",
        "--model",
        "llama2-7b",
        "--stage",
        "dpo",
        "--fused-ce",
        "liger",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("fused_ce"), "{err}");

    // The CLI: an option the command does not use, or a stray argument, is refused by name.
    for (args, needle) in [
        (
            vec!["plan", "--model", "llama2-7b", "--format", "python"],
            "--format is not used by `lorafit plan`",
        ),
        (
            vec!["plan", "--model", "llama2-7b", "4096"],
            "\"4096\" (a file argument) is not used by `lorafit plan`",
        ),
        (
            vec!["fit", "--model", "llama2-7b", "--utilization", "0.5"],
            "--utilization is not used by `lorafit fit`",
        ),
        (
            vec![
                "export",
                "--format",
                "python",
                "--model",
                "llama2-7b",
                "--gpu",
                "h100-80",
            ],
            "--gpu is not used by `lorafit export`",
        ),
        (
            vec!["models", "--all"],
            "\"--all\" is not used by `lorafit models`",
        ),
    ] {
        let (code, out, err) = cli(&args);
        assert_eq!(code, 2, "{args:?}");
        assert!(out.is_empty(), "{args:?}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    // A config.json's keys that shape nothing are named on stderr and in --json.
    let config = tmp(
        "config-unused.json",
        r#"{"model_type":"qwen2","hidden_size":896,"intermediate_size":4864,"num_attention_heads":14,"num_hidden_layers":24,"num_key_value_heads":2,"vocab_size":151936,"tie_word_embeddings":true,"rope_theta":1000000.0,"sliding_window":32768}"#,
    );
    let (code, _, err) = cli(&["plan", "--config", &config]);
    assert_eq!(code, 0);
    assert!(
        err.contains("does not use: rope_theta, sliding_window"),
        "{err}"
    );
    let (code, out, _) = cli(&["plan", "--config", &config, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["ignored"],
        serde_json::json!(["rope_theta", "sliding_window"])
    );

    // A pickle that holds no snapshot is refused, with a non-zero exit.
    let empty = std::env::temp_dir().join(format!("lorafit-empty-{}.pickle", std::process::id()));
    std::fs::write(&empty, b"\x80\x04].").unwrap();
    let (code, _, err) = cli(&["inspect", empty.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("not a PyTorch memory snapshot"), "{err}");
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

fn tmp(name: &str, text: &str) -> String {
    let dir = std::env::temp_dir().join(format!("lorafit-cli2-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn fit_suggest_export_lengths_and_config_import() {
    let (code, out, _) = cli(&["fit", "--model", "llama2-7b", "--gpu", "rtx4090", "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let max_seq = v["max_seq"].as_u64().unwrap();
    let (_, fits, _) = cli(&[
        "plan",
        "--model",
        "llama2-7b",
        "--gpu",
        "rtx4090",
        "--seq",
        &max_seq.to_string(),
        "--json",
    ]);
    let (_, over, _) = cli(&[
        "plan",
        "--model",
        "llama2-7b",
        "--gpu",
        "rtx4090",
        "--seq",
        &(max_seq + 1).to_string(),
        "--json",
    ]);
    let status = |t: &str| {
        serde_json::from_str::<serde_json::Value>(t).unwrap()["verdict"]["status"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_ne!(status(&fits), "oom");
    assert_eq!(status(&over), "oom");
    assert!(v["smallest_gpu"].as_str().is_some());

    let (code, out, _) = cli(&[
        "suggest",
        "--model",
        "llama2-7b",
        "--gpu",
        "rtx4090",
        "--batch",
        "4",
        "--seq",
        "2048",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("gradient_checkpointing=True") && out.contains("empty_cache"),
        "{out}"
    );

    let (code, out, _) = cli(&[
        "export", "--format", "axolotl", "--model", "qwen2-7b", "--rank", "8",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("base_model: Qwen/Qwen2-7B-Instruct") && out.contains("lora_r: 8"),
        "{out}"
    );
    let (code, _, err) = cli(&["export", "--model", "qwen2-7b"]);
    assert_ne!(code, 0);
    assert!(err.contains("--format"));

    let lengths = tmp("lengths.txt", &"300\n".repeat(200));
    let (code, out, _) = cli(&[
        "lengths",
        &lengths,
        "--model",
        "llama2-7b",
        "--gpu",
        "a100-40",
        "--batch",
        "4",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("200 samples") && out.contains("every sample fits"),
        "{out}"
    );

    let cfg = tmp(
        "config.json",
        r#"{"model_type":"mistral","hidden_size":4096,"intermediate_size":14336,"num_hidden_layers":32,"num_attention_heads":32,"num_key_value_heads":8,"vocab_size":32000}"#,
    );
    let (code, out, _) = cli(&["plan", "--config", &cfg, "--json"]);
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["plan"]["params"]["base_params"].as_u64().unwrap(),
        7_241_732_096,
        "Mistral-7B has 7,241,732,096 parameters"
    );
    let bad = tmp(
        "bad.json",
        r#"{"model_type":"t5","is_encoder_decoder":true}"#,
    );
    let (code, _, err) = cli(&["plan", "--config", &bad]);
    assert_ne!(code, 0);
    assert!(err.contains("encoder-decoder"), "{err}");
}

#[test]
fn an_unknown_command_lists_every_command() {
    let (code, _, err) = cli(&["frobnicate"]);
    assert_eq!(code, 2);
    for command in [
        "plan", "fit", "suggest", "export", "lengths", "estimate", "models", "gpus",
    ] {
        assert!(err.contains(command), "{command} missing from: {err}");
    }
}

#[test]
fn settings_flags_come_from_the_table_and_report_their_flag() {
    let (_, help, _) = cli(&["--help"]);
    for f in lorafit::formats::fields::FIELDS {
        if let Some(flag) = f.flag {
            assert!(help.contains(flag), "{flag} missing from --help");
        }
    }
    let (code, _, err) = cli(&["plan", "--model", "llama2-7b", "--batch", "0"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--batch") && err.contains("between 1 and"),
        "{err}"
    );
    let (code, _, err) = cli(&["plan", "--model", "llama2-7b", "--no-such-flag"]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown option \"--no-such-flag\""), "{err}");
}

#[test]
fn a_mixture_of_experts_config_is_named_once_quoted() {
    let dir = std::env::temp_dir().join(format!("lorafit-moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.json");
    std::fs::write(
        &path,
        r#"{"model_type":"qwen2_moe","hidden_size":2048,"num_experts":60}"#,
    )
    .unwrap();
    let (code, _, err) = cli(&["plan", "--config", path.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("\"qwen2_moe\" is a mixture-of-experts model"),
        "{err}"
    );
    assert!(!err.contains("\"\""), "doubled quotes: {err}");
    // A supported MoE family plans from its config.json, experts listed in the breakdown.
    std::fs::write(
        &path,
        r#"{"model_type":"qwen3_moe","hidden_size":2048,"intermediate_size":6144,"num_hidden_layers":48,
            "num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,"vocab_size":151936,"num_experts":128,
            "num_experts_per_tok":8,"moe_intermediate_size":768,"norm_topk_prob":true}"#,
    )
    .unwrap();
    // (peft maps the default all-linear's MLP names onto the experts: no dropout there)
    let (code, out, err) = cli(&[
        "plan",
        "--config",
        path.to_str().unwrap(),
        "--dropout",
        "0",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let experts = v["plan"]["breakdown"]
        .as_array()
        .or_else(|| v["breakdown"].as_array())
        .expect("breakdown")
        .iter()
        .find(|c| c["key"] == "frozen_experts")
        .expect("frozen_experts component");
    assert!(experts["bytes"].as_u64().unwrap() > 50 << 30);
}

#[test]
fn the_lengths_command_states_when_the_first_oom_comes() {
    let dir = std::env::temp_dir().join(format!("lorafit-len-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("lengths.txt");
    // 2,000 samples, one far too long for a 24 GiB card.
    let mut text = "300\n".repeat(1999);
    text.push_str("60000\n");
    std::fs::write(&path, text).unwrap();
    let (code, out, err) = cli(&[
        "lengths",
        path.to_str().unwrap(),
        "--model",
        "llama2-7b",
        "--gpu",
        "rtx4090",
        "--batch",
        "4",
        "--quant",
        "nf4",
        "--gc",
    ]);
    assert_eq!(code, 0, "{err}");
    // Uniform over the 500 micro-batches of the epoch: 250.5 on average, 20 % by the 100th.
    assert!(
        out.contains("1 of 2000 samples (0.05 %) is longer than fits")
            && out.contains("micro-batch 251 of 500 on average")
            && out.contains("20 % within the first 100"),
        "{out}"
    );
}

/// `--usd-per-gpu-hour` costs the epoch at the user's rate (plan and suggest), says so, and is
/// refused where nothing is costed or when it is no rate.
#[test]
fn an_epoch_is_costed_at_the_given_rate() {
    let base = ["plan", "--model", "llama3-8b", "--gpu", "h100-80", "--json"];
    let time = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let (code, out, err) = cli(&args);
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["time"].clone()
    };
    let catalog = time(&[]);
    let own = time(&["--usd-per-gpu-hour", "2.5"]);
    assert_eq!(own["usd_per_gpu_hour"], 2.5);
    assert_ne!(catalog["usd_per_gpu_hour"], 2.5);
    assert_eq!(own["seconds_per_epoch"], catalog["seconds_per_epoch"]);
    let hours = own["seconds_per_epoch"].as_f64().unwrap() / 3600.0;
    assert!((own["usd_per_epoch"].as_f64().unwrap() - hours * 2.5).abs() < 1e-9);
    let (code, out, _) = cli(&[
        "plan",
        "--model",
        "llama3-8b",
        "--gpu",
        "h100-80",
        "--usd-per-gpu-hour",
        "2.5",
    ]);
    assert_eq!(code, 0);
    assert!(
        out.contains("at $2.5/GPU-hour (--usd-per-gpu-hour)"),
        "{out}"
    );
    let (code, out, _) = cli(&[
        "suggest",
        "--model",
        "llama3-70b",
        "--gpu",
        "h100-80",
        "--usd-per-gpu-hour",
        "0",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("≈ $0.00 per epoch"), "{out}");
    for bad in [
        vec!["plan", "--model", "llama3-8b", "--usd-per-gpu-hour", "-1"],
        vec![
            "plan",
            "--model",
            "llama3-8b",
            "--usd-per-gpu-hour",
            "cheap",
        ],
        vec!["fit", "--model", "llama3-8b", "--usd-per-gpu-hour", "2"],
    ] {
        let (code, _, err) = cli(&bad);
        assert_ne!(code, 0);
        assert!(err.contains("--usd-per-gpu-hour"), "{err}");
    }
}
