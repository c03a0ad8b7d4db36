//! Depthwise 2-D convolution (one input channel per group, any channel
//! multiplier) in f32, computed directly: im2col + GEMM would run one tiny
//! GEMM per channel. One plane per task, vectorized along the rows (see
//! [`depthwise2d`]); the common kernel widths and strides have their taps
//! unrolled at compile time ([`Fixed`]).
//!
//! Narrow rows (7 × 7 maps) leave most of a vector's lanes idle. Where the
//! CPU has AVX-512, output rows under 32 wide go to
//! [`super::depthwise_blocked`] instead, sixteen channels per vector, with
//! its layout changes done by in-register transposes (a first version that
//! interleaved channels with scalar copies measured slower than this file's
//! rows: 109 µs against 81 µs for PP-LCNet's 5 × 5 depthwise Conv over 512
//! channels of 7 × 7; the blocked path takes 30 µs).

use onyx_core::ep::EpError;
use onyx_core::ops::conv::Geometry;
use onyx_core::ops::elementwise::UnaryKind;
use pulp::{Simd, WithSimd};
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
    // Narrow or strided planes in blocks of sixteen channels, where the CPU
    // has AVX-512.
    #[cfg(target_arch = "x86_64")]
    if let Some(done) = super::depthwise_blocked::run(io, xs, mg, geo, activation) {
        return done;
    }
    let (c, h, w) = (xs[1], xs[2], xs[3]);
    let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
    let (oh, ow) = (geo.output[0], geo.output[1]);
    let m = c * mg;
    let x = io.input::<f32>(0)?;
    let wt = io.input::<f32>(1)?;
    let bias = io.optional_input::<f32>(2)?;
    let p = Plane::new(h, w, geo);
    let out = io.output::<f32>(0)?;
    out.par_chunks_mut((oh * ow).max(1)).enumerate().each_init(Vec::new, |buf, (plane, dst)| {
        let (b, om) = (plane / m, plane % m);
        // The plane and the rest of the input: the fill reads whole blocks
        // past a row's end, which may reach into the next plane.
        let src = &x[(b * c + om / mg) * h * w..];
        let k = &wt[om * kh * kw..][..kh * kw];
        let start = bias.map_or(0.0, |bs| bs[om]);
        vectorized_wide(PlaneTask { p: &p, src, k, start, buf, dst: &mut *dst });
        if let Some(kind) = activation {
            activate(kind, dst);
        }
    });
    Ok(())
}

/// The most outputs a run of one vector covers (16 f32 in AVX-512): the
/// padded rows hold that many floats past every output column.
pub(super) const LANES: usize = 16;

/// The geometry of one input plane of a 2-D convolution, and of its
/// zero-padded, phase-split copy (see [`depthwise2d`]).
pub(super) struct Plane {
    pub(super) h: usize,
    pub(super) w: usize,
    pub(super) kh: usize,
    pub(super) kw: usize,
    pub(super) oh: usize,
    pub(super) ow: usize,
    pub(super) sh: usize,
    pub(super) sw: usize,
    pub(super) dh: usize,
    /// Padding before the first row and column.
    pub(super) pt: usize,
    pub(super) pl: usize,
    /// Padded rows read, and the length of each phase row.
    pub(super) rows: usize,
    pub(super) len: usize,
    pub(super) taps: Vec<(usize, usize)>,
}

impl Plane {
    /// The plane of an `h × w` input under `geo` (2-D).
    pub(super) fn new(h: usize, w: usize, geo: &Geometry) -> Plane {
        let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
        let (oh, ow) = (geo.output[0], geo.output[1]);
        let (sh, sw) = (geo.strides[0], geo.strides[1].max(1));
        let (dh, dw) = (geo.dilations[0], geo.dilations[1]);
        // Per tap kx: its phase and its offset within a phase row.
        let taps: Vec<(usize, usize)> =
            (0..kw).map(|kx| ((kx * dw) % sw, (kx * dw) / sw)).collect();
        let reach = taps.iter().map(|t| t.1).max().unwrap_or(0);
        Plane {
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
        }
    }

    /// Floats of the padded, phase-split copy.
    pub(super) fn size(&self) -> usize {
        self.sw * self.rows * self.len
    }

    /// Whether tap `kx` reads phase `kx % sw` at offset `kx / sw` (no column
    /// dilation), as [`Fixed`] and the direct Conv assume.
    pub(super) fn undilated(&self) -> bool {
        self.taps.iter().enumerate().all(|(kx, &t)| t == (kx % self.sw, kx / self.sw))
    }

