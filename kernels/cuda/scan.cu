// CumSum and CumProd: a warp-shuffle scan along one axis.

#include "common.cuh"

// ---------------------------------------------------------------- cumulative sums and products

// A tensor seen as [lines / inner, len, inner]: `lines` runs of `len`
// elements `inner` apart, scanned along `len`.
struct ScanShape {
    i64 lines;
    i64 len;
    i64 inner;
    int product;    // CumProd instead of CumSum
    int exclusive;  // leave each element out of its own result
    int reverse;    // accumulate from the end
    int pad;
};

// One warp per line, 32 elements at a time: an inclusive scan over the lanes
// with shuffles, shifted one lane for exclusive, plus the carry of the
// elements before. In place when y == x: each lane reads its element before
// writing it.
template <typename T>
__device__ void cumulative(const ScanShape s, const T* x, T* y) {
    typedef typename Num<T>::C C;
    const int lane = threadIdx.x & 31;
    const C one = s.product ? (C)1 : (C)0;
    const i64 warps = ((i64)gridDim.x * blockDim.x) >> 5;
    // Whole warps step together (the shuffles need every lane).
    for (i64 line = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5; line < s.lines; line += warps) {
        const i64 base = (line / s.inner) * s.len * s.inner + line % s.inner;
        C carry = one;
        for (i64 j0 = 0; j0 < s.len; j0 += 32) {
            const i64 j = j0 + lane;
            const bool live = j < s.len;
            const i64 at = base + (s.reverse ? s.len - 1 - j : j) * s.inner;
            C v = live ? ld(x, at) : one;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const C u = __shfl_up_sync(0xffffffffu, v, d);
                if (lane >= d) v = s.product ? v * u : v + u;
            }
            C before = __shfl_up_sync(0xffffffffu, v, 1);
            if (lane == 0) before = one;
            const C mine = s.exclusive ? before : v;
            if (live) st(y, at, s.product ? carry * mine : carry + mine);
            const C last = __shfl_sync(0xffffffffu, v, 31);
            carry = s.product ? carry * last : carry + last;
        }
    }
}

#define CUMULATIVE(T, S)                                                                          \
    extern "C" __global__ void cumulative_##S(ScanShape s, const T* x, T* y) { cumulative<T>(s, x, y); }

CUMULATIVE(float, f32)
CUMULATIVE(double, f64)
CUMULATIVE(f16, f16)
CUMULATIVE(bf16, bf16)
CUMULATIVE(int, i32)
CUMULATIVE(u32, u32)
CUMULATIVE(i64, i64)
CUMULATIVE(u64, u64)
