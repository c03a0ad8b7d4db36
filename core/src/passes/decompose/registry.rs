//! The decompositions by op type: a registry of functions, each writing one
//! op as standard ops, looked up by the op's Rust type.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::OnceLock;

use super::builder::Builder;
use super::{attention, loss, quant, rotary, simple};
use crate::error::OpError;
use crate::graph::Node;
use crate::ops::attention::{Attention, RotaryEmbedding, Swish};
use crate::ops::quant::{DequantizeLinear, DynamicQuantizeLinear, QuantizeLinear};
use crate::ops::scatter::{DepthSpace, EyeLike, OneHot, Trilu};
use crate::ops::spatial::LpPool;
use crate::ops::stats::{Loss, LpNorm};
use crate::ops::{Fact, Op, downcast};

/// A decomposition of ops of type `T`: writes the node as standard ops.
///
/// # Errors
/// [`OpError`] when it cannot apply to these input facts (the node then
/// falls back to another provider).
pub type Decompose<T> = fn(&T, &Node, &[Option<Fact>], &mut Builder) -> Result<(), OpError>;

type Erased =
    Box<dyn Fn(&dyn Op, &Node, &[Option<Fact>], &mut Builder) -> Result<(), OpError> + Send + Sync>;

/// Decompositions by op type.
#[derive(Default)]
pub struct Decompositions {
    by_type: HashMap<TypeId, Erased>,
}

impl Decompositions {
    /// Every decomposition Onyx has.
    pub fn standard() -> Self {
        let mut d = Decompositions::default();
        d.register::<Attention>(attention::decompose);
        d.register::<RotaryEmbedding>(rotary::decompose);
        d.register::<Swish>(simple::swish);
        d.register::<QuantizeLinear>(quant::quantize);
        d.register::<DequantizeLinear>(quant::dequantize);
        d.register::<DynamicQuantizeLinear>(quant::dynamic_quantize);
        d.register::<Trilu>(simple::trilu);
        d.register::<OneHot>(simple::one_hot);
        d.register::<EyeLike>(simple::eye_like);
        d.register::<DepthSpace>(simple::depth_space);
        d.register::<LpPool>(simple::lp_pool);
        d.register::<LpNorm>(simple::lp_norm);
        d.register::<Loss>(loss::decompose);
        d
    }

    /// Registers the decomposition of ops of type `T`.
    pub fn register<T: Op>(&mut self, f: Decompose<T>) {
        let erased: Erased = Box::new(move |op, node, inputs, b| match downcast::<T>(op) {
            Some(op) => f(op, node, inputs, b),
            None => Err(OpError::Invalid(format!("{} is not the registered type", node.op_type))),
        });
        self.by_type.insert(TypeId::of::<T>(), erased);
    }

    /// Writes `node` (whose parsed op is `op`) as standard ops into `b`;
    /// `Ok(false)` when its op has no decomposition.
    ///
    /// # Errors
    /// [`OpError`] when the decomposition cannot apply to these input facts.
    pub fn decompose(
        &self,
        op: &dyn Op,
        node: &Node,
        inputs: &[Option<Fact>],
        b: &mut Builder,
    ) -> Result<bool, OpError> {
        match self.by_type.get(&(op as &dyn Any).type_id()) {
            Some(f) => f(op, node, inputs, b).map(|()| true),
            None => Ok(false),
        }
    }
}

/// The standard decompositions, built once.
pub fn decompositions() -> &'static Decompositions {
    static STANDARD: OnceLock<Decompositions> = OnceLock::new();
    STANDARD.get_or_init(Decompositions::standard)
}
