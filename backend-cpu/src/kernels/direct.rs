//! Direct 2-D convolution for few input channels: the first Conv of an image
//! network (3 → 16 channels, 3 × 3, stride 2, over 224 × 224).
//!
//! im2col + GEMM is a poor fit there: the column matrix (27 rows of every
//! output position, 1.35 MB for 112 × 112 outputs) is written one gathered
//! element at a time and read back once, and the GEMM's depth is only 27.
//! Here each input channel is copied once into the zero-padded, phase-split
//! layout of the depthwise Conv ([`Plane`]), and every tap of every input
//! channel is one vector load shared by [`BLOCK`] output channels' sums.

use onyx_core::ep::EpError;
use onyx_core::ops::conv::Geometry;
use onyx_core::ops::elementwise::UnaryKind;
use pulp::{Simd, WithSimd};
use rayon::prelude::*;

use crate::par::Loop;

use super::KernelIo;
use super::depthwise::{LANES, Plane, store};
use super::elementwise::activate;

/// Output channels summed together: one input load feeds this many
/// multiply-adds, and their sums stay in registers (with AVX2's sixteen
/// vector registers as well).
const BLOCK: usize = 8;

/// Input channels up to which [`supports`] takes the direct path: the taps of
/// all of them are unrolled into every output vector's sums.
const MAX_CHANNELS: usize = 4;

/// Output rows per task.
const ROWS: usize = 8;

/// Whether [`direct2d`] computes this convolution: one group, 2-D, a
/// non-empty input of 1 to [`MAX_CHANNELS`] channels, a kernel 3, 5 or 7
/// wide at column stride 1 or 2 without column dilation, and rows of at
/// least a vector's outputs.
pub(super) fn supports(group: usize, xs: &[usize], geo: &Geometry) -> bool {
    xs.len() == 4
        && group == 1
        && (1..=MAX_CHANNELS).contains(&xs[1])
        && xs[2] * xs[3] > 0
        && matches!(geo.kernel[1], 3 | 5 | 7)
        && matches!(geo.strides[1], 1 | 2)
        && geo.dilations[1] == 1
        && geo.output[1] >= LANES
}

/// Output 0 = `activation(conv(x, w) + bias)` for inputs `x` `[n, c, h, w]`,
/// `w` `[m, c, kh, kw]` and the optional bias (checked by [`supports`]).
pub(super) fn direct2d(
    io: &KernelIo,
    xs: &[usize],
    m: usize,
    geo: &Geometry,
    activation: Option<UnaryKind>,
) -> Result<(), EpError> {
    let (x, wt, out) = (io.input::<f32>(0)?, io.input::<f32>(1)?, io.output::<f32>(0)?);
    let bias = io.optional_input::<f32>(2)?;
    let (n, c, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let p = Plane::new(h, w, geo);
    let (oh, ow) = (p.oh, p.ow);
    let taps = c * p.kh * p.kw;
    if n * m * oh * ow == 0 {
        return Ok(());
    }
    // Weights by block of output channels, then tap, then channel: the
    // BLOCK weights of one tap are adjacent (zeros past the last channel).
    let blocks = m.div_ceil(BLOCK);
    let mut wblk = vec![0f32; blocks * taps * BLOCK];
    for (om, filter) in wt[..m * taps].chunks_exact(taps).enumerate() {
        for (t, &v) in filter.iter().enumerate() {
            wblk[((om / BLOCK) * taps + t) * BLOCK + om % BLOCK] = v;
        }
    }
    let mut padded = vec![0f32; c * p.size()];
    for (img, out) in x.chunks_exact(c * h * w).zip(out.chunks_exact_mut(m * oh * ow)).take(n) {
        for (src, buf) in img.chunks_exact(h * w).zip(padded.chunks_exact_mut(p.size())) {
            p.fill(src, buf);
        }
        // One task per block of output channels and band of ROWS output
        // rows: BLOCK row bands, one per output channel.
        let mut tasks = Vec::new();
        for (b, chans) in out.chunks_mut(BLOCK * oh * ow).enumerate() {
            let mut bands: Vec<_> =
                chans.chunks_mut(oh * ow).map(|pl| pl.chunks_mut(ROWS * ow)).collect();
            for band in 0..oh.div_ceil(ROWS) {
                let segs: Vec<&mut [f32]> = bands.iter_mut().filter_map(Iterator::next).collect();
                tasks.push((b, band * ROWS, segs));
            }
        }
        tasks.into_par_iter().each(|(b, oy0, mut segs)| {
            let mut start = [0f32; BLOCK];
            if let Some(bias) = bias {
                let chans = &bias[b * BLOCK..m.min((b + 1) * BLOCK)];
                start[..chans.len()].copy_from_slice(chans);
            }
            let w = &wblk[b * taps * BLOCK..][..taps * BLOCK];
            let task = Band { p: &p, c, padded: &padded, w, start, oy0, segs: &mut segs };
            match (p.kw, p.sw) {
                (3, 1) => pulp::Arch::new().dispatch(Direct::<3, 1>(task)),
                (3, 2) => pulp::Arch::new().dispatch(Direct::<3, 2>(task)),
                (5, 1) => pulp::Arch::new().dispatch(Direct::<5, 1>(task)),
                (5, 2) => pulp::Arch::new().dispatch(Direct::<5, 2>(task)),
                (7, 1) => pulp::Arch::new().dispatch(Direct::<7, 1>(task)),
                (7, 2) => pulp::Arch::new().dispatch(Direct::<7, 2>(task)),
                _ => unreachable!("checked by supports()"),
            }
            if let Some(kind) = activation {
                for seg in segs {
                    activate(kind, seg);
                }
            }
        });
    }
    Ok(())
}

/// One task of [`direct2d`]: rows `oy0..` (as many as `segs` hold) of up to
/// [`BLOCK`] output channels.
struct Band<'a, 'b> {
    p: &'a Plane,
    /// Input channels, each a padded plane of `padded`.
    c: usize,
    padded: &'a [f32],
    /// `[tap][BLOCK]` weights of this block of output channels.
    w: &'a [f32],
    start: [f32; BLOCK],
    oy0: usize,
    /// One band of rows per output channel of the block.
    segs: &'a mut [&'b mut [f32]],
}

