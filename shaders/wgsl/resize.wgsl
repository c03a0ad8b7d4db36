// Resize and Upsample on f32 tensors from per-axis tap tables planned on the
// host (onyx-core's ResizePlan): output element i sums, over every
// combination of its axes' taps, the product of the tap weights times the
// input element at the taps' indices. One invocation per output element.
//
// Params (u32 words): [0] output elements, [1] rank, [2..10) output dims,
// [10..18) input strides, [18..26) taps per axis, [26..34) each axis' table
// offset (in words, from the start of p), [34] extrapolation value (f32 bits).
// An axis' table with n output coordinates and t taps holds n * t input
// indices, then n * t weights (f32 bits), then n outside-the-crop-box flags.

override WG: u32 = 256u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p[0]) { return; }
    let rank = p[1];
    var c: array<u32, 8>;
    var rem = i;
    var combos = 1u;
    for (var k = 0u; k < rank; k = k + 1u) {
        let d = rank - 1u - k;
        c[d] = rem % p[2u + d];
        rem = rem / p[2u + d];
        let n = p[2u + d];
        let taps = p[18u + d];
        if (p[p[26u + d] + 2u * n * taps + c[d]] != 0u) {
            y[i] = bitcast<f32>(p[34]);
            return;
        }
        combos = combos * taps;
    }
    var sum = 0.0;
    for (var combo = 0u; combo < combos; combo = combo + 1u) {
        var r = combo;
        var offset = 0u;
        var w = 1.0;
        for (var d = 0u; d < rank; d = d + 1u) {
            let taps = p[18u + d];
            let t = r % taps;
            r = r / taps;
            let k = c[d] * taps + t;
            let table = p[26u + d];
            offset = offset + p[table + k] * p[10u + d];
            w = w * bitcast<f32>(p[table + p[2u + d] * taps + k]);
        }
        if (w != 0.0) {
            sum = sum + w * x[offset];
        }
    }
    y[i] = sum;
}