    /// Copies input plane `src` into the interior of `buf` (of [`Plane::size`]
    /// floats, whose padding cells are zero and stay so).
    pub(super) fn fill(&self, src: &[f32], buf: &mut [f32]) {
        pulp::Arch::new().dispatch(Fill { p: self, src, buf });
    }
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
        let sw = p.sw;
        // Every plane of a call has the same geometry, so the padding cells are
        // the same: zeroed once per buffer, never written afterwards.
        if buf.len() != p.size() {
            buf.clear();
            buf.resize(p.size(), 0.0);
        }
        p.fill(src, buf);
        // Common kernels (3, 5 or 7 wide, column stride 1 or 2, no column
        // dilation) have their taps unrolled at compile time; others take the
        // general loop.
        match (p.undilated(), p.kw, sw) {
            (true, 3, 1) => Fixed::<3, 1> { p, buf, k, start }.plane(dst),
            (true, 3, 2) => Fixed::<3, 2> { p, buf, k, start }.plane(dst),
            (true, 5, 1) => Fixed::<5, 1> { p, buf, k, start }.plane(dst),
            (true, 5, 2) => Fixed::<5, 2> { p, buf, k, start }.plane(dst),
            (true, 7, 1) => Fixed::<7, 1> { p, buf, k, start }.plane(dst),
            (true, 7, 2) => Fixed::<7, 2> { p, buf, k, start }.plane(dst),
            _ => Runs { p, buf, k, start }.plane(dst),
        }
    }
}

/// Copies the input plane into the interior of [`PlaneTask`]'s padded,
/// phase-split buffer, in the widest vectors of this CPU.
struct Fill<'a> {
    p: &'a Plane,
    src: &'a [f32],
    buf: &'a mut [f32],
}

impl WithSimd for Fill<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<V: Simd>(self, _: V) {
        let Fill { p, src, buf } = self;
        let len = p.len;
        for py in 0..p.rows {
            let Some(iy) = py.checked_sub(p.pt).filter(|&iy| iy < p.h) else { continue };
            // The row, and the rest of the plane after it (read past the row
            // in whole blocks, see `copy_masked`).
            let rest = &src[iy * p.w..];
            match p.sw {
                1 => {
                    let row = &mut buf[py * len..][..len];
                    let start = p.pl.min(len);
                    let n = p.w.min(len - start);
                    copy_masked(&mut row[start..], rest, n);
                }
                // A literal stride: its divisions below become shifts.
                2 => split_phases(p, 2, py, rest, buf),
                sw => split_phases(p, sw, py, rest, buf),
            }
        }
    }
}

/// Copies the first `n` floats of `src` to `dst`, in blocks of [`BLOCK`]
/// whose lanes past `n` are written as zeros, where both slices hold whole
/// blocks (the padded rows keep [`LANES`] zero floats past their last input
/// column, which stay zero); else with `copy_from_slice`. The rows of small
/// planes are a few dozen floats, where a `memcpy` call, or one scalar move
/// per float, costs more than the convolution's arithmetic.
#[inline(always)]
fn copy_masked(dst: &mut [f32], src: &[f32], n: usize) {
    let whole = n.div_ceil(BLOCK) * BLOCK;
    if dst.len() < whole || src.len() < whole {
        dst[..n].copy_from_slice(&src[..n]);
        return;
    }
    for (i, (d, s)) in dst[..whole].chunks_exact_mut(BLOCK).zip(src.chunks_exact(BLOCK)).enumerate()
    {
        let s: &[f32; BLOCK] = s.try_into().expect("a block");
        d.copy_from_slice(&keep(s, n - i * BLOCK));
    }
}

/// Floats per block of [`copy_masked`] and per de-interleave of
/// [`split_phases`]: one AVX-512 vector.
const BLOCK: usize = 16;

/// Per count `k` of leading lanes kept, the bit mask of a block: all ones
/// for the first `k` lanes, zeros after.
static KEEP: [[u32; BLOCK]; BLOCK + 1] = {
    let mut t = [[0u32; BLOCK]; BLOCK + 1];
    let mut k = 0;
    while k <= BLOCK {
        let mut l = 0;
        while l < k {
            t[k][l] = u32::MAX;
            l += 1;
        }
        k += 1;
    }
    t
};

/// `v` with its lanes from `k` on set to zero: one vector `and` with a
/// mask from [`KEEP`] (a select on `l < k` compiles to lane shuffles).
#[inline(always)]
fn keep(v: &[f32; BLOCK], k: usize) -> [f32; BLOCK] {
    let m = &KEEP[k.min(BLOCK)];
    std::array::from_fn(|l| f32::from_bits(v[l].to_bits() & m[l]))
}

