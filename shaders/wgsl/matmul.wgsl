// Batched f32 matrix product with broadcast batch dims, optional transposes,
// and Gemm's epilogue: y = alpha * op(A) op(B) + beta * C (C broadcast to [M, N]).
// With CONV it is a convolution as an implicit GEMM: A is the weights of one
// group [M/group, C/group * kernel], B the input's patches (im2col, computed
// while staging, never stored), C the bias, and a "batch" is one (image, group).
//
// Each workgroup of 256 invocations computes a 128 x 128 tile of one batch.
// Invocation (tx, ty) of the 16 x 16 grid owns an 8 x 8 block: rows
// 4ty..4ty+3 and 64+4ty..64+4ty+3, columns likewise with tx. Splitting the
// block in two halves 64 apart keeps the workgroup-memory reads of one warp on
// consecutive vec4s, so each step over k costs four vec4 reads for 64 FMAs.
// K is walked in steps of 8 through two workgroup buffers: the next step's
// tiles are read from global memory into registers while the current step is
// multiplied, so one barrier per step suffices.
//
// Params (u32 words): [0] M, [1] N, [2] K, [3] batches, [4] batch rank,
// [5..9) output batch dims, [9..13) A batch strides, [13..17) B batch strides
// (elements, 0 where broadcast), [17] alpha (f32 bits), [18] beta (f32 bits),
// [19] C row stride, [20] C column stride (0 where broadcast), [21] tiles along N.
// CONV adds: [22] groups, [23..26) input dims, [26..29) kernel dims,
// [29..32) output dims, [32..35) strides, [35..38) pads before, [38..41)
// dilations (1-d and 2-d padded to 3-d in front); B's batch stride for the
// group is the offset of the group's first input channel.

override TRANS_A: bool = false;
override TRANS_B: bool = false;
override HAS_C: bool = false;
override CONV: bool = false;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read> c: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

const BM: u32 = 128u;
const BN: u32 = 128u;
const BK: u32 = 8u;
// vec4s in one stage of a tile: BK x 128 / 4.
const STAGE: u32 = 256u;

// Two stages each, k-major: element (k, i) of stage s is component i % 4 of
// vec4 s * STAGE + k * 32 + i / 4.
var<workgroup> sa: array<vec4<f32>, 512>;
var<workgroup> sb: array<vec4<f32>, 512>;

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

fn a_at(base: u32, row: u32, k: u32) -> f32 {
    if (row >= p[0] || k >= p[2]) { return 0.0; }
    if (TRANS_A) { return a[base + k * p[0] + row]; }
    return a[base + row * p[2] + k];
}

fn b_at(base: u32, k: u32, col: u32) -> f32 {
    if (col >= p[1] || k >= p[2]) { return 0.0; }
    if (TRANS_B) { return b[base + col * p[2] + k]; }
    return b[base + k * p[1] + col];
}

// The four elements invocation `li` stages from a 128 x 8 (rows x k) tile whose
// storage is k-contiguous (`k_fast`): row li / 2, k 4 (li % 2) ..+3; otherwise
// (rows contiguous): k li / 32, rows 4 (li % 32) ..+3.
fn tile_coords(li: u32, k_fast: bool) -> vec2<u32> {
    if (k_fast) { return vec2<u32>(li >> 1u, (li & 1u) * 4u); }
    return vec2<u32>((li & 31u) * 4u, li >> 5u);
}

fn load_a(base: u32, row0: u32, k0: u32, li: u32) -> vec4<f32> {
    let t = tile_coords(li, !TRANS_A);
    if (!TRANS_A) {
        let r = row0 + t.x;
        let k = k0 + t.y;
        return vec4<f32>(a_at(base, r, k), a_at(base, r, k + 1u), a_at(base, r, k + 2u),
                         a_at(base, r, k + 3u));
    }
    let r = row0 + t.x;
    let k = k0 + t.y;
    return vec4<f32>(a_at(base, r, k), a_at(base, r + 1u, k), a_at(base, r + 2u, k),
                     a_at(base, r + 3u, k));
}

fn load_b(base: u32, col0: u32, k0: u32, li: u32) -> vec4<f32> {
    let t = tile_coords(li, TRANS_B);
    if (TRANS_B) {
        let n = col0 + t.x;
        let k = k0 + t.y;
        return vec4<f32>(b_at(base, k, n), b_at(base, k + 1u, n), b_at(base, k + 2u, n),
                         b_at(base, k + 3u, n));
    }
    let n = col0 + t.x;
    let k = k0 + t.y;
    return vec4<f32>(b_at(base, k, n), b_at(base, k, n + 1u), b_at(base, k, n + 2u),
                     b_at(base, k, n + 3u));
}

