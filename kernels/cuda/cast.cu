// Casts to and from ONNX's small types: the four float8 formats, float8e8m0,
// float4e2m1 and the packed 4- and 2-bit integers. Encoding rounds to nearest
// even and treats overflow, NaN and infinities as the ONNX reference does
// (the same rules as core's float8.rs). Packed outputs are written a whole
// byte per thread, so no two threads share a byte.
#include "common.cuh"

enum {
    DT_F8E4M3FN = 17, DT_F8E4M3FNUZ = 18, DT_F8E5M2 = 19, DT_F8E5M2FNUZ = 20,
    DT_U4 = 21, DT_I4 = 22, DT_F4E2M1 = 23, DT_F8E8M0 = 24, DT_U2 = 25, DT_I2 = 26
};

// Round modes of a cast to float8e8m0.
enum { ROUND_UP = 0, ROUND_DOWN = 1, ROUND_NEAREST = 2 };

struct Fmt { int exp_bits, man_bits, bias; bool ieee, fnuz, fn_nan; };

// The layout of a small float format; false for other dtypes.
__device__ bool small_float(int dt, Fmt& f) {
    switch (dt) {
    case DT_F8E4M3FN: f = Fmt{4, 3, 7, false, false, true}; return true;
    case DT_F8E4M3FNUZ: f = Fmt{4, 3, 8, false, true, false}; return true;
    case DT_F8E5M2: f = Fmt{5, 2, 15, true, false, false}; return true;
    case DT_F8E5M2FNUZ: f = Fmt{5, 2, 16, false, true, false}; return true;
    case DT_F4E2M1: f = Fmt{2, 1, 1, false, false, false}; return true;
    default: return false;
    }
}

// Bits per element of the small types (0 for every other dtype).
__device__ int small_bits(int dt) {
    switch (dt) {
    case DT_F8E4M3FN: case DT_F8E4M3FNUZ: case DT_F8E5M2: case DT_F8E5M2FNUZ: case DT_F8E8M0: return 8;
    case DT_U4: case DT_I4: case DT_F4E2M1: return 4;
    case DT_U2: case DT_I2: return 2;
    default: return 0;
    }
}

__device__ double decode(const Fmt& f, u32 bits) {
    const int total = 1 + f.exp_bits + f.man_bits;
    const u32 sign_bit = 1u << (total - 1);
    if (f.fnuz && bits == sign_bit) return __longlong_as_double(0x7ff8000000000000LL);
    const u32 exp_max = (1u << f.exp_bits) - 1, man_max = (1u << f.man_bits) - 1;
    const u32 e = (bits >> f.man_bits) & exp_max, m = bits & man_max;
    const double sign = (bits & sign_bit) ? -1.0 : 1.0;
    if (f.ieee && e == exp_max) return m == 0 ? sign / 0.0 : __longlong_as_double(0x7ff8000000000000LL);
    if (f.fn_nan && e == exp_max && m == man_max) return __longlong_as_double(0x7ff8000000000000LL);
    const double frac = (double)m / (double)(1u << f.man_bits);
    return e == 0 ? sign * ldexp(frac, 1 - f.bias) : sign * ldexp(1.0 + frac, (int)e - f.bias);
}

__device__ u32 max_bits(const Fmt& f) {
    const u32 e = (1u << f.exp_bits) - 1, m = (1u << f.man_bits) - 1;
    if (f.ieee) return ((e - 1) << f.man_bits) | m;
    if (f.fn_nan) return (e << f.man_bits) | (m - 1);
    return (e << f.man_bits) | m;
}

// NaN's pattern; formats without NaN give a zero of the opposite sign.
__device__ u32 nan_bits(const Fmt& f, bool negative) {
    const u32 sign_bit = 1u << (f.exp_bits + f.man_bits), sign = negative ? sign_bit : 0;
    if (f.fnuz) return sign_bit;
    if (f.ieee) return (((1u << f.exp_bits) - 1) << f.man_bits) | (1u << (f.man_bits - 1)) | sign;
    if (f.fn_nan) return (sign_bit - 1) | sign;
    return sign ^ sign_bit;
}

// Overflow without saturation: inf where the format has it, else NaN, else the largest value.
__device__ u32 overflow_bits(const Fmt& f, bool negative) {
    const u32 sign = negative ? 1u << (f.exp_bits + f.man_bits) : 0;
    if (f.ieee) return (((1u << f.exp_bits) - 1) << f.man_bits) | sign;
    if (f.fnuz || f.fn_nan) return nan_bits(f, negative);
    return max_bits(f) | sign;
}

