// Binary arithmetic on f16 tensors in native f16, for adapters with
// SHADER_F16: binary_vec4.wgsl's layouts (each input the output's shape or a
// trailing part of it, element counts multiples of 4), four halves per
// invocation with 8-byte loads and stores. Without SHADER_F16, f16 tensors take
// binary_float.wgsl, which computes in f32 over packed f16 storage.
//
// Params (u32 words): [0] output vec4s, [1] a's vec4s, [2] b's vec4s.

enable f16;

override WG: u32 = 256u;
// The op: BINARY_ADD, _SUB, _MUL, _DIV, _MAX or _MIN (codes.wgsl).
override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<vec4<f16>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<f16>>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<f16>>;

fn apply(x: vec4<f16>, z: vec4<f16>) -> vec4<f16> {
    switch OP {
        case BINARY_ADD: { return x + z; }
        case BINARY_SUB: { return x - z; }
        case BINARY_MUL: { return x * z; }
        case BINARY_DIV: { return x / z; }
        // Max and Min propagate NaN from either side, as numpy does.
        case BINARY_MAX: { return select(select(max(x, z), z, z != z), x, x != x); }
        case BINARY_MIN: { return select(select(min(x, z), z, z != z), x, x != x); }
        default: { return x; }
    }
}

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return gid.x + gid.y * nwg.x * WG;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= p[0]) { return; }
    y[i] = apply(a[i % p[1]], b[i % p[2]]);
}

// In place over a (y is a, which has the output's shape).
@compute @workgroup_size(WG)
fn main_a(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= p[0]) { return; }
    y[i] = apply(y[i], b[i % p[2]]);
}

// In place over b.
@compute @workgroup_size(WG)
fn main_b(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = index(gid, nwg);
    if (i >= p[0]) { return; }
    y[i] = apply(a[i % p[1]], y[i]);
}