// CONV: the input spatial dims, read once.
var<private> in_dims: vec3<i32>;

// CONV: where an output position's window starts in the input (stride times
// position minus padding), per spatial dim; columns past N get a start that
// fails every bounds check.
fn window_start(col: u32) -> vec3<i32> {
    if (col >= p[1]) { return vec3<i32>(-1 << 30); }
    let od = vec3<u32>(p[29], p[30], p[31]);
    let o = vec3<u32>(col / (od.y * od.z), (col / od.z) % od.y, col % od.z);
    return vec3<i32>(o * vec3<u32>(p[32], p[33], p[34])) - vec3<i32>(vec3<u32>(p[35], p[36], p[37]));
}

// CONV: the input element of patch row (channel ci, kernel offset kk) for a window start.
fn patch_at(base: u32, ci: u32, kk: vec3<u32>, start: vec3<i32>) -> f32 {
    let q = start + vec3<i32>(kk * vec3<u32>(p[38], p[39], p[40]));
    if (any(q < vec3<i32>(0)) || any(q >= in_dims)) { return 0.0; }
    let d = vec3<u32>(in_dims);
    return b[base + ((ci * d.x + u32(q.x)) * d.y + u32(q.y)) * d.z + u32(q.z)];
}

// CONV: the four B elements invocation `li` stages: patch row k0 + li / 32 for
// its four columns, whose window starts are s0..s3.
fn load_patches(base: u32, k0: u32, li: u32, s0: vec3<i32>, s1: vec3<i32>, s2: vec3<i32>,
                s3: vec3<i32>) -> vec4<f32> {
    let k = k0 + (li >> 5u);
    if (k >= p[2]) { return vec4<f32>(0.0); }
    let kd = vec3<u32>(p[26], p[27], p[28]);
    let spatial = kd.x * kd.y * kd.z;
    let ci = k / spatial;
    let r = k % spatial;
    let kk = vec3<u32>(r / (kd.y * kd.z), (r / kd.z) % kd.y, r % kd.z);
    return vec4<f32>(patch_at(base, ci, kk, s0), patch_at(base, ci, kk, s1),
                     patch_at(base, ci, kk, s2), patch_at(base, ci, kk, s3));
}

fn store_a(stage: u32, li: u32, v: vec4<f32>) {
    let t = tile_coords(li, !TRANS_A);
    let s = stage * STAGE;
    if (TRANS_A) {
        sa[s + t.y * 32u + (t.x >> 2u)] = v;
        return;
    }
    let q = t.x >> 2u;
    let c = t.x & 3u;
    sa[s + t.y * 32u + q][c] = v.x;
    sa[s + (t.y + 1u) * 32u + q][c] = v.y;
    sa[s + (t.y + 2u) * 32u + q][c] = v.z;
    sa[s + (t.y + 3u) * 32u + q][c] = v.w;
}

