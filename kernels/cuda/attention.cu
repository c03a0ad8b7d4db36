// Attention (ai.onnx, opset 23 on): y = softmax(Q·Kᵀ·scale + mask) · V, per
// batch and query head, without the score matrix ever reaching memory.
//
// Two entry points per dtype:
// - `attention_mma{D}_{f16,bf16}`: flash-style tiles on the tensor cores
//   (`mma.sync` m16n8k16, f32 accumulation, sm_80 on). A block of four warps
//   takes 64 query rows (16 per warp, Q held in registers as A fragments);
//   it walks the keys in tiles of 64, copied row-major into shared memory by
//   `cp.async` (the next tile in flight during this one's math for heads up
//   to 64), read as B fragments by `ldmatrix` (transposing for V), and keeps a
//   running maximum and sum per row (online softmax in base 2). The score tile's accumulator layout is the A-fragment layout
//   of the P·V product, so probabilities never leave registers.
// - `attention_rows_{f32,f16,bf16}`: one warp per query row, any head size,
//   for f32 and for the shapes the tiles do not take.
//
// Every tensor is addressed by (batch, head, row) strides with its head
// dimension contiguous, so 3-D (`[batch, seq, heads × size]`) and 4-D
// (`[batch, heads, seq, size]`) layouts share one kernel.
#include "common.cuh"

struct AttnArgs {
    i64 q_stride[3];  // batch, head, row (elements)
    i64 k_stride[3];
    i64 v_stride[3];
    i64 y_stride[3];
    i64 m_stride[3];  // the mask's batch, head and query-row strides (0 where broadcast)
    int batch, q_heads, group;  // group: query heads per key/value head
    int q_len, kv_len, mask_len;  // keys at or past mask_len are masked
    int head, v_head;
    int mask_kind;  // 0 none, 1 bool (true attends), 2 f16, 3 bf16, 4 f32 (added)
    int causal;     // key j is masked for query i when j > i + causal_offset
    int causal_offset;
    float scale;
};

#define LOG2E 1.4426950408889634f

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

// The mask's term for key `j` of the row at offset `row` (in log2 units when
// `log2` is set): 0 or -inf for a bool mask, the value for a float one.
__device__ __forceinline__ float mask_term(const AttnArgs& a, const void* m, i64 row, int j) {
    if (j >= a.mask_len) return neg_inf();
    switch (a.mask_kind) {
        case 1: return ((const u8*)m)[row + j] ? 0.f : neg_inf();
        case 2: return f16_to_f32(((const u16*)m)[row + j]);
        case 3: return bf16_to_f32(((const u16*)m)[row + j]);
        case 4: return ((const float*)m)[row + j];
    }
    return 0.f;
}

// ---------------------------------------------------------------- one warp per row

