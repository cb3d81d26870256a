//! Catalog invariants: enough real models and GPUs, every entry valid and sourced, bf16 facts.

use lorafit::formats::catalog;

/// Every entry of the catalog files cites where its numbers were read (the binaries carry the
/// numbers only, `build.rs`).
#[test]
fn every_catalog_entry_has_its_source() {
    for file in ["models", "gpus"] {
        let path = format!("{}/data/{file}.json", env!("CARGO_MANIFEST_DIR"));
        let entries: Vec<serde_json::Value> =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(!entries.is_empty(), "{path}");
        for e in &entries {
            let source = e["source"].as_str().unwrap_or("");
            assert!(
                !source.trim().is_empty(),
                "{path}: {} has no source",
                e["name"]
            );
        }
    }
}

/// The binaries read their copy of the catalog with the page's small JSON reader
/// (`formats::json`, no serde in the page's wasm); it must give exactly what serde reads from
/// `data/*.json`, entry for entry and field for field (aliases, nulls and defaults included).
#[test]
fn the_binaries_catalog_equals_serdes_reading_of_the_files() {
    let read = |file: &str| {
        std::fs::read_to_string(format!("{}/data/{file}.json", env!("CARGO_MANIFEST_DIR"))).unwrap()
    };
    let models: Vec<catalog::ModelEntry> = serde_json::from_str(&read("models")).unwrap();
    assert_eq!(catalog::models(), models.as_slice());
    let gpus: Vec<catalog::GpuEntry> = serde_json::from_str(&read("gpus")).unwrap();
    let gpus: Vec<_> = gpus
        .into_iter()
        .filter(|g| g.memory_bytes().is_some())
        .collect();
    assert_eq!(catalog::gpus(), gpus.as_slice());
}

#[test]
fn catalog_has_the_promised_breadth_and_every_entry_is_valid() {
    let models = catalog::models();
    assert!(models.len() >= 25, "{} models", models.len());
    let sizes: Vec<f64> = models
        .iter()
        .map(|m| m.arch.total_params() as f64 / 1e9)
        .collect();
    assert!(
        sizes.iter().any(|&b| b < 0.7) && sizes.iter().any(|&b| b > 70.0),
        "0.5B..72B range"
    );
    for m in models {
        m.arch
            .validate()
            .unwrap_or_else(|e| panic!("{}: {e}", m.arch.name));
    }
    for fam in [
        "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3",
    ] {
        assert!(
            models.iter().any(|m| m.arch.family.name() == fam),
            "no {fam} model"
        );
    }
    let gpus = catalog::gpus();
    assert!(gpus.len() >= 15, "{} gpus", gpus.len());
    for id in [
        "rtx3090",
        "rtx4090",
        "rtx5090",
        "a10g",
        "l4",
        "l40s",
        "t4",
        "v100-16",
        "v100-32",
        "a100-40",
        "a100-80",
        "h100-80",
        "h200",
        "rtx6000-ada",
        "m2-max",
    ] {
        assert!(catalog::find_gpu(id).is_ok(), "missing GPU {id}");
    }
}

#[test]
fn published_hardware_facts() {
    // MEMORY-FACTS: no bf16 on Turing/Volta; RTX 6000 Ada has 48 GB; V100 and RTX 5090 have 32 GB.
    for (id, bf16) in [
        ("t4", false),
        ("v100-16", false),
        ("a100-40", true),
        ("rtx4090", true),
        ("h100-80", true),
    ] {
        assert_eq!(catalog::find_gpu(id).unwrap().bf16, Some(bf16), "{id}");
    }
    assert_eq!(
        catalog::find_gpu("rtx6000-ada").unwrap().memory_gib,
        Some(48.0)
    );
    assert_eq!(catalog::find_gpu("v100-32").unwrap().memory_gib, Some(32.0));
    assert_eq!(catalog::find_gpu("rtx5090").unwrap().memory_gib, Some(32.0));
}

#[test]
fn unknown_names_suggest_close_ones() {
    let e = catalog::find_model("llama-2-7b").unwrap_err();
    assert!(e.contains("llama2-7b"), "{e}");
    let e = catalog::find_gpu("a100").unwrap_err();
    assert!(e.contains("a100-40") || e.contains("a100-80"), "{e}");
}

#[test]
fn content_security_policy_allows_only_what_the_app_needs() {
    let html = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("index.html"),
    )
    .unwrap();
    let csp = html
        .split("Content-Security-Policy\" content=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .expect("a CSP meta tag");
    for needed in [
        "default-src 'self'",
        "script-src 'self' 'wasm-unsafe-eval'",
        "connect-src 'self' https://huggingface.co",
        "object-src 'none'",
    ] {
        assert!(csp.contains(needed), "CSP lacks {needed}: {csp}");
    }
    for forbidden in ["'unsafe-inline'", " 'unsafe-eval'", " *", "data: ", "http:"] {
        assert!(!csp.contains(forbidden), "CSP allows {forbidden}: {csp}");
    }
    assert!(
        !html.contains("<script>") && !html.contains("<script type=\"module\">"),
        "index.html has an inline script"
    );
}
