//! CPU kernels for onnxruntime's contrib ops (`com.microsoft`): the Gelu
//! family and BiasAdd, RotaryEmbedding, Attention and MultiHeadAttention,
//! GroupQueryAttention, MatMulNBits, GatherBlockQuantized and
//! DynamicQuantizeLSTM; and Onyx's fused `GatedMatMulNBits`. They compute in
//! f32 (f16 and bf16 are widened on load and rounded on store, with the
//! roundings onnxruntime's own buffers imply where it matters).

mod activations;
mod attention;
mod engine;
mod gated;
mod gather_block;
mod gqa;
mod matmul_nbits;
mod quantized_lstm;
mod rotary;

use onyx_core::ep::EpError;

use super::dispatch::{AsF64, floats};
use super::matmul::{Mat, gemm_into};
use super::{KernelIo, KernelRegistry, unsupported_dtype};

/// Registers every kernel of this module.
pub(crate) fn register_all(r: &mut KernelRegistry) {
    activations::register_all(r);
    rotary::register_all(r);
    attention::register_all(r);
    gqa::register_all(r);
    matmul_nbits::register_all(r);
    gated::register_all(r);
    gather_block::register_all(r);
    quantized_lstm::register_all(r);
}

fn kernel_err(e: impl ToString) -> EpError {
    EpError::Kernel(e.to_string())
}

/// Input `i` (a float tensor) widened to f32.
fn load_f32(io: &KernelIo, i: usize) -> Result<Vec<f32>, EpError> {
    let dtype = io.in_view(i)?.dtype;
    floats!(dtype, T => Ok(io.input::<T>(i)?.iter().map(|v| v.to_f64() as f32).collect()),
        else Err(unsupported_dtype("a float input", dtype)))
}

/// Input `i` widened to f32 when present.
fn load_opt(io: &KernelIo, i: usize) -> Result<Option<Vec<f32>>, EpError> {
    if io.input_view(i).is_some() { load_f32(io, i).map(Some) } else { Ok(None) }
}

/// `out = scale · a · b` for row-major `a` `[m, k]` and `b` `[k, n]`, or `b`
/// stored as `[n, k]` when `b_transposed`. `out` holds `m × n` elements.
///
/// # Errors
/// [`EpError::Kernel`] when a slice is shorter than the sizes say.
fn product(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    (m, n, k): (usize, usize, usize),
    b_transposed: bool,
    scale: f32,
) -> Result<(), EpError> {
    if out.len() < m * n || a.len() < m * k || b.len() < k * n {
        return Err(kernel_err(format!(
            "internal: a {m}×{k} by {k}×{n} product over slices of {}, {} and {}",
            a.len(),
            b.len(),
            out.len()
        )));
    }
    if m * n == 0 {
        return Ok(());
    }
    if k == 0 {
        out[..m * n].fill(0.0);
        return Ok(());
    }
    let mb = Mat::row_major(0, if b_transposed { k } else { n }, b_transposed);
    // SAFETY: the lengths were checked above against every element the product
    // addresses; `out` is a distinct mutable borrow, so it overlaps neither input.
    unsafe { gemm_into((m, n, k), out, 0, a, Mat::row_major(0, k, false), b, mb, false, scale) };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn product_multiplies_plain_and_transposed_operands() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let b = [5.0, 6.0, 7.0, 8.0];
        let mut out = [0f32; 4];
        product(&mut out, &a, &b, (2, 2, 2), false, 1.0).unwrap();
        assert_eq!(out, [19.0, 22.0, 43.0, 50.0]);
        product(&mut out, &a, &b, (2, 2, 2), true, 0.5).unwrap();
        assert_eq!(out, [8.5, 11.5, 19.5, 26.5]);
        assert!(product(&mut out, &a, &b[..3], (2, 2, 2), false, 1.0).is_err());
    }
}
