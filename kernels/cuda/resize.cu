// Resize and Upsample. The host plans each axis (scale, crop box, taps per
// output coordinate) with onyx-core's ResizePlan; the kernels recompute that
// plan's per-coordinate taps on the fly with the same f64 formulas
// (onyx_core::ops::resize: `source`, `coeffs`, `axis_taps`), since the tap
// tables cannot travel without a device buffer. Multiplications that feed an
// addition in the coordinate transforms use __dmul_rn/__dadd_rn so they are
// never contracted into FMAs and round exactly as the host's do.
//
// resize_interp_T: the weighted sum over the tensor product of every axis'
// taps (f32 weights, multiplied and summed in f64 like the CPU backend), or
// the extrapolation value outside the crop box.
// resize_nearest_wN: nearest sampling as a pure copy for any element width.
#include "common.cuh"

// Mirrors `ResizeAxis` in resize.rs.
struct ResizeAxis {
    double scale;
    double roi0;   // crop box start (tf_crop_and_resize)
    double roi1;   // crop box end
    i64 in;        // input size
    i64 out;       // output size
    i64 stride;    // input stride in elements
    int identity;  // the plan's one-tap identity axis
    int taps;      // taps per output coordinate
};

// Mirrors `ResizeGeom` in resize.rs.
struct ResizeGeom {
    i64 total;
    int rank;
    int mode;       // 0 nearest, 1 linear, 2 cubic
    int coord;      // 0 half_pixel, 1 half_pixel_symmetric, 2 pytorch_half_pixel,
                    // 3 align_corners, 4 asymmetric, 5 tf_crop_and_resize
    int nearest;    // 0 round_prefer_floor, 1 round_prefer_ceil, 2 floor, 3 ceil, 4 simple
    int exclude;    // exclude_outside
    int antialias;
    double cubic_a;
    float extrapolation;
    int _pad;
    ResizeAxis ax[MAX_RANK];
};
static_assert(sizeof(ResizeGeom) == 496, "ResizeGeom must match resize.rs");

// n / d and n % d, in 32 bits when both fit.
__device__ __forceinline__ i64 divmod(i64 n, i64 d, i64& r) {
    if (((u64)n | (u64)d) >> 32 == 0) {
        const u32 q = (u32)n / (u32)d;
        r = (i64)((u32)n - q * (u32)d);
        return q;
    }
    const i64 q = n / d;
    r = n - q * d;
    return q;
}

// Onyx-core's `Resize::source`: the input coordinate of output coordinate y.
__device__ __forceinline__ double source(const ResizeGeom& g, const ResizeAxis& a, double y,
                                         bool& outside) {
    const double inw = (double)a.in;
    const double outw = __dmul_rn(a.scale, inw);
    outside = false;
    switch (g.coord) {
    case 3:
        if (outw == 1.0) return 0.0;
        return __dmul_rn(y, inw - 1.0) / (outw - 1.0);
    case 4:
        return y / a.scale;
    case 5: {
        const double span = a.roi1 - a.roi0;
        const double lead = outw == 1.0
                                ? __dmul_rn(span, inw - 1.0) / 2.0
                                : __dmul_rn(__dmul_rn(y, span), inw - 1.0) / (outw - 1.0);
        const double x = __dadd_rn(lead, __dmul_rn(a.roi0, inw - 1.0));
        outside = x < 0.0 || x > inw - 1.0;
        return x;
    }
    case 2:
        if (outw == 1.0) return -0.5;
        return __dadd_rn(y, 0.5) / a.scale - 0.5;
    case 1: {
        const double adjustment = (double)a.out / outw;
        const double offset = __dmul_rn(inw / 2.0, 1.0 - adjustment);
        return __dsub_rn(__dadd_rn(offset, __dadd_rn(y, 0.5) / a.scale), 0.5);
    }
    default:
        return __dadd_rn(y, 0.5) / a.scale - 0.5;
    }
}

