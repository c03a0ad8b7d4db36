//! Depthwise 2-D convolution (one input channel per group, any channel
//! multiplier) in f32, computed directly: im2col + GEMM would run one tiny
//! GEMM per channel. Two layouts, by the width of the output rows:
//!
//! - wide rows: one plane per task, vectorized along the row (see
//!   [`depthwise2d`]);
//! - narrow rows (the last, 7 × 7 feature maps, where a row would fill
//!   under half a vector): sixteen channels per task, vectorized across the
//!   channels of a channel-interleaved copy (see [`blocked`]).

use onyx_core::ep::EpError;
use onyx_core::ops::conv::Geometry;
use onyx_core::ops::elementwise::UnaryKind;
use rayon::prelude::*;

use crate::par::Loop;

use super::KernelIo;
use super::elementwise::activate;
use super::fastmath::{Wide, vectorized_wide};

/// A depthwise 2-D convolution (one input channel per group, any channel
/// multiplier) in f32, computed directly: im2col + GEMM would run one tiny
/// GEMM per channel. One output plane per task: the input plane is copied
/// once into a zero-padded buffer split into column phases (columns `q, q+s,
/// …` for stride `s`), so every tap reads a contiguous run, and each run of
/// [`LANES`] outputs is accumulated over all taps in registers.
pub(super) fn depthwise2d(
    io: &KernelIo,
    xs: &[usize],
    mg: usize,
    geo: &Geometry,
    activation: Option<UnaryKind>,
) -> Result<(), EpError> {
    let (c, h, w) = (xs[1], xs[2], xs[3]);
    let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
    let (oh, ow) = (geo.output[0], geo.output[1]);
    let (sh, sw) = (geo.strides[0], geo.strides[1].max(1));
    let (dh, dw) = (geo.dilations[0], geo.dilations[1]);
    let m = c * mg;
    let x = io.input::<f32>(0)?;
    let wt = io.input::<f32>(1)?;
    let bias = match io.input_view(2) {
        Some(_) => Some(io.input::<f32>(2)?),
        None => None,
    };
    // Per tap kx: its phase and its offset within a phase row.
    let taps: Vec<(usize, usize)> = (0..kw).map(|kx| ((kx * dw) % sw, (kx * dw) / sw)).collect();
    let reach = taps.iter().map(|t| t.1).max().unwrap_or(0);
    let p = Plane {
        h,
        w,
        kh,
        kw,
        oh,
        ow,
        sh,
        sw,
        dh,
        pt: geo.pads_begin[0],
        pl: geo.pads_begin[1],
        rows: if oh == 0 { 0 } else { (oh - 1) * sh + (kh - 1) * dh + 1 },
        // Whole runs of LANES from every output column and tap stay inside.
        len: ow + reach + LANES,
        taps,
    };
    let out = io.output::<f32>(0)?;
    if mg == 1 && ow < NARROW {
        let k = Kernel { kh, kw, sh, sw, dh, dw };
        blocked(x, wt, bias, out, (c, h, w), geo, k, activation);
        return Ok(());
    }
    out.par_chunks_mut((oh * ow).max(1)).enumerate().each_init(Vec::new, |buf, (plane, dst)| {
        let (b, om) = (plane / m, plane % m);
        let src = &x[(b * c + om / mg) * h * w..][..h * w];
        let k = &wt[om * kh * kw..][..kh * kw];
        let start = bias.map_or(0.0, |bs| bs[om]);
        vectorized_wide(PlaneTask { p: &p, src, k, start, buf, dst: &mut *dst });
        if let Some(kind) = activation {
            activate(kind, dst);
        }
    });
    Ok(())
}

/// Outputs a depthwise convolution accumulates together, in registers.
const LANES: usize = 16;

/// The geometry of one depthwise plane and of its padded, phase-split copy.
struct Plane {
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    /// Padding before the first row and column.
    pt: usize,
    pl: usize,
    /// Padded rows read, and the length of each phase row.
    rows: usize,
    len: usize,
    taps: Vec<(usize, usize)>,
}

/// One output plane of [`depthwise2d`], compiled for the widest vector ISA.
struct PlaneTask<'a> {
    p: &'a Plane,
    src: &'a [f32],
    k: &'a [f32],
    start: f32,
    buf: &'a mut Vec<f32>,
    dst: &'a mut [f32],
}

