//! Matrix products (MatMul, Gemm), convolution and pooling (f32).

use onyx_core::dtype::DType;
use onyx_core::ep::TensorArg;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::conv::{Conv, Geometry, Pool, PoolKind};
use onyx_core::ops::linalg::Gemm;
use onyx_core::shape::Dim;
use onyx_shaders::Shader;

use super::{Bind, Dispatch, GpuKernel, Grid, Io, Registry, u32_of, unsupported};

const TILE: usize = 128;

/// Output channels per group from which Conv runs as an implicit GEMM.
const GEMM_MIN_CHANNELS: usize = 8;

/// Below this many output channels per group a convolution runs directly,
/// four channels per invocation: the GEMM's 128-row tile would be at most a
/// quarter full (tiny_cnn's 16→16 channel 3×3 conv at 64×64 took 36 ms direct
/// against 83 ms as a GEMM on SwiftShader).
const GEMM_THIN_CHANNELS: usize = 32;

/// Pointwise convolutions with fewer output channels per group than this, or
/// fewer output positions than `GEMM_MIN_POSITIONS` (a 1×1 map after global
/// pooling: a GEMV), run directly too; the 128×128 tile would be at least
/// half empty.
const GEMM_MIN_POINTWISE_CHANNELS: usize = 64;
const GEMM_MIN_POSITIONS: usize = 32;

/// Batch dims of a matmul output, with A's and B's strides along them.
struct Batch {
    dims: Vec<usize>,
    a: Vec<usize>,
    b: Vec<usize>,
}

/// Batch dims (≤ 4) of a numpy matmul, with the strides of A and B per batch dim.
fn batch_layout(a: &[usize], b: &[usize], m: usize, n: usize, k: usize) -> Result<Batch, EpError> {
    let ba = &a[..a.len().saturating_sub(2)];
    let bb = &b[..b.len().saturating_sub(2)];
    let rank = ba.len().max(bb.len());
    if rank > 4 {
        return Err(EpError::Unsupported(format!("MatMul with {rank} batch dims on wgpu")));
    }
    let pad = |s: &[usize]| {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (pa, pb) = (pad(ba), pad(bb));
    let out: Vec<usize> = pa.iter().zip(&pb).map(|(&x, &y)| x.max(y)).collect();
    let strides = |dims: &[usize], matrix: usize| {
        let mut s = vec![0; rank];
        let mut acc = matrix;
        for d in (0..rank).rev() {
            s[d] = if dims[d] == 1 && out[d] != 1 { 0 } else { acc };
            acc *= dims[d];
        }
        s
    };
    let sa = strides(&pa, m * k);
    let sb = strides(&pb, k * n);
    Ok(Batch { dims: out, a: sa, b: sb })
}

fn pad4(v: &[usize]) -> Result<[u32; 4], EpError> {
    let mut out = [0u32; 4];
    for (o, &x) in out.iter_mut().zip(v) {
        *o = u32_of(x)?;
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn matmul(
    m: usize,
    n: usize,
    k: usize,
    batch: &[usize],
    sa: &[usize],
    sb: &[usize],
    alpha: f32,
    beta: f32,
    c: Option<(usize, usize)>,
    trans: (bool, bool),
) -> Result<Dispatch, EpError> {
    let batches: usize = batch.iter().product();
    let tiles_n = n.div_ceil(TILE);
    let groups = batches * m.div_ceil(TILE) * tiles_n;
    let mut params =
        vec![u32_of(m)?, u32_of(n)?, u32_of(k)?, u32_of(batches)?, u32_of(batch.len())?];
    params.extend(pad4(batch)?);
    params.extend(pad4(sa)?);
    params.extend(pad4(sb)?);
    params.extend([alpha.to_bits(), beta.to_bits()]);
    let (cr, cc) = c.unwrap_or((0, 0));
    params.extend([u32_of(cr)?, u32_of(cc)?, u32_of(tiles_n)?]);
    let c_bind = if c.is_some() { Bind::In(2) } else { Bind::In(0) };
    let d = Dispatch::new(
        Shader::MatMul,
        params,
        &[Bind::In(0), Bind::In(1), c_bind, Bind::Out(0)],
        Grid::Workgroups(groups as u64),
    )
    .with("TRANS_A", trans.0 as u8 as f64)
    .with("TRANS_B", trans.1 as u8 as f64)
    .with("HAS_C", c.is_some() as u8 as f64);
    // Without C, binding 3 still exists in the layout: A stands in, never read.
    Ok(d)
}

struct MatMulKernel;

impl GpuKernel for MatMulKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (a, b, y) = (io.input(0)?, io.input(1)?, io.output(0)?);
        if y.numel() == 0 {
            return Ok(vec![]);
        }
        let mut da = a.shape.clone();
        let mut db = b.shape.clone();
        if da.len() == 1 {
            da.insert(0, 1);
        }
        if db.len() == 1 {
            db.push(1);
        }
        let (m, k, n) = (da[da.len() - 2], da[da.len() - 1], db[db.len() - 1]);
        let batch = batch_layout(&da, &db, m, n, k)?;
        Ok(vec![matmul(m, n, k, &batch.dims, &batch.a, &batch.b, 1.0, 0.0, None, (false, false))?])
    }
}

struct GemmKernel {
    op: Gemm,
}

impl GpuKernel for GemmKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (a, b, y) = (io.input(0)?, io.input(1)?, io.output(0)?);
        let g = &self.op;
        let (m, k) = if g.trans_a { (a.shape[1], a.shape[0]) } else { (a.shape[0], a.shape[1]) };
        let n = if g.trans_b { b.shape[0] } else { b.shape[1] };
        if y.numel() == 0 {
            return Ok(vec![]);
        }
        // C broadcasts to [M, N]: a row stride and a column stride, 0 where broadcast.
        let c = if io.has_input(2) && g.beta != 0.0 {
            let cs = &io.input(2)?.shape;
            let dims: Vec<usize> = match cs.len() {
                0 => vec![1, 1],
                1 => vec![1, cs[0]],
                _ => cs.clone(),
            };
            let row = if dims[0] == 1 { 0 } else { dims[1] };
            let col = if dims[1] == 1 { 0 } else { 1 };
            Some((row, col))
        } else {
            None
        };
        Ok(vec![matmul(m, n, k, &[], &[], &[], g.alpha, g.beta, c, (g.trans_a, g.trans_b))?])
    }
}

