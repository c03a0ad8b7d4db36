// Reductions over any set of axes (Reduce*), ArgMax/ArgMin,
// and the softmax family (Softmax, LogSoftmax, Hardmax).
//
// A reduction sees its input as kept dims × reduced dims (unit dims dropped,
// neighbours of one kind merged on the host). Each output gets a group of
// `lanes` threads of a 256-thread block: along the reduced elements when the
// innermost dim is reduced ("row": consecutive lanes read consecutive
// elements), else across outputs ("column": consecutive threads are
// consecutive outputs). Floats accumulate in f32 (f64 for f64), integers
// exactly in 64 bits with wrapping arithmetic.
#include "common.cuh"

// ---------------------------------------------------------------- numeric traits

template <typename T> struct IsInt { static const bool v = false; };
template <> struct IsInt<i8> { static const bool v = true; };
template <> struct IsInt<u8> { static const bool v = true; };
template <> struct IsInt<i16> { static const bool v = true; };
template <> struct IsInt<u16> { static const bool v = true; };
template <> struct IsInt<int> { static const bool v = true; };
template <> struct IsInt<u32> { static const bool v = true; };
template <> struct IsInt<i64> { static const bool v = true; };
template <> struct IsInt<u64> { static const bool v = true; };

// The smallest and largest value of an integer type.
template <typename T> struct Lim;
template <> struct Lim<i8> { static __device__ i8 lo() { return -128; } static __device__ i8 hi() { return 127; } };
template <> struct Lim<u8> { static __device__ u8 lo() { return 0; } static __device__ u8 hi() { return 255; } };
template <> struct Lim<i16> { static __device__ i16 lo() { return -32768; } static __device__ i16 hi() { return 32767; } };
template <> struct Lim<u16> { static __device__ u16 lo() { return 0; } static __device__ u16 hi() { return 65535; } };
template <> struct Lim<int> { static __device__ int lo() { return -2147483647 - 1; } static __device__ int hi() { return 2147483647; } };
template <> struct Lim<u32> { static __device__ u32 lo() { return 0u; } static __device__ u32 hi() { return 4294967295u; } };
template <> struct Lim<i64> { static __device__ i64 lo() { return -9223372036854775807LL - 1; } static __device__ i64 hi() { return 9223372036854775807LL; } };
template <> struct Lim<u64> { static __device__ u64 lo() { return 0ull; } static __device__ u64 hi() { return 18446744073709551615ull; } };

// The exact accumulator of an integer type: i64, or u64 for u64.
template <typename T> struct IntAcc { typedef i64 A; };
template <> struct IntAcc<u64> { typedef u64 A; };

template <typename C> __device__ __forceinline__ C inf_of();
template <> __device__ __forceinline__ float inf_of<float>() { return __int_as_float(0x7f800000); }
template <> __device__ __forceinline__ double inf_of<double>() { return __longlong_as_double(0x7ff0000000000000LL); }

// Wrapping add and multiply (through u64 for signed accumulators), and
// NaN-propagating max and min (a NaN, once seen, wins).
template <typename A> __device__ __forceinline__ A add_(A a, A b) { return a + b; }
template <> __device__ __forceinline__ i64 add_<i64>(i64 a, i64 b) { return (i64)((u64)a + (u64)b); }
template <typename A> __device__ __forceinline__ A mul_(A a, A b) { return a * b; }
template <> __device__ __forceinline__ i64 mul_<i64>(i64 a, i64 b) { return (i64)((u64)a * (u64)b); }
template <typename A> __device__ __forceinline__ A max_(A a, A b) { return (b > a || b != b) ? b : a; }
template <typename A> __device__ __forceinline__ A min_(A a, A b) { return (b < a || b != b) ? b : a; }
// Max ignoring NaN (like f64::max), for the peak of LogSumExp and softmax rows.
template <typename A> __device__ __forceinline__ A peak_(A a, A b) { return (b > a || a != a) ? b : a; }

