//! The import rules of ARCHITECTURE.md, checked on the source: which part of the crate may use
//! which, that the model names no web / GPU crate, and that the model's files import each other
//! without a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Top-level parts of the crate a file mentions as `crate::PART` (in code, not in `//` comments).
fn crate_parts_used(text: &str) -> BTreeSet<String> {
    let mut parts = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let part: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            parts.insert(part);
        }
    }
    parts
}

/// (part, parts it may import besides itself). `web::state` and `web::link` are allowed to the GPU
/// page only, checked separately below.
const RULES: &[(&str, &[&str])] = &[
    ("model", &[]),
    ("planning", &["model", "formats"]),
    ("formats", &["model", "planning"]),
    ("web", &["model", "planning", "formats"]),
    ("gpu", &["model", "planning", "formats", "web"]),
    ("cli", &["model", "planning", "formats"]),
    ("fuzz", &["model", "planning", "formats", "web"]),
];

#[test]
fn each_part_imports_only_what_its_rules_allow() {
    for (part, allowed) in RULES {
        let dir = src().join(part);
        let files = if dir.is_dir() {
            rust_files(&dir)
        } else {
            vec![src().join(format!("{part}.rs"))]
        };
        assert!(!files.is_empty(), "no source for {part}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for used in crate_parts_used(&text) {
                assert!(
                    used == *part || allowed.contains(&used.as_str()),
                    "{} ({part}) imports crate::{used}; {part} may import only {allowed:?}",
                    file.display()
                );
            }
        }
    }
}

#[test]
fn planning_uses_only_the_catalog_of_formats_and_gpu_only_the_page_state_and_language_of_web() {
    for (part, foreign, allowed) in [
        ("planning", "formats", "catalog|snapshot"),
        ("gpu", "web", "link|state|i18n|lang"),
    ] {
        for file in rust_files(&src().join(part)) {
            let text = std::fs::read_to_string(&file).unwrap();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                if let Some(i) = line.find(&format!("crate::{foreign}::")) {
                    let tail = &line[i + foreign.len() + "crate::::".len()..];
                    assert!(
                        allowed.split('|').any(|a| tail.starts_with(a)),
                        "{}: {part} may use only {foreign}::{allowed}: {line}",
                        file.display()
                    );
                }
            }
        }
    }
}

#[test]
fn the_model_names_no_web_or_gpu_crate() {
    for path in rust_files(&src().join("model")) {
        let text = std::fs::read_to_string(&path).unwrap();
        for banned in ["leptos", "web_sys", "wasm_bindgen", "wgpu", "js_sys"] {
            assert!(
                !text.contains(banned),
                "{} mentions {banned}",
                path.display()
            );
        }
    }
}

/// The modules of a part (`super::X` / `crate::PART::X` imports, `//` comments and unit tests
/// left out) and the modules of the same part each one imports.
fn module_graph(part: &str) -> BTreeMap<String, BTreeSet<String>> {
    let dir = src().join(part);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in rust_files(&dir) {
        let rel = path
            .strip_prefix(&dir)
            .unwrap()
            .to_string_lossy()
            .to_string();
        let module = rel
            .trim_end_matches(".rs")
            .trim_end_matches("/mod")
            .split('/')
            .next()
            .unwrap()
            .to_string();
        if module == "mod" {
            continue; // the folder's re-exports
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let deps = graph.entry(module.clone()).or_default();
        // A file's unit tests (its `#[cfg(test)]` module, last by convention) may use what the
        // module itself must not.
        for line in text.lines().take_while(|l| l.trim() != "#[cfg(test)]") {
            let code = line.split("//").next().unwrap_or("");
            for prefix in ["super::".to_string(), format!("crate::{part}::")] {
                let mut rest = code;
                while let Some(i) = rest.find(&prefix) {
                    rest = &rest[i + prefix.len()..];
                    let dep: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    let is_module =
                        dir.join(format!("{dep}.rs")).exists() || dir.join(&dep).is_dir();
                    if is_module && dep != module {
                        deps.insert(dep);
                    }
                }
            }
        }
    }
    graph
}

/// The first import circle of a module graph, if any.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<String> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<String> {
        if done.contains(n) {
            return None;
        }
        if let Some(i) = stack.iter().position(|s| s == n) {
            return Some(format!("{} -> {n}", stack[i..].join(" -> ")));
        }
        stack.push(n.to_string());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, g, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut vec![], &mut done))
}