/// Copies input row `rest[..w]` into the phase rows of padded row `py`: input
/// column `ix` is padded column `ix + pl`, which goes to phase `(ix + pl) % sw`
/// at `(ix + pl) / sw`. Whole groups of `sw` columns are dealt out together
/// (a vector de-interleave for stride 2, which may read past the row into
/// the rest of the plane); columns past the phase rows are never read.
#[inline(always)]
fn split_phases(p: &Plane, sw: usize, py: usize, rest: &[f32], buf: &mut [f32]) {
    let srow = &rest[..p.w];
    let (rows, len, pl) = (p.rows, p.len, p.pl);
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
        let (evens, odds) = buf.split_at_mut(rows * len);
        // This row's phase rows, from the first group's column on.
        let even = &mut evens[py * len..][..len][j0..];
        let odd = &mut odds[py * len..][..len][j0..];
        // Sixteen pairs at a time, with constant indices: a pair of vector
        // shuffles where the CPU has them.
        let whole = groups / BLOCK * BLOCK;
        for (j, pairs) in body[..2 * whole].chunks_exact(2 * BLOCK).enumerate() {
            let pairs: &[f32; 2 * BLOCK] = pairs.try_into().expect("a block");
            let e: [f32; BLOCK] = std::array::from_fn(|i| pairs[2 * i]);
            let o: [f32; BLOCK] = std::array::from_fn(|i| pairs[2 * i + 1]);
            even[BLOCK * j..][..BLOCK].copy_from_slice(&e);
            odd[BLOCK * j..][..BLOCK].copy_from_slice(&o);
        }
        let rem = groups - whole;
        // The last pairs (all of a small plane's row) the same way, in one
        // block whose lanes past the row are zeros, where the source has a
        // whole block after them and the phase rows room for one (they keep
        // LANES zero floats past their input columns, which stay zero).
        let ahead = &rest[first + 2 * whole..];
        if rem > 0 && ahead.len() >= 2 * BLOCK && even.len() >= whole + BLOCK {
            let pairs: &[f32; 2 * BLOCK] = ahead[..2 * BLOCK].try_into().expect("a block");
            let e: [f32; BLOCK] = std::array::from_fn(|i| pairs[2 * i]);
            let o: [f32; BLOCK] = std::array::from_fn(|i| pairs[2 * i + 1]);
            even[whole..][..BLOCK].copy_from_slice(&keep(&e, rem));
            odd[whole..][..BLOCK].copy_from_slice(&keep(&o, rem));
        } else {
            for j in whole..groups {
                even[j] = body[2 * j];
                odd[j] = body[2 * j + 1];
            }
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
    /// The whole output plane. Four vectors of independent sums hide the add
    /// latency: four runs of one row where rows are wide, one run of four
    /// rows elsewhere.
    #[inline(always)]
    fn plane(&self, dst: &mut [f32]) {
        let p = self.p;
        let wide = p.ow / (4 * LANES) * (4 * LANES);
        for oy in 0..p.oh {
            for ox in (0..wide).step_by(4 * LANES) {
                self.across(oy, ox, dst);
            }
        }
        let tall = p.oh / 4 * 4;
        for ox in (wide..p.ow).step_by(LANES) {
            for oy in (0..tall).step_by(4) {
                self.four(oy, ox, dst);
            }
            for oy in tall..p.oh {
                self.one::<LANES>(oy, ox, dst);
            }
        }
    }

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

/// [`Runs`] for a kernel `KW` columns wide read at column stride `S`
/// without column dilation: tap `kx` reads phase `kx % S` at offset `kx / S`,
/// both known at compile time, so the taps of a kernel row unroll into
/// vector loads and multiply-adds with no index arithmetic between them.
struct Fixed<'a, const KW: usize, const S: usize> {
    p: &'a Plane,
    buf: &'a [f32],
    k: &'a [f32],
    start: f32,
}

impl<const KW: usize, const S: usize> Fixed<'_, KW, S> {
    /// The whole output plane, in the widest vectors of this CPU.
    #[inline(always)]
    fn plane(&self, dst: &mut [f32]) {
        pulp::Arch::new().dispatch(FixedPlane { f: self, dst });
    }
}

/// [`Fixed::plane`] for one instruction set.
struct FixedPlane<'a, 'b, const KW: usize, const S: usize> {
    f: &'a Fixed<'b, KW, S>,
    dst: &'a mut [f32],
}

impl<const KW: usize, const S: usize> WithSimd for FixedPlane<'_, '_, KW, S> {
    type Output = ();

