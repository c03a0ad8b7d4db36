// The layer-normalization family on f32 tensors over the trailing `len`
// elements of each row, one workgroup per row, with optional f32 Mean and
// InvStdDev outputs. Scale and bias have `len` elements (or 1, broadcast).
// RMS skips the mean: x / sqrt(mean(x²) + eps) * scale, and writes a zero Mean
// (as onnxruntime's SkipSimplifiedLayerNormalization does). INPLACE reads the
// rows from y (x is then bound to any other buffer and never read): WebGPU
// forbids binding one buffer both read-only and writable in a dispatch.
//
// Params (u32 words): [0] rows, [1] len, [2] epsilon (f32 bits), [3] scale count,
// [4] bias count (0: no bias).

override WG: u32 = 256u;
override STATS: bool = false;
override RMS: bool = false;
override INPLACE: bool = false;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;
@group(0) @binding(5) var<storage, read_write> mean_out: array<f32>;
@group(0) @binding(6) var<storage, read_write> inv_out: array<f32>;

// Per invocation, then merged in one tree: the count, the mean and the sum of
// squared deviations (Welford; RMS keeps the sum of squares, mean 0), so the
// statistics take one reduction instead of a mean reduction and a variance one.
var<workgroup> counts: array<f32, WG>;
var<workgroup> means: array<f32, WG>;
var<workgroup> squares: array<f32, WG>;

fn load(k: u32) -> f32 {
    if (INPLACE) { return y[k]; }
    return x[k];
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p[0]) { return; }
    let len = p[1];
    let base = row * len;
    var n = 0.0;
    var mu = 0.0;
    var q = 0.0;
    for (var k = lid; k < len; k = k + WG) {
        let v = load(base + k);
        n = n + 1.0;
        if (RMS) {
            q = q + v * v;
        } else {
            let d = v - mu;
            mu = mu + d / n;
            q = q + d * (v - mu);
        }
    }
    counts[lid] = n;
    means[lid] = mu;
    squares[lid] = q;
    for (var half = WG / 2u; half > 0u; half = half / 2u) {
        workgroupBarrier();
        if (lid < half && counts[lid + half] > 0.0) {
            let nb = counts[lid + half];
            let na = counts[lid];
            let total = na + nb;
            let d = means[lid + half] - means[lid];
            means[lid] = means[lid] + d * nb / total;
            squares[lid] = squares[lid] + squares[lid + half] + d * d * na * nb / total;
            counts[lid] = total;
        }
    }
    workgroupBarrier();
    let mean = means[0];
    let inv = 1.0 / sqrt(squares[0] / f32(len) + bitcast<f32>(p[2]));
    for (var k = lid; k < len; k = k + WG) {
        let g = scale[select(k, 0u, p[3] == 1u)];
        var b = 0.0;
        if (p[4] > 0u) { b = bias[select(k, 0u, p[4] == 1u)]; }
        y[base + k] = (load(base + k) - mean) * inv * g + b;
    }
    if (STATS && lid == 0u) {
        mean_out[row] = mean;
        inv_out[row] = inv;
    }
}
