//! Deterministic generated inputs from declared types and shapes, for runs
//! without given inputs (`onyx run`, benchmarks, planned memory figures, the
//! browser demo): the same seed gives the same values on every platform.

use std::collections::HashMap;

use crate::dtype::DType;
use crate::exec::Error;
use crate::graph::ValueInfo;
use crate::shape::Dim;
use crate::tensor::{Tensor, Value};

fn input_err(name: &str, reason: impl Into<String>) -> Error {
    Error::Input { name: name.into(), reason: reason.into() }
}

/// Concrete dims for a declared input: fixed sizes, `dims[symbol]` for
/// symbolic ones, 1 otherwise.
///
/// # Errors
/// [`Error::Input`] when the input declares no tensor shape.
pub fn concrete_dims(info: &ValueInfo, dims: &HashMap<String, usize>) -> Result<Vec<usize>, Error> {
    let shape =
        info.declared.as_ref().and_then(|t| t.tensor_shape()).ok_or_else(|| {
            input_err(&info.name, "no declared tensor shape; pass it as an input")
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

/// The dimensions of `inputs` that [`concrete_dims`] leaves at 1 because
/// `dims` does not set them: symbolic ones by name (each once), unnamed ones
/// as `input[axis]`. What a failed run on generated inputs should mention.
pub fn defaulted_dims(inputs: &[ValueInfo], dims: &HashMap<String, usize>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for info in inputs {
        let Some(shape) = info.declared.as_ref().and_then(|t| t.tensor_shape()) else { continue };
        for (axis, d) in shape.dims().iter().enumerate() {
            let name = match d {
                Dim::Sym(s) if !dims.contains_key(&**s) => s.to_string(),
                Dim::Unknown => format!("{}[{axis}]", info.name),
                _ => continue,
            };
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

/// A pseudo-random tensor: floats in [-1, 1), integers in [0, 100), bools.
///
/// # Errors
/// [`Error::Input`] for dtypes that cannot be generated (strings, complex, packed types).
pub fn random_tensor(
    name: &str,
    dtype: DType,
    shape: Vec<usize>,
    rng: &mut fastrand::Rng,
) -> Result<Tensor, Error> {
    let n: usize = shape.iter().product();
    let f = |rng: &mut fastrand::Rng| rng.f64() * 2.0 - 1.0;
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
            return Err(input_err(
                name,
                format!("cannot generate {other} data; pass it as an input"),
            ));
        }
    }
    .map_err(|e| input_err(name, e.to_string()))
}

/// Generated values for `inputs` in order, from one seeded generator.
///
/// # Errors
/// [`Error::Input`] for inputs without a declared tensor type or shape.
pub fn random_inputs(
    inputs: &[ValueInfo],
    dims: &HashMap<String, usize>,
    seed: u64,
) -> Result<Vec<(String, Value)>, Error> {
    let mut rng = fastrand::Rng::with_seed(seed);
    inputs
        .iter()
        .map(|info| {
            let dtype = info.declared.as_ref().and_then(|t| t.tensor_dtype()).ok_or_else(|| {
                input_err(&info.name, "no declared tensor type; pass it as an input")
            })?;
            let shape = concrete_dims(info, dims)?;
            Ok((
                info.name.clone(),
                Value::Tensor(random_tensor(&info.name, dtype, shape, &mut rng)?),
            ))
        })
        .collect()
}
