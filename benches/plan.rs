//! Native timing of the model and the page's evaluation (run: cargo bench --bench plan).
//! A plain harness (no criterion) to keep dependencies small: prints ns per call.

use std::hint::black_box;
use std::time::Instant;

use lorafit::formats::catalog;
use lorafit::model::allocator::AllocConf;
use lorafit::model::steptrace::{generate, periodic, simulate, Device};
use lorafit::model::{plan, Settings};
use lorafit::planning::evaluate;
use lorafit::planning::evaluate::Axis;
use lorafit::planning::fit::Fidelity;

fn time<F: FnMut()>(name: &str, n: u32, mut f: F) {
    for _ in 0..n / 10 {
        f();
    }
    let t = Instant::now();
    for _ in 0..n {
        f();
    }
    let per = t.elapsed().as_secs_f64() / n as f64;
    println!("{name:<40} {:>10.1} µs/call", per * 1e6);
}

fn main() {
    let a = catalog::find_model("llama2-7b").unwrap().arch.clone();
    let s = Settings::default();
    time("plan (llama2-7b)", 20_000, || {
        black_box(plan(black_box(&a), black_box(&s)).unwrap());
    });
    time("evaluate::evaluate (plan + fit limits)", 500, || {
        black_box(
            evaluate::evaluate("llama2-7b", "a100-80", black_box(&s), Fidelity::Quick).unwrap(),
        );
    });
    time("evaluate::curve (11 points)", 2_000, || {
        black_box(evaluate::curve(&a, black_box(&s), Axis::Seq));
    });
    // DoRA, full fine-tuning and one rank of FSDP over 8 GPUs: the quick plan (short runs), and
    // the full run the page settles on.
    for (name, st) in [
        (
            "FSDP x8",
            Settings {
                parallel: lorafit::model::Parallel {
                    gpus_per_node: 8,
                    strategy: lorafit::model::Strategy::FsdpFullShard,
                    ..Default::default()
                },
                ..Settings::default()
            },
        ),
        (
            "DoRA",
            Settings {
                use_dora: true,
                ..Settings::default()
            },
        ),
        (
            "full",
            Settings {
                finetuning_type: lorafit::model::FinetuningType::Full,
                ..Settings::default()
            },
        ),
    ] {
        time(&format!("plan {name} (llama2-7b)"), 2_000, || {
            black_box(plan(black_box(&a), black_box(&st)).unwrap());
        });
        time(
            &format!("steptrace::generate {name} (llama2-7b)"),
            50,
            || {
                black_box(generate(black_box(&a), black_box(&st)).unwrap());
            },
        );
    }
    let conf = AllocConf::default();
    let big = catalog::find_model("llama3-70b").unwrap().arch.clone();
    let gc = Settings {
        grad_ckpt: true,
        ..Settings::default()
    };
    for (name, arch, st) in [
        ("llama2-7b", &a, &s),
        ("llama2-7b gc", &a, &gc),
        ("llama3-70b (80 layers)", &big, &s),
        ("llama3-70b gc", &big, &gc),
    ] {
        let n = generate(arch, st).unwrap().events.len();
        time(
            &format!("steptrace::generate {name} ({n} events)"),
            50,
            || {
                black_box(generate(black_box(arch), black_box(st)).unwrap());
            },
        );
        time(
            &format!("steptrace::periodic::live_peak {name}"),
            200,
            || {
                black_box(
                    periodic::live_peak(black_box(arch), black_box(st), Device::Cuda).unwrap(),
                );
            },
        );
        time(&format!("steptrace::simulate {name}"), 50, || {
            black_box(simulate(black_box(arch), black_box(st), &conf).unwrap());
        });
    }
    // The job after the training step: evaluation, saving and a merge on the GPU, each phase of
    // the GPU a run of the training steps continued by the phase, replayed.
    let mut job = Settings::default();
    job.job.eval_batch = Some(8);
    job.job.eval_strategy = lorafit::model::job::EvalStrategy::Steps;
    let mut merge = Settings::default();
    merge.job.merge = true;
    merge.job.export_device = lorafit::model::job::ExportDevice::Gpu;
    for (name, st) in [
        ("default", &s),
        ("eval", &job),
        ("merge on the GPU", &merge),
    ] {
        let p = plan(&a, st).unwrap();
        time(&format!("job::plan_job {name} (llama2-7b)"), 50, || {
            black_box(lorafit::model::job::plan_job(black_box(&a), black_box(st), &p).unwrap());
        });
    }
}
