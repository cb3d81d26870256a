//! Runs the LoRA matmul kernels of [`crate::gpu::kernels`] through wgpu: natively on Vulkan (tests,
//! lavapipe in CI) and in the browser on WebGPU. Never blocks on the web: buffer maps and queue
//! completion are awaited through channels; natively `poll(Wait)` drives them.
//! Structured like wgpu's hello_compute: [`init`] finds a device, the rest takes `&Gpu`.

use std::borrow::Cow;

use wgpu::util::DeviceExt;

use crate::gpu::kernels::{self, Kernel, Precision};

/// A device ready for the benchmark.
pub struct Gpu {
    /// Device.
    pub device: wgpu::Device,
    /// Queue.
    pub queue: wgpu::Queue,
    /// Adapter name, backend and type, for the report.
    pub adapter: String,
    /// Whether the adapter is a CPU/software implementation (lavapipe, SwiftShader).
    pub software: bool,
    /// GPU timestamps available.
    pub timestamps: bool,
    /// `shader-f16` available.
    pub f16: bool,
    /// Largest storage buffer binding.
    pub max_binding_bytes: u64,
}

/// Finds an adapter and opens a device with the features the benchmark can use.
pub async fn init() -> Result<Gpu, String> {
    let instance = wgpu::Instance::new(&wgpu::InstanceDescriptor::default());
    let adapter = instance
        .request_adapter(&wgpu::RequestAdapterOptions {
            power_preference: wgpu::PowerPreference::HighPerformance,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("no WebGPU/Vulkan adapter: {e}"))?;
    let info = adapter.get_info();
    let available = adapter.features();
    let wanted = available & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SHADER_F16);
    let limits = adapter.limits();
    let (device, queue) = adapter
        .request_device(&wgpu::DeviceDescriptor {
            label: Some("lorafit"),
            required_features: wanted,
            required_limits: limits.clone(),
            ..Default::default()
        })
        .await
        .map_err(|e| format!("could not open the GPU: {e}"))?;
    Ok(Gpu {
        device,
        queue,
        adapter: format!("{} ({:?}, {:?})", info.name, info.backend, info.device_type),
        software: info.device_type == wgpu::DeviceType::Cpu,
        timestamps: wanted.contains(wgpu::Features::TIMESTAMP_QUERY),
        f16: wanted.contains(wgpu::Features::SHADER_F16),
        max_binding_bytes: limits.max_storage_buffer_binding_size as u64,
    })
}

async fn wait_idle(gpu: &Gpu) {
    let (tx, rx) = futures_channel::oneshot::channel();
    gpu.queue.on_submitted_work_done(move || {
        let _ = tx.send(());
    });
    #[cfg(not(target_arch = "wasm32"))]
    let _ = gpu.device.poll(wgpu::PollType::Wait);
    let _ = rx.await;
}

async fn read_bytes(gpu: &Gpu, src: &wgpu::Buffer, size: u64) -> Result<Vec<u8>, String> {
    let staging = gpu.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    enc.copy_buffer_to_buffer(src, 0, &staging, 0, size);
    gpu.queue.submit(Some(enc.finish()));
    let (tx, rx) = futures_channel::oneshot::channel();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        let _ = tx.send(r);
    });
    #[cfg(not(target_arch = "wasm32"))]
    let _ = gpu.device.poll(wgpu::PollType::Wait);
    rx.await
        .map_err(|_| "readback cancelled".to_string())?
        .map_err(|e| format!("readback failed: {e}"))?;
    let out = staging.slice(..).get_mapped_range().to_vec();
    staging.unmap();
    Ok(out)
}

fn to_bytes(v: &[f32], p: Precision) -> Vec<u8> {
    match p {
        Precision::F32 => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        Precision::F16 => v
            .iter()
            .flat_map(|x| f32_to_f16(*x).to_le_bytes())
            .collect(),
    }
}

fn from_bytes(b: &[u8], p: Precision) -> Vec<f32> {
    match p {
        Precision::F32 => b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        Precision::F16 => b
            .chunks_exact(2)
            .map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]])))
            .collect(),
    }
}

