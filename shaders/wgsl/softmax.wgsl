// Softmax, LogSoftmax and Hardmax of f32 tensors along one axis. A row is
// `len` elements `inner` apart and is reduced by LANES invocations (a power of
// two the host fits to the row, 32 to WG); a workgroup takes WG / LANES rows,
// so short rows (attention scores) share one workgroup and its barriers.
//
// Softmax and LogSoftmax make one pass for the row's maximum and its sum of
// exponentials together (each invocation keeps a running (max, sum) and the
// pairs are merged in one tree), then one pass to write: half the barriers of
// a max reduction followed by a sum reduction. Hardmax reduces (max, argmax).
//
// Params (u32 words): [0] rows, [1] len, [2] inner.

override WG: u32 = 256u;
override LANES: u32 = 256u;
// A SOFTMAX_* code (codes.wgsl).
override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

var<workgroup> peaks: array<f32, WG>;
// The sum of exp(v - peak) (Softmax) or the argmax (Hardmax, as bits).
var<workgroup> sums: array<f32, WG>;
// Whether the invocation saw any element.
var<workgroup> seen: array<u32, WG>;

fn at(row: u32, k: u32) -> u32 {
    let len = p[1];
    let inner = p[2];
    return (row / inner) * len * inner + row % inner + k * inner;
}

// The (max, sum of exp(v - max)) of two partial pairs. Equal maxima add
// directly, so infinite maxima never meet as inf - inf.
fn merge(ma: f32, sa: f32, mb: f32, sb: f32) -> vec2<f32> {
    if (ma == mb) { return vec2<f32>(ma, sa + sb); }
    if (ma > mb) { return vec2<f32>(ma, sa + sb * exp(mb - ma)); }
    return vec2<f32>(mb, sa * exp(ma - mb) + sb);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let lane = lid % LANES;
    // This row's first slot in the workgroup arrays.
    let seg = lid - lane;
    let row = (wid.x + wid.y * nwg.x) * (WG / LANES) + lid / LANES;
    // Rows past the end still reach every barrier: barriers need uniform control flow.
    let valid = row < p[0];
    let len = select(0u, p[1], valid);
    var m = 0.0;
    var s = 0.0;
    var any = 0u;
    for (var k = lane; k < len; k = k + LANES) {
        let v = x[at(row, k)];
        if (OP == SOFTMAX_HARDMAX) {
            // First maximum wins: indices only grow within an invocation.
            if (any == 0u || v > m) { m = v; s = bitcast<f32>(k); }
        } else if (any == 0u) {
            m = v;
            s = 1.0;
        } else {
            let r = merge(m, s, v, 1.0);
            m = r.x;
            s = r.y;
        }
        any = 1u;
    }
    peaks[lid] = m;
    sums[lid] = s;
    seen[lid] = any;
    for (var half = LANES / 2u; half > 0u; half = half / 2u) {
        workgroupBarrier();
        if (lane < half && seen[lid + half] != 0u) {
            let mb = peaks[lid + half];
            let sb = sums[lid + half];
            if (seen[lid] == 0u) {
                peaks[lid] = mb;
                sums[lid] = sb;
                seen[lid] = 1u;
            } else if (OP == SOFTMAX_HARDMAX) {
                let ib = bitcast<u32>(sb);
                if (mb > peaks[lid] || (mb == peaks[lid] && ib < bitcast<u32>(sums[lid]))) {
                    peaks[lid] = mb;
                    sums[lid] = sb;
                }
            } else {
                let r = merge(peaks[lid], sums[lid], mb, sb);
                peaks[lid] = r.x;
                sums[lid] = r.y;
            }
        }
    }
    workgroupBarrier();
    let peak = peaks[seg];
    let total = sums[seg];
    if (OP == SOFTMAX_HARDMAX) {
        let first = bitcast<u32>(total);
        for (var k = lane; k < len; k = k + LANES) { y[at(row, k)] = select(0.0, 1.0, k == first); }
        return;
    }
    for (var k = lane; k < len; k = k + LANES) {
        let v = x[at(row, k)];
        if (OP == SOFTMAX_LOG_SOFTMAX) { y[at(row, k)] = v - peak - log(total); } else { y[at(row, k)] = exp(v - peak) / total; }
    }
}
