//! Compilation of graphs for a provider, and the executor that runs them.

mod compile;
mod run;
mod sequence;
mod state;
mod widen;

pub use compile::{
    Action, CompileOptions, CompiledGraph, ONYX_DOMAIN, Scope, Step, compile, declared_fact,
};
pub use run::{DeviceValue, RunOptions, RunResult, run};

use crate::ops::control::If;
use crate::ops::sequence::SequenceOp;
use crate::ops::{Op, downcast};

/// Whether the executor runs this op itself (views, control flow, sequences), needing no kernel.
pub fn handled_by_executor(op: &dyn Op) -> bool {
    op.view_of().is_some() || downcast::<If>(op).is_some() || downcast::<SequenceOp>(op).is_some()
}
