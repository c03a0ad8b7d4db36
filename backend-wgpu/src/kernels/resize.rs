//! Resize and Upsample (f32): the core plans per-axis tap tables on the host,
//! which travel in the params block; the shader sums the weighted taps.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::resize::Resize;
use onyx_shaders::Shader;

use super::unsupported;
use super::{Bind, Dispatch, GpuKernel, Grid, Io, Registry, pad8, strides, u32_of};

/// Words of the fixed part of the params, before the tables.
const HEADER: usize = 35;

struct ResizeKernel {
    op: Resize,
}

impl GpuKernel for ResizeKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let args = self.op.args(
            |i| io.has_value(i).then(|| io.floats(i).ok()).flatten(),
            |i| io.has_value(i).then(|| io.ints(i).ok()).flatten(),
        );
        let plan = self.op.plan(&x.shape, &args).map_err(|e| EpError::Kernel(e.to_string()))?;
        let n: usize = plan.output.iter().product();
        if n == 0 {
            return Ok(vec![]);
        }
        let taps: Vec<usize> = plan.axes.iter().map(|a| a.taps).collect();
        let mut tables = Vec::new();
        let mut offsets = Vec::new();
        for a in &plan.axes {
            offsets.push(HEADER + tables.len());
            tables.extend(&a.index);
            tables.extend(a.weight.iter().map(|w| w.to_bits()));
            tables.extend(a.outside.iter().map(|&o| o as u32));
        }
        let mut params = vec![u32_of(n)?, u32_of(plan.output.len())?];
        params.extend(pad8(&plan.output)?);
        params.extend(pad8(&strides(&x.shape))?);
        params.extend(pad8(&taps)?);
        params.extend(pad8(&offsets)?);
        params.push(self.op.extrapolation.to_bits());
        debug_assert_eq!(params.len(), HEADER);
        params.extend(tables);
        Ok(vec![Dispatch::new(
            Shader::Resize,
            params,
            &[Bind::In(0), Bind::Out(0)],
            Grid::Invocations(n as u64),
        )])
    }
}

/// Registers Resize and Upsample.
pub(crate) fn register_all(r: &mut Registry) {
    for name in ["Resize", "Upsample"] {
        r.register(name, |s: &KernelSpec<'_>| {
            let dtype = s.input_dtype(0)?;
            if dtype != DType::F32 {
                return Err(unsupported(&s.node.op_type, dtype));
            }
            Ok(Box::new(ResizeKernel { op: s.op_as::<Resize>()?.clone() }))
        });
    }
}
