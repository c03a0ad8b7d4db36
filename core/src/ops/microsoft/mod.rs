//! onnxruntime's contrib ops (`com.microsoft`) beyond the layer norms (which
//! live in [`norm`](super::norm)): the Gelu family and BiasAdd
//! ([`activations`]), RotaryEmbedding ([`rotary`]), Attention and
//! MultiHeadAttention ([`attention`]), GroupQueryAttention ([`gqa`]), and the
//! block-quantized MatMulNBits and GatherBlockQuantized ([`quant`]); and
//! Onyx's own `GatedMatMulNBits` over MatMulNBits weights ([`gated`]).
//!
//! The semantics are onnxruntime's (its contrib-op documentation and CPU
//! kernels), which the `ort` conformance suite checks case by case.

pub mod activations;
pub mod attention;
mod common;
pub mod gated;
pub mod gqa;
pub mod quant;
pub mod rotary;

use super::OpRegistry;

/// Registers every op of this module in the `com.microsoft` domain.
pub fn register_all(r: &mut OpRegistry) {
    activations::register_all(r);
    rotary::register_all(r);
    attention::register_all(r);
    gqa::register_all(r);
    quant::register_all(r);
    gated::register_all(r);
}
