// Weight-only quantized kernels: MatMulNBits, then GatherBlockQuantized (below).
//
// com.microsoft MatMulNBits: Y[m, n] = sum_k A[m, k] * W[n, k] (+ bias[n]), with W
// stored as BITS-bit integers (2, 4 or 8) in blocks of `block` along k.
//
// B is [N, k_blocks, block * BITS / 8] bytes, so row n of W is one contiguous
// bit stream of k_blocks * block values, low bits first. scales are
// [N, k_blocks] in A's dtype; zero points are packed BITS-bit integers
// [N, ceil(k_blocks * BITS / 8)] bytes, or [N, k_blocks] in A's dtype, or
// absent (2^(BITS-1)). w = (q - zero_point) * scale.
//
// onyx GatedMatMulNBits (`*_glu_*`) takes two such weights, the gate's and
// the up projection's, and writes silu(A · Wgᵀ) ⊙ (A · Wuᵀ): one warp streams
// both rows of its column, so A is read once and the products never reach
// memory.
//
// One warp per output column and up to ROWS rows of A: each lane takes 8
// consecutive weights (one 32-bit load at 4 bits), dequantizes them in
// registers and multiplies them into every row it holds; the warp then sums
// across lanes. The weights are read once per ROWS rows, so one token (m = 1)
// is a GEMV that streams B once. Accumulation is in f32.
#include "common.cuh"

#define NBITS_ROWS 4
#define NBITS_WARPS 4

struct NBitsArgs {
    i64 m;
    i64 n;
    i64 k;
    i64 k_blocks;
    int block;     // a multiple of 8
    int zp_kind;   // 0: none, 1: packed BITS-bit bytes, 2: A's dtype
    int has_bias;
    int zp_kind_up;  // the gated kernels' up projection's zp_kind
    int split;       // the GEMV's warps per column: 1, 2, 4 or 8
};

// The 8 weights starting at element k0 of a row (k0 a multiple of 8), as integers.
template <int BITS> __device__ __forceinline__ void load8(const u8* row, i64 k0, int* q);
template <> __device__ __forceinline__ void load8<4>(const u8* row, i64 k0, int* q) {
    u32 w = *(const u32*)(row + k0 / 2);
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] = (w >> (4 * j)) & 15;
}
template <> __device__ __forceinline__ void load8<8>(const u8* row, i64 k0, int* q) {
    uint2 w = *(const uint2*)(row + k0);
#pragma unroll
    for (int j = 0; j < 4; ++j) { q[j] = (w.x >> (8 * j)) & 255; q[4 + j] = (w.y >> (8 * j)) & 255; }
}
template <> __device__ __forceinline__ void load8<2>(const u8* row, i64 k0, int* q) {
    u32 w = *(const u16*)(row + k0 / 4);
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] = (w >> (2 * j)) & 3;
}

// Warps (output columns, or parts of them) per block of the 4-bit GEMV.
#define GEMV_WARPS 8

// Sums each of C partial sums over the warp, then over the `split` warps of
// a column (through shared memory; split 1 touches none and has no barrier).
// True in the one thread (lane 0 of the column's first warp) that then holds
// the column's totals in acc.
template <int C>
__device__ __forceinline__ bool column_total(float* acc, int split) {
    __shared__ float part[GEMV_WARPS][C];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < C; ++i)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], off);
    if (split == 1) return lane == 0;
    if (lane == 0)
#pragma unroll
        for (int i = 0; i < C; ++i) part[wid][i] = acc[i];
    __syncthreads();
    if (lane != 0 || wid % split != 0) return false;
    for (int p = 1; p < split; ++p)
#pragma unroll
        for (int i = 0; i < C; ++i) acc[i] += part[wid + p][i];
    return true;
}

