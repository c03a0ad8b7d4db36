// Decoder kernels: com.microsoft GroupQueryAttention, then RotaryEmbedding
// (at the end of the file).
//
// GroupQueryAttention: decoders' attention against a KV cache,
// with fewer key/value heads than query heads, rotary embedding of queries
// and keys, and the per-batch-entry cache length read on the device
// (`seqlens_k`), so no launch needs a host copy of it.
//
// Batch entry b has T_b = seqlens_k[b] + 1 keys; its S new tokens sit at
// rows P_b .. P_b + S of the present buffers (P_b = T_b - S, or 0 on a first
// prompt). Two launches per call:
// - `gqa_kv_*`: one thread per element of present_key and present_value
//   ([B, KV, L, H]): past rows copied, new rows written (keys rotated), rows
//   beyond zeroed; where past and present are one buffer, one thread per
//   element of the new rows only;
// - `gqa_attend_*`: one block per query row (so a decode step of 14 heads
//   is 14 blocks of 256 threads, not 14 warps). The row is staged in shared
//   memory and rotated there. Visible keys go in chunks of GQA_CHUNK: each
//   thread scores whole keys (16-byte loads where rows allow), the block
//   takes the chunk's maximum and exponentials, then groups of threads weigh
//   every groups-th value row, W features a thread; a running maximum and sum
//   carry across chunks, and the groups' partial rows are summed at the end.
//   A head's sink logit starts the sum as a key whose value is zero.
//
// A T_b or a position outside the buffers raises FAULT_CACHE and touches
// nothing out of bounds; the provider fails the run when it next checks.
#include "common.cuh"

// The widest head (8 features a lane).
#define GQA_MAX_HEAD 256
// Threads per block of `gqa_attend_*` (one block per query row).
#define GQA_THREADS 256
// Keys a block scores before it weighs their values (shared memory).
#define GQA_CHUNK 1024

__device__ __forceinline__ float neg_inf() { return -__int_as_float(0x7f800000); }

struct GqaArgs {
    int batch, q_len, heads, kv_heads, head;
    int q_row;         // elements per token in the query input (N·H, or (N + 2·KV)·H packed)
    int kv_row;        // elements per token in the key and value inputs
    int k_off, v_off;  // where a token's keys and values start in their rows
    int past_cap;      // rows of the past buffers (0 without them)
    int present_len;   // rows of the present buffers
    int total;         // total_sequence_length: the bias's columns
    int first_prompt;  // new tokens start at row 0 and take positions 0 .. S
    int rot_half;      // rotary pairs per head (0: no rotary)
    int interleaved;   // pairs are adjacent features rather than halves
    int cache_rows;    // rows of the cos/sin caches
    int has_pos;       // position_ids gives the rotary positions
    int shared;        // past and present are one buffer
    int causal;
    int window;        // keys a query sees, its own included (<= 0: all)
    int bias_b, bias_n;  // the bias's batch and head extents (0: no bias)
    int sink_kind;     // 0: none, 1: head_sink, 2: a zero logit (smooth_softmax)
    int vec;           // key and value rows start 16-byte aligned and span whole 16-byte words
    float scale;
    float softcap;
};

// Batch entry b's first new row P_b and key count T_b, or false (with the
// fault raised) when they do not fit the buffers.
__device__ __forceinline__ bool span(const GqaArgs& a, const int* seqlens, int b, int& p, int& t) {
    t = seqlens[b] + 1;
    p = a.first_prompt ? 0 : t - a.q_len;
    if (t < 1 || t > a.present_len || p < 0 || p > a.past_cap || p + a.q_len > a.present_len) {
        raise_fault(FAULT_CACHE);
        return false;
    }
    return true;
}

// The rotary position of new token si of batch entry b, or -1 (with the
// fault raised) outside the caches.
__device__ __forceinline__ int position(const GqaArgs& a, const i64* pos_ids, int b, int si, int p) {
    const i64 pos = a.has_pos && !a.first_prompt ? pos_ids[(i64)b * a.q_len + si] : (i64)(p + si);
    if (pos < 0 || pos >= a.cache_rows) {
        raise_fault(FAULT_CACHE);
        return -1;
    }
    return (int)pos;
}

