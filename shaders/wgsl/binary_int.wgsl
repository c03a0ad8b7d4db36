// Binary elementwise ops with broadcasting on integer and bool tensors:
// 8-, 16- and 32-bit ints computed in 32 bits, and exact 64-bit ints emulated
// as (low, high) pairs of u32 with carries (WGSL has no i64). The output is the
// input type, or bool for comparisons and logic. One invocation owns one 32-bit
// output word (a 64-bit element is computed by both invocations of its words).
//
// Params (u32 words): [0] output elements, [1] rank, [2..10) output shape,
// [10..18) strides of a, [18..26) strides of b.

override WG: u32 = 256u;
// The op: a BINARY_* code (codes.wgsl).
override OP: u32 = 0u;
// ONNX dtype codes: 2 u8, 3 i8, 4 u16, 5 i16, 6 i32, 12 u32, 7 i64, 13 u64, 9 bool.
override DT_IN: u32 = 6u;
override DT_OUT: u32 = 6u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<u32>;
@group(0) @binding(2) var<storage, read> b: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>;

fn bytes_of(dt: u32) -> u32 {
    switch dt {
        case 2u, 3u, 9u: { return 1u; }
        case 4u, 5u: { return 2u; }
        case 7u, 13u: { return 8u; }
        default: { return 4u; }
    }
}

fn signed() -> bool {
    return DT_IN == 3u || DT_IN == 5u || DT_IN == 6u || DT_IN == 7u;
}