// One non-identity axis at one output coordinate.
struct AxisState {
    double ratio;  // fractional position in (0, 1]
    double s1;     // antialias normalization (the raw coefficients' sum)
    double s2;     // exclude_outside renormalization
    double scale;
    i64 start;     // input index of tap 0 (unclamped)
    i64 in;
    i64 stride;
    int taps;
    int second;    // nearest: whether the second tap is taken
};

__device__ __forceinline__ double cubic_kernel(double x, double a) {
    x = fabs(x);
    if (x <= 1.0) return (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0;
    if (x < 2.0) return a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a;
    return 0.0;
}

// Onyx-core's `Resize::coeffs`, tap t, before any normalization.
__device__ __forceinline__ double raw_coeff(const ResizeGeom& g, const AxisState& s, int t) {
    const double r = s.ratio;
    if (g.mode == 0) return t == s.second ? 1.0 : 0.0;
    if (g.mode == 1) {
        if (g.antialias) {
            const double sc = fmin(s.scale, 1.0);
            const double start = floor(-1.0 / sc) + 1.0;
            const double v = 1.0 - fabs(((start + t) - r) * sc);
            return fmin(fmax(v, 0.0), 1.0);
        }
        return t == 0 ? 1.0 - r : r;
    }
    const double a = g.cubic_a;
    if (g.antialias) {
        const double sc = fmin(s.scale, 1.0);
        const double start = floor(-2.0 / sc) + 1.0;
        return cubic_kernel(sc * ((start + t) - r), a);
    }
    const double q = 1.0 - r;
    switch (t) {
    case 0: return ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a;
    case 1: return ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0;
    case 2: return ((a + 2.0) * q - (a + 3.0)) * q * q + 1.0;
    default: return ((a * (q + 1.0) - 5.0 * a) * (q + 1.0) + 8.0 * a) * (q + 1.0) - 4.0 * a;
    }
}

__device__ __forceinline__ bool in_axis(const AxisState& s, int t) {
    const i64 i = s.start + t;
    return i >= 0 && i < s.in;
}

// Onyx-core's `Resize::axis_taps` for output coordinate y: the axis state, and
// whether y is outside the crop box.
__device__ __forceinline__ bool prepare(const ResizeGeom& g, const ResizeAxis& a, i64 y,
                                        AxisState& s) {
    bool outside;
    const double x = source(g, a, (double)y, outside);
    const double base = floor(x);
    const bool exact = x == base;
    s.ratio = exact ? 1.0 : x - base;
    s.scale = a.scale;
    s.in = a.in;
    s.stride = a.stride;
    s.taps = a.taps;
    s.start = (i64)base - a.taps / 2 + (exact ? 0 : 1);
    switch (g.nearest) {
    case 0: s.second = s.ratio > 0.5; break;
    case 1: s.second = s.ratio >= 0.5; break;
    case 2: s.second = 0; break;
    case 3: s.second = 1; break;
    default: s.second = a.scale < 1.0; break;
    }
    if (s.ratio == 1.0) s.second = 1;
    const bool norm = g.antialias && g.mode != 0;
    s.s1 = 1.0;
    if (norm) {
        double sum = 0.0;
        for (int t = 0; t < s.taps; ++t) sum += raw_coeff(g, s, t);
        s.s1 = sum;
    }
    s.s2 = 0.0;
    if (g.exclude) {
        double sum = 0.0;
        for (int t = 0; t < s.taps; ++t) {
            const double c = norm ? raw_coeff(g, s, t) / s.s1 : raw_coeff(g, s, t);
            sum += in_axis(s, t) ? c : 0.0;
        }
        s.s2 = sum;
    }
    return outside;
}

// The f32 weight of tap t, normalized as the core normalizes it.
__device__ __forceinline__ float weight(const ResizeGeom& g, const AxisState& s, int t) {
    double c = raw_coeff(g, s, t);
    if (g.antialias && g.mode != 0) c = c / s.s1;
    if (g.exclude) {
        if (!in_axis(s, t)) c = 0.0;
        else if (s.s2 != 0.0) c = c / s.s2;
    }
    return (float)c;
}

__device__ __forceinline__ i64 clamp_index(const AxisState& s, int t) {
    const i64 i = s.start + t;
    return i < 0 ? 0 : (i >= s.in ? s.in - 1 : i);
}

template <typename T>
__device__ __forceinline__ void resize_interp(const ResizeGeom& g, const T* __restrict__ x,
                                              T* __restrict__ y) {
    typedef typename Num<T>::C C;
    for (i64 i = thread_index(); i < g.total; i += grid_stride()) {
        AxisState s[MAX_RANK];
        int na = 0;
        i64 base = 0;
        i64 rem = i;
        bool outside = false;
        // Axes from the last to the first: s[na - 1] is the outermost active axis.
        for (int d = g.rank - 1; d >= 0; --d) {
            const ResizeAxis& a = g.ax[d];
            i64 c;
            rem = divmod(rem, a.out, c);
            if (a.identity) {
                base += c * a.stride;
                continue;
            }
            outside |= prepare(g, a, c, s[na]);
            ++na;
        }
        if (outside) {
            st(y, i, (C)g.extrapolation);
            continue;
        }
        i64 combos = 1;
        for (int q = 0; q < na; ++q) combos *= s[q].taps;
        double sum = 0.0;
        for (i64 k = 0; k < combos; ++k) {
            i64 r = k;
            i64 off = base;
            double w = 1.0;
            // Weights multiply in axis order, as the CPU backend's do.
            for (int q = na - 1; q >= 0; --q) {
                i64 t;
                r = divmod(r, s[q].taps, t);
                const float wt = weight(g, s[q], (int)t);
                if (wt == 0.0f) {
                    w = 0.0;
                    break;
                }
                w *= (double)wt;
                off += clamp_index(s[q], (int)t) * s[q].stride;
            }
            if (w != 0.0) sum += w * (double)ld(x, off);
        }
        st(y, i, (C)sum);
    }
}

// Nearest as a copy: per axis the one tap with weight 1 (the first tap when
// exclude_outside zeroed it, as the CPU backend picks).
template <typename W>
__device__ __forceinline__ void resize_nearest(const ResizeGeom& g, const W* __restrict__ x,
                                               W* __restrict__ y) {
    for (i64 i = thread_index(); i < g.total; i += grid_stride()) {
        i64 off = 0;
        i64 rem = i;
        for (int d = g.rank - 1; d >= 0; --d) {
            const ResizeAxis& a = g.ax[d];
            i64 c;
            rem = divmod(rem, a.out, c);
            if (a.identity) {
                off += c * a.stride;
                continue;
            }
            AxisState s;
            prepare(g, a, c, s);
            int t = s.second;
            if (g.exclude && !in_axis(s, t)) t = 0;
            off += clamp_index(s, t) * a.stride;
        }
        y[i] = x[off];
    }
}

#define RESIZE_INTERP(T, S)                                                                  \
    extern "C" __global__ void resize_interp_##S(ResizeGeom g, const T* x, T* y) {           \
        resize_interp<T>(g, x, y);                                                           \
    }
#define RESIZE_NEAREST(W, S)                                                                 \
    extern "C" __global__ void resize_nearest_##S(ResizeGeom g, const W* x, W* y) {          \
        resize_nearest<W>(g, x, y);                                                          \
    }

RESIZE_INTERP(float, f32)
RESIZE_INTERP(f16, f16)
RESIZE_INTERP(bf16, bf16)
RESIZE_INTERP(double, f64)
RESIZE_NEAREST(u8, w1)
RESIZE_NEAREST(u16, w2)
RESIZE_NEAREST(u32, w4)
RESIZE_NEAREST(u64, w8)
