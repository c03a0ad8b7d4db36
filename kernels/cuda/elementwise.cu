// Elementwise kernels: unary functions, broadcasting binary arithmetic and
// comparisons, Where, Clip and Cast. Every kernel is a grid-stride loop over
// the output; the op is a uniform argument, so one kernel per dtype serves all ops.
#include "common.cuh"

// ---------------------------------------------------------------- unary, floats

struct UnaryArgs { i64 n; int op; float alpha; float beta; float gamma; };

template <typename C>
__device__ __forceinline__ C unary_float(int op, C x, float alpha, float beta, float gamma) {
    const C zero = (C)0, one = (C)1;
    switch (op) {
    case UNARY_ABS: return fabs(x);
    case UNARY_NEG: return -x;
    case UNARY_EXP: return exp(x);
    case UNARY_LOG: return log(x);
    case UNARY_SQRT: return sqrt(x);
    case UNARY_RECIPROCAL: return one / x;
    case UNARY_FLOOR: return floor(x);
    case UNARY_CEIL: return ceil(x);
    case UNARY_ROUND: return rint(x);  // round half to even
    case UNARY_SIGN: return x > zero ? one : (x < zero ? -one : x);
    case UNARY_SIN: return sin(x);
    case UNARY_COS: return cos(x);
    case UNARY_TAN: return tan(x);
    case UNARY_ASIN: return asin(x);
    case UNARY_ACOS: return acos(x);
    case UNARY_ATAN: return atan(x);
    case UNARY_SINH: return sinh(x);
    case UNARY_COSH: return cosh(x);
    case UNARY_ASINH: return asinh(x);
    case UNARY_ACOSH: return acosh(x);
    case UNARY_ATANH: return atanh(x);
    case UNARY_RELU: return x > zero ? x : zero;
    case UNARY_SIGMOID: return x >= zero ? one / (one + exp(-x)) : exp(x) / (one + exp(x));
    case UNARY_TANH: return tanh(x);
    case UNARY_ERF: return erf(x);
    case UNARY_SOFTPLUS: return x > (C)20 ? x : log1p(exp(x));
    case UNARY_SOFTSIGN: return x / (one + fabs(x));
    case UNARY_LEAKY_RELU: return x >= zero ? x : (C)alpha * x;
    case UNARY_ELU: return x >= zero ? x : (C)alpha * (exp(x) - one);
    case UNARY_SELU: return (C)gamma * (x > zero ? x : (C)alpha * (exp(x) - one));
    case UNARY_HARD_SIGMOID: { C v = (C)alpha * x + (C)beta; return v < zero ? zero : (v > one ? one : v); }
    case UNARY_HARD_SWISH: { C v = x / (C)6 + (C)0.5; v = v < zero ? zero : (v > one ? one : v); return x * v; }
    case UNARY_CELU: { C a = (C)alpha; C e = a * (exp(x / a) - one); return (x > zero ? x : zero) + (e < zero ? e : zero); }
    case UNARY_THRESHOLDED_RELU: return x > (C)alpha ? x : zero;
    case UNARY_MISH: { C sp = x > (C)20 ? x : log1p(exp(x)); return x * tanh(sp); }
    case UNARY_GELU: return (C)0.5 * x * (one + erf(x * (C)0.70710678118654752440));
    case UNARY_GELU_TANH: {
        C inner = (C)0.79788456080286535588 * (x + (C)0.044715 * x * x * x);
        return (C)0.5 * x * (one + tanh(inner));
    }
    case UNARY_SHRINK: return x < -(C)beta ? x + (C)alpha : (x > (C)beta ? x - (C)alpha : zero);
    case UNARY_SCALE: return x * (C)alpha;
    }
    return x;
}

template <typename T>
__device__ void unary_float_kernel(UnaryArgs p, const T* x, T* y) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < p.n; i += grid_stride()) {
        st(y, i, unary_float<C>(p.op, ld(x, i), p.alpha, p.beta, p.gamma));
    }
}

