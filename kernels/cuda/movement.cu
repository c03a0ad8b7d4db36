// Data movement, gathers, Pad and generators. Every kernel moves whole
// elements by their width alone (1, 2, 4, 8 or 16 bytes: u8, u16, u32, u64,
// uint4), so one instantiation per width serves every dtype of that width;
// the host widens contiguous runs to 16-byte elements where it can. Each
// kernel is a grid-stride loop over its output with 64-bit indexing, and
// never reads or writes outside its tensors: an out-of-range gather index
// (after adding the axis length to a negative one) writes zeros and raises
// FAULT_INDEX, which fails the run when the provider next synchronizes.
#include "common.cuh"

// The most dims the kernels here take (`MOVE_RANK` in movement.rs): a rank-8
// Tile splits each axis in two.
#define MOVE_RANK 16

// ---------------------------------------------------------------- element helpers

// An element of width W made from its little-endian bits (`hi` only for 16 bytes).
template <typename W> __device__ __forceinline__ W from_bits(u64 lo, u64 hi) { return (W)lo; }
template <> __device__ __forceinline__ uint4 from_bits<uint4>(u64 lo, u64 hi) {
    uint4 r;
    r.x = (u32)lo; r.y = (u32)(lo >> 32); r.z = (u32)hi; r.w = (u32)(hi >> 32);
    return r;
}

// An index of any integer type, with a negative one counted from the end of a
// dim of `n`; -1 when out of range.
template <typename IDX> __device__ __forceinline__ i64 resolve_index(const IDX* idx, i64 k, i64 n) {
    i64 v = (i64)idx[k];
    if (v < 0) v += n;
    if (v < 0 || v >= n) {
        raise_fault(FAULT_INDEX);
        return -1;
    }
    return v;
}

// ---------------------------------------------------------------- strided copy

// Element c (a coordinate over `dims`) moves from x[src_off + sum(c[d] * src[d])]
// to y[dst_off + sum(c[d] * dst[d])]. Strides may be negative (Slice with a
// negative step) or zero (Expand). Serves Transpose, Slice, Expand, Tile (each
// axis split into repeats and the input's dim), one input of a Concat, one
// output of a Split, and Dropout's copy.
struct CopyArgs {
    i64 numel;
    int rank;
    int _pad;
    i64 src_off;
    i64 dst_off;
    i64 dims[MOVE_RANK];
    i64 src[MOVE_RANK];
    i64 dst[MOVE_RANK];
};

// I is the type of the coordinate arithmetic: u32 when numel fits (much
// cheaper division), else u64.
template <typename W, typename I>
__device__ void copy_kernel(const CopyArgs& a, const W* x, W* y) {
    for (i64 i = thread_index(); i < a.numel; i += grid_stride()) {
        I rem = (I)i;
        i64 so = a.src_off, dof = a.dst_off;
#pragma unroll
        for (int k = 0; k < MOVE_RANK; ++k) {
            const int d = MOVE_RANK - 1 - k;
            if (d < a.rank) {
                const I n = (I)a.dims[d];
                const I q = rem / n;
                const I c = rem - q * n;
                so += (i64)c * a.src[d];
                dof += (i64)c * a.dst[d];
                rem = q;
            }
        }
        y[dof] = x[so];
    }
}

// A copy whose innermost dim L is contiguous in y but strided in x, while
// another dim P (`p`) is contiguous in x: each block moves 32 × 32 tiles of
// (P, L) through shared memory, so reads and writes both coalesce. The other
// dims index the batch of tiles. Launched with 32 × 8 threads.
#define TILE 32

