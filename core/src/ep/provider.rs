//! The execution-provider trait every backend implements, and what it is
//! given: a node to prepare a kernel for, the tensors of one launch.

use super::error::EpError;
use super::types::{
    BoxFuture, CaptureId, DeviceBuffer, DeviceId, Fusions, KernelId, MaybeSendSync, MemoryStats,
    TensorArg,
};
use crate::dtype::DType;
use crate::graph::Node;
use crate::ops::Op;
use crate::tensor::Tensor;

/// The tensors of one kernel launch.
#[derive(Clone, Copy)]
pub struct Launch<'a> {
    /// Device inputs by slot; `None` for absent optional inputs and for value inputs.
    pub inputs: &'a [Option<TensorArg>],
    /// Device outputs by slot; `None` for outputs the model does not use.
    pub outputs: &'a [Option<TensorArg>],
    /// Host copies of the op's value inputs (shape arguments such as Slice's
    /// `starts`), by slot. A GPU kernel reads them here instead of from device memory.
    pub values: &'a [Option<Tensor>],
}

/// What a backend needs to prepare a kernel for one node.
pub struct KernelSpec<'a> {
    /// The node (name, op type, domain, opset, raw attributes).
    pub node: &'a Node,
    /// The parsed op, shared by all backends; read its parameters with [`crate::ops::downcast`].
    pub op: &'a dyn Op,
    /// Input dtypes; `None` for absent optional inputs.
    pub input_dtypes: &'a [Option<DType>],
    /// Output dtypes; `None` for outputs the model does not use.
    pub output_dtypes: &'a [Option<DType>],
    /// The contents of inputs known when the model is compiled (initializers and
    /// folded constants), by slot; `None` for the others. A kernel may derive data
    /// from them once (a dequantized weight) instead of at every launch. They are
    /// the model's values: their dtype is the model's even where `input_dtypes`
    /// were widened to f32.
    pub input_values: &'a [Option<Tensor>],
}

/// A backend: it owns device memory and runs kernels on it.
///
/// Work may be queued: `upload`, `launch`, `copy` and `deallocate` are
/// ordered on the provider's queue (CUDA stream order, the wgpu command
/// encoder), so a buffer released right after its last consumer was launched
/// is safe to reuse for the next launch. Results become visible to the host
/// through [`download`](Self::download), which is asynchronous so that WebGPU's
/// `mapAsync` fits; native callers block on it.
pub trait ExecutionProvider: MaybeSendSync {
    /// A short name for messages and reports (`cpu`, `wgpu:0`).
    fn name(&self) -> String;

    /// The device this provider allocates on.
    fn device(&self) -> DeviceId;

    /// Allocates `size` bytes aligned to `align`.
    ///
    /// # Errors
    /// [`EpError::OutOfMemory`] when the device or the provider's limit is exhausted.
    fn allocate(&self, size: u64, align: u32) -> Result<DeviceBuffer, EpError>;

    /// Returns a buffer's memory. The only way memory goes back.
    ///
    /// # Errors
    /// [`EpError::UnknownBuffer`] for a handle this provider does not hold
    /// (never allocated here, or already freed).
    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError>;

    /// The alignment of arena views on this provider, or `None` when it has
    /// no arenas (the default): the executor then allocates every buffer.
    fn arena_alignment(&self) -> Option<u64> {
        None
    }

    /// Allocates an arena of `size` bytes: one block in which a run's
    /// intermediates are placed at offsets planned once per input signature
    /// (see [`view`](Self::view)). Its bytes count in
    /// [`MemoryStats::arena_bytes`], not in use; free it with
    /// [`deallocate`](Self::deallocate) once its views are gone.
    ///
    /// # Errors
    /// [`EpError::OutOfMemory`], or [`EpError::Unsupported`] where the
    /// provider has no arenas.
    fn allocate_arena(&self, size: u64) -> Result<DeviceBuffer, EpError> {
        let _ = size;
        Err(EpError::Unsupported(format!("{} has no arenas", self.name())))
    }

    /// A buffer of `size` bytes at `offset` in `arena` (aligned to
    /// [`arena_alignment`](Self::arena_alignment)). It counts in use until
    /// [`deallocate`](Self::deallocate)d, like an allocation, but its memory
    /// is the arena's.
    ///
    /// # Errors
    /// [`EpError::UnknownBuffer`] for an unknown arena, [`EpError::OutOfBounds`]
    /// for a range past its end.
    fn view(&self, arena: DeviceBuffer, offset: u64, size: u64) -> Result<DeviceBuffer, EpError> {
        let _ = (arena, offset, size);
        Err(EpError::Unsupported(format!("{} has no arenas", self.name())))
    }