impl Wide for PlaneTask<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let PlaneTask { p, src, k, start, buf, dst } = self;
        let (rows, len, sw) = (p.rows, p.len, p.sw);
        // Every plane of a call has the same geometry, so the padding cells are
        // the same: zeroed once per buffer, never written afterwards.
        if buf.len() != sw * rows * len {
            buf.clear();
            buf.resize(sw * rows * len, 0.0);
        }
        for py in 0..rows {
            let Some(iy) = py.checked_sub(p.pt).filter(|&iy| iy < p.h) else { continue };
            let srow = &src[iy * p.w..][..p.w];
            if sw == 1 {
                let row = &mut buf[py * len..][..len];
                let start = p.pl.min(len);
                let n = p.w.min(len - start);
                row[start..start + n].copy_from_slice(&srow[..n]);
                continue;
            }
            split_phases(p, py, srow, buf);
        }
        // Four vectors of independent sums hide the add latency: four runs
        // of one row where rows are wide, one run of four rows elsewhere.
        let runs = Runs { p, buf, k, start };
        let wide = p.ow / (4 * LANES) * (4 * LANES);
        for oy in 0..p.oh {
            for ox in (0..wide).step_by(4 * LANES) {
                runs.across(oy, ox, dst);
            }
        }
        let tall = p.oh / 4 * 4;
        for ox in (wide..p.ow).step_by(LANES) {
            for oy in (0..tall).step_by(4) {
                runs.four(oy, ox, dst);
            }
            for oy in tall..p.oh {
                runs.one::<LANES>(oy, ox, dst);
            }
        }
    }
}

/// Copies input row `srow` into the phase rows of padded row `py`: input
/// column `ix` is padded column `ix + pl`, which goes to phase `(ix + pl) % sw`
/// at `(ix + pl) / sw`. Whole groups of `sw` columns are dealt out together
/// (a vectorizable de-interleave); columns past the phase rows are never read.
#[inline(always)]
fn split_phases(p: &Plane, py: usize, srow: &[f32], buf: &mut [f32]) {
    let (rows, len, sw, pl) = (p.rows, p.len, p.sw, p.pl);
    let at = |ix: usize| {
        let pc = ix + pl;
        let j = pc / sw;
        (j < len).then(|| ((pc % sw) * rows + py) * len + j)
    };
    // The first input column that starts a group (phase 0).
    let first = ((sw - pl % sw) % sw).min(srow.len());
    for (ix, &v) in srow.iter().enumerate().take(first) {
        if let Some(i) = at(ix) {
            buf[i] = v;
        }
    }
    let j0 = (first + pl) / sw;
    let groups = ((srow.len() - first) / sw).min(len.saturating_sub(j0));
    let body = &srow[first..first + groups * sw];
    if sw == 2 {
        let (even, odd) = buf.split_at_mut(rows * len);
        let even = &mut even[py * len + j0..][..groups];
        let odd = &mut odd[py * len + j0..][..groups];
        for ((e, o), pair) in even.iter_mut().zip(odd.iter_mut()).zip(body.chunks_exact(2)) {
            *e = pair[0];
            *o = pair[1];
        }
    } else {
        for q in 0..sw {
            let row = &mut buf[(q * rows + py) * len + j0..][..groups];
            for (d, g) in row.iter_mut().zip(body.chunks_exact(sw)) {
                *d = g[q];
            }
        }
    }
    for (ix, &v) in srow.iter().enumerate().skip(first + groups * sw) {
        if let Some(i) = at(ix) {
            buf[i] = v;
        }
    }
}

/// What every run of one plane reads: geometry, padded input, taps, bias.
struct Runs<'a> {
    p: &'a Plane,
    buf: &'a [f32],
    k: &'a [f32],
    start: f32,
}

