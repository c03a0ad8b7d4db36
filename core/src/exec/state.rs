//! Executor state: buffers shared by reference count, values bound to them,
//! and the count of buffers a run allocated and has not freed.

use std::collections::HashMap;

use super::Error;
use crate::ep::{DeviceBuffer, DeviceId, ExecutionProvider, TensorArg};
use crate::graph::ValueId;
use crate::plan::{MemoryFigures, RunTrace};
use crate::tensor::Tensor;

use super::schedule::{Recorder, Schedule};
use super::value::{DeviceValue, Slot, Val};

pub(super) struct BufState {
    pub(super) buffer: DeviceBuffer,
    /// The provider (index) holding it.
    pub(super) provider: usize,
    pub(super) refs: u32,
    /// Allocated by this run (only those are ever freed by it).
    pub(super) owned: bool,
    /// Bound to a guarded value: never freed before the end of the run.
    pub(super) guarded: bool,
    /// The run's allocation and free events at which it was allocated and
    /// freed (`u32::MAX` while live): a recording's lifetimes for the arena plan.
    pub(super) born: u32,
    pub(super) freed: u32,
    /// For a view in an arena: the arena (index in [`Exec::arenas`]) and its byte range.
    pub(super) arena: Option<(usize, u64, u64)>,
}

/// An arena a graph run allocated, and the ranges of its views alive now.
pub(super) struct ArenaRun {
    pub(super) buffer: DeviceBuffer,
    pub(super) provider: usize,
    pub(super) live: Vec<(u64, u64)>,
    pub(super) freed: bool,
}

/// Where a run's time went, with [`RunOptions::launch_clock`](super::RunOptions::launch_clock).
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct HostCost {
    /// The executor's wall time, inputs bound to outputs taken.
    pub run_ms: f64,
    /// Time inside kernel launches.
    pub launch_ms: f64,
    /// Steps run, subgraphs' included.
    pub steps: u64,
}

impl HostCost {
    /// The executor's own time per step, kernels excluded, in microseconds.
    pub fn host_us_per_step(&self) -> f64 {
        (self.run_ms - self.launch_ms) * 1e3 / self.steps.max(1) as f64
    }
}

pub(super) struct Frame {
    pub(super) vals: Vec<Option<Val>>,
    /// Values known on the host from inference and folding: the same in
    /// every run with the graph's signature.
    pub(super) known: HashMap<ValueId, Tensor>,
    /// Host copies of device values read back during this run (shape
    /// arguments, conditions): data, not decided by the signature.
    pub(super) read: HashMap<ValueId, Tensor>,
    pub(super) trace: RunTrace,
    /// The schedule this run follows, until it strays from it.
    pub(super) schedule: Option<std::sync::Arc<Schedule>>,
    /// What the run decides, when it records a schedule.
    pub(super) record: Option<Recorder>,
    /// Per provider: this run's arena (an index in [`Exec::arenas`]).
    pub(super) arenas: Vec<Option<usize>>,
    /// The run left its schedule: an eager step's outputs were not the recorded ones.
    pub(super) strayed: bool,
    /// While following: every step allocated as recorded, so the schedule's
    /// memory figures are this run's.
    pub(super) exact: bool,
}

pub(super) struct Exec<'a> {
    pub(super) providers: &'a [&'a dyn ExecutionProvider],
    pub(super) bufs: Vec<BufState>,
    /// Buffers this run allocated and has not freed (those with `owned` set).
    pub(super) owned: usize,
    pub(super) release: bool,
    pub(super) releases: u64,
    /// Owned buffers with no references left, freed at the end of the run.
    pub(super) deferred: Vec<usize>,
    /// With a measured timeline: the bytes in use before the run, and the points so far.
    pub(super) measured: Option<(u64, Vec<u64>)>,
    /// The profiling clock, and the wall time of each top-level step so far.
    pub(super) clock: Option<fn() -> f64>,
    pub(super) step_ms: Vec<f64>,
    /// Allocations and frees so far (the clock of recorded lifetimes).
    pub(super) events: u32,
    /// Device values read back on the host so far (a step that reads one
    /// depends on data, not only on the signature).
    pub(super) reads: u32,
    /// Arenas of the graph runs so far.
    pub(super) arenas: Vec<ArenaRun>,
    /// The top-level schedule's arena bytes per provider.
    pub(super) planned_arenas: Vec<u64>,
    /// Times kernel launches when set (see [`RunOptions::launch_clock`](super::RunOptions)).
    pub(super) launch_clock: Option<fn() -> f64>,
    pub(super) cost: HostCost,
    /// Graph outputs written into graph inputs' buffers (see [`run_sharing`](super::run_sharing)).
    pub(super) shared: Shared,
}

