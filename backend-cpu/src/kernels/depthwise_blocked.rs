//! Depthwise 2-D convolution over blocks of sixteen channels, on CPUs with
//! AVX-512.
//!
//! [`super::depthwise`] vectorizes along an output row. A 7-wide row fills 7
//! of 16 lanes, and a stride-2 plane must first be split into column phases:
//! on a CNN's late layers (7 × 7 and 14 × 14 maps, 5 × 5 kernels, stride 2)
//! that copy cost more than the arithmetic. Here a vector holds one position
//! of sixteen channels instead, as in onnxruntime's NCHWc kernels, but only
//! inside the kernel: the block's planes are transposed into a zero-padded,
//! position-major buffer (16 × 16 tiles transposed in registers), each tap of
//! each output is one load of sixteen channels at any stride and dilation,
//! and the sums are transposed back into the sixteen output planes.

use core::arch::x86_64::{__m512, __mmask16};
use std::cell::RefCell;

use onyx_core::ep::EpError;
use onyx_core::ops::conv::Geometry;
use onyx_core::ops::elementwise::UnaryKind;
use pulp::x86::V4;
use rayon::prelude::*;

use crate::par::Loop;

use super::KernelIo;
use super::elementwise::activate;

/// Channels per block: one AVX-512 vector of f32.
const CH: usize = 16;

/// Outputs summed together: independent sums hide the multiply-add latency.
const GROUP: usize = 8;

/// Runs the depthwise Conv of [`super::depthwise::depthwise2d`] blocked by
/// channels, or returns `None` where that path does not apply: no AVX-512,
/// a channel multiplier, channels that are not whole blocks, or output rows
/// 32 or more wide, where the row-vector path is as fast or faster (the two
/// transposes cost more than the lanes they fill; see [`Block::suits`]).
pub(super) fn run(
    io: &KernelIo,
    xs: &[usize],
    mg: usize,
    geo: &Geometry,
    activation: Option<UnaryKind>,
) -> Option<Result<(), EpError>> {
    let g = Block::new(xs, geo);
    if mg != 1 || !xs[1].is_multiple_of(CH) || !g.suits() {
        return None;
    }
    let simd = V4::try_new()?;
    Some(depthwise_blocked(simd, io, xs, &g, activation))
}

fn depthwise_blocked(
    simd: V4,
    io: &KernelIo,
    xs: &[usize],
    g: &Block,
    activation: Option<UnaryKind>,
) -> Result<(), EpError> {
    let c = xs[1];
    let x = io.input::<f32>(0)?;
    let wt = io.input::<f32>(1)?;
    let bias = io.optional_input::<f32>(2)?;
    let out = io.output::<f32>(0)?;
    let os = g.oh * g.ow;
    let (hw, taps) = (g.h * g.w, g.kh * g.kw);
    let blocks = c / CH;
    out.par_chunks_mut((CH * os).max(1)).enumerate().each(|(i, dst)| {
        let (b, c0) = (i / blocks, i % blocks * CH);
        let src = &x[(b * c + c0) * hw..][..CH * hw];
        let k = &wt[c0 * taps..][..CH * taps];
        let start: [f32; CH] = std::array::from_fn(|l| bias.map_or(0.0, |bs| bs[c0 + l]));
        SCRATCH.with_borrow_mut(|s| {
            s.prepare(g);
            simd.vectorize(Task { simd, g, src, k, s, start, dst, activation });
        });
    });
    Ok(())
}

thread_local! {
    /// Each thread's buffers, kept from call to call (a few hundred KiB at
    /// most, for the largest plane the thread has seen): allocated per call,
    /// they were fresh pages to fault in and zero at every run, which made
    /// the blocked path slower on two threads than on one for 28 × 28 maps.
    static SCRATCH: RefCell<Scratch> = RefCell::default();
}