/// IEEE half from f32 (round to nearest, no NaN payloads needed here).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = bits & 0x7f_ffff;
    if exp >= 31 {
        sign | 0x7c00
    } else if exp <= 0 {
        if exp < -10 {
            sign
        } else {
            let m = (mant | 0x80_0000) >> (1 - exp);
            sign | ((m + 0x1000) >> 13) as u16
        }
    } else {
        let v = ((exp as u32) << 10) | (mant >> 13);
        sign | (v + ((mant >> 12) & 1)) as u16
    }
}

/// f32 from IEEE half.
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let mant = (h & 0x3ff) as u32;
    let bits = match exp {
        0 if mant == 0 => sign,
        0 => {
            let mut e = 0i32;
            let mut m = mant;
            while m & 0x400 == 0 {
                m <<= 1;
                e += 1;
            }
            sign | (((127 - 15 + 1 - e) as u32) << 23) | ((m & 0x3ff) << 13)
        }
        31 => sign | 0x7f80_0000 | (mant << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (mant << 13),
    };
    f32::from_bits(bits)
}

/// A compiled GEMM: pipeline + bind-group layout.
pub struct Gemm {
    pipeline: wgpu::ComputePipeline,
    precision: Precision,
}

impl Gemm {
    /// Compiles a kernel.
    pub fn new(gpu: &Gpu, kernel: Kernel, precision: Precision) -> Result<Gemm, String> {
        if precision == Precision::F16 && !gpu.f16 {
            return Err("this adapter has no shader-f16".into());
        }
        let module = gpu
            .device
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("gemm"),
                source: wgpu::ShaderSource::Wgsl(Cow::Owned(kernels::source(kernel, precision))),
            });
        let pipeline = gpu
            .device
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some("gemm"),
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        Ok(Gemm {
            pipeline,
            precision,
        })
    }

    /// Binds `c = alpha · a·b (+ c)` for `(m, n, k)`.
    fn bind(
        &self,
        gpu: &Gpu,
        [a, b, c]: [&wgpu::Buffer; 3],
        (m, n, k): (u32, u32, u32),
        alpha: f32,
        accumulate: bool,
    ) -> wgpu::BindGroup {
        let mut params = Vec::with_capacity(32);
        for v in [m, n, k, u32::from(accumulate)] {
            params.extend_from_slice(&v.to_le_bytes());
        }
        for v in [alpha, 0.0, 0.0, 0.0] {
            params.extend_from_slice(&v.to_le_bytes());
        }
        let ubuf = gpu
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: &params,
                usage: wgpu::BufferUsages::UNIFORM,
            });
        gpu.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &self.pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: a.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: b.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: c.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: ubuf.as_entire_binding(),
                },
            ],
        })
    }

    fn dispatch(
        &self,
        enc: &mut wgpu::CommandEncoder,
        bg: &wgpu::BindGroup,
        m: u32,
        n: u32,
        ts: Option<(&wgpu::QuerySet, u32)>,
    ) {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: ts.map(|(q, i)| wgpu::ComputePassTimestampWrites {
                query_set: q,
                beginning_of_pass_write_index: Some(i),
                end_of_pass_write_index: Some(i + 1),
            }),
        });
        pass.set_pipeline(&self.pipeline);
        pass.set_bind_group(0, bg, &[]);
        pass.dispatch_workgroups(n.div_ceil(kernels::TILE), m.div_ceil(kernels::TILE), 1);
    }
}

fn storage(gpu: &Gpu, data: &[u8], label: &str) -> wgpu::Buffer {
    gpu.device
        .create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: data,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
        })
}

/// Inputs of one adapted Linear, row-major f32: x [m×k], W [k×n], A [k×r], B [r×n].
#[derive(Clone, Copy)]
pub struct LoraInputs<'a> {
    /// Activations.
    pub x: &'a [f32],
    /// Frozen weight.
    pub w: &'a [f32],
    /// LoRA down-projection.
    pub a: &'a [f32],
    /// LoRA up-projection.
    pub b: &'a [f32],
}

