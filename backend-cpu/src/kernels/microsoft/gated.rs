//! `onyx` `GatedMatMulNBits`: `gate(A · Wgᵀ) ⊙ (A · Wuᵀ)`, each projection
//! through MatMulNBits' kernel (weights kept packed), then the gate in the
//! same pass that combines them: the gate's and the up projection's outputs
//! never reach a tensor of their own.

use onyx_core::dtype::DType;
use onyx_core::ep::{EpError, KernelSpec};
use onyx_core::graph::ONYX_DOMAIN;
use onyx_core::ops::microsoft::gated::{Gate, GatedMatMulNBits};

use super::super::attention::store;
use super::super::{CpuKernel, KernelIo, KernelRegistry, unsupported_dtype};
use super::load_f32;
use super::matmul_nbits::NBitsKernel;

struct GatedKernel {
    gate: NBitsKernel,
    up: NBitsKernel,
    act: Gate,
}

impl CpuKernel for GatedKernel {
    fn run(&self, io: &mut KernelIo) -> Result<(), EpError> {
        let a = load_f32(io, 0)?;
        let m = a.len().checked_div(self.gate.op.k).unwrap_or(0);
        let mut y = self.gate.project(io, &a, m)?;
        let u = self.up.project(io, &a, m)?;
        y.iter_mut().zip(&u).for_each(|(g, u)| *g = self.act.apply(*g) * u);
        store(io, 0, &y, "GatedMatMulNBits")
    }
}

fn build(s: &KernelSpec<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let dtype = s.input_dtype(0)?;
    if !matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return Err(unsupported_dtype("GatedMatMulNBits", dtype));
    }
    let op = s.op_as::<GatedMatMulNBits>()?;
    Ok(Box::new(GatedKernel {
        gate: NBitsKernel::new(s, op.proj.clone(), 1, false)?,
        up: NBitsKernel::new(s, op.proj.clone(), GatedMatMulNBits::UP, false)?,
        act: op.gate,
    }))
}

/// Registers `GatedMatMulNBits` in the `onyx` domain.
pub(super) fn register_all(r: &mut KernelRegistry) {
    r.register_in(ONYX_DOMAIN, "GatedMatMulNBits", build);
}
