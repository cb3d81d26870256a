//! How far the quick reserve allowance lies from PyTorch's caching allocator simulated, over
//! every catalog model × batch, sequence, 4-bit and checkpointing: the figure behind
//! `planning::fixes::QUICK_ABOVE_SIMULATED_MAX`. Run: `cargo run --release --example quick_vs_sim`.

use lorafit::formats::catalog;
use lorafit::model::{plan, plan_simulated, Settings};
fn main() {
    let (mut n, mut over, mut worst) = (0, 0, 0.0f64);
    for m in catalog::models() {
        for (b, seq) in [(1u64, 512u64), (4, 2048), (8, 4096), (2, 8192)] {
            for q in ["", "nf4"] {
                for gc in [false, true] {
                    let mut s = Settings {
                        batch: b,
                        seq,
                        grad_ckpt: gc,
                        ..Settings::default()
                    };
                    if q == "nf4" {
                        s.set_base_weights("nf4");
                    }
                    let (Ok(a), Ok(p)) = (plan(&m.arch, &s), plan_simulated(&m.arch, &s)) else {
                        continue;
                    };
                    if !p.reserve_simulated {
                        continue;
                    }
                    n += 1;
                    let r = a.nvidia_smi_bytes as f64 / p.nvidia_smi_bytes as f64 - 1.0;
                    if r > 0.0 {
                        over += 1;
                    }
                    if r > worst {
                        worst = r;
                        println!(
                            "{} b{b} s{seq} {q} gc={gc}: quick/sim − 1 = {:+.3} %",
                            m.arch.name,
                            r * 100.0
                        );
                    }
                }
            }
        }
    }
    println!(
        "{n} plans, quick above simulated in {over}, worst {:+.3} %",
        worst * 100.0
    );
}
