// Convolution: an implicit GEMM for general convolutions and a direct kernel
// for depthwise and other thin ones; ConvTranspose as a direct kernel too. No scratch memory: the GEMM gathers its
// input patches from X on the fly while it fills shared memory.
//
// Layouts: X [N, C, D, H, W], W [M, C/group, KD, KH, KW], B [M], Y [N, M, OD, OH, OW]
// (1-d and 2-d convolutions arrive with leading spatial dims of size 1).
// Per group g the GEMM computes Y_g[m, j] = sum_k W_g[m, k] * P_g[k, j] with
//   m = output channel in the group          (rows, "M" = C_out / group),
//   j = n * OS + output position             (columns, "N" = batch * output spatial),
//   k = c * KS + kernel position             ("K" = C_in / group * kernel volume),
// where P_g[k, j] is the input element under kernel position k for output j (0 in padding).
// Products are accumulated in f32 (f64 for f64 tensors). For f32 outputs with
// few tiles, K may be split across blocks that add their partial sums
// atomically into an output zeroed first (conv_zero_f32).
#include "common.cuh"

// Division by a run-time constant as a multiply-high and a shift (valid for n < 2^31).
struct FastDiv { u32 d; u32 m; u32 s; u32 _pad; };

__device__ __forceinline__ u32 fdiv(u32 n, const FastDiv& f) {
    return (__umulhi(n, f.m) + n) >> f.s;
}

// n / d, in 32 bits when both fit.
__device__ __forceinline__ i64 div64(i64 n, i64 d) {
    if (((u64)n | (u64)d) >> 32 == 0) return (i64)((u32)n / (u32)d);
    return n / d;
}

// Mirrors `ConvGeom` in conv.rs.
struct ConvGeom {
    i64 ncols;    // N * OS: GEMM columns
    i64 x_batch;  // C * IS: elements of one image of X
    i64 y_batch;  // M * OS: elements of one image of Y
    i64 is;       // input spatial volume
    i64 os;       // output spatial volume
    int m_out;    // M
    int cg;       // input channels per group
    int mg;       // output channels per group
    int k;        // GEMM K = cg * KS
    int ks;       // kernel volume KD * KH * KW
    int in_d, in_h, in_w;
    int out_h, out_w;
    int k_d, k_h, k_w;
    int s_d, s_h, s_w;
    int p_d, p_h, p_w;
    int d_d, d_h, d_w;
    int has_bias;
    int k_chunk;  // K range of one split (a multiple of the tile's K step)
    int splits;   // K splits: above 1, f32 outputs are pre-zeroed and accumulated atomically
    FastDiv div_ks;   // by KS
    FastDiv div_khw;  // by KH * KW
    FastDiv div_kw;   // by KW
};
static_assert(sizeof(ConvGeom) == 192, "ConvGeom must match conv.rs");

// Loads V consecutive shared-memory values (vectorized for f32).
template <int V>
__device__ __forceinline__ void lds(const float* p, float* o) {
    if constexpr (V == 4) {
        float4 v = *reinterpret_cast<const float4*>(p);
        o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
    } else if constexpr (V == 2) {
        float2 v = *reinterpret_cast<const float2*>(p);
        o[0] = v.x; o[1] = v.y;
    } else {
        o[0] = p[0];
    }
}

template <int V>
__device__ __forceinline__ void lds(const double* p, double* o) {
#pragma unroll
    for (int i = 0; i < V; ++i) o[i] = p[i];
}

// Adds a split-K partial sum into a pre-zeroed output (f32 only: the host
// splits K for f32 outputs alone).
template <typename T>
__device__ __forceinline__ void add_out(T* y, i64 i, typename Num<T>::C v) { st(y, i, v); }
template <>
__device__ __forceinline__ void add_out<float>(float* y, i64 i, float v) { atomicAdd(y + i, v); }

