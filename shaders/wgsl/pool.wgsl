// MaxPool and AveragePool of f32 tensors over 1 to 3 spatial dims, with
// strides, dilations, padding and ceil mode already resolved by the host, and
// MaxPool's optional int64 Indices. One invocation per output element.
// Shorter ranks are padded with size-1 dims in front.
//
// Params (u32 words): [0] outputs, [1..4) input dims, [4..7) kernel dims,
// [7..10) output dims, [10..13) strides, [13..16) pads before, [16..19) dilations,
// [19..22) pads after, [22] count_include_pad, [23] storage_order.

override WG: u32 = 256u;
// A POOL_* code (codes.wgsl).
override OP: u32 = 0u;
override INDICES: bool = false;

@group(0) @binding(0) var<storage, read> p: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> idx: array<u32>;

@compute @workgroup_size(WG)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * WG;
    if (i >= p[0]) { return; }
    let id = vec3<u32>(p[1], p[2], p[3]);
    let kd = vec3<u32>(p[4], p[5], p[6]);
    let od = vec3<u32>(p[7], p[8], p[9]);
    let st = vec3<u32>(p[10], p[11], p[12]);
    let pb = vec3<i32>(i32(p[13]), i32(p[14]), i32(p[15]));
    let dl = vec3<u32>(p[16], p[17], p[18]);
    let pe = vec3<i32>(i32(p[19]), i32(p[20]), i32(p[21]));
    let ospatial = od.x * od.y * od.z;
    let plane = i / ospatial;
    let opos = i % ospatial;
    let o = vec3<u32>(opos / (od.y * od.z), (opos / od.z) % od.y, opos % od.z);
    let ispatial = id.x * id.y * id.z;
    let base = plane * ispatial;
    var best = 0.0;
    var best_at = 0xffffffffu;
    var sum = 0.0;
    var count = 0u;
    for (var k0 = 0u; k0 < kd.x; k0 = k0 + 1u) {
        let p0 = i32(o.x * st.x + k0 * dl.x) - pb.x;
        for (var k1 = 0u; k1 < kd.y; k1 = k1 + 1u) {
            let p1 = i32(o.y * st.y + k1 * dl.y) - pb.y;
            for (var k2 = 0u; k2 < kd.z; k2 = k2 + 1u) {
                let p2 = i32(o.z * st.z + k2 * dl.z) - pb.z;
                let inside = p0 >= 0 && p0 < i32(id.x) && p1 >= 0 && p1 < i32(id.y) && p2 >= 0 && p2 < i32(id.z);
                if (!inside) {
                    let padded = p0 < i32(id.x) + pe.x && p1 < i32(id.y) + pe.y && p2 < i32(id.z) + pe.z;
                    if (OP == POOL_AVERAGE && p[22] == 1u && padded) { count = count + 1u; }
                    continue;
                }
                let flat = (u32(p0) * id.y + u32(p1)) * id.z + u32(p2);
                let v = x[base + flat];
                if (OP == POOL_MAX) {
                    if (best_at == 0xffffffffu || v > best || v != v) {
                        best = v;
                        if (p[23] == 1u) {
                            // Column-major index of the spatial position.
                            best_at = (u32(p2) * id.y + u32(p1)) * id.x + u32(p0);
                        } else {
                            best_at = flat;
                        }
                    }
                } else {
                    sum = sum + v;
                    count = count + 1u;
                }
            }
        }
    }
    if (OP == POOL_MAX) {
        y[i] = best;
        if (INDICES) {
            idx[2u * i] = plane * ispatial + best_at;
            idx[2u * i + 1u] = 0u;
        }
    } else {
        y[i] = sum / f32(max(count, 1u));
    }
}
