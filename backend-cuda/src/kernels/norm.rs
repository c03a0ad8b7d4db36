//! The layer-normalization family: LayerNormalization, its RMS forms
//! (RMSNormalization, SimplifiedLayerNormalization) and com.microsoft's
//! SkipLayerNormalization and SkipSimplifiedLayerNormalization, each one
//! launch of `layernorm_*` in norm.cu (the skip, the bias and the
//! `input_skip_bias_sum` output fused in).
//!
//! Statistics outputs are written in the dtype each output *declares* (the
//! spec's output dtypes), not the input's: a float32 Mean/InvStdDev pair on a
//! bf16 input is float32, and stats declared in the activation dtype are
//! written in that dtype.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::norm::{LayerNorm, SkipNorm};
use onyx_kernels::Kernel;

use super::elementwise::entry;
use super::nn::{WARP_ROW, WarpEntries, aligned, kernel_err, row_grid, warp_grid, warp_plan};
use super::{CudaKernel, Io, Registry, is_float, unsupported};
use crate::gpu::{Args, Gpu};

/// `NormArgs` in norm.cu.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default)]
struct NormArgs {
    rows: i64,
    len: i64,
    skip_n: i64,
    bias_n: i64,
    gamma_n: i64,
    beta_n: i64,
    eps: f32,
    rms: i32,
    vec: i32,
    mean_dt: i32,
    inv_dt: i32,
    lanes: i32,
}

// SAFETY: plain `#[repr(C)]` data matching `struct NormArgs` in norm.cu.
unsafe impl cudarc::driver::DeviceRepr for NormArgs {}

/// Device addresses of one normalization (0 where absent).
#[derive(Default)]
struct Ptrs {
    x: u64,
    skip: u64,
    bias: u64,
    gamma: u64,
    beta: u64,
    y: u64,
    sum: u64,
    mean: u64,
    inv: u64,
}

/// Whether a parameter of shape `p` broadcasts onto the normalized dims
/// `dims` as their trailing part (leading ones ignored), so that element `i`
/// of a row uses parameter element `i % numel(p)`.
fn param_fits(p: &[usize], dims: &[usize]) -> bool {
    let first = p.iter().position(|&d| d != 1).unwrap_or(p.len());
    let tail = &p[first..];
    tail.len() <= dims.len() && dims[dims.len() - tail.len()..] == *tail
}

/// The element count of parameter input `i`, checked against the normalized dims.
fn param(io: &Io<'_>, i: usize, dims: &[usize]) -> Result<(u64, i64), EpError> {
    let p = io.input(i)?;
    if !param_fits(&p.shape, dims) {
        return Err(EpError::Kernel(format!(
            "a normalization parameter of shape {:?} for normalized dims {dims:?}",
            p.shape
        )));
    }
    Ok((io.in_ptr(i)?, p.numel() as i64))
}

/// The entry points of one dtype and the launch of one normalization.
struct Entries {
    dtype: DType,
    warp: WarpEntries,
    block: &'static str,
    /// Declared dtypes of the outputs, by slot.
    declared: Vec<Option<DType>>,
}

impl Entries {
    /// Checks the dtypes (float input; parameters `params` in the input's
    /// dtype; float statistics) and names the entry points.
    fn new(spec: &KernelSpec<'_>, params: &[usize]) -> Result<Self, EpError> {
        let dtype = spec.input_dtype(0)?;
        if !is_float(dtype) {
            return Err(unsupported(&spec.node.op_type, dtype));
        }
        for &i in params {
            if let Some(d) = spec.input_dtypes.get(i).copied().flatten() {
                if d != dtype {
                    return Err(unsupported(&format!("{} input {i}", spec.node.op_type), d));
                }
            }
        }
        let declared: Vec<Option<DType>> =
            (0..spec.output_dtypes.len()).map(|o| spec.output_dtype(o).ok()).collect();
        // Statistics in a dtype the kernels cannot write: let the planner fall back.
        for d in declared.iter().skip(1).flatten() {
            if !is_float(*d) {
                return Err(unsupported(&format!("{} statistics", spec.node.op_type), *d));
            }
        }
        Ok(Entries {
            dtype,
            warp: WarpEntries::new("layernorm_warp", dtype)?,
            block: entry("layernorm_block", dtype)?,
            declared,
        })
    }

