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

// The shared-memory address of a generic pointer into shared memory.
__device__ __forceinline__ u32 smem_addr(const void* p) {
    u64 g;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(g) : "l"(p));
    return (u32)g;
}

// Four 8×8 matrices of 16-bit values from shared memory (address `a`), one
// per register (lanes 8i..8i+7 give the row addresses of matrix i); `.trans`
// delivers each transposed, which turns row-major V into the P·V product's
// B fragments.
template <bool TRANS>
__device__ __forceinline__ void ldsm4a(u32* r, u32 a) {
    if constexpr (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
template <bool TRANS>
__device__ __forceinline__ void ldsm4(u32* r, const u16* p) {
    ldsm4a<TRANS>(r, smem_addr(p));
}

// 16 bytes from global to shared memory without passing through registers
// (sm_80 on); `valid` false writes zeros and reads nothing.
__device__ __forceinline__ void cp_async16(u16* dst, const u16* src, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
                 : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Queues the copies of keys k0 .. k0 + BK of K and V (rows of D values) into
// shared tiles of rows padded to KP values; keys past the end become zeros.
template <int D, int BK, int KP>
__device__ __forceinline__ void copy_kv(const AttnArgs& a, u16* ks, u16* vs, const u16* kb, const u16* vb, int k0) {
    for (int c = threadIdx.x; c < BK * D / 8; c += blockDim.x) {
        const int row = c / (D / 8), col = (c % (D / 8)) * 8, key = k0 + row;
        const bool ok = key < a.kv_len;
        cp_async16(&ks[row * KP + col], ok ? kb + key * a.k_stride[2] + col : kb, ok);
        cp_async16(&vs[row * KP + col], ok ? vb + key * a.v_stride[2] + col : vb, ok);
    }
}

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
        copy_kv<D, BK, KP>(a, ks[st], vs[st], kb, vb, k0);
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

// ---------------------------------------------------------------- tensor-core tiles, key-only masks

// `attention_fa{D}_{f16,bf16}` and `attention_fam{D}_{f16,bf16}`: the
// encoder's case (no causal cut) with FlashAttention-2's work split. Each
// warp holds WM m16 tiles (32 query rows for heads up to 64), so every K and
// V fragment read from shared memory feeds WM tensor-core products; a block
// has blockDim.x / 32 warps (2 to 4). Per-lane shared-memory addresses are
// computed once, so the tile loop is products, exponentials and little else.
// - `fa`: no mask, or one the same for every query row (a padding mask of
//   `[batch, 1, 1, keys]`). The keys' terms are staged per tile in shared
//   memory, read into registers while the previous tile's products run.
// - `fam`: an additive mask of the inputs' dtype with a row per query (what
//   transformers' eager attention builds, `[batch, 1, q, keys]`). The block's
//   rows of each key tile travel with K and V by `cp.async` into dynamic
//   shared memory (2 stages × rows × (64 + 8) values), 16-byte aligned rows
//   and a key count that is a multiple of 8 required, and equal to the mask's.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

template <bool BF, int D, int WM, bool ROWS>
__device__ void attention_fa(const AttnArgs& a, const u16* q, const u16* k, const u16* v, const void* m, u16* y) {
    constexpr int BK = 64, KP = D + 8, RB = KP * 2;  // RB: a padded row in bytes
    constexpr int MP = BK + 8;                      // a padded mask row (values)
    constexpr int STAGES = D <= 64 ? 2 : 1;
    __shared__ __align__(16) u16 ks[STAGES][BK * KP];
    __shared__ __align__(16) u16 vs[STAGES][BK * KP];
    __shared__ float mk[STAGES][BK];  // the keys' mask terms, -inf past the keys
    extern __shared__ __align__(16) u16 mrows[];  // ROWS: [STAGES][block rows][MP]
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z, kh = h / a.group;
    const int block_rows = (blockDim.x >> 5) * 16 * WM, block_row0 = blockIdx.x * block_rows;
    const int row0 = block_row0 + warp * 16 * WM;
    const u16* qb = q + b * a.q_stride[0] + h * a.q_stride[1];
    const u16* kb = k + b * a.k_stride[0] + kh * a.k_stride[1];
    const u16* vb = v + b * a.v_stride[0] + kh * a.v_stride[1];
    const i64 mrow = b * a.m_stride[0] + h * a.m_stride[1];

    u32 qa[WM][D / 16][4];
#pragma unroll
    for (int w = 0; w < WM; ++w) {
        const int r0 = row0 + w * 16 + g, r1 = r0 + 8;
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
            const int c = kk * 16 + t * 2;
            qa[w][kk][0] = r0 < a.q_len ? ld2(qb + r0 * a.q_stride[2] + c) : 0u;
            qa[w][kk][1] = r1 < a.q_len ? ld2(qb + r1 * a.q_stride[2] + c) : 0u;
            qa[w][kk][2] = r0 < a.q_len ? ld2(qb + r0 * a.q_stride[2] + c + 8) : 0u;
            qa[w][kk][3] = r1 < a.q_len ? ld2(qb + r1 * a.q_stride[2] + c + 8) : 0u;
        }
    }
    float o[WM][D / 8][4];
#pragma unroll
    for (int w = 0; w < WM; ++w)
#pragma unroll
        for (int n = 0; n < D / 8; ++n) o[w][n][0] = o[w][n][1] = o[w][n][2] = o[w][n][3] = 0.f;
    float mx[WM][2], l[WM][2];
#pragma unroll
    for (int w = 0; w < WM; ++w) mx[w][0] = mx[w][1] = neg_inf(), l[w][0] = l[w][1] = 0.f;
    // Scores are kept in natural units (s · scale + mask) and turned into
    // powers of two by one multiply-add before each exponential.

    // The mask term of key `key`, read by the block's first BK threads.
    auto term = [&](int key) {
        if constexpr (ROWS) return 0.f;  // unused: the rows' terms are read in the tile loop
        return key >= a.kv_len ? neg_inf() : (a.mask_kind ? mask_term(a, m, mrow, key) : 0.f);
    };
    const u16* mb = (const u16*)m + mrow;
    auto load = [&](int k0, int st) {
        copy_kv<D, BK, KP>(a, ks[st], vs[st], kb, vb, k0);
        if constexpr (ROWS) {
            u16* ms = mrows + st * block_rows * MP;
            // Keys past the end (whole chunks: the key count is a multiple of 8) get -inf.
            const uint4 ninf = BF ? make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u)
                                  : make_uint4(0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u, 0xfc00fc00u);
            for (int c = threadIdx.x; c < block_rows * BK / 8; c += blockDim.x) {
                const int row = c / (BK / 8), col = (c % (BK / 8)) * 8, qrow = block_row0 + row;
                if (k0 + col >= a.kv_len) {
                    *(uint4*)(ms + row * MP + col) = ninf;
                } else {
                    const bool ok = qrow < a.q_len;
                    cp_async16(ms + row * MP + col, ok ? mb + qrow * a.m_stride[2] + k0 + col : mb, ok);
                }
            }
        }
        cp_commit();
    };
    // Per-lane byte offsets of the ldmatrix rows: K's rows by lane & 7 and
    // columns by matrix (lane >> 3); V's rows by lane & 15, columns by lane >> 4.
    const u32 k_lane = (lane & 7) * RB + (lane >> 3) * 16;
    const u32 v_lane = ((lane & 7) + ((lane >> 3) & 1) * 8) * RB + (lane >> 4) * 16;
    const int tiles = (a.kv_len + BK - 1) / BK;
    float next_term = threadIdx.x < BK ? term(threadIdx.x) : 0.f;
    if (tiles > 0) load(0, 0);
    if (threadIdx.x < BK) mk[0][threadIdx.x] = next_term;
    for (int it = 0; it < tiles; ++it) {
        const int st = STAGES == 2 ? (it & 1) : 0;
        const bool more = it + 1 < tiles;
        if (more && threadIdx.x < BK) next_term = term((it + 1) * BK + threadIdx.x);
        if (STAGES == 2 && more) {
            load((it + 1) * BK, st ^ 1);
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const u32 kbase = smem_addr(ks[st]) + k_lane, vbase = smem_addr(vs[st]) + v_lane;

        float s[WM][BK / 8][4];
#pragma unroll
        for (int w = 0; w < WM; ++w)
#pragma unroll
            for (int j = 0; j < BK / 8; ++j) s[w][j][0] = s[w][j][1] = s[w][j][2] = s[w][j][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < D / 16; kk += 2) {
#pragma unroll
            for (int j = 0; j < BK / 8; ++j) {
                u32 f[4];
                ldsm4a<false>(f, kbase + j * 8 * RB + kk * 32);
#pragma unroll
                for (int w = 0; w < WM; ++w) {
                    mma16816<BF>(s[w][j], qa[w][kk], f[0], f[1]);
                    mma16816<BF>(s[w][j], qa[w][kk + 1], f[2], f[3]);
                }
            }
        }
        u32 pa[WM][BK / 16][4];
#pragma unroll
        for (int w = 0; w < WM; ++w) {
            float tmax[2] = {neg_inf(), neg_inf()};
#pragma unroll
            for (int j = 0; j < BK / 8; ++j) {
                if constexpr (ROWS) {
                    const u16* mr = mrows + (st * block_rows + warp * 16 * WM + w * 16 + g) * MP + j * 8 + t * 2;
                    const u32 lo = *(const u32*)mr, hi = *(const u32*)(mr + 8 * MP);
                    s[w][j][0] = fmaf(s[w][j][0], a.scale, half_to_f32<BF>((u16)lo));
                    s[w][j][1] = fmaf(s[w][j][1], a.scale, half_to_f32<BF>((u16)(lo >> 16)));
                    s[w][j][2] = fmaf(s[w][j][2], a.scale, half_to_f32<BF>((u16)hi));
                    s[w][j][3] = fmaf(s[w][j][3], a.scale, half_to_f32<BF>((u16)(hi >> 16)));
                } else {
                    const float2 mt = *(const float2*)&mk[st][j * 8 + t * 2];
                    s[w][j][0] = fmaf(s[w][j][0], a.scale, mt.x);
                    s[w][j][1] = fmaf(s[w][j][1], a.scale, mt.y);
                    s[w][j][2] = fmaf(s[w][j][2], a.scale, mt.x);
                    s[w][j][3] = fmaf(s[w][j][3], a.scale, mt.y);
                }
                tmax[0] = fmaxf(tmax[0], fmaxf(s[w][j][0], s[w][j][1]));
                tmax[1] = fmaxf(tmax[1], fmaxf(s[w][j][2], s[w][j][3]));
            }
            float base[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 1));
                tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(0xffffffffu, tmax[r], 2));
                const float nm = fmaxf(mx[w][r], tmax[r]);
                // A row masked so far keeps 0 as its reference (no inf - inf).
                const float ref = nm == neg_inf() ? 0.f : nm;
                base[r] = -ref * LOG2E;
                const float corr = ex2((mx[w][r] - ref) * LOG2E);
                mx[w][r] = nm;
                l[w][r] *= corr;
#pragma unroll
                for (int n = 0; n < D / 8; ++n) {
                    o[w][n][2 * r] *= corr;
                    o[w][n][2 * r + 1] *= corr;
                }
            }
#pragma unroll
            for (int j = 0; j < BK / 8; ++j) {
                const float p0 = ex2(fmaf(s[w][j][0], LOG2E, base[0]));
                const float p1 = ex2(fmaf(s[w][j][1], LOG2E, base[0]));
                const float p2 = ex2(fmaf(s[w][j][2], LOG2E, base[1]));
                const float p3 = ex2(fmaf(s[w][j][3], LOG2E, base[1]));
                l[w][0] += p0 + p1;
                l[w][1] += p2 + p3;
                pa[w][j / 2][(j & 1) * 2] = pack2<BF>(p0, p1);
                pa[w][j / 2][(j & 1) * 2 + 1] = pack2<BF>(p2, p3);
            }
        }
#pragma unroll
        for (int kk = 0; kk < BK / 16; ++kk) {
#pragma unroll
            for (int n = 0; n < D / 8; n += 2) {
                u32 f[4];
                ldsm4a<true>(f, vbase + kk * 16 * RB + n * 16);
#pragma unroll
                for (int w = 0; w < WM; ++w) {
                    mma16816<BF>(o[w][n], pa[w][kk], f[0], f[1]);
                    mma16816<BF>(o[w][n + 1], pa[w][kk], f[2], f[3]);
                }
            }
        }
        // Every warp is done with this stage (and its mask terms) before it is filled again.
        __syncthreads();
        if (more && threadIdx.x < BK) mk[STAGES == 2 ? st ^ 1 : 0][threadIdx.x] = next_term;
        if (STAGES == 1 && more) load((it + 1) * BK, 0);
    }

    u16* yb = y + b * a.y_stride[0] + h * a.y_stride[1];
