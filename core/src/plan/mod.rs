//! The release planner: execution order, last use of every value, the release
//! list of every step, guards, views and in-place candidates.
//!
//! Buffers are shared by *alias groups*: a view (Reshape, Squeeze, …) joins its
//! input's group statically, and an in-place output joins the dying input's
//! group when the byte sizes turn out equal at run time. A group's buffer is
//! returned when the last member's last use has run, unless a member is
//! guarded. Guards and in-place reuse read the same [`Plan::guards`], so the
//! two can never disagree about what must survive.

mod arena;
mod liveness;
mod memory;

pub use arena::{Lifetime, greedy_by_size, peak_live};
pub use liveness::{Guard, NodeTraits, Plan};
pub use memory::{MemoryFigures, ProviderFigures, RunTrace, TimelinePoint};

#[cfg(test)]
mod tests;
