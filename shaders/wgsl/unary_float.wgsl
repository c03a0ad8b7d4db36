// Unary elementwise functions over float tensors (f32, and f16 / bf16 storage
// computed in f32). One invocation owns one 32-bit output word: one f32, two
// halves, or four bools (IsNaN / IsInf).
//
// Params (u32 words): [0] element count, [1] alpha (f32 bits), [2] beta (f32 bits),
// [3] gamma (f32 bits).

override WG: u32 = 256u;
// The function: a UNARY_* code (codes.wgsl).
override OP: u32 = 0u;
// ONNX dtype codes: 1 f32, 10 f16, 16 bf16; the output may also be 9 (bool).
override DT_IN: u32 = 1u;
override DT_OUT: u32 = 1u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;

// f32 to f16 bits, rounding to nearest even. pack2x16float is indeterminate
// outside f16's finite range (SwiftShader gives NaN), so overflow, infinities
// and NaN are spelled out.
// ln(v) with ln(0) = -inf exactly (SwiftShader's log(0) is about -88). The
// infinity is built from v's bits so that it is not a constant expression.
fn ln(v: f32) -> f32 {
    if (v == 0.0) { return bitcast<f32>((bitcast<u32>(v) & 0u) | 0xff800000u); }
    return log(v);
}

fn f16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    let sign = (b >> 16u) & 0x8000u;
    let mag = b & 0x7fffffffu;
    if (mag > 0x7f800000u) { return 0x7e00u; }
    if (mag >= 0x477ff000u) { return sign | 0x7c00u; }
    if (mag > 0x477fe000u) { return sign | 0x7bffu; }
    return pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu;
}

fn per_word(dt: u32) -> u32 {
    switch dt {
        case 10u, 16u: { return 2u; }
        case 9u, 2u, 3u: { return 4u; }
        default: { return 1u; }
    }
}

fn load(i: u32) -> f32 {
    switch DT_IN {
        case 10u: { return unpack2x16float(x[i >> 1u])[i & 1u]; }
        case 16u: { return bitcast<f32>(((x[i >> 1u] >> ((i & 1u) * 16u)) & 0xffffu) << 16u); }
        default: { return bitcast<f32>(x[i]); }
    }
}

fn bf16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if (v != v) { return 0x7fc0u; }
    // Round to nearest even on the 16 dropped bits.
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn erf(v: f32) -> f32 {
    // Abramowitz & Stegun 7.1.26 refined with one extra term: |error| < 1.5e-7.
    let s = sign(v);
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    return s * (1.0 - poly * exp(-a * a));
}

// log(1 + e) without losing e when it is tiny (Kahan's trick).
fn log1p(e: f32) -> f32 {
    let u = 1.0 + e;
    if (u == 1.0) { return e; }
    return log(u) * e / (u - 1.0);
}

fn softplus(v: f32) -> f32 {
    if (v > 0.0) { return v + log1p(exp(-v)); }
    return log1p(exp(v));
}

// tanh that saturates instead of dividing infinities (some drivers return NaN),
// and keeps full relative precision near zero, where exp-based formulas cancel.
fn tanh_safe(v: f32) -> f32 {
    let a = abs(v);
    if (a > 15.0) { return sign(v); }
    if (a < 0.125) {
        let v2 = v * v;
        return v * (1.0 + v2 * (-1.0 / 3.0 + v2 * (2.0 / 15.0 + v2 * (-17.0 / 315.0))));
    }
    return tanh(v);
}

fn sigmoid(v: f32) -> f32 {
    if (v >= 0.0) { return 1.0 / (1.0 + exp(-v)); }
    let e = exp(v);
    return e / (1.0 + e);
}

fn round_even(v: f32) -> f32 {
    let r = round(v);
    // WGSL round() already rounds half to even; keep the explicit form for clarity.
    return r;
}

fn is_nan(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn is_inf(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) == 0x7f800000u;
}

