//! The GPU microbenchmark page (wasm, feature `gpu`): a separate, lazily loaded bundle so the
//! planner's own wasm stays small. Natively it prints the benchmark on the first adapter.

#[cfg(target_arch = "wasm32")]
fn main() {
    console_error_panic_hook::set_once();
    lorafit::gpu::page::mount();
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    use lorafit::gpu::kernels::{Kernel, Precision};
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dims: Vec<u32> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (m, k, n) = match dims[..] {
        [m, k, n] => (m, k, n),
        _ => (256, 1024, 1024),
    };
    let run = async {
        let g = lorafit::gpu::runtime::init().await?;
        println!(
            "adapter: {} (timestamps {}, shader-f16 {})",
            g.adapter, g.timestamps, g.f16
        );
        let mut precisions = vec![Precision::F32];
        if g.f16 {
            precisions.push(Precision::F16);
        }
        for p in precisions {
            let naive =
                lorafit::gpu::runtime::bench(&g, Kernel::Naive, p, (m, k, n), 3000.0, &|| false)
                    .await?;
            let tiled =
                lorafit::gpu::runtime::bench(&g, Kernel::Tiled, p, (m, k, n), 3000.0, &|| false)
                    .await?;
            for r in [&naive, &tiled] {
                println!(
                    "{:<6} {:<4} {}×{}×{}: median {:.1} GFLOP/s (min {:.1}, max {:.1}, {} samples, {}), {:.1} GB/s",
                    r.kernel, r.precision, r.shape.0, r.shape.1, r.shape.2, r.gflops_median, r.gflops_min, r.gflops_max, r.samples, r.timing, r.gbps_median
                );
            }
            println!(
                "tiled / naive ({}): {:.2}×",
                naive.precision,
                tiled.gflops_median / naive.gflops_median
            );
        }
        Ok::<(), String>(())
    };
    if let Err(e) = pollster::block_on(run) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