// Feature d of a rotated head whose features x(i) returns: the pair (d and
// its partner) turned by the angle of `pos`.
template <typename T, typename F>
__device__ __forceinline__ float rotated(const GqaArgs& a, const T* cos, const T* sin, int pos, int d, F x) {
    const int half = a.rot_half;
    if (d >= 2 * half || pos < 0) return x(d);
    int i, i1, i2;
    if (a.interleaved) { i = d >> 1; i1 = 2 * i; i2 = i1 + 1; }
    else { i = d < half ? d : d - half; i1 = i; i2 = i + half; }
    const float c = (float)ld(cos, (i64)pos * half + i), s = (float)ld(sin, (i64)pos * half + i);
    const float x1 = x(i1), x2 = x(i2);
    return d == i1 ? x1 * c - x2 * s : x1 * s + x2 * c;
}

template <typename T>
__device__ void gqa_kv(GqaArgs a, const T* key, const T* value, const T* past_k, const T* past_v,
                       const int* seqlens, const i64* pos_ids, const T* cos, const T* sin, T* pk, T* pv) {
    // Where past and present are one buffer only the new rows are written.
    const int rows = a.shared ? a.q_len : a.present_len;
    const i64 n = (i64)a.batch * a.kv_heads * rows * a.head;
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        const int d = (int)(i % a.head);
        const int rr = (int)((i / a.head) % rows);
        const int kvh = (int)((i / ((i64)a.head * rows)) % a.kv_heads);
        const int b = (int)(i / ((i64)a.head * rows * a.kv_heads));
        int p, t;
        if (!span(a, seqlens, b, p, t)) continue;
        const int row = a.shared ? p + rr : rr;
        const i64 e = (((i64)b * a.kv_heads + kvh) * a.present_len + row) * a.head + d;
        if (row < p) {
            const i64 src = (((i64)b * a.kv_heads + kvh) * a.past_cap + row) * a.head + d;
            pk[e] = past_k[src];
            pv[e] = past_v[src];
        } else if (row < p + a.q_len) {
            const int si = row - p;
            const i64 at = ((i64)b * a.q_len + si) * a.kv_row + kvh * a.head;
            const T* kr = key + at + a.k_off;
            const int pos = a.rot_half ? position(a, pos_ids, b, si, p) : -1;
            const float k = rotated(a, cos, sin, pos, d, [&](int i) { return (float)ld(kr, i); });
            st(pk, e, k);
            pv[e] = value[at + a.v_off + d];
        } else {
            st(pk, e, 0.f);
            st(pv, e, 0.f);
        }
    }
}

// v rounded to T's precision.
template <typename T> __device__ __forceinline__ float round_as(float v) {
    const T t = from_f32<T>(v);
    return (float)ld(&t, 0);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The maximum (max = true) or sum of every thread's v, in every thread.
// `red` holds a float per warp; the block synchronizes twice.
template <bool MAX> __device__ __forceinline__ float block_reduce(float v, float* red) {
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    v = MAX ? warp_max(v) : warp_sum(v);
    if (lane == 0) red[w] = v;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < GQA_THREADS / 32; ++i) r = MAX ? fmaxf(r, red[i]) : r + red[i];
    __syncthreads();
    return r;
}

