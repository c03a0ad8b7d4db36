// Cast between f32, f16, bf16, bool and the 8- to 64-bit integers. Floats
// convert through f32, integers through (low, high) u32 pairs, so int64 stays
// exact; float-to-int truncates toward zero and saturates.
// One invocation owns one 32-bit output word.
//
// Params (u32 words): [0] element count.

override WG: u32 = 256u;
// ONNX dtype codes: 1 f32, 10 f16, 16 bf16, 9 bool, 2 u8, 3 i8, 4 u16, 5 i16,
// 6 i32, 12 u32, 7 i64, 13 u64.
override DT_IN: u32 = 1u;
override DT_OUT: u32 = 1u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;

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

fn bytes_of(dt: u32) -> u32 {
    switch dt {
        case 2u, 3u, 9u: { return 1u; }
        case 4u, 5u, 10u, 16u: { return 2u; }
        case 7u, 13u: { return 8u; }
        default: { return 4u; }
    }
}

fn is_float(dt: u32) -> bool {
    return dt == 1u || dt == 10u || dt == 16u;
}

fn is_signed(dt: u32) -> bool {
    return dt == 3u || dt == 5u || dt == 6u || dt == 7u;
}

// Raw bits of element i of the input.
fn raw(i: u32) -> vec2<u32> {
    let width = bytes_of(DT_IN);
    if (width == 8u) { return vec2<u32>(x[2u * i], x[2u * i + 1u]); }
    if (width == 4u) { return vec2<u32>(x[i], 0u); }
    let per = 4u / width;
    let bits = width * 8u;
    return vec2<u32>((x[i / per] >> ((i % per) * bits)) & (0xffffffffu >> (32u - bits)), 0u);
}

fn as_float(r: vec2<u32>) -> f32 {
    switch DT_IN {
        case 1u: { return bitcast<f32>(r.x); }
        case 10u: { return unpack2x16float(r.x).x; }
        case 16u: { return bitcast<f32>(r.x << 16u); }
        default: {
            let v = as_int(r);
            if (is_signed(DT_IN) && bitcast<i32>(v.y) < 0) {
                let m = vec2<u32>(~v.x, ~v.y);
                return -(f32(m.y) * 4294967296.0 + f32(m.x) + 1.0);
            }
            return f32(v.y) * 4294967296.0 + f32(v.x);
        }
    }
}

// The input as a 64-bit integer (sign-extended), for integer and bool inputs.
fn as_int(r: vec2<u32>) -> vec2<u32> {
    let width = bytes_of(DT_IN);
    if (width == 8u) { return r; }
    let bits = width * 8u;
    var v = r.x;
    if (is_signed(DT_IN) && (v >> (bits - 1u)) == 1u && bits < 32u) { v = v | (0xffffffffu << bits); }
    return vec2<u32>(v, select(0u, 0xffffffffu, is_signed(DT_IN) && bitcast<i32>(v) < 0));
}

// A float truncated toward zero into 64 bits, saturating.
fn float_to_int(f: f32) -> vec2<u32> {
    if (f != f) { return vec2<u32>(0u, 0u); }
    let t = trunc(f);
    let a = abs(t);
    if (a >= 9223372036854775807.0) {
        if (t < 0.0) { return vec2<u32>(0u, 0x80000000u); }
        return vec2<u32>(0xffffffffu, 0x7fffffffu);
    }
    let hi = floor(a / 4294967296.0);
    let lo = a - hi * 4294967296.0;
    var v = vec2<u32>(u32(lo), u32(hi));
    if (t < 0.0) {
        v = vec2<u32>(~v.x, ~v.y);
        let l = v.x + 1u;
        v = vec2<u32>(l, v.y + select(0u, 1u, l == 0u));
    }
    return v;
}

fn bf16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if (v != v) { return 0x7fc0u; }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

// Element i converted to the output type, as raw bits (low, high).
fn convert(i: u32) -> vec2<u32> {
    let r = raw(i);
    if (DT_OUT == 9u) {
        if (is_float(DT_IN)) { return vec2<u32>(select(0u, 1u, as_float(r) != 0.0), 0u); }
        return vec2<u32>(select(0u, 1u, r.x != 0u || r.y != 0u), 0u);
    }
    if (is_float(DT_OUT)) {
        let f = as_float(r);
        switch DT_OUT {
            case 10u: { return vec2<u32>(f16_bits(f), 0u); }
            case 16u: { return vec2<u32>(bf16_bits(f), 0u); }
            default: { return vec2<u32>(bitcast<u32>(f), 0u); }
        }
    }
    var v: vec2<u32>;
    if (is_float(DT_IN)) {
        let f = as_float(r);
        // Truncated toward zero; values beyond a narrow target wrap (ONNX leaves
        // out-of-range casts undefined).
        v = float_to_int(f);
    } else {
        v = as_int(r);
    }
    return v;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let n = p[0];
    let width = bytes_of(DT_OUT);
    if (width == 8u) {
        if (j / 2u >= n) { return; }
        let v = convert(j / 2u);
        y[j] = select(v.x, v.y, (j & 1u) == 1u);
        return;
    }
    if (width == 4u) {
        if (j >= n) { return; }
        y[j] = convert(j).x;
        return;
    }
    let per = 4u / width;
    let bits = width * 8u;
    let mask = 0xffffffffu >> (32u - bits);
    let first = j * per;
    if (first >= n) { return; }
    var word = 0u;
    for (var k = 0u; k < per; k = k + 1u) {
        if (first + k < n) { word = word | ((convert(first + k).x & mask) << (k * bits)); }
    }
    y[j] = word;
}
