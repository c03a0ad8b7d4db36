//! Deterministic generated inputs from declared shapes, for `onyx run` without
//! `--input`, benchmarks and `onyx info`'s planned figures.

use std::collections::HashMap;

use onyx_core::dtype::DType;
use onyx_core::shape::Dim;
use onyx_core::tensor::{Tensor, Value};

use crate::error::{Error, Result};
use crate::session::IoInfo;

/// Concrete dims for an input: declared sizes, `--dim NAME=VALUE` for symbols, 1 otherwise.
pub fn concrete_dims(info: &IoInfo, dims: &HashMap<String, usize>) -> Result<Vec<usize>> {
    let shape = info.shape().ok_or_else(|| Error::Input {
        name: info.name.clone(),
        reason: "no declared tensor shape; pass it with --input".into(),
    })?;
    Ok(shape
        .dims()
        .iter()
        .map(|d| match d {
            Dim::Known(n) => *n,
            Dim::Sym(s) => dims.get(&**s).copied().unwrap_or(1),
            Dim::Unknown => 1,
        })
        .collect())
}

/// A deterministic pseudo-random tensor: floats in [-1, 1), integers in [0, 100), bools.
///
/// # Errors
/// [`Error::Input`] for dtypes that cannot be generated (strings, complex, packed types).
pub fn random_tensor(
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    rng: &mut fastrand::Rng,
) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let f = |rng: &mut fastrand::Rng| rng.f64() * 2.0 - 1.0;
    let bad = |e: onyx_core::error::TensorError| Error::Input {
        name: name.into(),
        reason: e.to_string(),
    };
    match dtype {
        DType::F32 => Tensor::from_vec(shape, (0..n).map(|_| f(rng) as f32).collect()),
        DType::F64 => Tensor::from_vec(shape, (0..n).map(|_| f(rng)).collect()),
        DType::F16 => {
            Tensor::from_vec(shape, (0..n).map(|_| half::f16::from_f64(f(rng))).collect())
        }
        DType::BF16 => {
            Tensor::from_vec(shape, (0..n).map(|_| half::bf16::from_f64(f(rng))).collect())
        }
        DType::I64 => Tensor::from_vec(shape, (0..n).map(|_| rng.i64(0..100)).collect()),
        DType::I32 => Tensor::from_vec(shape, (0..n).map(|_| rng.i32(0..100)).collect()),
        DType::I16 => Tensor::from_vec(shape, (0..n).map(|_| rng.i16(0..100)).collect()),
        DType::I8 => Tensor::from_vec(shape, (0..n).map(|_| rng.i8(0..100)).collect()),
        DType::U8 => Tensor::from_vec(shape, (0..n).map(|_| rng.u8(0..100)).collect()),
        DType::U16 => Tensor::from_vec(shape, (0..n).map(|_| rng.u16(0..100)).collect()),
        DType::U32 => Tensor::from_vec(shape, (0..n).map(|_| rng.u32(0..100)).collect()),
        DType::U64 => Tensor::from_vec(shape, (0..n).map(|_| rng.u64(0..100)).collect()),
        DType::Bool => Tensor::from_bools(shape, &(0..n).map(|_| rng.bool()).collect::<Vec<_>>()),
        other => {
            return Err(Error::Input {
                name: name.into(),
                reason: format!("cannot generate {other} data; pass it with --input"),
            });
        }
    }
    .map_err(bad)
}

/// Generated values for every input, seeded for reproducibility.
///
/// # Errors
/// [`Error::Input`] for inputs without a declared tensor type.
pub fn random_inputs(
    inputs: &[IoInfo],
    dims: &HashMap<String, usize>,
    seed: u64,
) -> Result<Vec<(String, Value)>> {
    let mut rng = fastrand::Rng::with_seed(seed);
    inputs
        .iter()
        .map(|info| {
            let dtype = info.dtype().ok_or_else(|| Error::Input {
                name: info.name.clone(),
                reason: "no declared tensor type; pass it with --input".into(),
            })?;
            let shape = concrete_dims(info, dims)?;
            Ok((
                info.name.clone(),
                Value::Tensor(random_tensor(&info.name, dtype, shape, &mut rng)?),
            ))
        })
        .collect()
}
