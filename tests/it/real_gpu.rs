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

/// The committed probe rows, as JSON.
fn probe_rows() -> Vec<Value> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference/gpu_probe_h200.jsonl");
    let text = std::fs::read_to_string(&path).expect("probe readings");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("row is JSON"))
        .collect()
}

fn rows() -> Vec<Row> {
    probe_rows()
        .into_iter()
        .map(|v| {
            let id = v["id"].as_str().expect("id").to_string();
            let arch = resolve_model(&v["model"]).expect("catalog model").value;
            let s = settings_from_json(&v["settings"])
                .expect("valid settings")
                .value;
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
    // Tighter than the project's ±3 %: these are what a GPU reported, and the plan met them.
    for r in &rows {
        let (a, res, smi) = (err(r.allocated), err(r.reserved), err(r.smi));
        assert!(a.abs() <= 1.0, "{}: allocated {a:+.2} %", r.id);
        assert!(res.abs() <= 2.0, "{}: reserved {res:+.2} %", r.id);
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
    let rows = probe_rows();
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
        let arch = resolve_model(&with["model"]).unwrap().value;
        let s = settings_from_json(&plain).unwrap().value;
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

/// The allocator port against the GPU's own allocation sequence: two eager steps recorded on the
/// H200 with `torch.cuda.memory._snapshot()` (`tests/data/reference/h200_sequences/`: every
/// alloc and completed free from the first forward on), replayed after the model's loading as
/// lorafit generates it: the GPU's `max_memory_reserved` to the byte, and the generated
/// sequence's figure. Only with segments placed below the previous ones
/// ([`AddressOrder::Falling`](lorafit::model::allocator::AddressOrder)): with rising addresses
/// — the harness's fake `cudaMalloc`, and PyTorch's own allocator replayed there — the Llama-2
/// step reserves 7.8 % less (25.34 GB against 27.49), because the allocator breaks ties
/// between equal-size free blocks by address. Loading leaves nothing cached either way (a run
/// with `empty_cache()` before the steps reserved the same).
#[test]
fn allocator_port_replays_steps_recorded_on_the_h200() {
    use flate2::read::GzDecoder;
    use lorafit::model::allocator::AllocConf;
    use lorafit::model::steptrace::{generate, replay, Event, Label, StepPhase, What};
    use std::io::Read;
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/reference");
    let probe = probe_rows();
    for (file, id) in [
        (
            "qwen2-7b_bf16_s2048_b1_eager_gc",
            "h200-qwen2-7b_bf16_s2048_b1_eager_gc",
        ),
        (
            "llama2-7b_bf16_s4096_b1_eager_gc",
            "h200-llama2-7b_bf16_s4096_b1_eager_gc",
        ),
    ] {
        let row = probe.iter().find(|r| r["id"] == id).expect("probe row");
        let arch = resolve_model(&row["model"]).expect("model").value;
        let s = settings_from_json(&row["settings"])
            .expect("settings")
            .value;
        let generated = generate(&arch, &s).expect("generates");
        let start = generated
            .phases
            .iter()
            .find(|p| p.2 == StepPhase::Forward)
            .expect("forward")
            .0;
        let mut text = String::new();
        let f = std::fs::File::open(dir.join(format!("h200_sequences/{file}.events.txt.gz")))
            .expect("recorded sequence");
        GzDecoder::new(f)
            .read_to_string(&mut text)
            .expect("gzip text");
        let mut t = generated.clone();
        t.events.truncate(start);
        t.phases.retain(|p| p.0 < start);
        t.phases.push((start, 1, StepPhase::Forward));
        let base = t.labels.len() as u32;
        for line in text.lines() {
            let mut w = line.split(' ');
            let (kind, n) = (w.next(), w.next().and_then(|x| x.parse::<u32>().ok()));
            let id = base + n.expect("event id");
            match kind {
                Some("a") => {
                    let bytes = w.next().and_then(|x| x.parse().ok()).expect("bytes");
                    while t.labels.len() <= id as usize {
                        t.labels.push(Label::new(What::Grad, None));
                    }
                    t.events.push(Event::Alloc {
                        id,
                        bytes,
                        stream: 0,
                    });
                }
                Some("f") => t.events.push(Event::Free { id }),
                _ => panic!("bad line {line:?}"),
            }
        }
        let conf = AllocConf::default();
        let recorded = replay(&t, &conf).peak_reserved as f64;
        let gpu = row["measured"]["max_reserved"]
            .as_f64()
            .expect("max_reserved");
        let planned = replay(&generated, &conf).peak_reserved as f64;
        let e = (recorded / gpu - 1.0) * 100.0;
        let same = (recorded / planned - 1.0) * 100.0;
        println!("{id}: recorded sequence through the port {e:+.3} % vs the GPU, {same:+.3} % vs the generated one");
        assert!(e.abs() <= 0.001, "{id}: {e:+.3} %");
        assert!(
            same.abs() <= 0.1,
            "{id}: {same:+.3} % from the generated sequence"
        );
        let mut rising = t.clone();
        rising.device = lorafit::model::steptrace::Device::Emulated;
        let r = (replay(&rising, &conf).peak_reserved as f64 / gpu - 1.0) * 100.0;
        println!("{id}: the same with rising segment addresses {r:+.3} %");
    }
}
