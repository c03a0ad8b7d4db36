// Pooling: MaxPool (with its optional Indices output) and AveragePool over
// windows with strides, dilations, padding and ceil mode, one output element
// per thread; GlobalMaxPool and GlobalAveragePool reduce each (image,
// channel) plane with a warp or a whole block.
//
// Windowed pools see X as [planes, D, H, W] (1-d and 2-d pools arrive with
// leading spatial dims of size 1). The semantics follow the CPU backend:
// windows are scanned in row-major kernel order; MaxPool keeps the first
// maximum, replaces a NaN maximum by the next value, and gives an empty
// window -inf (the lowest integer) and index -1; AveragePool divides by the
// elements inside the input, or with count_include_pad by the window
// positions inside the padded extent, and gives an empty window 0.
#include "common.cuh"

// n / d, in 32 bits when both fit.
__device__ __forceinline__ i64 div64(i64 n, i64 d) {
    if (((u64)n | (u64)d) >> 32 == 0) return (i64)((u32)n / (u32)d);
    return n / d;
}

// Mirrors `PoolGeom` in pool.rs.
struct PoolGeom {
    i64 total;  // planes * OS
    i64 is;     // input spatial volume
    i64 os;     // output spatial volume
    int in_d, in_h, in_w;
    int out_h, out_w;
    int k_d, k_h, k_w;
    int s_d, s_h, s_w;
    int p_d, p_h, p_w;
    int e_d, e_h, e_w;  // end of the padded extent: input size + end padding
    int d_d, d_h, d_w;
    int c_d, c_h, c_w;  // strides of the Indices output (row- or column-major)
    int count_include_pad;
    int has_indices;
};
static_assert(sizeof(PoolGeom) == 128, "PoolGeom must match pool.rs");

template <typename C> __device__ __forceinline__ C lowest();
template <> __device__ __forceinline__ float lowest<float>() { return -__int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double lowest<double>() { return -__longlong_as_double(0x7ff0000000000000LL); }
template <> __device__ __forceinline__ u8 lowest<u8>() { return 0; }
template <> __device__ __forceinline__ i8 lowest<i8>() { return -128; }

// The output position of element i and its window origin.
struct Origin { i64 plane; int bd, bh, bw; };

__device__ __forceinline__ Origin origin(const PoolGeom& g, i64 i) {
    Origin r;
    r.plane = div64(i, g.os);
    const int o = (int)(i - r.plane * g.os);
    const int ow = o % g.out_w;
    const int oh = (o / g.out_w) % g.out_h;
    const int od = o / g.out_w / g.out_h;
    r.bd = od * g.s_d - g.p_d;
    r.bh = oh * g.s_h - g.p_h;
    r.bw = ow * g.s_w - g.p_w;
    return r;
}

template <typename T>
__device__ __forceinline__ void max_pool(const PoolGeom& g, const T* __restrict__ x,
                                         T* __restrict__ y, i64* __restrict__ indices) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < g.total; i += grid_stride()) {
        const Origin w = origin(g, i);
        const T* xp = x + w.plane * g.is;
        bool have = false;
        C best = lowest<C>();
        i64 at = -1;
        for (int kd = 0; kd < g.k_d; ++kd) {
            const int id = w.bd + kd * g.d_d;
            if ((unsigned)id >= (unsigned)g.in_d) continue;
            for (int kh = 0; kh < g.k_h; ++kh) {
                const int ih = w.bh + kh * g.d_h;
                if ((unsigned)ih >= (unsigned)g.in_h) continue;
                const i64 row = ((i64)id * g.in_h + ih) * g.in_w;
                for (int kw = 0; kw < g.k_w; ++kw) {
                    const int iw = w.bw + kw * g.d_w;
                    if ((unsigned)iw >= (unsigned)g.in_w) continue;
                    const C v = ld(xp, row + iw);
                    if (!have || v > best || best != best) {
                        best = v;
                        have = true;
                        at = (i64)id * g.c_d + (i64)ih * g.c_h + (i64)iw * g.c_w;
                    }
                }
            }
        }
        st(y, i, best);
        if (g.has_indices) indices[i] = have ? w.plane * g.is + at : -1;
    }
}

