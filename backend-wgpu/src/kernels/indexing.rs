//! GatherElements, GatherND and Pad on the gather shader.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::indexing::{GatherElements, GatherNd};
use onyx_core::ops::pad::Pad;
use onyx_core::shape::normalize_axis;
use onyx_shaders::Shader;

use super::movement::width_of;
use super::{Bind, Dispatch, GpuKernel, Grid, Io, Registry, pad8, strides, u32_of};
use super::{unsupported, words};

/// Which gather, with its attribute.
#[derive(Clone)]
enum Mode {
    Elements { axis: i64 },
    Nd { batch_dims: usize },
    Pad(Pad),
}

struct IndexKernel {
    mode: Mode,
    width: u32,
    dtype: DType,
    idx64: bool,
}

impl GpuKernel for IndexKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (x, y) = (io.input(0)?, io.output(0)?);
        let n = y.numel();
        if n == 0 {
            return Ok(vec![]);
        }
        let mut params = vec![u32_of(n)?];
        let mode = match &self.mode {
            &Mode::Elements { axis } => {
                let axis = normalize_axis(axis, x.shape.len())
                    .ok_or_else(|| EpError::Kernel(format!("bad axis {axis}")))?;
                let idx = io.input(1)?;
                params.push(u32_of(idx.shape.len())?);
                params.extend(pad8(&idx.shape)?);
                params.extend(pad8(&strides(&x.shape))?);
                params.extend([u32_of(axis)?, u32_of(x.shape[axis])?]);
                1
            }
            &Mode::Nd { batch_dims: b } => {
                let idx = io.input(1)?;
                let q = idx.shape.len();
                let rk = idx.shape[q - 1];
                let ds = strides(&x.shape);
                params.extend([
                    u32_of(x.shape[b + rk..].iter().product())?,
                    u32_of(rk)?,
                    u32_of(idx.shape[b..q - 1].iter().product())?,
                    u32_of(x.shape[b..].iter().product())?,
                ]);
                params.extend(pad8(&x.shape[b..b + rk])?);
                params.extend(pad8(&ds[b..b + rk])?);
                2
            }
            Mode::Pad(pad) => {
                let rank = x.shape.len();
                let opt = |i: usize| io.has_value(i).then(|| io.ints(i)).transpose();
                let (pads, axes) =
                    if pad.attrs.is_some() { (None, None) } else { (opt(1)?, opt(3)?) };
                let constant = io.values.get(2).and_then(Option::as_ref);
                let launch = pad
                    .launch(rank, self.dtype, pads.as_deref(), axes.as_deref(), constant)
                    .map_err(|e| EpError::Kernel(e.to_string()))?;
                let (pads, mut fill) = (launch.pads, launch.fill);
                fill.resize(8, 0);
                params.push(u32_of(rank)?);
                params.extend(pad8(&y.shape)?);
                params.extend(pad8(&x.shape)?);
                let before: Vec<i64> = pads.iter().map(|p| p.0).collect();
                params.extend(super::pad8_signed(&before)?);
                params.push(pad.mode.code());
                params.extend([
                    u32::from_le_bytes([fill[0], fill[1], fill[2], fill[3]]),
                    u32::from_le_bytes([fill[4], fill[5], fill[6], fill[7]]),
                ]);
                3
            }
        };
        // Pad has no index tensor: its input stands in for the unused binding.
        let indices = if mode == 3 { Bind::In(0) } else { Bind::In(1) };
        Ok(vec![
            Dispatch::new(
                Shader::Gather,
                params,
                &[Bind::In(0), indices, Bind::Out(0)],
                Grid::Invocations(words(self.dtype, n)),
            )
            .with("W", self.width)
            .with("IDX64", self.idx64 as u8 as f64)
            .with("MODE", mode as f64),
        ])
    }
}

fn build(spec: &KernelSpec<'_>, mode: Mode) -> Result<Box<dyn GpuKernel>, EpError> {
    let (width, dtype) = width_of(spec, &spec.node.op_type)?;
    if let Mode::Pad(_) = mode {
        return Ok(Box::new(IndexKernel { mode, width, dtype, idx64: false }));
    }
    let idx64 = match spec.input_dtype(1)? {
        DType::I64 => true,
        DType::I32 => false,
        d => return Err(unsupported(&spec.node.op_type, d)),
    };
    Ok(Box::new(IndexKernel { mode, width, dtype, idx64 }))
}

/// Registers GatherElements, GatherND and Pad.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("GatherElements", |s| {
        build(s, Mode::Elements { axis: s.op_as::<GatherElements>()?.axis })
    });
    r.register("GatherND", |s| {
        build(s, Mode::Nd { batch_dims: s.op_as::<GatherNd>()?.batch_dims })
    });
    r.register("Pad", |s| build(s, Mode::Pad(s.op_as::<Pad>()?.clone())));
}
