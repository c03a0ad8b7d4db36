//! GatherElements and GatherND on the gather shader.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::indexing::{GatherElements, GatherNd};
use onyx_core::shape::normalize_axis;
use onyx_shaders::Shader;

use super::movement::width_of;
use super::{Bind, Dispatch, GpuKernel, Grid, Io, Registry, in_dtype, op, pad8, strides, u32_of};
use super::{unsupported, words};

/// Which gather, with its attribute.
#[derive(Clone, Copy)]
enum Mode {
    Elements { axis: i64 },
    Nd { batch_dims: usize },
}

struct IndexKernel {
    mode: Mode,
    width: u32,
    dtype: DType,
    idx64: bool,
}

impl GpuKernel for IndexKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let (x, idx, y) = (io.input(0)?, io.input(1)?, io.output(0)?);
        let n = y.numel();
        if n == 0 {
            return Ok(vec![]);
        }
        let mut params = vec![u32_of(n)?];
        let mode = match self.mode {
            Mode::Elements { axis } => {
                let axis = normalize_axis(axis, x.shape.len())
                    .ok_or_else(|| EpError::Kernel(format!("bad axis {axis}")))?;
                params.push(u32_of(idx.shape.len())?);
                params.extend(pad8(&idx.shape)?);
                params.extend(pad8(&strides(&x.shape))?);
                params.extend([u32_of(axis)?, u32_of(x.shape[axis])?]);
                1
            }
            Mode::Nd { batch_dims: b } => {
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
        };
        Ok(vec![
            Dispatch::new(
                Shader::Gather,
                params,
                &[Bind::In(0), Bind::In(1), Bind::Out(0)],
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
    let idx64 = match in_dtype(spec, 1)? {
        DType::I64 => true,
        DType::I32 => false,
        d => return Err(unsupported(&spec.node.op_type, d)),
    };
    Ok(Box::new(IndexKernel { mode, width, dtype, idx64 }))
}

/// Registers GatherElements and GatherND.
pub(crate) fn register_all(r: &mut Registry) {
    r.register("GatherElements", |s| {
        build(s, Mode::Elements { axis: op::<GatherElements>(s)?.axis })
    });
    r.register("GatherND", |s| build(s, Mode::Nd { batch_dims: op::<GatherNd>(s)?.batch_dims }));
}
