//! Matrix products with few columns: `out[m × n] = w[m × k] · x[k × n]` for
//! small `n`, as in a Conv over a few output positions (the 1-D convs of
//! streaming audio models run on 1 to 8 frames).
//!
//! GEMM libraries tile for large products: with a handful of columns, `gemm`
//! either packs the whole weight matrix (a copy as large as the product's
//! reads) or runs its narrowest micro-kernel with most vector lanes idle.
//! Here each output is a dot product along `k`, vectorized along `k`: the
//! weights are read once, in place, and the columns of `x` (given as rows, a
//! few KiB) stay in L1.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use super::PAR_TASK;
use crate::par::Loop;

/// Columns above which [`narrow_product`] is not used (callers check).
pub(crate) const NARROW_COLS: usize = 8;

/// Columns computed together: their accumulators stay in registers.
const GROUP: usize = 4;

/// `out[i * n + j] = Σ_p w[i * k + p] · xt[j * k + p]` for `i < m`, `j < n`:
/// `xt` holds the right-hand matrix's columns as rows (a Conv's patches).
pub(crate) fn narrow_product(
    (m, n, k): (usize, usize, usize),
    w: &[f32],
    xt: &[f32],
    out: &mut [f32],
) {
    let (w, xt, out) = (&w[..m * k], &xt[..n * k], &mut out[..m * n]);
    if k == 0 || n == 0 {
        // No terms (zeros), or no outputs (an empty signal's Conv).
        out.fill(0.0);
        return;
    }
    // Rows in parallel, each task at least PAR_TASK multiply-adds: a 1 × 1
    // Conv over one position (512 → 1280 channels) is a 2.6 MB matrix-vector
    // product, which a second core halves.
    let rows = PAR_TASK.div_ceil(n * k).max(1);
    w.par_chunks(rows * k).zip(out.par_chunks_mut(rows * n)).each(|(w, out)| {
        let arch = pulp::Arch::new();
        for j0 in (0..n).step_by(GROUP) {
            let cols = GROUP.min(n - j0);
            let xs = &xt[j0 * k..(j0 + cols) * k];
            // C columns, U independent sums per column: 8 chains hide the FMA latency.
            match cols {
                1 => arch.dispatch(Dots::<1, 8> { w, xs, k, out: &mut *out, n, j0 }),
                2 => arch.dispatch(Dots::<2, 4> { w, xs, k, out: &mut *out, n, j0 }),
                3 => arch.dispatch(Dots::<3, 3> { w, xs, k, out: &mut *out, n, j0 }),
                _ => arch.dispatch(Dots::<4, 2> { w, xs, k, out: &mut *out, n, j0 }),
            }
        }
    });
}

/// Columns `j0..j0 + C` of the product, every row, in the widest vectors
/// `pulp` found on this CPU (FMA where there is one), with `U` partial sums
/// per column so that consecutive FMAs do not wait on each other.
struct Dots<'a, const C: usize, const U: usize> {
    w: &'a [f32],
    /// `C` rows of `k`: the columns of x.
    xs: &'a [f32],
    k: usize,
    out: &'a mut [f32],
    n: usize,
    j0: usize,
}

impl<const C: usize, const U: usize> WithSimd for Dots<'_, C, U> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Dots { w, xs, k, out, n, j0 } = self;
        let cols: [(&[S::f32s], &[f32]); C] =
            std::array::from_fn(|c| S::as_simd_f32s(&xs[c * k..(c + 1) * k]));
        for (row, dst) in w.chunks_exact(k).zip(out.chunks_exact_mut(n)) {
            let (wv, wt) = S::as_simd_f32s(row);
            let mut acc = [[simd.splat_f32s(0.0); C]; U];
            let body = wv.len() / U * U;
            for i in (0..body).step_by(U) {
                for u in 0..U {
                    for c in 0..C {
                        acc[u][c] = simd.mul_add_e_f32s(wv[i + u], cols[c].0[i + u], acc[u][c]);
                    }
                }
            }
            for (i, &a) in wv.iter().enumerate().skip(body) {
                for c in 0..C {
                    acc[0][c] = simd.mul_add_e_f32s(a, cols[c].0[i], acc[0][c]);
                }
            }
            for c in 0..C {
                let mut sum = acc[0][c];
                for a in &acc[1..] {
                    sum = simd.add_f32s(sum, a[c]);
                }
                let tail: f32 = wt.iter().zip(cols[c].1).map(|(a, b)| a * b).sum();
                dst[j0 + c] = simd.reduce_sum_f32s(sum) + tail;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_products_match_the_plain_triple_loop() {
        let mut seed = 7u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for (m, n, k) in
            [(3, 1, 5), (258, 4, 256), (64, 2, 384), (17, 7, 33), (5, 8, 16), (2, 3, 0), (4, 0, 9)]
        {
            let w: Vec<f32> = (0..m * k).map(|_| rnd()).collect();
            let x: Vec<f32> = (0..k * n).map(|_| rnd()).collect();
            let mut xt = vec![0f32; n * k];
            for p in 0..k {
                for j in 0..n {
                    xt[j * k + p] = x[p * n + j];
                }
            }
            let mut out = vec![f32::NAN; m * n];
            narrow_product((m, n, k), &w, &xt, &mut out);
            for i in 0..m {
                for j in 0..n {
                    let want: f64 = (0..k).map(|p| w[i * k + p] as f64 * x[p * n + j] as f64).sum();
                    let got = out[i * n + j] as f64;
                    assert!(
                        (got - want).abs() < 1e-5,
                        "{m}x{n}x{k} at ({i}, {j}): {got} vs {want}"
                    );
                }
            }
        }
    }
}
