//! The layer-normalization family (f32): LayerNormalization, its RMS forms,
//! and onnxruntime's SkipLayerNormalization and
//! SkipSimplifiedLayerNormalization as an Add (or two) and a normalization.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::norm::{LayerNorm, SkipNorm};
use onyx_shaders::Shader;

use super::elementwise::add_f32;
use super::nn::f32_only;
use super::{Bind, Dispatch, GpuKernel, Grid, Io, Registry, u32_of, unsupported};

/// One normalization dispatch over rows of `len` read from `x` (or, when `x`
/// is the output itself, in place), with optional statistics outputs.
struct Norm {
    rows: usize,
    len: usize,
    epsilon: f32,
    rms: bool,
    x: Bind,
    scale: (Bind, usize),
    bias: Option<(Bind, usize)>,
    mean: Option<Bind>,
    inv: Option<Bind>,
}

impl Norm {
    fn dispatch(&self) -> Result<Dispatch, EpError> {
        for n in [Some(self.scale.1), self.bias.map(|b| b.1)].into_iter().flatten() {
            if n != 1 && n != self.len {
                return Err(EpError::Unsupported(format!(
                    "a normalization parameter of {n} elements for rows of {} on wgpu",
                    self.len
                )));
            }
        }
        let (bias_bind, bias_len) = self.bias.unwrap_or((self.scale.0, 0));
        let params = vec![
            u32_of(self.rows)?,
            u32_of(self.len)?,
            self.epsilon.to_bits(),
            u32_of(self.scale.1)?,
            u32_of(bias_len)?,
        ];
        let in_place = self.x == Bind::Out(0);
        // A binding the shader never reads (in place) still needs a buffer: the scale.
        let x = if in_place { self.scale.0 } else { self.x };
        let stats = self.mean.is_some() || self.inv.is_some();
        // Unrequested stats still have bindings in the layout: throwaway buffers fill them.
        let binds = [
            x,
            self.scale.0,
            bias_bind,
            Bind::Out(0),
            self.mean.unwrap_or(Bind::Dummy),
            self.inv.unwrap_or(Bind::Dummy),
        ];
        Ok(Dispatch::new(Shader::LayerNorm, params, &binds, Grid::Workgroups(self.rows as u64))
            .with("STATS", stats as u8 as f64)
            .with("RMS", self.rms as u8 as f64)
            .with("INPLACE", in_place as u8 as f64)
            .with("WG", super::row_workgroup(self.len) as f64))
    }
}

fn output(io: &Io<'_>, o: usize) -> Option<Bind> {
    io.has_output(o).then_some(Bind::Out(o))
}

struct LayerNormKernel {
    op: LayerNorm,
}

impl GpuKernel for LayerNormKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let axis = self.op.axis(x.shape.len()).map_err(|e| EpError::Kernel(e.to_string()))?;
        let len: usize = x.shape[axis..].iter().product();
        let rows = x.numel().checked_div(len).unwrap_or(0);
        if rows == 0 {
            return Ok(vec![]);
        }
        let bias = (!self.op.rms && io.has_input(2))
            .then(|| (Bind::In(2), io.input(2).map_or(0, |b| b.numel())));
        // The RMS forms have one statistic, the inverse RMS, as output 1.
        let (mean, inv) =
            if self.op.rms { (None, output(io, 1)) } else { (output(io, 1), output(io, 2)) };
        let norm = Norm {
            rows,
            len,
            epsilon: self.op.epsilon,
            rms: self.op.rms,
            x: Bind::In(0),
            scale: (Bind::In(1), io.input(1)?.numel()),
            bias,
            mean,
            inv,
        };
        Ok(vec![norm.dispatch()?])
    }
}

struct SkipNormKernel {
    op: SkipNorm,
}

impl GpuKernel for SkipNormKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (x, skip) = (io.input(0)?, io.input(1)?);
        SkipNorm::check_skip(&x.shape, &skip.shape).map_err(|e| EpError::Kernel(e.to_string()))?;
        let len = x.shape.last().copied().unwrap_or(1);
        let rows = x.numel().checked_div(len).unwrap_or(0);
        if rows == 0 {
            return Ok(vec![]);
        }
        // The sum input + skip + bias goes to its own output when asked for,
        // else to the output, which is then normalized in place.
        let sum = output(io, 3).unwrap_or(Bind::Out(0));
        let mut out =
            vec![add_f32(&x.shape, (&x.shape, Bind::In(0)), (&skip.shape, Bind::In(1)), sum)?];
        let (beta, bias) = self.op.slots();
        if io.has_input(bias) {
            out.push(add_f32(
                &x.shape,
                (&x.shape, sum),
                (&io.input(bias)?.shape, Bind::In(bias)),
                sum,
            )?);
        }
        let beta = beta.filter(|&b| io.has_input(b));
        let norm = Norm {
            rows,
            len,
            epsilon: self.op.epsilon,
            rms: self.op.simplified,
            x: sum,
            scale: (Bind::In(2), io.input(2)?.numel()),
            bias: beta.map(|b| (Bind::In(b), io.input(b).map_or(0, |t| t.numel()))),
            mean: output(io, 1),
            inv: output(io, 2),
        };
        out.push(norm.dispatch()?);
        Ok(out)
    }
}

/// f32 inputs, and f32 statistics outputs where requested.
fn f32_io(s: &KernelSpec<'_>, inputs: usize) -> Result<(), EpError> {
    f32_only(s, inputs)?;
    for o in 1..s.output_dtypes.len() {
        if let Ok(d) = s.output_dtype(o) {
            if d != DType::F32 {
                return Err(unsupported(&format!("{} output {o}", s.node.op_type), d));
            }
        }
    }
    Ok(())
}

/// Registers the normalization family.
pub(crate) fn register_all(r: &mut Registry) {
    for name in ["LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"] {
        r.register(name, |s| {
            f32_io(s, 3)?;
            Ok(Box::new(LayerNormKernel { op: s.op_as::<LayerNorm>()?.clone() }))
        });
    }
    for name in ["SkipLayerNormalization", "SkipSimplifiedLayerNormalization"] {
        r.register_in(MICROSOFT_DOMAIN, name, |s| {
            f32_io(s, 5)?;
            Ok(Box::new(SkipNormKernel { op: s.op_as::<SkipNorm>()?.clone() }))
        });
    }
}