fn offsets(i: u32) -> vec2<u32> {
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

// A (sub-word) element as 32 bits, sign-extended for signed types.
fn widen(w: u32, i: u32) -> u32 {
    let width = bytes_of(DT_IN);
    if (width >= 4u) { return w; }
    let per = 4u / width;
    let bits = width * 8u;
    let v = (w >> ((i % per) * bits)) & (0xffffffffu >> (32u - bits));
    if (signed() && (v >> (bits - 1u)) == 1u) {
        return v | (0xffffffffu << bits);
    }
    return v;
}

fn load_a(i: u32) -> vec2<u32> {
    if (bytes_of(DT_IN) == 8u) { return vec2<u32>(a[2u * i], a[2u * i + 1u]); }
    let per = 4u / bytes_of(DT_IN);
    let v = widen(a[i / per], i);
    return vec2<u32>(v, select(0u, 0xffffffffu, signed() && bitcast<i32>(v) < 0));
}

fn load_b(i: u32) -> vec2<u32> {
    if (bytes_of(DT_IN) == 8u) { return vec2<u32>(b[2u * i], b[2u * i + 1u]); }
    let per = 4u / bytes_of(DT_IN);
    let v = widen(b[i / per], i);
    return vec2<u32>(v, select(0u, 0xffffffffu, signed() && bitcast<i32>(v) < 0));
}

fn add64(x: vec2<u32>, z: vec2<u32>) -> vec2<u32> {
    let lo = x.x + z.x;
    return vec2<u32>(lo, x.y + z.y + select(0u, 1u, lo < x.x));
}

fn neg64(x: vec2<u32>) -> vec2<u32> {
    return add64(vec2<u32>(~x.x, ~x.y), vec2<u32>(1u, 0u));
}

fn sub64(x: vec2<u32>, z: vec2<u32>) -> vec2<u32> {
    return add64(x, neg64(z));
}

// Full 32 x 32 -> 64 bit unsigned product.
fn mul32(x: u32, z: u32) -> vec2<u32> {
    let x0 = x & 0xffffu;
    let x1 = x >> 16u;
    let z0 = z & 0xffffu;
    let z1 = z >> 16u;
    let p00 = x0 * z0;
    let p01 = x0 * z1;
    let p10 = x1 * z0;
    let p11 = x1 * z1;
    let mid = p01 + p10;
    let mid_carry = select(0u, 0x10000u, mid < p01);
    let lo = p00 + (mid << 16u);
    let lo_carry = select(0u, 1u, lo < p00);
    return vec2<u32>(lo, p11 + (mid >> 16u) + mid_carry + lo_carry);
}

fn mul64(x: vec2<u32>, z: vec2<u32>) -> vec2<u32> {
    let low = mul32(x.x, z.x);
    return vec2<u32>(low.x, low.y + x.x * z.y + x.y * z.x);
}

fn lt64(x: vec2<u32>, z: vec2<u32>, is_signed: bool) -> bool {
    if (x.y != z.y) {
        if (is_signed) { return bitcast<i32>(x.y) < bitcast<i32>(z.y); }
        return x.y < z.y;
    }
    return x.x < z.x;
}

fn eq64(x: vec2<u32>, z: vec2<u32>) -> bool {
    return x.x == z.x && x.y == z.y;
}

fn shl64(x: vec2<u32>, s: u32) -> vec2<u32> {
    if (s >= 64u) { return vec2<u32>(0u, 0u); }
    if (s >= 32u) { return vec2<u32>(0u, x.x << (s - 32u)); }
    if (s == 0u) { return x; }
    return vec2<u32>(x.x << s, (x.y << s) | (x.x >> (32u - s)));
}

// Right shift: arithmetic (sign-filling) for signed types, logical otherwise.
fn shr64(x: vec2<u32>, s: u32) -> vec2<u32> {
    let fill = select(0u, 0xffffffffu, is_neg(x));
    if (s >= 64u) { return vec2<u32>(fill, fill); }
    if (s >= 32u) {
        let k = s - 32u;
        if (k == 0u) { return vec2<u32>(x.y, fill); }
        return vec2<u32>((x.y >> k) | (fill << (32u - k)), fill);
    }
    if (s == 0u) { return x; }
    return vec2<u32>((x.x >> s) | (x.y << (32u - s)), (x.y >> s) | (fill << (32u - s)));
}

// Unsigned 64-bit division: (quotient, remainder) as vec4 (q.lo, q.hi, r.lo, r.hi).
fn divmod64u(n: vec2<u32>, d: vec2<u32>) -> vec4<u32> {
    if (d.x == 0u && d.y == 0u) { return vec4<u32>(0u, 0u, 0u, 0u); }
    var q = vec2<u32>(0u, 0u);
    var r = vec2<u32>(0u, 0u);
    for (var k = 0u; k < 64u; k = k + 1u) {
        let bit = 63u - k;
        r = shl64(r, 1u);
        let nb = select((n.x >> bit) & 1u, (n.y >> (bit - 32u)) & 1u, bit >= 32u);
        r.x = r.x | nb;
        if (!lt64(r, d, false)) {
            r = sub64(r, d);
            if (bit >= 32u) { q.y = q.y | (1u << (bit - 32u)); } else { q.x = q.x | (1u << bit); }
        }
    }
    return vec4<u32>(q, r);
}

fn is_neg(x: vec2<u32>) -> bool {
    return signed() && bitcast<i32>(x.y) < 0;
}

fn abs64(x: vec2<u32>) -> vec2<u32> {
    return select(x, neg64(x), is_neg(x));
}

// Truncating division and C-style remainder, signed or unsigned.
fn div64(x: vec2<u32>, z: vec2<u32>) -> vec2<u32> {
    let qr = divmod64u(abs64(x), abs64(z));
    let q = qr.xy;
    return select(q, neg64(q), is_neg(x) != is_neg(z));
}

fn rem64(x: vec2<u32>, z: vec2<u32>) -> vec2<u32> {
    let qr = divmod64u(abs64(x), abs64(z));
    let r = qr.zw;
    return select(r, neg64(r), is_neg(x));
}

fn apply(x: vec2<u32>, z: vec2<u32>) -> vec2<u32> {
    let s = signed();
    switch OP {
        case BINARY_ADD: { return add64(x, z); }
        case BINARY_SUB: { return sub64(x, z); }
        case BINARY_MUL: { return mul64(x, z); }
        case BINARY_DIV: { return div64(x, z); }
        // Mod with fmod = 1: the sign of the dividend.
        case BINARY_FMOD: { return rem64(x, z); }
        case BINARY_PRELU: { return select(x, mul64(x, z), is_neg(x)); }
        case BINARY_MAX: { return select(x, z, lt64(x, z, s)); }
        case BINARY_MIN: { return select(x, z, lt64(z, x, s)); }
        // Mod with fmod = 0: the sign of the divisor.
        case BINARY_MOD: {
            let r = rem64(x, z);
            if ((r.x != 0u || r.y != 0u) && (is_neg(r) != is_neg(z))) { return add64(r, z); }
            return r;
        }
        case BINARY_BIT_SHIFT_LEFT: { return shl64(x, select(z.x, 64u, z.y != 0u)); }
        case BINARY_BIT_SHIFT_RIGHT: { return shr64(x, select(z.x, 64u, z.y != 0u)); }
        case BINARY_BITWISE_AND: { return x & z; }
        case BINARY_BITWISE_OR: { return x | z; }
        case BINARY_BITWISE_XOR: { return x ^ z; }
        default: { return x; }
    }
}

fn predicate(x: vec2<u32>, z: vec2<u32>) -> bool {
    let s = signed();
    let bx = x.x != 0u || x.y != 0u;
    let bz = z.x != 0u || z.y != 0u;
    switch OP {
        case BINARY_AND: { return bx && bz; }
        case BINARY_OR: { return bx || bz; }
        case BINARY_XOR: { return bx != bz; }
        case BINARY_EQUAL: { return eq64(x, z); }
        case BINARY_LESS: { return lt64(x, z, s); }
        case BINARY_GREATER: { return lt64(z, x, s); }
        case BINARY_LESS_OR_EQUAL: { return !lt64(z, x, s); }
        case BINARY_GREATER_OR_EQUAL: { return !lt64(x, z, s); }
        default: { return false; }
    }
}

fn result(i: u32) -> vec2<u32> {
    let o = offsets(i);
    return apply(load_a(o.x), load_b(o.y));
}

fn truth(i: u32) -> bool {
    let o = offsets(i);
    return predicate(load_a(o.x), load_b(o.y));
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
            if (first + k < n && truth(first + k)) { word = word | (1u << (k * 8u)); }
        }
        y[j] = word;
        return;
    }
    let width = bytes_of(DT_OUT);
    if (width == 8u) {
        if (j / 2u >= n) { return; }
        let r = result(j / 2u);
        y[j] = select(r.x, r.y, (j & 1u) == 1u);
        return;
    }
    let per = 4u / width;
    let bits = width * 8u;
    let mask = 0xffffffffu >> (32u - bits);
    let first = j * per;
    if (first >= n) { return; }
    var word = 0u;
    for (var k = 0u; k < per; k = k + 1u) {
        if (first + k < n) { word = word | ((result(first + k).x & mask) << (k * bits)); }
    }
    y[j] = word;
}