    /// Statistics output `o`: its address and ONNX dtype code, (0, 0) when not requested.
    fn stat(&self, io: &Io<'_>, o: usize, rows: usize) -> Result<(u64, i32), EpError> {
        if !io.has_output(o) {
            return Ok((0, 0));
        }
        let t = io.output(o)?;
        let d = self.declared.get(o).copied().flatten().unwrap_or(t.dtype);
        if d != t.dtype || !is_float(d) || t.numel() != rows {
            return Err(EpError::Kernel(format!(
                "statistics output {o}: {} × {} for {d} × {rows}",
                t.dtype,
                t.numel()
            )));
        }
        Ok((io.out_ptr(o)?, d.to_onnx()))
    }

    /// Checks that output `o` holds `n` elements and returns its address (0 when not requested).
    fn full(io: &Io<'_>, o: usize, n: usize) -> Result<u64, EpError> {
        if !io.has_output(o) {
            return Ok(0);
        }
        if io.output(o)?.numel() != n {
            return Err(EpError::Kernel(format!("output {o} does not match the input's size")));
        }
        io.out_ptr(o)
    }

    /// Queues one normalization: a warp kernel for rows up to [`WARP_ROW`],
    /// else the block kernel.
    fn run(&self, gpu: &Gpu, mut a: NormArgs, p: &Ptrs) -> Result<(), EpError> {
        let (rows, len) = (a.rows as usize, a.len as usize);
        if rows == 0 || len == 0 {
            return Ok(());
        }
        if p.y == 0 {
            return Err(EpError::Kernel("output 0 is required".into()));
        }
        let (name, cfg) = if len <= WARP_ROW {
            // 16-byte accesses need every row-wide buffer aligned; parameters
            // narrower than a row are read element by element anyway.
            let wide = |n: i64, ptr: u64| if n == a.len { ptr } else { 0 };
            let ok = aligned(&[
                p.x,
                p.y,
                p.sum,
                if a.skip_n > 1 { p.skip } else { 0 },
                wide(a.bias_n, p.bias),
                wide(a.gamma_n, p.gamma),
                wide(a.beta_n, p.beta),
            ]);
            let plan = warp_plan(len, self.dtype.bits() / 8, ok);
            a.vec = plan.vec as i32;
            a.lanes = plan.lanes as i32;
            (self.warp.get(plan.slots), warp_grid(gpu, rows, plan.lanes))
        } else {
            let (cfg, cached) = row_grid(gpu, rows, len, self.dtype);
            a.vec = cached as i32;
            (self.block, cfg)
        };
        let f = gpu.function(Kernel::Norm, name)?;
        let args = Args::new()
            .push(a)
            .push(p.x)
            .push(p.skip)
            .push(p.bias)
            .push(p.gamma)
            .push(p.beta)
            .push(p.y)
            .push(p.sum)
            .push(p.mean)
            .push(p.inv);
        // SAFETY: matches `layernorm_*(NormArgs, const T* x, skip, bias, gamma,
        // beta, T* y, sum, void* mean, inv)`. x, y and sum hold rows × len
        // elements; skip (when skip_n > 1) a multiple of len, read at a
        // multiple of len below skip_n; each parameter n elements read at
        // `i % n`; the statistics `rows` elements of their dtype; absent
        // buffers are 0 and never touched (their counts are 0 or their dtype
        // code is 0). Row-wide buffers are 16-byte aligned when `vec` is set.
        unsafe { args.launch(gpu, &f, cfg) }
    }
}

/// LayerNormalization, RMSNormalization and SimplifiedLayerNormalization.
struct LayerNormKernel {
    op: LayerNorm,
    run: Entries,
}

impl CudaKernel for LayerNormKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let x = io.input(0)?;
        let axis = self.op.axis(x.shape.len()).map_err(kernel_err)?;
        let dims = &x.shape[axis..];
        let len: usize = dims.iter().product();
        let rows = x.numel().checked_div(len).unwrap_or(0);
        if rows == 0 {
            return Ok(());
        }
        let (gamma, gamma_n) = param(io, 1, dims)?;
        let (beta, beta_n) =
            if !self.op.rms && io.has_input(2) { param(io, 2, dims)? } else { (0, 0) };
        // The RMS forms have one statistic, the inverse RMS, as output 1.
        let (mean, inv) = if self.op.rms {
            ((0, 0), self.run.stat(io, 1, rows)?)
        } else {
            (self.run.stat(io, 1, rows)?, self.run.stat(io, 2, rows)?)
        };
        let args = NormArgs {
            rows: rows as i64,
            len: len as i64,
            gamma_n,
            beta_n,
            eps: self.op.epsilon,
            rms: self.op.rms as i32,
            mean_dt: mean.1,
            inv_dt: inv.1,
            ..Default::default()
        };
        let ptrs = Ptrs {
            x: io.in_ptr(0)?,
            gamma,
            beta,
            y: Entries::full(io, 0, x.numel())?,
            mean: mean.0,
            inv: inv.0,
            ..Default::default()
        };
        self.run.run(gpu, args, &ptrs)
    }

    /// Each row is read whole before any of it is written, by the same threads.
    fn in_place(&self) -> bool {
        true
    }
}

