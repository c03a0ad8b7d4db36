//! The op registry: builder functions that parse a node's attributes (with the
//! spec's defaults) into a typed [`Op`], which declares shape and dtype
//! inference, in-place reuse and views. Backends downcast the typed op to read
//! its parameters, so attribute parsing happens once, here.

pub mod attention;
mod broadcast;
pub mod causal;
pub mod control;
pub mod conv;
pub mod decompose;
pub mod domains;
pub mod einsum;
pub mod elementwise;
mod fact;
pub mod fold;
pub mod generate;
pub mod indexing;
pub mod linalg;
pub mod looping;
pub mod microsoft;
pub mod movement;
pub mod nn;
pub mod norm;
pub mod pad;
pub mod quant;
pub mod recurrent;
pub mod reduce;
pub mod resize;
pub mod scatter;
pub mod select;
pub mod sequence;
pub mod shape;
pub mod signal;
pub mod spatial;
pub mod stats;
pub mod strings;
pub mod vision;

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

pub use broadcast::{broadcast_dims, broadcast_shapes};
pub use fact::{Fact, InferInputs};

use crate::error::OpError;
use crate::graph::{DEFAULT_DOMAIN, Node};

/// A parsed operator: parameters plus the facts the planner needs.
pub trait Op: fmt::Debug + Send + Sync + Any {
    /// Output types and shapes from the input facts.
    ///
    /// Called by the planner with symbolic shapes and by the executor with
    /// concrete ones (and the host values of [`value_inputs`](Op::value_inputs)),
    /// so one function serves both. Returns one fact per output slot.
    ///
    /// # Errors
    /// [`OpError`] when inputs violate the op's contract.
    fn infer(&self, inputs: &InferInputs<'_>) -> Result<Vec<Fact>, OpError>;

    /// Inputs whose *values* the output shape depends on (Reshape's `shape`,
    /// Slice's `starts`…). The executor makes them available on the host.
    fn value_inputs(&self) -> Vec<usize> {
        vec![]
    }

    /// Input slots whose buffer output 0 may overwrite, when that input dies here
    /// and has the output's dtype and byte size.
    fn in_place(&self) -> Vec<usize> {
        vec![]
    }

    /// When output 0 is a zero-copy view of an input (same bytes, new shape): that input's slot.
    fn view_of(&self) -> Option<usize> {
        None
    }

    /// The dtypes the model declares for the node's outputs (`None` where
    /// undeclared), given once after building. Ops whose output dtypes the
    /// spec leaves to the model take them from here; others ignore it.
    fn declared_outputs(&mut self, _dtypes: &[Option<crate::dtype::DType>]) {}

    /// Whether this node runs on the host through [`eval_host`](Op::eval_host)
    /// instead of a provider's kernel, given its inputs' facts: string tensors
    /// (no device holds them) and ops only the host implements.
    fn runs_on_host(&self, _inputs: &[Option<Fact>]) -> bool {
        false
    }

    /// Computes the outputs on the host; called only when
    /// [`runs_on_host`](Op::runs_on_host) said so. Absent inputs are `None`.
    ///
    /// # Errors
    /// [`OpError`] for inputs that violate the op's contract.
    fn eval_host(
        &self,
        _inputs: &[Option<crate::tensor::Tensor>],
    ) -> Result<Vec<crate::tensor::Tensor>, OpError> {
        Err(OpError::Unsupported("evaluation on the host".into()))
    }

    /// How this op's outputs can be computed on the host (see [`fold`]). The
    /// default: from the values of all inputs, through [`fold`](Op::fold).
    fn folds(&self) -> fold::Folding {
        fold::Folding::FromValues
    }

    /// Computes the outputs on the host from the values of all inputs (absent
    /// ones `None`). `None` when this op, or these dtypes or attributes, are
    /// not folded (the default: a kernel runs).
    fn fold(
        &self,
        _inputs: &[Option<&crate::tensor::Tensor>],
    ) -> Option<Result<Vec<crate::tensor::Tensor>, OpError>> {
        None
    }

    /// Writes this node as standard ops into `b`, for a primary provider that
    /// has no kernel for it (see [`decompose`]). `Ok(false)`: the op has no
    /// decomposition (the default).
    ///
    /// # Errors
    /// [`OpError`] when the decomposition cannot apply to these input facts.
    fn decompose(
        &self,
        _node: &Node,
        _inputs: &[Option<Fact>],
        _b: &mut decompose::Builder,
    ) -> Result<bool, OpError> {
        Ok(false)
    }
}

/// Downcasts an op to its concrete type.
pub fn downcast<T: Op>(op: &dyn Op) -> Option<&T> {
    (op as &dyn Any).downcast_ref::<T>()
}

/// Builds an [`Op`] from a node.
pub type OpBuilder = Arc<dyn Fn(&Node) -> Result<Box<dyn Op>, OpError> + Send + Sync>;

/// Maps `(domain, op_type)` to builders.
#[derive(Clone, Default)]
pub struct OpRegistry {
    builders: HashMap<(String, String), OpBuilder>,
}

impl OpRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Every op Onyx knows, one family module at a time.
    pub fn standard() -> Self {
        let mut r = Self::new();
        elementwise::register_all(&mut r);
        linalg::register_all(&mut r);
        conv::register_all(&mut r);
        nn::register_all(&mut r);
        norm::register_all(&mut r);
        shape::register_all(&mut r);
        movement::register_all(&mut r);
        indexing::register_all(&mut r);
        pad::register_all(&mut r);
        resize::register_all(&mut r);
        recurrent::register_all(&mut r);
        generate::register_all(&mut r);
        reduce::register_all(&mut r);
        control::register_all(&mut r);
        looping::register_all(&mut r);
        causal::register_all(&mut r);
        strings::register_all(&mut r);
        sequence::register_all(&mut r);
        attention::register_all(&mut r);
        quant::register_all(&mut r);
        scatter::register_all(&mut r);
        select::register_all(&mut r);
        einsum::register_all(&mut r);
        stats::register_all(&mut r);
        spatial::register_all(&mut r);
        signal::register_all(&mut r);
        vision::register_all(&mut r);
        domains::register_all(&mut r);
        microsoft::register_all(&mut r);
        r
    }