// Integers from a real value like Rust's `as`: NaN is 0, out-of-range values saturate.
template <typename T> __device__ __forceinline__ T sat_int(double v) {
    if (v != v) return (T)0;
    if (v <= (double)Lim<T>::lo()) return Lim<T>::lo();
    if (v >= (double)Lim<T>::hi()) return Lim<T>::hi();
    return (T)v;
}

template <typename T, typename A> __device__ __forceinline__ A load_as(const T* p, i64 i) { return (A)ld(p, i); }

template <typename T, typename A> __device__ __forceinline__ void store_real(T* y, i64 i, A v) {
    if constexpr (IsInt<T>::v) y[i] = sat_int<T>((double)v);
    else st(y, i, (typename Num<T>::C)v);
}

// ---------------------------------------------------------------- groups of lanes

struct ReduceShape {
    i64 outputs;     // output elements
    i64 count;       // reduced elements per output
    int kept_rank;
    int red_rank;
    int row;         // lanes run along the reduced elements (the innermost dim is reduced)
    int lanes;       // lanes per output, a power of two dividing the 256-thread block
    int op;          // a REDUCE_* code (codes.cuh)
    int last;        // ArgMax/ArgMin: select_last_index
    i64 kept_dims[MAX_RANK];
    i64 kept_strides[MAX_RANK];
    i64 red_dims[MAX_RANK];
    i64 red_strides[MAX_RANK];
};

#define REDUCE_BLOCK 256

__device__ __forceinline__ i64 kept_offset(const ReduceShape& s, i64 o) {
    i64 off = 0;
    for (int d = s.kept_rank - 1; d >= 0; --d) {
        i64 n = s.kept_dims[d];
        i64 q = o / n;
        off += (o - q * n) * s.kept_strides[d];
        o = q;
    }
    return off;
}

__device__ __forceinline__ i64 red_offset(const ReduceShape& s, i64 r) {
    if (s.red_rank == 1) return r * s.red_strides[0];
    i64 off = 0;
    for (int d = s.red_rank - 1; d >= 0; --d) {
        i64 n = s.red_dims[d];
        i64 q = r / n;
        off += (r - q * n) * s.red_strides[d];
        r = q;
    }
    return off;
}

// Where this thread sits: its lane in its group, its group in the block, the
// thread distance between lanes, the thread holding lane 0, and whether the
// group is a power-of-two slice of one warp (so shuffles reduce it).
struct Lanes { int lane; int group; int groups; int step; int head; int n; bool shfl; };

__device__ __forceinline__ Lanes lanes_of(const ReduceShape& s) {
    Lanes l;
    const int t = threadIdx.x;
    l.n = s.lanes;
    l.groups = REDUCE_BLOCK / s.lanes;
    if (s.row) { l.lane = t % s.lanes; l.group = t / s.lanes; l.step = 1; }
    else { l.lane = t / l.groups; l.group = t % l.groups; l.step = l.groups; }
    l.head = t - l.lane * l.step;
    l.shfl = s.row && s.lanes <= 32;
    return l;
}

template <typename V> __device__ __forceinline__ V shfl_xor(V v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}

// (value, index) of ArgMax/ArgMin and Hardmax; index -1 means "none yet".
template <typename C> struct Best { C v; i64 i; };

template <typename C> __device__ __forceinline__ Best<C> shfl_xor(Best<C> b, int m) {
    Best<C> r;
    r.v = (C)__shfl_xor_sync(0xffffffffu, b.v, m);
    r.i = __shfl_xor_sync(0xffffffffu, b.i, m);
    return r;
}

// The better of two candidates: NaN candidates never enter; ties go to the
// first index, or the last with select_last_index.
template <typename C> struct ArgComb {
    bool max, last;
    __device__ __forceinline__ Best<C> operator()(Best<C> a, Best<C> b) const {
        if (a.i < 0) return b;
        if (b.i < 0) return a;
        if (max ? b.v > a.v : b.v < a.v) return b;
        if (max ? a.v > b.v : a.v < b.v) return a;
        return (last ? b.i > a.i : b.i < a.i) ? b : a;
    }
};