template <typename T>
__device__ __forceinline__ void avg_pool(const PoolGeom& g, const T* __restrict__ x,
                                         T* __restrict__ y) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < g.total; i += grid_stride()) {
        const Origin w = origin(g, i);
        const T* xp = x + w.plane * g.is;
        C sum = (C)0;
        int count = 0;
        for (int kd = 0; kd < g.k_d; ++kd) {
            const int id = w.bd + kd * g.d_d;
            const bool din = (unsigned)id < (unsigned)g.in_d;
            for (int kh = 0; kh < g.k_h; ++kh) {
                const int ih = w.bh + kh * g.d_h;
                const bool hin = (unsigned)ih < (unsigned)g.in_h;
                for (int kw = 0; kw < g.k_w; ++kw) {
                    const int iw = w.bw + kw * g.d_w;
                    if (din && hin && (unsigned)iw < (unsigned)g.in_w) {
                        sum += ld(xp, ((i64)id * g.in_h + ih) * g.in_w + iw);
                        ++count;
                    } else if (g.count_include_pad && id < g.e_d && ih < g.e_h && iw < g.e_w) {
                        ++count;
                    }
                }
            }
        }
        st(y, i, count > 0 ? sum / (C)count : (C)0);
    }
}

// NaN-propagating maximum (the CPU backend's global max keeps the first NaN).
template <typename C>
__device__ __forceinline__ C nan_max(C a, C b) {
    if (a != a) return a;
    return (b > a || b != b) ? b : a;
}

template <typename C, bool MAX>
__device__ __forceinline__ C combine(C a, C b) {
    if constexpr (MAX) return nan_max(a, b);
    else return a + b;
}

template <typename C, bool MAX>
__device__ __forceinline__ C warp_reduce(C v) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v = combine<C, MAX>(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// One warp per plane (small planes): lanes stride over the plane.
template <typename T, bool MAX>
__device__ __forceinline__ void global_pool_warp(i64 planes, i64 is, const T* __restrict__ x,
                                                 T* __restrict__ y) {
    typedef typename Num<T>::C C;
    const int lane = threadIdx.x & 31;
    const i64 warp = thread_index() >> 5;
    const i64 warps = grid_stride() >> 5;
    for (i64 p = warp; p < planes; p += warps) {
        const T* xp = x + p * is;
        C acc = MAX ? lowest<C>() : (C)0;
        for (i64 e = lane; e < is; e += 32) acc = combine<C, MAX>(acc, ld(xp, e));
        acc = warp_reduce<C, MAX>(acc);
        if (lane == 0) st(y, p, MAX ? acc : acc / (C)(is > 0 ? is : 1));
    }
}

// One block of 256 threads per plane (large planes).
template <typename T, bool MAX>
__device__ __forceinline__ void global_pool_block(i64 planes, i64 is, const T* __restrict__ x,
                                                  T* __restrict__ y) {
    typedef typename Num<T>::C C;
    __shared__ C part[8];
    const int lane = threadIdx.x & 31;
    const int warp = threadIdx.x >> 5;
    for (i64 p = blockIdx.x; p < planes; p += gridDim.x) {
        const T* xp = x + p * is;
        C acc = MAX ? lowest<C>() : (C)0;
        for (i64 e = threadIdx.x; e < is; e += blockDim.x) acc = combine<C, MAX>(acc, ld(xp, e));
        acc = warp_reduce<C, MAX>(acc);
        if (lane == 0) part[warp] = acc;
        __syncthreads();
        if (warp == 0) {
            acc = lane < (int)(blockDim.x >> 5) ? part[lane] : (MAX ? lowest<C>() : (C)0);
            acc = warp_reduce<C, MAX>(acc);
            if (lane == 0) st(y, p, MAX ? acc : acc / (C)(is > 0 ? is : 1));
        }
        __syncthreads();
    }
}

#define MAX_POOL(T, S)                                                                           \
    extern "C" __global__ void max_pool_##S(PoolGeom g, const T* x, T* y, i64* indices) {        \
        max_pool<T>(g, x, y, indices);                                                           \
    }

#define FLOAT_POOLS(T, S)                                                                        \
    MAX_POOL(T, S)                                                                               \
    extern "C" __global__ void avg_pool_##S(PoolGeom g, const T* x, T* y) { avg_pool<T>(g, x, y); } \
    extern "C" __global__ void global_max_warp_##S(i64 planes, i64 is, const T* x, T* y) {       \
        global_pool_warp<T, true>(planes, is, x, y);                                             \
    }                                                                                            \
    extern "C" __global__ void global_avg_warp_##S(i64 planes, i64 is, const T* x, T* y) {       \
        global_pool_warp<T, false>(planes, is, x, y);                                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                            \
        global_max_block_##S(i64 planes, i64 is, const T* x, T* y) {                             \
        global_pool_block<T, true>(planes, is, x, y);                                            \
    }                                                                                            \
    extern "C" __global__ void __launch_bounds__(256)                                            \
        global_avg_block_##S(i64 planes, i64 is, const T* x, T* y) {                             \
        global_pool_block<T, false>(planes, is, x, y);                                           \
    }

FLOAT_POOLS(float, f32)
FLOAT_POOLS(f16, f16)
FLOAT_POOLS(bf16, bf16)
FLOAT_POOLS(double, f64)
MAX_POOL(u8, u8)
MAX_POOL(i8, i8)