// One block of GQA_THREADS per query row. W is the features a thread loads at
// once: 16 bytes' worth where the key rows allow it, else 1.
template <typename T, int W>
__device__ void gqa_attend(GqaArgs a, const T* query, const T* pk, const T* pv, const int* seqlens,
                           const i64* pos_ids, const T* cos, const T* sin, const T* bias,
                           const T* sinks, T* y) {
    __shared__ float raw[GQA_MAX_HEAD];
    __shared__ float qs[GQA_MAX_HEAD];
    __shared__ float sc[GQA_CHUNK];
    __shared__ float part[GQA_THREADS * W];
    __shared__ float red[GQA_THREADS / 32];
    const int tid = threadIdx.x;
    const i64 r = blockIdx.x;
    // Rows in [B, N, S] order: neighbouring blocks share a head's keys.
    const int si = (int)(r % a.q_len);
    const int n = (int)((r / a.q_len) % a.heads);
    const int b = (int)(r / ((i64)a.q_len * a.heads));
    const int h = a.head;
    int p, t;
    const bool ok = span(a, seqlens, b, p, t);
    const T* qr = query + ((i64)b * a.q_len + si) * a.q_row + n * h;
    for (int d = tid; d < h; d += GQA_THREADS) raw[d] = (float)ld(qr, d);
    __syncthreads();
    const int pos = ok && a.rot_half ? position(a, pos_ids, b, si, p) : -1;
    // Rounded to T, as the CPU's reference rounds its rotated queries.
    for (int d = tid; d < h; d += GQA_THREADS)
        qs[d] = round_as<T>(rotated(a, cos, sin, pos, d, [&](int i) { return raw[i]; }));
    __syncthreads();
    int lo = 0, hi = 0;
    if (ok) {
        const int q_pos = p + si;
        const int seen = a.causal ? min(p + a.q_len, t) : t;
        lo = a.window > 0 ? max(0, q_pos + 1 - a.window) : 0;
        hi = a.causal ? min(q_pos + 1, seen) : seen;
        hi = max(min(hi, a.present_len), lo);
    }
    const int kvh = n / (a.heads / a.kv_heads);
    const T* kb = pk + ((i64)b * a.kv_heads + kvh) * a.present_len * h;
    const T* vb = pv + ((i64)b * a.kv_heads + kvh) * a.present_len * h;
    const T* br = a.bias_b
        ? bias + ((((i64)(b % a.bias_b) * a.bias_n + n % a.bias_n) * a.q_len + si) * a.total)
        : 0;
    // The sink is a key of logit `sink` and value zero.
    float mx = neg_inf(), sum = 0.f;
    if (a.sink_kind) {
        mx = a.sink_kind == 1 ? (float)ld(sinks, n) : 0.f;
        sum = 1.f;
    }
    // Values: `groups` groups of h / W threads, each thread W features of
    // every groups-th key.
    const int per_row = h / W, groups = GQA_THREADS / per_row;
    const int g = tid / per_row, d0 = (tid % per_row) * W;
    float acc[W];
#pragma unroll
    for (int i = 0; i < W; ++i) acc[i] = 0.f;
    for (int c0 = lo; c0 < hi; c0 += GQA_CHUNK) {
        const int keys = min(GQA_CHUNK, hi - c0);
        // Scores: one key per thread, its row read W features at a time.
        float cm = neg_inf();
        for (int j = tid; j < keys; j += GQA_THREADS) {
            const T* kr = kb + (i64)(c0 + j) * h;
            float dot = 0.f;
            for (int d = 0; d < h; d += W) {
                float kv[W];
                ldw<T, W>(kr + d, kv);
#pragma unroll
                for (int i = 0; i < W; ++i) dot += qs[d + i] * kv[i];
            }
            float x = dot * a.scale;
            if (a.softcap > 0.f) x = a.softcap * tanhf(x / a.softcap);
            if (br && c0 + j < a.total) x += (float)ld(br, c0 + j);
            sc[j] = x;
            cm = fmaxf(cm, x);
        }
        const float nm = fmaxf(mx, block_reduce<true>(cm, red));
        // Every key so far masked (a bias of -inf) weighs nothing.
        const float corr = nm == neg_inf() ? 1.f : __expf(mx - nm);
        float cs = 0.f;
        for (int j = tid; j < keys; j += GQA_THREADS) {
            const float e = sc[j] == neg_inf() ? 0.f : __expf(sc[j] - nm);
            sc[j] = e;
            cs += e;
        }
        sum = sum * corr + block_reduce<false>(cs, red);  // its syncs publish sc
        mx = nm;
        if (g < groups) {
#pragma unroll
            for (int i = 0; i < W; ++i) acc[i] *= corr;
#pragma unroll 4
            for (int j = g; j < keys; j += groups) {
                float vv[W];
                ldw<T, W>(vb + (i64)(c0 + j) * h + d0, vv);
                const float pj = sc[j];
#pragma unroll
                for (int i = 0; i < W; ++i) acc[i] += pj * vv[i];
            }
        }
        __syncthreads();  // sc is rewritten by the next chunk
    }
    if (g < groups) {
#pragma unroll
        for (int i = 0; i < W; ++i) part[g * h + d0 + i] = acc[i];
    }
    __syncthreads();
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T* yr = y + (((i64)b * a.q_len + si) * a.heads + n) * h;
    for (int d = tid; d < h; d += GQA_THREADS) {
        float o = 0.f;
        for (int k = 0; k < groups; ++k) o += part[k * h + d];
        st(yr, d, o * inv);
    }
}