enum { K_ADD = 0, K_MUL = 1, K_MAX = 2, K_MIN = 3, K_PEAK = 4 };

template <typename A> struct Comb {
    int k;
    __device__ __forceinline__ A operator()(A a, A b) const {
        switch (k) {
        case K_ADD: return add_(a, b);
        case K_MUL: return mul_(a, b);
        case K_MAX: return max_(a, b);
        case K_MIN: return min_(a, b);
        }
        return peak_(a, b);
    }
};

// Combines `v` over the lanes of each group; every lane gets the result.
// Every thread of the block must call it (it may synchronize the block).
template <typename V, typename F>
__device__ __forceinline__ V group_reduce(V v, F f, V* buf, const Lanes& L) {
    if (L.shfl) {
        for (int m = L.n >> 1; m > 0; m >>= 1) v = f(v, shfl_xor(v, m));
        return v;
    }
    const int t = threadIdx.x;
    buf[t] = v;
    __syncthreads();
    for (int m = L.n >> 1; m > 0; m >>= 1) {
        if (L.lane < m) buf[t] = f(buf[t], buf[t + m * L.step]);
        __syncthreads();
    }
    V r = buf[L.head];
    __syncthreads();
    return r;
}

// ---------------------------------------------------------------- Reduce*

// Reduce codes: 0 Sum, 1 Mean, 2 Max, 3 Min, 4 Prod, 5 L1, 6 L2, 7 LogSum,
// 8 LogSumExp, 9 SumSquare.

// A reduction computed in the real type A (float or double).
template <typename T, typename A>
__device__ void reduce_real(const ReduceShape& s, const T* x, T* y, A* buf) {
    const Lanes L = lanes_of(s);
    const int op = s.op;
    const int kind = op == REDUCE_PROD ? K_MUL : op == REDUCE_MAX ? K_MAX : op == REDUCE_MIN ? K_MIN : K_ADD;
    const A inf = inf_of<A>();
    const A init = op == REDUCE_PROD ? (A)1 : op == REDUCE_MAX ? -inf : op == REDUCE_MIN ? inf : (A)0;
    const i64 per = L.groups;
    for (i64 first = (i64)blockIdx.x * per; first < s.outputs; first += (i64)gridDim.x * per) {
        const i64 o = first + L.group;
        const bool live = o < s.outputs;
        const i64 base = live ? kept_offset(s, o) : 0;
        const i64 n = live ? s.count : 0;
        A peak = -inf;
        if (op == REDUCE_LOG_SUM_EXP) {
            A m = -inf;
#pragma unroll 4
            for (i64 r = L.lane; r < n; r += L.n) m = peak_(m, load_as<T, A>(x, base + red_offset(s, r)));
            peak = group_reduce(m, Comb<A>{K_PEAK}, buf, L);
        }
        A acc = init;
#pragma unroll 4
        for (i64 r = L.lane; r < n; r += L.n) {
            const A v = load_as<T, A>(x, base + red_offset(s, r));
            switch (op) {
            case REDUCE_MAX: acc = max_(acc, v); break;
            case REDUCE_MIN: acc = min_(acc, v); break;
            case REDUCE_PROD: acc *= v; break;
            case REDUCE_L1: acc += fabs(v); break;
            case REDUCE_L2: case REDUCE_SUM_SQUARE: acc += v * v; break;
            case REDUCE_LOG_SUM_EXP: acc += exp(v - peak); break;
            default: acc += v; break;
            }
        }
        acc = group_reduce(acc, Comb<A>{kind}, buf, L);
        if (live && L.lane == 0) {
            switch (op) {
            case REDUCE_MEAN: acc = acc / (A)s.count; break;
            case REDUCE_L2: acc = sqrt(acc); break;
            case REDUCE_LOG_SUM: acc = log(acc); break;
            case REDUCE_LOG_SUM_EXP: acc = peak == -inf ? -inf : peak + log(acc); break;
            }
            store_real<T, A>(y, o, acc);
        }
    }
}