impl Runs<'_> {
    /// Outputs `ox..ox + N` (those that exist) of row `oy`, summed over all
    /// taps in registers.
    #[inline(always)]
    fn one<const N: usize>(&self, oy: usize, ox: usize, dst: &mut [f32]) {
        let p = self.p;
        let mut acc = [self.start; N];
        for ky in 0..p.kh {
            let py = oy * p.sh + ky * p.dh;
            for (kx, &(q, shift)) in p.taps.iter().enumerate() {
                let kv = self.k[ky * p.kw + kx];
                let s = &self.buf[(q * p.rows + py) * p.len + ox + shift..][..N];
                for (a, &v) in acc.iter_mut().zip(s) {
                    *a += v * kv;
                }
            }
        }
        let n = (p.ow - ox).min(N);
        dst[oy * p.ow + ox..][..n].copy_from_slice(&acc[..n]);
    }

    /// `4 × LANES` outputs of row `oy` from `ox` (all inside the row).
    #[inline(always)]
    fn across(&self, oy: usize, ox: usize, dst: &mut [f32]) {
        let accs = self.quad(oy, ox, LANES);
        let row = &mut dst[oy * self.p.ow + ox..][..4 * LANES];
        for (chunk, acc) in row.chunks_exact_mut(LANES).zip(&accs) {
            chunk.copy_from_slice(acc);
        }
    }

    /// [`LANES`] outputs (those that exist) for rows `oy..oy + 4` together.
    #[inline(always)]
    fn four(&self, oy: usize, ox: usize, dst: &mut [f32]) {
        let p = self.p;
        let accs = self.quad(oy, ox, p.sh * p.len);
        let n = (p.ow - ox).min(LANES);
        for (r, acc) in accs.iter().enumerate() {
            dst[(oy + r) * p.ow + ox..][..n].copy_from_slice(&acc[..n]);
        }
    }

    /// Four runs of [`LANES`] outputs, the first at row `oy` and column `ox`
    /// and the others `step` floats apart in the padded buffer (the next
    /// [`LANES`] columns, or the next output rows), summed over all taps in
    /// four separate accumulators: independent sums hide the add latency, and
    /// one array of `4 × LANES` would live on the stack, each tap a load and a
    /// store of it.
    #[inline(always)]
    fn quad(&self, oy: usize, ox: usize, step: usize) -> [[f32; LANES]; 4] {
        let p = self.p;
        let start = self.start;
        let (mut a0, mut a1, mut a2, mut a3) =
            ([start; LANES], [start; LANES], [start; LANES], [start; LANES]);
        for ky in 0..p.kh {
            let py = oy * p.sh + ky * p.dh;
            for (kx, &(q, shift)) in p.taps.iter().enumerate() {
                let kv = self.k[ky * p.kw + kx];
                let at = (q * p.rows + py) * p.len + ox + shift;
                let run = |r: usize| &self.buf[at + r * step..][..LANES];
                for (a, &v) in a0.iter_mut().zip(run(0)) {
                    *a += v * kv;
                }
                for (a, &v) in a1.iter_mut().zip(run(1)) {
                    *a += v * kv;
                }
                for (a, &v) in a2.iter_mut().zip(run(2)) {
                    *a += v * kv;
                }
                for (a, &v) in a3.iter_mut().zip(run(3)) {
                    *a += v * kv;
                }
            }
        }
        [a0, a1, a2, a3]
    }
}

/// Output rows narrower than this go through [`blocked`]: measured on
/// PP-LCNet's depthwise convolutions (1 thread), the blocked path takes 0.6×
/// the plane path's time on 7-wide rows, but 1.1× on 14-wide and 2× on
/// 28-wide ones, where its channel interleaving costs more than the lanes
/// the plane path leaves idle.
const NARROW: usize = 8;

/// Channels [`blocked`] computes together (one vector of f32).
const BLOCK: usize = 16;

/// Kernel extent, strides and dilations (rows, columns).
#[derive(Clone, Copy)]
struct Kernel {
    kh: usize,
    kw: usize,
    sh: usize,
    sw: usize,
    dh: usize,
    dw: usize,
}