/// The geometry of the blocked path: the input plane, the output plane, and
/// the padded, position-major buffer of one block.
struct Block {
    h: usize,
    w: usize,
    kh: usize,
    kw: usize,
    oh: usize,
    ow: usize,
    sh: usize,
    sw: usize,
    pt: usize,
    pl: usize,
    /// Padded rows and columns read by some output.
    ph: usize,
    pw: usize,
    /// Each tap's offset, in positions, from the first one an output reads.
    offsets: Vec<usize>,
}

impl Block {
    fn new(xs: &[usize], geo: &Geometry) -> Block {
        let (kh, kw) = (geo.kernel[0], geo.kernel[1]);
        let (oh, ow) = (geo.output[0], geo.output[1]);
        let (sh, sw) = (geo.strides[0].max(1), geo.strides[1].max(1));
        let (dh, dw) = (geo.dilations[0].max(1), geo.dilations[1].max(1));
        let span = |o: usize, s: usize, k: usize, d: usize| {
            if o == 0 || k == 0 { 0 } else { (o - 1) * s + (k - 1) * d + 1 }
        };
        let pw = span(ow, sw, kw, dw);
        let offsets =
            (0..kh).flat_map(|ky| (0..kw).map(move |kx| ky * dh * pw + kx * dw)).collect();
        Block {
            h: xs[2],
            w: xs[3],
            kh,
            kw,
            oh,
            ow,
            sh,
            sw,
            pt: geo.pads_begin[0],
            pl: geo.pads_begin[1],
            ph: span(oh, sh, kh, dh),
            pw,
            offsets,
        }
    }

    /// Whether the blocked path beats the row vectors: output rows under 32
    /// wide, at any stride. Measured on one core of an AVX-512 Xeon against
    /// the row vectors (`benches/conv_shapes.py`'s depthwise shapes): 0.3–0.4×
    /// the time on 7 × 7 and strided 14 × 14 outputs, 0.55–0.9× on 14- and
    /// 28-wide ones; a 56-wide strided output broke even, and wider rows at
    /// stride 1 took 1.2–1.7× as long, the transposes costing more than the
    /// lanes they fill.
    fn suits(&self) -> bool {
        self.oh * self.ow > 0 && self.kh * self.kw > 0 && self.ow < 2 * CH
    }
}

/// Per-thread buffers of the blocked path, reused across blocks and calls.
#[derive(Default)]
struct Scratch {
    /// `ph × pw` positions of sixteen channels; the padding stays zero.
    input: Vec<[f32; CH]>,
    /// The geometry `input` was zeroed for: `(ph, pw, pt, pl, h, w)`.
    zeroed: [usize; 6],
    /// `oh × ow` positions of sixteen channels.
    output: Vec<[f32; CH]>,
    /// `kh × kw` taps of sixteen channels.
    taps: Vec<[f32; CH]>,
}

impl Scratch {
    /// Sizes the buffers for `g`, zeroing the input buffer where its last
    /// use had another geometry. Every block of a geometry writes the same
    /// interior positions, so the padding, zeroed once, stays zero.
    fn prepare(&mut self, g: &Block) {
        let geometry = [g.ph, g.pw, g.pt, g.pl, g.h, g.w];
        if self.zeroed != geometry {
            self.zeroed = geometry;
            self.input.clear();
            self.input.resize(g.ph * g.pw, [0.0; CH]);
        }
        self.output.resize(g.oh * g.ow, [0.0; CH]);
        self.taps.resize(g.kh * g.kw, [0.0; CH]);
    }
}

/// One block of sixteen channels, run with AVX-512 enabled.
struct Task<'a> {
    simd: V4,
    g: &'a Block,
    src: &'a [f32],
    /// The block's weights: sixteen rows of `kh × kw` taps.
    k: &'a [f32],
    s: &'a mut Scratch,
    start: [f32; CH],
    dst: &'a mut [f32],
    activation: Option<UnaryKind>,
}