// Writes column `col` of rows m0 .. m0 + rows from its totals, plus the bias.
template <typename T>
__device__ __forceinline__ void store_column(const NBitsArgs& a, const float* acc, int rows, i64 m0,
                                             i64 col, const T* bias, T* y) {
    const float bv = a.has_bias ? (float)ld(bias, col) : 0.f;
#pragma unroll
    for (int r = 0; r < NBITS_ROWS; ++r)
        if (r < rows) st(y, (m0 + r) * a.n + col, acc[r] + bv);
}

// The gated form: acc holds the gate's totals, then the up projection's;
// writes silu(gate) · up.
template <typename T>
__device__ __forceinline__ void store_gated(const NBitsArgs& a, const float* acc, int rows, i64 m0,
                                            i64 col, T* y) {
#pragma unroll
    for (int r = 0; r < NBITS_ROWS; ++r) {
        const float g = acc[r];
        if (r < rows) st(y, (m0 + r) * a.n + col, g / (1.f + __expf(-g)) * acc[NBITS_ROWS + r]);
    }
}

// Adds this lane's share of column `col` of rows m0 .. m0 + rows of A · Wᵀ
// to acc, for one set of BITS-bit weights.
template <typename T, int BITS>
__device__ __forceinline__ void nbits_dot(const NBitsArgs& a, int zp_kind, const T* x, const u8* b,
                                          const T* scales, const void* zp, i64 col, i64 m0,
                                          int rows, float* acc) {
    const int lane = threadIdx.x & 31;
    const i64 row_bytes = a.k_blocks * a.block * BITS / 8;
    const i64 zp_row = (a.k_blocks * BITS + 7) / 8;
    const u8* w = b + col * row_bytes;
    for (i64 k0 = (i64)lane * 8; k0 < a.k; k0 += 256) {
        const i64 blk = k0 / a.block;
        const float scale = (float)ld(scales, col * a.k_blocks + blk);
        float z = (float)(1 << (BITS - 1));
        if (zp_kind == 1) {
            const u8* zr = (const u8*)zp + col * zp_row;
            const i64 bit = blk * BITS;
            z = (float)((zr[bit / 8] >> (bit % 8)) & ((1 << BITS) - 1));
        } else if (zp_kind == 2) {
            z = (float)ld((const T*)zp, col * a.k_blocks + blk);
        }
        int q[8];
        load8<BITS>(w, k0, q);
        float wv[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) wv[j] = ((float)q[j] - z) * scale;
        const int valid = (int)min((i64)8, a.k - k0);
#pragma unroll
        for (int r = 0; r < NBITS_ROWS; ++r) {
            if (r < rows) {
                const T* xr = x + (m0 + r) * a.k + k0;
                float s = 0.f;
                if (valid == 8) {
#pragma unroll
                    for (int j = 0; j < 8; ++j) s += (float)ld(xr, j) * wv[j];
                } else {
                    for (int j = 0; j < valid; ++j) s += (float)ld(xr, j) * wv[j];
                }
                acc[r] += s;
            }
        }
    }
}

template <typename T, int BITS>
__device__ void matmul_nbits(NBitsArgs a, const T* x, const u8* b, const T* scales, const void* zp,
                             const T* bias, T* y) {
    const i64 col = (i64)blockIdx.x * NBITS_WARPS + (threadIdx.x >> 5);
    const i64 m0 = (i64)blockIdx.y * NBITS_ROWS;
    if (col >= a.n) return;
    const int rows = (int)min((i64)NBITS_ROWS, a.m - m0);
    float acc[NBITS_ROWS] = {0.f, 0.f, 0.f, 0.f};
    nbits_dot<T, BITS>(a, a.zp_kind, x, b, scales, zp, col, m0, rows, acc);
    if (column_total<NBITS_ROWS>(acc, 1)) store_column(a, acc, rows, m0, col, bias, y);
}

