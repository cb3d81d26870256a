//! WGSL compute kernels of the GPU microbenchmark: a naive GEMM (one invocation per output,
//! the baseline) and a tiled GEMM (16×16 tiles staged in workgroup memory), each in f32 and in
//! f16 (storage f16, accumulation f32, for adapters with `shader-f16`). Both compute
//! `C = alpha · A·B (+ C when accumulate)`, row-major, so one adapted Linear layer is
//! `y = x·W` followed by `t = x·A` and `y += (t·B)·(α/r)`. Pure strings: validated with naga in
//! a plain unit test, no GPU needed.

/// Tile edge (and workgroup size per dimension).
pub const TILE: u32 = 16;

/// Element type of the buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// 32-bit floats.
    F32,
    /// 16-bit floats in storage (requires `shader-f16`), f32 accumulation.
    F16,
}

/// Which kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kernel {
    /// One invocation per output element, reading A and B straight from storage.
    Naive,
    /// Workgroup-shared 16×16 tiles.
    Tiled,
}

fn header(p: Precision) -> (&'static str, &'static str, &'static str) {
    match p {
        Precision::F32 => ("", "f32", "f32"),
        Precision::F16 => ("enable f16;\n", "f16", "f16"),
    }
}

const PARAMS: &str = "struct Params { m: u32, n: u32, k: u32, accumulate: u32, alpha: f32, pad0: f32, pad1: f32, pad2: f32 }\n";

/// WGSL source of a kernel.
pub fn source(kernel: Kernel, p: Precision) -> String {
    let (enable, elem, store) = header(p);
    let bindings = format!(
        "{enable}{PARAMS}@group(0) @binding(0) var<storage, read> a: array<{elem}>;\n@group(0) @binding(1) var<storage, read> b: array<{elem}>;\n@group(0) @binding(2) var<storage, read_write> c: array<{elem}>;\n@group(0) @binding(3) var<uniform> p: Params;\n"
    );
    let finish = format!(
        "    if (row < p.m && col < p.n) {{\n        let idx = row * p.n + col;\n        var v = p.alpha * acc;\n        if (p.accumulate == 1u) {{ v = v + f32(c[idx]); }}\n        c[idx] = {store}(v);\n    }}\n"
    );
    match kernel {
        Kernel::Naive => format!(
            "{bindings}@compute @workgroup_size({TILE}, {TILE}, 1)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>) {{\n    let row = gid.y;\n    let col = gid.x;\n    var acc: f32 = 0.0;\n    if (row < p.m && col < p.n) {{\n        for (var i: u32 = 0u; i < p.k; i = i + 1u) {{\n            acc = acc + f32(a[row * p.k + i]) * f32(b[i * p.n + col]);\n        }}\n    }}\n{finish}}}\n"
        ),
        Kernel::Tiled => format!(
            "{bindings}var<workgroup> ta: array<array<f32, {TILE}>, {TILE}>;\nvar<workgroup> tb: array<array<f32, {TILE}>, {TILE}>;\n@compute @workgroup_size({TILE}, {TILE}, 1)\nfn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {{\n    let row = gid.y;\n    let col = gid.x;\n    var acc: f32 = 0.0;\n    let tiles = (p.k + {TILE}u - 1u) / {TILE}u;\n    for (var t: u32 = 0u; t < tiles; t = t + 1u) {{\n        let ak = t * {TILE}u + lid.x;\n        var va: f32 = 0.0;\n        if (row < p.m && ak < p.k) {{ va = f32(a[row * p.k + ak]); }}\n        ta[lid.y][lid.x] = va;\n        let bk = t * {TILE}u + lid.y;\n        var vb: f32 = 0.0;\n        if (bk < p.k && col < p.n) {{ vb = f32(b[bk * p.n + col]); }}\n        tb[lid.y][lid.x] = vb;\n        workgroupBarrier();\n        for (var i: u32 = 0u; i < {TILE}u; i = i + 1u) {{\n            acc = acc + ta[lid.y][i] * tb[i][lid.x];\n        }}\n        workgroupBarrier();\n    }}\n{finish}}}\n"
        ),
    }
}

/// Matrix sizes of `C[m×n] = A[m×k] · B[k×n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    /// Rows of A and C (tokens).
    pub m: usize,
    /// Inner dimension (input features).
    pub k: usize,
    /// Columns of B and C (output features).
    pub n: usize,
}

/// CPU reference: `alpha · A·B (+ C)`, row-major, f64 accumulation.
pub fn cpu_gemm(a: &[f32], b: &[f32], c: &mut [f32], d: Dims, alpha: f32, accumulate: bool) {
    let Dims { m, k, n } = d;
    for row in 0..m {
        for col in 0..n {
            let mut acc = 0f64;
            for i in 0..k {
                acc += a[row * k + i] as f64 * b[i * n + col] as f64;
            }
            let v = alpha as f64 * acc
                + if accumulate {
                    c[row * n + col] as f64
                } else {
                    0.0
                };
            c[row * n + col] = v as f32;
        }
    }
}

/// Deterministic pseudo-random values in [-1, 1] (xorshift), for benchmark and test inputs.
pub fn pseudo_random(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.max(1);
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_parses_and_validates_with_naga() {
        for kernel in [Kernel::Naive, Kernel::Tiled] {
            for p in [Precision::F32, Precision::F16] {
                let src = source(kernel, p);
                let module = naga::front::wgsl::parse_str(&src).unwrap_or_else(|e| {
                    panic!("{kernel:?} {p:?}: {}\n{src}", e.emit_to_string(&src))
                });
                let caps = if p == Precision::F16 {
                    naga::valid::Capabilities::SHADER_FLOAT16
                } else {
                    naga::valid::Capabilities::empty()
                };
                naga::valid::Validator::new(naga::valid::ValidationFlags::all(), caps)
                    .validate(&module)
                    .unwrap_or_else(|e| panic!("{kernel:?} {p:?}: {e:?}"));
                assert_eq!(module.entry_points.len(), 1);
                assert_eq!(module.entry_points[0].workgroup_size, [TILE, TILE, 1]);
            }
        }
    }

    #[test]
    fn cpu_reference_matches_a_hand_computed_product() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // 2×3
        let b = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0]; // 3×2
        let mut c = [1.0; 4];
        cpu_gemm(&a, &b, &mut c, Dims { m: 2, k: 3, n: 2 }, 0.5, true);
        assert_eq!(c, [30.0, 33.0, 70.5, 78.0]);
    }
}