/// [`Band`] for a kernel `KW` wide at column stride `S`: tap `kx` reads
/// phase `kx % S` at offset `kx / S` of a padded plane.
struct Direct<'a, 'b, const KW: usize, const S: usize>(Band<'a, 'b>);

impl<const KW: usize, const S: usize> WithSimd for Direct<'_, '_, KW, S> {
    type Output = ();

    #[inline(always)]
    fn with_simd<V: Simd>(self, simd: V) {
        let Band { p, c, padded, w, start, oy0, segs } = self.0;
        let n = V::F32_LANES;
        assert!(n <= LANES, "the padded rows hold runs of {LANES} floats");
        let size = p.size();
        let rows = segs.first().map_or(0, |s| s.len() / p.ow);
        for r in 0..rows {
            let oy = oy0 + r;
            let last_row = oy * p.sh + (p.kh - 1) * p.dh;
            for ox in (0..p.ow).step_by(n) {
                // The furthest float any load below reads, checked once.
                let end =
                    (c - 1) * size + ((S - 1) * p.rows + last_row) * p.len + ox + (KW - 1) / S + n;
                assert!(last_row < p.rows && end <= padded.len());
                let base = padded.as_ptr();
                let mut acc: [V::f32s; BLOCK] = std::array::from_fn(|j| simd.splat_f32s(start[j]));
                for ch in 0..c {
                    for ky in 0..p.kh {
                        let py = oy * p.sh + ky * p.dh;
                        let t0 = (ch * p.kh + ky) * KW;
                        for kx in 0..KW {
                            let at = ch * size + ((kx % S) * p.rows + py) * p.len + ox + kx / S;
                            // SAFETY: `at + n <= end <= padded.len()` (asserted
                            // above: `at` grows with `ch`, `kx % S`, `py` and
                            // `kx / S`, each at most its value in `end`), and
                            // `V::f32s` is `n` plain f32s, read unaligned.
                            let v = unsafe { base.add(at).cast::<V::f32s>().read_unaligned() };
                            let wt: &[f32; BLOCK] =
                                w[(t0 + kx) * BLOCK..][..BLOCK].try_into().expect("a block");
                            for (a, &wv) in acc.iter_mut().zip(wt) {
                                *a = simd.mul_add_e_f32s(v, simd.splat_f32s(wv), *a);
                            }
                        }
                    }
                }
                let cols = (p.ow - ox).min(n);
                for (seg, a) in segs.iter_mut().zip(acc) {
                    store(simd, &mut seg[r * p.ow + ox..][..cols], a);
                }
            }
        }
    }
}
