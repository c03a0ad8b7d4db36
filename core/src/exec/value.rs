//! Values as the executor holds them: the caller's device values
//! ([`DeviceValue`]), and the run's own bindings of values to buffers.

use crate::dtype::DType;
use crate::ep::TensorArg;
use crate::shape::Shape;
use crate::tensor::Tensor;

/// A value on the device: a tensor or a sequence of tensors.
#[derive(Clone, Debug, PartialEq)]
pub enum DeviceValue {
    /// A tensor.
    Tensor(TensorArg),
    /// A sequence of tensors of one dtype.
    Sequence(DType, Vec<TensorArg>),
    /// An optional holding nothing (see [`Value::Empty`](crate::tensor::Value::Empty)).
    Empty {
        /// The element dtype.
        dtype: DType,
        /// Whether the element would be a sequence.
        sequence: bool,
    },
    /// A tensor no device can hold (strings), kept on the host.
    Host(Tensor),
}

#[derive(Clone, Debug)]
pub(super) struct Slot {
    pub(super) key: usize,
    pub(super) dtype: DType,
    pub(super) shape: Vec<usize>,
}

#[derive(Clone, Debug)]
pub(super) enum Val {
    Tensor(Slot),
    Seq(DType, Vec<Slot>),
    /// An optional holding nothing: element dtype, and whether it would be a sequence.
    Empty(DType, bool),
    /// A tensor only the host holds (strings).
    Host(Tensor),
}

impl Val {
    pub(super) fn slots(&self) -> &[Slot] {
        match self {
            Val::Tensor(s) => std::slice::from_ref(s),
            Val::Seq(_, s) => s,
            Val::Empty(..) | Val::Host(_) => &[],
        }
    }
}

/// The shape shared by every element of a sequence, if there is one.
pub(super) fn common_shape(items: &[Slot]) -> Option<Shape> {
    let first = items.first()?;
    items.iter().all(|s| s.shape == first.shape).then(|| Shape::known(&first.shape))
}