// An exact integer reduction (every op but L2, LogSum and LogSumExp); with
// BOOL, u8 values 0 and 1 whose Max is "any" and Min "all".
template <typename T, typename A, bool BOOL = false>
__device__ void reduce_exact(const ReduceShape& s, const T* x, T* y, A* buf) {
    const Lanes L = lanes_of(s);
    const int op = s.op;
    const int kind = op == REDUCE_PROD ? K_MUL : op == REDUCE_MAX ? K_MAX : op == REDUCE_MIN ? K_MIN : K_ADD;
    const A lo = BOOL ? (A)0 : (A)Lim<T>::lo(), hi = BOOL ? (A)1 : (A)Lim<T>::hi();
    const A init = op == REDUCE_PROD ? (A)1 : op == REDUCE_MAX ? lo : op == REDUCE_MIN ? hi : (A)0;
    const i64 per = L.groups;
    for (i64 first = (i64)blockIdx.x * per; first < s.outputs; first += (i64)gridDim.x * per) {
        const i64 o = first + L.group;
        const bool live = o < s.outputs;
        const i64 base = live ? kept_offset(s, o) : 0;
        const i64 n = live ? s.count : 0;
        A acc = init;
#pragma unroll 4
        for (i64 r = L.lane; r < n; r += L.n) {
            const A v = (A)x[base + red_offset(s, r)];
            switch (op) {
            case REDUCE_MAX: acc = max_(acc, v); break;
            case REDUCE_MIN: acc = min_(acc, v); break;
            case REDUCE_PROD: acc = mul_(acc, v); break;
            case REDUCE_L1: {
                A m = v;
                if constexpr ((A)-1 < (A)0) { if (v < (A)0) m = (A)((u64)0 - (u64)v); }
                acc = add_(acc, m);
                break;
            }
            case REDUCE_SUM_SQUARE: acc = add_(acc, mul_(v, v)); break;
            default: acc = add_(acc, v); break;
            }
        }
        acc = group_reduce(acc, Comb<A>{kind}, buf, L);
        if (live && L.lane == 0) {
            if (op == REDUCE_MEAN && s.count > 0) acc = acc / (A)s.count;
            y[o] = (T)acc;
        }
    }
}

template <typename T>
__device__ void reduce_entry(const ReduceShape& s, const T* x, T* y) {
    __shared__ __align__(16) unsigned char raw[REDUCE_BLOCK * 8];
    if constexpr (IsInt<T>::v) {
        typedef typename IntAcc<T>::A A;
        if (s.op == REDUCE_L2 || s.op == REDUCE_LOG_SUM || s.op == REDUCE_LOG_SUM_EXP) reduce_real<T, double>(s, x, y, (double*)raw);
        else reduce_exact<T, A>(s, x, y, (A*)raw);
    } else {
        typedef typename Num<T>::C A;
        reduce_real<T, A>(s, x, y, (A*)raw);
    }
}

// ArgMax (REDUCE_ARG_MAX) / ArgMin (REDUCE_ARG_MIN) over one axis. As on the CPU: a NaN first
// element gives 0, later NaNs are skipped.
template <typename T>
__device__ void arg_entry(const ReduceShape& s, const T* x, i64* y) {
    typedef typename Num<T>::C C;
    __shared__ __align__(16) unsigned char raw[REDUCE_BLOCK * sizeof(Best<C>)];
    Best<C>* buf = (Best<C>*)raw;
    const Lanes L = lanes_of(s);
    const ArgComb<C> f{s.op == REDUCE_ARG_MAX, s.last != 0};
    const i64 per = L.groups;
    for (i64 first = (i64)blockIdx.x * per; first < s.outputs; first += (i64)gridDim.x * per) {
        const i64 o = first + L.group;
        const bool live = o < s.outputs;
        const i64 base = live ? kept_offset(s, o) : 0;
        const i64 n = live ? s.count : 0;
        Best<C> b;
        b.v = (C)0;
        b.i = -1;
#pragma unroll 4
        for (i64 r = L.lane; r < n; r += L.n) {
            Best<C> c;
            c.v = ld(x, base + red_offset(s, r));
            c.i = r;
            if (c.v == c.v) b = f(b, c);
        }
        b = group_reduce(b, f, buf, L);
        if (live && L.lane == 0) {
            const C v0 = ld(x, base);
            y[o] = (n == 0 || v0 != v0 || b.i < 0) ? 0 : b.i;
        }
    }
}