// One BM x BN tile of Y_g per block of (BM / TM) * (BN / TN) threads, each
// thread holding a TM x TN micro-tile. K advances BK at a time through two
// shared-memory stages: the next tile is fetched into registers while the
// current one is multiplied. A thread's micro-tile rows are split in groups of
// (at most) 4 spaced BM / (TM / 4) apart, so shared reads are 16-byte vectors
// without bank conflicts; the same holds for columns. blockIdx.z picks the
// group and, when K is split across blocks, the split.
template <typename T, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void conv_gemm(const ConvGeom& g, const T* __restrict__ x,
                                          const T* __restrict__ w, const T* __restrict__ b,
                                          T* __restrict__ y) {
    typedef typename Num<T>::C C;
    constexpr int NT = (BM / TM) * (BN / TN);
    constexpr int A_LD = BM * BK / NT;  // weight elements each thread fetches per K step
    constexpr int B_LD = BK * BN / NT;  // input elements each thread fetches per K step
    constexpr int VM = TM < 4 ? TM : 4;
    constexpr int VN = TN < 4 ? TN : 4;
    constexpr int PAD = 4;
    static_assert(NT % BN == 0 && (BM * BK) % NT == 0 && (BK * BN) % NT == 0, "tile shape");
    __shared__ __align__(16) C As[2][BK][BM + PAD];
    __shared__ __align__(16) C Bs[2][BK][BN + PAD];

    const int tid = threadIdx.x;
    const int group = blockIdx.z / g.splits;
    // This block's K range: whole BK steps from k_begin, so `k < g.k` guards it.
    const int k_begin = (blockIdx.z - group * g.splits) * g.k_chunk;
    const int m0 = blockIdx.y * BM;
    const i64 col0 = (i64)blockIdx.x * BN;
    const T* wg = w + (i64)group * g.mg * g.k;

    // The one GEMM column this thread gathers: its image and window origin.
    const int bj = tid % BN;
    const int bk0 = tid / BN;
    const i64 jcol = col0 + bj;
    const bool col_ok = jcol < g.ncols;
    const i64 img = col_ok ? div64(jcol, g.os) : 0;
    const int o = col_ok ? (int)(jcol - img * g.os) : 0;
    const int ow = o % g.out_w;
    const int oh = (o / g.out_w) % g.out_h;
    const int od = o / g.out_w / g.out_h;
    const int bd = od * g.s_d - g.p_d;
    const int bh = oh * g.s_h - g.p_h;
    const int bw = ow * g.s_w - g.p_w;
    const T* xb = x + img * g.x_batch + (i64)group * g.cg * g.is;
    const int khw = g.k_h * g.k_w;

    C a_reg[A_LD];
    C b_reg[B_LD];

    auto fetch = [&](int k0) {
#pragma unroll
        for (int i = 0; i < A_LD; ++i) {
            const int e = tid + i * NT;
            const int m = m0 + e / BK;
            const int k = k0 + e % BK;
            a_reg[i] = (m < g.mg && k < g.k) ? ld(wg, (i64)m * g.k + k) : (C)0;
        }
#pragma unroll
        for (int i = 0; i < B_LD; ++i) {
            const int k = k0 + bk0 + i * (NT / BN);
            C v = (C)0;
            if (col_ok && k < g.k) {
                const u32 c = fdiv((u32)k, g.div_ks);
                u32 r = (u32)k - c * (u32)g.ks;
                const u32 kd = fdiv(r, g.div_khw);
                r -= kd * (u32)khw;
                const u32 kh = fdiv(r, g.div_kw);
                const u32 kw = r - kh * (u32)g.k_w;
                const int id = bd + (int)kd * g.d_d;
                const int ih = bh + (int)kh * g.d_h;
                const int iw = bw + (int)kw * g.d_w;
                if ((unsigned)id < (unsigned)g.in_d && (unsigned)ih < (unsigned)g.in_h &&
                    (unsigned)iw < (unsigned)g.in_w) {
                    v = ld(xb, (i64)c * g.is + ((i64)id * g.in_h + ih) * g.in_w + iw);
                }
            }
            b_reg[i] = v;
        }
    };
    auto stash = [&](int buf) {
#pragma unroll
        for (int i = 0; i < A_LD; ++i) {
            const int e = tid + i * NT;
            As[buf][e % BK][e / BK] = a_reg[i];
        }
#pragma unroll
        for (int i = 0; i < B_LD; ++i) Bs[buf][bk0 + i * (NT / BN)][bj] = b_reg[i];
    };

    const int tx = tid % (BN / TN);
    const int ty = tid / (BN / TN);
    C acc[TM][TN];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = (C)0;

    const int ntiles = (min(g.k - k_begin, g.k_chunk) + BK - 1) / BK;
    fetch(k_begin);
    stash(0);
    __syncthreads();
    for (int t = 0; t < ntiles; ++t) {
        const int buf = t & 1;
        if (t + 1 < ntiles) fetch(k_begin + (t + 1) * BK);
#pragma unroll
        for (int kk = 0; kk < BK; ++kk) {
            C a[TM], bv[TN];
#pragma unroll
            for (int q = 0; q < TM / VM; ++q) lds<VM>(&As[buf][kk][q * (BM / (TM / VM)) + ty * VM], &a[q * VM]);
#pragma unroll
            for (int q = 0; q < TN / VN; ++q) lds<VN>(&Bs[buf][kk][q * (BN / (TN / VN)) + tx * VN], &bv[q * VN]);
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * bv[j];
        }
        if (t + 1 < ntiles) stash(buf ^ 1);
        __syncthreads();
    }

    // Epilogue: add the bias and scatter the micro-tile to Y, column by column.
#pragma unroll
    for (int j = 0; j < TN; ++j) {
        const i64 col = col0 + (j / VN) * (BN / (TN / VN)) + tx * VN + j % VN;
        if (col >= g.ncols) continue;
        const i64 n = div64(col, g.os);
        const i64 ybase = n * g.y_batch + (col - n * g.os);
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            const int m = m0 + (i / VM) * (BM / (TM / VM)) + ty * VM + i % VM;
            if (m >= g.mg) continue;
            const int ch = group * g.mg + m;
            const C v = acc[i][j] + ((g.has_bias && k_begin == 0) ? ld(b, ch) : (C)0);
            if (g.splits > 1) add_out(y, ybase + (i64)ch * g.os, v);
            else st(y, ybase + (i64)ch * g.os, v);
        }
    }
}

