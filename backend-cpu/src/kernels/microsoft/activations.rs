//! The Gelu family and BiasAdd in f32, written in the input's float dtype
//! (one rounding, as onnxruntime's f32 kernels give on half inputs).

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::MICROSOFT_DOMAIN;
use onyx_core::ops::microsoft::activations::{Activation, BiasActivation};
use rayon::prelude::*;

use crate::par::Loop;

use super::super::dispatch::{AsF64, floats};
use super::super::nn::output_from_input;
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::{kernel_err, load_opt};

/// `√(2/π)`.
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// The activation of one (biased) value.
#[inline]
pub(crate) fn activate(a: Activation, x: f32) -> f32 {
    match a {
        Activation::Gelu => 0.5 * x * (1.0 + libm::erff(x * std::f32::consts::FRAC_1_SQRT_2)),
        Activation::FastGelu => {
            let inner = x * (SQRT_2_OVER_PI + 0.044_715 * SQRT_2_OVER_PI * x * x);
            0.5 * x * (1.0 + inner.tanh())
        }
        Activation::QuickGelu { alpha } => x / (1.0 + (-alpha * x).exp()),
        Activation::Identity => x,
    }
}

fn run<T: AsF64 + bytemuck::Pod + Send + Sync>(
    io: &KernelIo,
    a: Activation,
) -> Result<(), EpError> {
    let shape = io.in_view(0)?.shape.clone();
    let dims = |i: usize| io.input_view(i).map(|v| v.shape.clone());
    BiasActivation::check(&shape, dims(1).as_deref(), dims(2).as_deref()).map_err(kernel_err)?;
    let (bias, skip) = (load_opt(io, 1)?, load_opt(io, 2)?);
    let width = shape.last().copied().unwrap_or(1).max(1);
    let data = output_from_input::<T>(io)?;
    data.par_chunks_mut(width).enumerate().each(|(row, xs)| {
        for (j, x) in xs.iter_mut().enumerate() {
            let mut v = x.to_f64() as f32;
            if let Some(b) = &bias {
                v += b[j];
            }
            if let Some(s) = &skip {
                v += s[row * width + j];
            }
            *x = T::from_f64(f64::from(activate(a, v)));
        }
    });
    Ok(())
}

struct ActivationKernel {
    activation: Activation,
    dtype: DType,
}

impl CpuKernel for ActivationKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        floats!(self.dtype, T => run::<T>(io, self.activation),
            else Err(unsupported_dtype("a Gelu activation", self.dtype)))
    }
}

fn build(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported_dtype(&s.node.op_type, dtype));
    }
    Ok(Box::new(ActivationKernel { activation: s.op_as::<BiasActivation>()?.activation, dtype }))
}

/// Registers Gelu, FastGelu, BiasGelu, QuickGelu and BiasAdd.
pub(super) fn register_all(r: &mut KernelRegistry) {
    for name in ["Gelu", "FastGelu", "BiasGelu", "QuickGelu", "BiasAdd"] {
        r.register_in(MICROSOFT_DOMAIN, name, build);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_forms_agree_near_zero_and_approach_identity_for_large_inputs() {
        for a in [Activation::Gelu, Activation::FastGelu] {
            assert_eq!(activate(a, 0.0), 0.0);
            assert!((activate(a, 6.0) - 6.0).abs() < 1e-5);
            assert!(activate(a, -6.0).abs() < 1e-5);
        }
        let exact = activate(Activation::Gelu, 1.0);
        assert!((exact - 0.841_344_7).abs() < 1e-6);
        assert!((activate(Activation::FastGelu, 1.0) - exact).abs() < 1e-3);
        assert!((activate(Activation::QuickGelu { alpha: 1.0 }, 2.0) - 1.761_594_2).abs() < 1e-6);
    }
}