template <typename W>
__device__ void transpose_kernel(const CopyArgs& a, int p, const W* x, W* y) {
    __shared__ W tile[TILE][TILE + 1];
    const int last = a.rank - 1;
    const i64 np = a.dims[p], nl = a.dims[last];
    const i64 tp = (np + TILE - 1) / TILE, tl = (nl + TILE - 1) / TILE;
    const i64 tiles = a.numel / (np * nl) * tp * tl;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (i64 t = blockIdx.x; t < tiles; t += gridDim.x) {
        i64 rem = t;
        const i64 bl = rem % tl;
        rem /= tl;
        const i64 bp = rem % tp;
        rem /= tp;
        i64 so = a.src_off, dof = a.dst_off;
#pragma unroll
        for (int k = 0; k < MOVE_RANK; ++k) {
            const int d = MOVE_RANK - 1 - k;
            if (d < last && d != p) {
                const i64 q = rem / a.dims[d];
                const i64 c = rem - q * a.dims[d];
                so += c * a.src[d];
                dof += c * a.dst[d];
                rem = q;
            }
        }
        // Read along P (threads of a warp on consecutive x), tile[l][p].
        for (int k = ty; k < TILE; k += blockDim.y) {
            const i64 cp = bp * TILE + tx, cl = bl * TILE + k;
            if (cp < np && cl < nl) tile[k][tx] = x[so + cp * a.src[p] + cl * a.src[last]];
        }
        __syncthreads();
        // Write along L (threads of a warp on consecutive y).
        for (int k = ty; k < TILE; k += blockDim.y) {
            const i64 cp = bp * TILE + k, cl = bl * TILE + tx;
            if (cp < np && cl < nl) y[dof + cp * a.dst[p] + cl * a.dst[last]] = tile[tx][k];
        }
        __syncthreads();
    }
}

// ---------------------------------------------------------------- Gather

// y[o, j, e] = x[o, resolve(idx[j]), e] with `count` indices and `inner`
// elements after the axis (of length `dim`).
struct GatherArgs {
    i64 numel;
    i64 dim;
    i64 inner;
    i64 count;
};

template <typename W, typename IDX>
__device__ void gather_kernel(const GatherArgs& a, const W* x, const IDX* idx, W* y) {
    const i64 block = a.count * a.inner;
    for (i64 i = thread_index(); i < a.numel; i += grid_stride()) {
        const i64 o = i / block;
        const i64 r = i - o * block;
        const i64 j = r / a.inner;
        const i64 e = r - j * a.inner;
        const i64 k = resolve_index(idx, j, a.dim);
        y[i] = k < 0 ? from_bits<W>(0, 0) : x[(o * a.dim + k) * a.inner + e];
    }
}

// ---------------------------------------------------------------- GatherElements

// The output has the indices' shape (`dims`); output element c reads the data
// at c with c[axis] replaced by the resolved index at c.
struct GatherElementsArgs {
    i64 numel;
    int rank;
    int axis;
    i64 axis_dim;
    i64 dims[MOVE_RANK];
    i64 strides[MOVE_RANK];
};

template <typename W, typename IDX>
__device__ void gather_elements_kernel(const GatherElementsArgs& a, const W* x, const IDX* idx, W* y) {
    for (i64 i = thread_index(); i < a.numel; i += grid_stride()) {
        const i64 k = resolve_index(idx, i, a.axis_dim);
        if (k < 0) {
            y[i] = from_bits<W>(0, 0);
            continue;
        }
        i64 rem = i, s = 0;
#pragma unroll
        for (int t = 0; t < MOVE_RANK; ++t) {
            const int d = MOVE_RANK - 1 - t;
            if (d < a.rank) {
                const i64 q = rem / a.dims[d];
                const i64 c = rem - q * a.dims[d];
                s += (d == a.axis ? k : c) * a.strides[d];
                rem = q;
            }
        }
        y[i] = x[s];
    }
}

// ---------------------------------------------------------------- GatherND

// Output slice j (of `inner` elements) copies the data slice addressed by the
// index tuple j (`rk` indices into `dims`, with `strides`), inside batch
// j / per_batch of `batch_stride` data elements.
struct GatherNdArgs {
    i64 numel;
    i64 inner;
    i64 rk;
    i64 per_batch;
    i64 batch_stride;
    i64 dims[MOVE_RANK];
    i64 strides[MOVE_RANK];
};

template <typename W, typename IDX>
__device__ void gather_nd_kernel(const GatherNdArgs& a, const W* x, const IDX* idx, W* y) {
    for (i64 i = thread_index(); i < a.numel; i += grid_stride()) {
        const i64 j = i / a.inner;
        const i64 e = i - j * a.inner;
        i64 s = (j / a.per_batch) * a.batch_stride + e;
        bool ok = true;
#pragma unroll
        for (int t = 0; t < MOVE_RANK; ++t) {
            if (t < a.rk) {
                const i64 k = resolve_index(idx, j * a.rk + t, a.dims[t]);
                ok = ok && k >= 0;
                s += k * a.strides[t];
            }
        }
        y[i] = ok ? x[s] : from_bits<W>(0, 0);
    }
}