/// The outputs a caller shares with inputs, and the buffers handed over so far.
#[derive(Default)]
pub(super) struct Shared {
    /// The top-level graph's address: subgraphs share nothing.
    pub(super) graph: usize,
    /// `(graph output, graph input)` value pairs.
    pub(super) pairs: Vec<(ValueId, ValueId)>,
    /// Buffer keys of the inputs outputs were written into.
    pub(super) keys: Vec<usize>,
}

pub(super) type Outputs = (Vec<Val>, MemoryFigures);

impl<'a> Exec<'a> {
    /// Bytes in use on all providers together.
    pub(super) fn in_use(&self) -> u64 {
        self.providers.iter().map(|p| p.memory_stats().in_use_bytes).sum()
    }

    /// Waits for every provider's queued work.
    pub(super) async fn synchronize(&self) -> Result<(), Error> {
        for (p, ep) in self.providers.iter().enumerate() {
            ep.synchronize().await.map_err(|e| self.provider_err(p, "synchronizing".into(), e))?;
        }
        Ok(())
    }

    /// Launches a prepared kernel on provider `p`, timing it when host cost is measured.
    pub(super) fn launch(
        &mut self,
        p: usize,
        kernel: crate::ep::KernelId,
        args: &crate::ep::Launch<'_>,
    ) -> Result<(), crate::ep::EpError> {
        let Some(now) = self.launch_clock else {
            return self.providers[p].launch(kernel, args);
        };
        let start = now();
        let r = self.providers[p].launch(kernel, args);
        self.cost.launch_ms += now() - start;
        r
    }

    /// Appends a point to the measured timeline, when one is kept.
    pub(super) fn measure(&mut self) {
        if self.measured.is_some() {
            let now = self.in_use();
            if let Some((base, points)) = &mut self.measured {
                points.push(now.saturating_sub(*base));
            }
        }
    }

    pub(super) fn provider_err(
        &self,
        p: usize,
        action: String,
        source: crate::ep::EpError,
    ) -> Error {
        Error::Provider { backend: self.providers[p].name(), action, source }
    }

    /// The provider index of a device, if one of ours holds it.
    pub(super) fn provider_of(&self, device: DeviceId) -> Option<usize> {
        self.providers.iter().position(|p| p.device() == device)
    }

    pub(super) fn adopt(&mut self, buffer: DeviceBuffer, provider: usize, owned: bool) -> usize {
        self.bufs.push(BufState {
            buffer,
            provider,
            refs: 0,
            owned,
            guarded: false,
            born: self.events,
            freed: u32::MAX,
            arena: None,
        });
        self.events += 1;
        self.bufs.len() - 1
    }

    /// Allocates this run's arena of `bytes` on provider `p`.
    pub(super) fn alloc_arena(&mut self, p: usize, bytes: u64) -> Result<usize, Error> {
        let buffer = self.providers[p]
            .allocate_arena(bytes)
            .map_err(|e| self.provider_err(p, format!("allocating a {bytes}-byte arena"), e))?;
        self.arenas.push(ArenaRun { buffer, provider: p, live: Vec::new(), freed: false });
        Ok(self.arenas.len() - 1)
    }

    /// Frees an arena whose views are all gone.
    pub(super) fn free_arena(&mut self, a: usize) -> Result<(), Error> {
        let arena = &mut self.arenas[a];
        if arena.freed {
            return Ok(());
        }
        arena.freed = true;
        let (buffer, p) = (arena.buffer, arena.provider);
        self.providers[p]
            .deallocate(buffer)
            .map_err(|e| self.provider_err(p, "freeing an arena".into(), e))
    }

