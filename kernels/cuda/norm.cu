// The layer-normalization family — LayerNormalization, its RMS forms
// (RMSNormalization, SimplifiedLayerNormalization) and com.microsoft's
// SkipLayerNormalization and SkipSimplifiedLayerNormalization — and
// BatchNormalization in inference mode.
//
// A normalized row is `s = x (+ skip) (+ bias)` over `len` elements; the
// output is `(s - mean) * inv * gamma (+ beta)` with `inv = 1 / sqrt(var + eps)`
// (RMS: mean 0, var = mean(s²)). Rows of up to 1024 elements take a warp
// (short rows a slice of one) and live in registers (one read, one write,
// 16-byte accesses where aligned); longer rows take a block each. f16/bf16
// compute in f32, f64 in f64.
#include "common.cuh"

struct NormArgs {
    i64 rows;
    i64 len;
    i64 skip_n;   // skip elements (0: none); a row's skip starts at (row * len) % skip_n, or is skip[0] when 1
    i64 bias_n;   // bias elements (0: none); element i uses bias[i % bias_n]
    i64 gamma_n;  // element i uses gamma[i % gamma_n]
    i64 beta_n;   // 0: none
    float eps;
    int rms;
    int vec;      // warp kernels: 16-byte accesses; block kernel: the row is cached in dynamic shared memory
    int mean_dt;  // ONNX dtype code of the mean output (0: not requested)
    int inv_dt;   // ONNX dtype code of the inverse deviation output (0: not requested)
    int lanes;    // warp kernels: lanes per row
};

// Writes one statistic in its output's own float dtype.
__device__ __forceinline__ void store_stat(void* p, int dt, i64 i, double v) {
    switch (dt) {
    case DT_F32: ((float*)p)[i] = (float)v; break;
    case DT_F64: ((double*)p)[i] = v; break;
    case DT_F16: ((u16*)p)[i] = f32_to_f16((float)v); break;
    case DT_BF16: ((u16*)p)[i] = f32_to_bf16((float)v); break;
    }
}

// Element e of a parameter of n elements broadcast over rows of len.
template <typename T>
__device__ __forceinline__ typename Num<T>::C param(const T* p, i64 n, i64 len, i64 e) {
    return ld(p, n == len ? e : e % n);
}

// ---------------------------------------------------------------- 16-byte rows

struct __align__(16) Pack { u32 w[4]; };

template <typename T> __device__ __forceinline__ void unpack(Pack q, typename Num<T>::C* v);
template <> __device__ __forceinline__ void unpack<float>(Pack q, float* v) {
#pragma unroll
    for (int j = 0; j < 4; ++j) v[j] = __uint_as_float(q.w[j]);
}
template <> __device__ __forceinline__ void unpack<double>(Pack q, double* v) {
    v[0] = __hiloint2double((int)q.w[1], (int)q.w[0]);
    v[1] = __hiloint2double((int)q.w[3], (int)q.w[2]);
}
template <> __device__ __forceinline__ void unpack<f16>(Pack q, float* v) {
#pragma unroll
    for (int j = 0; j < 4; ++j) { v[2 * j] = f16_to_f32((u16)q.w[j]); v[2 * j + 1] = f16_to_f32((u16)(q.w[j] >> 16)); }
}
template <> __device__ __forceinline__ void unpack<bf16>(Pack q, float* v) {
#pragma unroll
    for (int j = 0; j < 4; ++j) { v[2 * j] = bf16_to_f32((u16)q.w[j]); v[2 * j + 1] = bf16_to_f32((u16)(q.w[j] >> 16)); }
}

template <typename T> __device__ __forceinline__ Pack pack(const typename Num<T>::C* v);
template <> __device__ __forceinline__ Pack pack<float>(const float* v) {
    Pack q;
#pragma unroll
    for (int j = 0; j < 4; ++j) q.w[j] = __float_as_uint(v[j]);
    return q;
}
template <> __device__ __forceinline__ Pack pack<double>(const double* v) {
    Pack q;
    q.w[0] = (u32)__double2loint(v[0]); q.w[1] = (u32)__double2hiint(v[0]);
    q.w[2] = (u32)__double2loint(v[1]); q.w[3] = (u32)__double2hiint(v[1]);
    return q;
}
template <> __device__ __forceinline__ Pack pack<f16>(const float* v) {
    Pack q;
#pragma unroll
    for (int j = 0; j < 4; ++j) q.w[j] = (u32)f32_to_f16(v[2 * j]) | ((u32)f32_to_f16(v[2 * j + 1]) << 16);
    return q;
}
template <> __device__ __forceinline__ Pack pack<bf16>(const float* v) {
    Pack q;
#pragma unroll
    for (int j = 0; j < 4; ++j) q.w[j] = (u32)f32_to_bf16(v[2 * j]) | ((u32)f32_to_bf16(v[2 * j + 1]) << 16);
    return q;
}

