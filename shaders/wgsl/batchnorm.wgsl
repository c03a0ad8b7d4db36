// BatchNormalization in inference mode on f32 tensors [N, C, ...]:
// y = (x - mean[c]) / sqrt(var[c] + epsilon) * scale[c] + bias[c].
//
// Params (u32 words): [0] elements, [1] channels, [2] inner (elements per
// channel plane), [3] epsilon (f32 bits).

override WG: u32 = 256u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> scale: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read> mean: array<f32>;
@group(0) @binding(5) var<storage, read> variance: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p[0]) { return; }
    let c = (i / p[2]) % p[1];
    let inv = 1.0 / sqrt(variance[c] + bitcast<f32>(p[3]));
    y[i] = (x[i] - mean[c]) * inv * scale[c] + bias[c];
}
