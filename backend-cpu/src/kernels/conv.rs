//! Conv as im2col + GEMM over any number of spatial dims, with groups,
//! dilations and padding; 1×1 stride-1 convolutions skip im2col entirely.

use std::any::TypeId;

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::conv::{Conv, FusedConv, Geometry};
use onyx_core::ops::elementwise::UnaryKind;
use onyx_core::shape::Dim;
use rayon::prelude::*;

use crate::par::Loop;

use super::elementwise::activate;
use super::matmul::{GemmType, Mat, RowsDone, gemm_into, gemm_row_bands};
use super::narrow::{NARROW_COLS, narrow_product};
use super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};

/// For each spatial dim `d` and kernel offset `k`: the input index read by
/// each output position (-1 in padding), flattened as `maps[d][k * output[d] + o]`.
fn index_maps(geo: &Geometry, in_dims: &[usize]) -> Vec<Vec<isize>> {
    (0..in_dims.len())
        .map(|d| {
            let (out, input) = (geo.output[d], in_dims[d] as isize);
            (0..geo.kernel[d])
                .flat_map(|k| {
                    (0..out).map(move |o| {
                        let i = (o * geo.strides[d] + k * geo.dilations[d]) as isize
                            - geo.pads_begin[d] as isize;
                        if (0..input).contains(&i) { i } else { -1 }
                    })
                })
                .collect()
        })
        .collect()
}

/// Unravels `index` over `dims` (row-major).
pub(crate) fn unravel(mut index: usize, dims: &[usize]) -> Vec<usize> {
    let mut out = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        out[d] = index % dims[d];
        index /= dims[d];
    }
    out
}

/// Elements of `col` one im2col task fills at least: smaller convolutions
/// (1-D signal convs, late small feature maps) run on one thread.
const IM2COL_TASK: usize = 1 << 15;

/// Fills `col` ([C × prod(kernel)] rows of [prod(output)]) from one image `x` ([C, in…]).
fn im2col<T: Copy + Send + Sync + num_traits::Zero>(
    x: &[T],
    in_dims: &[usize],
    geo: &Geometry,
    col: &mut [T],
) {
    let ks: usize = geo.kernel.iter().product();
    let os: usize = geo.output.iter().product();
    let plane: usize = in_dims.iter().product();
    let rank = in_dims.len();
    if os == 0 || rank == 0 {
        return;
    }
    let in_strides = onyx_core::shape::strides(in_dims);
    let maps = index_maps(geo, in_dims);
    let inner = geo.output[rank - 1];
    let outer = os / inner.max(1);
    let min_rows = IM2COL_TASK.div_ceil(os);
    col.par_chunks_mut(os).enumerate().with_min_len(min_rows).each_init(
        || (vec![0usize; rank], vec![0usize; rank]),
        |(k, pos), (row, dst)| {
            let c = row / ks;
            let mut rest = row % ks;
            for d in (0..rank).rev() {
                k[d] = rest % geo.kernel[d];
                rest /= geo.kernel[d];
            }
            let src = &x[c * plane..(c + 1) * plane];
            let last = &maps[rank - 1][k[rank - 1] * inner..][..inner];
            pos.fill(0);
            for o in 0..outer {
                let mut base = 0isize;
                for d in 0..rank - 1 {
                    let i = maps[d][k[d] * geo.output[d] + pos[d]];
                    if i < 0 {
                        base = -1;
                        break;
                    }
                    base += i * in_strides[d] as isize;
                }
                let row_out = &mut dst[o * inner..(o + 1) * inner];
                if base < 0 {
                    row_out.fill(T::zero());
                } else {
                    let src = &src[base as usize..];
                    for (slot, &i) in row_out.iter_mut().zip(last) {
                        *slot = if i < 0 { T::zero() } else { src[i as usize] };
                    }
                }
                // Next position over the outer dims (row-major).
                for d in (0..rank - 1).rev() {
                    pos[d] += 1;
                    if pos[d] < geo.output[d] {
                        break;
                    }
                    pos[d] = 0;
                }
            }
        },
    );
}

/// `dst[j * rows + i] = src[i * cols + j]`: a `rows × cols` matrix transposed.
fn transpose(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    for (i, row) in src[..rows * cols].chunks_exact(cols.max(1)).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            dst[j * rows + i] = v;
        }
    }
}