// IsNaN (UNARY_IS_NAN) and IsInf (UNARY_IS_INF; alpha = detect_positive, beta = detect_negative).
template <typename T>
__device__ void float_test_kernel(UnaryArgs p, const T* x, u8* y) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < p.n; i += grid_stride()) {
        C v = ld(x, i);
        bool r;
        if (p.op == UNARY_IS_NAN) r = v != v;
        else r = (isinf(v) && ((v > (C)0 && p.alpha != 0.0f) || (v < (C)0 && p.beta != 0.0f)));
        y[i] = r;
    }
}

// ---------------------------------------------------------------- unary, integers

template <typename T>
__device__ void unary_int_kernel(UnaryArgs p, const T* x, T* y) {
    for (i64 i = thread_index(); i < p.n; i += grid_stride()) {
        T v = x[i];
        T r = v;
        switch (p.op) {
        case UNARY_INT_ABS: r = v < (T)0 ? (T)(-v) : v; break;
        case UNARY_INT_NEG: r = (T)(-v); break;
        case UNARY_INT_SIGN: r = v > (T)0 ? (T)1 : (v < (T)0 ? (T)-1 : (T)0); break;
        case UNARY_INT_RELU: r = v > (T)0 ? v : (T)0; break;
        case UNARY_INT_BITWISE_NOT: r = (T)(~v); break;
        case UNARY_INT_NOT: r = (T)(v == (T)0); break;
        }
        y[i] = r;
    }
}

// ---------------------------------------------------------------- binary

template <typename C>
__device__ __forceinline__ C binary_float(int op, C a, C b) {
    switch (op) {
    case BINARY_ADD: return a + b;
    case BINARY_SUB: return a - b;
    case BINARY_MUL: return a * b;
    case BINARY_DIV: return a / b;
    case BINARY_POW: return pow(a, b);
    case BINARY_MOD: { C r = fmod(a, b); return (r != (C)0 && ((r < (C)0) != (b < (C)0))) ? r + b : r; }
    case BINARY_FMOD: return fmod(a, b);
    case BINARY_PRELU: return a >= (C)0 ? a : a * b;
    case BINARY_MAX: return (a != a || b != b) ? a + b : (a > b ? a : b);
    case BINARY_MIN: return (a != a || b != b) ? a + b : (a < b ? a : b);
    // com.microsoft BiasGelu: the erf Gelu of a + b.
    case BINARY_BIAS_GELU: { const C x = a + b; return (C)0.5 * x * ((C)1 + erf(x * (C)0.70710678118654752440)); }
    }
    return a;
}

template <typename C>
__device__ __forceinline__ C binary_int(int op, C a, C b) {
    switch (op) {
    case BINARY_ADD: return a + b;
    case BINARY_SUB: return a - b;
    case BINARY_MUL: return a * b;
    case BINARY_DIV: return b == (C)0 ? (C)0 : a / b;
    case BINARY_POW: {
        if (b < (C)0) return a == (C)1 ? (C)1 : (a == (C)-1 ? ((b & (C)1) ? (C)-1 : (C)1) : (C)0);
        C r = 1, base = a, e = b;
        while (e > (C)0) { if (e & (C)1) r *= base; base *= base; e >>= 1; }
        return r;
    }
    case BINARY_MOD: { if (b == (C)0) return (C)0; C r = a % b; return (r != (C)0 && ((r < (C)0) != (b < (C)0))) ? r + b : r; }
    case BINARY_FMOD: return b == (C)0 ? (C)0 : a % b;
    // Shift amounts are read as unsigned: a negative or too-large one shifts
    // everything out (right shifts of signed values fill with the sign).
    case BINARY_BIT_SHIFT_LEFT: return ((u64)(i64)b >= sizeof(C) * 8) ? (C)0 : (C)(a << b);
    case BINARY_BIT_SHIFT_RIGHT: return ((u64)(i64)b >= sizeof(C) * 8) ? (C)((a >> (sizeof(C) * 8 - 1)) >> 1) : (C)(a >> b);
    case BINARY_BITWISE_AND: return a & b;
    case BINARY_BITWISE_OR: return a | b;
    case BINARY_BITWISE_XOR: return a ^ b;
    case BINARY_PRELU: return a >= (C)0 ? a : a * b;
    case BINARY_MAX: return a > b ? a : b;
    case BINARY_MIN: return a < b ? a : b;
    }
    return a;
}

