// Batched f32 matrix product with broadcast batch dims, optional transposes,
// and Gemm's epilogue: y = alpha * op(A) op(B) + beta * C (C broadcast to [M, N]).
// Each workgroup computes a 64 x 64 tile of one batch, each invocation a 4 x 4
// block, stepping over K in tiles of 16 staged in workgroup memory.
//
// Params (u32 words): [0] M, [1] N, [2] K, [3] batches, [4] batch rank,
// [5..9) output batch dims, [9..13) A batch strides, [13..17) B batch strides
// (elements, 0 where broadcast), [17] alpha (f32 bits), [18] beta (f32 bits),
// [19] C row stride, [20] C column stride (0 where broadcast), [21] tiles along N.

override TRANS_A: bool = false;
override TRANS_B: bool = false;
override HAS_C: bool = false;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;

var<workgroup> sa: array<f32, 1024>; // TK x TM, k-major
var<workgroup> sb: array<f32, 1024>; // TK x TN, k-major

fn batch_offsets(batch: u32) -> vec2<u32> {
    let rank = p[4];
    var rem = batch;
    var oa = 0u;
    var ob = 0u;
    for (var d = 0u; d < rank; d = d + 1u) {
        let dim = rank - 1u - d;
        let size = p[5u + dim];
        let i = rem % size;
        rem = rem / size;
        oa = oa + i * p[9u + dim];
        ob = ob + i * p[13u + dim];
    }
    return vec2<u32>(oa, ob);
}

fn load_a(base: u32, row: u32, k: u32) -> f32 {
    let m = p[0];
    let kk = p[2];
    if (row >= m || k >= kk) { return 0.0; }
    if (TRANS_A) { return a[base + k * m + row]; }
    return a[base + row * kk + k];
}

fn load_b(base: u32, k: u32, col: u32) -> f32 {
    let n = p[1];
    let kk = p[2];
    if (col >= n || k >= kk) { return 0.0; }
    if (TRANS_B) { return b[base + col * kk + k]; }
    return b[base + k * n + col];
}

@compute @workgroup_size(16, 16)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let m = p[0];
    let n = p[1];
    let kk = p[2];
    let tiles_n = p[21];
    let tile = wid.x + wid.y * nwg.x;
    let tiles_m = (m + TM - 1u) / TM;
    let per_batch = tiles_m * tiles_n;
    let batch = tile / per_batch;
    if (batch >= p[3]) { return; }
    let t = tile % per_batch;
    let row0 = (t / tiles_n) * TM;
    let col0 = (t % tiles_n) * TN;
    let off = batch_offsets(batch);
    let flat = lid.y * 16u + lid.x;

    var accum: array<f32, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) { accum[i] = 0.0; }

    for (var k0 = 0u; k0 < kk; k0 = k0 + TK) {
        // 256 invocations stage 1024 elements of each tile: 4 each.
        for (var s = 0u; s < 4u; s = s + 1u) {
            let e = flat + s * 256u;
            let kr = e / TM;
            let r = e % TM;
            sa[e] = load_a(off.x, row0 + r, k0 + kr);
            sb[e] = load_b(off.y, k0 + kr, col0 + r);
        }
        workgroupBarrier();
        for (var k = 0u; k < TK; k = k + 1u) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var i = 0u; i < 4u; i = i + 1u) {
                av[i] = sa[k * TM + lid.y * 4u + i];
                bv[i] = sb[k * TN + lid.x * 4u + i];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var jj = 0u; jj < 4u; jj = jj + 1u) {
                    accum[i * 4u + jj] = accum[i * 4u + jj] + av[i] * bv[jj];
                }
            }
        }
        workgroupBarrier();
    }

    let alpha = bitcast<f32>(p[17]);
    let beta = bitcast<f32>(p[18]);
    for (var i = 0u; i < 4u; i = i + 1u) {
        let row = row0 + lid.y * 4u + i;
        if (row >= m) { continue; }
        for (var jj = 0u; jj < 4u; jj = jj + 1u) {
            let col = col0 + lid.x * 4u + jj;
            if (col >= n) { continue; }
            var v = alpha * accum[i * 4u + jj];
            if (HAS_C) { v = v + beta * c[row * p[19] + col * p[20]]; }
            y[batch * m * n + row * n + col] = v;
        }
    }
}