fn store_b(stage: u32, li: u32, v: vec4<f32>) {
    let t = tile_coords(li, TRANS_B);
    let s = stage * STAGE;
    if (!TRANS_B) {
        sb[s + t.y * 32u + (t.x >> 2u)] = v;
        return;
    }
    let q = t.x >> 2u;
    let c = t.x & 3u;
    sb[s + t.y * 32u + q][c] = v.x;
    sb[s + (t.y + 1u) * 32u + q][c] = v.y;
    sb[s + (t.y + 2u) * 32u + q][c] = v.z;
    sb[s + (t.y + 3u) * 32u + q][c] = v.w;
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let m = p[0];
    let n = p[1];
    let kk = p[2];
    let tiles_n = p[21];
    let tile = wid.x + wid.y * nwg.x;
    let tiles_m = (m + BM - 1u) / BM;
    let per_batch = tiles_m * tiles_n;
    let batch = tile / per_batch;
    if (batch >= p[3]) { return; }
    let t = tile % per_batch;
    let row0 = (t / tiles_n) * BM;
    let col0 = (t % tiles_n) * BN;
    let off = batch_offsets(batch);
    let tx = li & 15u;
    let ty = li >> 4u;

    // CONV: the window starts of the four columns this invocation stages.
    var s0 = vec3<i32>(0);
    var s1 = vec3<i32>(0);
    var s2 = vec3<i32>(0);
    var s3 = vec3<i32>(0);
    if (CONV) {
        in_dims = vec3<i32>(vec3<u32>(p[23], p[24], p[25]));
        let col = col0 + (li & 31u) * 4u;
        s0 = window_start(col);
        s1 = window_start(col + 1u);
        s2 = window_start(col + 2u);
        s3 = window_start(col + 3u);
    }

    // Zero-initialized. Every index into acc is a constant, so the driver
    // keeps it in registers (one dynamic index would put it in local memory).
    var acc: array<vec4<f32>, 16>;

    let steps = (kk + BK - 1u) / BK;
    var ra = load_a(off.x, row0, 0u, li);
    var rb = vec4<f32>(0.0);
    if (CONV) {
        rb = load_patches(off.y, 0u, li, s0, s1, s2, s3);
    } else {
        rb = load_b(off.y, col0, 0u, li);
    }
    store_a(0u, li, ra);
    store_b(0u, li, rb);
    workgroupBarrier();
    for (var step = 0u; step < steps; step = step + 1u) {
        let more = step + 1u < steps;
        if (more) {
            ra = load_a(off.x, row0, (step + 1u) * BK, li);
            if (CONV) {
                rb = load_patches(off.y, (step + 1u) * BK, li, s0, s1, s2, s3);
            } else {
                rb = load_b(off.y, col0, (step + 1u) * BK, li);
            }
        }
        let s = (step & 1u) * STAGE;
        for (var k = 0u; k < BK; k = k + 1u) {
            let a0 = sa[s + k * 32u + ty];
            let a1 = sa[s + k * 32u + 16u + ty];
            let b0 = sb[s + k * 32u + tx];
            let b1 = sb[s + k * 32u + 16u + tx];
            acc[0] = fma(vec4<f32>(a0.x), b0, acc[0]);
            acc[1] = fma(vec4<f32>(a0.x), b1, acc[1]);
            acc[2] = fma(vec4<f32>(a0.y), b0, acc[2]);
            acc[3] = fma(vec4<f32>(a0.y), b1, acc[3]);
            acc[4] = fma(vec4<f32>(a0.z), b0, acc[4]);
            acc[5] = fma(vec4<f32>(a0.z), b1, acc[5]);
            acc[6] = fma(vec4<f32>(a0.w), b0, acc[6]);
            acc[7] = fma(vec4<f32>(a0.w), b1, acc[7]);
            acc[8] = fma(vec4<f32>(a1.x), b0, acc[8]);
            acc[9] = fma(vec4<f32>(a1.x), b1, acc[9]);
            acc[10] = fma(vec4<f32>(a1.y), b0, acc[10]);
            acc[11] = fma(vec4<f32>(a1.y), b1, acc[11]);
            acc[12] = fma(vec4<f32>(a1.z), b0, acc[12]);
            acc[13] = fma(vec4<f32>(a1.z), b1, acc[13]);
            acc[14] = fma(vec4<f32>(a1.w), b0, acc[14]);
            acc[15] = fma(vec4<f32>(a1.w), b1, acc[15]);
        }
        if (more) {
            let next = (step + 1u) & 1u;
            store_a(next, li, ra);
            store_b(next, li, rb);
        }
        workgroupBarrier();
    }

    let out = batch * m * n;
    // C's offset: CONV's bias starts at the group's first output channel.
    var cbase = 0u;
    if (CONV) { cbase = (batch % p[22]) * m; }
    let r = row0 + ty * 4u;
    let c0 = col0 + tx * 4u;
    let c1 = c0 + 64u;
    store4(out, cbase, r, c0, acc[0]);
    store4(out, cbase, r, c1, acc[1]);
    store4(out, cbase, r + 1u, c0, acc[2]);
    store4(out, cbase, r + 1u, c1, acc[3]);
    store4(out, cbase, r + 2u, c0, acc[4]);
    store4(out, cbase, r + 2u, c1, acc[5]);
    store4(out, cbase, r + 3u, c0, acc[6]);
    store4(out, cbase, r + 3u, c1, acc[7]);
    store4(out, cbase, r + 64u, c0, acc[8]);
    store4(out, cbase, r + 64u, c1, acc[9]);
    store4(out, cbase, r + 65u, c0, acc[10]);
    store4(out, cbase, r + 65u, c1, acc[11]);
    store4(out, cbase, r + 66u, c0, acc[12]);
    store4(out, cbase, r + 66u, c1, acc[13]);
    store4(out, cbase, r + 67u, c0, acc[14]);
    store4(out, cbase, r + 67u, c1, acc[15]);
}

// Writes the four outputs of one row at columns col..col+3 that lie inside the
// matrix, applying alpha and beta * C.
fn store4(out: u32, cbase: u32, row: u32, col: u32, v: vec4<f32>) {
    let m = p[0];
    let n = p[1];
    if (row >= m) { return; }
    let alpha = bitcast<f32>(p[17]);
    let beta = bitcast<f32>(p[18]);
    for (var j = 0u; j < 4u; j = j + 1u) {
        if (col + j >= n) { return; }
        var x = alpha * v[j];
        if (HAS_C) { x = x + beta * c[cbase + row * p[19] + (col + j) * p[20]]; }
        y[out + row * n + col + j] = x;
    }
}