// onyx GatedMatMulNBits: silu(A · Wgᵀ) ⊙ (A · Wuᵀ), each warp one column of both.
template <typename T, int BITS>
__device__ void matmul_nbits_glu(NBitsArgs a, const T* x, const u8* b, const T* scales,
                                 const void* zp, const u8* b2, const T* scales2, const void* zp2,
                                 T* y) {
    const i64 col = (i64)blockIdx.x * NBITS_WARPS + (threadIdx.x >> 5);
    const i64 m0 = (i64)blockIdx.y * NBITS_ROWS;
    if (col >= a.n) return;
    const int rows = (int)min((i64)NBITS_ROWS, a.m - m0);
    // The gate's sums, then the up projection's.
    float acc[2 * NBITS_ROWS] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    nbits_dot<T, BITS>(a, a.zp_kind, x, b, scales, zp, col, m0, rows, acc);
    nbits_dot<T, BITS>(a, a.zp_kind_up, x, b2, scales2, zp2, col, m0, rows, acc + NBITS_ROWS);
    if (column_total<2 * NBITS_ROWS>(acc, 1)) store_gated(a, acc, rows, m0, col, y);
}

// The 4-bit GEMV: one warp (or `split` warps) per output column, GEMV_WARPS
// warps a block, up to NBITS_ROWS rows of A. Each lane loads 16 bytes of the
// row at once (32 weights, four 8-weight words) and the 32 matching features
// of each row of A. A weight becomes a float by bits (0x4B000000 | q is
// 2^23 + q), and the word's 2^23 + zero point is subtracted in the same add,
// so dequantizing costs a shift, a logic op and an add per weight; the scale
// multiplies each word's dot product (float zero points, which may have
// fractions, multiply the word's sum of features instead). Taken where K is a multiple of 32 and
// rows of B and A start 16-byte aligned (checked by the host), which is every
// model the onnxruntime-genai builder writes; `matmul_nbits*` above otherwise.

// Adds this lane's share of column `col` of rows m0 .. m0 + rows of A · Wᵀ
// to acc, for one set of 4-bit weights, 16 bytes a load.
template <typename T>
__device__ __forceinline__ void nbits4_vec_dot(const NBitsArgs& a, int zp_kind, const T* x,
                                               const u8* b, const T* scales, const void* zp,
                                               i64 col, i64 m0, int rows, float* acc) {
    const int lane = threadIdx.x & 31, part = (threadIdx.x >> 5) % a.split;
    const int W = 16 / sizeof(T);
    const i64 vecs = a.k / 32;
    const uint4* w = (const uint4*)(b + col * (a.k_blocks * a.block / 2));
    const T* sr = scales + col * a.k_blocks;
    const u8* zr = (const u8*)zp + col * ((a.k_blocks + 1) / 2);
    const T* zt = (const T*)zp + col * a.k_blocks;
    for (i64 v = lane + 32 * part; v < vecs; v += 32 * a.split) {
        const uint4 wv = w[v];
        const u32 words[4] = {wv.x, wv.y, wv.z, wv.w};
        const i64 k0 = v * 32;
        // Integer zero points join the 2^23 (exactly); float ones (zp_kind 2)
        // may have fractions, so they multiply the sum of the features instead.
        float s[4], z[4], zf[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (j > 0 && a.block >= 32) { s[j] = s[0]; z[j] = z[0]; zf[j] = zf[0]; continue; }
            const i64 blk = (k0 + 8 * j) / a.block;
            s[j] = (float)ld(sr, blk);
            z[j] = 8388608.f + 8.f;
            zf[j] = 0.f;
            if (zp_kind == 1) z[j] = 8388608.f + (float)((zr[blk >> 1] >> ((blk & 1) * 4)) & 15);
            else if (zp_kind == 2) { z[j] = 8388608.f; zf[j] = (float)ld(zt, blk); }
        }
#pragma unroll
        for (int r = 0; r < NBITS_ROWS; ++r) {
            if (r >= rows) break;
            const T* xr = x + (m0 + r) * a.k + k0;
            float xv[32];
#pragma unroll
            for (int c = 0; c < 32; c += W) ldw<T, 16 / sizeof(T)>(xr + c, xv + c);
            float tot = 0.f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                float dot = 0.f;
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const float q = __uint_as_float(0x4B000000u | ((words[j] >> (4 * i)) & 15u)) - z[j];
                    dot += xv[8 * j + i] * q;
                }
                if (zp_kind == 2) {
                    float sx = 0.f;
#pragma unroll
                    for (int i = 0; i < 8; ++i) sx += xv[8 * j + i];
                    dot -= zf[j] * sx;
                }
                tot += s[j] * dot;
            }
            acc[r] += tot;
        }
    }
}