template <typename C>
__device__ __forceinline__ bool predicate(int op, C a, C b) {
    switch (op) {
    case BINARY_EQUAL: return a == b;
    case BINARY_LESS: return a < b;
    case BINARY_GREATER: return a > b;
    case BINARY_LESS_OR_EQUAL: return a <= b;
    case BINARY_GREATER_OR_EQUAL: return a >= b;
    case BINARY_AND: return (a != (C)0) && (b != (C)0);
    case BINARY_OR: return (a != (C)0) || (b != (C)0);
    case BINARY_XOR: return (a != (C)0) != (b != (C)0);
    }
    return false;
}

template <typename T, bool FLOAT>
__device__ void binary_kernel(Strided s, int op, const T* a, const T* b, T* y) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < s.numel; i += grid_stride()) {
        i64 oa, ob, oc;
        offsets3(s, i, oa, ob, oc);
        C x = ld(a, oa), z = ld(b, ob);
        if constexpr (FLOAT) st(y, i, binary_float<C>(op, x, z));
        else st(y, i, binary_int<C>(op, x, z));
    }
}

template <typename T>
__device__ void compare_kernel(Strided s, int op, const T* a, const T* b, u8* y) {
    for (i64 i = thread_index(); i < s.numel; i += grid_stride()) {
        i64 oa, ob, oc;
        offsets3(s, i, oa, ob, oc);
        y[i] = predicate(op, ld(a, oa), ld(b, ob));
    }
}

// Same-shape f32 inputs, four elements per load (16-byte vectorized), then the tail.
extern "C" __global__ void binary_vec4_f32(i64 n, int op, const float* a, const float* b, float* y) {
    const i64 n4 = n / 4;
    const float4* a4 = (const float4*)a;
    const float4* b4 = (const float4*)b;
    float4* y4 = (float4*)y;
    for (i64 i = thread_index(); i < n4; i += grid_stride()) {
        float4 x = a4[i], z = b4[i], r;
        r.x = binary_float<float>(op, x.x, z.x);
        r.y = binary_float<float>(op, x.y, z.y);
        r.z = binary_float<float>(op, x.z, z.z);
        r.w = binary_float<float>(op, x.w, z.w);
        y4[i] = r;
    }
    for (i64 i = n4 * 4 + thread_index(); i < n; i += grid_stride()) {
        y[i] = binary_float<float>(op, a[i], b[i]);
    }
}

// Same-shape 16-bit float inputs, eight elements per 16-byte load.
template <bool BF>
__device__ void binary_vec8_half(i64 n, int op, const u16* a, const u16* b, u16* y) {
    const i64 n8 = n / 8;
    const uint4* a8 = (const uint4*)a;
    const uint4* b8 = (const uint4*)b;
    uint4* y8 = (uint4*)y;
    for (i64 i = thread_index(); i < n8; i += grid_stride()) {
        uint4 x = a8[i], z = b8[i], r;
        const u16* xs = (const u16*)&x;
        const u16* zs = (const u16*)&z;
        u16* rs = (u16*)&r;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            float fx = BF ? bf16_to_f32(xs[k]) : f16_to_f32(xs[k]);
            float fz = BF ? bf16_to_f32(zs[k]) : f16_to_f32(zs[k]);
            float v = binary_float<float>(op, fx, fz);
            rs[k] = BF ? f32_to_bf16(v) : f32_to_f16(v);
        }
        y8[i] = r;
    }
    for (i64 i = n8 * 8 + thread_index(); i < n; i += grid_stride()) {
        float fx = BF ? bf16_to_f32(a[i]) : f16_to_f32(a[i]);
        float fz = BF ? bf16_to_f32(b[i]) : f16_to_f32(b[i]);
        float v = binary_float<float>(op, fx, fz);
        y[i] = BF ? f32_to_bf16(v) : f32_to_f16(v);
    }
}
extern "C" __global__ void binary_vec8_f16(i64 n, int op, const u16* a, const u16* b, u16* y) {
    binary_vec8_half<false>(n, op, a, b, y);
}
extern "C" __global__ void binary_vec8_bf16(i64 n, int op, const u16* a, const u16* b, u16* y) {
    binary_vec8_half<true>(n, op, a, b, y);
}

