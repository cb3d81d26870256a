//! The model against a real GPU: every row of `tests/data/reference/gpu_probe_h200.jsonl`, two
//! LoRA training steps run for real on an NVIDIA H200 (torch 2.11, transformers 5.17, peft 0.21;
//! the harness's `gpu_probe.py`; the last five rows, eager attention, were planned and written
//! down before they were run), planned with the caching allocator simulated and compared with
//! what PyTorch and the driver reported: `max_memory_allocated`, `max_memory_reserved`, and
//! nvidia-smi's memory for the process (NVML's used memory at the end less the same reading
//! before the process touched CUDA — NVML's v1 figure counts the driver's own reservation, about
//! 0.6 GiB on this card, which nvidia-smi's table does not show).

use std::path::PathBuf;

use lorafit::formats::catalog::resolve_model;
use lorafit::formats::fields::settings_from_json;
use lorafit::model::plan::reserve::CUDA_CONTEXT_BYTES;
use lorafit::model::plan_simulated;
use serde_json::Value;

const MIB: f64 = 1024.0 * 1024.0;
/// Rows whose reserved figure (and so nvidia-smi) the simulation misses, and by how much (the
/// range the test holds it to, %). Both are eager attention under gradient checkpointing on
/// Llama-2-7B. Replaying the allocation sequence recorded on the GPU itself
/// (`torch.cuda.memory._snapshot()`) through lorafit's allocator port gives the plan's figure,
/// not the GPU's (25.34 GB against 27.49 for the first): the sequence is right, so the port or
/// the state the model's loading leaves differs there; the same replay of Qwen2-7B's eager step
/// gives the GPU's figure to the byte.
const KNOWN_GAPS: &[(&str, f64, f64)] = &[
    ("h200-llama2-7b_bf16_s4096_b1_eager_gc", -9.0, -6.0),
    ("h200-llama2-7b_fp16_s1024_b8_eager_gc", -6.0, -3.0),
];
/// Rows in the committed file; a change to the data must change this number too.
const EXPECTED_ROWS: usize = 20;

struct Row {
    id: String,
    expandable: bool,
    /// (planned, measured) bytes.
    allocated: (f64, f64),
    reserved: (f64, f64),
    smi: (f64, f64),
    /// nvidia-smi's process memory beyond `max_memory_reserved`: context and workspaces.
    outside_measured: f64,
}

fn rows() -> Vec<Row> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference/gpu_probe_h200.jsonl");
    let text = std::fs::read_to_string(&path).expect("probe readings");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("row is JSON");
            let id = v["id"].as_str().expect("id").to_string();
            let arch = resolve_model(&v["model"]).expect("catalog model");
            let s = settings_from_json(&v["settings"]).expect("valid settings");
            let p = plan_simulated(&arch, &s).expect("plans");
            assert!(p.reserve_simulated, "{id}: allocator not simulated");
            let m = &v["measured"];
            let num = |k: &str| m[k].as_f64().unwrap_or_else(|| panic!("{id}: {k}"));
            let smi = (num("nvml_used_mib_end") - num("nvml_used_mib_idle")) * MIB;
            Row {
                expandable: s.alloc_conf.contains("expandable_segments:True"),
                allocated: (p.peak_allocated_bytes as f64, num("max_allocated")),
                reserved: (p.peak_reserved_bytes as f64, num("max_reserved")),
                smi: (p.nvidia_smi_bytes as f64, smi),
                outside_measured: smi - num("max_reserved"),
                id,
            }
        })
        .collect()
}

fn err((got, want): (f64, f64)) -> f64 {
    (got - want) / want * 100.0
}

#[test]
fn plans_match_a_real_h200() {
    let rows = rows();
    assert_eq!(rows.len(), EXPECTED_ROWS, "gpu_probe_h200.jsonl row count");
    println!(
        "{:<56} {:>8} {:>8} {:>8}",
        "row", "alloc %", "res %", "smi %"
    );
    for r in &rows {
        println!(
            "{:<56} {:>+8.2} {:>+8.2} {:>+8.2}",
            r.id,
            err(r.allocated),
            err(r.reserved),
            err(r.smi)
        );
    }
    for r in &rows {
        let e = err(r.allocated);
        assert!(e.abs() <= 3.0, "{}: allocated {e:+.2} %", r.id);
        let (res, smi) = (err(r.reserved), err(r.smi));
        if let Some(&(_, lo, hi)) = KNOWN_GAPS.iter().find(|g| g.0 == r.id) {
            assert!(
                (lo..hi).contains(&res),
                "{}: reserved {res:+.2} % left its known range {lo}..{hi} %: update KNOWN_GAPS",
                r.id
            );
            continue;
        }
        assert!(res.abs() <= 3.0, "{}: reserved {res:+.2} %", r.id);
        // nvidia-smi: the context allowance is a round 1 GiB, 0.25 GiB above what this card
        // showed.
        assert!(smi.abs() <= 3.0, "{}: nvidia-smi {smi:+.2} %", r.id);
    }
    assert!(rows.iter().any(|r| r.expandable), "expandable rows present");
}

/// The expandable-segments fix is offered exactly where the real H200 run with
/// `expandable_segments:True` reserved less than the same run without it (one pair of four).
#[test]
fn expandable_segments_is_offered_where_it_saved_on_the_h200() {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference/gpu_probe_h200.jsonl");
    let text = std::fs::read_to_string(&path).expect("probe readings");
    let rows: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let mut pairs = 0;
    let mut offered = 0;
    for with in rows
        .iter()
        .filter(|r| r["settings"]["alloc_conf"].is_string())
    {
        let mut plain = with["settings"].clone();
        plain.as_object_mut().unwrap().remove("alloc_conf");
        let without = rows
            .iter()
            .find(|r| r["model"] == with["model"] && r["settings"] == plain)
            .expect("the same run without expandable segments");
        let saved = without["measured"]["max_reserved"].as_u64().unwrap()
            > with["measured"]["max_reserved"].as_u64().unwrap();
        let arch = resolve_model(&with["model"]).unwrap();
        let s = settings_from_json(&plain).unwrap();
        let fix = lorafit::planning::fixes::allocator_fix(&arch, &s, 140 << 30);
        assert_eq!(fix.is_some(), saved, "{}", with["id"]);
        if let Some(f) = fix {
            assert!(f.saved_bytes > 0 && f.reserved_after_bytes < f.reserved_before_bytes);
            offered += 1;
        }
        pairs += 1;
    }
    assert_eq!((pairs, offered), (4, 1));
}

/// The context allowance covers what the driver showed beyond the allocator on every run
/// (context, kernel images, cuBLAS workspaces: 767 MiB on this card and software), with no more
/// than 0.5 GiB to spare.
#[test]
fn context_allowance_covers_the_real_context() {
    for r in rows() {
        let allowance = CUDA_CONTEXT_BYTES as f64;
        assert!(
            r.outside_measured <= allowance && allowance - r.outside_measured <= 512.0 * MIB,
            "{}: {:.0} MiB outside the allocator vs {:.0} MiB allowed",
            r.id,
            r.outside_measured / MIB,
            allowance / MIB
        );
    }
}
