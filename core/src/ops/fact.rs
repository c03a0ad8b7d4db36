//! What inference knows about a value: dtype, (symbolic) shape, and maybe its contents.

use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::{Dim, Shape};
use crate::tensor::Tensor;

/// The known facts about one value.
#[derive(Clone, Debug, PartialEq)]
pub struct Fact {
    /// Element type (of the elements, for sequences).
    pub dtype: DType,
    /// Shape; `None` when even the rank is unknown (for sequences: the elements' common shape).
    pub shape: Option<Shape>,
    /// The contents, when known on the host (constants, or shape arguments at run time).
    pub value: Option<Tensor>,
    /// True for sequence values.
    pub sequence: bool,
}

impl Fact {
    /// A tensor of the given dtype and shape.
    pub fn new(dtype: DType, shape: Shape) -> Fact {
        Fact { dtype, shape: Some(shape), value: None, sequence: false }
    }

    /// The fact a declared type gives: tensors, sequences of tensors, and
    /// optionals of either (an optional's fact is its element's).
    pub fn from_declared(t: &crate::graph::TypeInfo) -> Option<Fact> {
        use crate::graph::TypeInfo as T;
        match t {
            T::Tensor { dtype, shape } => {
                Some(Fact { dtype: *dtype, shape: shape.clone(), value: None, sequence: false })
            }
            T::Sequence(Some(inner)) => match &**inner {
                T::Tensor { dtype, shape } => Some(Fact::sequence_of(*dtype, shape.clone())),
                _ => None,
            },
            T::Optional(Some(inner)) => Fact::from_declared(inner),
            _ => None,
        }
    }

    /// A tensor of the given dtype and concrete shape.
    pub fn known(dtype: DType, dims: &[usize]) -> Fact {
        Fact::new(dtype, Shape::known(dims))
    }

    /// A tensor whose rank is unknown.
    pub fn unranked(dtype: DType) -> Fact {
        Fact { dtype, shape: None, value: None, sequence: false }
    }

    /// A tensor of known rank and unknown dimensions.
    pub fn ranked(dtype: DType, rank: usize) -> Fact {
        Fact::new(dtype, Shape::unknown(rank))
    }

    /// The fact for a known host tensor (its value included).
    pub fn from_tensor(t: &Tensor) -> Fact {
        Fact {
            dtype: t.dtype(),
            shape: Some(Shape::known(t.shape())),
            value: Some(t.clone()),
            sequence: false,
        }
    }

    /// A sequence whose elements have this dtype and (common) shape.
    pub fn sequence_of(dtype: DType, shape: Option<Shape>) -> Fact {
        Fact { dtype, shape, value: None, sequence: true }
    }

    /// The rank, when known.
    pub fn rank(&self) -> Option<usize> {
        self.shape.as_ref().map(Shape::rank)
    }

    /// The concrete dims, when all are known.
    pub fn dims(&self) -> Option<Vec<usize>> {
        self.shape.as_ref().and_then(Shape::concrete)
    }

    /// The value as i64s (integer tensors), when known.
    pub fn ints(&self) -> Option<Vec<i64>> {
        self.value.as_ref().and_then(|v| v.to_i64_vec().ok())
    }

    /// The value as f64s (numeric tensors), when known.
    pub fn floats(&self) -> Option<Vec<f64>> {
        self.value.as_ref().and_then(|v| v.to_f64_vec().ok())
    }

    /// The same fact with another dtype (shape kept, value dropped).
    pub fn with_dtype(&self, dtype: DType) -> Fact {
        Fact { dtype, shape: self.shape.clone(), value: None, sequence: self.sequence }
    }

    /// The dim at `axis`, or `Unknown` when the rank is unknown.
    pub fn dim(&self, axis: usize) -> Dim {
        self.shape.as_ref().and_then(|s| s.0.get(axis).cloned()).unwrap_or(Dim::Unknown)
    }
}

/// The inputs of one inference call, with accessors that give op-level errors.
pub struct InferInputs<'a> {
    facts: &'a [Option<Fact>],
}

impl<'a> InferInputs<'a> {
    /// Wraps the input facts; `None` marks an absent optional input.
    pub fn new(facts: &'a [Option<Fact>]) -> Self {
        InferInputs { facts }
    }

    /// The number of input slots (present or not).
    pub fn len(&self) -> usize {
        self.facts.len()
    }

    /// Whether there are no input slots.
    pub fn is_empty(&self) -> bool {
        self.facts.is_empty()
    }

    /// A required input.
    ///
    /// # Errors
    /// [`OpError::MissingInput`] when absent.
    pub fn get(&self, i: usize) -> Result<&'a Fact, OpError> {
        self.opt(i).ok_or(OpError::MissingInput(i))
    }

    /// An optional input.
    pub fn opt(&self, i: usize) -> Option<&'a Fact> {
        self.facts.get(i).and_then(Option::as_ref)
    }

    /// All present inputs.
    pub fn present(&self) -> impl Iterator<Item = &'a Fact> {
        self.facts.iter().flatten()
    }
}
