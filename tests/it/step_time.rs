//! The step-time model against measured steps: the 20 LoRA steps timed on an NVIDIA H200
//! (`tests/data/reference/gpu_probe_h200.jsonl`, the second, warm step of each) and the published
//! A100 runs of fms-acceleration (`tests/data/reference/published_gpu.jsonl`, the Trainer's
//! `train_tokens_per_second`, per process on two GPUs). `planning::time::calibration` says which
//! of them its constants were fitted on.

use lorafit::formats::catalog::{find_gpu, resolve_model};
use lorafit::formats::fields::settings_from_json;
use lorafit::model::{plan_simulated, Architecture, Plan, Settings};
use lorafit::planning::time::{estimate, relative_time, TimeEstimate};
use serde_json::Value;

struct Run {
    id: String,
    gpu: &'static str,
    arch: Architecture,
    settings: Settings,
    plan: Plan,
    /// Measured seconds per optimizer step (one micro-batch: no accumulation in these runs).
    seconds: f64,
}

fn reference(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/data/reference/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("reference file")
}

fn h200_runs() -> Vec<Run> {
    reference("gpu_probe_h200.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            let arch = resolve_model(&v["model"]).unwrap().value;
            let settings = settings_from_json(&v["settings"]).unwrap().value;
            let plan = plan_simulated(&arch, &settings).unwrap();
            Run {
                id: v["id"].as_str().unwrap().into(),
                gpu: "h200",
                seconds: v["measured"]["step_s"][1].as_f64().unwrap(),
                arch,
                settings,
                plan,
            }
        })
        .collect()
}

fn published_runs() -> Vec<Run> {
    reference("published_gpu.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["gpu"], "A100-80GB");
            let tps = v["measured"]["train_tokens_per_second"].as_f64()?;
            let (id, arch, settings, _) = lorafit::formats::jsonl::read_line(l).unwrap();
            assert_eq!(settings.grad_accum, 1);
            let plan = plan_simulated(&arch, &settings).unwrap();
            Some(Run {
                id: id.as_str().unwrap().into(),
                gpu: "a100-80",
                seconds: (settings.batch * settings.seq) as f64 / tps,
                arch,
                settings,
                plan,
            })
        })
        .collect()
}

fn predicted(r: &Run) -> TimeEstimate {
    estimate(
        &r.arch,
        &r.settings,
        &r.plan,
        find_gpu(r.gpu).unwrap(),
        None,
        0.0,
    )
    .expect("a time estimate")
}

/// Predicted / measured − 1, printed with the parts.
fn error(r: &Run) -> f64 {
    let t = predicted(r);
    let e = t.seconds_per_step / r.seconds - 1.0;
    let parts: Vec<String> = t
        .parts
        .iter()
        .map(|p| format!("{} {:.3}", p.key, p.seconds))
        .collect();
    println!(
        "{:70} measured {:7.3} s  planned {:7.3} s  {:+6.1} %  ({})",
        r.id,
        r.seconds,
        t.seconds_per_step,
        e * 100.0,
        parts.join(", ")
    );
    e
}

#[test]
fn published_runs_within_15_percent() {
    let runs = published_runs();
    assert_eq!(runs.len(), 6, "runs with a throughput");
    // Three on one GPU, three on two under FSDP FULL_SHARD (their collectives modelled from the
    // volumes gathered and reduced over NVLink, not fitted).
    let single = runs
        .iter()
        .filter(|r| r.settings.parallel.world() == 1)
        .count();
    assert_eq!(single, 3);
    for r in &runs {
        let e = error(r);
        assert!(e.abs() <= 0.15, "{}: {:+.1} %", r.id, e * 100.0);
    }
}

#[test]
fn timed_h200_steps_as_close_as_they_repeat() {
    let runs = h200_runs();
    assert_eq!(runs.len(), 20);
    let errors: Vec<f64> = runs.iter().map(error).collect();
    let rms = (errors.iter().map(|e| e * e).sum::<f64>() / errors.len() as f64).sqrt();
    println!("root mean square {:.1} %", rms * 100.0);
    // The same configuration timed twice in that file differs by up to 30 %.
    for (r, e) in runs.iter().zip(&errors) {
        assert!(e.abs() <= 0.30, "{}: {:+.1} %", r.id, e * 100.0);
    }
    assert!(rms <= 0.10, "rms {:.1} %", rms * 100.0);
}

/// The speed cost of a change as the ranked fixes show it (`relative_time`, per trained token)
/// against the two measured runs that differ by it, within `points` (0.10: 10 points).
fn speed_cost_matches(before: &Run, after: &Run, points: f64) {
    let per_token = |r: &Run| r.seconds / (r.settings.batch * r.settings.seq) as f64;
    let measured = per_token(after) / per_token(before);
    let planned = relative_time(
        &before.arch,
        &before.settings,
        &before.plan.work,
        &after.settings,
        &after.plan.work,
        Some(find_gpu(before.gpu).unwrap()),
    );
    println!(
        "{} → {}: measured × {measured:.3}, planned × {planned:.3}",
        before.id, after.id
    );
    assert!(
        (planned - measured).abs() <= points,
        "{} → {}: measured {measured:.3}, planned {planned:.3}",
        before.id,
        after.id
    );
}