fn build_layer_norm(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<LayerNorm>()?.clone();
    Ok(Box::new(LayerNormKernel { op, run: Entries::new(spec, &[1, 2])? }))
}

/// SkipLayerNormalization and SkipSimplifiedLayerNormalization: outputs the
/// result, `mean` (0 for the simplified form), `inv_std_var` and
/// `input_skip_bias_sum`, each when requested.
struct SkipNormKernel {
    op: SkipNorm,
    run: Entries,
}

impl CudaKernel for SkipNormKernel {
    fn launch(&self, gpu: &Gpu, io: &Io<'_>) -> Result<(), EpError> {
        let (x, skip) = (io.input(0)?, io.input(1)?);
        SkipNorm::check_skip(&x.shape, &skip.shape).map_err(kernel_err)?;
        let len = *x
            .shape
            .last()
            .ok_or_else(|| EpError::Kernel("SkipLayerNormalization of a scalar".into()))?;
        let rows = x.numel().checked_div(len).unwrap_or(0);
        let skip_n = skip.numel();
        if rows == 0 || skip_n == 0 {
            return Ok(());
        }
        if skip_n != 1 && skip_n % len != 0 {
            return Err(EpError::Kernel(format!("skip {:?} for rows of {len}", skip.shape)));
        }
        let dims = [len];
        let (beta_slot, bias_slot) = self.op.slots();
        let (gamma, gamma_n) = param(io, 2, &dims)?;
        let beta_slot = beta_slot.filter(|&b| io.has_input(b));
        let (beta, beta_n) = beta_slot.map_or(Ok((0, 0)), |b| param(io, b, &dims))?;
        let (bias, bias_n) =
            if io.has_input(bias_slot) { param(io, bias_slot, &dims)? } else { (0, 0) };
        let mean = self.run.stat(io, 1, rows)?;
        let inv = self.run.stat(io, 2, rows)?;
        let args = NormArgs {
            rows: rows as i64,
            len: len as i64,
            skip_n: skip_n as i64,
            bias_n,
            gamma_n,
            beta_n,
            eps: self.op.epsilon,
            rms: self.op.simplified as i32,
            mean_dt: mean.1,
            inv_dt: inv.1,
            ..Default::default()
        };
        let ptrs = Ptrs {
            x: io.in_ptr(0)?,
            skip: io.in_ptr(1)?,
            bias,
            gamma,
            beta,
            y: Entries::full(io, 0, x.numel())?,
            sum: Entries::full(io, 3, x.numel())?,
            mean: mean.0,
            inv: inv.0,
        };
        self.run.run(gpu, args, &ptrs)
    }

    /// Each row is read whole (into registers or the row cache, or by the
    /// thread that then writes each element) before it is written.
    fn in_place(&self) -> bool {
        true
    }
}

fn build_skip_norm(spec: &KernelSpec<'_>) -> Result<Box<dyn CudaKernel>, EpError> {
    let op = spec.op_as::<SkipNorm>()?.clone();
    Ok(Box::new(SkipNormKernel { op, run: Entries::new(spec, &[1, 2, 3, 4])? }))
}

/// Registers the normalization family.
pub(crate) fn register_all(r: &mut Registry) {
    for name in ["LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"] {
        r.register(name, build_layer_norm);
    }
    for name in ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"] {
        r.register_in(MICROSOFT_DOMAIN, name, build_skip_norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_broadcast_as_the_trailing_part_of_the_normalized_dims() {
        assert!(param_fits(&[768], &[768]));
        assert!(param_fits(&[1, 768], &[768]));
        assert!(param_fits(&[1], &[768]));
        assert!(param_fits(&[], &[768]));
        assert!(param_fits(&[4], &[3, 4]));
        assert!(param_fits(&[3, 4], &[3, 4]));
        assert!(!param_fits(&[3, 1], &[3, 4]));
        assert!(!param_fits(&[767], &[768]));
        assert!(!param_fits(&[2, 768], &[768]));
    }
}