#define GQA(T, S)                                                                                   \
    extern "C" __global__ void gqa_kv_##S(GqaArgs a, const T* key, const T* value,                 \
                                          const T* past_k, const T* past_v, const int* seqlens,    \
                                          const i64* pos_ids, const T* cos, const T* sin, T* pk,   \
                                          T* pv) {                                                 \
        gqa_kv<T>(a, key, value, past_k, past_v, seqlens, pos_ids, cos, sin, pk, pv);              \
    }                                                                                               \
    extern "C" __global__ void gqa_attend_##S(GqaArgs a, const T* query, const T* pk,              \
                                              const T* pv, const int* seqlens,                     \
                                              const i64* pos_ids, const T* cos, const T* sin,      \
                                              const T* bias, const T* sinks, T* y) {               \
        if (a.vec) gqa_attend<T, 16 / sizeof(T)>(a, query, pk, pv, seqlens, pos_ids, cos, sin,    \
                                                 bias, sinks, y);                                  \
        else gqa_attend<T, 1>(a, query, pk, pv, seqlens, pos_ids, cos, sin, bias, sinks, y);       \
    }

GQA(float, f32)
GQA(f16, f16)
GQA(bf16, bf16)

// ---------------------------------------------------------------- RotaryEmbedding

// com.microsoft RotaryEmbedding: the leading `rotary_dim` features of each
// head vector turned pairwise by the angle of its token's position (halves,
// or adjacent pairs when interleaved); the rest copied. One thread per pair
// or copied feature, so the output may be the input's buffer. Positions are
// one offset (token s of every batch entry at pos[0] + s) or one per token;
// a position outside the caches raises FAULT_CACHE and leaves its pair
// unrotated.

struct RopeArgs {
    i64 vectors;   // head vectors: batch × seq × heads
    int batch, seq, heads, head, half;
    int rank3;     // [batch, seq, heads × head] rather than [batch, heads, seq, head]
    int interleaved;
    int per_token; // position_ids holds batch × seq ids (else one offset)
    int cache_rows;
};

template <typename T>
__device__ void rotary(RopeArgs a, const T* x, const i64* pos_ids, const T* cos, const T* sin, T* y) {
    const int units = a.half + (a.head - 2 * a.half);
    const i64 n = a.vectors * units;
    for (i64 e = thread_index(); e < n; e += grid_stride()) {
        const i64 v = e / units;
        const int u = (int)(e % units);
        const T* xv = x + v * a.head;
        T* yv = y + v * a.head;
        if (u >= a.half) {
            const int d = a.half + u;  // 2·half + (u - half)
            yv[d] = xv[d];
            continue;
        }
        int b, s;
        if (a.rank3) { b = (int)(v / ((i64)a.seq * a.heads)); s = (int)((v / a.heads) % a.seq); }
        else { b = (int)(v / ((i64)a.heads * a.seq)); s = (int)(v % a.seq); }
        const i64 pos = a.per_token ? pos_ids[(i64)b * a.seq + s] : pos_ids[0] + s;
        const int i1 = a.interleaved ? 2 * u : u, i2 = a.interleaved ? 2 * u + 1 : u + a.half;
        const float x1 = (float)ld(xv, i1), x2 = (float)ld(xv, i2);
        if (pos < 0 || pos >= a.cache_rows) {
            raise_fault(FAULT_CACHE);
            st(yv, i1, x1);
            st(yv, i2, x2);
            continue;
        }
        const float c = (float)ld(cos, pos * a.half + u), sn = (float)ld(sin, pos * a.half + u);
        st(yv, i1, x1 * c - x2 * sn);
        st(yv, i2, x1 * sn + x2 * c);
    }
}

#define ROPE(T, S)                                                                                  \
    extern "C" __global__ void rotary_##S(RopeArgs a, const T* x, const i64* pos_ids, const T* cos, \
                                          const T* sin, T* y) {                                     \
        rotary<T>(a, x, pos_ids, cos, sin, y);                                                      \
    }

ROPE(float, f32)
ROPE(f16, f16)
ROPE(bf16, bf16)