// The GEMV's column: GEMV_WARPS / split columns a block, `split` warps each
// taking every split-th 16-byte word of its rows (a long K with few columns,
// a down projection, keeps enough loads in flight that way).
#define GEMV_COLUMN                                                                                 \
    const i64 col = (i64)blockIdx.x * (GEMV_WARPS / a.split) + (threadIdx.x >> 5) / a.split;       \
    const i64 m0 = (i64)blockIdx.y * NBITS_ROWS;                                                   \
    const bool live = col < a.n;                                                                    \
    const int rows = (int)min((i64)NBITS_ROWS, a.m - m0);

template <typename T>
__device__ void matmul_nbits4_vec(NBitsArgs a, const T* x, const u8* b, const T* scales,
                                  const void* zp, const T* bias, T* y) {
    GEMV_COLUMN
    float acc[NBITS_ROWS] = {0.f, 0.f, 0.f, 0.f};
    if (live) nbits4_vec_dot(a, a.zp_kind, x, b, scales, zp, col, m0, rows, acc);
    // Every thread reaches the block's barrier, live or not.
    if (column_total<NBITS_ROWS>(acc, a.split) && live) store_column(a, acc, rows, m0, col, bias, y);
}

// The gated GEMV: both weight rows of a column streamed by its warps.
template <typename T>
__device__ void matmul_nbits4_vec_glu(NBitsArgs a, const T* x, const u8* b, const T* scales,
                                      const void* zp, const u8* b2, const T* scales2,
                                      const void* zp2, T* y) {
    GEMV_COLUMN
    // The gate's sums, then the up projection's.
    float acc[2 * NBITS_ROWS] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    if (live) {
        nbits4_vec_dot(a, a.zp_kind, x, b, scales, zp, col, m0, rows, acc);
        nbits4_vec_dot(a, a.zp_kind_up, x, b2, scales2, zp2, col, m0, rows, acc + NBITS_ROWS);
    }
    if (column_total<2 * NBITS_ROWS>(acc, a.split) && live) store_gated(a, acc, rows, m0, col, y);
}

#define NBITS(T, S, BITS)                                                                           \
    extern "C" __global__ void matmul_nbits##BITS##_##S(NBitsArgs a, const T* x, const u8* b,       \
                                                        const T* scales, const void* zp,            \
                                                        const T* bias, T* y) {                      \
        matmul_nbits<T, BITS>(a, x, b, scales, zp, bias, y);                                        \
    }                                                                                               \
    extern "C" __global__ void matmul_nbits##BITS##_glu_##S(                                        \
        NBitsArgs a, const T* x, const u8* b, const T* scales, const void* zp, const u8* b2,        \
        const T* scales2, const void* zp2, T* y) {                                                  \
        matmul_nbits_glu<T, BITS>(a, x, b, scales, zp, b2, scales2, zp2, y);                        \
    }

#define NBITS_ALL(T, S) NBITS(T, S, 2) NBITS(T, S, 4) NBITS(T, S, 8)                               \
    extern "C" __global__ void matmul_nbits4_vec_##S(NBitsArgs a, const T* x, const u8* b,         \
                                                     const T* scales, const void* zp,               \
                                                     const T* bias, T* y) {                         \
        matmul_nbits4_vec<T>(a, x, b, scales, zp, bias, y);                                         \
    }                                                                                               \
    extern "C" __global__ void matmul_nbits4_vec_glu_##S(                                           \
        NBitsArgs a, const T* x, const u8* b, const T* scales, const void* zp, const u8* b2,        \
        const T* scales2, const void* zp2, T* y) {                                                  \
        matmul_nbits4_vec_glu<T>(a, x, b, scales, zp, b2, scales2, zp2, y);                         \
    }