// ---------------------------------------------------------------- Pad

// Output coordinate c reads input coordinate pad_coord(c - before) per dim, or
// the fill value. Modes: 0 constant, 1 reflect, 2 edge, 3 wrap.
struct PadArgs {
    i64 numel;
    int rank;
    int mode;
    u64 fill_lo;
    u64 fill_hi;
    i64 out_dims[MOVE_RANK];
    i64 in_dims[MOVE_RANK];
    i64 in_strides[MOVE_RANK];
    i64 before[MOVE_RANK];
};

// The input coordinate read at padded coordinate c of an axis of n, or -1 for
// the fill value (PadMode::source in onyx-core).
__device__ __forceinline__ i64 pad_coord(i64 c, i64 n, int mode) {
    if (c >= 0 && c < n) return c;
    if (n == 0) return -1;
    switch (mode) {
    case 1: {
        if (n == 1) return 0;
        const i64 period = 2 * (n - 1);
        i64 r = c % period;
        if (r < 0) r += period;
        return r < n ? r : period - r;
    }
    case 2: return c < 0 ? 0 : n - 1;
    case 3: {
        i64 r = c % n;
        return r < 0 ? r + n : r;
    }
    }
    return -1;
}

template <typename W>
__device__ void pad_kernel(const PadArgs& a, const W* x, W* y) {
    const W fill = from_bits<W>(a.fill_lo, a.fill_hi);
    for (i64 i = thread_index(); i < a.numel; i += grid_stride()) {
        i64 rem = i, s = 0;
        bool inside = true;
#pragma unroll
        for (int t = 0; t < MOVE_RANK; ++t) {
            const int d = MOVE_RANK - 1 - t;
            if (d < a.rank) {
                const i64 q = rem / a.out_dims[d];
                const i64 c = rem - q * a.out_dims[d];
                const i64 p = pad_coord(c - a.before[d], a.in_dims[d], a.mode);
                inside = inside && p >= 0;
                s += p * a.in_strides[d];
                rem = q;
            }
        }
        y[i] = inside ? x[s] : fill;
    }
}

// ---------------------------------------------------------------- fills

// Every element of y set to the same bits (ConstantOfShape, Dropout's mask).
template <typename W>
__device__ void fill_kernel(i64 n, u64 lo, u64 hi, W* y) {
    const W v = from_bits<W>(lo, hi);
    for (i64 i = thread_index(); i < n; i += grid_stride()) y[i] = v;
}

// Up to 16 int64 values written at y[off..off + n) (Shape, Size).
struct Values {
    i64 n;
    i64 off;
    i64 v[16];
};

extern "C" __global__ void put_i64(Values a, i64* y) {
    const i64 i = thread_index();
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        if (k == i && k < a.n) y[a.off + k] = a.v[k];
    }
}

// Range: y[i] = start + i * delta, exact and wrapping in 64-bit for integers.
template <typename T>
__device__ void range_int_kernel(i64 n, i64 start, i64 delta, T* y) {
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        y[i] = (T)(i64)((u64)start + (u64)i * (u64)delta);
    }
}

// Through double for the floats, rounded once to the output type (f16 and
// bf16 through float).
template <typename T>
__device__ void range_float_kernel(i64 n, double start, double delta, T* y) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        st(y, i, (C)(start + (double)i * delta));
    }
}

// ---------------------------------------------------------------- ReverseSequence

// x [steps, batch, rest…] (time_first) or [batch, steps, rest…]: the first
// lens[b] steps of batch b reversed, the later ones copied. A length outside
// [0, steps] raises the module's fault (an invalid input, as for gathers).
template <typename W, typename L>
__device__ void reverse_sequence_kernel(i64 n, i64 steps, i64 batch, i64 rest, int time_first,
                                        const L* lens, const W* x, W* y) {
    for (i64 i = thread_index(); i < n; i += grid_stride()) {
        const i64 r = i % rest, q = i / rest;
        const i64 t = time_first ? q / batch : q % steps;
        const i64 b = time_first ? q % batch : q / steps;
        i64 len = (i64)lens[b];
        if (len < 0 || len > steps) {
            raise_fault(FAULT_INDEX);
            len = len < 0 ? 0 : steps;
        }
        const i64 s = t < len ? len - 1 - t : t;
        y[i] = x[(time_first ? s * batch + b : b * steps + s) * rest + r];
    }
}

