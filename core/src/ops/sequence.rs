//! Sequence ops. A sequence is a list of tensor handles; the executor runs
//! these ops by moving handles, never copying element data.

use super::{Fact, InferInputs, Op, OpRegistry, check_inputs};
use crate::dtype::DType;
use crate::error::OpError;
use crate::shape::Shape;

/// Which sequence operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SequenceKind {
    /// Build a sequence from the inputs.
    Construct,
    /// An empty sequence of a dtype.
    Empty(DType),
    /// Element at a (possibly negative) position.
    At,
    /// Number of elements, as an int64 scalar.
    Length,
    /// Insert a tensor at a position (default: the end).
    Insert,
    /// Remove the element at a position (default: the last).
    Erase,
    /// `SplitToSequence`: pieces of a tensor along an axis (sizes from the
    /// optional `split` input; without it, pieces of 1, the axis kept only
    /// with `keepdims`).
    Split {
        /// The axis (may be negative).
        axis: i64,
        /// Keep the axis when `split` is absent.
        keepdims: bool,
    },
    /// `Optional`: the input itself, or, without one, an optional holding
    /// nothing of the given element type.
    Optional {
        /// Element dtype of an empty optional.
        dtype: DType,
        /// Whether that element would be a sequence.
        sequence: bool,
    },
    /// `OptionalHasElement`: whether the input is present and not empty.
    HasElement,
    /// `OptionalGetElement`: the element (an error for an empty optional).
    GetElement,
}

/// A sequence op.
#[derive(Debug, Clone)]
pub struct SequenceOp {
    /// Which operation.
    pub kind: SequenceKind,
}

fn common_shape<'a>(mut shapes: impl Iterator<Item = Option<&'a Shape>>) -> Option<Shape> {
    let first = shapes.next()??.clone();
    shapes.all(|s| s == Some(&first)).then_some(first)
}

impl Op for SequenceOp {
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError> {
        let seq = |i: usize| -> Result<&Fact, OpError> {
            let f = inputs.get(i)?;
            if !f.sequence {
                return Err(OpError::Invalid(format!("input {i} must be a sequence")));
            }
            Ok(f)
        };
        Ok(vec![match self.kind {
            SequenceKind::Construct => {
                let first = inputs.get(0)?;
                if let Some((i, f)) =
                    inputs.present().enumerate().find(|(_, f)| f.dtype != first.dtype)
                {
                    return Err(OpError::InputDType {
                        index: i,
                        dtype: f.dtype,
                        expected: first.dtype.to_string(),
                    });
                }
                Fact::sequence_of(
                    first.dtype,
                    common_shape(inputs.present().map(|f| f.shape.as_ref())),
                )
            }
            SequenceKind::Empty(dtype) => Fact::sequence_of(dtype, None),
            SequenceKind::At => {
                let s = seq(0)?;
                Fact { dtype: s.dtype, shape: s.shape.clone(), value: None, sequence: false }
            }
            SequenceKind::Length => {
                seq(0)?;
                Fact::known(DType::I64, &[])
            }
            SequenceKind::Insert => {
                let (s, t) = (seq(0)?, inputs.get(1)?);
                if s.dtype != t.dtype {
                    return Err(OpError::InputDType {
                        index: 1,
                        dtype: t.dtype,
                        expected: s.dtype.to_string(),
                    });
                }
                let shape = if s.shape == t.shape { s.shape.clone() } else { None };
                Fact::sequence_of(s.dtype, shape)
            }
            SequenceKind::Erase => seq(0)?.clone(),
            SequenceKind::Optional { dtype, sequence } => match inputs.opt(0) {
                Some(f) => Fact { value: None, ..f.clone() },
                None => Fact { dtype, shape: None, value: None, sequence },
            },
            SequenceKind::HasElement => Fact::known(DType::Bool, &[]),
            SequenceKind::GetElement => Fact { value: None, ..inputs.get(0)?.clone() },
            SequenceKind::Split { .. } => {
                let t = inputs.get(0)?;
                if t.sequence {
                    return Err(OpError::Invalid("input 0 must be a tensor".into()));
                }
                Fact::sequence_of(t.dtype, None)
            }
        }])
    }
}

/// Registers the sequence ops.
pub fn register_all(r: &mut OpRegistry) {
    let simple = [
        ("SequenceConstruct", SequenceKind::Construct, 1, usize::MAX),
        ("SequenceAt", SequenceKind::At, 2, 2),
        ("SequenceLength", SequenceKind::Length, 1, 1),
        ("SequenceInsert", SequenceKind::Insert, 2, 3),
        ("SequenceErase", SequenceKind::Erase, 1, 2),
    ];
    for (op, kind, min, max) in simple {
        r.register(op, move |n| {
            check_inputs(n, min, max)?;
            Ok(Box::new(SequenceOp { kind }))
        });
    }
    r.register("SplitToSequence", |n| {
        check_inputs(n, 1, 2)?;
        let axis = n.attrs.int_or("axis", 0)?;
        let keepdims = n.attrs.flag_or("keepdims", true)?;
        Ok(Box::new(SequenceOp { kind: SequenceKind::Split { axis, keepdims } }))
    });
    r.register("Optional", |n| {
        check_inputs(n, 0, 1)?;
        let (dtype, sequence) = match n.attrs.get("type") {
            Some(crate::graph::Attribute::Type(t)) => match Fact::from_declared(t) {
                Some(f) => (f.dtype, f.sequence),
                None => {
                    return Err(OpError::BadAttribute {
                        name: "type".into(),
                        reason: "must be a tensor or a sequence of tensors".into(),
                    });
                }
            },
            _ if n.input(0).is_none() => {
                return Err(OpError::BadAttribute {
                    name: "type".into(),
                    reason: "is required when there is no input".into(),
                });
            }
            _ => (DType::F32, false),
        };
        Ok(Box::new(SequenceOp { kind: SequenceKind::Optional { dtype, sequence } }))
    });
    r.register("OptionalHasElement", |n| {
        check_inputs(n, 0, 1)?;
        Ok(Box::new(SequenceOp { kind: SequenceKind::HasElement }))
    });
    r.register("OptionalGetElement", |n| {
        check_inputs(n, 1, 1)?;
        Ok(Box::new(SequenceOp { kind: SequenceKind::GetElement }))
    });
    r.register("SequenceEmpty", |n| {
        check_inputs(n, 0, 0)?;
        let code = n.attrs.int_or("dtype", DType::F32.to_onnx() as i64)?;
        let dtype = DType::from_onnx(code as i32).ok_or_else(|| OpError::BadAttribute {
            name: "dtype".into(),
            reason: format!("{code} is not a data type"),
        })?;
        Ok(Box::new(SequenceOp { kind: SequenceKind::Empty(dtype) }))
    });
}
