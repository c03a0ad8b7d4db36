// TopK: the k largest (or smallest) elements along an axis, sorted, with
// their indices; equal values keep their order along the axis, the lower
// index first. NaN ranks above every number (first for largest, last for
// smallest), so the order is total.
//
// One thread per input element computes its rank in its line — how many
// elements of the line come before it in that order — and writes itself to
// output position `rank` when that is below k. A line is read once per
// element from cache: O(len²) work per line, fine for the lines models use
// TopK on (detection scores, vocabulary sampling) on a GPU's thousands of threads.
#include "common.cuh"

struct TopKArgs {
    i64 lines;   // outer * inner lines
    i64 len;     // elements along the axis
    i64 inner;   // stride of the axis
    i64 k;
    int largest;
    int _pad;
};

// Whether a (at index ia) comes before b (at ib) in the output order.
template <typename C>
__device__ __forceinline__ bool before(C a, i64 ia, C b, i64 ib, bool largest) {
    const bool na = a != a, nb = b != b;  // NaN (never true for integers)
    if (na || nb) {
        if (na && nb) return ia < ib;
        return largest ? na : nb;
    }
    if (a == b) return ia < ib;
    return largest ? a > b : a < b;
}

template <typename T>
__device__ void topk(const TopKArgs& a, const T* x, T* y, i64* idx) {
    typedef typename Num<T>::C C;
    const i64 total = a.lines * a.len;
    for (i64 t = thread_index(); t < total; t += grid_stride()) {
        // t = (outer * len + i) * inner + in
        const i64 in = t % a.inner;
        const i64 rest = t / a.inner;
        const i64 i = rest % a.len;
        const i64 outer = rest / a.len;
        const T* line = x + outer * a.len * a.inner + in;
        const C v = ld(line, i * a.inner);
        i64 rank = 0;
        for (i64 j = 0; j < a.len && rank < a.k; ++j) {
            if (j != i && before(ld(line, j * a.inner), j, v, i, a.largest != 0)) ++rank;
        }
        if (rank < a.k) {
            const i64 o = (outer * a.k + rank) * a.inner + in;
            st(y, o, v);
            idx[o] = i;
        }
    }
}

#define TOPK(T, S)                                                                        \
    extern "C" __global__ void topk_##S(TopKArgs a, const T* x, T* y, i64* idx) {         \
        topk<T>(a, x, y, idx);                                                            \
    }

TOPK(float, f32)
TOPK(double, f64)
TOPK(f16, f16)
TOPK(bf16, bf16)
TOPK(i8, i8)
TOPK(u8, u8)
TOPK(i16, i16)
TOPK(u16, u16)
TOPK(int, i32)
TOPK(u32, u32)
TOPK(i64, i64)
TOPK(u64, u64)