// ---------------------------------------------------------------- instantiations

#define WIDTHS(X) X(w1, u8) X(w2, u16) X(w4, u32) X(w8, u64) X(w16, uint4)

#define WIDTH_KERNELS(name, W) \
    extern "C" __global__ void copy32_##name(CopyArgs a, const W* x, W* y) { copy_kernel<W, u32>(a, x, y); } \
    extern "C" __global__ void copy64_##name(CopyArgs a, const W* x, W* y) { copy_kernel<W, u64>(a, x, y); } \
    extern "C" __global__ void transpose_##name(CopyArgs a, int p, const W* x, W* y) { transpose_kernel<W>(a, p, x, y); } \
    extern "C" __global__ void pad_##name(PadArgs a, const W* x, W* y) { pad_kernel<W>(a, x, y); } \
    extern "C" __global__ void fill_##name(i64 n, u64 lo, u64 hi, W* y) { fill_kernel<W>(n, lo, hi, y); } \
    extern "C" __global__ void gather_##name##_i32(GatherArgs a, const W* x, const int* idx, W* y) { gather_kernel<W, int>(a, x, idx, y); } \
    extern "C" __global__ void gather_##name##_i64(GatherArgs a, const W* x, const i64* idx, W* y) { gather_kernel<W, i64>(a, x, idx, y); } \
    extern "C" __global__ void gather_elements_##name##_i32(GatherElementsArgs a, const W* x, const int* idx, W* y) { gather_elements_kernel<W, int>(a, x, idx, y); } \
    extern "C" __global__ void gather_elements_##name##_i64(GatherElementsArgs a, const W* x, const i64* idx, W* y) { gather_elements_kernel<W, i64>(a, x, idx, y); } \
    extern "C" __global__ void gather_nd_##name##_i32(GatherNdArgs a, const W* x, const int* idx, W* y) { gather_nd_kernel<W, int>(a, x, idx, y); } \
    extern "C" __global__ void gather_nd_##name##_i64(GatherNdArgs a, const W* x, const i64* idx, W* y) { gather_nd_kernel<W, i64>(a, x, idx, y); } \
    extern "C" __global__ void reverse_sequence_##name##_i32(i64 n, i64 steps, i64 batch, i64 rest, int time_first, const int* lens, const W* x, W* y) { reverse_sequence_kernel<W, int>(n, steps, batch, rest, time_first, lens, x, y); } \
    extern "C" __global__ void reverse_sequence_##name##_i64(i64 n, i64 steps, i64 batch, i64 rest, int time_first, const i64* lens, const W* x, W* y) { reverse_sequence_kernel<W, i64>(n, steps, batch, rest, time_first, lens, x, y); }

WIDTHS(WIDTH_KERNELS)

#define RANGE_INT(name, T) \
    extern "C" __global__ void range_int_##name(i64 n, i64 start, i64 delta, T* y) { range_int_kernel<T>(n, start, delta, y); }
#define RANGE_FLOAT(name, T) \
    extern "C" __global__ void range_float_##name(i64 n, double start, double delta, T* y) { range_float_kernel<T>(n, start, delta, y); }

RANGE_INT(i8, i8) RANGE_INT(u8, u8) RANGE_INT(i16, i16) RANGE_INT(u16, u16)
RANGE_INT(i32, int) RANGE_INT(u32, u32) RANGE_INT(i64, i64) RANGE_INT(u64, u64)
RANGE_FLOAT(f32, float) RANGE_FLOAT(f64, double) RANGE_FLOAT(f16, f16) RANGE_FLOAT(bf16, bf16)

// ---------------------------------------------------------------- scatters

// How a scatter combines an update u with the value v already there
// (`Reduction` in core: none, add, mul, min, max).
template <typename C> __device__ __forceinline__ C scatter_combine(int op, C v, C u) {
    switch (op) {
        case 1: return v + u;
        case 2: return v * u;
        case 3: return u < v ? u : v;
        case 4: return u > v ? u : v;
        default: return u;
    }
}