#define REDUCE(T, S)                                                                              \
    extern "C" __global__ void __launch_bounds__(REDUCE_BLOCK) reduce_##S(ReduceShape s, const T* x, T* y) { \
        reduce_entry<T>(s, x, y);                                                                 \
    }                                                                                             \
    extern "C" __global__ void __launch_bounds__(REDUCE_BLOCK) arg_reduce_##S(ReduceShape s, const T* x, i64* y) { \
        arg_entry<T>(s, x, y);                                                                    \
    }

REDUCE(float, f32)
REDUCE(double, f64)
REDUCE(f16, f16)
REDUCE(bf16, bf16)
REDUCE(i8, i8)
REDUCE(u8, u8)
REDUCE(i16, i16)
REDUCE(u16, u16)
REDUCE(int, i32)
REDUCE(u32, u32)
REDUCE(i64, i64)
REDUCE(u64, u64)

// ReduceMax / ReduceMin of bool.
extern "C" __global__ void __launch_bounds__(REDUCE_BLOCK) reduce_bool(ReduceShape s, const u8* x, u8* y) {
    __shared__ i64 buf[REDUCE_BLOCK];
    reduce_exact<u8, i64, true>(s, x, y, buf);
}

// ---------------------------------------------------------------- softmax family

// Rows of `len` elements `inner` apart, `rows` of them; op a SOFTMAX_* code.
// `vec`: the warp kernels may use 16-byte loads; the block kernel caches its row in dynamic shared memory. `lanes`: the warp
// kernels' lanes per row.
struct SoftmaxArgs { i64 rows; i64 len; i64 inner; int op; int vec; int lanes; int _pad; };

