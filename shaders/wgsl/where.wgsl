// Where(condition, x, y) with broadcasting, for any element width.
// One invocation owns one 32-bit output word (or one 8-byte element).
//
// Params (u32 words): [0] output elements, [1] rank, [2..10) output shape,
// [10..18) condition strides, [18..26) x strides, [26..34) y strides.

override WG: u32 = 256u;
// Element width in bytes of x, y and the output: 1, 2, 4 or 8.
override W: u32 = 4u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> c: array<u32>;
@group(0) @binding(2) var<storage, read> x: array<u32>;
@group(0) @binding(3) var<storage, read> z: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<u32>;

fn offsets(i: u32) -> vec3<u32> {
    let rank = p[1];
    var rem = i;
    var o = vec3<u32>(0u, 0u, 0u);
    for (var d = 0u; d < rank; d = d + 1u) {
        let dim = rank - 1u - d;
        let size = p[2u + dim];
        let k = rem % size;
        rem = rem / size;
        o = o + k * vec3<u32>(p[10u + dim], p[18u + dim], p[26u + dim]);
    }
    return o;
}

fn cond(i: u32) -> bool {
    return ((c[i >> 2u] >> ((i & 3u) * 8u)) & 0xffu) != 0u;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    let n = p[0];
    if (W >= 4u) {
        let words = max(W / 4u, 1u);
        let e = j / words;
        if (e >= n) { return; }
        let o = offsets(e);
        let h = j % words;
        if (cond(o.x)) { y[j] = x[o.y * words + h]; } else { y[j] = z[o.z * words + h]; }
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
        let o = offsets(i);
        var v = 0u;
        if (cond(o.x)) {
            v = (x[o.y / per] >> ((o.y % per) * bits)) & mask;
        } else {
            v = (z[o.z / per] >> ((o.z % per) * bits)) & mask;
        }
        word = word | (v << (k * bits));
    }
    y[j] = word;
}