/// One adapted Linear layer on the GPU: `y = x·W + ((x·A)·B)·scale` for `(m, k, n, r)`
/// (converted to f16 for `Precision::F16`). Returns y.
pub async fn lora_linear(
    gpu: &Gpu,
    kernel: Kernel,
    precision: Precision,
    inputs: LoraInputs<'_>,
    (m, k, n, r): (u32, u32, u32, u32),
    scale: f32,
) -> Result<Vec<f32>, String> {
    let LoraInputs { x, w, a, b } = inputs;
    let g = Gemm::new(gpu, kernel, precision)?;
    let bx = storage(gpu, &to_bytes(x, precision), "x");
    let bw = storage(gpu, &to_bytes(w, precision), "w");
    let ba = storage(gpu, &to_bytes(a, precision), "a");
    let bb = storage(gpu, &to_bytes(b, precision), "b");
    let elem = if precision == Precision::F32 { 4 } else { 2 };
    let by = storage(gpu, &vec![0u8; (m * n) as usize * elem], "y");
    let bt = storage(gpu, &vec![0u8; (m * r) as usize * elem], "t");
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    g.dispatch(
        &mut enc,
        &g.bind(gpu, [&bx, &bw, &by], (m, n, k), 1.0, false),
        m,
        n,
        None,
    );
    g.dispatch(
        &mut enc,
        &g.bind(gpu, [&bx, &ba, &bt], (m, r, k), 1.0, false),
        m,
        r,
        None,
    );
    g.dispatch(
        &mut enc,
        &g.bind(gpu, [&bt, &bb, &by], (m, n, r), scale, true),
        m,
        n,
        None,
    );
    gpu.queue.submit(Some(enc.finish()));
    let bytes = read_bytes(gpu, &by, (m * n) as u64 * elem as u64).await?;
    Ok(from_bytes(&bytes, g.precision))
}

/// The benchmark's measurement of one kernel.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Measurement {
    /// Kernel name.
    pub kernel: &'static str,
    /// f32 / f16.
    pub precision: &'static str,
    /// Problem (tokens × in × out).
    pub shape: (u32, u32, u32),
    /// Median GFLOP/s.
    pub gflops_median: f64,
    /// Slowest and fastest sample.
    pub gflops_min: f64,
    /// Fastest sample.
    pub gflops_max: f64,
    /// Effective bandwidth at the median (A, B read once, C written once).
    pub gbps_median: f64,
    /// Samples.
    pub samples: usize,
    /// `gpu timestamps` or `wall clock`.
    pub timing: &'static str,
}

/// Milliseconds from an arbitrary origin.
pub fn now_ms() -> f64 {
    #[cfg(target_arch = "wasm32")]
    {
        web_sys::window()
            .and_then(|w| w.performance())
            .map(|p| p.now())
            .unwrap_or(0.0)
    }
    #[cfg(not(target_arch = "wasm32"))]
    {
        use std::sync::OnceLock;
        static T0: OnceLock<std::time::Instant> = OnceLock::new();
        T0.get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
            * 1000.0
    }
}

