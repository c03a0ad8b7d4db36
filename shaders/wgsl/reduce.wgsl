// Reductions of f32 tensors over any set of axes, one workgroup per output
// element: Reduce{Sum,Mean,Max,Min,Prod,L1,L2,LogSum,LogSumExp,SumSquare}, and
// ArgMax / ArgMin (int64 output, first or last index on ties).
//
// Params (u32 words): [0] output elements, [1] reduced elements per output,
// [2] kept rank, [3] reduced rank, [4..12) kept dims, [12..20) their input strides,
// [20..28) reduced dims, [28..36) their input strides, [36] select-last-index flag,
// [37] +infinity as f32 bits (WGSL constants may not be infinite).

override WG: u32 = 256u;
// A REDUCE_* code (codes.wgsl).
override OP: u32 = 0u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<u32>;

var<workgroup> acc: array<f32, WG>;
var<workgroup> arg: array<u32, WG>;

// ln(v) with ln(0) = -inf exactly (SwiftShader's log(0) is about -88). The
// infinity is built from v's bits so that it is not a constant expression.
fn ln(v: f32) -> f32 {
    if (v == 0.0) { return bitcast<f32>((bitcast<u32>(v) & 0u) | 0xff800000u); }
    return log(v);
}

fn base_of(o: u32) -> u32 {
    let rank = p[2];
    var rem = o;
    var off = 0u;
    for (var d = 0u; d < rank; d = d + 1u) {
        let dim = rank - 1u - d;
        off = off + (rem % p[4u + dim]) * p[12u + dim];
        rem = rem / p[4u + dim];
    }
    return off;
}

fn offset_of(r: u32) -> u32 {
    let rank = p[3];
    var rem = r;
    var off = 0u;
    for (var d = 0u; d < rank; d = d + 1u) {
        let dim = rank - 1u - d;
        off = off + (rem % p[20u + dim]) * p[28u + dim];
        rem = rem / p[20u + dim];
    }
    return off;
}

fn identity() -> f32 {
    let inf = bitcast<f32>(p[37]);
    switch OP {
        case REDUCE_MAX, REDUCE_ARG_MAX: { return -inf; }
        case REDUCE_MIN, REDUCE_ARG_MIN: { return inf; }
        case REDUCE_PROD: { return 1.0; }
        default: { return 0.0; }
    }
}

fn combine(a: f32, b: f32) -> f32 {
    switch OP {
        case REDUCE_MAX: { if (a != a || b != b) { return a + b; } return max(a, b); }
        case REDUCE_MIN: { if (a != a || b != b) { return a + b; } return min(a, b); }
        case REDUCE_PROD: { return a * b; }
        default: { return a + b; }
    }
}

fn term(v: f32, peak: f32) -> f32 {
    switch OP {
        case REDUCE_L1: { return abs(v); }
        case REDUCE_L2, REDUCE_SUM_SQUARE: { return v * v; }
        case REDUCE_LOG_SUM_EXP: { return exp(v - peak); }
        default: { return v; }
    }
}

// Tree-reduces acc[0..WG) into acc[0] (with arg for Arg*).
fn tree(lid: u32) {
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        workgroupBarrier();
        if (lid < s) {
            if (OP == REDUCE_ARG_MAX || OP == REDUCE_ARG_MIN) {
                let a = acc[lid];
                let b = acc[lid + s];
                let ia = arg[lid];
                let ib = arg[lid + s];
                var better = false;
                if (OP == REDUCE_ARG_MAX) { better = b > a; } else { better = b < a; }
                if (b == a) {
                    if (p[36] == 1u) { better = ib > ia; } else { better = ib < ia; }
                }
                // An empty slot (no index) never wins.
                if (ib != 0xffffffffu && (ia == 0xffffffffu || better)) { acc[lid] = b; arg[lid] = ib; }
            } else {
                acc[lid] = combine(acc[lid], acc[lid + s]);
            }
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let o = wid.x + wid.y * nwg.x;
    if (o >= p[0]) { return; }
    let count = p[1];
    let base = base_of(o);
    var peak = 0.0;
    if (OP == REDUCE_LOG_SUM_EXP) {
        var m = identity();
        for (var r = lid; r < count; r = r + WG) { m = max(m, x[base + offset_of(r)]); }
        acc[lid] = m;
        for (var s = WG / 2u; s > 0u; s = s / 2u) {
            workgroupBarrier();
            if (lid < s) { acc[lid] = max(acc[lid], acc[lid + s]); }
        }
        workgroupBarrier();
        peak = acc[0];
        workgroupBarrier();
        if (abs(peak) == bitcast<f32>(p[37])) { peak = 0.0; }
    }
    if (OP == REDUCE_ARG_MAX || OP == REDUCE_ARG_MIN) {
        var best = identity();
        var at = 0xffffffffu;
        for (var r = lid; r < count; r = r + WG) {
            let v = x[base + offset_of(r)];
            var better = false;
            if (OP == REDUCE_ARG_MAX) { better = v > best; } else { better = v < best; }
            if (at == 0xffffffffu || better || (v == best && p[36] == 1u)) { best = v; at = r; }
        }
        acc[lid] = best;
        arg[lid] = at;
        tree(lid);
        if (lid == 0u) {
            y[2u * o] = arg[0];
            y[2u * o + 1u] = 0u;
        }
        return;
    }
    var a = identity();
    for (var r = lid; r < count; r = r + WG) { a = combine(a, term(x[base + offset_of(r)], peak)); }
    acc[lid] = a;
    tree(lid);
    if (lid == 0u) {
        var v = acc[0];
        switch OP {
            case REDUCE_MEAN: { v = v / f32(count); }
            case REDUCE_L2: { v = sqrt(v); }
            case REDUCE_LOG_SUM: { v = ln(v); }
            case REDUCE_LOG_SUM_EXP: { v = peak + ln(v); }
            default: {}
        }
        y[o] = bitcast<u32>(v);
    }
}
