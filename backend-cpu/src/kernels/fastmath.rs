//! Vectorizable f32 `exp`, `erf`, `tanh` and `sigmoid`, and [`vectorized`],
//! which compiles a loop for the best vector instruction set of the CPU.
//!
//! `f32::exp` and `libm::erff` are calls per element, so a loop over them
//! never vectorizes. These are branch-free polynomials (both sides of a range
//! split are computed and one is selected), so LLVM turns loops over them into
//! SIMD code. The coefficients were fitted for this file (Lawson's minimax
//! iteration on the relative error, in f64). Measured against f64 references
//! (the tests below), the relative error is below 3e-7 (a few ulp); `libm`'s
//! is about 1 ulp. Products and sums are written without `mul_add`: without a
//! hardware FMA (the x86-64 baseline, wasm32) `mul_add` is a slow library call.

/// Runs `f`, compiled with AVX-512 or AVX2+FMA where this CPU has them.
///
/// The binary targets baseline x86-64 (SSE2); inside `f`, LLVM may use the
/// wider instruction set that `pulp` detected at run time (detection is cached).
/// Loops should be in `f` itself or in `#[inline(always)]` functions it calls:
/// code behind a call that is not inlined keeps the baseline. Elsewhere (wasm32
/// is built with simd128, aarch64 always has NEON) this just calls `f`.
#[inline(always)]
pub fn vectorized<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        pulp::Arch::new().dispatch(f)
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        f()
    }
}

/// Work for [`vectorized_wide`]. Implement `run` with `#[inline(always)]`.
pub trait Wide {
    /// What the work returns.
    type Output;
    /// Does the work.
    fn run(self) -> Self::Output;
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
struct Dispatch<W>(W);

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
impl<W: Wide> pulp::WithSimd for Dispatch<W> {
    type Output = W::Output;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> W::Output {
        self.0.run()
    }
}

/// [`vectorized`] for bodies too large for LLVM to inline into the wide code
/// on its own (a closure's body is a separate function, compiled for the
/// baseline when not inlined): `w.run()` is called through `#[inline(always)]`
/// trait methods only, so it is compiled inside the dispatched function.
#[inline(always)]
pub fn vectorized_wide<W: Wide>(w: W) -> W::Output {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        pulp::Arch::new().dispatch(Dispatch(w))
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64")))]
    {
        w.run()
    }
}

/// Adding and subtracting 1.5·2²³ rounds an f32 below 2²² to the nearest
/// integer (ties to even), and leaves that integer in the low mantissa bits.
const ROUND: f32 = 12_582_912.0;
const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// ln 2 split so that `n · LN2_HI` is exact for |n| < 2¹⁵ (Cody and Waite).
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `e^x`. Overflows to infinity above about 88.72, reaches subnormals below
/// -87.34 and zero below about -103.97; NaN stays NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    // Clamped so that n fits both halves of the scale below; NaN passes through.
    let x = x.clamp(-104.0, 89.0);
    let t = x * LOG2_E + ROUND;
    let n = t - ROUND;
    let k = t.to_bits() as i32 - ROUND.to_bits() as i32;
    let r = x - n * LN2_HI - n * LN2_LO;
    // e^r = 1 + r + r²·P(r) on |r| ≤ ln2/2.
    let p = 1.979_035_3e-4;
    let p = p * r + 1.394_464_9e-3;
    let p = p * r + 8.333_497e-3;
    let p = p * r + 4.166_629_5e-2;
    let p = p * r + 0.166_666_66;
    let p = p * r + 0.5;
    let er = p * r * r + r + 1.0;
    // 2^k in two halves, each a normal f32 for k in [-150, 128], so the last
    // product rounds into the subnormals or overflows to infinity correctly.
    let k1 = k >> 1;
    let k2 = k - k1;
    let s1 = f32::from_bits(((k1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((k2 + 127) as u32) << 23);
    er * s1 * s2
}

/// Below this, `erf(x) = x·P(x²)`; above it, `erf(x) = 1 - e^Q(x)`.
const ERF_SPLIT: f32 = 0.921_875;
/// Above this, `erf(x)` rounds to 1 in f32.
const ERF_ONE: f32 = 3.92;
/// The centre of the outer range, where `Q` is expanded.
const ERF_MID: f32 = (ERF_SPLIT + ERF_ONE) / 2.0;

/// The error function.
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    // Inner range: x·P(x²).
    let z = x * x;
    let p = 8.370_119e-5;
    let p = p * z - 8.142_71e-4;
    let p = p * z + 5.201_033e-3;
    let p = p * z - 2.685_939_9e-2;
    let p = p * z + 0.112_836_96;
    let p = p * z - 0.376_126_35;
    // The leading coefficient came out as 2/√π, erf's slope at 0.
    let p = p * z + std::f32::consts::FRAC_2_SQRT_PI;
    let inner = x * p;
    // Outer range: 1 - erfc(a), with ln erfc(a) = Q(a - ERF_MID).
    // Not `min`: it would turn NaN into ERF_ONE.
    let t = if a > ERF_ONE { ERF_ONE } else { a } - ERF_MID;
    let q = -1.045_860_1e-8;
    let q = q * t + 1.637_847_3e-6;
    let q = q * t - 1.426_237_85e-5;
    let q = q * t + 8.494_426e-5;
    let q = q * t - 4.587_931_3e-4;
    let q = q * t + 2.338_865_5e-3;
    let q = q * t - 1.157_018_6e-2;
    let q = q * t - 0.941_234_9;
    let q = q * t - 5.203_635_7;
    let q = q * t - 7.389_513_5;
    let outer = (1.0 - exp(q)).copysign(x);
    if a < ERF_SPLIT { inner } else { outer }
}

/// Below this, `tanh(x) = x + x³·P(x²)`; above it, `1 - 2/(e^{2x} + 1)`.
const TANH_SPLIT: f32 = 0.625;

/// The hyperbolic tangent.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let p = 2.142_957_6e-3;
    let p = p * z - 8.177_394e-3;
    let p = p * z + 2.170_07e-2;
    let p = p * z - 5.394_676_3e-2;
    let p = p * z + 0.133_332_06;
    let p = p * z - 0.333_333_3;
    let inner = x + x * z * p;
    // e^{2a} overflows to infinity for large a, which gives exactly 1.
    let outer = (1.0 - 2.0 / (exp(2.0 * a) + 1.0)).copysign(x);
    if a < TANH_SPLIT { inner } else { outer }
}