// The loop of `binary_rep_kernel` in index type I (32-bit when the tensor
// allows: a 64-bit division per vector costs more than the vector's math),
// with the op fixed at compile time when OP >= 0.
template <typename T, typename I, int OP>
__device__ __forceinline__ void binary_rep_loop(I n, int op, I len, int mode, const T* a, const T* b, T* y) {
    typedef typename Num<T>::C C;
    constexpr int VEC = 16 / sizeof(T);
    const int code = OP >= 0 ? OP : op;
    const T* full = mode < 2 ? a : b;
    const T* part = mode < 2 ? b : a;
    const bool by_row = mode & 1;
    const bool full_first = mode < 2;
    const I nv = n / VEC;
    const I stride = (I)grid_stride();
    for (I v = (I)thread_index(); v < nv; v += stride) {
        const I i0 = v * VEC;
        const I j0 = by_row ? i0 / len : (len == 1 ? 0 : i0 % len);
        uint4 raw = ((const uint4*)full)[v];
        // A trailing part (a bias) moves in the same 16-byte vectors: `len`
        // is a whole number of them (checked at launch), so j0 is aligned.
        uint4 praw;
        if (!by_row && len != 1) praw = ((const uint4*)part)[j0 / VEC];
        uint4 res;
        const T* f = (const T*)&raw;
        const T* pv = (const T*)&praw;
        T* o = (T*)&res;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
            const C x = ld(f, k);
            const C z = (by_row || len == 1) ? ld(part, j0) : ld(pv, k);
            st(o, k, full_first ? binary_float<C>(code, x, z) : binary_float<C>(code, z, x));
        }
        ((uint4*)y)[v] = res;
    }
    for (I i = nv * VEC + (I)thread_index(); i < n; i += stride) {
        const I j = by_row ? i / len : i % len;
        const C x = ld(full, i), z = ld(part, j);
        st(y, i, full_first ? binary_float<C>(code, x, z) : binary_float<C>(code, z, x));
    }
}

// One full operand (the output's shape) against one repeated along it: a
// trailing part (mode 0/2: element i pairs with part[i % len], bias adds) or
// one value per row of `len` elements (mode 1/3: part[i / len]). Modes 0/1
// have the full operand first, 2/3 second. 16-byte loads of the full operand;
// the host picks this path only when `len` is 1 (mode 0/2) or a multiple of
// the lanes, so the lanes of one load share a row or walk the part in step.
template <typename T>
__device__ void binary_rep_kernel(i64 n, int op, i64 len, int mode, const T* a, const T* b, T* y) {
    if (n + (i64)grid_stride() * 16 >= 0x7fffffffLL) {
        binary_rep_loop<T, i64, -1>(n, op, len, mode, a, b, y);
    } else if (op == BINARY_ADD) {
        binary_rep_loop<T, u32, BINARY_ADD>((u32)n, op, (u32)len, mode, a, b, y);
    } else if (op == BINARY_MUL) {
        binary_rep_loop<T, u32, BINARY_MUL>((u32)n, op, (u32)len, mode, a, b, y);
    } else if (op == BINARY_BIAS_GELU) {
        binary_rep_loop<T, u32, BINARY_BIAS_GELU>((u32)n, op, (u32)len, mode, a, b, y);
    } else {
        binary_rep_loop<T, u32, -1>((u32)n, op, (u32)len, mode, a, b, y);
    }
}

// Pow with an exponent of another dtype, through double.
extern "C" __global__ void pow_mixed(Strided s, int dt_a, int dt_b, const void* a, const void* b, void* y) {
    for (i64 i = thread_index(); i < s.numel; i += grid_stride()) {
        i64 oa, ob, oc;
        offsets3(s, i, oa, ob, oc);
        Any x = ld_any(a, dt_a, oa), e = ld_any(b, dt_b, ob);
        Any r;
        if (x.is_float) {
            r.is_float = true; r.i = 0; r.f = pow(x.f, e.f);
        } else {
            r.is_float = false; r.f = 0.0;
            r.i = binary_int<i64>(4, x.i, e.is_float ? (i64)e.f : e.i);
        }
        st_any(y, dt_a, i, r);
    }
}

// ---------------------------------------------------------------- Where, Clip, Cast

