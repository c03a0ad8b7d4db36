//! Softmax family, LayerNormalization and BatchNormalization (f32).

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::ops::nn::{BatchNorm, LayerNorm, Softmax, SoftmaxKind};
use onyx_shaders::Shader;

use super::{
    Bind, Dispatch, GpuKernel, Grid, Io, Registry, in_dtype, op, out_dtype, u32_of, unsupported,
};

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
        let code = match self.op.kind {
            SoftmaxKind::Softmax => 0,
            SoftmaxKind::LogSoftmax => 1,
            SoftmaxKind::Hardmax => 2,
        };
        Ok(vec![
            Dispatch::new(
                Shader::Softmax,
                vec![u32_of(rows)?, u32_of(len)?, u32_of(inner)?],
                &[Bind::In(0), Bind::Out(0)],
                Grid::Workgroups(rows as u64),
            )
            .with("OP", code as f64),
        ])
    }
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
        let scale = io.input(1)?.numel();
        let bias = if io.has_input(2) { io.input(2)?.numel() } else { 0 };
        for (what, n) in [("scale", scale), ("bias", bias)] {
            if n != 0 && n != 1 && n != len {
                return Err(EpError::Unsupported(format!(
                    "LayerNormalization {what} of {n} elements for rows of {len} on wgpu"
                )));
            }
        }
        let stats = io.has_output(1) || io.has_output(2);
        let out = |o: usize| if io.has_output(o) { Bind::Out(o) } else { Bind::Dummy };
        let params = vec![
            u32_of(rows)?,
            u32_of(len)?,
            self.op.epsilon.to_bits(),
            u32_of(scale)?,
            u32_of(bias)?,
        ];
        let bias_bind = if bias > 0 { Bind::In(2) } else { Bind::In(1) };
        // Unrequested stats still have bindings in the layout: throwaway buffers fill them.
        let d = Dispatch::new(
            Shader::LayerNorm,
            params,
            &[Bind::In(0), Bind::In(1), bias_bind, Bind::Out(0), out(1), out(2)],
            Grid::Workgroups(rows as u64),
        )
        .with("STATS", stats as u8 as f64);
        Ok(vec![d])
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

fn f32_only(s: &KernelSpec<'_>, slots: usize) -> Result<(), EpError> {
    for i in 0..slots {
        if let Some(d) = s.input_dtypes.get(i).copied().flatten() {
            if d != DType::F32 {
                return Err(unsupported(&s.node.op_type, d));
            }
        }
    }
    Ok(())
}

/// Registers the nn kernels.
pub(crate) fn register_all(r: &mut Registry) {
    for name in ["Softmax", "LogSoftmax", "Hardmax"] {
        r.register(name, |s| {
            f32_only(s, 1)?;
            Ok(Box::new(SoftmaxKernel { op: op::<Softmax>(s)?.clone() }))
        });
    }
    r.register("LayerNormalization", |s| {
        f32_only(s, 3)?;
        for o in 1..3 {
            if let Ok(d) = out_dtype(s, o) {
                if d != DType::F32 {
                    return Err(unsupported("LayerNormalization stats", d));
                }
            }
        }
        Ok(Box::new(LayerNormKernel { op: op::<LayerNorm>(s)?.clone() }))
    });
    r.register("BatchNormalization", |s| {
        f32_only(s, 5)?;
        let _ = in_dtype(s, 0)?;
        Ok(Box::new(BatchNormKernel { epsilon: op::<BatchNorm>(s)?.epsilon }))
    });
}