NBITS_ALL(float, f32)
NBITS_ALL(f16, f16)
NBITS_ALL(bf16, bf16)

// ---------------------------------------------------------------- GatherBlockQuantized

// com.microsoft GatherBlockQuantized: Gather(dequant(data), indices) along
// `gather_axis`, dequantizing only the gathered rows: (q - zero_point) ·
// scale with a scale (and zero point) per block of `block` elements along
// `quantize_axis`. data is int4/uint4 (two values a byte over the whole
// tensor, low nibble first) or uint8 holding 8 / BITS values a byte along the
// last axis (each row padded to whole bytes); zero points are packed the
// same way as data, or absent (2^(BITS-1) for uint8, 0 for int4/uint4).
// One thread per output element. An index outside the axis gives zeros
// (negative ones count from the end), as onnxruntime.

#define GBQ_MAX_RANK 8

struct GbqArgs {
    i64 numel;             // output elements
    i64 count;             // indices
    i64 axis;              // the gathered axis's extent
    i64 inner;             // elements after the gathered axis
    i64 row, zp_row;       // logical values per row of data and of the zero points (uint8 packing)
    i64 dims[GBQ_MAX_RANK];    // data's logical shape
    i64 sstride[GBQ_MAX_RANK]; // the scales' strides (the quantized axis counts blocks)
    int rank;
    int qaxis;
    int block;
    int kind;      // 0: uint8 of `bits`, 1: uint4, 2: int4
    int bits;
    int has_zp;
    int idx64;
};

// Value i of packed quantized data (row: logical values per uint8 row).
__device__ __forceinline__ int gbq_value(const u8* p, int kind, int bits, i64 row, i64 i) {
    if (kind == 0) {
        const int per = 8 / bits;
        const i64 row_bytes = (row + per - 1) / per;
        const i64 r = i / row, c = i % row;
        return (p[r * row_bytes + c / per] >> ((c % per) * bits)) & ((1 << bits) - 1);
    }
    const int v = (p[i >> 1] >> ((i & 1) * 4)) & 15;
    return kind == 2 && v >= 8 ? v - 16 : v;
}

template <typename T>
__device__ void gather_block(GbqArgs a, const u8* data, const void* idx, const T* scales, const u8* zp, T* y) {
    for (i64 e = thread_index(); e < a.numel; e += grid_stride()) {
        const i64 j = e % a.inner;
        const i64 m = (e / a.inner) % a.count;
        const i64 o = e / (a.inner * a.count);
        i64 ix = a.idx64 ? ((const i64*)idx)[m] : (i64)((const int*)idx)[m];
        if (ix < 0) ix += a.axis;
        if (ix < 0 || ix >= a.axis) {
            st(y, e, 0.f);
            continue;
        }
        const i64 src = (o * a.axis + ix) * a.inner + j;
        // The scale's index: src's coordinates, the quantized one divided by the block.
        i64 rest = src, si = 0;
        for (int d = a.rank - 1; d >= 0; --d) {
            const i64 c = rest % a.dims[d];
            rest /= a.dims[d];
            si += (d == a.qaxis ? c / a.block : c) * a.sstride[d];
        }
        const int z = a.has_zp ? gbq_value(zp, a.kind, a.bits, a.zp_row, si)
                               : (a.kind == 0 ? 1 << (a.bits - 1) : 0);
        const int q = gbq_value(data, a.kind, a.bits, a.row, src);
        st(y, e, (float)(q - z) * (float)ld(scales, si));
    }
}

#define GBQ(T, S)                                                                                   \
    extern "C" __global__ void gather_block_##S(GbqArgs a, const u8* data, const void* idx,       \
                                                const T* scales, const u8* zp, T* y) {             \
        gather_block<T>(a, data, idx, scales, zp, y);                                               \
    }

GBQ(float, f32)
GBQ(f16, f16)
GBQ(bf16, bf16)
