//! Compilation of graphs for a provider, and the executor that runs them.

mod compile;
mod error;
mod fold;
mod follow;
mod host;
mod looping;
mod on_host;
mod program;
mod record;
mod replay;
mod run;
mod schedule;
mod sequence;
mod slices;
mod state;
mod step;
mod value;

pub use compile::{CompileOptions, ONYX_DOMAIN, Scope, compile, declared_fact};
pub use error::{Error, Result};
pub use host::{HostRun, StepPoint, run_on_host};
pub use program::{Action, CompiledGraph, Step};
pub use replay::{Replays, run_bound_replayed, run_on_host_replayed};
pub use run::{RunOptions, RunResult, run, run_sharing};
pub use schedule::{DEFAULT_SCHEDULES, Schedule, Schedules};
pub use state::HostCost;
pub use value::DeviceValue;

use crate::ops::control::If;
use crate::ops::looping::{Loop, Scan, SequenceMap};
use crate::ops::sequence::SequenceOp;
use crate::ops::{Op, downcast};

/// Whether the executor runs this op itself (views, control flow, sequences), needing no kernel.
pub fn handled_by_executor(op: &dyn Op) -> bool {
    op.view_of().is_some()
        || downcast::<If>(op).is_some()
        || downcast::<Loop>(op).is_some()
        || downcast::<Scan>(op).is_some()
        || downcast::<SequenceMap>(op).is_some()
        || downcast::<SequenceOp>(op).is_some()
}
