//! The catalog (`data/models.json`, `data/gpus.json`) as the binaries carry it: the same entries
//! without their citations (`source`), caveats (`note`) and whitespace. The citations and
//! caveats stay in `data/` for people (`tests/it/catalog.rs` checks every entry has a
//! citation); the binaries — the page's wasm among them — need the numbers only.

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for name in ["models", "gpus"] {
        let path = format!("data/{name}.json");
        println!("cargo:rerun-if-changed={path}");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut entries: Vec<serde_json::Map<String, serde_json::Value>> =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        for entry in &mut entries {
            entry.remove("source");
            entry.remove("note");
        }
        let compact = serde_json::to_string(&entries).expect("JSON values serialize");
        std::fs::write(out.join(format!("{name}.json")), compact)
            .unwrap_or_else(|e| panic!("{name}.json: {e}"));
    }
    println!("cargo:rerun-if-changed=build.rs");
}