/// Times the frozen GEMM `x·W` (m × k × n) with random data: warm-up, then repeated dispatches
/// until `budget_ms` is spent or `cancelled()` says stop. GPU timestamps when available.
pub async fn bench(
    gpu: &Gpu,
    kernel: Kernel,
    precision: Precision,
    (m, k, n): (u32, u32, u32),
    budget_ms: f64,
    cancelled: &dyn Fn() -> bool,
) -> Result<Measurement, String> {
    let g = Gemm::new(gpu, kernel, precision)?;
    let elem: u64 = if precision == Precision::F32 { 4 } else { 2 };
    // Size the problem to the adapter: shrink n until W fits one binding.
    let mut n = n;
    while (k as u64) * (n as u64) * elem > gpu.max_binding_bytes && n > kernels::TILE {
        n /= 2;
    }
    let bx = storage(
        gpu,
        &to_bytes(&kernels::pseudo_random((m * k) as usize, 1), precision),
        "x",
    );
    let bw = storage(
        gpu,
        &to_bytes(&kernels::pseudo_random((k * n) as usize, 2), precision),
        "w",
    );
    let by = storage(gpu, &vec![0u8; (m as u64 * n as u64 * elem) as usize], "y");
    // Calibrate on 16 rows (also the warm-up), then size the rows so that one dispatch takes
    // about a twelfth of the budget: a slow (software) adapter gets a smaller problem, never a
    // frozen tab.
    let small = kernels::TILE;
    let calib = g.bind(gpu, [&bx, &bw, &by], (small, n, k), 1.0, false);
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    g.dispatch(&mut enc, &calib, small, n, None);
    gpu.queue.submit(Some(enc.finish()));
    wait_idle(gpu).await;
    let t0 = now_ms();
    let mut enc = gpu.device.create_command_encoder(&Default::default());
    g.dispatch(&mut enc, &calib, small, n, None);
    gpu.queue.submit(Some(enc.finish()));
    wait_idle(gpu).await;
    let calib_ms = (now_ms() - t0).max(0.01);
    let rate = 2.0 * small as f64 * n as f64 * k as f64 / calib_ms; // FLOP per ms
                                                                    // Even 16 rows too slow (a software adapter on a big layer): narrow the output instead.
    let n = if calib_ms > budget_ms / 10.0 {
        ((n as f64 * (budget_ms / 10.0) / calib_ms) as u32 / small * small).max(small)
    } else {
        n
    };
    let target_rows = (budget_ms / 12.0 * rate / (2.0 * n as f64 * k as f64)) as u32;
    let m = (target_rows / small * small).clamp(small, m.max(small));
    let bg = g.bind(gpu, [&bx, &bw, &by], (m, n, k), 1.0, false);
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    let bytes = ((m as u64 * k as u64 + k as u64 * n as u64 + m as u64 * n as u64) * elem) as f64;
    let reps: u32 = if flops / rate > budget_ms / 24.0 {
        1
    } else {
        4
    };
    let qs = gpu.timestamps.then(|| {
        gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: None,
            ty: wgpu::QueryType::Timestamp,
            count: 2 * reps,
        })
    });
    let resolve = qs.as_ref().map(|_| {
        gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size: 16 * reps as u64,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    });
    let mut samples: Vec<f64> = vec![];
    let t_start = now_ms();
    while samples.len() < 40 && now_ms() - t_start < budget_ms && !cancelled() {
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        for i in 0..reps {
            g.dispatch(&mut enc, &bg, m, n, qs.as_ref().map(|q| (q, 2 * i)));
        }
        if let (Some(q), Some(r)) = (&qs, &resolve) {
            enc.resolve_query_set(q, 0..2 * reps, r, 0);
        }
        let t0 = now_ms();
        gpu.queue.submit(Some(enc.finish()));
        wait_idle(gpu).await;
        let wall = now_ms() - t0;
        match &resolve {
            Some(r) => {
                let raw = read_bytes(gpu, r, 16 * reps as u64).await?;
                let ticks: Vec<u64> = raw
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect();
                let period = gpu.queue.get_timestamp_period() as f64;
                for i in 0..reps as usize {
                    let ns = ticks[2 * i + 1].saturating_sub(ticks[2 * i]) as f64 * period;
                    if ns > 0.0 {
                        samples.push(flops / ns);
                    }
                }
            }
            None => samples.push(flops * reps as f64 / (wall * 1e6).max(1e-6)),
        }
    }
    if samples.is_empty() {
        return Err(if cancelled() {
            "cancelled".into()
        } else {
            "no sample within the time budget".into()
        });
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let median = samples[samples.len() / 2];
    Ok(Measurement {
        kernel: match kernel {
            Kernel::Naive => "naive",
            Kernel::Tiled => "tiled",
        },
        precision: match precision {
            Precision::F32 => "f32",
            Precision::F16 => "f16",
        },
        shape: (m, k, n),
        gflops_median: median,
        gflops_min: samples[0],
        gflops_max: samples[samples.len() - 1],
        gbps_median: bytes / (flops / median),
        samples: samples.len(),
        timing: if resolve.is_some() {
            "gpu timestamps"
        } else {
            "wall clock"
        },
    })
}