impl pulp::NullaryFnOnce for Task<'_> {
    type Output = ();

    #[inline(always)]
    fn call(self) {
        let Task { simd, g, src, k, s, start, dst, activation } = self;
        pack(simd, g, src, &mut s.input);
        // Tap t of the sixteen channels, one vector each.
        let taps = s.taps.len();
        tiles(simd, k, taps, taps, |t, v| {
            // SAFETY: a tap is sixteen floats.
            unsafe { simd.avx512f._mm512_storeu_ps(s.taps[t].as_mut_ptr(), v) }
        });
        sums(simd, g, &s.input, &s.taps, start, &mut s.output);
        if let Some(kind) = activation {
            activate(kind, s.output.as_flattened_mut());
        }
        unpack(simd, g.oh * g.ow, &s.output, dst);
    }
}

/// The lanes `..n` of a vector (`n` ≤ 16).
#[inline(always)]
fn lanes(n: usize) -> __mmask16 {
    if n >= CH { !0 } else { (1u16 << n) - 1 }
}

/// Transposes the block's input planes (`src`, sixteen `h × w` planes) into
/// the interior of the padded buffer: input `(y, x)` is position
/// `(y + pt, x + pl)`, skipped where no output reads it.
#[inline(always)]
fn pack(simd: V4, g: &Block, src: &[f32], buf: &mut [[f32; CH]]) {
    assert!(buf.len() == g.ph * g.pw);
    let hw = g.h * g.w;
    for y in 0..g.h.min(g.ph.saturating_sub(g.pt)) {
        let (py, row) = (y + g.pt, &src[y * g.w..]);
        let n = g.w.min(g.pw.saturating_sub(g.pl));
        tiles(simd, row, hw, n, |x, v| {
            let cell = &mut buf[py * g.pw + x + g.pl];
            // SAFETY: `cell` is sixteen floats.
            unsafe { simd.avx512f._mm512_storeu_ps(cell.as_mut_ptr(), v) }
        });
    }
}

/// Reads sixteen rows of `n` floats (row `r` from `src[r·stride]`) and hands
/// `put` each column `j` as one vector of the sixteen rows' values, by
/// 16 × 16 tiles transposed in registers.
#[inline(always)]
fn tiles(simd: V4, src: &[f32], stride: usize, n: usize, mut put: impl FnMut(usize, __m512)) {
    if n == 0 {
        return;
    }
    assert!(src.len() >= (CH - 1) * stride + n);
    let avx = simd.avx512f;
    for j0 in (0..n).step_by(CH) {
        let m = (n - j0).min(CH);
        let mask = lanes(m);
        let mut rows = [avx._mm512_setzero_ps(); CH];
        for (r, row) in rows.iter_mut().enumerate() {
            // SAFETY: lanes `..m` read floats `r·stride + j0 ..+ m` of `src`,
            // inside it (asserted above); masked lanes are not read.
            *row = unsafe { avx._mm512_maskz_loadu_ps(mask, src.as_ptr().add(r * stride + j0)) };
        }
        for (j, v) in transpose(simd, rows).into_iter().enumerate().take(m) {
            put(j0 + j, v);
        }
    }
}

/// The sums of every output position of the block, bias first, then the
/// taps row by row (as the row-vector path), up to [`GROUP`] outputs of a
/// row at a time.
#[inline(always)]
fn sums(
    simd: V4,
    g: &Block,
    buf: &[[f32; CH]],
    taps: &[[f32; CH]],
    start: [f32; CH],
    out: &mut [[f32; CH]],
) {
    assert!(out.len() == g.oh * g.ow && taps.len() == g.kh * g.kw && buf.len() == g.ph * g.pw);
    if out.is_empty() {
        return;
    }
    // The furthest read is the last output's last tap.
    let last =
        (g.oh - 1) * g.sh * g.pw + (g.ow - 1) * g.sw + g.offsets.last().copied().unwrap_or(0);
    assert!(last < buf.len());
    let row = Row { simd, buf, taps, offsets: &g.offsets, start };
    for oy in 0..g.oh {
        let mut ox = 0;
        while ox < g.ow {
            let n = (g.ow - ox).min(GROUP);
            let first = oy * g.sh * g.pw + ox * g.sw;
            let cells = &mut out[oy * g.ow + ox..][..n];
            // Literal strides make each output's reads fixed displacements.
            match g.sw {
                1 => row.outputs(first, 1, cells),
                2 => row.outputs(first, 2, cells),
                sw => row.outputs(first, sw, cells),
            }
            ox += n;
        }
    }
}