template <typename W>
__device__ void where_kernel(Strided s, const u8* c, const W* x, const W* z, W* y) {
    for (i64 i = thread_index(); i < s.numel; i += grid_stride()) {
        i64 oc, ox, oz;
        offsets3(s, i, oc, ox, oz);
        y[i] = c[oc] ? x[ox] : z[oz];
    }
}

// Bounds arrive as doubles with presence flags (an absent bound clips nothing).
template <typename T>
__device__ void clip_kernel(i64 n, int has_lo, int has_hi, double lo, double hi, const T* x, T* y) {
    typedef typename Num<T>::C C;
    const C l = has_lo ? (C)lo : (C)0, h = has_hi ? (C)hi : (C)0;
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        C v = ld(x, i);
        if (v == v) {
            if (has_lo && v < l) v = l;
            if (has_hi && v > h) v = h;
        }
        st(y, i, v);
    }
}

extern "C" __global__ void cast(i64 n, int from, int to, const void* x, void* y) {
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        st_any(y, to, i, ld_any(x, from, i));
    }
}

// ---------------------------------------------------------------- instantiations

#define FLOAT_TYPES(X) X(f32, float) X(f64, double) X(f16, f16) X(bf16, bf16)
#define INT_TYPES(X) X(i8, i8) X(u8, u8) X(i16, i16) X(u16, u16) X(i32, int) X(u32, u32) X(i64, i64) X(u64, u64)

#define FLOAT_KERNELS(name, T) \
    extern "C" __global__ void unary_float_##name(UnaryArgs p, const T* x, T* y) { unary_float_kernel<T>(p, x, y); } \
    extern "C" __global__ void float_test_##name(UnaryArgs p, const T* x, u8* y) { float_test_kernel<T>(p, x, y); } \
    extern "C" __global__ void binary_##name(Strided s, int op, const T* a, const T* b, T* y) { binary_kernel<T, true>(s, op, a, b, y); } \
    extern "C" __global__ void compare_##name(Strided s, int op, const T* a, const T* b, u8* y) { compare_kernel<T>(s, op, a, b, y); } \
    extern "C" __global__ void clip_##name(i64 n, int has_lo, int has_hi, double lo, double hi, const T* x, T* y) { clip_kernel<T>(n, has_lo, has_hi, lo, hi, x, y); } \
    extern "C" __global__ void binary_rep_##name(i64 n, int op, i64 len, int mode, const T* a, const T* b, T* y) { binary_rep_kernel<T>(n, op, len, mode, a, b, y); }

#define INT_KERNELS(name, T) \
    extern "C" __global__ void unary_int_##name(UnaryArgs p, const T* x, T* y) { unary_int_kernel<T>(p, x, y); } \
    extern "C" __global__ void binary_##name(Strided s, int op, const T* a, const T* b, T* y) { binary_kernel<T, false>(s, op, a, b, y); } \
    extern "C" __global__ void compare_##name(Strided s, int op, const T* a, const T* b, u8* y) { compare_kernel<T>(s, op, a, b, y); } \
    extern "C" __global__ void clip_##name(i64 n, int has_lo, int has_hi, double lo, double hi, const T* x, T* y) { clip_kernel<T>(n, has_lo, has_hi, lo, hi, x, y); }

FLOAT_TYPES(FLOAT_KERNELS)
INT_TYPES(INT_KERNELS)
INT_KERNELS(bool, u8)

// Broadcasts `x` into `y` (strides in `s.a`), by element width: Gemm's C input, Expand-like fills.
template <typename W>
__device__ void broadcast_kernel(Strided s, const W* x, W* y) {
    for (i64 i = thread_index(); i < s.numel; i += grid_stride()) {
        i64 oa, ob, oc;
        offsets3(s, i, oa, ob, oc);
        y[i] = x[oa];
    }
}

#define WHERE_KERNEL(name, W) \
    extern "C" __global__ void broadcast_##name(Strided s, const W* x, W* y) { broadcast_kernel<W>(s, x, y); } \
    extern "C" __global__ void where_##name(Strided s, const u8* c, const W* x, const W* z, W* y) { where_kernel<W>(s, c, x, z, y); }
WHERE_KERNEL(w1, u8)
WHERE_KERNEL(w2, u16)
WHERE_KERNEL(w4, u32)
WHERE_KERNEL(w8, u64)
