// Direct N-d convolution (1 to 3 spatial dims) of f32 tensors with groups,
// strides, dilations, padding and an optional bias. One invocation per output
// position and OCB output channels. Shorter ranks are padded with size-1 dims
// in front.
//
// Params (u32 words): [0] invocations (outputs / OCB), [1] N, [2] C, [3] M, [4] group,
// [5..8) input dims, [8..11) kernel dims, [11..14) output dims,
// [14..17) strides, [17..20) pads before, [20..23) dilations.

override WG: u32 = 256u;
override HAS_BIAS: bool = false;
// A 1x1 kernel with unit strides and no padding: each output reads one input
// per channel at its own position, with none of the window arithmetic.
override POINTWISE: bool = false;
// Output channels per invocation (1 or 4; 4 needs M/group % 4 == 0): with 4,
// each input read feeds four multiply-adds, and the index arithmetic is shared.
override OCB: u32 = 1u;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> bias: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

// Four output channels om..om+3 of one position (OCB == 4).
fn blocked(on: u32, om: u32, opos: u32, o: vec3<u32>, ospatial: u32, cg: u32, g: u32,
           ispatial: u32, kspatial: u32) {
    let c_in = p[2];
    let m_out = p[3];
    let id = vec3<u32>(p[5], p[6], p[7]);
    let kd = vec3<u32>(p[8], p[9], p[10]);
    let st = vec3<u32>(p[14], p[15], p[16]);
    let pb = vec3<i32>(i32(p[17]), i32(p[18]), i32(p[19]));
    let dl = vec3<u32>(p[20], p[21], p[22]);
    // Weights of channel om + j are cg * kspatial apart.
    let ws = cg * kspatial;
    var sum = vec4<f32>(0.0);
    if (HAS_BIAS) { sum = vec4<f32>(bias[om], bias[om + 1u], bias[om + 2u], bias[om + 3u]); }
    for (var ci = 0u; ci < cg; ci = ci + 1u) {
        let xbase = (on * c_in + g * cg + ci) * ispatial;
        let wbase = (om * cg + ci) * kspatial;
        if (POINTWISE) {
            let v = x[xbase + opos];
            sum = sum + v * vec4<f32>(w[wbase], w[wbase + ws], w[wbase + 2u * ws], w[wbase + 3u * ws]);
            continue;
        }
        for (var k0 = 0u; k0 < kd.x; k0 = k0 + 1u) {
            let p0 = i32(o.x * st.x + k0 * dl.x) - pb.x;
            if (p0 < 0 || p0 >= i32(id.x)) { continue; }
            for (var k1 = 0u; k1 < kd.y; k1 = k1 + 1u) {
                let p1 = i32(o.y * st.y + k1 * dl.y) - pb.y;
                if (p1 < 0 || p1 >= i32(id.y)) { continue; }
                let row = xbase + (u32(p0) * id.y + u32(p1)) * id.z;
                let wrow = wbase + (k0 * kd.y + k1) * kd.z;
                for (var k2 = 0u; k2 < kd.z; k2 = k2 + 1u) {
                    let p2 = i32(o.z * st.z + k2 * dl.z) - pb.z;
                    if (p2 < 0 || p2 >= i32(id.z)) { continue; }
                    let v = x[row + u32(p2)];
                    let wi = wrow + k2;
                    sum = sum + v * vec4<f32>(w[wi], w[wi + ws], w[wi + 2u * ws], w[wi + 3u * ws]);
                }
            }
        }
    }
    let out = (on * m_out + om) * ospatial + opos;
    y[out] = sum.x;
    y[out + ospatial] = sum.y;
    y[out + 2u * ospatial] = sum.z;
    y[out + 3u * ospatial] = sum.w;
}

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p[0]) { return; }
    let c_in = p[2];
    let m_out = p[3];
    let groups = p[4];
    let id = vec3<u32>(p[5], p[6], p[7]);
    let kd = vec3<u32>(p[8], p[9], p[10]);
    let od = vec3<u32>(p[11], p[12], p[13]);
    let st = vec3<u32>(p[14], p[15], p[16]);
    let pb = vec3<i32>(i32(p[17]), i32(p[18]), i32(p[19]));
    let dl = vec3<u32>(p[20], p[21], p[22]);
    let ospatial = od.x * od.y * od.z;
    let opos = i % ospatial;
    let blocks = m_out / OCB;
    let om = ((i / ospatial) % blocks) * OCB;
    let on = i / (ospatial * blocks);
    let o = vec3<u32>(opos / (od.y * od.z), (opos / od.z) % od.y, opos % od.z);
    let cg = c_in / groups;
    let mg = m_out / groups;
    let g = om / mg;
    let ispatial = id.x * id.y * id.z;
    let kspatial = kd.x * kd.y * kd.z;
    if (OCB == 4u) {
        blocked(on, om, opos, o, ospatial, cg, g, ispatial, kspatial);
        return;
    }
    var sum = 0.0;
    if (HAS_BIAS) { sum = bias[om]; }
    if (POINTWISE) {
        var xi = (on * c_in + g * cg) * ispatial + opos;
        let wbase = om * cg;
        for (var ci = 0u; ci < cg; ci = ci + 1u) {
            sum = sum + x[xi] * w[wbase + ci];
            xi = xi + ispatial;
        }
        y[i] = sum;
        return;
    }
    for (var ci = 0u; ci < cg; ci = ci + 1u) {
        let xbase = (on * c_in + g * cg + ci) * ispatial;
        let wbase = (om * cg + ci) * kspatial;
        for (var k0 = 0u; k0 < kd.x; k0 = k0 + 1u) {
            let p0 = i32(o.x * st.x + k0 * dl.x) - pb.x;
            if (p0 < 0 || p0 >= i32(id.x)) { continue; }
            for (var k1 = 0u; k1 < kd.y; k1 = k1 + 1u) {
                let p1 = i32(o.y * st.y + k1 * dl.y) - pb.y;
                if (p1 < 0 || p1 >= i32(id.y)) { continue; }
                for (var k2 = 0u; k2 < kd.z; k2 = k2 + 1u) {
                    let p2 = i32(o.z * st.z + k2 * dl.z) - pb.z;
                    if (p2 < 0 || p2 >= i32(id.z)) { continue; }
                    let xi = xbase + (u32(p0) * id.y + u32(p1)) * id.z + u32(p2);
                    let wi = wbase + (k0 * kd.y + k1) * kd.z + k2;
                    sum = sum + x[xi] * w[wi];
                }
            }
        }
    }
    y[i] = sum;
}