fn apply(v: f32) -> f32 {
    let alpha = bitcast<f32>(p[1]);
    let beta = bitcast<f32>(p[2]);
    let gamma = bitcast<f32>(p[3]);
    switch OP {
        case UNARY_ABS: { return abs(v); }
        case UNARY_NEG: { return -v; }
        case UNARY_EXP: { return exp(v); }
        case UNARY_LOG: { return ln(v); }
        case UNARY_SQRT: { return sqrt(v); }
        case UNARY_RECIPROCAL: { return 1.0 / v; }
        case UNARY_FLOOR: { return floor(v); }
        case UNARY_CEIL: { return ceil(v); }
        case UNARY_ROUND: { return round_even(v); }
        case UNARY_SIGN: { if (is_nan(v)) { return v; } return sign(v); }
        case UNARY_SIN: { return sin(v); }
        case UNARY_COS: { return cos(v); }
        case UNARY_TAN: { return tan(v); }
        case UNARY_ASIN: { return asin(v); }
        case UNARY_ACOS: { return acos(v); }
        case UNARY_ATAN: { return atan(v); }
        case UNARY_SINH: { return sinh(v); }
        case UNARY_COSH: { return cosh(v); }
        case UNARY_ASINH: { return asinh(v); }
        case UNARY_ACOSH: { return acosh(v); }
        case UNARY_ATANH: { return atanh(v); }
        case UNARY_RELU: { return select(v, 0.0, v < 0.0); }
        case UNARY_SIGMOID: { return sigmoid(v); }
        case UNARY_TANH: { return tanh_safe(v); }
        case UNARY_ERF: { return erf(v); }
        case UNARY_SOFTPLUS: { return softplus(v); }
        case UNARY_SOFTSIGN: { return v / (1.0 + abs(v)); }
        case UNARY_LEAKY_RELU: { return select(v, alpha * v, v < 0.0); }
        case UNARY_ELU: { return select(v, alpha * (exp(v) - 1.0), v < 0.0); }
        case UNARY_SELU: { return select(gamma * alpha * (exp(v) - 1.0), gamma * v, v > 0.0); }
        case UNARY_HARD_SIGMOID: { return clamp(alpha * v + beta, 0.0, 1.0); }
        case UNARY_HARD_SWISH: { return v * clamp(v / 6.0 + 0.5, 0.0, 1.0); }
        case UNARY_CELU: { return max(v, 0.0) + min(0.0, alpha * (exp(v / alpha) - 1.0)); }
        case UNARY_THRESHOLDED_RELU: { return select(0.0, v, v > alpha); }
        case UNARY_MISH: { return v * tanh_safe(softplus(v)); }
        case UNARY_GELU: { return 0.5 * v * (1.0 + erf(v * 0.70710678118654752)); }
        case UNARY_GELU_TANH: {
            let k = 0.7978845608028654;
            return 0.5 * v * (1.0 + tanh_safe(k * (v + 0.044715 * v * v * v)));
        }
        case UNARY_SHRINK: {
            if (v < -beta) { return v + alpha; }
            if (v > beta) { return v - alpha; }
            return 0.0;
        }
        // Clip: alpha = min, beta = max.
        case UNARY_CLIP: { return min(max(v, alpha), beta); }
        // Scale by alpha (Mean's final division).
        case UNARY_SCALE: { return v * alpha; }
        default: { return v; }
    }
}

fn predicate(v: f32) -> bool {
    switch OP {
        case UNARY_IS_NAN: { return is_nan(v); }
        // IsInf: alpha > 0 detects +inf, beta > 0 detects -inf.
        case UNARY_IS_INF: {
            let pos = bitcast<f32>(p[1]) > 0.0;
            let neg = bitcast<f32>(p[2]) > 0.0;
            return is_inf(v) && ((v > 0.0 && pos) || (v < 0.0 && neg));
        }
        default: { return false; }
    }
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let n = p[0];
    let per = per_word(DT_OUT);
    let first = j * per;
    if (first >= n) {
        return;
    }
    if (DT_OUT == 9u) {
        var word = 0u;
        for (var k = 0u; k < 4u; k = k + 1u) {
            if (first + k < n && predicate(load(first + k))) {
                word = word | (1u << (k * 8u));
            }
        }
        y[j] = word;
    } else if (DT_OUT == 10u) {
        let a = apply(load(first));
        var b = 0.0;
        if (first + 1u < n) { b = apply(load(first + 1u)); }
        y[j] = f16_bits(a) | (f16_bits(b) << 16u);
    } else if (DT_OUT == 16u) {
        let a = bf16_bits(apply(load(first)));
        var b = 0u;
        if (first + 1u < n) { b = bf16_bits(apply(load(first + 1u))); }
        y[j] = a | (b << 16u);
    } else {
        y[j] = bitcast<u32>(apply(load(first)));
    }
}

// In place: x and y are the same f32 buffer (bound once, as y).
@compute @workgroup_size(WG)
fn main_inplace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    if (j >= p[0]) { return; }
    y[j] = bitcast<u32>(apply(bitcast<f32>(y[j])));
}