#pragma unroll
    for (int w = 0; w < WM; ++w) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float sum = l[w][r];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            const float inv = sum > 0.f ? 1.f / sum : 0.f;
            const int row = row0 + w * 16 + g + r * 8;
            if (row >= a.q_len) continue;
            u16* yr = yb + row * a.y_stride[2] + t * 2;
#pragma unroll
            for (int n = 0; n < D / 8; ++n)
                *(u32*)(yr + n * 8) = pack2<BF>(o[w][n][2 * r] * inv, o[w][n][2 * r + 1] * inv);
        }
    }
}

// Each kernel in two builds: for blocks of two warps (`fa64_f16`: up to 255
// registers a thread) and for blocks of four (`fa64w4_f16`), where the
// register allocation must let three blocks share a multiprocessor. That
// spills a few values of the 32-row tiles to local memory, yet it measured
// 7-20% faster at BERT's 8 x 512 on an H100 (12 warps a multiprocessor
// instead of 8, and the grid in one wave); with two-warp blocks on small
// grids the spills cost more than they gain (BENCHMARKS.md).
#define FA1(name, D, WM, BF, ROWS, MIN_BLOCKS)                                                     \
    extern "C" __global__ void __launch_bounds__(128, MIN_BLOCKS)                                  \
        name(AttnArgs a, const u16* q, const u16* k, const u16* v, const void* m, u16* y) {       \
        attention_fa<BF, D, WM, ROWS>(a, q, k, v, m, y);                                           \
    }
#define FA(D, WM)                                                                                  \
    FA1(attention_fa##D##_f16, D, WM, false, false, 1)                                             \
    FA1(attention_fa##D##_bf16, D, WM, true, false, 1)                                             \
    FA1(attention_fam##D##_f16, D, WM, false, true, 1)                                             \
    FA1(attention_fam##D##_bf16, D, WM, true, true, 1)                                             \
    FA1(attention_fa##D##w4_f16, D, WM, false, false, 3)                                           \
    FA1(attention_fa##D##w4_bf16, D, WM, true, false, 3)                                           \
    FA1(attention_fam##D##w4_f16, D, WM, false, true, 3)                                           \
    FA1(attention_fam##D##w4_bf16, D, WM, true, true, 3)
FA(32, 2)
FA(64, 2)
FA(128, 1)
