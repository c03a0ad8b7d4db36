// Copies where each output element reads one computed source element or a
// fill value: Gather, GatherElements and GatherND (int32 or int64 indices;
// negative indices count from the end, out-of-range ones read zeros) and Pad.
// Any element width. One invocation owns one 32-bit output word (or one
// 8-byte element).
//
// Params (u32 words), [0] always the output element count:
// - Gather: [1] axis size, [2] inner size (elements after the axis), [3] index count.
// - GatherElements: [1] rank, [2..10) output (= indices) dims, [10..18) data
//   strides, [18] axis, [19] axis size.
// - GatherND: [1] elements per gathered slice, [2] tuple length, [3] tuples per
//   batch, [4] data elements per batch, [5..13) data dims the tuple indexes,
//   [13..21) their strides.
// - Pad: [1] rank, [2..10) output dims, [10..18) input dims, [18..26) pads
//   before (i32, negative crops), [26] mode (0 constant, 1 reflect, 2 edge,
//   3 wrap), [27..29) the fill element's bits (low word first).

override WG: u32 = 256u;
// Element width in bytes: 1, 2, 4 or 8.
override W: u32 = 4u;
// Indices are int64 (two words each) rather than int32.
override IDX64: bool = true;
// 0 Gather, 1 GatherElements, 2 GatherND, 3 Pad.
override MODE: u32 = 0u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> idx: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<u32>;

const NONE: u32 = 0xffffffffu;

fn index(k: u32) -> i32 {
    if (IDX64) {
        let lo = idx[2u * k];
        let hi = idx[2u * k + 1u];
        // Values beyond 32 bits are out of range for any axis a GPU buffer can hold.
        if (hi == 0u && lo < 0x80000000u) { return i32(lo); }
        if (hi == 0xffffffffu && lo >= 0x80000000u) { return bitcast<i32>(lo); }
        return -2147483647;
    }
    return bitcast<i32>(idx[k]);
}

// Index k resolved against a dim of `size`, or NONE.
fn resolve(k: u32, size: u32) -> u32 {
    var v = index(k);
    if (v < 0) { v = v + i32(size); }
    if (v < 0 || u32(v) >= size) { return NONE; }
    return u32(v);
}

fn source_elements(i: u32) -> u32 {
    let rank = p[1];
    let axis = p[18];
    var rem = i;
    var s = 0u;
    for (var d = 0u; d < rank; d = d + 1u) {
        let dim = rank - 1u - d;
        var c = rem % p[2u + dim];
        rem = rem / p[2u + dim];
        if (dim == axis) {
            c = resolve(i, p[19]);
            if (c == NONE) { return NONE; }
        }
        s = s + c * p[10u + dim];
    }
    return s;
}

fn source_nd(i: u32) -> u32 {
    let inner = p[1];
    let rk = p[2];
    let j = i / inner;
    var s = (j / max(p[3], 1u)) * p[4] + i % inner;
    for (var t = 0u; t < rk; t = t + 1u) {
        let c = resolve(j * rk + t, p[5u + t]);
        if (c == NONE) { return NONE; }
        s = s + c * p[13u + t];
    }
    return s;
}

// Pad: the input coordinate read at padded coordinate c of an axis of n, or NONE.
fn pad_coord(c: i32, n: i32) -> u32 {
    if (c >= 0 && c < n) { return u32(c); }
    if (n == 0) { return NONE; }
    switch p[26] {
        case 1u: {
            if (n == 1) { return 0u; }
            let period = 2 * (n - 1);
            let r = ((c % period) + period) % period;
            return u32(select(period - r, r, r < n));
        }
        case 2u: { return u32(clamp(c, 0, n - 1)); }
        case 3u: { return u32(((c % n) + n) % n); }
        default: { return NONE; }
    }
}

fn source_pad(i: u32) -> u32 {
    let rank = p[1];
    var rem = i;
    var s = 0u;
    var stride = 1u;
    for (var d = 0u; d < rank; d = d + 1u) {
        let dim = rank - 1u - d;
        let c = i32(rem % p[2u + dim]) - bitcast<i32>(p[18u + dim]);
        rem = rem / p[2u + dim];
        let q = pad_coord(c, i32(p[10u + dim]));
        if (q == NONE) { return NONE; }
        s = s + q * stride;
        stride = stride * p[10u + dim];
    }
    return s;
}

// The fill bits of output word j (Pad's value; zero for the gathers).
fn fill_word(j: u32) -> u32 {
    if (MODE != 3u) { return 0u; }
    if (W == 8u) { return p[27u + (j & 1u)]; }
    return p[27];
}

fn source(i: u32) -> u32 {
    if (MODE == 1u) { return source_elements(i); }
    if (MODE == 2u) { return source_nd(i); }
    if (MODE == 3u) { return source_pad(i); }
    let dim = p[1];
    let inner = p[2];
    let count = p[3];
    let outer = i / (count * inner);
    let r = i % (count * inner);
    var k = index(r / inner);
    if (k < 0) { k = k + i32(dim); }
    if (k < 0 || u32(k) >= dim) { return NONE; }
    return (outer * dim + u32(k)) * inner + r % inner;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let n = p[0];
    if (W >= 4u) {
        let words = max(W / 4u, 1u);
        let e = j / words;
        if (e >= n) { return; }
        let s = source(e);
        if (s == NONE) { y[j] = fill_word(j); return; }
        y[j] = x[s * words + j % words];
        return;
    }
    // Overrides are constant-folded even in dead branches: keep every shift valid for W = 4, 8.
    let per = max(4u / W, 1u);
    let bits = select(8u, W * 8u, W < 4u);
    let mask = 0xffffffffu >> (32u - bits);
    let first = j * per;
    if (first >= n) { return; }
    var word = 0u;
    for (var k = 0u; k < per; k = k + 1u) {
        let i = first + k;
        if (i >= n) { break; }
        let s = source(i);
        if (s == NONE) {
            word = word | ((fill_word(j) & mask) << (k * bits));
            continue;
        }
        word = word | (((x[s / per] >> ((s % per) * bits)) & mask) << (k * bits));
    }
    y[j] = word;
}
