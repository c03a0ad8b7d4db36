// Softmax, LogSoftmax and Hardmax of f32 tensors along one axis, one
// workgroup per row. A row is `len` elements `inner` apart.
//
// Params (u32 words): [0] rows, [1] len, [2] inner.

override WG: u32 = 256u;
// 0 Softmax, 1 LogSoftmax, 2 Hardmax.
override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

var<workgroup> acc: array<f32, WG>;
var<workgroup> arg: array<u32, WG>;

fn at(row: u32, k: u32) -> u32 {
    let len = p[1];
    let inner = p[2];
    return (row / inner) * len * inner + row % inner + k * inner;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p[0]) { return; }
    let len = p[1];
    var m = 0.0;
    var mi = 0xffffffffu;
    for (var k = lid; k < len; k = k + WG) {
        let v = x[at(row, k)];
        if (v > m || mi == 0xffffffffu) { m = v; mi = k; }
    }
    acc[lid] = m;
    arg[lid] = mi;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) {
            let b = acc[lid + s];
            let ib = arg[lid + s];
            if (ib != 0xffffffffu && (arg[lid] == 0xffffffffu || b > acc[lid] || (b == acc[lid] && ib < arg[lid]))) {
                acc[lid] = b;
                arg[lid] = ib;
            }
        }
    }
    workgroupBarrier();
    let peak = acc[0];
    let first = arg[0];
    workgroupBarrier();
    if (OP == 2u) {
        for (var k = lid; k < len; k = k + WG) { y[at(row, k)] = select(0.0, 1.0, k == first); }
        return;
    }
    var sum = 0.0;
    for (var k = lid; k < len; k = k + WG) { sum = sum + exp(x[at(row, k)] - peak); }
    acc[lid] = sum;
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) { acc[lid] = acc[lid] + acc[lid + s]; }
    }
    workgroupBarrier();
    let total = acc[0];
    for (var k = lid; k < len; k = k + WG) {
        let v = x[at(row, k)];
        if (OP == 1u) { y[at(row, k)] = v - peak - log(total); } else { y[at(row, k)] = exp(v - peak) / total; }
    }
}
