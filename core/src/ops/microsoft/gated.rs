//! `onyx` `GatedMatMulNBits`: a gated feed-forward's two projections and its
//! gate in one op, `act(A · Wgᵀ) ⊙ (A · Wuᵀ)` with both weights stored as
//! MatMulNBits stores them. Decoders (Llama, Qwen, Mistral, Phi-3) write it as
//! two MatMulNBits over one input and `Mul(Mul(g, Sigmoid(g)), u)`: five
//! launches a layer and three passes over the widest activation, where the
//! fused kernel reads A once and writes only the product. Only the fusion
//! pass writes it (`passes::fuse::gated`); it is no file format.
//!
//! Inputs: A; the gate's B, scales and optional zero points; the up
//! projection's B, scales and optional zero points (each as MatMulNBits'
//! inputs 1 to 3). Attributes: MatMulNBits' `K`, `N`, `bits` and
//! `block_size`, shared by both, and `activation` (`"Silu"`).

use super::common::{bad, float_input};
use super::quant::MatMulNBits;
use crate::error::OpError;
use crate::graph::ONYX_DOMAIN;
use crate::ops::{Fact, InferInputs, Op, OpRegistry, check_inputs};

/// The gate's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// `x · sigmoid(x)` (SwiGLU).
    Silu,
}

impl Gate {
    /// The attribute's spelling.
    pub fn name(self) -> &'static str {
        match self {
            Gate::Silu => "Silu",
        }
    }

    /// The activation of one value.
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Gate::Silu => x / (1.0 + (-x).exp()),
        }
    }
}

/// `GatedMatMulNBits`: `Y = gate(A · Wgᵀ) ⊙ (A · Wuᵀ)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatedMatMulNBits {
    /// The shape of each projection.
    pub proj: MatMulNBits,
    /// The gate's activation.
    pub gate: Gate,
}

impl GatedMatMulNBits {
    /// The input index of the up projection's B (the gate's is 1).
    pub const UP: usize = 4;
}

impl Op for GatedMatMulNBits {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let a = float_input(inputs, 0)?;
        self.proj.check_weights(inputs, a.dtype, 1)?;
        self.proj.check_weights(inputs, a.dtype, Self::UP)?;
        Ok(vec![self.proj.output(a)?])
    }
}

/// Registers `GatedMatMulNBits` in the `onyx` domain.
pub fn register_all(r: &mut OpRegistry) {
    r.register_in(ONYX_DOMAIN, "GatedMatMulNBits", |n| {
        check_inputs(n, 6, 7)?;
        let gate = match n.attrs.string_or("activation", "Silu".into())?.as_str() {
            "Silu" => Gate::Silu,
            other => return Err(bad("activation", format!("{other} is not Silu"))),
        };
        Ok(Box::new(GatedMatMulNBits { proj: MatMulNBits::from_attrs(n)?, gate }))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    fn op() -> GatedMatMulNBits {
        GatedMatMulNBits {
            proj: MatMulNBits { k: 64, n: 8, bits: 4, block_size: 32 },
            gate: Gate::Silu,
        }
    }

    #[test]
    fn the_output_has_one_projection_s_shape() {
        let facts = [
            Some(Fact::known(DType::F16, &[1, 3, 64])),
            Some(Fact::known(DType::U8, &[8, 2, 16])),
            Some(Fact::known(DType::F16, &[16])),
            None,
            Some(Fact::known(DType::U8, &[8, 2, 16])),
            Some(Fact::known(DType::F16, &[16])),
            Some(Fact::known(DType::U8, &[8])),
        ];
        let out = op().infer(&InferInputs::new(&facts)).unwrap();
        assert_eq!(out[0], Fact::known(DType::F16, &[1, 3, 8]));
    }

    #[test]
    fn an_up_projection_of_another_shape_is_refused() {
        let facts = [
            Some(Fact::known(DType::F32, &[2, 64])),
            Some(Fact::known(DType::U8, &[8, 2, 16])),
            Some(Fact::known(DType::F32, &[16])),
            None,
            Some(Fact::known(DType::U8, &[9, 2, 16])),
            Some(Fact::known(DType::F32, &[18])),
        ];
        let err = op().infer(&InferInputs::new(&facts)).unwrap_err();
        assert!(err.to_string().contains("B [9, 2, 16]"), "{err}");
    }

    #[test]
    fn silu_of_zero_is_zero_and_of_a_large_value_is_the_value() {
        assert_eq!(Gate::Silu.apply(0.0), 0.0);
        assert!((Gate::Silu.apply(20.0) - 20.0).abs() < 1e-5);
    }
}
