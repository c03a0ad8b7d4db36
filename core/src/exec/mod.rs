//! Compilation of graphs for a provider, and the executor that runs them.

mod compile;
mod run;

pub use compile::{Action, CompileOptions, CompiledGraph, Step, compile, declared_fact};
pub use run::{DeviceValue, RunOptions, RunResult, run};