    #[inline(always)]
    fn with_simd<V: Simd>(self, simd: V) {
        let FixedPlane { f, dst } = self;
        let p = f.p;
        let n = V::F32_LANES;
        assert!(n <= LANES, "the padded rows hold runs of {LANES} floats");
        assert_eq!(dst.len(), p.oh * p.ow);
        // Four runs of a row at a time where rows are wide, then the rest of
        // the columns a vector at a time, down four rows at a time.
        let wide = p.ow / (4 * n) * (4 * n);
        for oy in 0..p.oh {
            for ox in (0..wide).step_by(4 * n) {
                let acc = f.runs::<V, 4>(simd, oy, ox, n);
                for (r, a) in acc.into_iter().enumerate() {
                    store(simd, &mut dst[oy * p.ow + ox + r * n..][..n], a);
                }
            }
        }
        let tall = p.oh / 4 * 4;
        for ox in (wide..p.ow).step_by(n) {
            let cols = (p.ow - ox).min(n);
            for oy in (0..tall).step_by(4) {
                let acc = f.runs::<V, 4>(simd, oy, ox, p.sh * p.len);
                f.store_rows(simd, acc, oy, ox, cols, dst);
            }
            // The last rows together too: one chain of sums per row would
            // wait on each add.
            let (oy, step) = (tall, p.sh * p.len);
            match p.oh - tall {
                1 => f.store_rows(simd, f.runs::<V, 1>(simd, oy, ox, step), oy, ox, cols, dst),
                2 => f.store_rows(simd, f.runs::<V, 2>(simd, oy, ox, step), oy, ox, cols, dst),
                3 => f.store_rows(simd, f.runs::<V, 3>(simd, oy, ox, step), oy, ox, cols, dst),
                _ => {}
            }
        }
    }
}

impl<const KW: usize, const S: usize> Fixed<'_, KW, S> {
    /// `U` runs of one vector of outputs, the first at row `oy` and column
    /// `ox` and the others `step` floats apart in the padded buffer, summed
    /// over all taps (bias first, then row by row, as [`Runs`]).
    #[inline(always)]
    fn runs<V: Simd, const U: usize>(
        &self,
        simd: V,
        oy: usize,
        ox: usize,
        step: usize,
    ) -> [V::f32s; U] {
        let p = self.p;
        let n = V::F32_LANES;
        let last_row = oy * p.sh + (p.kh - 1) * p.dh;
        // The furthest float any load below reads, checked once for all of them.
        let end = ((S - 1) * p.rows + last_row) * p.len + ox + (KW - 1) / S + (U - 1) * step + n;
        assert!(last_row < p.rows && end <= self.buf.len());
        let base = self.buf.as_ptr();
        let mut acc = [simd.splat_f32s(self.start); U];
        for ky in 0..p.kh {
            let py = oy * p.sh + ky * p.dh;
            let w: &[f32; KW] = self.k[ky * KW..][..KW].try_into().expect("KW taps");
            for (kx, &wv) in w.iter().enumerate() {
                let kv = simd.splat_f32s(wv);
                let at = ((kx % S) * p.rows + py) * p.len + ox + kx / S;
                for (r, a) in acc.iter_mut().enumerate() {
                    // SAFETY: `at + r * step + n <= end <= buf.len()` (asserted
                    // above: `at` grows with `kx % S`, `py` and `kx / S`, each
                    // at most its value in `end`), and `V::f32s` is `n` plain
                    // f32s, read unaligned.
                    let v = unsafe { base.add(at + r * step).cast::<V::f32s>().read_unaligned() };
                    *a = simd.mul_add_e_f32s(v, kv, *a);
                }
            }
        }
        acc
    }
}

impl<const KW: usize, const S: usize> Fixed<'_, KW, S> {
    /// Stores runs of consecutive rows from `oy`: `cols` outputs each from `ox`.
    #[inline(always)]
    fn store_rows<V: Simd, const U: usize>(
        &self,
        simd: V,
        acc: [V::f32s; U],
        oy: usize,
        ox: usize,
        cols: usize,
        dst: &mut [f32],
    ) {
        let ow = self.p.ow;
        for (r, a) in acc.into_iter().enumerate() {
            store(simd, &mut dst[(oy + r) * ow + ox..][..cols], a);
        }
    }
}

/// Writes the first `dst.len()` (at most a vector's) lanes of `v`.
#[inline(always)]
pub(super) fn store<V: Simd>(simd: V, dst: &mut [f32], v: V::f32s) {
    if dst.len() == V::F32_LANES {
        let (whole, _) = V::as_mut_simd_f32s(dst);
        whole[0] = v;
    } else {
        simd.partial_store_f32s(dst, v);
    }
}