/// For a 1-D Conv: each output position's patch (`channels × taps` values,
/// zeros where it reads padding), one position after another: im2col's
/// columns, written directly as rows.
fn patches_1d(
    x: &[f32],
    geo: &Geometry,
    (channels, len, taps): (usize, usize, usize),
    dst: &mut [f32],
) {
    if len == 0 || channels * taps == 0 {
        // An empty signal (all padding) or an empty patch.
        dst.fill(0.0);
        return;
    }
    let (stride, dilation) = (geo.strides[0], geo.dilations[0]);
    let pad = geo.pads_begin[0] as isize;
    for (o, patch) in dst.chunks_exact_mut(channels * taps).take(geo.output[0]).enumerate() {
        let start = (o * stride) as isize - pad;
        let inside = start >= 0 && start as usize + (taps - 1) * dilation < len;
        for (src, row) in x.chunks_exact(len).zip(patch.chunks_exact_mut(taps)) {
            if inside && dilation == 1 {
                row.copy_from_slice(&src[start as usize..start as usize + taps]);
            } else {
                for (t, v) in row.iter_mut().enumerate() {
                    let i = start + (t * dilation) as isize;
                    *v = if (0..len as isize).contains(&i) { src[i as usize] } else { 0.0 };
                }
            }
        }
    }
}

struct ConvKernel {
    op: Conv,
    dtype: DType,
    /// `FusedConv`'s activation (f32 only).
    activation: Option<UnaryKind>,
}

fn conv<T: GemmType + bytemuck::Pod + num_traits::Zero>(
    io: &KernelIo,
    c: &Conv,
    activation: Option<UnaryKind>,
) -> Result<(), EpError> {
    let (vx, vw) = (io.in_view(0)?, io.in_view(1)?);
    let (xs, ws) = (vx.shape.clone(), vw.shape.clone());
    let dims: Vec<Dim> = ws.iter().map(|&d| Dim::Known(d)).collect();
    let kernel = c.kernel(Some(&dims)).map_err(|e| EpError::Kernel(e.to_string()))?;
    let kernel = kernel.ok_or_else(|| EpError::Kernel("Conv kernel shape unknown".into()))?;
    let geo = c.window.geometry(&xs[2..], &kernel).map_err(|e| EpError::Kernel(e.to_string()))?;
    let (n, cin, m) = (xs[0], xs[1], ws[0]);
    let g = c.group;
    if cin % g != 0 || m % g != 0 || ws[1] * g != cin {
        return Err(EpError::Kernel(format!(
            "Conv channels {cin} / weights {ws:?} do not fit group {g}"
        )));
    }
    let (cg, mg) = (cin / g, m / g);
    if cg == 1 && g > 1 && xs.len() == 4 && TypeId::of::<T>() == TypeId::of::<f32>() {
        return super::depthwise::depthwise2d(io, &xs, mg, &geo, activation);
    }
    if TypeId::of::<T>() == TypeId::of::<f32>() && super::direct::supports(g, &xs, &geo) {
        return super::direct::direct2d(io, &xs, m, &geo, activation);
    }
    let ks: usize = kernel.iter().product();
    let is: usize = xs[2..].iter().product();
    let os: usize = geo.output.iter().product();
    let x = io.input::<T>(0)?;
    let w = io.input::<T>(1)?;
    let bias = io.optional_input::<T>(2)?;
    let out = io.output::<T>(0)?;
    let pointwise = ks == 1
        && geo.strides.iter().all(|&s| s == 1)
        && geo.pads_begin.iter().chain(&geo.pads_end).all(|&p| p == 0);
    // Few output positions: dot products over each position's patch (see narrow.rs).
    let narrow = os <= NARROW_COLS && TypeId::of::<T>() == TypeId::of::<f32>();
    let one_d = xs.len() == 3 && !pointwise;
    let mut col =
        if pointwise || (narrow && one_d) { Vec::new() } else { vec![T::zero(); cg * ks * os] };
    let mut patches = if narrow { vec![0f32; os * cg * ks] } else { Vec::new() };
    for b in 0..n {
        for gi in 0..g {
            let x_off = (b * cin + gi * cg) * is;
            let out_off = (b * m + gi * mg) * os;
            let wm = Mat::row_major(gi * mg * cg * ks, cg * ks, false);
            if narrow {
                let xg: &[f32] = bytemuck::cast_slice(&x[x_off..x_off + cg * is]);
                if pointwise {
                    transpose(xg, cg, os, &mut patches);
                } else if one_d {
                    patches_1d(xg, &geo, (cg, is, kernel[0]), &mut patches);
                } else {
                    im2col(&x[x_off..x_off + cg * is], &xs[2..], &geo, &mut col);
                    transpose(bytemuck::cast_slice(&col), cg * ks, os, &mut patches);
                }
                narrow_product(
                    (mg, os, cg * ks),
                    bytemuck::cast_slice(&w[gi * mg * cg * ks..(gi + 1) * mg * cg * ks]),
                    &patches,
                    bytemuck::cast_slice_mut(&mut out[out_off..out_off + mg * os]),
                );
            } else if pointwise {
                // Bias and activation on each band of output channels as soon
                // as it is computed, while it is in cache.
                let first = gi * mg;
                let done = |r0: usize, rows: &mut [T]| {
                    for (i, row) in rows.chunks_exact_mut(os.max(1)).enumerate() {
                        bias_act(bias, activation, first + r0 + i, row);
                    }
                };
                let done: Option<RowsDone<'_, T>> =
                    (bias.is_some() || activation.is_some()).then_some(&done);
                // SAFETY: the image group is cg × os contiguous; out block is mg × os,
                // and the weights advance by one row (cg) per output channel.
                unsafe {
                    gemm_row_bands(
                        (mg, os, cg),
                        out,
                        out_off,
                        w,
                        wm,
                        x,
                        Mat::row_major(x_off, os, false),
                        done,
                    )
                };
            } else {
                im2col(&x[x_off..x_off + cg * is], &xs[2..], &geo, &mut col);
                // SAFETY: col is (cg·ks) × os; weights for the group are mg × (cg·ks).
                unsafe {
                    gemm_into(
                        (mg, os, cg * ks),
                        out,
                        out_off,
                        w,
                        wm,
                        &col,
                        Mat::row_major(0, os, false),
                        false,
                        T::one(),
                    )
                };
            }
        }
        // Pointwise products not taken as narrow applied them band by band.
        if (bias.is_some() || activation.is_some()) && (narrow || !pointwise) {
            // Bias and activation together, one output channel at a time.
            out[b * m * os..(b + 1) * m * os]
                .par_chunks_mut(os.max(1))
                .enumerate()
                .with_min_len(super::min_rows(os))
                .each(|(ch, row)| bias_act(bias, activation, ch, row));
        }
    }
    Ok(())
}

