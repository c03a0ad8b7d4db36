// Binary elementwise ops with multidirectional broadcasting on float tensors
// (f32, and f16 / bf16 storage computed in f32). The output is the same float
// type, or bool for comparisons. One invocation owns one 32-bit output word.
//
// Params (u32 words): [0] output elements, [1] rank, [2..10) output shape,
// [10..18) strides of a, [18..26) strides of b (0 on broadcast dims),
// [26] a's element count (for the contiguous fast path).

override WG: u32 = 256u;
// The op: a BINARY_* code (codes.wgsl).
override OP: u32 = 0u;
// ONNX dtype codes: 1 f32, 10 f16, 16 bf16 (inputs); the output may be 9 (bool).
override DT_IN: u32 = 1u;
override DT_OUT: u32 = 1u;
// Both inputs have the output's shape: skip index arithmetic.
override SAME_SHAPE: bool = false;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>;

// f32 to f16 bits, rounding to nearest even. pack2x16float is indeterminate
// outside f16's finite range (SwiftShader gives NaN), so overflow, infinities
// and NaN are spelled out.
fn f16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let sign = (b >> 16u) & 0x8000u;
    let mag = b & 0x7fffffffu;
    if (mag > 0x7f800000u) { return 0x7e00u; }
    if (mag >= 0x477ff000u) { return sign | 0x7c00u; }
    if (mag > 0x477fe000u) { return sign | 0x7bffu; }
    return pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu;
}

fn decode(w: u32, i: u32) -> f32 {
    switch DT_IN {
        case 10u: { return unpack2x16float(w)[i & 1u]; }
        case 16u: { return bitcast<f32>(((w >> ((i & 1u) * 16u)) & 0xffffu) << 16u); }
        default: { return bitcast<f32>(w); }
    }
}

fn word_of(i: u32) -> u32 {
    switch DT_IN {
        case 10u, 16u: { return i >> 1u; }
        default: { return i; }
    }
}

fn bf16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if (v != v) { return 0x7fc0u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

// Offsets of a and b for output element i.
fn offsets(i: u32) -> vec2<u32> {
    if (SAME_SHAPE) {
        return vec2<u32>(i, i);
    }
    let rank = p[1];
    var rem = i;
    var oa = 0u;
    var ob = 0u;
    for (var d = 0u; d < rank; d = d + 1u) {
        let dim = rank - 1u - d;
        let size = p[2u + dim];
        let c = rem % size;
        rem = rem / size;
        oa = oa + c * p[10u + dim];
        ob = ob + c * p[18u + dim];
    }
    return vec2<u32>(oa, ob);
}

// pow that also takes negative bases with integral exponents, as numpy does
// (WGSL's pow is exp2(y * log2(x)): NaN for any negative x).
fn power(x: f32, z: f32) -> f32 {
    if (x < 0.0 && z == trunc(z)) {
        let r = pow(-x, z);
        if (abs(z) % 2.0 == 1.0) { return -r; }
        return r;
    }
    if (x == 0.0 && z == 0.0) { return 1.0; }
    return pow(x, z);
}

// The largest finite f32, spelled exactly (Tint rejects a decimal literal that rounds past it).
const F32_MAX: f32 = 0x1.fffffep+127f;

fn fmod(x: f32, m: f32) -> f32 {
    // A finite x over an infinite m is x itself (the formula would give NaN).
    if (abs(m) > F32_MAX && abs(x) <= F32_MAX) { return x; }
    return x - m * trunc(x / m);
}

fn apply(x: f32, z: f32) -> f32 {
    switch OP {
        case BINARY_ADD: { return x + z; }
        case BINARY_SUB: { return x - z; }
        case BINARY_MUL: { return x * z; }
        case BINARY_DIV: { return x / z; }
        case BINARY_POW: { return power(x, z); }
        case BINARY_FMOD: { return fmod(x, z); }
        case BINARY_PRELU: { return select(x, x * z, x < 0.0); }
        case BINARY_MAX: { if (x != x) { return x; } if (z != z) { return z; } return max(x, z); }
        case BINARY_MIN: { if (x != x) { return x; } if (z != z) { return z; } return min(x, z); }
        // Mod with fmod = 0 (numpy's mod): the remainder takes the divisor's sign.
        case BINARY_MOD: {
            let r = fmod(x, z);
            if (r != 0.0 && (r < 0.0) != (z < 0.0)) { return r + z; }
            return r;
        }
        default: { return x; }
    }
}

fn compare(x: f32, z: f32) -> bool {
    switch OP {
        case BINARY_EQUAL: { return x == z; }
        case BINARY_LESS: { return x < z; }
        case BINARY_GREATER: { return x > z; }
        case BINARY_LESS_OR_EQUAL: { return x <= z; }
        case BINARY_GREATER_OR_EQUAL: { return x >= z; }
        default: { return false; }
    }
}

fn operands(i: u32) -> vec2<f32> {
    let o = offsets(i);
    return vec2<f32>(decode(a[word_of(o.x)], o.x), decode(b[word_of(o.y)], o.y));
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let n = p[0];
    if (DT_OUT == 9u) {
        let first = j * 4u;
        if (first >= n) { return; }
        var word = 0u;
        for (var k = 0u; k < 4u; k = k + 1u) {
            if (first + k < n) {
                let v = operands(first + k);
                if (compare(v.x, v.y)) { word = word | (1u << (k * 8u)); }
            }
        }
        y[j] = word;
    } else if (DT_OUT == 10u || DT_OUT == 16u) {
        let first = j * 2u;
        if (first >= n) { return; }
        let v0 = operands(first);
        let r0 = apply(v0.x, v0.y);
        var r1 = 0.0;
        if (first + 1u < n) {
            let v1 = operands(first + 1u);
            r1 = apply(v1.x, v1.y);
        }
        if (DT_OUT == 10u) {
            y[j] = f16_bits(r0) | (f16_bits(r1) << 16u);
        } else {
            y[j] = bf16_bits(r0) | (bf16_bits(r1) << 16u);
        }
    } else {
        if (j >= n) { return; }
        let v = operands(j);
        y[j] = bitcast<u32>(apply(v.x, v.y));
    }
}

// In place over a: y is a (same shape as the output), b is read as usual. f32 only.
@compute @workgroup_size(WG)
fn main_a(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    if (j >= p[0]) { return; }
    let o = offsets(j);
    y[j] = bitcast<u32>(apply(bitcast<f32>(y[j]), bitcast<f32>(b[o.y])));
}

// In place over b. f32 only.
@compute @workgroup_size(WG)
fn main_b(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    if (j >= p[0]) { return; }
    let o = offsets(j);
    y[j] = bitcast<u32>(apply(bitcast<f32>(a[o.x]), bitcast<f32>(y[j])));
}