#[test]
fn speed_costs_of_fixes_match_measured_pairs() {
    let p = published_runs();
    let by = |runs: &[Run], part: &str| -> usize {
        runs.iter()
            .position(|r| r.id.contains(part))
            .unwrap_or_else(|| panic!("{part}"))
    };
    // The published runs: a 4-bit base (QLoRA) on an A100, Mistral-7B, 4 × 4096 tokens; within
    // 10 points.
    speed_cost_matches(&p[by(&p, "row32")], &p[by(&p, "row56")], 0.10);
    // The H200's timed steps are single steps: the same configuration timed twice there differs
    // by up to 30 % (Qwen2.5-0.5B), 10 % for a 7B model (Qwen2-7B, 1.33 s and 1.26 s), so a
    // ratio of two of them is held to 15 points. Checkpointing with twice the batch (Llama-2-7B,
    // eager, 2048 tokens), and four times the tokens without it (sdpa, 1024 → 4096).
    let h = h200_runs();
    speed_cost_matches(
        &h[by(&h, "llama2-7b_bf16_s2048_b1_eager_nogc")],
        &h[by(&h, "llama2-7b_bf16_s2048_b2_eager_gc")],
        0.15,
    );
    speed_cost_matches(
        &h[by(&h, "llama2-7b_bf16_s1024_b1_sdpa_nogc")],
        &h[by(&h, "llama2-7b_bf16_s4096_b1_sdpa_nogc")],
        0.15,
    );
}

#[test]
fn quick_and_simulated_plans_do_the_same_work() {
    // The short runs' work extrapolated to the model's depth is the full run's, byte for byte.
    for r in h200_runs().iter().chain(published_runs().iter()) {
        let quick = lorafit::model::plan(&r.arch, &r.settings).unwrap();
        assert_eq!(quick.work, r.plan.work, "{}", r.id);
    }
}

#[test]
fn every_catalog_model_on_every_card_has_a_finite_time_made_of_its_parts() {
    use lorafit::formats::catalog::{gpus, models};
    use lorafit::model::Dtype;
    for m in models() {
        let s = Settings {
            autocast: Some(Dtype::Bf16),
            grad_ckpt: true,
            ..Settings::default()
        };
        let Ok(p) = lorafit::model::plan(&m.arch, &s) else {
            continue;
        };
        let longer = Settings {
            seq: s.seq * 2,
            ..s.clone()
        };
        let p2 = lorafit::model::plan(&m.arch, &longer).unwrap();
        for g in gpus() {
            let Some(t) = estimate(&m.arch, &s, &p, g, None, 1e8) else {
                // Only a card without any peak figure has no estimate.
                assert!(g.fp32_tflops.is_none(), "{} on {}", m.arch.name, g.id);
                continue;
            };
            let sum: f64 = t.parts.iter().map(|p| p.seconds).sum();
            assert!(t
                .parts
                .iter()
                .all(|p| p.seconds.is_finite() && p.seconds >= 0.0));
            assert!((sum - t.seconds_per_step).abs() <= 1e-9 * sum);
            assert!(t.tokens_per_second.is_finite() && t.tokens_per_second > 0.0);
            assert!(t.parts.iter().all(|p| !p.formula.is_empty()));
            let t2 = estimate(&m.arch, &longer, &p2, g, None, 1e8).unwrap();
            assert!(
                t2.seconds_per_step > t.seconds_per_step,
                "{} on {}: twice the tokens is slower",
                m.arch.name,
                g.id
            );
        }
    }
}

#[test]
fn several_gpus_and_offloading_add_their_transfers() {
    use lorafit::model::{Dtype, Parallel, Strategy};
    let a = lorafit::formats::catalog::find_model("llama2-7b")
        .unwrap()
        .arch
        .clone();
    let part = |t: &TimeEstimate, k: &str| t.parts.iter().find(|p| p.key == k).map(|p| p.seconds);
    let base = Settings {
        autocast: Some(Dtype::Bf16),
        grad_ckpt: true,
        ..Settings::default()
    };
    let on = |s: &Settings, g: &str| {
        let p = plan_simulated(&a, s).unwrap();
        estimate(&a, s, &p, find_gpu(g).unwrap(), None, 1e8).unwrap()
    };
    let one = on(&base, "a100-80");
    assert_eq!(part(&one, "communication"), None);
    assert_eq!(part(&one, "offload"), None);
    // `n` GPUs of one node under `strategy`.
    let layout = |n: u64, strategy: Strategy| Settings {
        parallel: Parallel {
            gpus_per_node: n,
            strategy,
            ..Parallel::default()
        },
        ..base.clone()
    };
    let fsdp = layout(4, Strategy::FsdpFullShard);
    // FSDP gathers every layer twice per micro-batch; DDP only reduces the LoRA gradients.
    let (f, d) = (
        on(&fsdp, "a100-80"),
        on(&layout(4, Strategy::Ddp), "a100-80"),
    );
    assert!(part(&f, "communication").unwrap() > 20.0 * part(&d, "communication").unwrap());
    // A ring all-reduce moves 2(n−1)/n of the gradients per GPU: 8 GPUs move 1.75 × what 2 do.
    let ddp_on = |n: u64| on(&layout(n, Strategy::Ddp), "a100-80");
    let ratio =
        part(&ddp_on(8), "communication").unwrap() / part(&ddp_on(2), "communication").unwrap();
    assert!((ratio - 1.75).abs() < 1e-9, "{ratio}");
    // Over PCIe (an L40S has no NVLink) the same gathers take longer than over NVLink.
    let pcie = on(&fsdp, "l40s");
    assert!(part(&pcie, "communication").unwrap() > part(&f, "communication").unwrap());
    // Offloaded checkpoints go to the host and come back.
    let off = Settings {
        parallel: Parallel {
            offload_activations: true,
            ..Parallel::default()
        },
        ..base.clone()
    };
    let t = on(&off, "a100-80");
    assert!(part(&t, "offload").unwrap() > 0.0, "{}", t.explanation);
}
