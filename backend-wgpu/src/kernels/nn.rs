//! Softmax family and BatchNormalization (f32).

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::nn::{BatchNorm, Softmax};
use onyx_shaders::Shader;

use super::{Bind, Dispatch, GpuKernel, Grid, Io, Registry, row_workgroup, u32_of, unsupported};

/// Rows per softmax workgroup when rows are short: small workgroups suit
/// software GPUs, and two rows (64 invocations) keep real GPUs occupied.
const WG_ROWS: usize = 2;

struct SoftmaxKernel {
    op: Softmax,
}

impl GpuKernel for SoftmaxKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let (outer, len, inner) =
            self.op.layout(&x.shape).map_err(|e| EpError::Kernel(e.to_string()))?;
        let rows = outer * inner;
        if rows == 0 || len == 0 {
            return Ok(vec![]);
        }
        // A row gets LANES invocations, and a workgroup WG_ROWS rows.
        let lanes = row_workgroup(len) as usize;
        let wg = (lanes * WG_ROWS).min(256);
        let code = self.op.kind.code().code();
        Ok(vec![
            Dispatch::new(
                Shader::Softmax,
                vec![u32_of(rows)?, u32_of(len)?, u32_of(inner)?],
                &[Bind::In(0), Bind::Out(0)],
                Grid::Workgroups(rows.div_ceil(wg / lanes) as u64),
            )
            .with("OP", code as f64)
            .with("WG", wg as f64)
            .with("LANES", lanes as f64),
        ])
    }
}

struct BatchNormKernel {
    epsilon: f32,
}

impl GpuKernel for BatchNormKernel {
    fn dispatches(&self, io: &Io<'_>) -> Result<Vec<Dispatch>, EpError> {
        let x = io.input(0)?;
        let c = x.shape.get(1).copied().unwrap_or(1);
        let inner: usize = x.shape.get(2..).map_or(1, |s| s.iter().product());
        let n = x.numel();
        if n == 0 {
            return Ok(vec![]);
        }
        let params = vec![u32_of(n)?, u32_of(c)?, u32_of(inner)?, self.epsilon.to_bits()];
        Ok(vec![Dispatch::new(
            Shader::BatchNorm,
            params,
            &[Bind::In(0), Bind::In(1), Bind::In(2), Bind::In(3), Bind::In(4), Bind::Out(0)],
            Grid::Invocations(n as u64),
        )])
    }
}

pub(crate) fn f32_only(s: &KernelSpec<'_>, slots: usize) -> Result<(), EpError> {
    for i in 0..slots {
        if let Some(d) = s.input_dtypes.get(i).copied().flatten() {
            if d != DType::F32 {
                return Err(unsupported(&s.node.op_type, d));
            }
        }
    }
    Ok(())
}

/// Registers the softmax family and BatchNormalization.
pub(crate) fn register_all(r: &mut Registry) {
    for name in ["Softmax", "LogSoftmax", "Hardmax"] {
        r.register(name, |s| {
            f32_only(s, 1)?;
            Ok(Box::new(SoftmaxKernel { op: s.op_as::<Softmax>()?.clone() }))
        });
    }
    r.register("BatchNormalization", |s| {
        f32_only(s, 5)?;
        let _ = s.input_dtype(0)?;
        Ok(Box::new(BatchNormKernel { epsilon: s.op_as::<BatchNorm>()?.epsilon }))
    });
}