// ScatterElements over the data already copied to y: `lines` runs of `count`
// index elements along the axis, `inner` apart.
struct ScatterElementsArgs {
    i64 lines;
    i64 count;
    i64 axis_dim;  // data's extent along the axis
    i64 inner;     // the indices' stride along the axis
    int rank;
    int axis;
    int op;
    int pad;
    i64 dims[MOVE_RANK];     // the indices' (and updates') dims
    i64 strides[MOVE_RANK];  // the data's strides
};

// One thread per line, applying its updates in order: duplicate indices
// within a line combine in the spec's order, and two lines never reach the
// same element.
template <typename T, typename IDX>
__device__ void scatter_elements_kernel(const ScatterElementsArgs& a, const IDX* idx, const T* upd, T* y) {
    for (i64 line = thread_index(); line < a.lines; line += grid_stride()) {
        i64 rem = line, at = 0, from = 0, step = 1;
        for (int d = a.rank - 1; d >= 0; --d) {
            if (d != a.axis) {
                const i64 c = rem % a.dims[d];
                rem /= a.dims[d];
                at += c * a.strides[d];
                from += c * step;
            }
            step *= a.dims[d];
        }
        for (i64 k = 0; k < a.count; ++k) {
            const i64 e = from + k * a.inner;
            i64 i = (i64)idx[e];
            if (i < 0) i += a.axis_dim;
            if (i < 0 || i >= a.axis_dim) {
                raise_fault(FAULT_INDEX);
                continue;
            }
            const i64 p = at + i * a.strides[a.axis];
            st(y, p, scatter_combine(a.op, ld(y, p), ld(upd, e)));
        }
    }
}

// ScatterND over the data already copied to y: `updates` index tuples of
// `k` indices into `dims`, each addressing a slice of `inner` elements.
struct ScatterNdArgs {
    i64 updates;
    i64 inner;
    int k;
    int op;
    i64 dims[MOVE_RANK];     // the data's first k dims
    i64 strides[MOVE_RANK];  // and their strides
};

// Without a reduction, one thread per element of every slice (the spec leaves
// the order of duplicate tuples open); with one, one thread per slice
// element, applying the tuples in order.
template <typename T, typename IDX>
__device__ void scatter_nd_kernel(const ScatterNdArgs& a, const IDX* idx, const T* upd, T* y) {
    const bool each = a.op == 0;
    const i64 n = each ? a.updates * a.inner : a.inner;
    for (i64 t = thread_index(); t < n; t += grid_stride()) {
        const i64 e = each ? t % a.inner : t;
        const i64 first = each ? t / a.inner : 0, end = each ? first + 1 : a.updates;
        for (i64 u = first; u < end; ++u) {
            i64 off = 0;
            bool ok = true;
            for (int j = 0; j < a.k; ++j) {
                i64 i = (i64)idx[u * a.k + j];
                if (i < 0) i += a.dims[j];
                ok = ok && i >= 0 && i < a.dims[j];
                off += i * a.strides[j];
            }
            if (!ok) {
                raise_fault(FAULT_INDEX);
                continue;
            }
            const i64 p = off + e;
            st(y, p, scatter_combine(a.op, ld(y, p), ld(upd, u * a.inner + e)));
        }
    }
}

#define SCATTER(T, S)                                                                             \
    extern "C" __global__ void scatter_elements_##S##_i32(ScatterElementsArgs a, const int* idx, const T* u, T* y) { scatter_elements_kernel<T, int>(a, idx, u, y); } \
    extern "C" __global__ void scatter_elements_##S##_i64(ScatterElementsArgs a, const i64* idx, const T* u, T* y) { scatter_elements_kernel<T, i64>(a, idx, u, y); } \
    extern "C" __global__ void scatter_nd_##S##_i32(ScatterNdArgs a, const int* idx, const T* u, T* y) { scatter_nd_kernel<T, int>(a, idx, u, y); } \
    extern "C" __global__ void scatter_nd_##S##_i64(ScatterNdArgs a, const i64* idx, const T* u, T* y) { scatter_nd_kernel<T, i64>(a, idx, u, y); }

SCATTER(float, f32) SCATTER(double, f64) SCATTER(f16, f16) SCATTER(bf16, bf16)
SCATTER(i8, i8) SCATTER(u8, u8) SCATTER(i16, i16) SCATTER(u16, u16)
SCATTER(int, i32) SCATTER(u32, u32) SCATTER(i64, i64) SCATTER(u64, u64)
