// Unary ops on integer and bool tensors (8- to 32-bit in 32 bits, 64-bit as
// (low, high) u32 pairs): Abs, Neg, Sign, Relu, BitwiseNot, Not.
// One invocation owns one 32-bit output word.
//
// Params (u32 words): [0] element count.

override WG: u32 = 256u;
// The function: a UNARY_INT_* code (codes.wgsl); UNARY_INT_NOT is for bool.
override OP: u32 = 0u;
// ONNX dtype codes: 2 u8, 3 i8, 4 u16, 5 i16, 6 i32, 12 u32, 7 i64, 13 u64, 9 bool.
override DT: u32 = 6u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;

fn bytes_of(dt: u32) -> u32 {
    switch dt {
        case 2u, 3u, 9u: { return 1u; }
        case 4u, 5u: { return 2u; }
        case 7u, 13u: { return 8u; }
        default: { return 4u; }
    }
}

fn signed() -> bool {
    return DT == 3u || DT == 5u || DT == 6u || DT == 7u;
}

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}

fn neg64(a: vec2<u32>) -> vec2<u32> {
    return add64(vec2<u32>(~a.x, ~a.y), vec2<u32>(1u, 0u));
}

fn apply(v: vec2<u32>) -> vec2<u32> {
    let negative = signed() && bitcast<i32>(v.y) < 0;
    let zero = v.x == 0u && v.y == 0u;
    switch OP {
        case UNARY_INT_ABS: { return select(v, neg64(v), negative); }
        case UNARY_INT_NEG: { return neg64(v); }
        case UNARY_INT_SIGN: {
            if (zero) { return vec2<u32>(0u, 0u); }
            if (negative) { return vec2<u32>(0xffffffffu, 0xffffffffu); }
            return vec2<u32>(1u, 0u);
        }
        case UNARY_INT_RELU: { return select(v, vec2<u32>(0u, 0u), negative); }
        case UNARY_INT_BITWISE_NOT: { return vec2<u32>(~v.x, ~v.y); }
        case UNARY_INT_NOT: { return vec2<u32>(select(0u, 1u, zero), 0u); }
        default: { return v; }
    }
}

fn load(i: u32) -> vec2<u32> {
    let width = bytes_of(DT);
    if (width == 8u) { return vec2<u32>(x[2u * i], x[2u * i + 1u]); }
    if (width == 4u) {
        let v = x[i];
        return vec2<u32>(v, select(0u, 0xffffffffu, signed() && bitcast<i32>(v) < 0));
    }
    let per = 4u / width;
    let bits = width * 8u;
    var v = (x[i / per] >> ((i % per) * bits)) & (0xffffffffu >> (32u - bits));
    if (signed() && (v >> (bits - 1u)) == 1u) { v = v | (0xffffffffu << bits); }
    return vec2<u32>(v, select(0u, 0xffffffffu, signed() && bitcast<i32>(v) < 0));
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let n = p[0];
    let width = bytes_of(DT);
    if (width == 8u) {
        if (j / 2u >= n) { return; }
        let r = apply(load(j / 2u));
        y[j] = select(r.x, r.y, (j & 1u) == 1u);
        return;
    }
    if (width == 4u) {
        if (j >= n) { return; }
        y[j] = apply(load(j)).x;
        return;
    }
    let per = 4u / width;
    let bits = width * 8u;
    let mask = 0xffffffffu >> (32u - bits);
    let first = j * per;
    if (first >= n) { return; }
    var word = 0u;
    for (var k = 0u; k < per; k = k + 1u) {
        if (first + k < n) { word = word | ((apply(load(first + k)).x & mask) << (k * bits)); }
    }
    y[j] = word;
}