    /// Copies host bytes into the start of a buffer.
    ///
    /// # Errors
    /// [`EpError::UnknownBuffer`], or [`EpError::OutOfBounds`] when `data` is longer than the buffer.
    fn upload(&self, buffer: DeviceBuffer, data: &[u8]) -> Result<(), EpError>;

    /// Reads the first `len` bytes of a buffer back to the host, after all queued work.
    fn download(&self, buffer: DeviceBuffer, len: usize)
    -> BoxFuture<'_, Result<Vec<u8>, EpError>>;

    /// Reads `len` bytes from `offset` of a buffer back to the host, after
    /// all queued work: one row of a large output (a prompt's last logits).
    /// By default the first `offset + len` bytes are read and the front
    /// dropped; providers override it to move only the range.
    fn download_range(
        &self,
        buffer: DeviceBuffer,
        offset: u64,
        len: usize,
    ) -> BoxFuture<'_, Result<Vec<u8>, EpError>> {
        Box::pin(async move {
            let start = usize::try_from(offset)
                .ok()
                .filter(|s| s.checked_add(len).is_some())
                .ok_or(EpError::OutOfBounds { offset, len: len as u64, size: buffer.size })?;
            let mut bytes = self.download(buffer, start + len).await?;
            bytes.drain(..start);
            Ok(bytes)
        })
    }

    /// Copies `len` bytes between two buffers of this provider, in queue order.
    ///
    /// # Errors
    /// [`EpError::UnknownBuffer`] or [`EpError::OutOfBounds`].
    fn copy(&self, src: DeviceBuffer, dst: DeviceBuffer, len: u64) -> Result<(), EpError>;

    /// Whether this provider has any kernel for `domain::op_type` (dtypes aside).
    fn supports_op(&self, domain: &str, op_type: &str) -> bool;

    /// The fused forms of op chains this provider runs better than the
    /// chains. By default the two every provider gains from (a Conv with a
    /// BatchNormalization folded into its weights is a plain Conv; `Gelu`
    /// is one elementwise pass), and `FusedConv` and `GatedMatMulNBits`
    /// where the provider has them.
    fn fusions(&self) -> Fusions {
        Fusions {
            conv_batch_norm: true,
            gelu: true,
            conv_activation: self.supports_op(crate::graph::MICROSOFT_DOMAIN, "FusedConv"),
            gated_matmul_nbits: self.supports_op(crate::graph::ONYX_DOMAIN, "GatedMatMulNBits"),
            ..Fusions::default()
        }
    }

    /// Prepares (compiles, specializes) a kernel for a node.
    ///
    /// # Errors
    /// [`EpError::Unsupported`] when the op or its dtypes are not implemented
    /// here; the planner then places the node on another provider.
    fn prepare(&self, spec: &KernelSpec<'_>) -> Result<KernelId, EpError>;

    /// Queues a prepared kernel. Output buffers are allocated by the caller and
    /// sized from the op's shape inference; absent optional slots are `None`.
    ///
    /// # Errors
    /// Whatever the kernel reports (bad index values, device errors).
    fn launch(&self, kernel: KernelId, args: &Launch<'_>) -> Result<(), EpError>;

    /// Whether a prepared kernel may write output 0 over an input it reads (in place).
    /// GPUs cannot bind one buffer as both read-only and writable input, so their
    /// kernels opt in one by one.
    fn supports_in_place(&self, _kernel: KernelId) -> bool {
        true
    }

    /// Waits until all queued work has finished.
    fn synchronize(&self) -> BoxFuture<'_, Result<(), EpError>>;

    /// Memory figures from the provider's own table.
    fn memory_stats(&self) -> MemoryStats;

    /// Whether this provider can record queued work and replay it
    /// ([`begin_capture`](Self::begin_capture)). False by default.
    fn supports_capture(&self) -> bool {
        false
    }

    /// Starts recording: until [`end_capture`](Self::end_capture) or
    /// [`abort_capture`](Self::abort_capture), the work this thread queues
    /// (allocations, uploads, launches, copies, frees) is recorded instead of
    /// run, and other threads' calls wait. Reading back
    /// ([`download`](Self::download), [`synchronize`](Self::synchronize))
    /// fails while recording, since nothing has run.
    ///
    /// # Errors
    /// [`EpError::Unsupported`] where the provider cannot record.
    fn begin_capture(&self) -> Result<(), EpError> {
        Err(EpError::Unsupported(format!("{} cannot record runs", self.name())))
    }

    /// Ends a recording. `outputs` are buffers allocated while recording that
    /// the recorded work leaves to the caller: their handles are retired here
    /// (the memory belongs to the recording), and every
    /// [`replay`](Self::replay) hands out new handles for them, in this order.
    ///
    /// # Errors
    /// [`EpError::UnknownBuffer`] for an output not allocated while recording,
    /// or the device's failure to build the recording (which is then abandoned).
    fn end_capture(&self, outputs: &[DeviceBuffer]) -> Result<CaptureId, EpError> {
        let _ = outputs;
        Err(EpError::Unsupported(format!("{} cannot record runs", self.name())))
    }

    /// Abandons the recording in progress, if any: none of it will run.
    fn abort_capture(&self) {}

    /// Runs a recording once more, and returns fresh handles to its outputs.
    /// The caller reads them and must deallocate them before the next replay
    /// of the same recording.
    ///
    /// # Errors
    /// [`EpError::Unsupported`] while the previous replay's outputs are still
    /// held, and device failures.
    fn replay(&self, capture: CaptureId) -> Result<Vec<DeviceBuffer>, EpError> {
        let _ = capture;
        Err(EpError::Unsupported(format!("{} cannot record runs", self.name())))
    }

    /// Frees a recording and the memory it holds.
    ///
    /// # Errors
    /// An unknown id, or a device failure.
    fn free_capture(&self, capture: CaptureId) -> Result<(), EpError> {
        let _ = capture;
        Err(EpError::Unsupported(format!("{} cannot record runs", self.name())))
    }

    /// Restarts peak tracking from the bytes in use now.
    fn reset_peak(&self);
}

impl<'a> Launch<'a> {
    /// Device input `i`.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when the input is absent.
    pub fn input(&self, i: usize) -> Result<&'a TensorArg, EpError> {
        self.inputs
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| EpError::Kernel(format!("input {i} is required")))
    }

    /// Device output `o`.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when the output is not requested.
    pub fn output(&self, o: usize) -> Result<&'a TensorArg, EpError> {
        self.outputs
            .get(o)
            .and_then(Option::as_ref)
            .ok_or_else(|| EpError::Kernel(format!("output {o} is not requested")))
    }

    /// Whether device input `i` was given.
    pub fn has_input(&self, i: usize) -> bool {
        self.inputs.get(i).is_some_and(Option::is_some)
    }

    /// Whether output `o` is requested.
    pub fn has_output(&self, o: usize) -> bool {
        self.outputs.get(o).is_some_and(Option::is_some)
    }

    /// Whether value input `i` was given.
    pub fn has_value(&self, i: usize) -> bool {
        self.values.get(i).is_some_and(Option::is_some)
    }

    fn value(&self, i: usize) -> Result<&'a Tensor, EpError> {
        self.values
            .get(i)
            .and_then(Option::as_ref)
            .ok_or_else(|| EpError::Kernel(format!("value input {i} missing")))
    }

    /// Value input `i` (a shape argument) as i64s.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when it is absent or not numeric.
    pub fn ints(&self, i: usize) -> Result<Vec<i64>, EpError> {
        self.value(i)?.to_i64_vec().map_err(|e| EpError::Kernel(e.to_string()))
    }

    /// Value input `i` as f64s.
    ///
    /// # Errors
    /// [`EpError::Kernel`] when it is absent or not numeric.
    pub fn floats(&self, i: usize) -> Result<Vec<f64>, EpError> {
        self.value(i)?.to_f64_vec().map_err(|e| EpError::Kernel(e.to_string()))
    }

    /// Whether output 0 shares its buffer with input `i` (in place).
    pub fn aliased(&self, i: usize) -> bool {
        match (
            self.inputs.get(i).and_then(Option::as_ref),
            self.outputs.first().and_then(Option::as_ref),
        ) {
            (Some(a), Some(b)) => a.buffer == b.buffer,
            _ => false,
        }
    }
}

impl<'a> KernelSpec<'a> {
    /// The dtype of input `i`.
    ///
    /// # Errors
    /// [`EpError::Unsupported`] when the input is absent.
    pub fn input_dtype(&self, i: usize) -> Result<DType, EpError> {
        self.input_dtypes
            .get(i)
            .copied()
            .flatten()
            .ok_or_else(|| EpError::Unsupported(format!("input {i} has no dtype")))
    }

    /// The dtype of output `o`.
    ///
    /// # Errors
    /// [`EpError::Unsupported`] when the output is not requested.
    pub fn output_dtype(&self, o: usize) -> Result<DType, EpError> {
        self.output_dtypes
            .get(o)
            .copied()
            .flatten()
            .ok_or_else(|| EpError::Unsupported(format!("output {o} has no dtype")))
    }

    /// The parsed op as its concrete type.
    ///
    /// # Errors
    /// [`EpError::Unsupported`] when the op is of another type.
    pub fn op_as<T: Op>(&self) -> Result<&'a T, EpError> {
        crate::ops::downcast::<T>(self.op).ok_or_else(|| {
            EpError::Unsupported(format!("unexpected op type for {}", self.node.op_type))
        })
    }
}
