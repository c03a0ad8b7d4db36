// Shared helpers for Onyx's CUDA kernels: storage types for f16 and bf16
// (NVRTC ships no cuda_fp16.h, so conversions are written here), 64-bit
// index helpers and the strided-index walk used by broadcasting kernels.
#pragma once

#include "codes.cuh"

typedef long long i64;
typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned char u8;
typedef signed char i8;
typedef short i16;

#define MAX_RANK 8

// IEEE half and bfloat16 as plain 16-bit storage.
struct f16 { u16 bits; };
struct bf16 { u16 bits; };

__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("{ cvt.f32.f16 %0, %1; }" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
    u16 h;
    asm("{ cvt.rn.f16.f32 %0, %1; }" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float bf16_to_f32(u16 b) {
    return __uint_as_float(((u32)b) << 16);
}

// Round to nearest even; NaN stays a quiet NaN.
__device__ __forceinline__ u16 f32_to_bf16(float f) {
    u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (u16)(x >> 16);
}

// Loading any storage type as its compute type, and storing back.
template <typename T> struct Num { typedef T C; };
template <> struct Num<f16> { typedef float C; };
template <> struct Num<bf16> { typedef float C; };

template <typename T> __device__ __forceinline__ typename Num<T>::C ld(const T* p, i64 i) { return p[i]; }
template <> __device__ __forceinline__ float ld<f16>(const f16* p, i64 i) { return f16_to_f32(p[i].bits); }
template <> __device__ __forceinline__ float ld<bf16>(const bf16* p, i64 i) { return bf16_to_f32(p[i].bits); }

template <typename T> __device__ __forceinline__ void st(T* p, i64 i, typename Num<T>::C v) { p[i] = v; }
template <> __device__ __forceinline__ void st<f16>(f16* p, i64 i, float v) { p[i].bits = f32_to_f16(v); }
template <> __device__ __forceinline__ void st<bf16>(bf16* p, i64 i, float v) { p[i].bits = f32_to_bf16(v); }

// W consecutive elements of p (16-byte aligned when W > 1) as floats.
template <typename T, int W> __device__ __forceinline__ void ldw(const T* p, float* o) {
#pragma unroll
    for (int i = 0; i < W; ++i) o[i] = (float)ld(p, i);
}
template <> __device__ __forceinline__ void ldw<float, 4>(const float* p, float* o) {
    const float4 v = *(const float4*)p;
    o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
}
__device__ __forceinline__ void unpack8(uint4 v, float* o, bool bf) {
    const u32 w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u16 lo = (u16)(w[i] & 0xffffu), hi = (u16)(w[i] >> 16);
        o[2 * i] = bf ? bf16_to_f32(lo) : f16_to_f32(lo);
        o[2 * i + 1] = bf ? bf16_to_f32(hi) : f16_to_f32(hi);
    }
}
template <> __device__ __forceinline__ void ldw<f16, 8>(const f16* p, float* o) {
    unpack8(*(const uint4*)p, o, false);
}
template <> __device__ __forceinline__ void ldw<bf16, 8>(const bf16* p, float* o) {
    unpack8(*(const uint4*)p, o, true);
}

// Converting between compute types, through float for the 16-bit floats.
template <typename T> __device__ __forceinline__ T from_f32(float v) { return (T)v; }
template <> __device__ __forceinline__ f16 from_f32<f16>(float v) { f16 h; h.bits = f32_to_f16(v); return h; }
template <> __device__ __forceinline__ bf16 from_f32<bf16>(float v) { bf16 h; h.bits = f32_to_bf16(v); return h; }

// A module's fault word: kernels that find bad data (an out-of-range gather
// index) set a bit here and carry on without touching memory out of bounds;
// the provider reads and clears it after synchronizing and fails the run.
__device__ unsigned int onyx_fault;
#define FAULT_INDEX 1u
#define FAULT_CACHE 2u  // a KV cache length or position outside its buffers
__device__ __forceinline__ void raise_fault(unsigned int bit) { atomicOr(&onyx_fault, bit); }

// The flat index of one thread and the stride of a grid-stride loop.
__device__ __forceinline__ i64 thread_index() {
    return (i64)blockIdx.x * blockDim.x + threadIdx.x + (i64)blockIdx.y * gridDim.x * blockDim.x;
}
__device__ __forceinline__ i64 grid_stride() {
    return (i64)gridDim.x * gridDim.y * blockDim.x;
}

// An output shape with up to three input stride sets (0 on broadcast dims).
struct Strided {
    i64 numel;
    int rank;
    i64 dims[MAX_RANK];
    i64 a[MAX_RANK];
    i64 b[MAX_RANK];
    i64 c[MAX_RANK];
};

// Offsets of output element `i` in up to three strided inputs. Tensors under
// 2^31 elements (inputs are never larger than the output they broadcast to)
// take 32-bit index arithmetic: 64-bit division is emulated and several times slower.
__device__ __forceinline__ void offsets3(const Strided& s, i64 i, i64& oa, i64& ob, i64& oc) {
    if (s.numel <= 0x7fffffffLL) {
        u32 k = (u32)i, a = 0, b = 0, c = 0;
        for (int d = s.rank - 1; d >= 0; --d) {
            u32 n = (u32)s.dims[d];
            u32 q = k / n;
            u32 r = k - q * n;
            a += r * (u32)s.a[d];
            b += r * (u32)s.b[d];
            c += r * (u32)s.c[d];
            k = q;
        }
        oa = a; ob = b; oc = c;
        return;
    }
    oa = 0; ob = 0; oc = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
        i64 n = s.dims[d];
        i64 q = i / n;
        i64 r = i - q * n;
        oa += r * s.a[d];
        ob += r * s.b[d];
        oc += r * s.c[d];
        i = q;
    }
}

