//! Dumps the allocation sequence `model::steptrace` generates for one case of a cases file, in
//! the form the recordings use (`["a", id, bytes, phase, step]`, `["f", id]`), with each storage's
//! label, to compare with a recorded `*.events.json.gz`:
//!     cargo run --example steptrace_dump -- tests/data/reference/moe/cases.jsonl CASE_ID > gen.json
//! A third argument `emulated` runs the step on the harness's emulated device (its dropout
//! kernel's order), as the two-layer recordings were made; a fourth, `eval` or `merge`, runs
//! that job phase after the training steps (`steptrace::generate_job`).

use lorafit::formats::catalog::resolve_model;
use lorafit::formats::fields::settings_from_json;
use lorafit::model::steptrace::{generate_exact_on, generate_job, After, Device, Event};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(id)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: steptrace_dump CASES.jsonl CASE_ID");
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(path).expect("cases file");
    let case: serde_json::Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|v| v["id"] == id.as_str())
        .expect("case id in the file");
    let arch = resolve_model(&case["model"]).expect("model").value;
    let s = settings_from_json(&case["settings"])
        .expect("settings")
        .value;
    let device = match args.get(3).map(String::as_str) {
        Some("emulated") => Device::Emulated,
        _ => Device::Cuda,
    };
    let t = match args.get(4).map(String::as_str) {
        Some("eval") => generate_job(&arch, &s, device, After::Eval),
        Some("merge") => generate_job(&arch, &s, device, After::Merge),
        _ => generate_exact_on(&arch, &s, device),
    }
    .expect("trace");
    let mut out = vec![];
    let phases = lorafit::model::steptrace::anatomy::event_phases(&t);
    for (e, (step, p)) in t.events.iter().zip(phases) {
        out.push(match *e {
            Event::Alloc { id, bytes, stream } => {
                let l = t.labels[id as usize];
                serde_json::json!([
                    "a",
                    id,
                    bytes,
                    p.name(),
                    step,
                    l.what.name(),
                    l.layer,
                    stream
                ])
            }
            Event::Free { id } => serde_json::json!(["f", id]),
        });
    }
    let sim = lorafit::model::steptrace::replay(&t, &Default::default());
    eprintln!(
        "peak live {} B, {} events; caching allocator: max allocated {} B, max reserved {} B",
        t.peak_live_bytes,
        t.events.len(),
        sim.peak_allocated,
        sim.peak_reserved
    );
    println!("{}", serde_json::Value::Array(out));
}