/// The model's modules and the page's modules each form no import circle (the page: its
/// shared setup below the page, the panels and the sections; the leaf helpers below all).
#[test]
fn the_model_and_the_page_have_no_import_circle() {
    for (part, at_least) in [("model", 8), ("web", 12)] {
        let graph = module_graph(part);
        assert!(
            graph.len() >= at_least,
            "{part} modules not found: {graph:?}"
        );
        if let Some(c) = circle(&graph) {
            panic!("import circle in src/{part}: {c}");
        }
    }
    // The check sees a circle where there is one.
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("a".into());
    assert_eq!(circle(&g).as_deref(), Some("a -> b -> a"));
}

/// Nothing imports the page (`web::app`) or the CLI: they are the crate's two faces, reached
/// only from the binaries' entry points (`src/main.rs`, and `src/bin/lorafit-full.rs`: the
/// same page with every op of the step program).
#[test]
fn nothing_imports_the_page_or_the_cli() {
    for path in rust_files(&src()) {
        let rel = path
            .strip_prefix(src())
            .unwrap()
            .to_string_lossy()
            .to_string();
        if rel == "main.rs"
            || rel == "bin/lorafit-full.rs"
            || rel.starts_with("cli/")
            || rel == "web/app.rs"
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            let web_file = rel.starts_with("web/");
            let imports_app = code.contains("crate::web::app")
                || code.contains("lorafit::web::app")
                || (web_file && (code.contains("super::app::") || code.contains("super::app;")));
            let imports_cli = code.contains("crate::cli") || code.contains("lorafit::cli");
            assert!(
                !imports_app && !imports_cli,
                "{rel} imports the page or the CLI: {line}"
            );
        }
    }
}

/// ARCHITECTURE.md names only files and folders that exist: every backticked `….rs` is the end
/// of a path in the repository, every backticked `name/` a folder in it (it once cited modules
/// long gone).
#[test]
fn architecture_md_cites_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut files: Vec<String> = vec![];
    let mut dirs: Vec<String> = vec![];
    for top in ["src", "tests", "benches", "examples"] {
        let mut stack = vec![root.join(top)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().to_string();
                if p.is_dir() {
                    dirs.push(format!("{rel}/"));
                    stack.push(p);
                } else {
                    files.push(rel);
                }
            }
        }
    }
    files.push("build.rs".into());
    let mut cited = 0;
    for (i, part) in doc.split('`').enumerate() {
        // Odd parts are inside backticks.
        // Build and test outputs (`dist/…`, `test-artifacts/`) are not in the repository.
        if i % 2 == 0
            || part.contains(' ')
            || part.contains("::")
            || part.starts_with("dist/")
            || part == "test-artifacts/"
        {
            continue;
        }
        let ends = |path: &str| path == part || path.ends_with(&format!("/{part}"));
        if part.ends_with(".rs") {
            cited += 1;
            assert!(
                files.iter().any(|f| ends(f)),
                "ARCHITECTURE.md cites `{part}`, which does not exist"
            );
        } else if part.ends_with('/') && part.len() > 1 && !part.starts_with('/') {
            cited += 1;
            assert!(
                dirs.iter().any(|d| ends(d)),
                "ARCHITECTURE.md cites `{part}`, which does not exist"
            );
        }
    }
    assert!(cited > 50, "only {cited} paths found in ARCHITECTURE.md");
}

/// The planner page's first bundle leaves out the page labels of the settings it never draws
/// (`beyond_first_screen!` in `src/formats/fields.rs`): exactly the settings outside the first
/// screen (`web::layout::ESSENTIAL`) and the embed (`EMBED`). Drawn there with an empty label, a
/// setting would be nameless; left in, its label would only weigh on the first visit.
#[test]
fn the_first_bundle_leaves_out_exactly_the_labels_it_never_draws() {
    use lorafit::web::layout::{EMBED, ESSENTIAL};
    let text = std::fs::read_to_string(src().join("formats/fields.rs")).expect("fields.rs");
    let mut seen = 0;
    for block in text.split("    Field {\n").skip(1) {
        let name = block
            .split("name: \"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .expect("a field's name");
        let label = block
            .lines()
            .find(|l| l.trim_start().starts_with("label:"))
            .expect("a field's label");
        let drawn = ESSENTIAL.contains(&name) || EMBED.contains(&name);
        assert_eq!(
            !label.contains("beyond_first_screen!("),
            drawn,
            "{name}: {label}"
        );
        seen += 1;
    }
    assert_eq!(
        seen,
        lorafit::formats::fields::FIELDS.len(),
        "every field read"
    );
}