// 16-byte loads and stores of 16 / sizeof(T) elements as compute values.
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
__device__ __forceinline__ void load_row(const T* p, const Row& r, typename Num<T>::C* v, typename Num<T>::C pad) {
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
template <typename C> __device__ __forceinline__ C row_peak(C v, int L) {
    for (int m = L >> 1; m > 0; m >>= 1) v = peak_(v, (C)__shfl_xor_sync(0xffffffffu, v, m));
    return v;
}

// Contiguous rows of at most a.lanes * N elements, 32 / a.lanes of them per
// warp, held in registers: one read and one write of each row. Max ignores
// NaN and the sum carries it, as on the CPU.
template <typename T, int N>
__device__ void softmax_warp(const SoftmaxArgs& a, const T* x, T* y) {
    typedef typename Num<T>::C C;
    const int wl = threadIdx.x & 31, L = a.lanes;
    Row r;
    r.sh = __ffs(L) - 1;
    r.lane = wl & (L - 1);
    r.vec = a.vec != 0;
    const int R = 32 / L;
    const i64 warps = blockDim.x >> 5;
    const C inf = inf_of<C>();
    C v[N];
    // Whole warps step together (shuffles need every lane); rows past the end are empty.
    for (i64 base = ((i64)blockIdx.x * warps + (threadIdx.x >> 5)) * R; base < a.rows;
         base += (i64)gridDim.x * warps * R) {
        const i64 row = base + (wl >> r.sh);
        row_begin<T, N>(r, row < a.rows ? (int)a.len : 0);
        const i64 at = row * a.len;
        load_row<T, N>(x + at, r, v, -inf);
        if (a.op == SOFTMAX_HARDMAX) {
            Best<C> b;
            b.v = (C)0;
            b.i = -1;
            const ArgComb<C> f{true, false};
#pragma unroll
            for (int k = 0; k < N; ++k) {
                Best<C> c;
                c.v = v[k];
                c.i = slot_elem<T>(k, r);
                if (k < r.valid && c.v == c.v) b = f(b, c);
            }
            for (int m = L >> 1; m > 0; m >>= 1) b = f(b, shfl_xor(b, m));
            const C v0 = __shfl_sync(0xffffffffu, v[0], wl & ~(L - 1));
            const int best = (v0 != v0 || b.i < 0) ? 0 : (int)b.i;
#pragma unroll
            for (int k = 0; k < N; ++k) v[k] = slot_elem<T>(k, r) == best ? (C)1 : (C)0;
        } else {
            C m = -inf;
#pragma unroll
            for (int k = 0; k < N; ++k) m = peak_(m, v[k]);
            m = row_peak(m, L);
            C sum = 0;
#pragma unroll
            for (int k = 0; k < N; ++k) {
                if (k < r.valid) {
                    const C e = exp(v[k] - m);
                    sum += e;
                    if (a.op == SOFTMAX_SOFTMAX) v[k] = e;
                }
            }
            sum = row_sum(sum, L);
            if (a.op == SOFTMAX_SOFTMAX) {
                const C q = (C)1 / sum;
#pragma unroll
                for (int k = 0; k < N; ++k) v[k] *= q;
            } else {
                const C shift = m + log(sum);
#pragma unroll
                for (int k = 0; k < N; ++k) v[k] -= shift;
            }
        }
        store_row<T, N>(y + at, r, v);
    }
}

// Combines one value per thread over the block (any multiple of 32 threads);
// every thread gets the result.
template <typename V, typename F>
__device__ __forceinline__ V block_reduce(V v, F f, V* buf) {
    for (int m = 16; m > 0; m >>= 1) v = f(v, shfl_xor(v, m));
    const int w = threadIdx.x >> 5, warps = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) buf[w] = v;
    __syncthreads();
    V r = buf[0];
    for (int i = 1; i < warps; ++i) r = f(r, buf[i]);
    __syncthreads();
    return r;
}

template <typename C> struct Sum { __device__ __forceinline__ C operator()(C a, C b) const { return a + b; } };
template <typename C> struct Peak { __device__ __forceinline__ C operator()(C a, C b) const { return peak_(a, b); } };

// One block per contiguous row: max, sum and write passes, the row cached in
// dynamic shared memory when it fits (shared_mem_bytes = len * sizeof(C)).
template <typename T>
__device__ void softmax_block(const SoftmaxArgs& a, const T* x, T* y) {
    typedef typename Num<T>::C C;
    extern __shared__ __align__(16) unsigned char dyn[];
    __shared__ __align__(16) unsigned char red[32 * sizeof(Best<C>)];
    C* cache = (C*)dyn;
    const bool cached = a.vec != 0;
    const C inf = inf_of<C>();
    const int t = threadIdx.x, B = blockDim.x;
    for (i64 row = blockIdx.x; row < a.rows; row += gridDim.x) {
        const T* xr = x + row * a.len;
        T* yr = y + row * a.len;
        if (a.op == SOFTMAX_HARDMAX) {
            const ArgComb<C> f{true, false};
            Best<C> b;
            b.v = (C)0;
            b.i = -1;
#pragma unroll 4
            for (i64 e = t; e < a.len; e += B) {
                Best<C> c;
                c.v = ld(xr, e);
                c.i = e;
                if (c.v == c.v) b = f(b, c);
            }
            // Read before the barrier in block_reduce: in place, y[0] may be written right after.
            const C v0 = ld(xr, 0);
            b = block_reduce(b, f, (Best<C>*)red);
            const i64 best = (v0 != v0 || b.i < 0) ? 0 : b.i;
#pragma unroll 4
            for (i64 e = t; e < a.len; e += B) st(yr, e, e == best ? (C)1 : (C)0);
            continue;
        }
        C m = -inf;
#pragma unroll 4
        for (i64 e = t; e < a.len; e += B) {
            const C v = ld(xr, e);
            if (cached) cache[e] = v;
            m = peak_(m, v);
        }
        m = block_reduce(m, Peak<C>(), (C*)red);
        C sum = 0;
#pragma unroll 4
        for (i64 e = t; e < a.len; e += B) sum += exp((cached ? cache[e] : (C)ld(xr, e)) - m);
        sum = block_reduce(sum, Sum<C>(), (C*)red);
        const C r = (C)1 / sum, shift = m + log(sum);
#pragma unroll 4
        for (i64 e = t; e < a.len; e += B) {
            const C v = cached ? cache[e] : (C)ld(xr, e);
            st(yr, e, a.op == SOFTMAX_SOFTMAX ? exp(v - m) * r : v - shift);
        }
        __syncthreads();
    }
}