/// The logistic function `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// Lanes of the reductions below: independent accumulators that LLVM keeps in
/// vector registers (a single accumulator would serialize the loop, since
/// float addition is not associative).
const LANES: usize = 16;

/// The largest element (NaN elements are skipped; -∞ for an empty slice).
#[inline(always)]
pub fn max(xs: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    tail.iter().chain(&acc).fold(f32::NEG_INFINITY, |m, &v| if v > m { v } else { m })
}

/// The sum of `f(x)` over `xs`, accumulated in f64 lanes.
#[inline(always)]
pub fn sum_f64(xs: &[f32], f: impl Fn(f32) -> f64) -> f64 {
    let mut acc = [0f64; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    tail.iter().map(|&v| f(v)).sum::<f64>() + acc.iter().sum::<f64>()
}

/// The sum of `f(x)` over `xs`, accumulated in f32 lanes.
#[inline(always)]
pub fn sum_f32(xs: &[f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = xs.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += f(v);
        }
    }
    tail.iter().map(|&v| f(v)).sum::<f32>() + acc.iter().sum::<f32>()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Largest relative error of `f` against `reference` on `n` points of [lo, hi].
    fn worst(f: fn(f32) -> f32, reference: fn(f64) -> f64, lo: f32, hi: f32, n: usize) -> f64 {
        (0..=n)
            .map(|i| lo + (hi - lo) * i as f32 / n as f32)
            .map(|x| {
                let want = reference(x as f64);
                let got = f(x) as f64;
                if want == 0.0 { got.abs() } else { ((got - want) / want).abs() }
            })
            .fold(0.0, f64::max)
    }

    #[test]
    fn exp_is_within_a_few_ulp_over_the_normal_range() {
        assert!(worst(exp, f64::exp, -87.0, 88.0, 400_000) < 3e-7);
        assert!(worst(exp, f64::exp, -1.0, 1.0, 100_000) < 3e-7);
    }

    #[test]
    fn exp_handles_the_edges() {
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp(89.0), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        // Subnormal results keep their magnitude.
        let sub = exp(-95.0) as f64;
        assert!((sub - (-95f64).exp()).abs() / (-95f64).exp() < 1e-3, "{sub}");
        assert!(exp(88.7) < f32::INFINITY);
    }

    #[test]
    fn erf_is_within_a_few_ulp() {
        assert!(worst(erf, libm::erf, -5.0, 5.0, 400_000) < 3e-7);
        assert!(worst(erf, libm::erf, -1e-3, 1e-3, 10_000) < 3e-7);
        assert_eq!(erf(0.0), 0.0);
        assert_eq!(erf(10.0), 1.0);
        assert_eq!(erf(-10.0), -1.0);
        assert!(erf(f32::NAN).is_nan());
    }

    #[test]
    fn tanh_is_within_a_few_ulp() {
        assert!(worst(tanh, f64::tanh, -12.0, 12.0, 400_000) < 3e-7);
        assert!(worst(tanh, f64::tanh, -1e-3, 1e-3, 10_000) < 3e-7);
        assert_eq!(tanh(100.0), 1.0);
        assert_eq!(tanh(f32::NEG_INFINITY), -1.0);
        assert!(tanh(f32::NAN).is_nan());
    }

    #[test]
    fn sigmoid_is_within_a_few_ulp() {
        let reference = |x: f64| 1.0 / (1.0 + (-x).exp());
        assert!(worst(sigmoid, reference, -80.0, 30.0, 400_000) < 3e-7);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid(f32::INFINITY), 1.0);
    }

    #[test]
    fn reductions_match_plain_loops() {
        let xs: Vec<f32> = (0..1003).map(|i| ((i * 37) % 101) as f32 - 50.0).collect();
        assert_eq!(max(&xs), 50.0);
        assert_eq!(max(&[]), f32::NEG_INFINITY);
        assert_eq!(max(&[f32::NAN, 1.0]), 1.0);
        let want: f64 = xs.iter().map(|&v| v as f64 * 2.0).sum();
        assert_eq!(sum_f64(&xs, |v| v as f64 * 2.0), want);
        assert_eq!(sum_f32(&xs[..20], |v| v), xs[..20].iter().sum::<f32>());
    }
}