__device__ u32 encode(const Fmt& f, double x, bool saturate) {
    const bool negative = signbit(x);
    const u32 sign = negative ? 1u << (f.exp_bits + f.man_bits) : 0;
    if (x != x) return nan_bits(f, negative);
    const u32 top = max_bits(f);
    if (isinf(x)) return saturate ? (top | sign) : overflow_bits(f, negative);
    double a = fabs(x);
    const double largest = decode(f, top);
    if (saturate && a > largest) a = largest;
    const u32 zero = f.fnuz ? 0 : sign;
    if (a == 0.0) return zero;
    const int m = f.man_bits, emin = 1 - f.bias;
    const int e = ilogb(a);
    // Round to a multiple of the quantum 2^q (scaling by powers of two is exact).
    const int q = max(e, emin) - m;
    const i64 n = (i64)rint(ldexp(a, -q));
    if (n == 0) return zero;
    i64 exp_field, man;
    if (n < (1LL << m)) { exp_field = 0; man = n; }
    else if (n == (2LL << m)) { exp_field = q + 1 + m + f.bias; man = 0; }
    else { exp_field = q + m + f.bias; man = n - (1LL << m); }
    const i64 code = (exp_field << m) | man;
    if (exp_field > (1LL << f.exp_bits) - 1 || code > (i64)top)
        return saturate ? (top | sign) : overflow_bits(f, negative);
    return (u32)code | sign;
}

// float8e8m0: a bare exponent; the sign is dropped, NaN and inf become 0xFF.
__device__ u32 encode_e8m0(float x, bool saturate, int mode) {
    const u32 bits = __float_as_uint(x), exponent = (bits >> 23) & 0xFF;
    if (exponent == 0xFF) return 0xFF;
    bool up;
    if (mode == ROUND_UP) up = (bits & 0x7FFFFF) != 0;
    else if (mode == ROUND_DOWN) up = false;
    else up = (bits & 0x400000) && ((bits & 0x200000) || (bits & 0x1FFFFF) || exponent > 0);
    return (up && !(saturate && exponent == 0xFE)) ? exponent + 1 : exponent;
}

// The raw pattern of element k of a small-typed buffer.
__device__ u32 small_pattern(const void* p, int bits, i64 k) {
    const u8* b = (const u8*)p;
    if (bits == 8) return b[k];
    const int per = 8 / bits;
    return (b[k / per] >> ((k % per) * bits)) & ((1u << bits) - 1);
}

// Element k of any supported dtype, as ld_any gives it.
__device__ Any ld_cast(const void* p, int dt, i64 k) {
    const int bits = small_bits(dt);
    if (bits == 0) return ld_any(p, dt, k);
    const u32 raw = small_pattern(p, bits, k);
    Any v; v.i = 0; v.f = 0.0;
    Fmt f;
    if (small_float(dt, f)) { v.is_float = true; v.f = decode(f, raw); return v; }
    if (dt == DT_F8E8M0) {
        v.is_float = true;
        v.f = raw == 0xFF ? __longlong_as_double(0x7ff8000000000000LL) : ldexp(1.0, (int)raw - 127);
        return v;
    }
    // Packed integers, sign-extended when signed.
    v.is_float = false;
    v.i = raw;
    if ((dt == DT_I4 || dt == DT_I2) && (raw >> (bits - 1)) & 1) v.i -= (1LL << bits);
    v.f = (double)v.i;
    return v;
}

// The pattern a value takes in a small type.
__device__ u32 small_code(int dt, Any v, bool saturate, int mode) {
    Fmt f;
    if (small_float(dt, f)) return encode(f, v.f, saturate);
    if (dt == DT_F8E8M0) return encode_e8m0((float)v.f, saturate, mode);
    const int bits = small_bits(dt);
    i64 x;
    if (v.is_float) {
        // Floats truncate; values outside the type's range become 0.
        const double t = trunc(v.f);
        const bool sgn = dt == DT_I4 || dt == DT_I2;
        const double lo = sgn ? -(double)(1LL << (bits - 1)) : 0.0;
        const double hi = sgn ? (double)((1LL << (bits - 1)) - 1) : (double)((1LL << bits) - 1);
        x = (t >= lo && t <= hi) ? (i64)t : 0;
    } else {
        x = v.i;
    }
    return (u32)(x & ((1LL << bits) - 1));
}

// Casts n elements where at least one side is a small type.
extern "C" __global__ void cast_small(i64 n, int from, int to, int saturate, int mode, const void* x, void* y) {
    const int bits = small_bits(to);
    if (bits == 0) {
        for (i64 i = thread_index(); i < n; i += grid_stride()) st_any(y, to, i, ld_cast(x, from, i));
        return;
    }
    const int per = 8 / bits;
    const i64 bytes = (n + per - 1) / per;
    u8* out = (u8*)y;
    for (i64 b = thread_index(); b < bytes; b += grid_stride()) {
        u32 byte = 0;
        for (int j = 0; j < per && b * per + j < n; ++j) {
            const u32 code = small_code(to, ld_cast(x, from, b * per + j), saturate != 0, mode);
            byte |= code << (j * bits);
        }
        out[b] = (u8)byte;
    }
}