// ONNX dtype codes, for kernels that pick their element type at run time
// (Cast, and Pow with an exponent of another dtype).
enum DTypeCode {
    DT_F32 = 1, DT_U8 = 2, DT_I8 = 3, DT_U16 = 4, DT_I16 = 5, DT_I32 = 6, DT_I64 = 7,
    DT_BOOL = 9, DT_F16 = 10, DT_F64 = 11, DT_U32 = 12, DT_U64 = 13, DT_BF16 = 16
};

// A value of any dtype: floats carry `f`, integers carry `i` (exact to 64 bits).
struct Any { double f; i64 i; bool is_float; };

__device__ __forceinline__ Any ld_any(const void* p, int dt, i64 k) {
    Any v; v.is_float = false; v.f = 0.0; v.i = 0;
    switch (dt) {
    case DT_F32: v.f = ((const float*)p)[k]; v.is_float = true; break;
    case DT_F64: v.f = ((const double*)p)[k]; v.is_float = true; break;
    case DT_F16: v.f = f16_to_f32(((const u16*)p)[k]); v.is_float = true; break;
    case DT_BF16: v.f = bf16_to_f32(((const u16*)p)[k]); v.is_float = true; break;
    case DT_U8: v.i = ((const u8*)p)[k]; break;
    case DT_I8: v.i = ((const i8*)p)[k]; break;
    case DT_U16: v.i = ((const u16*)p)[k]; break;
    case DT_I16: v.i = ((const i16*)p)[k]; break;
    case DT_I32: v.i = ((const int*)p)[k]; break;
    case DT_I64: v.i = ((const i64*)p)[k]; break;
    case DT_U32: v.i = ((const u32*)p)[k]; break;
    case DT_U64: v.i = (i64)((const u64*)p)[k]; break;
    case DT_BOOL: v.i = ((const u8*)p)[k] != 0; break;
    }
    if (!v.is_float) v.f = (dt == DT_U64) ? (double)(u64)v.i : (double)v.i;
    return v;
}

// Float to integer truncates toward zero; NaN becomes 0 and out-of-range values saturate.
__device__ __forceinline__ i64 any_to_int(Any v) {
    if (!v.is_float) return v.i;
    if (v.f != v.f) return 0;
    if (v.f >= 9.2233720368547758e18) return 0x7fffffffffffffffLL;
    if (v.f <= -9.2233720368547758e18) return (i64)0x8000000000000000ULL;
    return (i64)v.f;
}

__device__ __forceinline__ void st_any(void* p, int dt, i64 k, Any v) {
    switch (dt) {
    case DT_F32: ((float*)p)[k] = (float)v.f; break;
    case DT_F64: ((double*)p)[k] = v.f; break;
    case DT_F16: ((u16*)p)[k] = f32_to_f16((float)v.f); break;
    case DT_BF16: ((u16*)p)[k] = f32_to_bf16((float)v.f); break;
    case DT_BOOL: ((u8*)p)[k] = v.is_float ? (v.f != 0.0) : (v.i != 0); break;
    case DT_U8: ((u8*)p)[k] = (u8)any_to_int(v); break;
    case DT_I8: ((i8*)p)[k] = (i8)any_to_int(v); break;
    case DT_U16: ((u16*)p)[k] = (u16)any_to_int(v); break;
    case DT_I16: ((i16*)p)[k] = (i16)any_to_int(v); break;
    case DT_I32: ((int*)p)[k] = (int)any_to_int(v); break;
    case DT_I64: ((i64*)p)[k] = any_to_int(v); break;
    case DT_U32: ((u32*)p)[k] = (u32)any_to_int(v); break;
    case DT_U64:
        ((u64*)p)[k] = (v.is_float && v.f >= 9.2233720368547758e18) ? (u64)v.f : (u64)any_to_int(v);
        break;
    }
}