    /// A view of `bytes` at `offset` in arena `a`, as a buffer this run owns;
    /// `None` when a live view overlaps that range (the run left its schedule).
    pub(super) fn arena_view(
        &mut self,
        a: usize,
        offset: u64,
        bytes: u64,
    ) -> Result<Option<usize>, Error> {
        let end = offset + bytes.max(1);
        let arena = &self.arenas[a];
        if arena.live.iter().any(|&(lo, hi)| lo < end && offset < hi) {
            return Ok(None);
        }
        let p = arena.provider;
        let buffer = self.providers[p]
            .view(arena.buffer, offset, bytes)
            .map_err(|e| self.provider_err(p, format!("placing {bytes} bytes in an arena"), e))?;
        self.arenas[a].live.push((offset, end));
        self.owned += 1;
        let key = self.adopt(buffer, p, true);
        self.bufs[key].arena = Some((a, offset, end));
        Ok(Some(key))
    }

    pub(super) fn alloc(
        &mut self,
        p: usize,
        bytes: u64,
        align: u32,
        what: &dyn Fn() -> String,
    ) -> Result<usize, Error> {
        // `what` is formatted only on failure: this runs for every kernel output.
        let buffer = self.providers[p].allocate(bytes, align).map_err(|e| {
            self.provider_err(p, format!("allocating {bytes} bytes for {}", what()), e)
        })?;
        self.owned += 1;
        Ok(self.adopt(buffer, p, true))
    }

    pub(super) fn dealloc(&mut self, key: usize) -> Result<(), Error> {
        let (buffer, p) = (self.bufs[key].buffer, self.bufs[key].provider);
        self.providers[p]
            .deallocate(buffer)
            .map_err(|e| self.provider_err(p, "freeing a buffer".into(), e))?;
        self.owned -= 1;
        let b = &mut self.bufs[key];
        b.owned = false;
        b.freed = self.events;
        self.events += 1;
        if let Some((a, lo, hi)) = b.arena {
            let live = &mut self.arenas[a].live;
            if let Some(i) = live.iter().position(|&r| r == (lo, hi)) {
                live.swap_remove(i);
            }
        }
        Ok(())
    }

    pub(super) fn hold(&mut self, val: &Val, guard: bool) {
        for s in val.slots() {
            self.bufs[s.key].refs += 1;
            self.bufs[s.key].guarded |= guard;
        }
    }

    /// Drops one reference per slot; frees buffers that reach zero (or, with
    /// release off, defers them to the end of the run). A buffer nobody refers
    /// to can be freed even if a guarded value once used it: guards keep
    /// values off the release lists and their buffers from in-place reuse, and
    /// a buffer outlives its last reference no longer (a subgraph output
    /// that viewed a captured buffer would otherwise pin it until the end).
    pub(super) fn drop_val(&mut self, val: &Val) -> Result<(), Error> {
        for s in val.slots() {
            let b = &mut self.bufs[s.key];
            b.refs -= 1;
            if b.refs == 0 && b.owned {
                if self.release {
                    self.dealloc(s.key)?;
                    self.releases += 1;
                } else {
                    self.deferred.push(s.key);
                }
            }
        }
        Ok(())
    }

    pub(super) fn free_deferred(&mut self) -> Result<(), Error> {
        for key in std::mem::take(&mut self.deferred) {
            if self.bufs[key].refs == 0 && self.bufs[key].owned {
                self.dealloc(key)?;
            }
        }
        Ok(())
    }

    pub(super) fn free_everything_owned(&mut self) {
        for key in 0..self.bufs.len() {
            if self.bufs[key].owned {
                // Best effort on the error path: the first error is the one reported.
                let _ = self.dealloc(key);
            }
        }
        // Arenas last: their views are gone now.
        for a in 0..self.arenas.len() {
            let _ = self.free_arena(a);
        }
    }

    pub(super) fn arg(&self, s: &Slot) -> TensorArg {
        TensorArg { buffer: self.bufs[s.key].buffer, dtype: s.dtype, shape: s.shape.clone() }
    }

    pub(super) fn device_value(&self, v: &Val) -> DeviceValue {
        match v {
            Val::Tensor(s) => DeviceValue::Tensor(self.arg(s)),
            Val::Seq(d, items) => {
                DeviceValue::Sequence(*d, items.iter().map(|s| self.arg(s)).collect())
            }
            Val::Empty(dtype, sequence) => {
                DeviceValue::Empty { dtype: *dtype, sequence: *sequence }
            }
            Val::Host(t) => DeviceValue::Host(t.clone()),
        }
    }
}