/// Adds output channel `ch`'s bias to its `row` and applies the activation.
fn bias_act<T: GemmType + bytemuck::Pod>(
    bias: Option<&[T]>,
    activation: Option<UnaryKind>,
    ch: usize,
    row: &mut [T],
) {
    if let Some(bias) = bias {
        let bv = bias[ch];
        row.iter_mut().for_each(|v| *v = *v + bv);
    }
    if let Some(kind) = activation {
        // FusedConv kernels are built for f32 only.
        activate(kind, bytemuck::cast_slice_mut(row));
    }
}

impl CpuKernel for ConvKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        match self.dtype {
            DType::F32 => conv::<f32>(io, &self.op, self.activation),
            DType::F64 => conv::<f64>(io, &self.op, None),
            DType::F16 => conv::<half::f16>(io, &self.op, None),
            d => Err(unsupported_dtype("Conv", d)),
        }
    }
}

fn build_conv(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let c = spec.op_as::<Conv>()?.clone();
    let dtype = spec.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F64 | DType::F16) {
        return Err(unsupported_dtype("Conv", dtype));
    }
    Ok(Box::new(ConvKernel { op: c, dtype, activation: None }))
}

fn build_fused_conv(spec: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let f = spec.op_as::<FusedConv>()?;
    let dtype = spec.input_dtype(0)?;
    if dtype != DType::F32 || !activate(f.activation, &mut []) {
        return Err(EpError::Unsupported(format!(
            "FusedConv with {:?} on {dtype} (f32 with the fused activations only)",
            f.activation
        )));
    }
    Ok(Box::new(ConvKernel { op: f.conv.clone(), dtype, activation: Some(f.activation) }))
}