struct ConvKernel {
    op: Conv,
}

/// Pads spatial values to 3 with `fill` in front (1-d and 2-d become 3-d).
fn front3(v: &[usize], fill: usize) -> Result<[u32; 3], EpError> {
    if v.len() > 3 {
        return Err(EpError::Unsupported(format!("{}-d convolution on wgpu", v.len())));
    }
    let mut out = [fill as u32; 3];
    let off = 3 - v.len();
    for (i, &x) in v.iter().enumerate() {
        out[off + i] = u32_of(x)?;
    }
    Ok(out)
}

impl ConvKernel {
    /// The convolution as an implicit GEMM on the matmul shader: per (image,
    /// group), weights [M/group, C/group * kernel] times the input's patches.
    /// A 1x1 kernel with unit strides and no padding is a plain batched matmul.
    fn gemm(
        &self,
        x: &TensorArg,
        w: &TensorArg,
        geo: &Geometry,
        bias: bool,
    ) -> Result<Dispatch, EpError> {
        let group = self.op.group;
        let (n_img, c_in, m_out) = (x.shape[0], x.shape[1], w.shape[0]);
        let (cg, mg) = (c_in / group, m_out / group);
        let ispatial: usize = x.shape[2..].iter().product();
        let kspatial: usize = geo.kernel.iter().product();
        let ospatial: usize = geo.output.iter().product();
        let k = cg * kspatial;
        let c = bias.then_some((1, 0));
        // A is the weights (input 1) and B the image (input 0).
        let swap = |mut d: Dispatch| {
            d.binds[0].1 = Bind::In(1);
            d.binds[1].1 = Bind::In(0);
            d
        };
        let pointwise = kspatial == 1
            && geo.strides.iter().all(|&s| s == 1)
            && geo.pads_begin.iter().all(|&p| p == 0)
            && group == 1;
        if pointwise {
            let d = matmul(
                mg,
                ospatial,
                k,
                &[n_img],
                &[0],
                &[c_in * ispatial],
                1.0,
                1.0,
                c,
                (false, false),
            )?;
            return Ok(swap(d));
        }
        let mut d = matmul(
            mg,
            ospatial,
            k,
            &[n_img, group],
            &[0, mg * k],
            &[c_in * ispatial, cg * ispatial],
            1.0,
            1.0,
            c,
            (false, false),
        )?;
        d.params.push(u32_of(group)?);
        d.params.extend(front3(&x.shape[2..], 1)?);
        d.params.extend(front3(&geo.kernel, 1)?);
        d.params.extend(front3(&geo.output, 1)?);
        d.params.extend(front3(&geo.strides, 1)?);
        d.params.extend(front3(&geo.pads_begin, 0)?);
        d.params.extend(front3(&geo.dilations, 1)?);
        Ok(swap(d).with("CONV", 1.0))
    }
}