/// What the outputs of one row read: the padded block, its taps and bias.
struct Row<'a> {
    simd: V4,
    buf: &'a [[f32; CH]],
    taps: &'a [[f32; CH]],
    offsets: &'a [usize],
    start: [f32; CH],
}

impl Row<'_> {
    /// The `cells.len()` (at most [`GROUP`]) consecutive outputs of a row
    /// whose reads start at position `first`, `step` positions apart.
    #[inline(always)]
    fn outputs(&self, first: usize, step: usize, cells: &mut [[f32; CH]]) {
        match cells.len() {
            8 => self.store(cells, self.group::<8>(first, step)),
            7 => self.store(cells, self.group::<7>(first, step)),
            6 => self.store(cells, self.group::<6>(first, step)),
            5 => self.store(cells, self.group::<5>(first, step)),
            4 => self.store(cells, self.group::<4>(first, step)),
            3 => self.store(cells, self.group::<3>(first, step)),
            2 => self.store(cells, self.group::<2>(first, step)),
            _ => self.store(cells, self.group::<1>(first, step)),
        }
    }

    /// The sums of `U` outputs reading from `first + u·step`. The caller has
    /// checked that the last output's last tap lies in the buffer.
    #[inline(always)]
    fn group<const U: usize>(&self, first: usize, step: usize) -> [__m512; U] {
        let avx = self.simd.avx512f;
        // SAFETY: `start` is sixteen floats.
        let start = unsafe { avx._mm512_loadu_ps(self.start.as_ptr()) };
        let mut acc = [start; U];
        let at = self.buf.as_ptr();
        for (tap, &off) in self.taps.iter().zip(self.offsets) {
            // SAFETY: a tap is sixteen floats.
            let k = unsafe { avx._mm512_loadu_ps(tap.as_ptr()) };
            // SAFETY: `first + off` lies in `buf`: reads grow with the
            // output and the tap, and the furthest is inside (asserted in
            // `sums`).
            let p = unsafe { at.add(first + off) };
            for (u, a) in acc.iter_mut().enumerate() {
                // SAFETY: as above, for output `u` of the group; a position
                // is sixteen floats.
                let v = unsafe { avx._mm512_loadu_ps(p.add(u * step).cast::<f32>()) };
                *a = avx._mm512_fmadd_ps(v, k, *a);
            }
        }
        acc
    }

    /// Writes `acc[u]` to `cells[u]`.
    #[inline(always)]
    fn store<const U: usize>(&self, cells: &mut [[f32; CH]], acc: [__m512; U]) {
        for (cell, v) in cells.iter_mut().zip(acc) {
            // SAFETY: `cell` is sixteen floats.
            unsafe { self.simd.avx512f._mm512_storeu_ps(cell.as_mut_ptr(), v) };
        }
    }
}

/// Transposes the `os` positions of sixteen channels in `sums` into the
/// sixteen output planes of `dst` (`os` floats each).
#[inline(always)]
fn unpack(simd: V4, os: usize, sums: &[[f32; CH]], dst: &mut [f32]) {
    assert!(sums.len() == os && dst.len() == CH * os);
    let avx = simd.avx512f;
    for p0 in (0..os).step_by(CH) {
        let n = (os - p0).min(CH);
        let mut rows = [avx._mm512_setzero_ps(); CH];
        for (row, cell) in rows.iter_mut().zip(&sums[p0..p0 + n]) {
            // SAFETY: a position is sixteen floats.
            *row = unsafe { avx._mm512_loadu_ps(cell.as_ptr()) };
        }
        let planes = transpose(simd, rows);
        let mask = lanes(n);
        for (c, v) in planes.into_iter().enumerate() {
            // SAFETY: lanes `..n` write floats `c·os + p0 ..+ n` of `dst`,
            // inside its `CH·os` (asserted above); masked lanes are not written.
            unsafe { avx._mm512_mask_storeu_ps(dst.as_mut_ptr().add(c * os + p0), mask, v) };
        }
    }
}