// Where a lane sits in a row of L = 1 << sh lanes (32 / L rows share a warp),
// whether the row moves in 16-byte vectors, and how many of the lane's slots
// hold elements of the current row. Slot k of a lane is element
// (k << sh) + lane, or with vectors of V elements (((k / V) << sh) + lane) * V + k % V.
struct Row { int lane; int sh; bool vec; int valid; };

// Starts a row of `len` elements (0 for a row past the end): counts the lane's valid slots.
template <typename T, int N>
__device__ __forceinline__ void row_begin(Row& r, int len) {
    const int V = 16 / sizeof(T), L = 1 << r.sh;
    if (r.vec) {
        const int chunks = len / V;
        r.valid = chunks > r.lane ? min(((chunks - r.lane + L - 1) >> r.sh) * V, N) : 0;
    } else {
        r.valid = len > r.lane ? min((len - r.lane + L - 1) >> r.sh, N) : 0;
    }
}

template <typename T>
__device__ __forceinline__ int slot_elem(int k, const Row& r) {
    const int V = 16 / sizeof(T);
    return r.vec ? (((k / V) << r.sh) + r.lane) * V + k % V : (k << r.sh) + r.lane;
}

// Loads the lane's N slots of a row; slots past its end get `pad`.
template <typename T, int N>
__device__ __forceinline__ void load_row(const T* p, const Row& r, typename Num<T>::C* v, typename Num<T>::C pad = 0) {
    const int V = 16 / sizeof(T);
    if constexpr (N % V == 0) {
        if (r.vec) {
#pragma unroll
            for (int c = 0; c < N / V; ++c) {
                if (c * V < r.valid) unpack<T>(*(const Pack*)(p + slot_elem<T>(c * V, r)), v + c * V);
                else {
#pragma unroll
                    for (int j = 0; j < V; ++j) v[c * V + j] = pad;
                }
            }
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = k < r.valid ? ld(p, slot_elem<T>(k, r)) : pad;
}

template <typename T, int N>
__device__ __forceinline__ void store_row(T* p, const Row& r, const typename Num<T>::C* v) {
    const int V = 16 / sizeof(T);
    if constexpr (N % V == 0) {
        if (r.vec) {
#pragma unroll
            for (int c = 0; c < N / V; ++c) {
                if (c * V < r.valid) *(Pack*)(p + slot_elem<T>(c * V, r)) = pack<T>(v + c * V);
            }
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k < r.valid) st(p, slot_elem<T>(k, r), v[k]);
    }
}

// Sum over the L lanes of a row (xor partners stay in the row).
template <typename C> __device__ __forceinline__ C row_sum(C v, int L) {
    for (int m = L >> 1; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    return v;
}

// v[k] = f(v[k], p[k]) over a lane's slots, for a parameter (or a skip row)
// of n elements broadcast over rows of len: 16 bytes at a time when it spans
// the row (n == len) and the row moves in vectors, else element by element
// at `e % n`. Streaming the parameter, instead of loading it into an array
// of N values first, keeps the kernel at about half the registers (more
// rows in flight per multiprocessor).
template <typename T, int N, typename F>
__device__ __forceinline__ void apply_param(const T* p, i64 n, i64 len, const Row& r,
                                            typename Num<T>::C* v, F f) {
    typedef typename Num<T>::C C;
    const int V = 16 / sizeof(T);
    if constexpr (N % V == 0) {
        if (r.vec && n == len) {
#pragma unroll
            for (int c = 0; c < N / V; ++c) {
                if (c * V < r.valid) {
                    C t[V];
                    unpack<T>(*(const Pack*)(p + slot_elem<T>(c * V, r)), t);
#pragma unroll
                    for (int j = 0; j < V; ++j) v[c * V + j] = f(v[c * V + j], t[j]);
                }
            }
            return;
        }
    }
#pragma unroll
    for (int k = 0; k < N; ++k) {
        if (k < r.valid) {
            const i64 e = slot_elem<T>(k, r);
            v[k] = f(v[k], ld(p, n == len ? e : e % n));
        }
    }
}

template <typename C> struct AddOp { __device__ __forceinline__ C operator()(C a, C b) const { return a + b; } };
template <typename C> struct MulOp { __device__ __forceinline__ C operator()(C a, C b) const { return a * b; } };

// A warp reduction of one value over all 32 lanes.
template <typename C> __device__ __forceinline__ C warp_sum(C v) {
    return row_sum(v, 32);
}

// ---------------------------------------------------------------- layer norm

#define NORM_PARAMS                                                                               \
    const NormArgs &a, const T *x, const T *skip, const T *bias, const T *gamma, const T *beta,   \
        T *y, T *sum, void *mean_out, void *inv_out

// Rows of at most a.lanes * N elements, 32 / a.lanes of them per warp, held
// in registers: one read of each input row, one write of each output row.
template <typename T, int N>
__device__ void norm_warp(NORM_PARAMS) {
    typedef typename Num<T>::C C;
    const int wl = threadIdx.x & 31, L = a.lanes;
    Row r;
    r.sh = __ffs(L) - 1;
    r.lane = wl & (L - 1);
    r.vec = a.vec != 0;
    const int R = 32 / L;
    const i64 warps = blockDim.x >> 5;
    const C n = (C)a.len, eps = (C)a.eps;
    C v[N];
    // Whole warps step together (shuffles need every lane); rows past the end are empty.
    for (i64 base = ((i64)blockIdx.x * warps + (threadIdx.x >> 5)) * R; base < a.rows;
         base += (i64)gridDim.x * warps * R) {
        const i64 row = base + (wl >> r.sh);
        const bool live = row < a.rows;
        row_begin<T, N>(r, live ? (int)a.len : 0);
        const i64 at = row * a.len;
        load_row<T, N>(x + at, r, v);
        if (a.skip_n == 1) {
            const C s0 = ld(skip, 0);
#pragma unroll
            for (int k = 0; k < N; ++k) v[k] += s0;
        } else if (a.skip_n > 1) {
            apply_param<T, N>(skip + at % a.skip_n, a.len, a.len, r, v, AddOp<C>());
        }
        if (a.bias_n > 0) apply_param<T, N>(bias, a.bias_n, a.len, r, v, AddOp<C>());
        if (sum) store_row<T, N>(sum + at, r, v);
        C mean = 0, q = 0;
        if (!a.rms) {
            C s = 0;
#pragma unroll
            for (int k = 0; k < N; ++k) s += k < r.valid ? v[k] : (C)0;
            mean = row_sum(s, L) / n;
        }
#pragma unroll
        for (int k = 0; k < N; ++k) {
            const C d = v[k] - mean;
            q += k < r.valid ? d * d : (C)0;
        }
        const C inv = (C)1 / sqrt(row_sum(q, L) / n + eps);
        if (live && r.lane == 0) {
            if (a.mean_dt) store_stat(mean_out, a.mean_dt, row, (double)mean);
            if (a.inv_dt) store_stat(inv_out, a.inv_dt, row, (double)inv);
        }
#pragma unroll
        for (int k = 0; k < N; ++k) v[k] = (v[k] - mean) * inv;
        apply_param<T, N>(gamma, a.gamma_n, a.len, r, v, MulOp<C>());
        if (a.beta_n > 0) apply_param<T, N>(beta, a.beta_n, a.len, r, v, AddOp<C>());
        store_row<T, N>(y + at, r, v);
    }
}

// Element e of a row's `x + skip + bias`.
template <typename T>
__device__ __forceinline__ typename Num<T>::C summed(const NormArgs& a, const T* x, const T* skip, const T* bias,
                                                     i64 at, i64 sb, i64 e) {
    typename Num<T>::C v = ld(x, at + e);
    if (a.skip_n > 0) v += ld(skip, a.skip_n == 1 ? 0 : sb + e);
    if (a.bias_n > 0) v += param(bias, a.bias_n, a.len, e);
    return v;
}

// One block per row: sums shifted by the row's first element (robust
// variance in one pass), then the write pass; the row is cached in dynamic
// shared memory when it fits (shared_mem_bytes = len * sizeof(C)).
template <typename T>
__device__ void norm_block(NORM_PARAMS) {
    typedef typename Num<T>::C C;
    extern __shared__ __align__(16) unsigned char dyn[];
    __shared__ C red[64];
    C* cache = (C*)dyn;
    const bool cached = a.vec != 0;
    const int t = threadIdx.x, B = blockDim.x, warp = t >> 5, warps = B >> 5;
    const C n = (C)a.len, eps = (C)a.eps;
    for (i64 row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const i64 at = row * a.len;
        const i64 sb = a.skip_n > 1 ? at % a.skip_n : 0;
        const C shift = a.rms ? (C)0 : summed(a, x, skip, bias, at, sb, 0);
        C s1 = 0, s2 = 0;
#pragma unroll 4
        for (i64 e = t; e < a.len; e += B) {
            const C v = summed(a, x, skip, bias, at, sb, e);
            if (cached) cache[e] = v;
            const C d = v - shift;
            s1 += d;
            s2 += d * d;
        }
        s1 = warp_sum(s1);
        s2 = warp_sum(s2);
        if ((t & 31) == 0) { red[2 * warp] = s1; red[2 * warp + 1] = s2; }
        __syncthreads();
        s1 = 0;
        s2 = 0;
        for (int i = 0; i < warps; ++i) { s1 += red[2 * i]; s2 += red[2 * i + 1]; }
        __syncthreads();
        const C m1 = s1 / n, var = s2 / n - m1 * m1;
        const C mean = a.rms ? (C)0 : shift + m1;
        const C inv = (C)1 / sqrt((a.rms ? s2 / n : (var > (C)0 ? var : (C)0)) + eps);
        if (t == 0) {
            if (a.mean_dt) store_stat(mean_out, a.mean_dt, row, (double)mean);
            if (a.inv_dt) store_stat(inv_out, a.inv_dt, row, (double)inv);
        }
#pragma unroll 4
        for (i64 e = t; e < a.len; e += B) {
            const C v = cached ? cache[e] : summed(a, x, skip, bias, at, sb, e);
            if (sum) st(sum, at + e, v);
            C o = (v - mean) * inv * param(gamma, a.gamma_n, a.len, e);
            if (a.beta_n > 0) o += param(beta, a.beta_n, a.len, e);
            st(y, at + e, o);
        }
    }
}

// ---------------------------------------------------------------- batch norm

// Per-channel affine with running statistics over `n` elements laid out
// [batch, channels, inner]; each parameter has its own float dtype.
struct BatchNormArgs {
    i64 n;
    i64 channels;
    i64 inner;
    float eps;
    int scale_dt;
    int bias_dt;
    int mean_dt;
    int var_dt;
    int _pad;
};

__device__ __forceinline__ double ld_real(const void* p, int dt, i64 i) {
    switch (dt) {
    case DT_F64: return ((const double*)p)[i];
    case DT_F16: return f16_to_f32(((const u16*)p)[i]);
    case DT_BF16: return bf16_to_f32(((const u16*)p)[i]);
    }
    return ((const float*)p)[i];
}

template <typename T>
__device__ void batchnorm(const BatchNormArgs& a, const T* x, const void* scale, const void* bias,
                          const void* mean, const void* var, T* y) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < a.n; i += grid_stride()) {
        const i64 c = (i / a.inner) % a.channels;
        const C k = (C)ld_real(scale, a.scale_dt, c) / sqrt((C)ld_real(var, a.var_dt, c) + (C)a.eps);
        const C b = (C)ld_real(bias, a.bias_dt, c) - (C)ld_real(mean, a.mean_dt, c) * k;
        st(y, i, (C)ld(x, i) * k + b);
    }
}

// ---------------------------------------------------------------- entry points

#define NORM_ARGS(T)                                                                               \
    NormArgs a, const T *x, const T *skip, const T *bias, const T *gamma, const T *beta, T *y,    \
        T *sum, void *mean, void *inv

// B blocks of 128 threads per multiprocessor at least (B = 6: at most 80
// registers). The 16-bit rows up to 768 elements (N <= 24) are latency-bound
// and fit that with at most 16 bytes of spills: twice the rows in flight of
// the unbounded 136-register build. Wider rows (N = 32) and f32/f64, which
// would spill hundreds of bytes a thread, keep every register (B = 1).
#define NORM_WARP(T, S, N, B)                                                                     \
    extern "C" __global__ void __launch_bounds__(128, B) layernorm_warp##N##_##S(NORM_ARGS(T)) {     \
        norm_warp<T, N>(a, x, skip, bias, gamma, beta, y, sum, mean, inv);                        \
    }

#define NORM(T, S, B)                                                                             \
    NORM_WARP(T, S, 1, B) NORM_WARP(T, S, 2, B) NORM_WARP(T, S, 4, B) NORM_WARP(T, S, 8, B)       \
    NORM_WARP(T, S, 12, B) NORM_WARP(T, S, 16, B) NORM_WARP(T, S, 24, B) NORM_WARP(T, S, 32, 1)   \
    extern "C" __global__ void layernorm_block_##S(NORM_ARGS(T)) {                                   \
        norm_block<T>(a, x, skip, bias, gamma, beta, y, sum, mean, inv);                          \
    }                                                                                             \
    extern "C" __global__ void batchnorm_##S(BatchNormArgs a, const T* x, const void* scale,      \
                                             const void* bias, const void* mean, const void* var, \
                                             T* y) {                                              \
        batchnorm<T>(a, x, scale, bias, mean, var, y);                                            \
    }

NORM(float, f32, 1)
NORM(double, f64, 1)
NORM(f16, f16, 6)
NORM(bf16, bf16, 6)