/// Registers Conv and `com.microsoft` FusedConv.
pub fn register_all(r: &mut KernelRegistry) {
    r.register("Conv", build_conv);
    r.register_in(onyx_core::graph::MICROSOFT_DOMAIN, "FusedConv", build_fused_conv);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::View;
    use onyx_core::ops::conv::{AutoPad, Window};

    #[test]
    fn im2col_pads_with_zeros() {
        // 1 channel, 3×3 input, 2×2 kernel, pad 1 at the start: 3×3 output.
        let w = Window {
            kernel: None,
            strides: None,
            dilations: None,
            pads: Some(vec![1, 1, 0, 0]),
            auto_pad: AutoPad::NotSet,
            ceil_mode: false,
        };
        let geo = w.geometry(&[3, 3], &[2, 2]).unwrap();
        assert_eq!(geo.output, vec![3, 3]);
        let x: Vec<f32> = (1..=9).map(|v| v as f32).collect();
        let mut col = vec![0f32; 4 * 9];
        im2col(&x, &[3, 3], &geo, &mut col);
        // Kernel offset (0,0) reads x[o - 1]: the first row and column are padding.
        assert_eq!(&col[..9], &[0., 0., 0., 0., 1., 2., 0., 4., 5.]);
        // Kernel offset (1,1) reads x[o]: the input itself.
        assert_eq!(&col[27..], &[1., 2., 3., 4., 5., 6., 7., 8., 9.]);
    }

    #[test]
    fn one_d_patches_are_im2col_columns_as_rows() {
        // (length, taps, stride, dilation, pads): interior, padded, strided and dilated windows.
        for (len, taps, stride, dilation, pads) in [
            (9, 3, 1, 1, [1, 1]),
            (640, 256, 128, 1, [0, 0]),
            (10, 3, 2, 2, [2, 1]),
            (5, 5, 3, 1, [4, 4]),
        ] {
            let w = Window {
                kernel: None,
                strides: Some(vec![stride]),
                dilations: Some(vec![dilation]),
                pads: Some(pads.to_vec()),
                auto_pad: AutoPad::NotSet,
                ceil_mode: false,
            };
            let geo = w.geometry(&[len], &[taps]).unwrap();
            let (channels, os) = (3, geo.output[0]);
            let x: Vec<f32> = (0..channels * len).map(|v| v as f32 + 1.0).collect();
            let mut col = vec![0f32; channels * taps * os];
            im2col(&x, &[len], &geo, &mut col);
            let mut want = vec![0f32; col.len()];
            transpose(&col, channels * taps, os, &mut want);
            let mut got = vec![f32::NAN; col.len()];
            patches_1d(&x, &geo, (channels, len, taps), &mut got);
            assert_eq!(
                got, want,
                "length {len}, taps {taps}, stride {stride}, dilation {dilation}"
            );
        }
    }

    fn view(data: &mut [f32], shape: &[usize]) -> Option<View> {
        Some(View::new(data.as_mut_ptr().cast(), data.len() * 4, DType::F32, shape.to_vec()))
    }

    /// Direct convolution, one output element at a time.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        x: &[f32],
        xs: [usize; 4],
        w: &[f32],
        ws: [usize; 4],
        b: &[f32],
        g: usize,
        geo: &Geometry,
    ) -> Vec<f32> {
        let (cg, mg) = (xs[1] / g, ws[0] / g);
        let (oh, ow) = (geo.output[0], geo.output[1]);
        let mut out = vec![0f32; xs[0] * ws[0] * oh * ow];
        for n in 0..xs[0] {
            for m in 0..ws[0] {
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = b[m];
                        for c in 0..cg {
                            for ky in 0..ws[2] {
                                for kx in 0..ws[3] {
                                    let iy = (oy * geo.strides[0] + ky * geo.dilations[0]) as isize
                                        - geo.pads_begin[0] as isize;
                                    let ix = (ox * geo.strides[1] + kx * geo.dilations[1]) as isize
                                        - geo.pads_begin[1] as isize;
                                    if iy < 0
                                        || ix < 0
                                        || iy >= xs[2] as isize
                                        || ix >= xs[3] as isize
                                    {
                                        continue;
                                    }
                                    let ci = (m / mg) * cg + c;
                                    acc += x[((n * xs[1] + ci) * xs[2] + iy as usize) * xs[3]
                                        + ix as usize]
                                        * w[((m * cg + c) * ws[2] + ky) * ws[3] + kx];
                                }
                            }
                        }
                        out[((n * ws[0] + m) * oh + oy) * ow + ox] = acc;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn direct_convolution_of_few_channels_matches_a_naive_one() {
        // (input dims, output channels, kernel, stride, pads): a partial block
        // of output channels, several bands of rows, row tails, two images.
        let cases = [
            ([1, 3, 37, 40], 16, 3, 2, [1, 1, 1, 1]),
            ([2, 1, 20, 17], 5, 3, 1, [1, 1, 1, 1]),
            ([1, 4, 19, 50], 11, 5, 2, [2, 1, 2, 2]),
            ([1, 2, 12, 23], 9, 7, 1, [3, 3, 3, 3]),
            ([1, 3, 30, 41], 8, 7, 2, [3, 3, 3, 3]),
        ];
        for (xs, m, k, s, pads) in cases {
            let window = Window {
                kernel: Some(vec![k, k]),
                strides: Some(vec![s, s]),
                dilations: None,
                pads: Some(pads.to_vec()),
                auto_pad: AutoPad::NotSet,
                ceil_mode: false,
            };
            let geo = window.geometry(&xs[2..], &[k, k]).unwrap();
            assert!(super::super::direct::supports(1, &xs, &geo), "{xs:?} kernel {k}");
            let ws = [m, xs[1], k, k];
            let mut x: Vec<f32> =
                (0..xs.iter().product::<usize>()).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
            let mut w: Vec<f32> = (0..ws.iter().product::<usize>())
                .map(|i| ((i * 5) % 11) as f32 * 0.25 - 1.0)
                .collect();
            let mut b: Vec<f32> = (0..m).map(|i| i as f32 * 0.5).collect();
            let want = naive(&x, xs, &w, ws, &b, 1, &geo);
            let os = [xs[0], m, geo.output[0], geo.output[1]];
            let mut out = vec![f32::NAN; want.len()];
            let io = KernelIo {
                inputs: vec![view(&mut x, &xs), view(&mut w, &ws), view(&mut b, &[m])],
                outputs: vec![view(&mut out, &os)],
                values: vec![],
            };
            conv::<f32>(&io, &Conv { window, group: 1 }, None).unwrap();
            assert_eq!(out, want, "input {xs:?}, {m} outputs, kernel {k}, stride {s}");
        }
    }

    #[test]
    fn pointwise_convolution_adds_bias_and_activation_to_every_band_of_channels() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // (input dims, output channels, group): bands of rows on two threads,
        // two groups of two images, a wide product (one call, then parallel
        // rows), and a narrow one (few positions).
        let cases = [
            ([1, 64, 14, 14], 96, 1),
            ([2, 64, 7, 9], 128, 2),
            ([1, 16, 40, 40], 48, 1),
            ([1, 32, 2, 2], 64, 1),
        ];
        for (xs, m, g) in cases {
            let window = Window {
                kernel: Some(vec![1, 1]),
                strides: None,
                dilations: None,
                pads: None,
                auto_pad: AutoPad::NotSet,
                ceil_mode: false,
            };
            let geo = window.geometry(&xs[2..], &[1, 1]).unwrap();
            let ws = [m, xs[1] / g, 1, 1];
            let mut x: Vec<f32> =
                (0..xs.iter().product::<usize>()).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
            let mut w: Vec<f32> = (0..ws.iter().product::<usize>())
                .map(|i| ((i * 5) % 11) as f32 * 0.25 - 1.0)
                .collect();
            let mut b: Vec<f32> = (0..m).map(|i| i as f32 * 0.5 - 20.0).collect();
            let linear = naive(&x, xs, &w, ws, &b, g, &geo);
            let os = [xs[0], m, geo.output[0], geo.output[1]];
            for activation in [None, Some(UnaryKind::Relu)] {
                let want: Vec<f32> = match activation {
                    Some(_) => linear.iter().map(|v| v.max(0.0)).collect(),
                    None => linear.clone(),
                };
                let mut out = vec![f32::NAN; want.len()];
                let c = Conv { window: window.clone(), group: g };
                pool.install(|| {
                    let io = KernelIo {
                        inputs: vec![view(&mut x, &xs), view(&mut w, &ws), view(&mut b, &[m])],
                        outputs: vec![view(&mut out, &os)],
                        values: vec![],
                    };
                    conv::<f32>(&io, &c, activation)
                })
                .unwrap();
                assert_eq!(out, want, "input {xs:?}, {m} outputs, group {g}, {activation:?}");
            }
        }
    }

    #[test]
    fn depthwise_convolution_matches_a_naive_one_for_strides_pads_and_dilations() {
        // (input dims, kernel, stride, dilation, pads, channel multiplier)
        let cases = [
            ([1, 3, 7, 9], 3, 1, 1, [1, 1, 1, 1], 1),
            ([2, 2, 8, 11], 3, 2, 1, [1, 1, 1, 1], 2),
            ([1, 4, 9, 10], 5, 2, 1, [2, 2, 2, 2], 1),
            ([1, 2, 10, 13], 3, 3, 2, [0, 3, 1, 0], 1),
            ([1, 1, 4, 3], 5, 2, 1, [2, 2, 2, 2], 1),
            // Narrow rows (the channel-blocked path) over more than one block
            // of channels, with a partial block and a row tail.
            ([1, 21, 7, 7], 5, 1, 1, [2, 2, 2, 2], 1),
            ([2, 18, 13, 11], 3, 2, 1, [1, 0, 1, 1], 1),
            // Rows wide enough for the four-vector runs, with a tail.
            ([1, 2, 4, 150], 3, 1, 1, [1, 1, 1, 1], 1),
            ([1, 2, 5, 301], 5, 2, 1, [2, 2, 2, 2], 1),
            // 7-wide kernels (unrolled taps) and a channel multiplier on a
            // wide row, with row and column tails.
            ([1, 3, 9, 40], 7, 1, 1, [3, 3, 3, 3], 1),
            ([1, 2, 11, 37], 7, 2, 1, [3, 2, 3, 1], 1),
            ([1, 2, 6, 70], 3, 1, 1, [1, 1, 1, 1], 3),
            // A CNN's 28-wide stride-2 rows: the last 13 column pairs go
            // through one masked block, read past the row into the next
            // plane, whose values must not reach the padding.
            ([1, 3, 9, 28], 3, 2, 1, [1, 1, 1, 1], 1),
            // Whole blocks of sixteen channels (the blocked path, with
            // AVX-512): 7 × 7 and strided planes, dilation, uneven pads, rows
            // over sixteen wide, two images, and output counts that leave
            // every size of partial group.
            ([1, 32, 7, 7], 5, 1, 1, [2, 2, 2, 2], 1),
            ([2, 16, 14, 14], 5, 2, 1, [2, 2, 2, 2], 1),
            ([1, 48, 28, 28], 3, 2, 1, [1, 1, 1, 1], 1),
            ([1, 16, 9, 11], 3, 1, 2, [2, 1, 0, 2], 1),
            ([1, 16, 21, 37], 3, 2, 1, [0, 1, 1, 0], 1),
            ([1, 16, 5, 3], 3, 1, 1, [1, 1, 1, 1], 1),
            ([1, 16, 2, 2], 3, 2, 1, [1, 1, 1, 1], 1),
        ];
        for (xs, k, s, d, pads, mult) in cases {
            let window = Window {
                kernel: Some(vec![k, k]),
                strides: Some(vec![s, s]),
                dilations: Some(vec![d, d]),
                pads: Some(pads.to_vec()),
                auto_pad: AutoPad::NotSet,
                ceil_mode: false,
            };
            let geo = window.geometry(&xs[2..], &[k, k]).unwrap();
            let ws = [xs[1] * mult, 1, k, k];
            let mut x: Vec<f32> =
                (0..xs.iter().product::<usize>()).map(|i| ((i * 7) % 13) as f32 - 6.0).collect();
            let mut w: Vec<f32> = (0..ws.iter().product::<usize>())
                .map(|i| ((i * 5) % 11) as f32 * 0.25 - 1.0)
                .collect();
            let mut b: Vec<f32> = (0..ws[0]).map(|i| i as f32 * 0.5).collect();
            let want = naive(&x, xs, &w, ws, &b, xs[1], &geo);
            let os = [xs[0], ws[0], geo.output[0], geo.output[1]];
            let mut out = vec![f32::NAN; want.len()];
            let io = KernelIo {
                inputs: vec![view(&mut x, &xs), view(&mut w, &ws), view(&mut b, &[ws[0]])],
                outputs: vec![view(&mut out, &os)],
                values: vec![],
            };
            conv::<f32>(&io, &Conv { window, group: xs[1] }, None).unwrap();
            assert_eq!(out, want, "input {xs:?} kernel {k} stride {s} dilation {d} pads {pads:?}");
        }
    }
}