template <typename T>
__device__ void attention_rows(const AttnArgs& a, const T* q, const T* k, const T* v, const void* m, T* y) {
    typedef typename Num<T>::C C;
    const int lane = threadIdx.x & 31;
    const i64 row = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    if (row >= (i64)a.batch * a.q_heads * a.q_len) return;
    const int i = (int)(row % a.q_len);
    const int h = (int)((row / a.q_len) % a.q_heads);
    const int b = (int)(row / ((i64)a.q_len * a.q_heads));
    const int kh = h / a.group;
    const T* qr = q + b * a.q_stride[0] + h * a.q_stride[1] + i * a.q_stride[2];
    const T* kb = k + b * a.k_stride[0] + kh * a.k_stride[1];
    const T* vb = v + b * a.v_stride[0] + kh * a.v_stride[1];
    const i64 mrow = b * a.m_stride[0] + h * a.m_stride[1] + i * a.m_stride[2];
    float acc[8];
#pragma unroll
    for (int s = 0; s < 8; ++s) acc[s] = 0.f;
    float mx = neg_inf(), sum = 0.f;
    for (int j = 0; j < a.kv_len; ++j) {
        const T* kr = kb + j * a.k_stride[2];
        float dot = 0.f;
        for (int d = lane; d < a.head; d += 32) dot += (float)ld(qr, d) * (float)ld(kr, d);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        float x = dot * a.scale;
        if (a.mask_kind) x += mask_term(a, m, mrow, j);
        if (a.causal && j > i + a.causal_offset) x = neg_inf();
        // Uniform across the warp: a masked key adds nothing.
        if (x == neg_inf()) continue;
        const float nm = fmaxf(mx, x);
        const float corr = expf(mx - nm), p = expf(x - nm);
        sum = sum * corr + p;
        const T* vr = vb + j * a.v_stride[2];
#pragma unroll
        for (int s = 0; s < 8; ++s) {
            const int d = lane + 32 * s;
            if (d < a.v_head) acc[s] = acc[s] * corr + p * (float)ld(vr, d);
        }
        mx = nm;
    }
    T* yr = y + b * a.y_stride[0] + h * a.y_stride[1] + i * a.y_stride[2];
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
    for (int s = 0; s < 8; ++s) {
        const int d = lane + 32 * s;
        if (d < a.v_head) st(yr, d, (C)(acc[s] * inv));
    }
}

#define ROWS(name, T)                                                                              \
    extern "C" __global__ void attention_rows_##name(AttnArgs a, const T* q, const T* k,          \
                                                     const T* v, const void* m, T* y) {            \
        attention_rows<T>(a, q, k, v, m, y);                                                       \
    }
ROWS(f32, float)
ROWS(f16, f16)
ROWS(bf16, bf16)

// ---------------------------------------------------------------- tensor-core tiles

