//! Recording runs as CUDA graphs (the provider's `begin_capture` …
//! `replay`). While one thread records, the provider's stream is in
//! relaxed-mode stream capture: every allocation, free, copy and launch that
//! thread queues becomes a graph node, and other threads wait at the
//! [`Gate`] so nothing of theirs lands in the graph. Allocations become graph
//! memory nodes: the driver maps their memory when the graph is instantiated
//! and reuses it within the graph for allocations whose lifetimes (from the
//! plan's frees) do not overlap, so a replay needs about the plan's live set,
//! not the sum of all intermediates. The outputs are the graph's allocations
//! that it does not free: each replay hands out new handles for them, and
//! they must be freed before the graph may run again.

use std::ffi::c_void;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::thread::ThreadId;

use cudarc::driver::{CudaGraph, result as drv, sys as drv_sys};
use onyx_core::ep::EpError;

use crate::gpu::device_err;

/// Keeps other threads' work off the stream while one thread records.
///
/// Every provider call that queues work on the stream (or reads its state)
/// holds a [`Pass`] from start to end. [`Gate::close`] makes a thread the
/// recording one only once no other thread holds a pass, and no thread gets
/// a new pass until [`Gate::open`], so no call of another thread can be half
/// done on the stream while it is in stream capture (where its allocations,
/// frees and launches would land in the recording). The recording thread's
/// own calls pass freely. A thread waiting to record keeps new passes from
/// starting, so eight busy threads cannot starve it; a thread that already
/// holds a pass gets another without waiting, so nothing deadlocks on itself.
#[derive(Default)]
pub(crate) struct Gate {
    state: Mutex<Turns>,
    turn: Condvar,
}

#[derive(Default)]
struct Turns {
    /// The thread recording now.
    recorder: Option<ThreadId>,
    /// Threads inside a provider call, once per pass they hold.
    inside: Vec<ThreadId>,
    /// Threads waiting in [`Gate::close`].
    waiting: usize,
}

/// A provider call in progress on a thread other than the recording one.
pub(crate) struct Pass<'g>(Option<&'g Gate>);

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        let Some(gate) = self.0 else { return };
        let me = std::thread::current().id();
        let mut t = gate.turns();
        if let Some(i) = t.inside.iter().position(|&id| id == me) {
            t.inside.swap_remove(i);
        }
        if t.inside.is_empty() {
            gate.turn.notify_all();
        }
    }
}

impl Gate {
    fn turns(&self) -> MutexGuard<'_, Turns> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'a>(&self, t: MutexGuard<'a, Turns>) -> MutexGuard<'a, Turns> {
        self.turn.wait(t).unwrap_or_else(|p| p.into_inner())
    }

    /// Enters a provider call: at once on the recording thread, otherwise
    /// once no thread records or waits to. Hold the pass until the call's
    /// work is queued.
    pub fn pass(&self) -> Pass<'_> {
        let me = std::thread::current().id();
        let mut t = self.turns();
        if t.recorder == Some(me) {
            return Pass(None);
        }
        if !t.inside.contains(&me) {
            while t.recorder.is_some() || t.waiting > 0 {
                t = self.wait(t);
            }
        }
        t.inside.push(me);
        Pass(Some(self))
    }

    /// Whether this thread is recording.
    pub fn mine(&self) -> bool {
        self.turns().recorder == Some(std::thread::current().id())
    }

    /// Makes this thread the recording one, once no other thread records or
    /// is inside a provider call.
    ///
    /// # Errors
    /// [`EpError::Unsupported`] when this thread is already recording, or is
    /// inside a provider call (it would wait for itself).
    pub fn close(&self) -> Result<(), EpError> {
        let me = std::thread::current().id();
        let mut t = self.turns();
        if t.recorder == Some(me) {
            return Err(EpError::Unsupported("already recording on this thread".into()));
        }
        if t.inside.contains(&me) {
            return Err(EpError::Unsupported("recording from inside a provider call".into()));
        }
        t.waiting += 1;
        while t.recorder.is_some() || !t.inside.is_empty() {
            t = self.wait(t);
        }
        t.waiting -= 1;
        t.recorder = Some(me);
        Ok(())
    }

    /// Ends this thread's recording and wakes the threads waiting for it.
    pub fn open(&self) {
        let mut t = self.turns();
        if t.recorder == Some(std::thread::current().id()) {
            t.recorder = None;
        }
        self.turn.notify_all();
    }
}

/// Page-locked host memory holding bytes uploaded while recording: the
/// graph's copy node reads them at every replay.
pub(crate) struct Pinned(*mut c_void);

// SAFETY: the memory is plain bytes owned by this value; nothing else frees it.
unsafe impl Send for Pinned {}
// SAFETY: as above; it is only read (by the device) after being written once.
unsafe impl Sync for Pinned {}

impl Pinned {
    /// A page-locked copy of `data`.
    pub fn copy_of(data: &[u8]) -> Result<Self, EpError> {
        // SAFETY: a plain host allocation of `data.len()` bytes (flags 0: portable to this context).
        let ptr = unsafe { drv::malloc_host(data.len(), 0) }
            .map_err(device_err("allocating page-locked memory"))?;
        // SAFETY: `ptr` is a fresh allocation of `data.len()` bytes that no one else sees yet.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr.cast::<u8>(), data.len()) };
        Ok(Pinned(ptr))
    }

    /// Queues a copy of the first `len` bytes to `dst` on `stream` (recorded as a graph node).
    ///
    /// # Safety
    /// `dst` must hold `len` bytes, and `len` must not exceed the copied data's length.
    pub unsafe fn copy_to(
        &self,
        dst: u64,
        len: usize,
        stream: drv_sys::CUstream,
    ) -> Result<(), EpError> {
        // SAFETY: the caller guarantees the sizes; the source is page-locked and lives
        // as long as the recording that reads it.
        unsafe { drv_sys::cuMemcpyHtoDAsync_v2(dst, self.0, len, stream) }
            .result()
            .map_err(device_err("recording a copy to the device"))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        // SAFETY: allocated by `malloc_host` and freed once; owners drop it only
        // after the device work reading it has finished.
        let _ = unsafe { drv::free_host(self.0) };
    }
}

/// The recording in progress.
#[derive(Default)]
pub(crate) struct Capture {
    /// Buffer ids allocated while recording.
    pub allocated: std::collections::HashSet<u64>,
    /// Bytes uploaded while recording.
    pub staged: Vec<Pinned>,
}

/// An instantiated graph.
pub(crate) struct Graph(pub CudaGraph);

// SAFETY: graph objects are not internally synchronized; the provider only
// touches a `Graph` while holding its state mutex, so calls are serialized.
unsafe impl Send for Graph {}

/// A finished recording.
pub(crate) struct Recorded {
    pub graph: Graph,
    /// Address and size of each output, in order.
    pub outputs: Vec<(u64, u64)>,
    /// Buffer ids the last replay handed out.
    pub handed: Vec<u64>,
    /// Kept until the graph is gone: its copy nodes read them.
    pub _staged: Vec<Pinned>,
}