/// Transposes a 16 × 16 tile held in sixteen vectors (row `r` in `rows[r]`)
/// with 64 shuffles: pairs of rows interleaved by floats, then by pairs of
/// floats, then 128-bit lanes gathered across groups of four rows in two
/// steps.
#[inline(always)]
fn transpose(simd: V4, rows: [__m512; CH]) -> [__m512; CH] {
    // Loops, not `array::from_fn`: its closures may be compiled out of line,
    // without AVX-512, and every intrinsic in them would become a call.
    let avx = simd.avx512f;
    let mut t = rows;
    // Rows 2i and 2i+1 by floats: within each 128-bit lane, columns
    // (0, 1) then (2, 3) of the two rows.
    for i in (0..CH).step_by(2) {
        let (a, b) = (rows[i], rows[i + 1]);
        t[i] = avx._mm512_unpacklo_ps(a, b);
        t[i + 1] = avx._mm512_unpackhi_ps(a, b);
    }
    // Rows 4i..4i+4 by pairs: vector 4i + k holds column k of the four rows
    // in each 128-bit lane (lane L: column k + 4L).
    let mut u = t;
    for q in (0..CH).step_by(4) {
        for h in 0..2 {
            let a = avx._mm512_castps_pd(t[q + h]);
            let b = avx._mm512_castps_pd(t[q + 2 + h]);
            u[q + 2 * h] = avx._mm512_castpd_ps(avx._mm512_unpacklo_pd(a, b));
            u[q + 2 * h + 1] = avx._mm512_castpd_ps(avx._mm512_unpackhi_pd(a, b));
        }
    }
    // Per column k: lanes (0, 2) and (1, 3) of groups 0 and 1 (v[k], v[4 + k]),
    // and of groups 2 and 3 (v[8 + k], v[12 + k]).
    let mut v = u;
    for k in 0..4 {
        v[k] = avx._mm512_shuffle_f32x4::<0x88>(u[k], u[4 + k]);
        v[4 + k] = avx._mm512_shuffle_f32x4::<0xDD>(u[k], u[4 + k]);
        v[8 + k] = avx._mm512_shuffle_f32x4::<0x88>(u[8 + k], u[12 + k]);
        v[12 + k] = avx._mm512_shuffle_f32x4::<0xDD>(u[8 + k], u[12 + k]);
    }
    // Column k + 4L: lane L of every group, in order.
    let mut out = v;
    for k in 0..4 {
        out[k] = avx._mm512_shuffle_f32x4::<0x88>(v[k], v[8 + k]);
        out[4 + k] = avx._mm512_shuffle_f32x4::<0x88>(v[4 + k], v[12 + k]);
        out[8 + k] = avx._mm512_shuffle_f32x4::<0xDD>(v[k], v[8 + k]);
        out[12 + k] = avx._mm512_shuffle_f32x4::<0xDD>(v[4 + k], v[12 + k]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tile_transposes_in_registers_as_it_would_element_by_element() {
        let Some(simd) = V4::try_new() else {
            eprintln!("skipped: this CPU has no AVX-512");
            return;
        };
        let tile: [[f32; CH]; CH] =
            std::array::from_fn(|r| std::array::from_fn(|c| (r * CH + c) as f32));
        let avx = simd.avx512f;
        // SAFETY: each row is sixteen floats.
        let rows = tile.map(|r| unsafe { avx._mm512_loadu_ps(r.as_ptr()) });
        let mut got = [[0f32; CH]; CH];
        for (g, v) in got.iter_mut().zip(transpose(simd, rows)) {
            // SAFETY: each row is sixteen floats.
            unsafe { avx._mm512_storeu_ps(g.as_mut_ptr(), v) };
        }
        let want: [[f32; CH]; CH] = std::array::from_fn(|r| std::array::from_fn(|c| tile[c][r]));
        assert_eq!(got, want);
    }
}