    /// Registers a builder for an op of the default domain.
    pub fn register(
        &mut self,
        op_type: &str,
        builder: impl Fn(&Node) -> Result<Box<dyn Op>, OpError> + Send + Sync + 'static,
    ) {
        self.register_in(DEFAULT_DOMAIN, op_type, builder);
    }

    /// Registers a builder for an op of any domain.
    pub fn register_in(
        &mut self,
        domain: &str,
        op_type: &str,
        builder: impl Fn(&Node) -> Result<Box<dyn Op>, OpError> + Send + Sync + 'static,
    ) {
        self.builders.insert((domain.into(), op_type.into()), Arc::new(builder));
    }

    /// Whether a builder exists.
    pub fn contains(&self, domain: &str, op_type: &str) -> bool {
        self.builders.contains_key(&(domain.to_string(), op_type.to_string()))
    }

    /// Builds the op for a node.
    ///
    /// # Errors
    /// [`OpError::UnknownOp`] when nothing is registered; the builder's error otherwise.
    pub fn build(&self, node: &Node) -> Result<Box<dyn Op>, OpError> {
        let builder =
            self.builders.get(&(node.domain.clone(), node.op_type.clone())).ok_or_else(|| {
                OpError::UnknownOp { domain: node.domain.clone(), op_type: node.op_type.clone() }
            })?;
        builder(node)
    }

    /// All registered `(domain, op_type)` pairs, sorted.
    pub fn ops(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self.builders.keys().cloned().collect();
        v.sort();
        v
    }
}

/// Checks the number of inputs against an inclusive range.
///
/// # Errors
/// [`OpError::InputCount`].
pub fn check_inputs(node: &Node, min: usize, max: usize) -> Result<(), OpError> {
    let n = node.inputs.len();
    if n < min || n > max {
        let expected = if min == max { min.to_string() } else { format!("{min} to {max}") };
        return Err(OpError::InputCount { expected, actual: n });
    }
    Ok(())
}
