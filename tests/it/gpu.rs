//! The WGSL kernels on a real adapter through wgpu (Vulkan; lavapipe in CI) against the CPU
//! reference, and the benchmark loop. Compiled with `--features gpu`.

use lorafit::gpu::kernels::{cpu_gemm, Dims, Kernel, Precision};
use lorafit::gpu::runtime as gpu;

fn data(len: usize, seed: u64) -> Vec<f32> {
    lorafit::gpu::kernels::pseudo_random(len, seed)
}

#[test]
fn lora_linear_matches_the_cpu_reference() {
    let g = pollster::block_on(gpu::init())
        .expect("a Vulkan adapter (install mesa-vulkan-drivers for lavapipe)");
    println!(
        "adapter: {} (timestamps: {}, f16: {})",
        g.adapter, g.timestamps, g.f16
    );
    // Odd sizes exercise the tile edges.
    let (m, k, n, r) = (37u32, 70u32, 45u32, 8u32);
    let (x, w, a, b) = (
        data((m * k) as usize, 1),
        data((k * n) as usize, 2),
        data((k * r) as usize, 3),
        data((r * n) as usize, 4),
    );
    let scale = 2.0;
    let mut want = vec![0f32; (m * n) as usize];
    let (mu, ku, nu, ru) = (m as usize, k as usize, n as usize, r as usize);
    cpu_gemm(
        &x,
        &w,
        &mut want,
        Dims {
            m: mu,
            k: ku,
            n: nu,
        },
        1.0,
        false,
    );
    let mut t = vec![0f32; mu * ru];
    cpu_gemm(
        &x,
        &a,
        &mut t,
        Dims {
            m: mu,
            k: ku,
            n: ru,
        },
        1.0,
        false,
    );
    cpu_gemm(
        &t,
        &b,
        &mut want,
        Dims {
            m: mu,
            k: ru,
            n: nu,
        },
        scale,
        true,
    );
    let mut precisions = vec![(Precision::F32, 1e-4f32)];
    if g.f16 {
        precisions.push((Precision::F16, 3e-2));
    }
    for (p, tol) in precisions {
        for kernel in [Kernel::Naive, Kernel::Tiled] {
            let inputs = gpu::LoraInputs {
                x: &x,
                w: &w,
                a: &a,
                b: &b,
            };
            let got =
                pollster::block_on(gpu::lora_linear(&g, kernel, p, inputs, (m, k, n, r), scale))
                    .unwrap();
            let worst = got
                .iter()
                .zip(&want)
                .map(|(g, w)| (g - w).abs() / (1.0 + w.abs()))
                .fold(0f32, f32::max);
            assert!(
                worst <= tol,
                "{kernel:?} {p:?}: worst relative error {worst}"
            );
        }
    }
}

#[test]
fn half_conversions_round_trip() {
    for x in [0.0f32, 1.0, -2.5, 0.333, 65504.0, 6.1e-5, -1e-7] {
        let back = gpu::f16_to_f32(gpu::f32_to_f16(x));
        assert!((back - x).abs() <= x.abs() * 1e-3 + 1e-7, "{x} → {back}");
    }
}

#[test]
fn benchmark_reports_finite_rates_and_honours_cancel() {
    let g = pollster::block_on(gpu::init()).expect("adapter");
    let (m, k, n) = (128, 512, 512);
    let naive = pollster::block_on(gpu::bench(
        &g,
        Kernel::Naive,
        Precision::F32,
        (m, k, n),
        1500.0,
        &|| false,
    ))
    .unwrap();
    let tiled = pollster::block_on(gpu::bench(
        &g,
        Kernel::Tiled,
        Precision::F32,
        (m, k, n),
        1500.0,
        &|| false,
    ))
    .unwrap();
    for r in [&naive, &tiled] {
        assert!(
            r.gflops_median.is_finite() && r.gflops_median > 0.0 && r.samples > 0,
            "{r:?}"
        );
        assert!(r.gflops_min <= r.gflops_median && r.gflops_median <= r.gflops_max);
    }
    println!(
        "{}: naive {:.2} GFLOP/s, tiled {:.2} GFLOP/s (median, {}), tiled/naive = {:.2}×",
        g.adapter,
        naive.gflops_median,
        tiled.gflops_median,
        tiled.timing,
        tiled.gflops_median / naive.gflops_median
    );
    let cancelled = pollster::block_on(gpu::bench(
        &g,
        Kernel::Tiled,
        Precision::F32,
        (m, k, n),
        1500.0,
        &|| true,
    ));
    assert_eq!(cancelled.unwrap_err(), "cancelled");
}
