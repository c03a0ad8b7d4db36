//! Computing in f32 over f16 and bf16 storage: when a provider declines a node
//! in half precision but runs it in f32, the placement widens the node's half
//! inputs through inserted Casts and narrows its outputs back, all on that
//! provider. A GPU without a half kernel for an op (or without native f16)
//! then keeps the node instead of copying it to the CPU and back. The casts'
//! temporaries are ordinary values, released at their last use.

use crate::dtype::DType;
use crate::graph::Node;
use crate::ops::{Fact, InferInputs, Op};

/// The dtypes widening turns into f32.
pub fn is_half(d: DType) -> bool {
    matches!(d, DType::F16 | DType::BF16)
}

/// A node's kernel spec in f32, and its outputs' facts there.
pub struct Widened {
    /// Input dtypes with every widened input as f32.
    pub input_dtypes: Vec<Option<DType>>,
    /// Output dtypes of the f32 computation.
    pub output_dtypes: Vec<Option<DType>>,
    /// Output facts of the f32 computation.
    pub outputs: Vec<Fact>,
}

/// Whether input `slot` is widened: a half-precision tensor on the device.
pub fn widens(fact: Option<&Fact>, slot: usize, value_inputs: &[usize]) -> bool {
    fact.is_some_and(|f| is_half(f.dtype) && !f.sequence) && !value_inputs.contains(&slot)
}

/// The f32 form of a node, when it has half-precision device inputs and its
/// outputs follow them: re-inferred on f32 inputs, each half output becomes
/// f32 and every other output keeps its dtype. Ops whose output dtypes do
/// not follow their inputs (a Cast to f16, statistics of a declared dtype)
/// are not widened.
pub fn plan(
    node: &Node,
    op: &dyn Op,
    in_facts: &[Option<Fact>],
    out: &[Fact],
    value_inputs: &[usize],
) -> Option<Widened> {
    let mut any = false;
    let wide: Vec<Option<Fact>> = in_facts
        .iter()
        .enumerate()
        .map(|(slot, f)| {
            let f = f.as_ref()?;
            if widens(Some(f), slot, value_inputs) {
                any = true;
                return Some(f.with_dtype(DType::F32));
            }
            Some(f.clone())
        })
        .collect();
    if !any {
        return None;
    }
    let outputs = op.infer(&InferInputs::new(&wide)).ok()?;
    let follows = out.len() == outputs.len()
        && out.iter().zip(&outputs).all(|(a, b)| {
            if is_half(a.dtype) { b.dtype == DType::F32 } else { b.dtype == a.dtype }
        });
    if !follows {
        return None;
    }
    Some(Widened {
        input_dtypes: wide.iter().map(|f| f.as_ref().map(|f| f.dtype)).collect(),
        output_dtypes: node
            .outputs
            .iter()
            .enumerate()
            .map(|(i, o)| o.and(outputs.get(i).map(|f| f.dtype)))
            .collect(),
        outputs,
    })
}
