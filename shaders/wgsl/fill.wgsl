// Writes generated data: a repeated pattern (ConstantOfShape, Shape, Size: the
// pattern is the value, or the whole content), or an arithmetic progression (Range).
// One invocation owns one 32-bit output word.
//
// Params (u32 words): [0] output words, [1] pattern length in words,
// [2..) the pattern (MODE 0); for MODE 1 (Range): [2] start, [3] delta as the
// element type (f32 or i32 bits), for MODE 2 (int64 Range): [2..4) start, [4..6) delta.

override WG: u32 = 256u;
// 0: repeat the pattern; 1: 32-bit range (DT 1 f32, 6 i32); 2: int64 range.
override MODE: u32 = 0u;
override DT: u32 = 1u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;

fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    let lo = a.x + b.x;
    let carry = select(0u, 1u, lo < a.x);
    return vec2<u32>(lo, a.y + b.y + carry);
}

// Low 64 bits of a * k for a small non-negative k.
fn mul64(a: vec2<u32>, k: u32) -> vec2<u32> {
    let a0 = a.x & 0xffffu;
    let a1 = a.x >> 16u;
    let k0 = k & 0xffffu;
    let k1 = k >> 16u;
    let p00 = a0 * k0;
    let p01 = a0 * k1;
    let p10 = a1 * k0;
    let p11 = a1 * k1;
    let mid = p01 + p10;
    let mid_carry = select(0u, 0x10000u, mid < p01);
    let lo = p00 + (mid << 16u);
    let lo_carry = select(0u, 1u, lo < p00);
    let hi = p11 + (mid >> 16u) + mid_carry + lo_carry + a.y * k;
    return vec2<u32>(lo, hi);
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let j = gid.x + gid.y * nwg.x * WG;
    if (j >= p[0]) { return; }
    switch MODE {
        case 1u: {
            if (DT == 6u) {
                y[j] = bitcast<u32>(bitcast<i32>(p[2]) + i32(j) * bitcast<i32>(p[3]));
            } else {
                y[j] = bitcast<u32>(bitcast<f32>(p[2]) + f32(j) * bitcast<f32>(p[3]));
            }
        }
        case 2u: {
            let e = j / 2u;
            let v = add64(vec2<u32>(p[2], p[3]), mul64(vec2<u32>(p[4], p[5]), e));
            y[j] = select(v.x, v.y, (j & 1u) == 1u);
        }
        default: {
            y[j] = p[2u + j % p[1]];
        }
    }
}