/// Depthwise convolution with one channel per group, [`BLOCK`] channels per
/// task: the block is copied into a zero-padded, channel-interleaved buffer
/// (`[row][column][channel]`), so every tap of every output position is one
/// [`BLOCK`]-wide multiply-add, whatever the stride, and no lane is spent on
/// the end of a short row. Taps are summed in the order of the plane path
/// (bias first, then row by row), so both give the same floats.
#[allow(clippy::too_many_arguments)]
fn blocked(
    x: &[f32],
    wt: &[f32],
    bias: Option<&[f32]>,
    out: &mut [f32],
    (c, h, w): (usize, usize, usize),
    geo: &Geometry,
    k: Kernel,
    activation: Option<UnaryKind>,
) {
    let (oh, ow) = (geo.output[0], geo.output[1]);
    let (pt, pl) = (geo.pads_begin[0], geo.pads_begin[1]);
    if oh == 0 || ow == 0 {
        return;
    }
    let hp = (oh - 1) * k.sh + (k.kh - 1) * k.dh + 1;
    let wp = (ow - 1) * k.sw + (k.kw - 1) * k.dw + 1;
    let (plane, oplane, taps) = (h * w, oh * ow, k.kh * k.kw);
    // One task per (image, block of channels): its output planes are contiguous.
    let tasks: Vec<(usize, usize, &mut [f32])> = out
        .chunks_mut(c * oplane)
        .enumerate()
        .flat_map(|(b, img)| {
            img.chunks_mut(BLOCK * oplane).enumerate().map(move |(blk, dst)| (b, blk, dst))
        })
        .collect();
    tasks.into_par_iter().each_init(
        || (Vec::new(), Vec::new(), Vec::new()),
        |(pad, wblk, acc), (b, blk, dst)| {
            let c0 = blk * BLOCK;
            let nc = (c - c0).min(BLOCK);
            if pad.len() != hp * wp * BLOCK {
                pad.clear();
                pad.resize(hp * wp * BLOCK, 0.0);
            }
            // Interior cells; the padding stays zero from the first fill.
            let (first, cols) = (pl.min(wp), w.min(wp.saturating_sub(pl)));
            for ch in 0..nc {
                let src = &x[(b * c + c0 + ch) * plane..][..plane];
                for py in 0..hp {
                    let Some(iy) = py.checked_sub(pt).filter(|&iy| iy < h) else { continue };
                    let cells = &mut pad[(py * wp + first) * BLOCK..][..cols * BLOCK];
                    for (cell, &v) in cells.chunks_exact_mut(BLOCK).zip(&src[iy * w..][..cols]) {
                        cell[ch] = v;
                    }
                }
            }
            wblk.clear();
            wblk.resize(taps * BLOCK, 0.0);
            for ch in 0..nc {
                for t in 0..taps {
                    wblk[t * BLOCK + ch] = wt[(c0 + ch) * taps + t];
                }
            }
            let mut start = [0.0f32; BLOCK];
            if let Some(bs) = bias {
                start[..nc].copy_from_slice(&bs[c0..c0 + nc]);
            }
            acc.clear();
            acc.resize(oplane * BLOCK, 0.0);
            vectorized_wide(BlockTask { pad, wblk, start, acc, wp, ow, oh, k });
            for ch in 0..nc {
                let plane_out = &mut dst[ch * oplane..][..oplane];
                for (o, cell) in plane_out.iter_mut().zip(acc.chunks_exact(BLOCK)) {
                    *o = cell[ch];
                }
                if let Some(kind) = activation {
                    activate(kind, plane_out);
                }
            }
        },
    );
}

/// The multiply-adds of one block of [`blocked`], compiled for the widest
/// vector ISA.
struct BlockTask<'a> {
    pad: &'a [f32],
    wblk: &'a [f32],
    start: [f32; BLOCK],
    acc: &'a mut [f32],
    wp: usize,
    ow: usize,
    oh: usize,
    k: Kernel,
}

impl Wide for BlockTask<'_> {
    type Output = ();

    #[inline(always)]
    fn run(self) {
        let BlockTask { pad, wblk, start, acc, wp, ow, oh, k } = self;
        // Four output positions at once: four independent sums per tap hide
        // the add latency, and each weight vector is loaded once for four.
        let quads = ow / 4 * 4;
        for oy in 0..oh {
            for ox in (0..quads).step_by(4) {
                let (mut a0, mut a1, mut a2, mut a3) = (start, start, start, start);
                let step = k.sw * BLOCK;
                for ky in 0..k.kh {
                    let base = ((oy * k.sh + ky * k.dh) * wp + ox * k.sw) * BLOCK;
                    for kx in 0..k.kw {
                        let at = base + kx * k.dw * BLOCK;
                        let wv = &wblk[(ky * k.kw + kx) * BLOCK..][..BLOCK];
                        let v = |q: usize| &pad[at + q * step..][..BLOCK];
                        for ((a, &v), &wv) in a0.iter_mut().zip(v(0)).zip(wv) {
                            *a += v * wv;
                        }
                        for ((a, &v), &wv) in a1.iter_mut().zip(v(1)).zip(wv) {
                            *a += v * wv;
                        }
                        for ((a, &v), &wv) in a2.iter_mut().zip(v(2)).zip(wv) {
                            *a += v * wv;
                        }
                        for ((a, &v), &wv) in a3.iter_mut().zip(v(3)).zip(wv) {
                            *a += v * wv;
                        }
                    }
                }
                let dst = &mut acc[(oy * ow + ox) * BLOCK..][..4 * BLOCK];
                for (d, a) in dst.chunks_exact_mut(BLOCK).zip([a0, a1, a2, a3]) {
                    d.copy_from_slice(&a);
                }
            }
            for ox in quads..ow {
                let mut a = start;
                for ky in 0..k.kh {
                    let base = ((oy * k.sh + ky * k.dh) * wp + ox * k.sw) * BLOCK;
                    for kx in 0..k.kw {
                        let v = &pad[base + kx * k.dw * BLOCK..][..BLOCK];
                        let wv = &wblk[(ky * k.kw + kx) * BLOCK..][..BLOCK];
                        for ((a, &v), &wv) in a.iter_mut().zip(v).zip(wv) {
                            *a += v * wv;
                        }
                    }
                }
                acc[(oy * ow + ox) * BLOCK..][..BLOCK].copy_from_slice(&a);
            }
        }
    }
}