// Rows `inner` apart (softmax over a middle axis): one thread per row, the
// threads of a warp on neighbouring rows, so every pass reads coalesced.
template <typename T>
__device__ void softmax_strided(const SoftmaxArgs& a, const T* x, T* y) {
    typedef typename Num<T>::C C;
    const C inf = inf_of<C>();
    for (i64 t = thread_index(); t < a.rows; t += grid_stride()) {
        const i64 o = t / a.inner;
        const i64 base = o * a.len * a.inner + (t - o * a.inner);
        if (a.op == SOFTMAX_HARDMAX) {
            i64 best = 0;
            C bv = ld(x, base);
#pragma unroll 4
            for (i64 k = 1; k < a.len; ++k) {
                const C v = ld(x, base + k * a.inner);
                if (v > bv) { bv = v; best = k; }
            }
#pragma unroll 4
            for (i64 k = 0; k < a.len; ++k) st(y, base + k * a.inner, k == best ? (C)1 : (C)0);
            continue;
        }
        C m = -inf;
#pragma unroll 4
        for (i64 k = 0; k < a.len; ++k) m = peak_(m, (C)ld(x, base + k * a.inner));
        C sum = 0;
#pragma unroll 4
        for (i64 k = 0; k < a.len; ++k) sum += exp((C)ld(x, base + k * a.inner) - m);
        const C r = (C)1 / sum, shift = m + log(sum);
#pragma unroll 4
        for (i64 k = 0; k < a.len; ++k) {
            const i64 i = base + k * a.inner;
            const C v = ld(x, i);
            st(y, i, a.op == SOFTMAX_SOFTMAX ? exp(v - m) * r : v - shift);
        }
    }
}

#define SOFTMAX_WARP(T, S, N)                                                                     \
    extern "C" __global__ void softmax_warp##N##_##S(SoftmaxArgs a, const T* x, T* y) {            \
        softmax_warp<T, N>(a, x, y);                                                              \
    }

#define SOFTMAX(T, S)                                                                             \
    SOFTMAX_WARP(T, S, 1) SOFTMAX_WARP(T, S, 2) SOFTMAX_WARP(T, S, 4) SOFTMAX_WARP(T, S, 8)       \
    SOFTMAX_WARP(T, S, 12) SOFTMAX_WARP(T, S, 16) SOFTMAX_WARP(T, S, 24) SOFTMAX_WARP(T, S, 32)   \
    extern "C" __global__ void softmax_block_##S(SoftmaxArgs a, const T* x, T* y) {               \
        softmax_block<T>(a, x, y);                                                                \
    }                                                                                             \
    extern "C" __global__ void softmax_strided_##S(SoftmaxArgs a, const T* x, T* y) {             \
        softmax_strided<T>(a, x, y);                                                              \
    }

SOFTMAX(float, f32)
SOFTMAX(double, f64)
SOFTMAX(f16, f16)
SOFTMAX(bf16, bf16)