impl GpuKernel for ConvKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (x, w, y) = (io.input(0)?, io.input(1)?, io.output(0)?);
        let dims: Vec<Dim> = w.shape.iter().map(|&d| Dim::Known(d)).collect();
        let kernel = self
            .op
            .kernel(Some(&dims))
            .map_err(|e| EpError::Kernel(e.to_string()))?
            .ok_or_else(|| EpError::Kernel("unknown kernel shape".into()))?;
        let geo = self
            .op
            .window
            .geometry(&x.shape[2..], &kernel)
            .map_err(|e| EpError::Kernel(e.to_string()))?;
        let n = y.numel();
        if n == 0 {
            return Ok(vec![]);
        }
        let bias = io.has_input(2);
        // Depthwise and other thin convolutions would waste most of a GEMM tile.
        let mg = w.shape[0] / self.op.group;
        let thin = mg < GEMM_THIN_CHANNELS;
        let pointwise = kernel.iter().all(|&k| k == 1)
            && geo.strides.iter().all(|&s| s == 1)
            && geo.pads_begin.iter().chain(&geo.pads_end).all(|&p| p == 0);
        let positions: usize = geo.output.iter().product();
        let skinny =
            positions < GEMM_MIN_POSITIONS || (pointwise && mg < GEMM_MIN_POINTWISE_CHANNELS);
        if mg >= GEMM_MIN_CHANNELS && !thin && !skinny && x.shape.len() <= 5 {
            return Ok(vec![self.gemm(x, w, &geo, bias)?]);
        }
        // Four output channels per invocation where a group's channels allow.
        let ocb = if mg % 4 == 0 { 4 } else { 1 };
        let invocations = n / ocb;
        let mut params = vec![
            u32_of(invocations)?,
            u32_of(x.shape[0])?,
            u32_of(x.shape[1])?,
            u32_of(w.shape[0])?,
            u32_of(self.op.group)?,
        ];
        params.extend(front3(&x.shape[2..], 1)?);
        params.extend(front3(&kernel, 1)?);
        params.extend(front3(&geo.output, 1)?);
        params.extend(front3(&geo.strides, 1)?);
        params.extend(front3(&geo.pads_begin, 0)?);
        params.extend(front3(&geo.dilations, 1)?);
        let b = if bias { Bind::In(2) } else { Bind::In(1) };
        Ok(vec![
            Dispatch::new(
                Shader::Conv,
                params,
                &[Bind::In(0), Bind::In(1), b, Bind::Out(0)],
                Grid::Invocations(invocations as u64),
            )
            .with("HAS_BIAS", bias as u8 as f64)
            .with("POINTWISE", pointwise as u8 as f64)
            .with("OCB", ocb as f64),
        ])
    }
}

struct PoolKernel {
    op: Pool,
}

impl GpuKernel for PoolKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (x, y) = (io.input(0)?, io.output(0)?);
        let geo = self
            .op
            .window
            .geometry(&x.shape[2..], self.op.kernel())
            .map_err(|e| EpError::Kernel(e.to_string()))?;
        let n = y.numel();
        if n == 0 {
            return Ok(vec![]);
        }
        let mut params = vec![u32_of(n)?];
        params.extend(front3(&x.shape[2..], 1)?);
        params.extend(front3(&geo.kernel, 1)?);
        params.extend(front3(&geo.output, 1)?);
        params.extend(front3(&geo.strides, 1)?);
        params.extend(front3(&geo.pads_begin, 0)?);
        params.extend(front3(&geo.dilations, 1)?);
        params.extend(front3(&geo.pads_end, 0)?);
        let code = self.op.kind.code().code();
        let include_pad = matches!(self.op.kind, PoolKind::Average { count_include_pad: true });
        params.extend([include_pad as u32, (self.op.storage_order == 1) as u32]);
        let indices = io.has_output(1);
        let idx = if indices { Bind::Out(1) } else { Bind::Dummy };
        Ok(vec![
            Dispatch::new(
                Shader::Pool,
                params,
                &[Bind::In(0), Bind::Out(0), idx],
                Grid::Invocations(n as u64),
            )
            .with("OP", code as f64)
            .with("INDICES", indices as u8 as f64),
        ])
    }
}

fn f32_inputs(s: &KernelSpec<'_>) -> Result<(), EpError> {
    for d in s.input_dtypes.iter().flatten() {
        if *d != DType::F32 {
            return Err(unsupported(&s.node.op_type, *d));
        }
    }
    Ok(())
}

/// Registers MatMul, Gemm, Conv and the window pools.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("MatMul", |s| {
        f32_inputs(s)?;
        Ok(Box::new(MatMulKernel))
    });
    r.register("Gemm", |s| {
        f32_inputs(s)?;
        Ok(Box::new(GemmKernel { op: s.op_as::<Gemm>()?.clone() }))
    });
    r.register("Conv", |s| {
        f32_inputs(s)?;
        Ok(Box::new(ConvKernel { op: s.op_as::<Conv>()?.clone() }))
    });
    for name in ["MaxPool", "AveragePool"] {
        r.register(name, |s| {
            if s.input_dtype(0)? != DType::F32 {
                return Err(unsupported(&s.node.op_type, s.input_dtype(0)?));
            }
            Ok(Box::new(PoolKernel { op: s.op_as::<Pool>()?.clone() }))
        });
    }
}