// d += a·b for one m16n8k16 tile: a row-major 16×16, b column-major 16×8.
template <bool BF>
__device__ __forceinline__ void mma16816(float* d, const u32* a, u32 b0, u32 b1) {
    if constexpr (BF) {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
            "{%8,%9}, {%0,%1,%2,%3};"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// Two floats as one register of two halves, `lo` at the lower address.
template <bool BF>
__device__ __forceinline__ u32 pack2(float lo, float hi) {
    u32 r;
    if constexpr (BF) asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

template <bool BF>
__device__ __forceinline__ float half_to_f32(u16 x) {
    if constexpr (BF) return bf16_to_f32(x);
    else return f16_to_f32(x);
}

__device__ __forceinline__ u32 ld2(const u16* p) { return *(const u32*)p; }

// Four 8×8 matrices of 16-bit values from shared memory, one per register
// (lanes 8i..8i+7 give the row addresses of matrix i); `.trans` delivers
// each transposed, which turns row-major V into the P·V product's B fragments.
template <bool TRANS>
__device__ __forceinline__ void ldsm4(u32* r, const u16* p) {
    u64 g;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(g) : "l"(p));
    const u32 a = (u32)g;
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}

// 16 bytes from global to shared memory without passing through registers
// (sm_80 on); `valid` false writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(u16* dst, const u16* src, bool valid) {
    u64 g;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(g) : "l"(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"((u32)g), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

template <bool BF, int D>
__device__ void attention_mma(const AttnArgs& a, const u16* q, const u16* k, const u16* v, const void* m, u16* y) {
    constexpr int BQ = 64, BK = 64, KP = D + 8;
    // Two stages (the next tile's copy in flight while this one is used)
    // where both fit the 48 KiB of static shared memory.
    constexpr int STAGES = D <= 64 ? 2 : 1;
    // K and V tiles, row-major, rows padded by 16 bytes so the eight rows an
    // ldmatrix reads fall in distinct banks.
    __shared__ __align__(16) u16 ks[STAGES][BK * KP];
    __shared__ __align__(16) u16 vs[STAGES][BK * KP];
    // The mask's terms for the tile's keys (log2 units) when every query row
    // of the block shares them (a padding mask), -inf past the keys.
    __shared__ float mk[STAGES][BK];
    const bool row_mask = a.mask_kind != 0 && a.m_stride[2] != 0;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
    const int r0 = blockIdx.x * BQ + warp * 16 + g, r1 = r0 + 8;
    const u16* qb = q + b * a.q_stride[0] + h * a.q_stride[1];
    const u16* kb = k + b * a.k_stride[0] + kh * a.k_stride[1];
    const u16* vb = v + b * a.v_stride[0] + kh * a.v_stride[1];

    // Q as A fragments: rows g and g + 8, columns 2t, 2t + 1 (and + 8).
    u32 qa[D / 16][4];
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
        const int c = kk * 16 + t * 2;
        qa[kk][0] = r0 < a.q_len ? ld2(qb + r0 * a.q_stride[2] + c) : 0u;
        qa[kk][1] = r1 < a.q_len ? ld2(qb + r1 * a.q_stride[2] + c) : 0u;
        qa[kk][2] = r0 < a.q_len ? ld2(qb + r0 * a.q_stride[2] + c + 8) : 0u;
        qa[kk][3] = r1 < a.q_len ? ld2(qb + r1 * a.q_stride[2] + c + 8) : 0u;
    }
    float o[D / 8][4];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
    float mrow[2] = {neg_inf(), neg_inf()}, lrow[2] = {0.f, 0.f};
    const float sl = a.scale * LOG2E;
    const i64 mo[2] = {b * a.m_stride[0] + h * a.m_stride[1] + r0 * a.m_stride[2],
                       b * a.m_stride[0] + h * a.m_stride[1] + r1 * a.m_stride[2]};
    const int rows[2] = {r0, r1};
    int kv_end = a.kv_len;
    if (a.causal) {
        const int last = min(a.q_len, (int)(blockIdx.x + 1) * BQ) - 1;
        kv_end = max(0, min(kv_end, last + a.causal_offset + 1));
    }

    const i64 mrow0 = b * a.m_stride[0] + h * a.m_stride[1];
    // Queues the copies of the tile at key k0 into stage `st`.
    auto load = [&](int k0, int st) {
        for (int c = threadIdx.x; c < BK * D / 8; c += blockDim.x) {
            const int row = c / (D / 8), col = (c % (D / 8)) * 8, key = k0 + row;
            const bool ok = key < a.kv_len;
            cp_async16(&ks[st][row * KP + col], ok ? kb + key * a.k_stride[2] + col : kb, ok);
            cp_async16(&vs[st][row * KP + col], ok ? vb + key * a.v_stride[2] + col : vb, ok);
        }
        if (!row_mask) {
            for (int c = threadIdx.x; c < BK; c += blockDim.x) {
                const int key = k0 + c;
                mk[st][c] = key >= a.kv_len ? neg_inf() : (a.mask_kind ? mask_term(a, m, mrow0, key) * LOG2E : 0.f);
            }
        }
        cp_commit();
    };
    const int tiles = (kv_end + BK - 1) / BK;
    if (tiles > 0) load(0, 0);
    for (int it = 0; it < tiles; ++it) {
        const int k0 = it * BK, st = STAGES == 2 ? (it & 1) : 0;
        if (STAGES == 2 && it + 1 < tiles) {
            load(k0 + BK, st ^ 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();

        // S = Q·Kᵀ for 64 keys: eight n-blocks of 8 keys, k-steps outermost so
        // the eight accumulators are independent between consecutive mmas;
        // one ldmatrix gives an n-block's B fragments of two k-steps.
        float s[BK / 8][4];
#pragma unroll
        for (int j = 0; j < BK / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
            u32 kb4[BK / 8][4];
#pragma unroll
            for (int j = 0; j < BK / 8; ++j)
                ldsm4<false>(kb4[j], &ks[st][(j * 8 + (lane & 7)) * KP + kk * 16 + (lane >> 3) * 8]);
#pragma unroll
            for (int j = 0; j < BK / 8; ++j) mma16816<BF>(s[j], qa[kk], kb4[j][0], kb4[j][1]);
#pragma unroll
            for (int j = 0; j < BK / 8; ++j) mma16816<BF>(s[j], qa[kk + 1], kb4[j][2], kb4[j][3]);
        }
        // Scale, mask and the running maximum (in base 2).
        float tmax[2] = {neg_inf(), neg_inf()};
#pragma unroll
        for (int j = 0; j < BK / 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int kt = j * 8 + t * 2 + (e & 1), key = k0 + kt, r = e >> 1;
                float x;
                if (!row_mask) x = s[j][e] * sl + mk[st][kt];
                else x = key >= a.kv_len ? neg_inf() : s[j][e] * sl + mask_term(a, m, mo[r], key) * LOG2E;
                if (a.causal && key > rows[r] + a.causal_offset) x = neg_inf();
                s[j][e] = x;
                tmax[r] = fmaxf(tmax[r], x);
            }
        }
        float base[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
            const float nm = fmaxf(mrow[r], tmax[r]);
            // A row masked so far keeps 0 as its reference (no inf - inf).
            base[r] = nm == neg_inf() ? 0.f : nm;
            const float corr = exp2f(mrow[r] - base[r]);
            mrow[r] = nm;
            lrow[r] *= corr;
#pragma unroll
            for (int n = 0; n < D / 8; ++n) {
                o[n][2 * r] *= corr;
                o[n][2 * r + 1] *= corr;
            }
        }
        // P in the A-fragment layout: n-block j fills registers (j & 1) * 2 and + 1 of k-step j / 2.
        u32 pa[BK / 16][4];
#pragma unroll
        for (int j = 0; j < BK / 8; ++j) {
            const float p0 = exp2f(s[j][0] - base[0]), p1 = exp2f(s[j][1] - base[0]);
            const float p2 = exp2f(s[j][2] - base[1]), p3 = exp2f(s[j][3] - base[1]);
            lrow[0] += p0 + p1;
            lrow[1] += p2 + p3;
            pa[j / 2][(j & 1) * 2] = pack2<BF>(p0, p1);
            pa[j / 2][(j & 1) * 2 + 1] = pack2<BF>(p2, p3);
        }
        // O += P·V: one transposing ldmatrix gives the B fragments of two n-blocks.
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                u32 vb4[4];
                ldsm4<true>(vb4, &vs[st][(kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * KP + (n + (lane >> 4)) * 8]);
                mma16816<BF>(o[n], pa[kk], vb4[0], vb4[1]);
                mma16816<BF>(o[n + 1], pa[kk], vb4[2], vb4[3]);
            }
        }
        // Every warp is done with this stage before it is filled again.
        __syncthreads();
        if (STAGES == 1 && it + 1 < tiles) load(k0 + BK, 0);
    }

    u16* yb = y + b * a.y_stride[0] + h * a.y_stride[1];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = lrow[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.f ? 1.f / l : 0.f;
        if (rows[r] >= a.q_len) continue;
        u16* yr = yb + rows[r] * a.y_stride[2] + t * 2;
#pragma unroll
        for (int n = 0; n < D / 8; ++n) *(u32*)(yr + n * 8) = pack2<BF>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
}

#define MMA(D)                                                                                     \
    extern "C" __global__ void __launch_bounds__(128) attention_mma##D##_f16(                      \
        AttnArgs a, const u16* q, const u16* k, const u16* v, const void* m, u16* y) {             \
        attention_mma<false, D>(a, q, k, v, m, y);                                                 \
    }                                                                                              \
    extern "C" __global__ void __launch_bounds__(128) attention_mma##D##_bf16(                     \
        AttnArgs a, const u16* q, const u16* k, const u16* v, const void* m, u16* y) {             \
        attention_mma<true, D>(a, q, k, v, m, y);                                                  \
    }
MMA(32)
MMA(64)
MMA(128)