// Where output element i of Y [N, M, OD, OH, OW] sits.
struct OutPos { i64 n; int m, od, oh, ow; };

__device__ __forceinline__ OutPos out_pos(const ConvGeom& g, i64 i) {
    const i64 plane = div64(i, g.os);
    const int o = (int)(i - plane * g.os);
    OutPos p;
    p.n = div64(plane, g.m_out);
    p.m = (int)(plane - p.n * g.m_out);
    p.ow = o % g.out_w;
    p.oh = (o / g.out_w) % g.out_h;
    p.od = o / g.out_w / g.out_h;
    return p;
}

// One output element per thread: for depthwise convolutions (one input
// channel per group) and for convolutions with very few output channels per
// group, where a GEMM tile would be mostly empty.
template <typename T>
__device__ __forceinline__ void conv_direct(const ConvGeom& g, const T* __restrict__ x,
                                            const T* __restrict__ w, const T* __restrict__ b,
                                            T* __restrict__ y, i64 total) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < total; i += grid_stride()) {
        const OutPos p = out_pos(g, i);
        const i64 n = p.n;
        const int m = p.m, od = p.od, oh = p.oh, ow = p.ow;
        const int group = m / g.mg;
        const int bd = od * g.s_d - g.p_d;
        const int bh = oh * g.s_h - g.p_h;
        const int bw = ow * g.s_w - g.p_w;
        const T* xb = x + n * g.x_batch + (i64)group * g.cg * g.is;
        const T* wb = w + (i64)m * g.k;
        C acc = (C)0;
        for (int c = 0; c < g.cg; ++c) {
            const T* xc = xb + (i64)c * g.is;
            const T* wc = wb + c * g.ks;
            for (int kd = 0; kd < g.k_d; ++kd) {
                const int id = bd + kd * g.d_d;
                if ((unsigned)id >= (unsigned)g.in_d) continue;
                for (int kh = 0; kh < g.k_h; ++kh) {
                    const int ih = bh + kh * g.d_h;
                    if ((unsigned)ih >= (unsigned)g.in_h) continue;
                    const i64 row = ((i64)id * g.in_h + ih) * g.in_w;
                    const int wrow = (kd * g.k_h + kh) * g.k_w;
                    for (int kw = 0; kw < g.k_w; ++kw) {
                        const int iw = bw + kw * g.d_w;
                        if ((unsigned)iw >= (unsigned)g.in_w) continue;
                        acc += ld(wc, wrow + kw) * ld(xc, row + iw);
                    }
                }
            }
        }
        if (g.has_bias) acc += ld(b, m);
        st(y, i, acc);
    }
}

