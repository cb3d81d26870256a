//! The step's live peak from two short runs (`steptrace::periodic`) against the full run: equal
//! to the byte on every measured case and on every catalog model under every option.

use lorafit::formats::catalog::{self, resolve_model};
use lorafit::model::steptrace::periodic::{live_peak, How, Short};
use lorafit::model::steptrace::{generate_on, Device};
use lorafit::model::{
    plan, plan_simulated, AttnImpl, Dtype, ExpertParam, Optimizer, Quant, Settings, Target,
};
use serde_json::Value;

fn data(path: &str) -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/").to_string() + path)
        .expect("test data")
}

fn check(name: &str, a: &lorafit::model::Architecture, s: &Settings, device: Device) -> How {
    let want = generate_on(a, s, device)
        .unwrap_or_else(|e| panic!("{name}: {e}"))
        .peak_live_bytes;
    let (got, how) = live_peak(a, s, device).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(got, want, "{name}: live peak from short runs ({how:?})");
    if how == How::Extrapolated {
        // The quick plan reads these: every moment's live storages add up (no fall back to
        // the full run).
        let short = Short::run(a, s, device).unwrap();
        let m = &short.moments;
        for mo in std::iter::once(&m.peak).chain(&m.phases) {
            assert!(
                short.live_at(mo.event, mo.bytes).is_some(),
                "{name}: {mo:?}"
            );
        }
    }
    same_allocated(name, a, s);
    how
}

/// The quick plan's allocated figures (the program's short runs extrapolated) are the settled
/// plan's (the full run), figure by figure: peak, its phase and moment, breakdown, every term
/// with its formula, each phase's highest moment, the memory between steps.
fn same_allocated(name: &str, a: &lorafit::model::Architecture, s: &Settings) {
    let quick = plan(a, s).unwrap_or_else(|e| panic!("{name}: {e}"));
    let full = plan_simulated(a, s).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        quick.peak_allocated_bytes, full.peak_allocated_bytes,
        "{name}: peak"
    );
    assert_eq!(quick.peak_moment, full.peak_moment, "{name}: moment");
    assert_eq!(
        quick.steady_state_bytes, full.steady_state_bytes,
        "{name}: steady"
    );
    assert_eq!(quick.breakdown, full.breakdown, "{name}: breakdown");
    assert_eq!(quick.terms, full.terms, "{name}: terms");
    assert_eq!(quick.phases, full.phases, "{name}: phases");
    assert!(
        !quick.reserve_simulated,
        "{name}: the quick plan's reserve is the allowance"
    );
}

#[test]
fn the_short_runs_give_the_full_runs_peak_on_every_measured_case() {
    let mut hows = vec![];
    for file in [
        "tests/data/reference/cases.jsonl",
        "tests/data/reference/moe/cases.jsonl",
        "tests/data/reference/methods/cases.jsonl",
    ] {
        for line in data(file).lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).expect("JSON");
            if v["method"] == "real-cpu" {
                continue;
            }
            let id = v["id"].as_str().unwrap_or("?").to_string();
            let a = resolve_model(&v["model"]).expect("model").value;
            let s = crate::harness_settings(&v["settings"]);
            if generate_on(&a, &s, Device::Emulated).is_err() {
                continue;
            }
            hows.push((id.clone(), check(&id, &a, &s, Device::Emulated)));
        }
    }
    let unaligned: Vec<&String> = hows
        .iter()
        .filter(|h| h.1 == How::Unaligned)
        .map(|h| &h.0)
        .collect();
    let short = hows.iter().filter(|h| h.1 == How::Extrapolated).count();
    println!("{short} of {} measured cases from short runs", hows.len());
    assert!(unaligned.is_empty(), "not aligned: {unaligned:?}");
    assert!(
        short * 2 > hows.len(),
        "only {short} of {} from short runs",
        hows.len()
    );
}

#[test]
fn the_short_runs_give_the_full_runs_peak_on_the_catalog() {
    let base = Settings {
        batch: 2,
        seq: 1024,
        ..Settings::default()
    };
    let variants: Vec<(&str, Settings)> = vec![
        ("default", base.clone()),
        (
            "gc",
            Settings {
                grad_ckpt: true,
                ..base.clone()
            },
        ),
        (
            "nf4 gc",
            Settings {
                quant: Some(Quant::Nf4),
                grad_ckpt: true,
                ..base.clone()
            },
        ),
        (
            "eager",
            Settings {
                attn_impl: AttnImpl::Eager,
                seq: 600,
                ..base.clone()
            },
        ),
        (
            "fp32 autocast",
            Settings {
                dtype: Dtype::Fp32,
                autocast: Some(Dtype::Bf16),
                ..base.clone()
            },
        ),
        (
            "q,v no dropout",
            Settings {
                targets: vec![Target::Q, Target::V],
                lora_dropout: 0.0,
                ..base.clone()
            },
        ),
        (
            "adamw foreach",
            Settings {
                optimizer: Optimizer::AdamwTorchForeach,
                ..base.clone()
            },
        ),
        (
            "adafactor",
            Settings {
                optimizer: Optimizer::Adafactor,
                ..base.clone()
            },
        ),
        (
            "dora",
            Settings {
                use_dora: true,
                ..base.clone()
            },
        ),
        (
            "full gc",
            Settings {
                finetuning_type: lorafit::model::FinetuningType::Full,
                grad_ckpt: true,
                ..base.clone()
            },
        ),
        (
            "freeze 2",
            Settings {
                finetuning_type: lorafit::model::FinetuningType::Freeze,
                ..base.clone()
            },
        ),
        (
            "expert lora",
            Settings {
                target_parameters: vec![ExpertParam::GateUp, ExpertParam::Down],
                lora_dropout: 0.0,
                ..base.clone()
            },
        ),
    ];
    let (mut short, mut n, mut unaligned) = (0, 0, vec![]);
    for m in catalog::models() {
        let a = &m.arch;
        // The largest models' full runs are slow in a debug build: shorter sequences for them.
        for (name, s) in &variants {
            let s = if a.total_params() > 40_000_000_000 {
                Settings {
                    batch: 1,
                    seq: 256,
                    ..s.clone()
                }
            } else {
                s.clone()
            };
            // Where peft maps the MLP names onto the fused experts, its ParamWrapper takes no
            // dropout (lorafit::model::peft_targets).
            let s = if lorafit::model::peft_targets::mlp_names_reach_experts(a, &s) {
                Settings {
                    lora_dropout: 0.0,
                    ..s
                }
            } else {
                s
            };
            if generate_on(a, &s, Device::Cuda).is_err() {
                continue;
            }
            match check(&format!("{} {name}", a.name), a, &s, Device::Cuda) {
                How::Extrapolated => short += 1,
                How::Unaligned => unaligned.push(format!("{} {name}", a.name)),
                How::Full => {}
            }
            n += 1;
        }
    }
    println!("{short} of {n} catalog plans from short runs");
    assert!(unaligned.is_empty(), "not aligned: {unaligned:?}");
}
