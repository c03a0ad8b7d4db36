//! The builder decompositions write their standard-op nodes with, and the
//! helpers they share.

use half::{bf16, f16};

use crate::dtype::DType;
use crate::error::OpError;
use crate::graph::{Attribute, Attributes, DEFAULT_DOMAIN, Node, ValueId};
use crate::ops::Fact;
use crate::tensor::{Element, Tensor};

/// The opset of the nodes a decomposition emits (attribute and input
/// conventions of opset 21: axes as inputs, single-axis softmax).
pub const OPSET: i64 = 21;

/// Builds the nodes of one decomposition. Fresh values get ids counting up
/// from the first id the compiler hands out; constants become initializers.
#[derive(Debug)]
pub struct Builder {
    prefix: String,
    first: u32,
    /// Names of the fresh values, in id order from the first fresh id.
    pub values: Vec<String>,
    /// The emitted nodes, in run order.
    pub nodes: Vec<Node>,
    /// Constant values and their contents.
    pub constants: Vec<(ValueId, Tensor)>,
}

/// Attributes from `(name, value)` pairs.
pub fn attrs(pairs: Vec<(&str, Attribute)>) -> Attributes {
    Attributes(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

/// A Cast's attributes: its target dtype.
pub fn cast_to(to: DType) -> Attributes {
    attrs(vec![("to", Attribute::Int(i64::from(to.to_onnx())))])
}

/// Input `i` of the node being decomposed.
pub fn input(node: &Node, i: usize) -> Result<ValueId, OpError> {
    node.input(i).ok_or(OpError::MissingInput(i))
}

/// The fact of input `i`.
pub fn fact(inputs: &[Option<Fact>], i: usize) -> Result<&Fact, OpError> {
    inputs.get(i).and_then(Option::as_ref).ok_or(OpError::MissingInput(i))
}

/// The concrete dims of input `i`; a decline when they are not all known.
pub fn dims(inputs: &[Option<Fact>], i: usize) -> Result<Vec<usize>, OpError> {
    fact(inputs, i)?.dims().ok_or_else(|| decline(&format!("input {i} has an unknown shape")))
}

/// A constant tensor of `shape` from `values`.
pub fn tensor<T: Element>(shape: Vec<usize>, values: Vec<T>) -> Result<Tensor, OpError> {
    Tensor::from_vec(shape, values).map_err(|e| OpError::Invalid(e.to_string()))
}

impl Builder {
    /// A builder naming its values and nodes after `prefix` (the node being
    /// decomposed), with fresh ids from `first`.
    pub fn new(prefix: &str, first: ValueId) -> Builder {
        Builder {
            prefix: prefix.to_string(),
            first: first.0,
            values: Vec::new(),
            nodes: Vec::new(),
            constants: Vec::new(),
        }
    }

    /// Output slot `i` of the node being decomposed, or a fresh value where
    /// the model omits that output.
    pub fn output(&mut self, node: &Node, i: usize) -> ValueId {
        node.outputs.get(i).copied().flatten().unwrap_or_else(|| self.fresh("out"))
    }

    fn fresh(&mut self, hint: &str) -> ValueId {
        let id = ValueId(self.first + self.values.len() as u32);
        self.values.push(format!("{}/{}{}", self.prefix, hint, self.values.len()));
        id
    }

    /// Emits `op_type` over `inputs` with outputs `outputs` (`None` slots are omitted).
    pub fn emit(
        &mut self,
        op_type: &str,
        inputs: &[Option<ValueId>],
        attrs: Attributes,
        outputs: Vec<Option<ValueId>>,
    ) {
        let name = format!("{}/{}_{}", self.prefix, op_type, self.nodes.len());
        self.nodes.push(Node {
            name,
            op_type: op_type.into(),
            domain: DEFAULT_DOMAIN.into(),
            opset: OPSET,
            inputs: inputs.to_vec(),
            outputs,
            implicit_inputs: vec![],
            attrs,
        });
    }

    /// Emits `op_type` over `inputs` and returns its single, fresh output.
    pub fn op(&mut self, op_type: &str, inputs: &[ValueId], attrs: Attributes) -> ValueId {
        let out = self.fresh(&op_type.to_ascii_lowercase());
        let ins: Vec<Option<ValueId>> = inputs.iter().copied().map(Some).collect();
        self.emit(op_type, &ins, attrs, vec![Some(out)]);
        out
    }

    /// [`op`](Self::op) with no attributes.
    pub fn op0(&mut self, op_type: &str, inputs: &[ValueId]) -> ValueId {
        self.op(op_type, inputs, Attributes::default())
    }

    /// A constant value.
    pub fn constant(&mut self, t: Tensor) -> ValueId {
        let id = self.fresh("const");
        self.constants.push((id, t));
        id
    }

    /// A 1-D int64 constant.
    pub fn ints(&mut self, v: &[i64]) -> ValueId {
        let t = Tensor::from_vec(vec![v.len()], v.to_vec()).expect("length matches shape");
        self.constant(t)
    }

    /// A scalar constant of a float or integer `dtype`.
    ///
    /// # Errors
    /// [`OpError::Unsupported`] for dtypes without a scalar constructor here.
    pub fn scalar(&mut self, dtype: DType, v: f64) -> Result<ValueId, OpError> {
        let t = match dtype {
            DType::F32 => Tensor::scalar(v as f32),
            DType::F64 => Tensor::scalar(v),
            DType::F16 => Tensor::scalar(f16::from_f64(v)),
            DType::BF16 => Tensor::scalar(bf16::from_f64(v)),
            DType::I32 => Tensor::scalar(v as i32),
            DType::I64 => Tensor::scalar(v as i64),
            d => return Err(OpError::Unsupported(format!("a {d} constant in a decomposition"))),
        };
        Ok(self.constant(t))
    }

    /// `Unsqueeze(x, axes)`.
    pub fn unsqueeze(&mut self, x: ValueId, axes: &[i64]) -> ValueId {
        let a = self.ints(axes);
        self.op0("Unsqueeze", &[x, a])
    }

    /// `Squeeze(x, axes)`.
    pub fn squeeze(&mut self, x: ValueId, axes: &[i64]) -> ValueId {
        let a = self.ints(axes);
        self.op0("Squeeze", &[x, a])
    }

    /// `Reshape(x, shape)` with a constant shape.
    pub fn reshape(&mut self, x: ValueId, shape: &[i64]) -> ValueId {
        let s = self.ints(shape);
        self.op0("Reshape", &[x, s])
    }

    /// `Transpose(x, perm)`.
    pub fn transpose(&mut self, x: ValueId, perm: &[i64]) -> ValueId {
        self.op("Transpose", &[x], attrs(vec![("perm", Attribute::Ints(perm.to_vec()))]))
    }

    /// `Cast(x, to)`.
    pub fn cast(&mut self, x: ValueId, to: DType) -> ValueId {
        self.op("Cast", &[x], cast_to(to))
    }

    /// A reduction over all axes (`keepdims = 0`).
    pub fn reduce_all(&mut self, op_type: &str, x: ValueId) -> ValueId {
        self.op(op_type, &[x], attrs(vec![("keepdims", Attribute::Int(0))]))
    }
}

/// The error of a decomposition that cannot apply to these inputs.
pub fn decline(what: &str) -> OpError {
    OpError::Unsupported(format!("no decomposition: {what}"))
}
