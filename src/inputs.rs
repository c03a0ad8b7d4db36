//! Deterministic generated inputs from declared shapes, for `onyx run` without
//! `--input`, benchmarks and `onyx info`'s planned figures (the generator is
//! `onyx_core::inputs`, shared with the browser).

use std::collections::HashMap;

use onyx_core::graph::ValueInfo;
use onyx_core::tensor::Value;

use crate::error::{Error, Result};
use crate::session::IoInfo;

/// The dimensions of `inputs` that generated values leave at 1 because
/// `dims` does not set them (see [`onyx_core::inputs::defaulted_dims`]).
pub fn defaulted_dims(inputs: &[IoInfo], dims: &HashMap<String, usize>) -> Vec<String> {
    let infos: Vec<ValueInfo> = inputs
        .iter()
        .map(|i| ValueInfo { name: i.name.clone(), declared: i.declared.clone() })
        .collect();
    onyx_core::inputs::defaulted_dims(&infos, dims)
}

/// Generated values for every input, seeded for reproducibility.
///
/// # Errors
/// [`Error::Input`] for inputs without a declared tensor type or shape.
pub fn random_inputs(
    inputs: &[IoInfo],
    dims: &HashMap<String, usize>,
    seed: u64,
) -> Result<Vec<(String, Value)>> {
    let infos: Vec<ValueInfo> = inputs
        .iter()
        .map(|i| ValueInfo { name: i.name.clone(), declared: i.declared.clone() })
        .collect();
    onyx_core::inputs::random_inputs(&infos, dims, seed).map_err(|e| match e {
        onyx_core::Error::Input { name, reason } => Error::Input { name, reason },
        other => Error::Input { name: "<generated>".into(), reason: other.to_string() },
    })
}