// ConvTranspose, one output element per thread. X [N, C, …], W [C, M/group,
// k…], Y [N, M, …]; the geometry's pads are the output positions cut from
// the start of each axis (negative: the output is extended). Output o of an
// axis takes input i under kernel tap k where i·s + k·d = o + p: the taps
// whose (o + p − k·d) divides evenly by s and lands inside the input.
template <typename T>
__device__ __forceinline__ void conv_transpose_direct(const ConvGeom& g, const T* __restrict__ x,
                                                      const T* __restrict__ w, const T* __restrict__ b,
                                                      T* __restrict__ y, i64 total) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < total; i += grid_stride()) {
        const OutPos p = out_pos(g, i);
        const i64 n = p.n;
        const int m = p.m, od = p.od, oh = p.oh, ow = p.ow;
        const int group = m / g.mg, mm = m - group * g.mg;
        const T* xb = x + n * g.x_batch + (i64)group * g.cg * g.is;
        C acc = g.has_bias ? ld(b, m) : (C)0;
        for (int c = 0; c < g.cg; ++c) {
            const T* xc = xb + (i64)c * g.is;
            const T* wc = w + ((i64)(group * g.cg + c) * g.mg + mm) * g.ks;
            for (int kd = 0; kd < g.k_d; ++kd) {
                const int td = od + g.p_d - kd * g.d_d;
                if (td < 0 || td % g.s_d != 0 || td / g.s_d >= g.in_d) continue;
                for (int kh = 0; kh < g.k_h; ++kh) {
                    const int th = oh + g.p_h - kh * g.d_h;
                    if (th < 0 || th % g.s_h != 0 || th / g.s_h >= g.in_h) continue;
                    const i64 row = ((i64)(td / g.s_d) * g.in_h + th / g.s_h) * g.in_w;
                    const int wrow = (kd * g.k_h + kh) * g.k_w;
                    for (int kw = 0; kw < g.k_w; ++kw) {
                        const int tw = ow + g.p_w - kw * g.d_w;
                        if (tw < 0 || tw % g.s_w != 0 || tw / g.s_w >= g.in_w) continue;
                        acc += ld(wc, wrow + kw) * ld(xc, row + tw / g.s_w);
                    }
                }
            }
        }
        st(y, i, acc);
    }
}

#define CONV_GEMM(NAME, T, BM, BN, BK, TM, TN, MINB)                                         \
    extern "C" __global__ void __launch_bounds__((BM / TM) * (BN / TN), MINB)                \
        NAME(ConvGeom g, const T* x, const T* w, const T* b, T* y) {                          \
        conv_gemm<T, BM, BN, BK, TM, TN>(g, x, w, b, y);                                      \
    }

#define CONV_ALL(T, S)                                                                        \
    CONV_GEMM(conv_gemm64_##S, T, 64, 64, 16, 4, 4, 2)                                         \
    CONV_GEMM(conv_gemm32_##S, T, 32, 32, 16, 2, 2, 2)                                         \
    CONV_GEMM(conv_gemm16_##S, T, 16, 64, 16, 1, 4, 2)                                         \
    extern "C" __global__ void conv_direct_##S(ConvGeom g, i64 total, const T* x, const T* w, \
                                               const T* b, T* y) {                            \
        conv_direct<T>(g, x, w, b, y, total);                                                 \
    }                                                                                         \
    extern "C" __global__ void conv_transpose_##S(ConvGeom g, i64 total, const T* x,          \
                                                  const T* w, const T* b, T* y) {             \
        conv_transpose_direct<T>(g, x, w, b, y, total);                                       \
    }

CONV_ALL(float, f32)
CONV_ALL(f16, f16)
CONV_ALL(bf16, bf16)
CONV_ALL(double, f64)
// The large tile keeps 64 accumulators per thread: f32 accumulation only.
CONV_GEMM(conv_gemm128_f32, float, 128, 128, 8, 8, 8, 2)
CONV_GEMM(conv_gemm128_f16, f16, 128, 128, 8, 8, 8, 2)
CONV_GEMM(conv_gemm128_bf16, bf16, 128, 128, 8, 8, 8, 2)

// Zeroes an f32 output before split-K blocks accumulate into it.
extern "C" __global__ void conv_zero_f32(i64 n, float* y) {
    for (i64 i = thread_index(); i < n; i += grid_stride()) y[i] = 0.0f;
}
